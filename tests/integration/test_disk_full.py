"""A full disk: the source gets a clear answer, nothing stored is lost, nothing half-stored stays.

The data directory lives on a small tmpfs (``mount -t tmpfs``; we run as root in CI). Two ways
to run out of space are covered:

- the store's file system fills while a document is being encrypted (gpg cannot write);
- the database's file system is full while the store still has room (SQLite cannot grow its
  WAL), so the ciphertext is written but the row cannot be.

Both must answer 507 with a page that says the server is out of space and nothing was stored,
keep every earlier submission decryptable, leave no temp file, and work again as soon as space
is freed, without a restart.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import sqlite3
import subprocess

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom.daily_report import DayCounts
from tests._support import Browser, LogCapture, RunningServer, short_tempdir, test_svs
from tests.integration.test_source_flow import gunzip_with_name, stored_files

MiB = 1024 * 1024
OUT_OF_SPACE = "The server has run out of space. Nothing was stored."


def mount_tmpfs(testcase: unittest.TestCase, path: str, size: str) -> None:
    """Mount a tmpfs at ``path`` for the test, or skip loudly saying why it could not be done."""
    os.makedirs(path, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        proc2 = subprocess.run(["unshare", "--help"], capture_output=True)
        raise unittest.SkipTest(
            "DISK-FULL TESTS NOT RUN: cannot mount a tmpfs "
            f"(uid {os.getuid()}, `mount -t tmpfs` said: {proc.stderr.strip() or proc.returncode}). "
            "They need root or CAP_SYS_ADMIN (CI runs them as root)"
            + ("" if proc2.returncode == 0 else "; `unshare` is not available either")
        )

    def unmount() -> None:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)

    testcase.addCleanup(unmount)


def tmpfs(testcase: unittest.TestCase, size: str, prefix: str) -> str:
    """A fresh tmpfs of ``size`` for the test (see ``mount_tmpfs``). -> its mount point."""
    work = short_tempdir(prefix)
    testcase.addCleanup(shutil.rmtree, work, True)
    mnt = os.path.join(work, "mnt")
    mount_tmpfs(testcase, mnt, size)
    return mnt


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: str, leave: int = 0) -> int:
    """Write a filler file until only ``leave`` bytes are free (0: until ENOSPC). -> bytes written."""
    written = 0
    block = b"\0" * MiB
    with open(path, "wb") as f:
        try:
            while True:
                room = free_bytes(os.path.dirname(path)) - leave
                if room <= 0:
                    break
                f.write(block[: min(len(block), room)])
                f.flush()
                written += min(len(block), room)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return written


class DiskFullTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def start(self, data_dir: str, first_submission: bool = True):
        self.logs = LogCapture().start()
        self.addCleanup(self.logs.stop)
        # No reserve: these small disks fill under uploads already admitted, as when another
        # program takes the space (the admission itself: test_large_uploads.DiskAdmissionTests).
        self.server = RunningServer(self, data_dir=data_dir, disk_reserve="0")
        self.addCleanup(self.server.cleanup)
        yield self.server.start()
        self.addCleanup(self.server.stop)
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)
        yield self.browser.create_source()
        self.sent = []
        if first_submission:
            yield self.submit_ok("the first submission, which makes the source's key pair")
            yield self._key_ready()

    @inlineCallbacks
    def _key_ready(self):
        """The source key is made after the first submission; let it land before the disk fills."""
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        for _ in range(200):
            db = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
            ready = db.execute("SELECT COUNT(*) FROM sources WHERE key_fingerprint IS NULL").fetchone()[0] == 0
            db.close()
            if ready:
                return
            yield deferLater(reactor, 0.05, lambda: None)
        self.fail("source key was never made")

    @inlineCallbacks
    def submit_ok(self, message: str, files=()):
        response, html = yield self.browser.submit(message, list(files))
        self.assertEqual(response.code, 200, html[:400])
        self.assertIn("Thank you. We received your", html)
        self.sent.append((message, list(files)))

    def assert_everything_sent_decrypts(self) -> None:
        svs = test_svs()
        messages, documents = [], []
        for path in stored_files(self.server.data_dir):
            with open(path, "rb") as f:
                plain = svs.decrypt(f.read())
            if path.endswith("-msg.gpg"):
                messages.append(plain.decode())
            else:
                documents.append(gunzip_with_name(plain))
        expected_messages = [m for m, _ in self.sent if m]
        expected_documents = [doc for _, files in self.sent for doc in files]
        self.assertEqual(sorted(messages), sorted(expected_messages))
        self.assertEqual(sorted(documents), sorted(expected_documents))

    def assert_no_half_state(self) -> None:
        data = self.server.data_dir
        self.assertEqual(os.listdir(os.path.join(data, "tmp")), [], "temp ciphertext left behind")
        db = sqlite3.connect(os.path.join(data, "db.sqlite"))
        rows = {os.path.join(data, "store", fid, name) for fid, name in db.execute(
            "SELECT s.filesystem_id, x.filename FROM submissions x JOIN sources s ON s.id = x.source_id")}
        db.close()
        self.assertEqual(rows, set(stored_files(data)), "store and database disagree")

    def assert_clean_log(self) -> None:
        text = self.logs.text()
        self.assertNotIn("Traceback", text)
        self.assertNotIn("request failed", text)
        # A refused submission is counted for the day's report, never logged when it happens
        # (a line now would date the source's attempt).
        for said_now in ("disk full", "disk is full", "could not be stored"):
            self.assertNotIn(said_now, text)
        failures = self.server.service.newsroom.activity.today.failures
        self.assertGreater(failures["not stored: disk_full"], 0, failures)
        self.assertEqual(set(failures) - {"not stored: disk_full", "the disk is full"}, set(), failures)

    # -- the store's file system fills up -------------------------------------------------

    @inlineCallbacks
    def test_store_fills_up_during_an_upload(self):
        mnt = tmpfs(self, "16m", "dd-full-")
        yield self.start(os.path.join(mnt, "data"))
        # Without the disk admission, which would refuse these uploads before gpg runs out of
        # room: what this shows is the layer under it, for a disk that something else fills.
        self.server.service.newsroom.submissions.disk = None
        yield self.submit_ok("before the disk filled up", [("early.bin", os.urandom(300_000))])
        yield self.submit_ok("a second one")

        # Leave a few MB, then upload 1 MB documents until the disk refuses one.
        filler = os.path.join(mnt, "filler")
        fill(filler, leave=4 * MiB)
        for attempt in range(12):
            payload = [(f"fill-{attempt}.bin", os.urandom(MiB))]
            response, html = yield self.browser.submit(f"filling {attempt}", payload)
            if response.code != 200:
                break
            self.assertIn("Thank you. We received your", html)
            self.sent.append((f"filling {attempt}", payload))
        else:
            self.fail("the disk never filled up")
        self.assertEqual(response.code, 507, html[:500])
        self.assertIn("out of space", html)
        self.assertIn(OUT_OF_SPACE, html)
        self.assertNotIn("Traceback", html)
        self.assertGreaterEqual(attempt, 1, "the first upload already failed: the filler left too little")
        self.assert_no_half_state()
        self.assert_everything_sent_decrypts()

        # While full, a new attempt is refused the same way (not a 500, not a hang).
        response, html = yield self.browser.submit("still full", [("x.bin", os.urandom(2 * MiB))])
        self.assertEqual(response.code, 507)
        self.assert_no_half_state()

        # Free space: submissions work again without a restart.
        os.remove(filler)
        yield self.submit_ok("after space was freed", [("late.bin", os.urandom(MiB))])
        self.assert_no_half_state()
        self.assert_everything_sent_decrypts()
        self.assert_clean_log()

    # -- the database cannot write ---------------------------------------------------------

    @inlineCallbacks
    def test_database_cannot_grow_while_the_store_has_room(self):
        work = short_tempdir("dd-dbfull-")
        self.addCleanup(shutil.rmtree, work, True)
        small, big = os.path.join(work, "small"), os.path.join(work, "big")
        mount_tmpfs(self, small, "8m")
        mount_tmpfs(self, big, "128m")  # more than the TEXT_ROOM file uploads must leave
        data = os.path.join(small, "data")
        # The store, its temp directory (one file system, as rename needs) and the keyring on
        # another file system; the database and the logs on the small one.
        os.makedirs(data, mode=0o700)
        for name in ("store", "tmp", "gnupg"):
            os.makedirs(os.path.join(big, name), mode=0o700)
            os.symlink(os.path.join(big, name), os.path.join(data, name))
        yield self.start(data)
        yield self.submit_ok("before the database disk filled up", [("early.bin", os.urandom(100_000))])
        db_before = self._submission_rows()

        filler = os.path.join(small, "filler")
        fill(filler)
        self.assertLess(free_bytes(small), 4096)
        response, html = yield self.browser.submit("the row cannot be written", [("doc.bin", os.urandom(200_000))])
        self.assertEqual(response.code, 507, html[:600])
        self.assertIn(OUT_OF_SPACE, html)
        self.assertEqual(self._submission_rows(), db_before, "a row was half-written")
        self.assert_no_half_state()
        self.assertEqual(os.listdir(os.path.join(big, "tmp")), [])

        # A second attempt while still full: same clear answer (the DB connection is not stuck).
        response, html = yield self.browser.submit("again", [])
        self.assertEqual(response.code, 507, html[:600])
        self.assert_no_half_state()

        # A new source cannot be made either, and is told why (not "something went wrong").
        newcomer = Browser(self.server.source_url)
        self.addCleanup(newcomer.close)
        response, html = yield newcomer.get("/generate")
        codename = re.search(r'id="codename"[^>]*>([^<]+)<', html).group(1)
        response, html = yield newcomer.post("/create", data={"codename": codename, "csrf_token": newcomer.csrf(html)})
        self.assertEqual(response.code, 507, html[:600])
        self.assertIn(OUT_OF_SPACE, html)

        os.remove(filler)
        yield self.submit_ok("after the database disk was freed", [("late.bin", os.urandom(100_000))])
        yield newcomer.create_source()
        self.assertEqual(self.server.service.newsroom.activity.today.failures["the disk is full"], 1)
        self.assert_no_half_state()
        self.assert_everything_sent_decrypts()
        self.assert_clean_log()

    def _submission_rows(self) -> list:
        db = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        try:
            return db.execute("SELECT filename, size FROM submissions ORDER BY id").fetchall()
        finally:
            db.close()

    # -- only the security log's disk is full ------------------------------------------------

    @inlineCallbacks
    def test_a_full_security_log_disk_does_not_turn_a_stored_submission_into_an_error(self):
        work = short_tempdir("dd-logfull-")
        self.addCleanup(shutil.rmtree, work, True)
        logs = os.path.join(work, "logs")
        mount_tmpfs(self, logs, "256k")
        data = os.path.join(work, "data")
        os.makedirs(data, mode=0o700)
        os.symlink(logs, os.path.join(data, "logs"))
        # No submission before the log's disk fills: the log file must have no room left in a
        # block it already holds. (The key pair, made at this first submission, is not on it.)
        yield self.start(data, first_submission=False)
        fill(os.path.join(logs, "filler"))
        # Stored and committed: the source must see the confirmation, not a 500 that says
        # "nothing was stored" (and resend).
        yield self.submit_ok("stored although the event log is full", [("doc.bin", b"content")])
        self.assert_no_half_state()
        self.assert_everything_sent_decrypts()
        # Nothing is logged when a source submits; the day's report, when it cannot be
        # appended, says so in twistd's log and the server goes on.
        self.assertNotIn("not written", self.logs.text())
        activity = self.server.service.newsroom.activity
        activity.restore(DayCounts("2000-01-01", messages=1))  # a day that has ended
        [reported] = self.server.service.daily_report.report_ended_days()
        self.assertEqual((reported.day, reported.messages), ("2000-01-01", 1))
        text = self.logs.text()
        self.assertIn("security event submissions.daily not written: No space left on device", text)
        self.assertNotIn("request failed", text)
        self.assertNotIn("Traceback", text)
