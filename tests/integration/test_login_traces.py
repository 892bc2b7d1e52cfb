"""A source's login and reply read change no time of any file on a seized disk (not even a ctime).

The midnight cut (``deaddrop/store/file_times.py``) hides the modification and access times of
what changed since the last cut, but not its change time: no call can set a ctime, and the cut
itself gives every inode a new one. So a login, which changes nothing a source did, must change
no inode of the data dir at all, or it is dated to the second until the next midnight: not
``DATA/gnupg`` (gpg's lock files and temporary keybox, gpg-agent's sockets and its start-up
chmod of ``private-keys-v1.d``), not the WAL (a reply marked as read), not SQLite's ``-shm``
(a reader's mark, written through a shared mapping, which ext4 dates once the kernel has written
the page out). On a real server, on ext4 mounted ``relatime`` (Debian's default), restarted since
the source's key was made (its gpg-agent not yet asked for anything), a journalist's reply the
last write, and the kernel having written every page out: a source logs in and reads its reply,
and afterwards no inode of the data dir has an mtime, ctime or atime (to the nanosecond) from the
first second of the login on.
"""
from __future__ import annotations

import os
import time

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.trial import unittest

from tests._mounts import mount_options, own_ext4
from tests._support import Browser, start_server
from tests.integration.test_journalist_api import db_rows

DAY = 86400
SECOND_NS = 10**9
CONTROL = "test-control"  # the test's own folder: what it writes in the window to show the search works


def times_since(root: str, since_ns: int) -> list[str]:
    """Every mtime, ctime and atime under ``root`` (its own too) from ``since_ns`` to now (a cut
    file's atime, the last nanosecond of today, is ahead of now on purpose: ``deaddrop.day_times``)."""
    now_ns = time.time_ns() + SECOND_NS // 100  # file times come from a coarse clock: a tick either side
    hits = []
    for dirpath, dirnames, filenames in os.walk(root):
        names = [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]
        for path in names if dirpath == root else names[1:]:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                hits.append(f"{os.path.relpath(path, root)} came and went")
                continue
            for label, ns in (("mtime", st.st_mtime_ns), ("ctime", st.st_ctime_ns), ("atime", st.st_atime_ns)):
                if since_ns <= ns <= now_ns:
                    hits.append(f"{label} of {os.path.relpath(path, root)}")
    return hits


def pause(seconds: float):
    return deferLater(reactor, seconds, lambda: None)


@inlineCallbacks
def clear_of_midnight(server):
    """Start the window more than 20 s before midnight UTC, after that midnight's cut if it is near:
    the cut rewrites every ctime, and the day's last nanosecond is every cut file's atime."""
    left = DAY - time.time() % DAY
    if left < 20:
        yield pause(left + 2)
        yield server.service.file_times.idle()


class LoginLeavesNoTimeTests(unittest.TestCase):
    timeout = 180
    maxDiff = None

    @inlineCallbacks
    def test_a_login_and_a_reply_read_change_no_time_in_the_data_dir(self):
        data = own_ext4(self, "relatime", "LOGIN TRACES TEST")
        self.assertIn("relatime", mount_options(data))
        os.mkdir(os.path.join(data, CONTROL))
        first = yield start_server(self, data_dir=data, disk_reserve="0")
        source = Browser(first.source_url)
        self.addCleanup(source.close)
        codename = yield source.create_source()
        response, _ = yield source.submit("a message")
        self.assertEqual(response.code, 200)
        [(source_id,)] = db_rows(first, "SELECT id FROM sources WHERE pending = 0")
        yield first.service.newsroom.replies.key_ready(source_id)
        yield first.stop()

        server = yield start_server(self, data_dir=data, disk_reserve="0")
        yield server.service.file_times.idle()  # the start-up cut
        # DATA/status.json is rewritten every 15 s whatever sources do (it dates nothing of
        # theirs): stopped, so that every change in the window is the login's.
        yield server.service.status_file.stopService()
        # A journalist's reply: the last write before the login (its reads then find no reader's
        # mark in -shm for the WAL's last commit).
        yield server.service.newsroom.replies.add(source_id, "REPLY-READ-AT-LOGIN")
        os.sync()  # every page written out, as 30 s after the last write: ext4 dates the next write through a mapping
        yield clear_of_midnight(server)
        yield pause(1.05 - time.time() % 1)
        since = time.time_ns() // SECOND_NS * SECOND_NS

        reader = Browser(server.source_url)
        self.addCleanup(reader.close)
        response, html = yield reader.login(codename)
        self.assertIn("REPLY-READ-AT-LOGIN", html)
        self.assertIn("1 new reply", html)
        with open(os.path.join(data, CONTROL, "written-in-the-window"), "wb") as f:
            f.write(b"the search finds this")
        yield pause(1.5)  # anything the login set off after its answer (an agent, a write behind)

        hits = times_since(data, since)
        for hit in ("mtime of test-control", "ctime of test-control", "mtime of test-control/written-in-the-window",
                    "ctime of test-control/written-in-the-window", "atime of test-control/written-in-the-window"):
            self.assertIn(hit, hits)
        self.assertEqual([h for h in hits if CONTROL not in h], [])
        self.assertEqual(os.listdir(os.path.join(data, CONTROL)), ["written-in-the-window"])
