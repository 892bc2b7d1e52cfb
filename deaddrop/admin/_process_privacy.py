# -*- test-case-name: tests.test_process_privacy -*-
"""``deaddrop-admin status``: whether other users of the host can watch the server's processes.

Without ``hidepid`` on ``/proc`` (Debian's default) any local user, ``nobody`` included, reads
every process's command line and CPU times: each gpg run the server starts is a new process, so
a submission is dated to the millisecond, with the desks it goes to (their key files are named by
fingerprint), and a source's first submission with its new key's fingerprint, the one journalists
see (docs/threat-model.md, "A local user of the server's host"). The unit's ``ProtectProc=`` hides
other processes from the server, not the server from them: only the host's ``/proc`` mount can.

Reported, not failed: most hosts have never been told to, and the admin may have reasons (another
tool that must list every process); the line says what is seen and how to stop it.
"""
from __future__ import annotations

from typing import Any

MOUNTINFO = "/proc/self/mountinfo"
# hidepid values under which another user's processes are not even listed (the names and the
# numbers of older kernels). ``noaccess`` (1) still lists them: a new pid is a new gpg run.
_HIDDEN = {"invisible", "2", "ptraceable", "4"}
FIX = ("add 'proc /proc proc defaults,hidepid=invisible 0 0' to /etc/fstab, then: "
       "mount -o remount,hidepid=invisible /proc")


def proc_options(mountinfo: str = MOUNTINFO) -> list[str] | None:
    """The options of the mount at ``/proc`` (its own and its file system's), or None if unknown."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        own, _, fs = line.partition(" - ")
        fields, fs_fields = own.split(" "), fs.split(" ")
        if len(fields) >= 6 and fields[4] == "/proc" and len(fs_fields) >= 3 and fs_fields[0] == "proc":
            found = fields[5].split(",") + fs_fields[2].split(",")  # the last one mounted there is seen
    return found


def process_privacy(mountinfo: str = MOUNTINFO) -> dict[str, Any] | None:
    """``{"hidden": bool, "detail": str}`` for status, or None where the mount table is unknown."""
    options = proc_options(mountinfo)
    if options is None:
        return None
    hidepid = next((o.split("=", 1)[1] for o in options if o.startswith("hidepid=")), None)
    if hidepid in _HIDDEN:
        return {"hidden": True, "detail": f"hidden from other users (/proc hidepid={hidepid})"}
    return {"hidden": False, "detail": (
        "VISIBLE to every user of this host (/proc " + (f"hidepid={hidepid}" if hidepid else "without hidepid")
        + "): anyone can date each submission and link a source's first one to its key; " + FIX)}
