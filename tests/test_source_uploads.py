"""What one upload body holds while it arrives (``UploadHold``), on a Clock: no threads, and a
stand-in file system whose free space follows what the simulated uploads write."""
import os

from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.admission.queues import Admission, KeyBusy
from deaddrop.admission.upload_slots import UploadSlots
from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.newsroom.uploads import UploadHold
from deaddrop.admission.disk_space import DiskReserve, DiskSpace

KIB, MB, GB = 1024, 10**6, 10**9


class UploadHoldTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.slots = UploadSlots(Admission(pool=None, slots=4, clock=self.clock.seconds), per_key=2, per_circuit=4)

    def hold(self, source_id):
        return UploadHold(self.slots, None, SourceActivity(self.clock.seconds), source_id, None, evict=lambda: None)

    def test_a_body_takes_one_slot_however_many_files_it_carries(self):
        # Issue 27: each file of one body took another of the source's two slots, and the
        # third file was refused as "another submission ... still being received".
        body = self.hold(7)
        for _ in range(10):
            body.admit(1000)
        self.assertEqual((self.slots.holding(7), self.slots.admission.running), (1, 1))
        second = self.hold(7)
        second.admit(1000)
        self.assertRaises(KeyBusy, self.hold(7).admit, 1000)  # a third submission at once: truly busy
        body.release()
        second.release()
        self.assertEqual((self.slots.holding(7), self.slots.admission.running), (0, 0))


class _Fs:
    """A file system whose free space follows what the simulated uploads write."""

    def __init__(self, total: int, used: int = 5 * MB) -> None:
        self.total, self.free = total, total - used
        self.lowest = self.free

    def __call__(self, path: str) -> os.statvfs_result:
        blocks, avail = self.total // 4096, self.free // 4096
        return os.statvfs_result((4096, 4096, blocks, avail, avail, 0, 0, 0, 0, 255))

    def write(self, n: int) -> None:
        self.free -= n
        self.lowest = min(self.lowest, self.free)


class _Body:
    """One upload body as ``uploads.start_upload`` drives it: admitted before its first file
    byte, its bytes written as ciphertext (about as many), ended to make room or finished."""

    def __init__(self, world: "DiskWorldTests", name: str, claims: int, rate: int) -> None:
        self.world, self.name, self.claims, self.rate = world, name, claims, rate
        self.sent = 0
        self.ended = self.finished = False
        self.hold = UploadHold(world.slots, world.disk, world.activity, name, None, evict=self._evicted)
        self.hold.admit(claims)  # NoRoom, KeyBusy or Busy: refused

    def tick(self, seconds: float) -> None:
        if self.ended or self.finished:
            return
        n = min(int(self.rate * seconds), self.claims - self.sent)
        if n:
            self.sent += n
            self.world.fs.write(n)
            self.hold.progress.received(n)  # may end this body, or another, to keep the reserve
        if not self.ended and self.sent >= self.claims:
            self.finished = True
            self.hold.progress.ended()
            self.hold.release()  # committed: its ciphertext stays on the disk

    def _evicted(self) -> None:
        self.ended = True
        self.world.fs.free += self.sent  # its part file is removed
        self.hold.release()


class DiskWorldTests(unittest.TestCase):
    """Issue 26, item 5: disk room held by trickles, on a Clock (the real-socket run is
    tests/integration/test_large_uploads.py and bench/trickles.py)."""

    def world(self, total: int, reserve: str, slots: int = 256) -> None:
        self.clock = Clock()
        self.fs = _Fs(total)
        self.disk = DiskSpace("/data/tmp", DiskReserve.parse(reserve), statvfs=self.fs)
        self.reserve = self.disk.reserve.bytes_for(total)
        self.activity = SourceActivity(lambda: 0.0)
        self.slots = UploadSlots(Admission(pool=None, slots=slots, clock=self.clock.seconds), per_key=2,
                                 per_circuit=16)
        self.bodies: list[_Body] = []

    def start(self, name: str, claims: int, rate: int) -> _Body:
        body = _Body(self, name, claims, rate)
        self.bodies.append(body)
        return body

    def go_on(self, seconds: float, step: float = 1.0) -> None:
        for _ in range(int(seconds / step)):
            self.clock.advance(step)
            for body in list(self.bodies):
                body.tick(step)
            self.assertGreaterEqual(self.fs.free, self.reserve)

    def test_ten_trickles_claiming_100_mb_leave_a_real_200_mb_upload_room_on_a_1200_mb_disk(self):
        self.world(total=1200 << 20, reserve="100MB")
        trickles = [self.start(f"trickle {i}", 100 * MB, rate=20 * KIB) for i in range(10)]
        self.go_on(30)
        real = self.start("source", 200 * MB, rate=2 * MB)
        self.go_on(110)
        self.assertTrue(real.finished)
        self.assertEqual([t.ended for t in trickles], [False] * 10)  # nobody had to go
        self.assertGreaterEqual(self.fs.lowest, self.reserve)

    def test_a_hundred_trickles_claiming_500_mb_at_16_kib_s_leave_a_real_100_mb_upload_room(self):
        # A 40 GB disk keeps 2 GB: the trickles' Content-Lengths (50 GB) would not even fit.
        self.world(total=40 * GB, reserve="2GB,5%")
        for i in range(100):  # four a second, as fast as a client opens them
            self.start(f"trickle {i}", 500 * MB, rate=16 * KIB)
            if i % 4 == 3:
                self.go_on(1)
        self.go_on(60)
        held = sum(self.disk.holds().values())
        self.assertLess(held, 3 * GB)  # 100 x (16 MiB + 10 minutes at 16 KiB/s), not 50 GB
        real = self.start("source", 100 * MB, rate=1 * MB)
        self.go_on(110)
        self.assertTrue(real.finished)
        self.assertFalse(any(b.ended for b in self.bodies))

    def test_when_the_promises_outgrow_the_disk_uploads_sending_least_are_ended_first(self):
        # Room for files here: ~1,086 MB. Three uploads that would take hours; past their grace
        # each holds ALLOWANCE plus ten minutes at its pace, which lets a fast 900 MB one in.
        self.world(total=1200 << 20, reserve="100MB")
        silent = self.start("silent", 500 * MB, rate=0)  # holds room, sends nothing
        slow = self.start("slow", 500 * MB, rate=8 * KIB)
        self.go_on(15)
        steady = self.start("steady", 500 * MB, rate=100 * KIB)
        self.go_on(15)
        fast = self.start("fast", 900 * MB, rate=4 * MB)  # would finish within the horizon
        self.go_on(300)
        self.assertTrue(fast.finished)
        self.assertEqual((silent.ended, slow.ended, steady.ended), (False, False, False))
        # The slow ones keep writing: the disk can no longer keep what they were promised.
        self.go_on(400)
        self.assertEqual((silent.ended, slow.ended, steady.ended), (True, False, False))
        self.go_on(2000)
        # Then the next sending least, then the last: 500 MB beside 900 MB never fitted.
        self.assertEqual((silent.ended, slow.ended, steady.ended), (True, True, True))
        self.assertGreaterEqual(self.fs.lowest, self.reserve)
        self.assertEqual((self.slots.admission.running, self.disk.in_flight), (0, 0))
