"""A file system of the test's own, mounted with the options under test (we run as root in CI)."""
from __future__ import annotations

import os
import subprocess
from typing import Any

from twisted.trial import unittest

from tests._support import short_tempdir


def mount_options(path: str) -> list[str]:
    """The per-mount options (``relatime``, ``noatime``...) of the mount at exactly ``path``."""
    found: list[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                found = fields[5].split(",")  # the last one mounted there is the one seen
    return found


def remount(path: str, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", path], check=True, capture_output=True)


def own_tmpfs(testcase: Any, options: str, needed_by: str) -> str:
    """A fresh tmpfs mounted with ``options`` (e.g. ``relatime``) at a short new path, unmounted
    and removed after ``testcase``; without the right to mount, the test is skipped saying so."""
    path = short_tempdir("dd-mnt-")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64m,mode=0700,{options}", "tmpfs", path],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        os.rmdir(path)
        raise unittest.SkipTest(f"{needed_by} NOT RUN: cannot mount a tmpfs (uid {os.getuid()}: "
                                f"{proc.stderr.strip() or proc.returncode}); it needs root (CI runs it as root)")

    def unmount() -> None:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)
        os.rmdir(path)

    testcase.addCleanup(unmount)
    return path
