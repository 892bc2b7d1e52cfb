"""The directory a restore writes into: new, empty, or holding only a new server's ``tls/``.

``inspect_target`` refuses anything else before the archive is even read, and changes nothing;
``prepare_target`` makes the directory (or takes the empty one) once the archive is verified;
``clear`` removes everything the restore wrote when any later check fails, leaving what the
directory held before.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from dataclasses import dataclass

from deaddrop.admin.backup import BackupError


# The one thing a new server's data dir may hold before a restore: docs/deploy/install.md puts the
# journalist listener's certificate there (step 3) before the service ever starts.
TLS_DIR = "tls"


@dataclass(frozen=True)
class Target:
    created: bool  # made here (removed whole on failure)
    kept: tuple[str, ...]  # relative paths of the files in tls/ that were there before (never touched)
    had_tls: bool  # tls/ existed before (kept, as a folder, on failure)


def inspect_target(data_dir: str) -> None:
    """Refuse, changing nothing, a directory restore would not write into."""
    _target(data_dir, prepare=False)


def prepare_target(data_dir: str) -> Target:
    """The directory, made now if it is new (0700); a ``tls/`` it holds is kept, ``server.key``
    made private."""
    return _target(data_dir, prepare=True)


def _target(data_dir: str, prepare: bool) -> Target:
    """Refuses a non-empty directory, unless all it holds is a ``tls/`` folder of plain files
    (a new server's certificate and key, installed as the guide says): those are kept."""
    if os.path.lexists(data_dir):
        if not os.path.isdir(data_dir) or os.path.islink(data_dir):
            raise BackupError(f"{data_dir} exists and is not a directory")
        entries = sorted(os.listdir(data_dir))
        if entries and entries != [TLS_DIR]:
            others = [e for e in entries if e != TLS_DIR]
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise BackupError(f"{data_dir} is not empty ({shown}): restore only into a new or empty directory, "
                              f"or one holding nothing but the server certificate folder {TLS_DIR}/")
        kept: list[str] = []
        if entries:
            tls = os.path.join(data_dir, TLS_DIR)
            if os.path.islink(tls) or not os.path.isdir(tls):
                raise BackupError(f"{tls} is not a folder: restore only into a new or empty directory, or one "
                                  f"holding nothing but the server certificate folder {TLS_DIR}/")
            owner = os.stat(data_dir).st_uid
            for name in sorted(os.listdir(tls)):
                _check_kept(os.path.join(tls, name), owner, prepare)
                kept.append(f"{TLS_DIR}/{name}")
        if prepare:
            os.chmod(data_dir, 0o700)
        return Target(False, tuple(kept), bool(entries))
    if prepare:
        os.makedirs(data_dir, mode=0o700)
    return Target(True, (), False)


def _check_kept(path: str, owner: int, prepare: bool) -> None:
    """A file of tls/ kept by a restore must be a plain file of the data dir's owner with no other
    name (a hard link would let whoever placed it reach the file from elsewhere); ``server.key``
    is made private (0600) whatever mode it was given."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ELOOP:  # ELOOP: a symbolic link
            raise BackupError(f"{path} cannot be read before a restore: {e.strerror}") from e
        fd = -1
    try:
        st = os.fstat(fd) if fd >= 0 else None
        if st is None or not stat.S_ISREG(st.st_mode):
            raise BackupError(f"{path} is not a plain file: the folder {TLS_DIR}/ may hold only the "
                              "server's certificate and key before a restore")
        if st.st_nlink > 1:
            raise BackupError(f"{path} has {st.st_nlink} names (hard links): copy it into {TLS_DIR}/ "
                              "as a file of its own before a restore")
        if st.st_uid != owner:
            raise BackupError(f"{path} belongs to uid {st.st_uid}, not to the data dir's owner (uid {owner}): "
                              f"the folder {TLS_DIR}/ may hold only the server's own certificate and key")
        if prepare and os.path.basename(path) == "server.key":
            os.fchmod(fd, 0o600)
    finally:
        if fd >= 0:
            os.close(fd)


def clear(data_dir: str, target: Target) -> None:
    """Remove everything the restore wrote; what the directory held before stays."""
    if target.created:
        shutil.rmtree(data_dir, ignore_errors=True)
        return
    for entry in os.listdir(data_dir):
        path = os.path.join(data_dir, entry)
        if entry == TLS_DIR and target.had_tls:
            for name in os.listdir(path):
                if f"{TLS_DIR}/{name}" not in target.kept:
                    _remove(os.path.join(path, name))
            continue
        _remove(path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


