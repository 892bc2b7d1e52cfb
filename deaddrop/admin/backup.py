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

The last member, ``MANIFEST.json``, lists every file with its size, mode and SHA-256, and every
folder with its mode. ``restore_backup`` decrypts with the admin's gpg (``--unwrap``: the signed
message comes out whole) and checks the signature in a scratch GnuPG home holding only the
signer's public key; it refuses a non-empty target (except one holding only the new server's
certificate folder ``tls/``, which it keeps: the archive's ``tls/`` files are then checked against
the manifest but not written), accepts only plain files and folders with safe relative names, checks every file against the manifest and gpg's integrity check, gives files and
folders their original modes, and removes everything it wrote if any check fails.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any, Iterator

import deaddrop
from deaddrop.durable import fsync_directory, replace_durably
from deaddrop.store import migrations

FORMAT = "deaddrop-backup/2"  # /1: unsigned, file modes only; refused
MANIFEST = "MANIFEST.json"
DB_NAME = "db.sqlite"
CHUNK = 1024 * 1024

# Top-level entries never backed up: runtime state, scratch space, and the live database files
# (the snapshot replaces them); ``backups`` holds the automatic pre-upgrade database copies.
_SKIP_TOP = {"server.lock", "tmp", "backups", DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", "status.json"}
# Under DATA/tor: Tor's runtime files and caches (re-fetched at start); the keys stay.
_TOR_SKIP = re.compile(r"^(lock|tor\.pid|control\.sock|control-port\.txt|cached-.*|diff-cache|.*\.tmp)$")
# GnuPG's own lock files (".#lk0x...", "*.lock") belong to the running process, not the keyring.
_LOCK_FILE = re.compile(r"^\.#lk.*|.*\.lock$")
_SAFE_PART = re.compile(r"^[A-Za-z0-9._@+=~,-][A-Za-z0-9._@+=~, -]{0,254}$")


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


@dataclass(frozen=True)
class RestoreReport:
    data_dir: str
    files: int
    bytes: int
    schema_version: int
    created: str
    signer: str = ""
    # The options the server ran with during the backup (None: it was not running).
    start_options: tuple[str, ...] | None = None
    # Files of the target's own tls/ that were kept (the archive's copies were checked, not written).
    kept: tuple[str, ...] = ()
    # The archive's files that were checked against the manifest but not written (because of ``kept``).
    not_restored: tuple[str, ...] = ()


# -- the recipient key ---------------------------------------------------------------------------


def _gpg(gpg_binary: str, homedir: str, *args: str) -> list[str]:
    return [gpg_binary, "--homedir", homedir, "--batch", "--no-tty", "--quiet", "--yes", *args]


@contextlib.contextmanager
def _scratch_gnupg_home() -> Iterator[str]:
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
    with _scratch_gnupg_home() as home:
        proc = subprocess.run(_gpg(gpg_binary, home, "--with-colons", "--show-keys", key_file), capture_output=True)
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
                    "created": time.strftime("%Y-%m-%d", time.gmtime()), "files": manifest, "folders": folders,
                    "start_options": start_options,
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
    return BackupReport(out_path, len(manifest), total, fingerprint, signer, version)


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


# -- restore ---------------------------------------------------------------------------------------


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return all(_SAFE_PART.match(p) and p not in (".", "..") for p in parts) and not name.startswith("/")


# The one thing a new server's data dir may hold before a restore: docs/deploy/install.md puts the
# journalist listener's certificate there (step 3) before the service ever starts.
TLS_DIR = "tls"


@dataclass(frozen=True)
class _Target:
    created: bool  # made here (removed whole on failure)
    kept: tuple[str, ...]  # relative paths of the files in tls/ that were there before (never touched)
    had_tls: bool  # tls/ existed before (kept, as a folder, on failure)


def _prepare_target(data_dir: str) -> _Target:
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
                _check_kept(os.path.join(tls, name), owner)
                kept.append(f"{TLS_DIR}/{name}")
        os.chmod(data_dir, 0o700)
        return _Target(False, tuple(kept), bool(entries))
    os.makedirs(data_dir, mode=0o700)
    return _Target(True, (), False)


def _check_kept(path: str, owner: int) -> None:
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
        if os.path.basename(path) == "server.key":
            os.fchmod(fd, 0o600)
    finally:
        if fd >= 0:
            os.close(fd)


def _clear(data_dir: str, target: _Target) -> None:
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


def restore_backup(archive: str, data_dir: str, signer_file: str, gnupg_home: str | None = None,
                   gpg_binary: str = "gpg") -> RestoreReport:
    """Decrypt ``archive`` (with the backup key in ``gnupg_home``, or gpg's default) into a new or
    empty ``data_dir`` (or one holding only ``tls/``, kept as it is), verifying everything, the
    signature by ``signer_file``'s key first of all; on any failure nothing it wrote is left behind."""
    data_dir = os.path.abspath(data_dir)
    if not os.path.isfile(archive):
        raise BackupError(f"{archive}: no such file")
    signer = public_key_fingerprint(signer_file, "s", gpg_binary)
    target = _prepare_target(data_dir)
    home = ["--homedir", gnupg_home] if gnupg_home else []
    try:
        with contextlib.ExitStack() as stack:
            verify_home = stack.enter_context(_scratch_gnupg_home())
            imported = subprocess.run(_gpg(gpg_binary, verify_home, "--import", signer_file), capture_output=True)
            if imported.returncode != 0:
                raise BackupError(f"gpg could not read {signer_file}")
            errors = stack.enter_context(tempfile.TemporaryFile())
            verify_errors = stack.enter_context(tempfile.TemporaryFile())
            status = stack.enter_context(tempfile.NamedTemporaryFile(prefix="dd-restore-status-"))
            verify_status = stack.enter_context(tempfile.NamedTemporaryFile(prefix="dd-restore-verify-"))
            # Not --batch: the backup key's secret half should have a passphrase, and gpg-agent
            # asks for it on the admin's terminal (GPG_TTY). --unwrap passes the signed message on
            # whole, for the second gpg to check against the signer's key alone.
            env = dict(os.environ)
            with contextlib.suppress(OSError):
                env.setdefault("GPG_TTY", os.ttyname(0))
            decrypt = subprocess.Popen(
                [gpg_binary, *home, "--quiet", "--status-file", status.name, "--unwrap", "--output", "-",
                 "--decrypt", archive],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, env=env,
            )
            assert decrypt.stdout is not None
            verify = subprocess.Popen(
                _gpg(gpg_binary, verify_home, "--status-file", verify_status.name, "--output", "-", "--decrypt"),
                stdin=decrypt.stdout, stdout=subprocess.PIPE, stderr=verify_errors,
            )
            decrypt.stdout.close()  # the verifying gpg holds it now
            assert verify.stdout is not None

            def gpg_failed(proc: subprocess.Popen, stream: IO[bytes], what: str) -> BackupError:
                stream.seek(0)
                lines = stream.read().decode("utf-8", "replace").strip().splitlines()
                return BackupError(f"gpg could not {what} {archive}: {lines[-1] if lines else f'exit {proc.returncode}'}")

            def finish() -> None:
                """Drain, wait, then say the most basic thing wrong: not decrypted, not encrypted,
                not signed by the signer (in that order)."""
                while verify.stdout.read(CHUNK):
                    pass
                verify.wait()
                decrypt.wait()
                if decrypt.returncode != 0:
                    raise gpg_failed(decrypt, errors, "decrypt or verify")
                # gpg --decrypt also passes on data that was never encrypted (gpg --store), which
                # anyone can make: only an archive decrypted with the backup key is ours.
                if not {"BEGIN_DECRYPTION", "DECRYPTION_OKAY"} <= _status_words(status):
                    raise BackupError(f"{archive} is not encrypted: a DeadDrop backup is always encrypted to "
                                      "the backup key, so this file is refused")
                _check_signature(archive, verify_status, signer, signer_file)
                if verify.returncode != 0:
                    raise gpg_failed(verify, verify_errors, "read the signed archive in")

            try:
                report, folders = _extract(verify.stdout, data_dir, skip_tls=bool(target.kept))
            except (BackupError, tarfile.TarError, EOFError):
                # A forged archive may be malformed too: say first what is wrong with its origin.
                finish()
                raise
            except BaseException:
                verify.kill()
                decrypt.kill()
                verify.wait()
                decrypt.wait()
                raise
            finish()
        _restore_folders(data_dir, folders)  # only now: the modes come from a signed manifest
        _check_database(data_dir)
        fsync_directory(data_dir)
        return RestoreReport(report.data_dir, report.files, report.bytes, report.schema_version, report.created,
                             signer, report.start_options, target.kept, report.not_restored)
    except BaseException as e:
        _clear(data_dir, target)
        if isinstance(e, (tarfile.TarError, EOFError)):
            raise BackupError(f"{archive} is not a complete DeadDrop backup ({e})") from None
        raise


def _status_words(status: IO[bytes]) -> set[str]:
    status.seek(0)
    return {line.split()[1] for line in status.read().decode("ascii", "replace").splitlines()
            if line.startswith("[GNUPG:] ") and len(line.split()) > 1}


def _check_signature(archive: str, status: IO[bytes], signer: str, signer_file: str) -> None:
    """Exactly one signature, valid, by the signer's key (its primary fingerprint), not revoked."""
    status.seek(0)
    lines = [line.split()[1:] for line in status.read().decode("ascii", "replace").splitlines()
             if line.startswith("[GNUPG:] ") and len(line.split()) > 1]
    words = [fields[0] for fields in lines]
    expected = f"the backup-signing key {signer} ({signer_file})"
    if "NEWSIG" not in words and "ERRSIG" not in words:
        raise BackupError(f"{archive} is not signed: restore accepts only archives signed by {expected}; refused")
    if words.count("NEWSIG") > 1:
        raise BackupError(f"{archive} carries several signatures: a DeadDrop backup has one; refused")
    if "BADSIG" in words:
        raise BackupError(f"{archive} has a BAD signature (it was changed after signing); refused")
    for fields in lines:
        if fields[0] == "ERRSIG":
            who = fields[-1] if len(fields) > 7 and fields[-1] != "-" else fields[1] if len(fields) > 1 else "?"
            raise BackupError(f"{archive} is signed by key {who}, not by {expected}; refused")
    valid = [fields for fields in lines if fields[0] == "VALIDSIG"]
    primary = valid[0][-1] if valid else ""
    if primary != signer:
        raise BackupError(f"{archive} is signed by key {primary or '?'}, not by {expected}; refused")
    if "REVKEYSIG" in words:
        raise BackupError(f"{archive} is signed by {expected}, which is REVOKED; refused")


def _extract(stream: IO[bytes], data_dir: str, skip_tls: bool = False) -> tuple[RestoreReport, Any]:
    """Write every member (with ``skip_tls``, the ``tls/`` ones are only read and hashed: the
    target's own certificate stays), then check all of them against the manifest."""
    written: dict[str, dict[str, Any]] = {}
    not_restored: list[str] = []
    manifest: dict[str, Any] | None = None
    total = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if manifest is not None:
                raise BackupError(f"the archive has entries after its manifest ({member.name!r})")
            if not member.isfile() or not _safe_name(member.name):
                raise BackupError(f"the archive holds an entry that is not a plain file with a safe name: {member.name!r}")
            f = tar.extractfile(member)
            assert f is not None
            if member.name == MANIFEST:
                if member.size > 64 * 1024 * 1024:
                    raise BackupError("the archive's manifest is implausibly large")
                manifest = json.loads(f.read().decode("utf-8"))
                continue
            if skip_tls and member.name.startswith(TLS_DIR + "/"):
                written[member.name] = _hash_member(f, member)
                not_restored.append(member.name)
                continue
            written[member.name] = _write_member(f, data_dir, member)
            total += member.size
    if manifest is None or not isinstance(manifest, dict) or "format" not in manifest:
        raise BackupError("the archive has no DeadDrop backup manifest (not a backup, or cut short)")
    if manifest["format"] != FORMAT:
        raise BackupError(f"the archive is a {manifest['format']} backup, made by a DeadDrop that did not sign "
                          f"its backups: this one restores only {FORMAT} (signed) archives")
    if manifest["files"] != written:
        missing = sorted(set(manifest["files"]) - set(written))
        changed = sorted(n for n in written if manifest["files"].get(n) != written[n])
        raise BackupError(f"the archive does not match its manifest (missing {missing[:3]}, changed {changed[:3]})")
    options = manifest.get("start_options")
    if options is not None and not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
        raise BackupError("the archive's manifest holds bad start options")
    report = RestoreReport(data_dir, len(written) - len(not_restored), total, int(manifest["schema_version"]),
                           manifest["created"], start_options=None if options is None else tuple(options),
                           not_restored=tuple(not_restored))
    return report, manifest.get("folders")


def _restore_folders(data_dir: str, folders: Any) -> None:
    """Every folder the data dir had (empty ones too), with its mode; the deepest first, so a
    parent's mode is never in the way."""
    if not isinstance(folders, dict) or "." not in folders:
        raise BackupError("the archive's manifest lists no folders")
    for name, mode in sorted(folders.items(), key=lambda item: item[0].count("/"), reverse=True):
        if not isinstance(mode, int) or not 0 <= mode <= 0o777 or (name != "." and not _safe_name(name)):
            raise BackupError(f"the archive's manifest holds a bad folder entry: {name!r}")
    for name in sorted(folders):
        os.makedirs(os.path.join(data_dir, name), mode=0o700, exist_ok=True)
    for name, mode in sorted(folders.items(), key=lambda item: item[0].count("/"), reverse=True):
        os.chmod(os.path.join(data_dir, name), mode)


def _write_member(f: IO[bytes], data_dir: str, member: tarfile.TarInfo) -> dict[str, Any]:
    path = os.path.join(data_dir, *member.name.split("/"))
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    mode = member.mode & 0o777
    digest = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, mode)  # exactly the original's, whatever the umask
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return {"size": member.size, "mode": mode, "sha256": digest.hexdigest()}


def _hash_member(f: IO[bytes], member: tarfile.TarInfo) -> dict[str, Any]:
    digest = hashlib.sha256()
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        digest.update(chunk)
    return {"size": member.size, "mode": member.mode & 0o777, "sha256": digest.hexdigest()}


def _check_database(data_dir: str) -> None:
    path = os.path.join(data_dir, DB_NAME)
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise BackupError("the database in the archive fails SQLite's integrity check")
            version = migrations.schema_version(conn)
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise BackupError(f"the database in the archive cannot be opened: {e}") from None
    if version is None:
        raise BackupError("the database in the archive has no schema version")
    migrations.check_known(version, path)
