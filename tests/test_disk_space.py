"""Disk admission (issue 21): ``--disk-reserve`` parsing and the accounting of uploads in flight.

The file system is a stand-in ``statvfs`` here; tests/integration/test_large_uploads.py fills a
real tmpfs."""
from __future__ import annotations

import os
from dataclasses import dataclass

from twisted.python import usage
from twisted.trial import unittest

from deaddrop.config import Config, ConfigError
from deaddrop.admission.disk_space import (
    ALLOWANCE, HORIZON, TEXT_ROOM, DiskReserve, DiskSpace, NoRoom, round_down_coarsely,
)
from deaddrop.tap import Options
from tests._support import test_svs

GB, MB = 10**9, 10**6


@dataclass
class FakeFs:
    free: int
    total: int = 100 * GB

    def __call__(self, path: str) -> os.statvfs_result:
        blocks, avail = self.total // 4096, self.free // 4096
        return os.statvfs_result((4096, 4096, blocks, avail, avail, 0, 0, 0, 0, 255))


@dataclass(eq=False)  # counted by identity, as an upload's progress is
class Written:
    total: int = 0
    pace: float | None = None  # bytes a second, once known

    def expected(self, seconds: float) -> float | None:
        return None if self.pace is None else self.pace * seconds


class ReserveTests(unittest.TestCase):
    def test_sizes_shares_and_both(self):
        self.assertEqual(DiskReserve.parse("2GB"), DiskReserve(2 * GB, 0.0))
        self.assertEqual(DiskReserve.parse("500MiB"), DiskReserve(500 << 20, 0.0))
        self.assertEqual(DiskReserve.parse("123456"), DiskReserve(123456, 0.0))
        self.assertEqual(DiskReserve.parse("5%"), DiskReserve(0, 5.0))
        self.assertEqual(DiskReserve.parse(" 2gb , 5% "), DiskReserve(2 * GB, 5.0))

    def test_the_larger_of_size_and_share_wins(self):
        default = DiskReserve.parse(Config.disk_reserve)
        self.assertEqual(default.bytes_for(10 * GB), 2 * GB)  # a small disk keeps 2 GB
        self.assertEqual(default.bytes_for(1000 * GB), 50 * GB)  # a big one keeps 5%

    def test_bad_values_say_what_is_expected(self):
        for bad in ("", "lots", "2XB", "-1GB", "150%", "1GB,2GB,3GB", "x%"):
            with self.assertRaises(ValueError) as caught:
                DiskReserve.parse(bad)
            self.assertIn("--disk-reserve", str(caught.exception))

    def test_options_take_it_and_five_gigabyte_uploads(self):
        options = Options()
        options.parseOptions(["--submission-key", test_svs().public_key_path, "--tor", "none",
                              "--disk-reserve", "10GB,3%", "--max-upload-size", str(5 * GB)])
        self.assertEqual(options.config.disk_reserve, "10GB,3%")
        self.assertEqual(options.config.max_upload_size, 5 * GB)
        with self.assertRaises(usage.UsageError) as caught:
            Options().parseOptions(["--submission-key", test_svs().public_key_path, "--tor", "none",
                                    "--disk-reserve", "plenty"])
        self.assertIn("--disk-reserve", str(caught.exception))
        with self.assertRaises(ConfigError):
            Config(submission_key=test_svs().public_key_path, tor="none", disk_reserve="1%,2%,3%").validated()


class AdmissionTests(unittest.TestCase):
    def space(self, free: int, reserve: str = "1GB") -> tuple[DiskSpace, FakeFs]:
        fs = FakeFs(free)
        return DiskSpace("/data/tmp", DiskReserve.parse(reserve), statvfs=fs), fs

    def test_an_upload_that_fits_beyond_the_reserve_is_admitted_and_one_that_does_not_is_refused(self):
        space, _ = self.space(free=5 * GB)
        space.admit(3 * GB).release()
        with self.assertRaises(NoRoom) as caught:
            space.admit(4 * GB)
        largest = caught.exception.largest
        self.assertLess(largest, 4 * GB)
        self.assertGreater(largest, 4 * GB - TEXT_ROOM - 3 * MB)  # overhead: ~1/4096 and 1 MiB
        space.admit(largest).release()  # the size it names is admitted
        with self.assertRaises(NoRoom):
            space.admit(largest + 4096)

    def test_uploads_in_flight_hold_what_they_have_yet_to_write(self):
        space, fs = self.space(free=5 * GB)
        written = Written()
        first = space.admit(3 * GB, written)
        with self.assertRaises(NoRoom):
            space.admit(2 * GB)  # fits the free space, not with the first one's 3 GB to come
        # As the first writes, its bytes leave the free space and its hold shrinks alike.
        written.total = 2 * GB
        fs.free -= 2 * GB
        with self.assertRaises(NoRoom):
            space.admit(2 * GB)
        first.release()
        fs.free += 1 * GB  # the rest never came (the upload failed; its part file removed)
        space.admit(2 * GB)
        self.assertEqual(space.in_flight, 1)

    def test_nothing_is_admitted_when_the_disk_is_within_its_reserve(self):
        space, _ = self.space(free=900 * MB)
        self.assertEqual(space.largest_upload(), 0)
        with self.assertRaises(NoRoom) as caught:
            space.admit(1)
        self.assertEqual(caught.exception.largest, 0)

    def test_files_leave_the_text_room_which_text_messages_may_take_down_to_the_reserve(self):
        space, fs = self.space(free=1 * GB + 200 * MB)
        written = Written()
        # An upload holding all the room files may take (a trickle announcing a huge body).
        held = space.admit(space.largest_upload(), written)
        self.assertEqual(space.largest_upload(), 0)
        with self.assertRaises(NoRoom) as caught:
            space.admit(1, Written())  # a file would eat into the text room
        self.assertEqual(caught.exception.largest, 0)
        # A text-only message still fits, and so do many more while each is written.
        messages = [space.admit(400_000, text=True) for _ in range(40)]
        for message in messages:
            message.release()
            fs.free -= 400_000  # its ciphertext is now on disk
        space.admit(400_000, text=True).release()
        # Text stops at the reserve itself.
        fs.free = 1 * GB + (1 << 20) + 8192 + held.remaining()  # room for a short message, no more
        with self.assertRaises(NoRoom):
            space.admit(100_000, text=True)
        space.admit(10, text=True).release()

    def test_once_its_pace_is_known_an_upload_holds_what_it_would_write_over_the_horizon(self):
        space, fs = self.space(free=5 * GB)
        trickle, fast = Written(), Written()
        space.admit(2 * GB, trickle)
        space.admit(1 * GB, fast)
        with self.assertRaises(NoRoom):
            space.admit(2 * GB)  # both unproven: they hold all they may write
        trickle.pace, fast.pace = 16 * 1024, 4 * MB  # the trickle would need 36 hours, the fast one 4 minutes
        holds = space.holds()
        self.assertEqual(holds[trickle], ALLOWANCE + int(16 * 1024 * HORIZON))
        self.assertGreater(holds[fast], 1 * GB)  # all of it: it finishes within the horizon
        self.assertEqual(space.holds(promised_in_part=True), {trickle: holds[trickle]})
        space.admit(2 * GB)
        trickle.pace = None  # a body complete (or unproven again) holds all it may still write
        self.assertGreater(space.holds()[trickle], 2 * GB)



class WhatMayBeSaidTests(unittest.TestCase):
    """The size a refusal names (and the disk watch logs): what fits with no upload in flight,
    rounded down coarsely, so another source's upload as it comes moves neither (an adversary
    review watched it drop from 404 to 373 MB within 0.1 s of another source starting 30 MB)."""

    def test_uploads_in_flight_move_neither_by_what_they_hold_nor_by_what_they_have_written(self):
        fs = FakeFs(free=1 * GB + TEXT_ROOM + 404 * MB)
        space = DiskSpace("/data/tmp", DiskReserve.parse("1GB"), statvfs=fs)
        before = space.largest_upload_alone()
        self.assertGreater(before, 400 * MB)
        written = Written()
        space.admit(30 * MB, written)  # another source starts a 30 MB upload
        self.assertLess(space.largest_upload(), before - 29 * MB)  # admission counts it, as it must
        self.assertEqual(space.largest_upload_alone(), before)
        for total in (1 * MB, 8 * MB, 20 * MB, 30 * MB):  # its bytes land on disk as they come
            written.total = total
            fs.free = 1 * GB + TEXT_ROOM + 404 * MB - total
            self.assertEqual(round_down_coarsely(space.largest_upload_alone()), round_down_coarsely(before))

    def test_sizes_are_rounded_down_to_one_two_or_five_times_a_power_of_ten(self):
        for n, shown in ((0, 0), (-5, 0), (1, 1), (99_999, 50_000), (100_000, 100_000), (199_999, 100_000),
                         (404 * MB, 200 * MB), (373 * MB, 200 * MB), (999 * MB, 500 * MB), (5 * GB, 5 * GB),
                         (13_400_000, 10 * MB), (2 * GB - 1, 1 * GB)):
            self.assertEqual(round_down_coarsely(n), shown, n)
