"""Crash-safe file writes: temp file in the same directory, fsync, rename, fsync the directory.

A reader (or a restart after ``kill -9``) sees either the old file or the complete new one,
never a half-written file under the final name.
"""
from __future__ import annotations

import os
import secrets

TEMP_PREFIX = ".tmp-"


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(final_path: str) -> str:
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(8)}-{name}")


def write_atomically(path: str, data: bytes, mode: int = 0o600) -> None:
    tmp = temp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
    fsync_directory(os.path.dirname(path) or ".")


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename_durably(src: str, dst: str) -> None:
    """Move an fsynced file into place and make the rename itself durable."""
    os.rename(src, dst)
    fsync_directory(os.path.dirname(dst) or ".")
    src_dir = os.path.dirname(src) or "."
    if os.path.realpath(src_dir) != os.path.realpath(os.path.dirname(dst) or "."):
        fsync_directory(src_dir)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
