"""``deaddrop-admin status`` against a stopped and a running server (real files, real gpg)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

import deaddrop
from deaddrop.transport import ca
from deaddrop.store.runtime_status import status_path
from tests._mounts import own_tmpfs, remount
from tests._support import (Browser, add_journalist, initialised_data_dir, short_tempdir, start_journalist_server,
                            test_svs)
from tests.integration.test_admin_cli import run_cli


class StatusTests(unittest.TestCase):
    timeout = 90

    @inlineCallbacks
    def status(self, data_dir: str):
        code, out, err = yield deferToThread(run_cli, "--json", "status", "--data-dir", data_dir)
        self.assertEqual(len(out.splitlines()), 1, out + err)
        return code, json.loads(out)

    @inlineCallbacks
    def test_a_running_server_then_a_stopped_one(self):
        server = yield start_journalist_server(self)
        yield add_journalist(server, "alice")
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("hello", [("a.txt", b"x" * 1000)])
        idle = Browser(server.source_url)  # never submits: not a source journalists see
        self.addCleanup(idle.close)
        yield idle.create_source()
        ca.issue_client_cert(server.ca_dir, "soon", os.path.join(short_tempdir(), "soon.p12"), b"pw", days=10)

        code, data = yield self.status(server.data_dir)
        self.assertEqual(code, 0, data["checks"])
        s = data["server"]
        self.assertEqual((s["running"], s["pid"], s["version"]), (True, os.getpid(), deaddrop.__version__))
        self.assertGreaterEqual(s["uptime_seconds"], 0)
        self.assertLess(s["uptime_seconds"], 120)
        self.assertEqual(data["counts"], {"sources": 1, "unread_submissions": 2, "journalists": 1,
                                          "schema_version": data["counts"]["schema_version"]})
        self.assertEqual(data["submission_key_fingerprint"], test_svs().fingerprint)
        self.assertGreater(data["disk"]["free_bytes"], 0)
        self.assertLessEqual(data["disk"]["free_bytes"], data["disk"]["total_bytes"])
        self.assertEqual(data["tor_state"], "none")
        self.assertRegex(data["crl"]["next_update"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual((data["crl"]["expired"], data["crl"]["expires_soon"]), (False, False))
        self.assertIn(data["crl"]["days_left"], (29, 30))
        self.assertEqual([e["what"] for e in data["expiring_certificates"]], ["client certificate soon"])

        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", server.data_dir)
        self.assertIn(f"Server:           running (pid {os.getpid()}, version {deaddrop.__version__}, up 0 h", out)
        self.assertIn("Unread:           2 submission(s)", out)
        self.assertIn(f"Submission key:   {test_svs().fingerprint}", out)
        self.assertIn("Expiring (30 d):  client certificate soon", out)
        self.assertIn("Tor:              not used (--tor none)", out)

        # A CRL in its last week makes status fail (exit 1), as it should for monitoring.
        ca.write_crl(server.ca_dir, os.path.join(server.ca_dir, "crl.pem"), next_update_days=3)
        code, data = yield self.status(server.data_dir)
        self.assertEqual((code, data["crl"]["expires_soon"]), (1, True))
        [check] = [c for c in data["checks"] if c["name"] == "crl"]
        self.assertIn("expires at", check["detail"])

        # The onion address as the running server published it (Tor is replaced here by what the
        # Tor service exposes: its state and address).
        class PublishedTor:
            state = "ready"
            onion_address = "b" * 56 + ".onion"

        server.service.tor = PublishedTor()
        yield server.service.status_file._write()
        code, data = yield self.status(server.data_dir)
        self.assertEqual((data["tor_state"], data["source_onion"]), ("ready", "b" * 56 + ".onion"))
        del server.service.tor

        yield server.stop()
        self.assertFalse(os.path.exists(status_path(server.data_dir)))
        code, data = yield self.status(server.data_dir)
        self.assertEqual(data["server"], {"running": False, "pid": None, "version": None, "started_at": None,
                                          "uptime_seconds": None})
        self.assertEqual(data["tor_state"], "not running")
        self.assertEqual(data["counts"]["sources"], 1)
        self.assertEqual(data["submission_key_fingerprint"], test_svs().fingerprint)

    @inlineCallbacks
    def test_warns_30_days_before_the_server_certificate_expires(self):
        server = yield start_journalist_server(self)
        tls_dir = os.path.join(server.data_dir, "tls")
        code, data = yield self.status(server.data_dir)
        self.assertEqual(code, 0, data["checks"])
        self.assertEqual(data["server_certificate"]["days_left"], 89)  # a fresh one lives 90 days
        # A pair from the CA with 31 days left: no warning; with 29: status fails and says what to do.
        for days, code_expected in ((31, 0), (29, 1)):
            fresh = os.path.join(short_tempdir(), "server.pem")
            r = ca.issue_server_cert(server.ca_dir, ["127.0.0.1"], fresh, days=days)
            os.replace(r["key"], os.path.join(tls_dir, "server.key"))
            os.replace(fresh, os.path.join(tls_dir, "server.pem"))
            code, data = yield self.status(server.data_dir)
            self.assertEqual((code, data["server_certificate"]["expires_soon"]), (code_expected, bool(code_expected)))
        [check] = [c for c in data["checks"] if c["name"] == "server_certificate"]
        self.assertIn("expires at", check["detail"])
        self.assertIn("deaddrop-admin cert server", check["detail"])
        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", server.data_dir)
        self.assertIn("server TLS certificate", out)

    @inlineCallbacks
    def test_fails_while_the_disk_cannot_take_the_largest_upload_above_its_reserve(self):
        """Then whether an upload near that size is taken tells anyone online whether other
        sources are uploading (docs/threat-model.md, "Shared stores"): the admin is told."""
        from tests.integration.test_disk_full import tmpfs

        mnt = tmpfs(self, "400m", "dd-status-room-")  # ~340 MB above an 8 MB reserve and the text room
        server = yield start_journalist_server(self, data_dir=os.path.join(mnt, "data"), disk_reserve="8MB")
        code, data = yield self.status(server.data_dir)
        [check] = [c for c in data["checks"] if c["name"] == "upload_room"]
        self.assertEqual((code, check["ok"]), (1, False), data["checks"])
        self.assertIn("less than the largest upload (524 MB)", check["detail"])
        self.assertTrue(300 * 10**6 < data["upload_room"]["largest_that_fits"] < 350 * 10**6, data["upload_room"])
        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", server.data_dir)
        self.assertIn("[FAIL] upload_room: only ", out)
        server.service.settings.max_upload_size = 200 * 10**6  # the admin lowers the largest upload
        yield server.service.status_file._write()
        code, data = yield self.status(server.data_dir)
        self.assertEqual(code, 0, data["checks"])
        [check] = [c for c in data["checks"] if c["name"] == "upload_room"]
        self.assertEqual(check, {"name": "upload_room", "ok": True, "detail": "uploads of 200 MB fit above --disk-reserve"})

    @inlineCallbacks
    def test_a_certificate_from_the_ca_in_the_data_dir_is_renewed_at_start_in_its_last_30_days(self):
        server = yield start_journalist_server(self)
        yield server.stop()
        tls_dir = os.path.join(server.data_dir, "tls")
        fresh = os.path.join(short_tempdir(), "server.pem")
        r = ca.issue_server_cert(server.ca_dir, ["127.0.0.1"], fresh, days=20)
        os.replace(r["key"], os.path.join(tls_dir, "server.key"))
        os.replace(fresh, os.path.join(tls_dir, "server.pem"))
        server = yield start_journalist_server(self, data_dir=server.data_dir)
        code, data = yield self.status(server.data_dir)
        self.assertEqual((code, data["server_certificate"]["days_left"]), (0, 89))
        self.assertEqual(sorted(os.listdir(tls_dir)), ["server.key", "server.pem"])

    @inlineCallbacks
    def test_a_stale_status_file_does_not_make_a_server_look_alive(self):
        server = yield start_journalist_server(self)
        yield server.stop()
        with open(status_path(server.data_dir), "w") as f:
            json.dump({"pid": os.getpid(), "version": "9.9", "started_at": 1, "tor_state": "ready"}, f)
        code, data = yield self.status(server.data_dir)
        self.assertFalse(data["server"]["running"])
        self.assertIsNone(data["server"]["version"])

    @inlineCallbacks
    def test_a_data_dir_mounted_strictatime_fails_relatime_and_noatime_pass(self):
        """Issue 26 item 6: access times kept ahead hide reads from relatime, not from strictatime."""
        mount = own_tmpfs(self, "strictatime", "ACCESS-TIME STATUS TEST")
        data_dir = yield initialised_data_dir(self, data_dir=mount, disk_reserve="0")
        for option, code_expected in (("strictatime", 1), ("relatime", 0), ("noatime", 0)):
            remount(mount, option)
            code, data = yield self.status(data_dir)
            [check] = [c for c in data["checks"] if c["name"] == "access_times"]
            self.assertEqual((code, check["ok"], check["path"]), (code_expected, not code_expected, mount),
                             data["checks"])
            self.assertIn(option, check["detail"])
        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", data_dir)
        self.assertIn("noatime: no read is recorded", out)


class ProcessPrivacyTests(unittest.TestCase):
    """Adversary review 3 (a local user): without hidepid on /proc, nobody reads the command line of
    every gpg run the server starts (a submission's time and desks, a source's new key); status says
    whether the host hides them, here as it is and in a mount namespace whose /proc has hidepid."""

    timeout = 90

    @inlineCallbacks
    def test_status_says_whether_other_users_see_the_servers_processes(self):
        server = yield start_journalist_server(self)
        admin = os.path.join(os.path.dirname(sys.executable), "deaddrop-admin")
        watch = f"runuser -u nobody -- cat /proc/{os.getpid()}/cmdline >/dev/null 2>&1 && echo seen || echo unseen"
        status = f"{admin} --json status --data-dir {server.data_dir}"
        for proc_mount in ("", "mount -t proc -o hidepid=invisible proc /proc && "):
            script = f"{proc_mount}{watch}; {status}"
            done = yield deferToThread(subprocess.run, ["unshare", "-m", "sh", "-c", script], capture_output=True,
                                       text=True)
            if done.returncode not in (0, 1) or not done.stdout.startswith(("seen", "unseen")):
                raise unittest.SkipTest(f"PROCESS PRIVACY STATUS TEST NOT RUN: {done.stderr.strip()} (needs root)")
            seen, out = done.stdout.split("\n", 1)
            data = json.loads(out)
            self.assertEqual(data["processes"]["hidden"], seen == "unseen", data["processes"])
            if proc_mount:
                self.assertEqual((seen, data["processes"]["detail"]),
                                 ("unseen", "hidden from other users (/proc hidepid=invisible)"))
            elif seen == "seen":
                self.assertIn("hidepid=invisible", data["processes"]["detail"])  # the fix, named
        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", server.data_dir)
        self.assertRegex(out, r"\nProcesses: +(hidden from other users|VISIBLE to every user of this host)")


class LockHolderOnOverlayTests(unittest.TestCase):
    """On overlayfs (a container's root, install-check's machines) /proc/locks names the device and
    inode of the layer the lock file is on, which stat does not see: the holder is then found by the
    open file, or a running server looked stopped (and `digest test` refused to send)."""

    def test_the_holder_is_found_by_its_open_file_when_the_lock_table_names_another_inode(self):
        import fcntl
        from unittest import mock

        from deaddrop.admin import _status_commands

        data_dir = short_tempdir()
        with open(os.path.join(data_dir, "server.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.assertEqual(_status_commands._lock_holder(data_dir), os.getpid())
            other_layer = f"1: FLOCK  ADVISORY  WRITE {os.getpid()} 00:2a:999999999 0 EOF\n"
            with mock.patch("builtins.open", mock.mock_open(read_data=other_layer)):
                self.assertEqual(_status_commands._lock_holder(data_dir), os.getpid())
            fcntl.flock(lock, fcntl.LOCK_UN)
        with mock.patch("builtins.open", mock.mock_open(read_data=other_layer)):
            self.assertIsNone(_status_commands._lock_holder(data_dir))
