"""debian/: what the Debian packages ship, checked without building them (the build, the install
and the upgrade are tests/integration/test_debian_package.py)."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from twisted.trial import unittest

import deaddrop
from deaddrop.admin import _instance_commands, instances
from deaddrop.tap import argv_from_environment
from tests._debian import environment_file
from tests.test_deploy import exposure

ROOT = Path(__file__).resolve().parents[1]
DEBIAN = ROOT / "debian"
# Everything from the sandbox's first line to [Install]: the same in every unit that runs DeadDrop.
_SANDBOX = re.compile(r"^# SIGHUP reloads.*?(?=^\[Install\])", re.M | re.S)


def exposure_of(unit_text: str, name: str) -> float:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write(unit_text)
        return exposure(path)


class UnitTests(unittest.TestCase):
    def test_the_package_units_keep_the_hardened_sandbox_and_its_rating(self):
        single = (DEBIAN / "deaddrop.service").read_text()
        template = (DEBIAN / "deaddrop@.service").read_text()
        sandbox = _SANDBOX.search(single).group(0)
        self.assertEqual(_SANDBOX.search(template).group(0),
                         sandbox.replace("ReadWritePaths=/var/lib/deaddrop", "ReadWritePaths=/var/lib/deaddrop/%i"))
        levels = {exposure_of(single, "deaddrop.service"), exposure_of(template, "deaddrop@alpha.service")}
        self.assertEqual(len(levels), 1, levels)
        [level] = levels
        self.assertLessEqual(level, 2.0)
        for stated_in in (DEBIAN / "deaddrop.service", ROOT / "docs" / "deploy" / "package.md"):
            self.assertEqual(set(re.findall(r"(\d\.\d)\*{0,2} OK", stated_in.read_text())), {f"{level:.1f}"},
                             stated_in)

    def test_each_instance_runs_as_its_own_user_in_its_own_folder_with_its_own_options(self):
        unit = (DEBIAN / "deaddrop@.service").read_text()
        values = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
        self.assertEqual((values["User"], values["Group"], values["WorkingDirectory"], values["EnvironmentFile"],
                          values["ReadWritePaths"]),
                         ("deaddrop-%i", "deaddrop-%i", "/var/lib/deaddrop/%i", "/etc/deaddrop/%i.conf",
                          "/var/lib/deaddrop/%i"))
        self.assertIn("DEADDROP_DATA_DIR=/var/lib/deaddrop/%i", values["Environment"])
        instance = instances.instance("alpha")
        self.assertEqual((instance.user, instance.data_dir, instance.conf),
                         ("deaddrop-alpha", "/var/lib/deaddrop/alpha", "/etc/deaddrop/alpha.conf"))

    def test_both_units_run_the_packaged_tac_with_the_options_file(self):
        for name in ("deaddrop.service", "deaddrop@.service"):
            text = (DEBIAN / name).read_text()
            exec_start = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
            self.assertEqual(exec_start, "/usr/lib/deaddrop/bin/twistd --nodaemon --pidfile= --logfile=- "
                                         "--python=/usr/share/deaddrop/deaddrop.tac")
        self.assertIn("deaddrop.tac usr/share/deaddrop/", (DEBIAN / "deaddrop.install").read_text())


class OptionsFileTests(unittest.TestCase):
    def _parses(self, text: str) -> None:
        """Every DEADDROP_* line names an option of ``twistd deaddrop`` (a misspelt one stops the server)."""
        env = environment_file(text)
        self.assertNotIn("DEADDROP_DATA_DIR", env, "the data dir is the unit's")
        argv = argv_from_environment(env)  # refuses a DEADDROP_* name that is no option
        self.assertEqual(len(argv), len(env), argv)
        self.assertTrue(all(a.startswith("--") for a in argv), argv)

    def test_the_packaged_options_file(self):
        text = (DEBIAN / "deaddrop.conf").read_text()
        self._parses(text)
        self.assertIn("DEADDROP_SUBMISSION_KEY=/etc/deaddrop/submission-public.asc", text)

    def test_an_instance_s_options_file(self):
        text = _instance_commands.options_file(instances.instance("alpha"), "tcp:8081:interface=127.0.0.1",
                                               "tcp:8444:interface=10.8.0.1")
        self._parses(text)
        self.assertIn("DEADDROP_SUBMISSION_KEY=/etc/deaddrop/alpha/submission-public.asc", text)


class ReleaseTests(unittest.TestCase):
    def test_the_changelog_is_at_the_package_s_version(self):
        top = re.match(r"deaddrop \(([^)]+)\) (\w+);", (DEBIAN / "changelog").read_text())
        self.assertEqual(top.group(1).split("-")[0], deaddrop.__version__)

    def test_unattended_upgrades_matches_what_publish_apt_publishes(self):
        published = (ROOT / "scripts" / "publish-apt").read_text()
        origin = re.search(r'^ORIGIN = LABEL = "([^"]+)"', published, re.M).group(1)
        example = (DEBIAN / "examples" / "52deaddrop-unattended-upgrades").read_text()
        self.assertIn(f'"origin={origin},label={origin},codename=${{distro_codename}}";', example)
        pins = (DEBIAN / "examples" / "deaddrop.pref").read_text()
        self.assertEqual(set(re.findall(r"^Pin: release o=([^,]+),l=(\S+)$", pins, re.M)), {(origin, origin)})
        packages = set(re.findall(r"^Package: (\S+)$", (DEBIAN / "control").read_text(), re.M))
        pinned = [set(line.split()) for line in re.findall(r"^Package: (.+)$", pins, re.M)]
        self.assertEqual(pinned, [{"*"}, packages])
