"""A demo without Internet access keeps serving and keeps trying Tor; production still stops.

The ten minutes offline are played on a clock in tests/test_tor.py
(``test_a_demo_offline_never_gives_up_and_says_so``); here, that the server gives the demo, and only
the demo, a Tor service that never gives up. And the real scripts/demo's first start, offline."""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.config import Config
from deaddrop.crypto.kdf import KdfCost
from deaddrop.service import build_service
from tests._demo import ROOT, scratch_checkout
from tests._process import free_port
from tests._support import kill_gpg_agent, short_tempdir, test_svs


class DemoTorPolicyTests(unittest.TestCase):
    @inlineCallbacks
    def test_only_a_demo_waits_for_the_tor_network_without_a_limit(self):
        for demo, limit in ((True, None), (False, 180.0)):
            data_dir = short_tempdir()
            self.addCleanup(shutil.rmtree, data_dir, True)
            self.addCleanup(kill_gpg_agent, f"{data_dir}/gnupg")
            config = Config(data_dir=data_dir, tor="launch", demo=demo, submission_key=test_svs().public_key_path,
                            source_listen="tcp:0:interface=127.0.0.1", journalist_listen="tcp:0:interface=127.0.0.1",
                            kdf_cost=KdfCost.parse("insecure-fast"))
            service = yield deferToThread(build_service, config, reactor)
            try:
                self.assertEqual(service.tor._bootstrap_timeout, limit, f"demo={demo}")
                # The Tor service logs its progress lines itself (tests.test_tor's
                # test_the_log_holds_every_console_line_so_a_server_needs_no_report): a report
                # that logged them too printed each twice in twistd's output.
                self.assertIsNone(service.tor._report)
            finally:
                for close in reversed(service.closers):
                    close()


class DemoScriptTests(unittest.TestCase):
    """The real scripts/demo, from a scratch checkout, with --tor none (apt and pip already done:
    apt-get and sudo only record a call, .venv's tools are this checkout's)."""

    timeout = 240

    def setUp(self) -> None:
        self.checkout = Path(short_tempdir("dd-demo-"))
        self.addCleanup(shutil.rmtree, self.checkout, True)
        for gnupg in ("deaddrop-demo/svs/gnupg", "deaddrop-data/gnupg"):  # before the rmtree (last added, first run)
            self.addCleanup(kill_gpg_agent, str(self.checkout / gnupg))
        scratch_checkout(self.checkout)
        venv = self.checkout / ".venv"
        (venv / "bin").mkdir(parents=True)
        real = Path(sys.executable).parent
        for tool in ("twistd", "deaddrop-admin", "deaddrop-svs"):
            os.symlink(real / tool, venv / "bin" / tool)
        python = venv / "bin" / "python"
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        wanted = hashlib.sha256((ROOT / "setup.cfg").read_bytes() + (ROOT / "pyproject.toml").read_bytes())
        (venv / ".demo-installed").write_text(wanted.hexdigest() + "\n")  # pip skipped
        shims = self.checkout / "shims"
        shims.mkdir()
        for name in ("apt-get", "sudo"):
            (shims / name).write_text("#!/bin/sh\nexit 0\n")
            (shims / name).chmod(0o755)
        self.env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}")

    def test_a_first_start_issues_the_certificate_says_so_and_explains_a_missing_one(self):
        journalist_port, source_port = free_port(), free_port()
        log = open(self.checkout / "demo.log", "w+")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            ["bash", str(self.checkout / "scripts/demo"), "--tor", "none",
             "--source-listen", f"tcp:{source_port}:interface=127.0.0.1",
             "--journalist-listen", f"tcp:{journalist_port}:interface=127.0.0.1"],
            cwd=str(self.checkout), env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def stop() -> None:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()

        self.addCleanup(stop)
        deadline = time.monotonic() + 200
        page = None
        while page is None:
            log.seek(0)
            output = log.read()
            self.assertIsNone(proc.poll(), output)
            self.assertLess(time.monotonic(), deadline, output)
            if "Journalist interface:" in output:
                page = _get_without_certificate(journalist_port)
            if page is None:
                time.sleep(0.5)
        status, body = page
        # --journalist-explain-missing-cert: before the .p12 is imported, the page says what is missing.
        self.assertEqual(status, 200)
        self.assertIn(b"Newsroom certificate needed", body)
        demo = self.checkout / "deaddrop-demo"
        self.assertTrue((demo / "demo.p12").exists())
        notes = (demo / "journalist.txt").read_text()
        self.assertNotIn("cert issue", notes)  # the demo has run it already
        self.assertIn(f"issued already (by scripts/demo): {demo}/demo.p12", notes)
        self.assertIn(f"its import password in {demo}/certificate.txt", notes)
        self.assertIn("passphrase:", notes)
        self.assertIn(f"issued already (by scripts/demo): {demo}/demo.p12", output)  # shown once, as written
        self.assertIn("password", (demo / "certificate.txt").read_text().lower())
        # The README and the banner send you back to these files: they keep what they hold.
        self.assertNotIn("not shown again", notes)
        self.assertNotIn("not shown again", output)
        self.assertNotIn("shown once", output)
        self.assertNotIn("shown once", (demo / "certificate.txt").read_text())


def _get_without_certificate(port: int) -> tuple[int, bytes] | None:
    """GET / over TLS with no client certificate; None while nothing listens."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := tls.recv(65536):
                    data += chunk
    except ConnectionRefusedError:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body
