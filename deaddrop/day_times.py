"""The times a file of the data directory is given so that a seized disk dates it only to the day,
and so that reading it later dates nothing either.

Cutting a time means: modification time midnight UTC of its day, access time the last nanosecond
of *today* (UTC). The access time matters because of ``relatime``, Debian's default mount option:
the kernel (``relatime_need_update`` in fs/inode.c) records a read when the access time is not
newer than the modification time, or not newer than the change time, or more than 24 hours old.
A cut gives every inode a new change time (the moment of the cut, which no call can set), so an
access time of midnight would be older than it and the next read would be written to the second.
The last nanosecond of today is newer than both, so no read is recorded until the next cut (at
the coming midnight); it says nothing but the day of that cut, which every change time says too.
"""
from __future__ import annotations

import os
import time

DAY_NS = 86400 * 10**9


def day_start_ns(ns: int) -> int:
    """Midnight UTC of the day ``ns`` (nanoseconds since the epoch) falls in."""
    return ns - ns % DAY_NS


def unread_atime_ns(now_ns: int | None = None) -> int:
    """An access time ``relatime`` will not move for the rest of today: its last nanosecond."""
    return day_start_ns(time.time_ns() if now_ns is None else now_ns) + DAY_NS - 1


def cut_times(path: str | int, mtime_ns: int, dir_fd: int | None = None) -> None:
    """Give ``path`` (a name in ``dir_fd``, a path, or an open descriptor) the modification time
    midnight UTC of ``mtime_ns``'s day and today's unread access time; a link's own times, never
    its target's. Raises ``OSError`` as ``os.utime`` does."""
    times = (unread_atime_ns(), day_start_ns(mtime_ns))
    if isinstance(path, int):
        os.utime(path, ns=times)
    else:
        os.utime(path, ns=times, dir_fd=dir_fd, follow_symlinks=False)
