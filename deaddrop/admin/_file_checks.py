"""``deaddrop-admin status``: every secret or private path at its mode and owner.

A data directory whose modes drifted (a restore by hand, a ``chmod -R``, a command run as
root) still works, so nothing else would notice: the peppers readable by every local user let
anyone with a codename prove that a source exists, the database holds the journalists' TOTP
secrets. Each path below is a check; any group or other permission beyond the expected mode,
or another owner than the server's, is ``[FAIL]`` with the path (and the exit status is 1).
"""
from __future__ import annotations

import os
import stat
from typing import Any

PRIVATE_DIR = 0o700
SECRET_FILE = 0o600

# (check name, path relative to DATA, expected mode, must it exist in an initialised data dir)
_PATHS = [
    ("data_dir", "", PRIVATE_DIR, True),
    ("store", "store", PRIVATE_DIR, True),
    ("tmp", "tmp", PRIVATE_DIR, True),
    ("pepper", "pepper-filesystem-id", SECRET_FILE, True),
    ("pepper", "pepper-key-passphrase", SECRET_FILE, True),
    ("database", "db.sqlite", SECRET_FILE, True),
    ("database", "db.sqlite-wal", SECRET_FILE, False),
    ("database", "db.sqlite-shm", SECRET_FILE, False),
    ("keyring", "gnupg", PRIVATE_DIR, True),
    ("secret_keys", "gnupg/private-keys-v1.d", PRIVATE_DIR, False),
    ("logs", "logs", PRIVATE_DIR, True),
    ("security_log", "logs/security.jsonl", SECRET_FILE, False),
    ("tls", "tls", PRIVATE_DIR, False),
    ("tls_key", "tls/server.key", SECRET_FILE, False),
    ("ca", "ca", PRIVATE_DIR, False),
    ("ca_key", "ca/ca.key", SECRET_FILE, False),
    ("ca_state", "ca/state.json", SECRET_FILE, False),
    ("backups", "backups", PRIVATE_DIR, False),
]

# Folders whose every entry is secret: (check name, folder, mode of its files, of its folders).
_TREES = [
    ("store_entries", "store", SECRET_FILE, PRIVATE_DIR),
    ("secret_key_files", "gnupg/private-keys-v1.d", SECRET_FILE, PRIVATE_DIR),
    ("backup_files", "backups", SECRET_FILE, PRIVATE_DIR),
]
_SHOWN = 3  # offending entries named per tree check


def expected_owner(data_dir: str, server_pid: int | None) -> int:
    """Whose files these must be: the running server's user; else the user running this command,
    unless that is root (an admin's ``sudo``), then the data directory's owner."""
    if server_pid is not None:
        try:
            with open(f"/proc/{server_pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        return int(line.split()[2])  # effective uid
        except (OSError, ValueError, IndexError):
            pass
    if os.geteuid() != 0:
        return os.geteuid()
    try:
        return os.stat(data_dir).st_uid
    except OSError:
        return 0


def mode_problem(path: str, want: int, owner: int, st: os.stat_result | None = None) -> str | None:
    """What is wrong with ``path`` (one line naming it), or None."""
    if st is None:
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link; expected a {'folder' if want == PRIVATE_DIR else 'file'} of mode {want:04o}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 & ~want:
        return f"{path} has mode {mode:04o}; expected {want:04o} (chmod {want:o} {path})"
    if st.st_uid != owner:
        return f"{path} is owned by uid {st.st_uid}, not by uid {owner} who runs the server (chown)"
    return None


def path_check(name: str, path: str, want: int, owner: int, required: bool = True) -> dict[str, Any] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if required:
            return {"name": name, "ok": False, "path": path, "detail": f"{path} is missing"}
        return None
    problem = mode_problem(path, want, owner, st)
    if problem:
        return {"name": name, "ok": False, "path": path, "detail": problem}
    return {"name": name, "ok": True, "path": path, "detail": f"{path} mode {stat.S_IMODE(st.st_mode):04o}"}


def _tree_check(name: str, root: str, file_mode: int, dir_mode: int, owner: int) -> dict[str, Any] | None:
    if not os.path.isdir(root) or os.path.islink(root):
        return None
    problems: list[str] = []
    count = 0
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(root):
        for entry_name in dirnames + filenames:
            try:
                st = os.stat(entry_name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile (the server runs)
            count += 1
            want = dir_mode if stat.S_ISDIR(st.st_mode) else file_mode
            problem = mode_problem(os.path.join(dirpath, entry_name), want, owner, st)
            if problem:
                problems.append(problem)
    if problems:
        more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
        return {"name": name, "ok": False, "path": root, "detail": "; ".join(problems[:_SHOWN]) + more}
    return {"name": name, "ok": True, "path": root,
            "detail": f"{count} entries in {root}, files {file_mode:04o}, folders {dir_mode:04o}"}


def private_path_checks(data_dir: str, owner: int, tls_key: str | None = None) -> list[dict[str, Any]]:
    """Checks of every secret and private path of ``data_dir`` (the Tor directory is checked with
    the rest of Tor's status); ``tls_key`` is the listener's key if it lives elsewhere."""
    checks = []
    for name, relative, want, required in _PATHS:
        found = path_check(name, os.path.join(data_dir, relative) if relative else data_dir, want, owner, required)
        if found is not None:
            checks.append(found)
    if tls_key and os.path.abspath(tls_key) != os.path.abspath(os.path.join(data_dir, "tls", "server.key")):
        found = path_check("tls_key", tls_key, SECRET_FILE, owner, required=True)
        if found is not None:
            checks.append(found)
    for name, relative, file_mode, dir_mode in _TREES:
        found = _tree_check(name, os.path.join(data_dir, relative), file_mode, dir_mode, owner)
        if found is not None:
            checks.append(found)
    return checks
