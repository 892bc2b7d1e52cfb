"""scripts/demo's install part: a second start runs neither apt nor pip when nothing changed; on
a bare Debian it installs the demo's packages without what they merely recommend, and the test
suite's only when asked (DEMO_TESTS=1), as .ci/run always does (issue 27).

Run on a copy of the script in a scratch checkout whose .venv's pip, and apt-get and sudo on
PATH, only record how they were called (the real ones would install); dpkg-query is the real one:
apt is asked for exactly the packages this machine lacks, and not at all when it lacks none (CI,
after .ci/run). A start while a demo runs from the same checkout is refused before its banner
(new-user walkthrough)."""
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

    def demo(self, **extra: str) -> list[str]:
        self.calls.write_text("")
        env = dict(os.environ, PATH=f"{self.shims}:/usr/bin:/bin", CALLS=str(self.calls), DEMO_INSTALL_ONLY="1",
                   **extra)
        proc = subprocess.run(["bash", str(self.checkout / "scripts/demo")], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.output = proc.stdout
        return [line.removeprefix("sudo ") for line in self.calls.read_text().splitlines()]

    def missing_packages(self) -> list[str]:
        return [p for p in _packages(ROOT / "scripts/demo") if "install ok installed" not in subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout]

    def test_ci_installs_the_demo_s_packages_and_the_test_suite_s_and_npm_only_where_none_is(self):
        self.assertEqual(_packages(ROOT / ".ci/run"), _packages(ROOT / "scripts/demo"))
        self.assertEqual(_packages(ROOT / ".ci/run", "TEST_PACKAGES"), _packages(ROOT / "scripts/demo", "TEST_PACKAGES"))
        self.assertIn('"${PACKAGES[@]}" "${TEST_PACKAGES[@]}"', (ROOT / ".ci/run").read_text())
        for script in (".ci/run", "scripts/demo"):
            # Debian's npm conflicts with NodeSource's nodejs (which carries an npm): asking apt for
            # it there fails the whole install.
            self.assertIn("command -v npm >/dev/null || TEST_PACKAGES+=(npm)", (ROOT / script).read_text(), script)

    def test_bare_debian_gets_the_demo_without_recommends_and_the_test_packages_only_when_asked(self):
        nothing_installed = self.shims / "dpkg-query"
        nothing_installed.write_text("#!/bin/sh\nexit 1\n")
        nothing_installed.chmod(0o755)
        demo, tests = _packages(ROOT / "scripts/demo"), _packages(ROOT / "scripts/demo", "TEST_PACKAGES")
        if shutil.which("npm", path=f"{self.shims}:/usr/bin:/bin") is None:
            tests.append("npm")
        self.assertNotIn("chromium", demo)
        self.assertEqual(self.demo()[:2], ["apt-get update -q",
                                           f"apt-get install -y -q --no-install-recommends {' '.join(demo)}"])
        self.assertEqual(self.demo(DEMO_TESTS="1")[:3], [
            "apt-get update -q", f"apt-get install -y -q --no-install-recommends {' '.join(demo)}",
            f"apt-get install -y -q {' '.join(tests)}"])

    def test_a_second_start_skips_apt_and_pip_unless_setup_changed(self):
        missing = self.missing_packages()
        apt = ["apt-get update -q", f"apt-get install -y -q --no-install-recommends {' '.join(missing)}"] if missing else []
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

    def test_a_demo_already_running_here_is_named_before_anything_starts(self):
        self.demo()  # installed
        (self.checkout / "twistd.pid").write_text(str(os.getpid()))  # a live process: this test's
        env = dict(os.environ, PATH=f"{self.shims}:/usr/bin:/bin", CALLS=str(self.calls))
        proc = subprocess.run(["bash", str(self.checkout / "scripts/demo")], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn(f"a demo is already running from this checkout (PID {os.getpid()}", proc.stderr)
        self.assertNotIn("DEMO INSTANCE", proc.stdout)
        self.assertFalse((self.checkout / "deaddrop-demo").exists())


def _packages(script: Path, name: str = "PACKAGES") -> list[str]:
    return re.search(rf"^{name}=\((.*)\)$", script.read_text(), re.M).group(1).split()
