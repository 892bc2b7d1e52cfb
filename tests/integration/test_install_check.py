"""docs/deploy/install.md, executed: ``scripts/install-check`` runs every command of the guide in a
scratch prefix (what cannot run here is said and its file checked), and fails, naming the step,
when a command of the guide breaks."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from twisted.trial import unittest

from tests._support import short_tempdir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-check"
GUIDE = ROOT / "docs" / "deploy" / "install.md"


def install_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


class InstallGuideTests(unittest.TestCase):
    # A pip install of the package and its dependencies (~30-60 s), a server started twice.
    timeout = 900

    def test_the_guide_runs_end_to_end(self):
        proc = install_check(timeout=880)
        self.assertEqual(proc.returncode, 0, proc.stdout[-4000:] + proc.stderr[-4000:])
        out = proc.stdout
        for said in ["installed (not editable)", "systemd-analyze verify accepts the unit", "exposure 1.2 OK",
                     "runs the unit's ExecStart", "status --json agrees", "downloaded, still encrypted",
                     "the SVS decrypted the test message", "the restored instance serves",
                     "skipped: systemd is not PID 1 here",
                     # the offline machine and the workstation install from the stick's wheels, no index
                     "on the offline machine, installed from the stick's wheels alone",
                     "on the journalist workstation, installed from the stick's wheels alone",
                     # the restore runs into the data dir as the guide leaves it, and keeps its tls/
                     "holds, as the guide left it: tls, tls/server.key, tls/server.pem",
                     "kept this server's own tls/server.key, tls/server.pem",
                     "presents the certificate installed before the restore"]:
            self.assertIn(said, out)
        # runuser (in Debian's base system), never sudo (missing where root has a password).
        self.assertNotIn("sudo ", GUIDE.read_text("utf-8").split("## 1.", 1)[1])
        reached = out.rsplit("reached: ", 1)[1].strip().split(", ")
        for milestone in ["CA", "cert server", "non-editable install", "wheels", "offline install", "first start",
                          "journalist add", "status --json", "workstation install", "source submission",
                          "journalist download", "digest registration", "backup", "new server", "restore",
                          "restored start"]:
            self.assertIn(milestone, reached)

    def test_a_broken_step_of_the_guide_fails_and_is_named(self):
        text = GUIDE.read_text("utf-8")
        self.assertIn("\nchmod 700 /var/lib/deaddrop\n", text)
        broken = Path(short_tempdir("dd-guide-"), "install.md")
        self.addCleanup(shutil.rmtree, broken.parent, True)
        broken.write_text(text.replace("\nchmod 700 /var/lib/deaddrop\n", "\nchmod 700 /var/lib/deadrop\n"))
        proc = install_check("--guide", str(broken), timeout=120)
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("FAILED: step 5 (1. Packages and the service user) failed: chmod 700 /var/lib/deadrop",
                      proc.stderr)
        self.assertIn("No such file or directory", proc.stderr)
