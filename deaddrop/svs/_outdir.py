"""Writing into OUTDIR: the only place plaintext is ever written.

Files are written to a private temp name inside their final folder and only given their real
name once complete and verified, so a failed or interrupted decryption never leaves a
half-written (or unauthenticated) file under a real name. Names are never trusted: every path
component passes :func:`deaddrop.svs._names.sanitise_filename` (or is one we built), and an
existing file is never replaced.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import BinaryIO

from deaddrop.svs._errors import ItemError, SvsError
from deaddrop.svs._names import numbered

TEMP_PREFIX = ".deaddrop-svs-"
TEMP_SUFFIX = ".part"
_MAX_COPIES = 10_000


def _is_single_component(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name and (
        os.altsep is None or os.altsep not in name
    )


def _same_bytes(a: str, b: str) -> bool:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        with os.fdopen(os.open(a, flags), "rb") as fa, os.fdopen(os.open(b, flags), "rb") as fb:
            while True:
                x, y = fa.read(1024 * 1024), fb.read(1024 * 1024)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


class PendingFile:
    """A temp file inside the target folder; :meth:`commit` gives it its final name."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for _ in range(100):
            path = os.path.join(folder, f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}")
            try:
                fd = os.open(path, flags, 0o600)  # plaintext: readable by the operator only
            except FileExistsError:
                continue
            break
        else:  # pragma: no cover - 100 collisions of 64 random bits
            raise ItemError(f"cannot create a temp file in {folder}")
        self.path = path
        self.file: BinaryIO = os.fdopen(fd, "wb")
        self._done = False

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def commit(self, name: str, suffix: str = "") -> str:
        """Give the file ``name`` (or ``name (2)``, ``(3)``...) in its folder; return the path.

        ``suffix`` goes after the number: ``report (2).pdf.gpg``, not ``report.pdf (2).gpg``.
        """
        if not _is_single_component(name + suffix):
            raise ItemError(f"refusing unsafe output name {name!r}")  # sanitiser bug guard
        self.file.flush()
        os.fsync(self.file.fileno())  # the operator may pull the USB stick right after
        self.file.close()
        for n in range(1, _MAX_COPIES):
            candidate = os.path.join(self.folder, numbered(name, n) + suffix)
            try:
                # link() fails if the name exists, even as a dangling symlink: an atomic
                # "rename unless taken", which rename() (it replaces) is not.
                os.link(self.path, candidate)
            except FileExistsError:
                continue
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS):
                    raise
                # No hard links (FAT/exFAT USB sticks): check, then rename. Racy in theory,
                # but the SVS is single-user and offline.
                if os.path.lexists(candidate):
                    continue
                os.rename(self.path, candidate)
            else:
                os.unlink(self.path)
            self._done = True
            return candidate
        raise ItemError(f"too many files named like {name!r} in {self.folder}")

    def identical_existing(self, name: str, suffix: str = "") -> str | None:
        """An existing ``name`` (or ``name (2)``...) in the folder with exactly this file's
        bytes, if any: the same file decrypted again, to skip rather than copy."""
        self.file.flush()
        size = os.fstat(self.file.fileno()).st_size
        for n in range(1, _MAX_COPIES):
            candidate = os.path.join(self.folder, numbered(name, n) + suffix)
            try:
                st = os.lstat(candidate)
            except FileNotFoundError:
                return None
            if stat.S_ISREG(st.st_mode) and st.st_size == size and _same_bytes(self.path, candidate):
                return candidate
        return None

    def discard(self) -> None:
        """Remove the temp file (plaintext of a failed item must not linger)."""
        if self._done:
            return
        self._done = True
        try:
            self.file.close()
        finally:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class OutDir:
    """The output directory and the sub-folders (one per source) inside it."""

    def __init__(self, root: str) -> None:
        root = os.path.abspath(root)
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except FileExistsError:
            raise SvsError(f"output {root} exists and is not a directory") from None
        except OSError as e:
            raise SvsError(f"cannot create output directory {root}: {e.strerror}") from None
        if not os.path.isdir(root):
            raise SvsError(f"output {root} is not a directory")
        self.root = root

    def folder(self, *components: str) -> str:
        """``root/c1/c2...``, created 0700; each component must already be sanitised.

        An existing component that is a symlink (or not a directory) is refused: a planted
        ``OUTDIR/brave_otter -> /etc`` must not redirect plaintext out of OUTDIR.
        """
        path = self.root
        for comp in components:
            if not _is_single_component(comp):
                raise ItemError(f"refusing unsafe folder name {comp!r}")
            path = os.path.join(path, comp)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):
                    raise ItemError(f"{path} exists and is not a real directory (symlink?)") from None
        return path

    def new_file(self, folder: str) -> PendingFile:
        return PendingFile(folder)

    def relative(self, path: str) -> str:
        return os.path.relpath(path, self.root)
