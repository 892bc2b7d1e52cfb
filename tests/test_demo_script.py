"""scripts/demo's install part: a second start runs neither apt nor pip when nothing changed.

Run on a copy of the script in a scratch checkout whose .venv's pip, and apt-get and sudo on
PATH, only record how they were called (the real ones would install); dpkg-query is the real one:
apt is asked for exactly the packages this machine lacks, and not at all when it lacks none (CI,
after .ci/run)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from twisted.trial import unittest

from tests._demo import scratch_checkout

ROOT = Path(__file__).resolve().parents[1]
RECORDER = "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> \"$CALLS\"\n"
PIP_INSTALLS = "touch \"$(dirname \"$0\")/twistd\" && chmod +x \"$(dirname \"$0\")/twistd\"\n"  # as pip would


class DemoInstallTests(unittest.TestCase):
    def setUp(self) -> None:
        self.checkout = scratch_checkout(Path(self.mktemp()).resolve())
        bin_dir = self.checkout / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        os.symlink(sys.executable, bin_dir / "python")
        self.shims = self.checkout / "shims"
        self.shims.mkdir()
        for path in (bin_dir / "pip", self.shims / "apt-get", self.shims / "sudo"):
            path.write_text(RECORDER + (PIP_INSTALLS if path.name == "pip" else ""))
            path.chmod(0o755)
        self.calls = self.checkout / "calls.log"

    def demo(self) -> list[str]:
        self.calls.write_text("")
        env = dict(os.environ, PATH=f"{self.shims}:/usr/bin:/bin", CALLS=str(self.calls), DEMO_INSTALL_ONLY="1")
        proc = subprocess.run(["bash", str(self.checkout / "scripts/demo")], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.output = proc.stdout
        return [line.removeprefix("sudo ") for line in self.calls.read_text().splitlines()]

    def missing_packages(self) -> list[str]:
        listed = _packages(ROOT / "scripts/demo")
        if shutil.which("npm", path="/usr/bin:/bin") is None:
            listed.append("npm")
        return [p for p in listed if "install ok installed" not in subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout]

    def test_ci_and_the_demo_install_the_same_packages_and_npm_only_where_none_is(self):
        self.assertEqual(_packages(ROOT / ".ci/run"), _packages(ROOT / "scripts/demo"))
        for script in (".ci/run", "scripts/demo"):
            # Debian's npm conflicts with NodeSource's nodejs (which carries an npm): asking apt for
            # it there fails the whole install.
            self.assertIn("command -v npm >/dev/null || PACKAGES+=(npm)", (ROOT / script).read_text(), script)

    def test_a_second_start_skips_apt_and_pip_unless_setup_changed(self):
        missing = self.missing_packages()
        apt = ["apt-get update -q", f"apt-get install -y -q {' '.join(missing)}"] if missing else []
        pip = ["pip install -q -e .[test]"]
        self.assertEqual(self.demo(), apt + pip)  # a new venv
        self.assertEqual(self.demo(), apt)
        self.assertIn("pip skipped", self.output)
        if not missing:
            self.assertIn("apt skipped", self.output)
        with open(self.checkout / "setup.cfg", "a") as f:
            f.write("\n# a new dependency\n")
        self.assertEqual(self.demo(), apt + pip)
        self.assertEqual(self.demo(), apt)


def _packages(script: Path) -> list[str]:
    return re.search(r"^PACKAGES=\((.*)\)$", script.read_text(), re.M).group(1).split()
