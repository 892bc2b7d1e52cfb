"""Backups of a data directory: one tar stream, signed and encrypted by gpg as it is made.

``make_backup`` works while the server runs. The database is copied first with SQLite's online
backup API (a consistent snapshot, taken in memory so no plaintext copy touches a disk), then the
files are streamed one by one: the store, the GnuPG keyring with the sources' keys, the peppers,
everything under ``DATA/tor`` that is a key or a client list, TLS and CA material, the submission
key copy and the logs. A file placed after the snapshot has no row and a row whose file was
deleted meanwhile has no file; the server's start-up recovery reconciles both after a restore.
Nothing is ever held whole in memory apart from the database snapshot, and nothing unencrypted is
written: tar writes into gpg's stdin, gpg writes ``FILE.part``, renamed when gpg succeeded.

The archive is signed by the newsroom's backup-signing key (a secret key on the server, in a
GnuPG home of its own) and encrypted to the backup key (whose secret half stays offline). Anyone
who can write where backups are kept can encrypt an archive to the backup key, with a submission
key of their own inside; only the newsroom can sign one, and ``restore_backup`` refuses an
archive that is not signed by the key given as ``--signer``, saying whether it was unsigned or
signed by another key.

The last member, ``MANIFEST.json``, lists every file with its size, mode and SHA-256, every
folder with its mode, the options the server ran with, and the backup's number and time: the
time to the second (UTC; the backup is the admin's act, and nothing else in the archive dates
anything: members carry no time), a number above every earlier backup of the instance
(``backup_sequence``), the instance's id, and the backups it was restored from (its ancestry:
``backup_lineage``), so that restore can refuse an older backup swapped in for the newest, and a
restored copy's backups for the original's.
``deaddrop.admin.restore`` reads it back.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any, Iterator

import deaddrop
from deaddrop.admin.backup_lineage import SequenceError
from deaddrop.admin.backup_sequence import SEQUENCE_FILE, take_next_number
from deaddrop.durable import replace_durably
from deaddrop.store import migrations

FORMAT = "deaddrop-backup/3"  # /2: signed, not numbered (restored only on request); /1: unsigned, refused
MANIFEST = "MANIFEST.json"
DB_NAME = "db.sqlite"
CHUNK = 1024 * 1024

# Top-level entries never backed up: runtime state, scratch space, and the live database files
# (the snapshot replaces them); ``backups`` holds the automatic pre-upgrade database copies.
# The backup's number is in the manifest, and restore writes DATA/backup-sequence from it.
_SKIP_TOP = {"server.lock", "tmp", "backups", DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", "status.json",
             SEQUENCE_FILE}
# Under DATA/tor: Tor's runtime files and caches (re-fetched at start); the keys stay.
_TOR_SKIP = re.compile(r"^(lock|tor\.pid|control\.sock|control-port\.txt|cached-.*|diff-cache|.*\.tmp)$")
# GnuPG's own lock files (".#lk0x...", "*.lock") belong to the running process, not the keyring.
_LOCK_FILE = re.compile(r"^\.#lk.*|.*\.lock$")


class BackupError(Exception):
    """A backup or restore failed; one line for the admin."""


@dataclass(frozen=True)
class BackupReport:
    path: str
    files: int
    bytes: int
    recipient: str
    signer: str
    schema_version: int
    sequence: int  # above every earlier backup of this instance
    instance: str  # the instance's id (a restore starts a new one)
    created: str  # "2026-12-04T17:43:05Z"


# -- the recipient key ---------------------------------------------------------------------------


def gpg_command(gpg_binary: str, homedir: str, *args: str) -> list[str]:
    return [gpg_binary, "--homedir", homedir, "--batch", "--no-tty", "--quiet", "--yes", *args]


@contextlib.contextmanager
def scratch_gnupg_home() -> Iterator[str]:
    # Short and private: gpg-agent's socket path is limited to 107 bytes.
    home = tempfile.mkdtemp(prefix="dd-bk-", dir="/tmp")
    try:
        yield home
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def recipient_fingerprint(key_file: str, gpg_binary: str = "gpg") -> str:
    """The fingerprint of the one public key in ``key_file`` that can encrypt (``--to-key``)."""
    return public_key_fingerprint(key_file, "e", gpg_binary)


def public_key_fingerprint(key_file: str, capability: str, gpg_binary: str = "gpg") -> str:
    """The fingerprint of the one public key in ``key_file``, which must be able to encrypt
    (``capability`` "e": the backup key) or sign ("s": the backup-signing key, ``--signer``).
    Refuses secret keys and bundles, and says which of the two keys was expected."""
    role = ("the backup key, which backups are encrypted to" if capability == "e"
            else "the backup-signing key's public half")
    try:
        with open(key_file, "rb") as f:
            data = f.read(1024 * 1024)
    except OSError as e:
        raise BackupError(f"cannot read {key_file}: {e.strerror}") from None
    if b"PRIVATE KEY BLOCK" in data:
        raise BackupError(f"{key_file} holds a secret key: give the public key (gpg --armor --export)")
    with scratch_gnupg_home() as home:
        proc = subprocess.run(gpg_command(gpg_binary, home, "--with-colons", "--show-keys", key_file), capture_output=True)
    rows = [line.split(":") for line in proc.stdout.decode("utf-8", "replace").splitlines()]
    primaries = [i for i, r in enumerate(rows) if r[0] == "pub"]
    if proc.returncode != 0 or len(primaries) != 1:
        raise BackupError(f"{key_file} must hold exactly one OpenPGP public key ({role})")
    if any(r[0] == "sec" for r in rows):
        raise BackupError(f"{key_file} holds a secret key: give the public key (gpg --armor --export)")
    keys = [r for r in rows if r[0] in ("pub", "sub") and len(r) > 11]
    able = [r for r in keys if capability in r[11]]
    if not able:
        other = "signs only" if capability == "e" else "cannot sign"
        raise BackupError(f"{key_file} {other}: it is not {role} (see 'Backups' in docs/deploy/install.md)")
    if not any(r[1] not in ("r", "e", "i") for r in able):
        state = "revoked" if all(r[1] == "r" for r in able) else "expired or invalid"
        raise BackupError(f"{key_file}: its {'encryption' if capability == 'e' else 'signing'} key is {state}")
    return next((r[9] for r in rows[primaries[0]:] if r[0] == "fpr"), "")


def signing_fingerprint(sign_key: str, gnupg_home: str | None, gpg_binary: str = "gpg") -> str:
    """The fingerprint of the one secret key ``sign_key`` names in ``gnupg_home`` (or gpg's own
    home), which must be able to sign: the backup-signing key."""
    where = gnupg_home or "your GnuPG home"
    home = ["--homedir", gnupg_home] if gnupg_home else []
    proc = subprocess.run([gpg_binary, *home, "--batch", "--with-colons", "--list-secret-keys", "--", sign_key],
                          capture_output=True)
    rows = [line.split(":") for line in proc.stdout.decode("utf-8", "replace").splitlines()]
    primaries = [i for i, r in enumerate(rows) if r[0] == "sec"]
    if proc.returncode != 0 or not primaries:
        raise BackupError(f"no secret key {sign_key!r} in {where}: make the backup-signing key first "
                          "(see 'Backups' in docs/deploy/install.md) and give its fingerprint to --sign-key")
    if len(primaries) > 1:
        raise BackupError(f"--sign-key {sign_key!r} matches {len(primaries)} secret keys in {where}: give a fingerprint")
    first = primaries[0]
    keys = [r for r in rows[first:] if r[0] in ("sec", "ssb") and len(r) > 11]
    if not any("s" in r[11] and r[1] not in ("r", "e", "i") for r in keys):
        raise BackupError(f"the secret key {sign_key!r} in {where} cannot sign (revoked, expired, or an "
                          "encryption-only key)")
    return next((r[9] for r in rows[first:] if r[0] == "fpr"), "")


# -- what goes in ----------------------------------------------------------------------------------


def backup_members(data_dir: str) -> Iterator[str]:
    """Relative paths of the regular files to back up (the database snapshot comes separately)."""
    return (name for kind, name in _walk(data_dir) if kind == "file")


def _walk(data_dir: str) -> Iterator[tuple[str, str]]:
    """("dir", path) for the data dir itself (".") and each folder kept, ("file", path) for each
    regular file, relative to ``data_dir``; runtime state, caches and locks are left out."""
    for root, dirs, files in os.walk(data_dir):
        rel_root = os.path.relpath(root, data_dir)
        top = rel_root.split(os.sep)[0] if rel_root != "." else None
        if top is None:
            dirs[:] = [d for d in dirs if d not in _SKIP_TOP]
            files = [f for f in files if f not in _SKIP_TOP]
        if top == "tor":
            dirs[:] = [d for d in dirs if not _TOR_SKIP.match(d)]
            files = [f for f in files if not _TOR_SKIP.match(f)]
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        yield "dir", os.path.normpath(rel_root)
        for name in sorted(files):
            if _LOCK_FILE.match(name):
                continue
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                yield "file", os.path.normpath(os.path.join(rel_root, name))


def _database_snapshot(data_dir: str) -> tuple[bytes, int]:
    """The live database, consistent, through SQLite's backup API into memory. -> (image, version)."""
    path = os.path.join(data_dir, DB_NAME)
    if not os.path.isfile(path):
        raise BackupError(f"{path}: no database")
    source = sqlite3.connect(path, timeout=30.0)
    memory = sqlite3.connect(":memory:")
    try:
        source.backup(memory)
        version = migrations.schema_version(memory)
        if version is None:
            raise BackupError(f"{path} has no schema version: not a DeadDrop database")
        migrations.check_known(version, path)
        return memory.serialize(), version
    except sqlite3.Error as e:
        raise BackupError(f"cannot read the database {path}: {e}") from None
    finally:
        memory.close()
        source.close()


class _Hashing:
    """A read-only file wrapper that hashes what tar reads from it."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.sha256 = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.sha256.update(data)
        return data


def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode & 0o777  # as in the data dir (no set-id bits); restore gives it back exactly
    info.mtime = 0  # a backup does not need to date each file
    info.type = tarfile.REGTYPE
    return info


# -- backup ---------------------------------------------------------------------------------------


def make_backup(data_dir: str, out_path: str, key_file: str, sign_key: str, gnupg_home: str | None = None,
                gpg_binary: str = "gpg", start_options: list[str] | None = None) -> BackupReport:
    """Write the backup of ``data_dir`` to ``out_path`` (which must not exist): signed with the
    secret key ``sign_key`` from ``gnupg_home`` (gpg's own home if None), encrypted to ``key_file``."""
    out_path = os.path.abspath(out_path)
    if os.path.lexists(out_path):
        raise BackupError(f"{out_path} already exists: choose a new file name")
    if os.path.commonpath([out_path, os.path.abspath(data_dir)]) == os.path.abspath(data_dir):
        raise BackupError(f"{out_path} is inside the data directory: write the backup elsewhere")
    fingerprint = recipient_fingerprint(key_file, gpg_binary)
    signer = signing_fingerprint(sign_key, gnupg_home, gpg_binary)
    if signer == fingerprint:
        raise BackupError("--sign-key is the backup key itself: the signing key lives on the server, the backup "
                          "key's secret half must stay offline (make two keys: docs/deploy/install.md, 'Backups')")
    try:
        instance, sequence, ancestry = take_next_number(data_dir)
    except SequenceError as e:
        raise BackupError(str(e)) from None
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    partial = out_path + ".part"
    manifest: dict[str, Any] = {}
    folders: dict[str, int] = {}
    total = 0
    home = ["--homedir", gnupg_home] if gnupg_home else []
    env = dict(os.environ)
    with contextlib.suppress(OSError):
        env.setdefault("GPG_TTY", os.ttyname(0))  # a signing key with a passphrase: gpg-agent asks here
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [gpg_binary, *home, "--batch", "--quiet", "--yes", "--trust-model", "always", "--compress-algo", "none",
             "--local-user", signer, "--recipient-file", key_file, "--output", partial, "--sign", "--encrypt"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors, env=env,
        )
        try:
            assert proc.stdin is not None
            with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                image, version = _database_snapshot(data_dir)
                tar.addfile(_tarinfo(DB_NAME, len(image), 0o600), io.BytesIO(image))
                manifest[DB_NAME] = {"size": len(image), "mode": 0o600,
                                     "sha256": hashlib.sha256(image).hexdigest()}
                total += len(image)
                del image
                for kind, name in _walk(data_dir):
                    if kind == "dir":
                        with contextlib.suppress(FileNotFoundError):
                            folders[name] = os.lstat(os.path.join(data_dir, name)).st_mode & 0o777
                    else:
                        total += _add_file(tar, data_dir, name, manifest)
                body = json.dumps({
                    "format": FORMAT, "deaddrop_version": deaddrop.__version__, "schema_version": version,
                    "created": created, "instance": instance, "sequence": sequence,
                    "ancestry": [b.as_json() for b in ancestry],
                    "files": manifest, "folders": folders, "start_options": start_options,
                    "data_dir": os.path.abspath(data_dir),
                }, sort_keys=True, indent=1).encode()
                tar.addfile(_tarinfo(MANIFEST, len(body), 0o600), io.BytesIO(body))
            proc.stdin.close()
        except BaseException:
            proc.kill()
            proc.wait()
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
            raise
        code = proc.wait()
        if code != 0:
            errors.seek(0)
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
            message = errors.read().decode("utf-8", "replace").strip().splitlines()
            raise BackupError(f"gpg could not sign and encrypt the backup: {message[-1] if message else f'exit {code}'}")
    os.chmod(partial, 0o600)
    replace_durably(partial, out_path)
    return BackupReport(out_path, len(manifest), total, fingerprint, signer, version, sequence, instance, created)


def _add_file(tar: tarfile.TarFile, data_dir: str, name: str, manifest: dict[str, Any]) -> int:
    try:
        f = open(os.path.join(data_dir, name), "rb")
    except FileNotFoundError:
        return 0  # deleted since the walk (a submission deleted meanwhile): nothing to keep
    with f:
        st = os.fstat(f.fileno())
        wrapped = _Hashing(f)
        tar.addfile(_tarinfo(name, st.st_size, st.st_mode), wrapped)
    manifest[name] = {"size": st.st_size, "mode": st.st_mode & 0o777, "sha256": wrapped.sha256.hexdigest()}
    return st.st_size
