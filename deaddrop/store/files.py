"""The on-disk store: ``DATA/store/<filesystem_id>/N-<designation>-<kind>.gpg``.

Only ciphertext ever lives here. New files are written under ``DATA/tmp/`` (same file
system), fsynced, and renamed into place only after their metadata row is committed, so a
crash leaves either nothing or a complete file; ``recover`` then reconciles the two.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import dataclass
from typing import BinaryIO

from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.day_times import cut_times
from deaddrop.durable import fsync_directory, rename_durably

_FILESYSTEM_ID = re.compile(r"^[a-z2-7]{52}$")
# The designation part: "amber_quiet_lantern", or "amber_lantern" for a source made before
# designations had three words.
_STORED_NAME = re.compile(r"^[1-9][0-9]{0,9}-[a-z]+(?:_[a-z]+){1,2}-(msg|doc\.gz|reply)\.gpg$")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DAY = 86400


def day_of(timestamp: float) -> float:
    """Midnight UTC of ``timestamp``'s day: the only precision a stored time keeps."""
    return float(int(timestamp // _DAY) * _DAY)


def stored_filename(n: int, designation: str, kind: str) -> str:
    """``kind`` is "msg", "doc" or "reply"; documents are gzip containers, hence ``doc.gz``."""
    suffix = {"msg": "msg", "doc": "doc.gz", "reply": "reply"}[kind]
    return f"{n}-{designation.replace(' ', '_')}-{suffix}.gpg"


@dataclass(frozen=True)
class RecoveryReport:
    temp_files_removed: int
    rows_without_file: int
    files_without_row: int


class Store:
    def __init__(self, data_dir: str) -> None:
        self.root = os.path.join(data_dir, "store")
        self.tmp = os.path.join(data_dir, "tmp")
        for path in (self.root, self.tmp):
            os.makedirs(path, mode=0o700, exist_ok=True)

    def source_dir(self, filesystem_id: str) -> str:
        if not _FILESYSTEM_ID.fullmatch(filesystem_id):
            raise ValueError("not a filesystem id")
        return os.path.join(self.root, filesystem_id)

    def path_of(self, filesystem_id: str, filename: str) -> str:
        if not _STORED_NAME.fullmatch(filename):
            raise ValueError("not a stored file name")
        return os.path.join(self.source_dir(filesystem_id), filename)

    def new_temp_path(self) -> str:
        return os.path.join(self.tmp, f"{secrets.token_hex(16)}.gpg.part")

    def make_source_dir(self, filesystem_id: str) -> None:
        forbid_reactor_thread("store")
        path = self.source_dir(filesystem_id)
        os.makedirs(path, mode=0o700, exist_ok=True)
        fsync_directory(self.root)

    def place(self, temp_path: str, filesystem_id: str, filename: str) -> str:
        """Move an fsynced temp file to its final name; durable when this returns."""
        forbid_reactor_thread("store")
        final = self.path_of(filesystem_id, filename)
        os.makedirs(os.path.dirname(final), mode=0o700, exist_ok=True)
        if os.path.exists(final):
            raise FileExistsError(final)
        os.chmod(temp_path, 0o600)  # gpg made it under the process umask (022 outside systemd)
        rename_durably(temp_path, final)
        self.even_mtimes(filesystem_id)
        return final

    def even_mtimes(self, filesystem_id: str, now: float | None = None) -> None:
        """Give every file of a source (and its folder) one mtime: today, at midnight UTC.

        File times would otherwise record when each submission and reply arrived, which a
        seized disk must not reveal (SecureDrop does the same). Access times are left ahead of
        that (``deaddrop.day_times``), so that a source reading a reply later today is not
        dated by ``relatime`` either.
        """
        forbid_reactor_thread("store")
        day_ns = time.time_ns() if now is None else int(now * 10**9)
        directory = self.source_dir(filesystem_id)
        for name in os.listdir(directory):
            try:
                cut_times(os.path.join(directory, name), day_ns)
            except FileNotFoundError:
                pass  # deleted meanwhile
        cut_times(directory, day_ns)

    def open_stored(self, filesystem_id: str, filename: str) -> BinaryIO:
        """Open a stored file for reading: a regular file inside the store, reached without links.

        A stored file (or a source folder) replaced by a symbolic link must not serve the
        link's target: ``FileNotFoundError`` for anything that is not exactly that.
        """
        forbid_reactor_thread("store")
        path = self.path_of(filesystem_id, filename)
        try:
            dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:  # missing, or a link (ELOOP), or not a folder
            raise FileNotFoundError(e.errno, "not a source folder of the store", filesystem_id) from None
        try:
            fd = os.open(filename, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as e:
            raise FileNotFoundError(e.errno, "not a stored file", filename) from None
        finally:
            os.close(dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileNotFoundError(0, "not a regular file", filename)
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def remove(self, filesystem_id: str, filename: str) -> None:
        forbid_reactor_thread("store")
        try:
            os.remove(self.path_of(filesystem_id, filename))
        except FileNotFoundError:
            pass

    def remove_source(self, filesystem_id: str) -> None:
        forbid_reactor_thread("store")
        shutil.rmtree(self.source_dir(filesystem_id), ignore_errors=True)
        fsync_directory(self.root)

    def discard_temp(self, temp_path: str) -> None:
        try:
            os.remove(temp_path)
        except FileNotFoundError:
            pass

    def recover(self, known: dict[str, set[str]]) -> tuple[RecoveryReport, dict[str, set[str]]]:
        """Start-up reconciliation, before serving.

        ``known`` maps filesystem id -> stored filenames the database lists. Temp files are
        removed (their requests were never acknowledged); files with no row are removed (the
        crash came before their row committed... which cannot happen in our order, but a
        restored backup can produce it); rows whose file is missing are returned for the
        caller to delete (the crash came between commit and rename: never acknowledged).
        """
        temp_removed = 0
        for name in os.listdir(self.tmp):
            os.remove(os.path.join(self.tmp, name))
            temp_removed += 1
        files_without_row = 0
        on_disk: dict[str, set[str]] = {}
        for fid in os.listdir(self.root):
            directory = os.path.join(self.root, fid)
            if not os.path.isdir(directory):
                continue
            names = set()
            for name in os.listdir(directory):
                if fid in known and name in known[fid]:
                    names.add(name)
                else:
                    os.remove(os.path.join(directory, name))
                    files_without_row += 1
            on_disk[fid] = names
        missing = {fid: names - on_disk.get(fid, set()) for fid, names in known.items()}
        missing = {fid: names for fid, names in missing.items() if names}
        if temp_removed or files_without_row:
            fsync_directory(self.root)
        rows_without_file = sum(len(v) for v in missing.values())
        return RecoveryReport(temp_removed, rows_without_file, files_without_row), missing
