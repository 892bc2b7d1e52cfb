"""Searching files and logs for a second: every form in which a time could have been written.

A log line, a database row or a key file that holds the second at which a source acted dates
that act. ``second_needles`` spells each second of a window in the forms software writes
times in: ISO 8601 (extended and basic, UTC and local time), twistd's log prefix, syslog and
journal style, the bare time of day (which any date format around it still contains), epoch
seconds in decimal (also the prefix of milliseconds and of a float) and as 4-byte binary
integers in both byte orders (OpenPGP packets, GnuPG's keybox and trust database, SQLite).
"""
from __future__ import annotations

import os
import struct
import time
from typing import Iterable


def _clock_forms(t: time.struct_time, zone: str) -> dict[str, bytes]:
    return {
        f"ISO 8601 ({zone})": time.strftime("%Y-%m-%dT%H:%M:%S", t).encode(),
        f"ISO 8601 basic ({zone})": time.strftime("%Y%m%dT%H%M%S", t).encode(),
        f"date and time ({zone})": time.strftime("%Y-%m-%d %H:%M:%S", t).encode(),
        f"syslog/journal ({zone})": time.strftime("%b %d %H:%M:%S", t).encode(),
        f"time of day ({zone})": time.strftime("%H:%M:%S", t).encode(),
    }


def second_needles(seconds: Iterable[int]) -> dict[str, bytes]:
    needles: dict[str, bytes] = {}
    for second in seconds:
        forms = {"epoch seconds": str(second).encode(),
                 "epoch, big-endian u32": struct.pack(">I", second),
                 "epoch, little-endian u32": struct.pack("<I", second)}
        forms.update(_clock_forms(time.gmtime(second), "UTC"))
        forms.update(_clock_forms(time.localtime(second), "local"))
        needles.update({f"{second} as {label}": value for label, value in forms.items()})
    return needles


def find_in_tree(root: str, needles: dict[str, bytes]) -> list[str]:
    """Every needle found in a file's content or name under ``root``."""
    hits = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            hits += [f"{label} in the name {os.path.join(dirpath, name)}" for label, needle in needles.items()
                     if needle in name.encode("utf-8", "surrogateescape")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            hits += find_in_bytes(data, needles, os.path.relpath(path, root))
    return hits


def find_in_bytes(data: bytes, needles: dict[str, bytes], where: str) -> list[str]:
    return [f"{label} in {where}" for label, needle in needles.items() if needle in data]


def wait_for_next_second(margin: float = 0.05) -> int:
    """Sleep until just after the next whole second. -> that second."""
    now = time.time()
    second = int(now) + 1
    time.sleep(second - now + margin)
    return second
