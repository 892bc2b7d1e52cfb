"""``deaddrop-admin status``: the data directory is not on a mount that dates every read.

The server cuts file times to the day and leaves access times ahead of every change
(``deaddrop.day_times``), which hides reads under ``relatime`` (Linux's default) and, trivially,
``noatime``. Under ``strictatime`` the kernel writes every read down to the nanosecond whatever
the access time was: a source opening a reply would be dated until the next midnight's cut.
That mount is a ``[FAIL]`` naming the fix.
"""
from __future__ import annotations

import os
import re
from typing import Any

MOUNTINFO = "/proc/self/mountinfo"
_ESCAPED = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040


def _unescape(field: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 8)), field)


def _contains(mount_point: str, path: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> tuple[str, list[str]] | None:
    """The mount point holding ``path`` and its per-mount options, or None if unknown."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    path = os.path.realpath(path)
    found = None
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 6:
            continue
        mount_point = _unescape(fields[4])
        # The deepest mount point wins; of two at one point, the later one hides the earlier.
        if _contains(mount_point, path) and (found is None or len(mount_point) >= len(found[0])):
            found = (mount_point, fields[5].split(","))
    return found


def access_time_check(data_dir: str, mountinfo: str = MOUNTINFO) -> dict[str, Any] | None:
    """The ``access_times`` check (None where the mount table cannot be read)."""
    found = mount_of(data_dir, mountinfo)
    if found is None:
        return None
    mount_point, options = found
    if "noatime" in options:
        return {"name": "access_times", "ok": True, "path": mount_point,
                "detail": f"{mount_point} is mounted noatime: no read is recorded"}
    if "relatime" in options:
        return {"name": "access_times", "ok": True, "path": mount_point,
                "detail": f"{mount_point} is mounted relatime: access times kept ahead of changes hide reads"}
    return {"name": "access_times", "ok": False, "path": mount_point, "detail": (
        f"{mount_point} (holding {data_dir}) is mounted strictatime: every read, such as a source opening a "
        "reply, is recorded to the second until the next midnight UTC; mount it relatime (the default) or "
        "noatime instead (its line in /etc/fstab, then mount -o remount)")}
