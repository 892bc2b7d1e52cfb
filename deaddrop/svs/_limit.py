"""How much plaintext one decrypted file may write: a cap, and the free space in OUTDIR.

OpenPGP compression and gzip both expand: a 1.2 KB server file can decrypt to 300 MiB, and
concatenated gzip members make the output unbounded. The server never accepts an upload over
its ``--max-upload-size`` (500 MiB by default), so a real file decrypts to about that much; the
default cap is twice it. Free space is checked before anything is written, and a file that
would leave less than :data:`RESERVE` free fails instead, so a bomb can't fill the disk.
"""
from __future__ import annotations

import os

from deaddrop.limits import MAX_UPLOAD_SIZE, MiB
from deaddrop.svs._errors import ItemError

RESERVE = 16 * MiB  # left free in OUTDIR whatever happens (the SVS keeps working)
DEFAULT_MAX_OUTPUT = 2 * MAX_UPLOAD_SIZE


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} bytes"


class OutputLimit:
    """The per-file budget, recomputed for each file from the cap and the free space."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_OUTPUT, reserve: int = RESERVE) -> None:
        if max_bytes < 1:
            raise ValueError("the output cap must be positive")
        self.max_bytes = max_bytes
        self.reserve = reserve

    def start(self, folder: str, expected: int | None) -> "Budget":
        """Check the space in ``folder`` before writing a file of about ``expected`` bytes."""
        st = os.statvfs(folder)
        room = st.f_bavail * st.f_frsize - self.reserve
        if room <= 0 or (expected is not None and expected > room):
            raise ItemError(f"not enough free space in OUTDIR ({_mib(max(room, 0))} usable): not written")
        return Budget(self.max_bytes, room)


class Budget:
    """Counts the bytes of one file; raises :class:`ItemError` the moment one is too many."""

    def __init__(self, cap: int, room: int) -> None:
        self.cap = cap
        self.room = room
        self.written = 0

    def add(self, n: int) -> None:
        self.written += n
        if self.written > self.cap:
            raise ItemError(
                f"decrypts to more than {_mib(self.cap)} (--max-output-size; a decompression bomb?): not written"
            )
        if self.written > self.room:
            raise ItemError(f"not enough free space in OUTDIR for it ({_mib(self.room)} usable): not written")
