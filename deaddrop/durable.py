"""Crash-safe file writes, for every layer: a temp file beside the final one, fsync, then rename
(or link), then fsync the directory.

A reader (or a restart after ``kill -9``) sees either the old file or the complete new one,
never a half-written file under the final name. Imports nothing of DeadDrop: the ground floor.
"""
from __future__ import annotations

import os
import secrets

TEMP_PREFIX = ".tmp-"


def fsync_directory(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(final_path: str) -> str:
    directory, name = os.path.split(final_path)
    return os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(8)}-{name}")


def write_new_file(path: str, data: bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Create ``path`` (never an existing file) holding ``data``, fsynced unless ``durable`` is off.

    A failure part-way leaves the partial file: for a temp path its owner discards it.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())


def _write_temp_beside(final_path: str, data: bytes, mode: int, durable: bool) -> str:
    tmp = temp_path_for(final_path)
    try:
        write_new_file(tmp, data, mode, durable)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp


def write_atomically(path: str, data: bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: a crash leaves the old file or the new one.

    ``durable=False`` skips the fsyncs, for a file rewritten at every start anyway (the torrc,
    written on the reactor thread); the rename is still atomic.
    """
    tmp = _write_temp_beside(path, data, mode, durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
    if durable:
        fsync_directory(os.path.dirname(path))


def create_exclusively(path: str, data: bytes, mode: int = 0o600) -> bool:
    """Create ``path`` holding ``data``, whole or not at all, unless it exists: True if this call made it.

    ``link`` fails where ``path`` exists, so two processes starting at once cannot end up with
    different files (a pepper, an onion key): the second finds the first one's.
    """
    tmp = _write_temp_beside(path, data, mode, durable=True)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        _remove_quietly(tmp)
    fsync_directory(os.path.dirname(path))
    return True


def replace_durably(src: str, dst: str) -> None:
    """Put the complete file ``src`` (written by its owner: a download, a backup) in place of ``dst``:
    fsync it, rename it over ``dst``, fsync the directory."""
    fsync_file(src)
    os.replace(src, dst)
    fsync_directory(os.path.dirname(os.path.abspath(dst)))


def rename_durably(src: str, dst: str) -> None:
    """Move an fsynced file into place and make the rename itself durable."""
    os.rename(src, dst)
    fsync_directory(os.path.dirname(dst))
    src_dir = os.path.dirname(src) or "."
    if os.path.realpath(src_dir) != os.path.realpath(os.path.dirname(dst) or "."):
        fsync_directory(src_dir)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
