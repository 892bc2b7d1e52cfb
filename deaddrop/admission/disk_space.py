# -*- test-case-name: tests.test_disk_space -*-
"""Disk admission: an upload is taken only if the disk can hold it and still keep a reserve.

A full disk is an outage (SQLite cannot grow its journal, logs stop, replies cannot be stored),
and a file that fails at 90% after an hour over Tor is an hour of a source's nerve lost. So
before the first file byte is encrypted, the body's ``Content-Length`` (an upper bound on its
ciphertext, give or take the small overhead counted below) is compared with the free space of
the store's file system less ``--disk-reserve`` less what uploads already in flight will still
write. An upload that does not fit is refused at once, and the refusal names a size that fits,
coarsely and as if no other upload were in flight (``largest_upload_alone``).

Every stored part goes through this check: a file body at its first file byte, a text-only
message before it is encrypted (its largest ciphertext). When a file would be refused, slow
uploads holding space may be ended to make room (``UploadHold``, with the pump slots'
fairness rule of ``upload_slots``). File bodies must also leave ``TEXT_ROOM`` free above the
reserve, which only text-only messages may take: uploads holding all the room they can never
turn a short message away.

The free space is read per admission (one ``statvfs``, no I/O); bytes an upload has already
written show up in it, so an upload in flight counts only what it has yet to write.

What an upload in flight holds follows what actually arrives (issue 26). A newcomer must fit
whole, and for its first ``GRACE`` seconds (``upload_slots``) it holds all it may still write.
From then on it holds what it would write over the next ``HORIZON`` at its measured rate, plus
``ALLOWANCE``, if that is less: an upload that will finish within the horizon keeps all its
room, and a trickle announcing 500 MB at 16 KiB/s holds about 27 MB, not 500 MB. Such a
promise can outgrow the disk as the slow uploads go on writing; ``UploadHold`` then ends those
sending least, first those that send nothing, before the reserve is touched.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Protocol

# Ciphertext per plaintext byte: gzip stored blocks (5 bytes per 65,535) and OpenPGP partial
# lengths (a byte or so per 8 KiB) stay well under 1/4096; a session key packet, the MDC and
# the headers stay well under the fixed allowance, which also covers what committing the part
# adds beside it: its rows in the database's WAL and, on a source's first submission, its key
# pair in the keyring (tens of KB together).
_OVERHEAD_DIVISOR = 4096
_FIXED_OVERHEAD = 1 << 20
# Body bytes fed to the encryptor but perhaps not yet on disk: its buffer (1 MiB), the pipe to
# gpg (1 MiB) and gpg's own buffers. Until written they are still counted as needed.
_NOT_YET_WRITTEN = 4 << 20
# An upload whose pace is known holds what it would write over this much time at that pace...
HORIZON = 600.0  # seconds
# ... plus this much (which covers what is fed but not yet written, and a burst), if that is
# less than it may still write. 100 trickles at 16 KiB/s hold ~2.6 GB, not their Content-Length.
ALLOWANCE = 16 << 20

# Room above the reserve that file uploads can never take: a file body is admitted only if it
# leaves this much free, a text-only message down to the reserve itself. So trickling uploads
# that announce huge bodies (and are not ended, see upload_slots) cannot make every message get
# "no room". A stored message is at most ~400 KB (100,000 characters, <= 4 UTF-8 bytes each,
# compressed before encryption; an ordinary one is a few KB) and one being encrypted holds
# ~1.4 MiB (its length plus the fixed allowance): 64 MiB holds thousands of ordinary messages
# (over 150 at the maximum size) while disk_watch tells the admin the disk is short.
TEXT_ROOM = 64 << 20

DEFAULT_RESERVE = "2GB,5%"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def round_down_coarsely(n_bytes: int) -> int:
    """``n_bytes`` rounded down to 1, 2 or 5 times a power of ten (0 stays 0): a size that may
    be shown or logged, which the stored bytes of one submission rarely move (it changes at
    three points in each tenfold)."""
    if n_bytes <= 0:
        return 0
    power = 10 ** (len(str(n_bytes)) - 1)
    return max(step * power for step in (1, 2, 5) if step * power <= n_bytes)


class NoRoom(Exception):
    """Not enough free space beyond the reserve; ``largest`` bytes of upload would fit now."""

    def __init__(self, largest: int) -> None:
        super().__init__(f"not enough free disk space (an upload of {largest} bytes would fit)")
        self.largest = largest


@dataclass(frozen=True)
class DiskReserve:
    """``--disk-reserve``: a size (``2GB``, ``500MiB``, bytes), a share (``5%``) of the file
    system, or both separated by a comma: then the larger of the two is kept free."""

    size: int = 0
    percent: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "DiskReserve":
        size, percent = 0, 0.0
        items = [item.strip() for item in str(text).split(",")]
        if not 1 <= len(items) <= 2:
            raise ValueError(f"--disk-reserve {text!r}: give a size (2GB), a share (5%) or both (2GB,5%)")
        for item in items:
            if item.endswith("%"):
                try:
                    value = float(item[:-1])
                except ValueError:
                    value = -1.0
                if not 0 <= value < 100:
                    raise ValueError(f"--disk-reserve {text!r}: a share must be between 0% and 100%")
                percent = max(percent, value)
                continue
            match = _SIZE.match(item)
            if match is None:
                raise ValueError(f"--disk-reserve {text!r}: {item!r} is not a size such as 2GB, 500MB or 5%")
            size = max(size, int(float(match.group(1)) * _UNITS[match.group(2).lower()]))
        return cls(size, percent)

    def bytes_for(self, total: int) -> int:
        """The bytes to keep free on a file system of ``total`` bytes."""
        return max(self.size, int(total * self.percent / 100))


class Written(Protocol):
    """How many bytes of its body an upload has fed to encryption so far, and its pace."""

    total: int

    def expected(self, seconds: float) -> float | None:
        """Bytes it would send over the next ``seconds``; None: not known (yet)."""


class Reservation:
    def __init__(self, space: "DiskSpace", need: int, written: Written | None) -> None:
        self._space = space
        self.need = need
        self._written = written

    def left(self) -> int:
        """What this upload may still write at most (what it wrote is already off the free space)."""
        written = self._written.total if self._written is not None else 0
        return max(0, self.need - max(0, written - _NOT_YET_WRITTEN))

    def remaining(self) -> int:
        """What this upload holds now: all it may still write, or, once its pace is known, what
        it would write over the next ``HORIZON`` plus ``ALLOWANCE`` if that is less."""
        left = self.left()
        expected = self._written.expected(HORIZON) if self._written is not None else None
        if expected is None:
            return left
        return min(left, ALLOWANCE + int(expected))

    def release(self) -> None:
        self._space._held.pop(self, None)


class DiskSpace:
    """Admits uploads against the free space of the file system holding ``path``."""

    def __init__(self, path: str, reserve: DiskReserve,
                 statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> None:
        self.path = path
        self.reserve = reserve
        self._statvfs = statvfs
        self._held: dict[Reservation, None] = {}

    @staticmethod
    def needed_for(body_bytes: int) -> int:
        """Disk space a body of ``body_bytes`` can take once encrypted, at most."""
        return body_bytes + body_bytes // _OVERHEAD_DIVISOR + _FIXED_OVERHEAD

    def room(self, text: bool = False) -> int:
        """Bytes that file uploads (``text``: a text-only message) may still take: free space
        less the reserve, less what uploads in flight have yet to write and, for files, less
        ``TEXT_ROOM`` (may be negative)."""
        return self._free_above_reserve(text) - sum(r.remaining() for r in self._held)

    def _free_above_reserve(self, text: bool = False) -> int:
        st = self._statvfs(self.path)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        return free - self.reserve.bytes_for(total) - (0 if text else TEXT_ROOM)

    def largest_upload(self) -> int:
        """The largest file body that would be admitted now (0: none)."""
        return self._largest_for(self.room())

    def largest_upload_alone(self) -> int:
        """The largest file body that would be admitted were no upload in flight (0: none): what
        may be said to a source or logged. Uploads in flight move it neither by what they hold
        nor by what they have written so far (give or take the few MiB not yet on disk), so it
        follows only what is stored or deleted: a figure that followed other sources' uploads
        as they came was a clock of them (docs/threat-model.md, "Shared stores")."""
        written = sum(min(r.need, r._written.total) for r in self._held if r._written is not None)
        return self._largest_for(self._free_above_reserve() + written)

    @staticmethod
    def _largest_for(room: int) -> int:
        return max(0, (room - _FIXED_OVERHEAD) * _OVERHEAD_DIVISOR // (_OVERHEAD_DIVISOR + 1))

    def admit(self, body_bytes: int, written: Written | None = None, text: bool = False) -> Reservation:
        """Hold the space a body of ``body_bytes`` needs, or raise ``NoRoom``. ``written``
        tells how much of it has been fed to encryption (what is written frees the hold);
        ``text``: a text-only message, which may take ``TEXT_ROOM`` too."""
        need = self.needed_for(body_bytes)
        if need > self.room(text):
            raise NoRoom(self.largest_upload())
        reservation = Reservation(self, need, written)
        self._held[reservation] = None
        return reservation

    def holds(self, promised_in_part: bool = False) -> dict[Written, int]:
        """What each upload in flight (by its ``written`` counter) holds now (``remaining``).
        ``promised_in_part``: only uploads holding less than they may still write (those that
        would not finish within the horizon at their pace)."""
        out: dict[Written, int] = {}
        for r in self._held:
            if r._written is not None:
                held = r.remaining()
                if not promised_in_part or held < r.left():
                    out[r._written] = out.get(r._written, 0) + held
        return out

    @property
    def in_flight(self) -> int:
        return len(self._held)


__all__ = ["DiskReserve", "DiskSpace", "NoRoom", "Reservation", "DEFAULT_RESERVE", "TEXT_ROOM", "HORIZON", "ALLOWANCE",
           "round_down_coarsely"]
