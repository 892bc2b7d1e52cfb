"""File times cut to the day (``deaddrop.store.file_times``): what one run does, on a real file system,
and when runs happen (a ``Clock``). The whole server, with a source's visit, is
tests/integration/test_file_times.py."""
from __future__ import annotations

import os
import socket
import threading
import time

from twisted.internet.defer import maybeDeferred
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.store import file_times
from deaddrop.day_times import unread_atime_ns
from deaddrop.store.file_times import DAY, FileTimeNormaliser, normalise_times
from tests._support import short_tempdir

EXACT = 1_700_000_000.123456  # 2023-11-14T22:13:20.123456Z: a time of day, to the microsecond


def entries(root: str) -> list[str]:
    found = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        found += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return found


class NormaliseTests(unittest.TestCase):
    def setUp(self):
        self.root = short_tempdir("dd-times-")
        self.addCleanup(lambda: __import__("shutil").rmtree(self.root, True))
        self.outside = short_tempdir("dd-outside-")
        self.addCleanup(lambda: __import__("shutil").rmtree(self.outside, True))

    def make_tree(self) -> None:
        r = self.root
        for d in ("store/abc", "gnupg/private-keys-v1.d", "tmp", "logs"):
            os.makedirs(os.path.join(r, d))
        for name, data in [("store/abc/1-x-msg.gpg", b"cipher"), ("gnupg/pubring.kbx", b"keys"),
                           ("gnupg/trustdb.gpg", b"trust"), ("gnupg/private-keys-v1.d/A.key", b"secret"),
                           ("tmp/up.gpg.part", b"half"), ("db.sqlite", b"db"), ("db.sqlite-wal", b"wal"),
                           ("logs/security.jsonl", b"{}\n")]:
            with open(os.path.join(r, name), "wb") as f:
                f.write(data)
        with open(os.path.join(self.outside, "target"), "wb") as f:
            f.write(b"not ours")
        os.makedirs(os.path.join(self.outside, "folder"))
        os.symlink(os.path.join(self.outside, "target"), os.path.join(r, "link-to-file"))
        os.symlink(os.path.join(self.outside, "folder"), os.path.join(r, "link-to-folder"))
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(os.path.join(r, "gnupg", "S.gpg-agent"))
        sock.close()
        for path in entries(r) + entries(self.outside):
            os.utime(path, (EXACT, EXACT), follow_symlinks=False)

    def test_every_entry_gets_its_own_day_and_a_new_change_time(self):
        """mtime: midnight UTC of its own day. atime: the last nanosecond of today, newer than the
        mtime and than the change time the cut itself gives, so ``relatime`` (which records a read
        only when the atime is not newer than both, or over 24 hours old) records no read today."""
        self.make_tree()
        all_entries = entries(self.root)  # listed before: reading a folder sets its access time
        contents = {p: open(p, "rb").read() for p in all_entries if os.path.isfile(p)}
        for path in all_entries:  # the reads above set access times again
            os.utime(path, (EXACT, EXACT), follow_symlinks=False)
        before = time.time()
        time.sleep(0.02)  # file times come from a coarse clock
        report = normalise_times(self.root)
        self.assertEqual((report.entries, report.failed), (len(all_entries), 0))
        day = EXACT - EXACT % DAY
        today_ends = unread_atime_ns()
        for path in all_entries:
            st = os.lstat(path)
            self.assertEqual(st.st_mtime, day, path)
            self.assertEqual(st.st_atime_ns, today_ends, path)
            self.assertGreater(st.st_atime_ns, st.st_ctime_ns, path)
            self.assertLess(today_ends - st.st_ctime_ns, 86400 * 10**9, path)  # still within today
            self.assertGreaterEqual(st.st_ctime, before, path)  # the moment of the run, not the old one
        self.assertEqual({p: open(p, "rb").read() for p in contents}, contents)  # no content changed

    def test_a_day_already_there_is_kept_and_the_change_time_still_rewritten(self):
        path = os.path.join(self.root, "old")
        with open(path, "wb"):
            pass
        three_days_ago = (time.time() // DAY - 3) * DAY
        os.utime(path, (three_days_ago, three_days_ago))
        before = time.time()
        time.sleep(0.02)
        normalise_times(self.root)
        st = os.stat(path)
        self.assertEqual(st.st_mtime, three_days_ago)
        self.assertGreaterEqual(st.st_ctime, before)

    def test_nothing_outside_the_data_dir_is_touched_through_links(self):
        self.make_tree()
        normalise_times(self.root)
        for path in entries(self.outside):
            self.assertEqual(os.lstat(path).st_mtime, EXACT, path)

    def test_writes_and_renames_in_flight_lose_nothing_and_stop_nothing(self):
        """Uploads written into tmp/ and renamed into the store, an appended log, and folders
        made and removed, while runs go on: every run completes, every byte is where it should be."""
        for d in ("tmp", "store"):
            os.makedirs(os.path.join(self.root, d))
        stop = threading.Event()
        written: dict[str, bytes] = {}
        log = os.path.join(self.root, "log")

        def writer():
            n = 0
            while not stop.is_set():
                n += 1
                tmp = os.path.join(self.root, "tmp", f"{n}.part")
                data = os.urandom(64) * 16
                with open(tmp, "wb") as f:
                    f.write(data[:512])
                    f.flush()
                    f.write(data[512:])
                folder = os.path.join(self.root, "store", f"s{n % 7}")
                os.makedirs(folder, exist_ok=True)
                final = os.path.join(folder, f"{n}.gpg")
                os.rename(tmp, final)
                written[final] = data
                with open(log, "ab") as f:
                    f.write(b"%d\n" % n)
                if n % 5 == 0:
                    gone = os.path.join(self.root, "store", f"gone{n}")
                    os.makedirs(gone)
                    os.rmdir(gone)

        thread = threading.Thread(target=writer)
        thread.start()
        runs = 0
        deadline = time.monotonic() + 10
        try:
            while runs < 20 or (len(written) < 50 and time.monotonic() < deadline):
                normalise_times(self.root)
                runs += 1
        finally:
            stop.set()
            thread.join()
        self.assertGreaterEqual(len(written), 50)
        for path, data in written.items():
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data, path)
        with open(log, "rb") as f:
            self.assertEqual([int(x) for x in f.read().split()], list(range(1, len(written) + 1)))

    def test_refuses_the_reactor_thread(self):
        from twisted.internet import reactor, task

        from deaddrop.crypto.pool import BlockingCallOnReactorThread

        d = task.deferLater(reactor, 0, normalise_times, self.root)
        return self.assertFailure(d, BlockingCallOnReactorThread)


class _SyncPool:
    def run(self, fn, *args):
        return maybeDeferred(fn, *args)


class ScheduleTests(unittest.TestCase):
    """At start-up, then at every midnight UTC."""

    def setUp(self):
        self.clock = Clock()
        self.clock.advance(EXACT)
        self.runs: list[float] = []

        def normalise(data_dir):
            self.assertEqual(data_dir, "/data")
            self.runs.append(self.clock.seconds())
            return file_times.NormaliseReport(1, 0)

        self.service = FileTimeNormaliser(self.clock, "/data", _SyncPool(), normalise=normalise)

    def test_at_start_up_then_at_every_midnight_utc(self):
        self.service.startService()
        self.assertEqual(self.runs, [EXACT])
        midnight = (EXACT // DAY + 1) * DAY
        self.clock.advance(midnight - EXACT - 0.001)
        self.assertEqual(len(self.runs), 1)
        self.clock.advance(0.001)
        self.assertEqual(self.runs[1:], [midnight])
        self.clock.advance(DAY)
        self.assertEqual(self.runs[1:], [midnight, midnight + DAY])
        self.assertEqual(self.service.last_run, midnight + DAY)
        self.service.stopService()
        self.clock.advance(2 * DAY)
        self.assertEqual(len(self.runs), 3)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_failed_run_is_logged_and_the_next_one_still_comes(self):
        def broken(data_dir):
            self.runs.append(self.clock.seconds())
            raise OSError("disk gone")

        self.service = FileTimeNormaliser(self.clock, "/data", _SyncPool(), normalise=broken)
        self.service.startService()
        self.assertEqual(len(self.flushLoggedErrors()), 0)  # logged as a line, not a traceback
        self.clock.advance(DAY)
        self.assertEqual(len(self.runs), 2)
        self.assertIsNone(self.service.last_run)
        self.service.stopService()


class ThreadedRunTests(unittest.TestCase):
    def test_a_run_asked_for_during_another_begins_after_it(self):
        """A caller needs a run that begins after its own activity, not one already under way."""
        from twisted.internet import reactor

        from deaddrop.crypto.pool import WorkerPool

        pool = WorkerPool(reactor, "test-times", max_threads=2)
        self.addCleanup(pool.stop)
        gate = threading.Event()
        began: list[float] = []

        def slow(data_dir):
            began.append(time.monotonic())
            gate.wait(5)
            return file_times.NormaliseReport(0, 0)

        service = FileTimeNormaliser(reactor, "/data", pool, normalise=slow)
        first = service.run()
        second = service.run()
        asked = time.monotonic()
        self.assertFalse(second.called)
        d = deferToThread(time.sleep, 0.1)
        d.addCallback(lambda _: gate.set())
        d.addCallback(lambda _: first)
        d.addCallback(lambda _: second)

        def check(_):
            self.assertEqual(len(began), 2)
            self.assertGreater(began[1], asked)

        return d.addCallback(check)
