"""File times on a seized disk, on the real server (real gpg keyring, SQLite WAL, store).

A source's whole visit (create, submit a message and a document, a reply read) leaves exact
times all over the data directory: its store folder, the keyring and trust database gpg wrote
when its key was made, ``tmp/``, the WAL, and every changed file's ctime. After a normalisation
none of them falls inside the visit; between two normalisations what the README says remains
visible does, and nothing else. On a ``relatime`` mount (Debian's default), a source reading its
reply afterwards leaves no access time of that second, whether a cut came between or not.
"""
from __future__ import annotations

import os
import time

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial import unittest

from tests._mounts import mount_options, own_tmpfs
from tests._support import Browser, initialised_data_dir, start_server
from tests.integration.test_journalist_api import db_rows

DAY = 86400
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# File times come from the kernel's coarse clock, which may lag time.time() by a tick.
TICK = 0.05

VISIBLE_BETWEEN_RUNS = (
    "What remains visible between two runs: the exact time of the last change of each file or "
    "folder changed since the last run, which dates activity since the last midnight UTC (or "
    "since the server started, if that was later), and nothing earlier."
)


def all_entries(root: str) -> list[str]:
    found = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        found += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return found


def entry_stats(root: str):
    """(path relative to ``root``, its lstat) of every entry still there."""
    for path in all_entries(root):
        try:
            yield os.path.relpath(path, root), os.lstat(path)
        except FileNotFoundError:
            continue


def times_inside(root: str, start: float, end: float) -> list[str]:
    """Every time under ``root`` that falls inside [start, end] and is finer than the day."""
    hits = []
    for name, st in entry_stats(root):
        for label, value in (("mtime", st.st_mtime), ("atime", st.st_atime), ("ctime", st.st_ctime)):
            if start <= value <= end and (label == "ctime" or value % DAY):
                hits.append(f"{label} of {name}")
    return hits


def pause():
    return deferLater(reactor, 2 * TICK, lambda: None)


class FileTimesTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def visit(self, server):
        """A source's whole visit: create, a message and a document, a reply read. -> its span."""
        # The server's start-up run may still be walking the data dir on a loaded machine: it
        # would cut the visit's first times (its store folder's) before the test looks at them.
        yield server.service.file_times.idle()
        yield pause()
        start = time.time()
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        codename = yield source.create_source()
        response, _ = yield source.submit("a message", [("a.pdf", b"a document " * 2000)])
        self.assertEqual(response.code, 200)
        [(source_id,)] = db_rows(server, "SELECT id FROM sources WHERE pending = 0")
        newsroom = server.service.newsroom
        yield newsroom.replies.key_ready(source_id)
        yield newsroom.replies.add(source_id, "REPLY-FROM-THE-NEWSROOM")
        again = Browser(server.source_url)
        self.addCleanup(again.close)
        response, html = yield again.login(codename)
        self.assertIn("REPLY-FROM-THE-NEWSROOM", html)
        end = time.time()
        yield pause()
        return again, start, end

    @inlineCallbacks
    def test_a_visit_leaves_no_time_after_a_normalisation(self):
        server = yield start_server(self)
        browser, start, end = yield self.visit(server)
        data = server.data_dir
        before = times_inside(data, start, end)
        # The visit did date these (the holes the normalisation closes), so the search works.
        for hit in ("mtime of store", "mtime of gnupg", "ctime of gnupg/pubring.kbx", "ctime of gnupg/private-keys-v1.d",
                    "mtime of tmp", "mtime of db.sqlite-wal"):
            self.assertIn(hit, before)
        self.assertTrue(any(h.startswith("ctime of store/") for h in before), before)

        ran_at = time.time()
        report = yield server.service.file_times.run()
        self.assertEqual(report.failed, 0)
        self.assertGreater(report.entries, 20)
        self.assertEqual(times_inside(data, start, end), [])
        for path in all_entries(data):
            st = os.lstat(path)
            if st.st_mtime < ran_at - TICK:  # not changed since the run began (status.json is)
                self.assertEqual(st.st_mtime % DAY, 0, path)

        # Everything still works on the normalised files: SQLite, the keyring, the store.
        response, html = yield browser.get("/lookup")
        self.assertIn("REPLY-FROM-THE-NEWSROOM", html)
        response, html = yield browser.submit("after the normalisation")
        self.assertEqual(response.code, 200)
        self.assertEqual(len(db_rows(server, "SELECT id FROM submissions")), 3)

    @inlineCallbacks
    def test_what_the_readme_says_remains_visible_between_two_runs(self):
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            readme = " ".join(f.read().split())
        self.assertTrue(VISIBLE_BETWEEN_RUNS in readme, "the README no longer says what remains visible, as tested")

        server = yield start_server(self)
        yield server.service.file_times.run()
        # "activity since the last run ... is dated": a visit after the run is.
        _, start, end = yield self.visit(server)
        self.assertIn("mtime of store", times_inside(server.data_dir, start, end))
        # "... and nothing earlier": once the next run (the next midnight) is done, it is not.
        # The run is the one the server has scheduled, at the coming midnight UTC.
        call = server.service.file_times._call
        self.assertLess(abs(call.getTime() - (time.time() // DAY + 1) * DAY), 0.01)
        yield server.service.file_times.run()
        self.assertEqual(times_inside(server.data_dir, start, end), [])

    @inlineCallbacks
    def test_at_start_up(self):
        """Times left by an earlier run (or any other writer) are cut when the server starts."""
        data = yield initialised_data_dir(self)
        exact = time.time() - 3 * 3600 - 0.25
        if exact % DAY < 1:  # an exact midnight would pass for a cut one
            exact -= 10
        for path in all_entries(data):
            os.utime(path, (exact, exact), follow_symlinks=False)
        yield pause()
        server = yield start_server(self, data_dir=data)
        normaliser = server.service.file_times
        while normaliser.last_run is None:
            yield deferLater(reactor, 0.05, lambda: None)
        began = normaliser.last_run
        self.assertLess(exact, began)
        for path in all_entries(data):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                # The running server's atomic writes (status.json) come and go as temp files.
                self.assertTrue(os.path.basename(path).startswith(".tmp-"), path)
                continue
            self.assertGreaterEqual(st.st_ctime, began - TICK, path)  # every inode was rewritten
            for value in (st.st_mtime, st.st_atime):
                self.assertTrue(value % DAY == 0 or value >= began - TICK, (path, value))


def atimes_within(root: str, seconds: set[int]) -> list[str]:
    """Every entry under ``root`` whose access time falls in one of ``seconds``."""
    return [name for name, st in entry_stats(root) if int(st.st_atime) in seconds]


def next_second():
    """Wait until just after the next whole second: what follows owns its seconds alone."""
    return deferLater(reactor, 1.05 - time.time() % 1, lambda: None)


class RelatimeReadTests(unittest.TestCase):
    """Issue 26 item 6: under ``relatime`` the kernel records a read when the access time is not
    newer than the modification or change time. Cut files keep an access time ahead of both,
    so a source opening its reply dates nothing, on the day the reply was written or after a cut."""

    timeout = 120

    @inlineCallbacks
    def test_a_source_reading_its_reply_leaves_no_access_time_of_that_second(self):
        data = own_tmpfs(self, "relatime", "RELATIME TEST")
        self.assertIn("relatime", mount_options(data))
        server = yield start_server(self, data_dir=data, disk_reserve="0")  # a small file system
        yield server.service.file_times.idle()
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        codename = yield source.create_source()
        response, _ = yield source.submit("a message")
        self.assertEqual(response.code, 200)
        [(source_id,)] = db_rows(server, "SELECT id FROM sources WHERE pending = 0")
        newsroom = server.service.newsroom
        yield newsroom.replies.key_ready(source_id)
        yield newsroom.replies.add(source_id, "REPLY-READ-LATER")
        # A file cut as before (access time = modification time = midnight): this mount dates its
        # next read, and the search finds it.
        control = os.path.join(data, "control")
        with open(control, "wb") as f:
            f.write(b"read me")
        midnight = int(time.time() // DAY) * DAY

        for when in ("the day the reply was written", "after the midnight cut"):
            if when.startswith("after"):
                report = yield server.service.file_times.run()
                self.assertEqual(report.failed, 0)
            os.utime(control, (midnight, midnight))
            yield next_second()
            start = time.time()
            reader = Browser(server.source_url)
            self.addCleanup(reader.close)
            response, html = yield reader.login(codename)
            self.assertIn("REPLY-READ-LATER", html)
            with open(control, "rb") as f:
                f.read()
            end = time.time()
            hits = atimes_within(data, set(range(int(start), int(end) + 1)))
            self.assertIn("control", hits, when)
            self.assertEqual([h for h in hits if h != "control"], [], when)
