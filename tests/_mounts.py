"""A file system of the test's own, mounted with the options under test (we run as root in CI)."""
from __future__ import annotations

import os
import shutil
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
    _mount(testcase, ["-t", "tmpfs", "-o", f"size=64m,mode=0700,{options}", "tmpfs", path], path,
           f"{needed_by} NOT RUN: cannot mount a tmpfs")
    return path


def own_ext4(testcase: Any, options: str, needed_by: str) -> str:
    """A fresh ext4 file system (Debian's default: a file in /tmp, through a loop device) mounted
    with ``options`` at a short new path, unmounted and removed after ``testcase``. ext4, not
    tmpfs, where it matters how a disk file system dates a file: ext4 gives a file written
    through a shared mapping (SQLite's ``-shm``) a new modification time at the first write after
    the kernel wrote its pages out, tmpfs never does. Skipped, saying so, without the right to mount."""
    work = short_tempdir("dd-ext4-")
    testcase.addCleanup(shutil.rmtree, work, True)
    image, path = os.path.join(work, "disk.img"), os.path.join(work, "m")
    os.mkdir(path)
    with open(image, "wb") as f:
        f.truncate(128 * 2**20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", image], capture_output=True, text=True)
    if made.returncode != 0:
        raise unittest.SkipTest(f"{needed_by} NOT RUN: mkfs.ext4 failed ({made.stderr.strip() or made.returncode})")
    _mount(testcase, ["-o", f"loop,{options}", image, path], path, f"{needed_by} NOT RUN: cannot mount an ext4 image")
    os.chmod(path, 0o700)
    return path


def _mount(testcase: Any, args: list[str], path: str, refused: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        os.rmdir(path)
        raise unittest.SkipTest(f"{refused} (uid {os.getuid()}: {proc.stderr.strip() or proc.returncode}); "
                                "it needs root (CI runs it as root)")

    def unmount() -> None:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)
        os.rmdir(path)

    testcase.addCleanup(unmount)
