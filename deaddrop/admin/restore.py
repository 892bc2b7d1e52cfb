"""``restore``: a signed backup back into a data directory, verified before a byte is written.

The archive is read twice, each time through two gpg processes: the admin's gpg decrypts with
the backup key (``--unwrap``: the signed message comes out whole; it asks for the key's
passphrase on the admin's terminal) and a second gpg, in a scratch home holding only the
signer's public key, checks the signature. The signature covers the whole tar stream, and gpg
only says whether it holds at the end, so:

1. The first pass writes nothing: it hashes every member, keeps the manifest, and once gpg says
   the signature is the signer's, checks the manifest against what it hashed. The archive's
   number, instance, time and ancestry (``backup #42 of instance 3f9a2c1d, 2026-12-04T17:43:05Z``)
   are known now, and an archive that does not hold the backup the admin asked for, or older than
   one restore already saw, is refused (``backup_sequence``, ``backup_lineage``).
2. The second pass writes each member only if the verified manifest lists it with that size and
   mode, and checks its hash once written: an archive swapped between the passes writes at most
   what the signed manifest allows, and is then refused.

Neither pass reads more plaintext than the archive's own size (backups are never compressed),
so a small archive of compressed zeros costs little work and writes nothing. Any failure
removes everything written; a new server's ``tls/`` stays (``restore_target``). The restored
data dir starts a line of backups of its own (a new instance id, descending from the archive).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, TypeVar

from deaddrop.admin import backup_sequence
from deaddrop.admin.backup import (
    CHUNK, DB_NAME, FORMAT, MANIFEST, BackupError, gpg_command, public_key_fingerprint, scratch_gnupg_home,
)
from deaddrop.admin.backup_lineage import Numbered, SequenceError, Wanted
from deaddrop.admin.restore_target import TLS_DIR, clear, inspect_target, prepare_target
from deaddrop.durable import fsync_directory
from deaddrop.store import migrations

UNNUMBERED_FORMAT = "deaddrop-backup/2"  # signed, not numbered: restored only with allow_unnumbered
_SAFE_PART = re.compile(r"^[A-Za-z0-9._@+=~,-][A-Za-z0-9._@+=~, -]{0,254}$")
_INSTANCE = re.compile(r"^[0-9a-f]{32}$")
# Plaintext beyond the archive's size: none in a real backup (gpg's packets only add bytes).
_SLACK = 64 * 1024
# Read on after a refusal, to say whether it was signed: up to this many times the archive's size.
_DRAIN_FACTOR = 16
_T = TypeVar("_T")


@dataclass(frozen=True)
class Manifest:
    """The archive's signed manifest, checked against what the archive holds."""

    files: dict[str, dict[str, Any]]
    folders: dict[str, int]
    schema_version: int
    created: str  # "2026-12-04T17:43:05Z"; a date alone for unnumbered archives
    numbered: Numbered | None  # None: made before backups were numbered
    start_options: tuple[str, ...] | None  # the options the server ran with (None: it was not running)
    data_dir: str | None  # the backed-up data dir (None: not recorded)

    def describe(self) -> str:
        return self.numbered.describe() if self.numbered else f"unnumbered backup of {self.created}"


@dataclass(frozen=True)
class RestoreReport:
    data_dir: str
    files: int
    bytes: int
    signer: str
    manifest: Manifest
    # Files of the target's own tls/ that were kept (the archive's copies were checked, not written).
    kept: tuple[str, ...] = ()
    # The archive's files that were checked against the manifest but not written (because of ``kept``).
    not_restored: tuple[str, ...] = ()
    next_sequence: int | None = None  # the restored instance's next backup's number
    instance: str | None = None  # the restored instance's own id (a new line of backups)
    remembered: str = ""  # the state file that now holds the newest backup seen, or why it does not


def restore_backup(archive: str, data_dir: str, signer_file: str, gnupg_home: str | None = None,
                   gpg_binary: str = "gpg", *, not_older_than: Wanted | None = None, allow_older: bool = False,
                   allow_unnumbered: bool = False,
                   on_verified: Callable[[Manifest], None] | None = None) -> RestoreReport:
    """Decrypt ``archive`` (with the backup key in ``gnupg_home``, or gpg's default) into a new or
    empty ``data_dir`` (or one holding only ``tls/``, kept as it is). Nothing is written before the
    signature by ``signer_file``'s key and the archive's number are checked (``on_verified`` is
    called then); on any failure nothing written is left behind."""
    data_dir = os.path.abspath(data_dir)
    signer = public_key_fingerprint(signer_file, "s", gpg_binary)
    inspect_target(data_dir)
    try:
        source = open(archive, "rb")
    except OSError as e:
        raise BackupError(f"{archive}: {e.strerror}") from None
    state = backup_sequence.state_path(gnupg_home)
    with source, scratch_gnupg_home() as verify_home:
        if subprocess.run(gpg_command(gpg_binary, verify_home, "--import", signer_file), capture_output=True).returncode:
            raise BackupError(f"gpg could not read {signer_file}")
        decryption = _Decryption(source, archive, signer, signer_file, gnupg_home, verify_home, gpg_binary)
        seen, manifest_bytes = decryption.run(_survey)
        manifest = _parse_manifest(manifest_bytes, seen)
        if on_verified is not None:
            on_verified(manifest)
        try:
            if manifest.numbered is None:
                if not allow_unnumbered:
                    backup_sequence.refuse_unnumbered(archive, manifest.created)
            else:
                backup_sequence.check_not_older(archive, manifest.numbered, not_older_than, state, allow_older)
        except SequenceError as e:
            raise BackupError(str(e)) from None
        target = prepare_target(data_dir)
        try:
            written, total, not_restored = decryption.run(
                lambda stream: _extract(stream, data_dir, manifest, manifest_bytes, skip_tls=bool(target.kept)))
            _restore_folders(data_dir, manifest.folders)
            _check_database(data_dir)
            instance, next_sequence = (backup_sequence.start_line(data_dir, manifest.numbered, state)
                                       if manifest.numbered else (None, None))
            fsync_directory(data_dir)
        except BaseException as e:
            clear(data_dir, target)
            if isinstance(e, (tarfile.TarError, EOFError)):
                raise BackupError(f"{archive} is not a complete DeadDrop backup ({e})") from None
            if isinstance(e, SequenceError):
                raise BackupError(str(e)) from None
            raise
    remembered = _remember(state, manifest.numbered, instance)
    return RestoreReport(data_dir, written, total, signer, manifest, target.kept, not_restored, next_sequence,
                         instance, remembered)


def _remember(state: str, numbered: Numbered | None, started: str | None) -> str:
    if numbered is None or started is None:
        return "nothing remembered (an unnumbered backup)"  # its first numbered backup starts a new line
    try:
        newest = backup_sequence.remember(state, numbered, started)
    except (OSError, SequenceError) as e:
        return (f"could not remember {numbered.describe()} in {state} ({e}): give --not-older-than "
                f"{numbered.short()}:{numbered.sequence} to the next restore")
    return f"{state} remembers {newest.describe()} as the newest of its instance"


# -- the two gpg processes -----------------------------------------------------------------------


class _Inflated(Exception):
    """The decrypted stream grew past the archive's size (compressed inside: not our backup)."""


class _Bounded:
    """A reader that refuses to pass on more than ``limit`` bytes in all."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self._raw = raw
        self._left = limit

    def allow(self, more: int) -> None:
        self._left = max(self._left, 0) + more

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(CHUNK if n is None or n < 0 else n)
        self._left -= len(data)
        if self._left < 0:
            raise _Inflated()
        return data


class _Decryption:
    """One pass over the archive: decrypted by the admin's gpg, verified by a gpg that knows only
    the signer. ``run`` hands the plaintext to a reader and returns what it made, once gpg has
    said the archive was encrypted to the backup key and signed by the signer."""

    def __init__(self, source: IO[bytes], archive: str, signer: str, signer_file: str, gnupg_home: str | None,
                 verify_home: str, gpg_binary: str) -> None:
        self.source, self.archive, self.signer, self.signer_file = source, archive, signer, signer_file
        self.home = ["--homedir", gnupg_home] if gnupg_home else []
        self.verify_home, self.gpg_binary = verify_home, gpg_binary
        self.limit = os.fstat(source.fileno()).st_size + _SLACK

    def run(self, reader: Callable[[IO[bytes]], _T]) -> _T:
        with self._processes() as (decrypt, verify, files):
            assert verify.stdout is not None
            stream = _Bounded(verify.stdout, self.limit)
            try:
                try:
                    made = reader(stream)  # type: ignore[arg-type]
                except (_Inflated, BackupError, tarfile.TarError, EOFError, ValueError) as e:
                    # A forged archive may be malformed or compressed too: say first what is wrong
                    # with its origin, reading on (within a bound) until gpg can tell.
                    stream.allow(_DRAIN_FACTOR * self.limit)
                    self._finish(stream, decrypt, verify, files)
                    if isinstance(e, _Inflated):
                        raise
                    raise e
                self._finish(stream, decrypt, verify, files)
            except _Inflated:
                raise BackupError(f"{self.archive} decrypts to more than its own size: DeadDrop backups are never "
                                  "compressed, so this is not one; refused") from None
            return made

    @contextlib.contextmanager
    def _processes(self) -> Iterator[tuple[subprocess.Popen, subprocess.Popen, dict[str, IO[bytes]]]]:
        self.source.seek(0)
        with contextlib.ExitStack() as stack:
            files: dict[str, IO[bytes]] = {
                name: stack.enter_context(tempfile.NamedTemporaryFile(prefix=f"dd-restore-{name}-"))
                     for name in ("errors", "verify_errors", "status", "verify_status")}
            # Not --batch: the backup key's secret half should have a passphrase, and gpg-agent
            # asks for it on the admin's terminal (GPG_TTY).
            env = dict(os.environ)
            with contextlib.suppress(OSError):
                env.setdefault("GPG_TTY", os.ttyname(0))
            decrypt = subprocess.Popen(
                [self.gpg_binary, *self.home, "--quiet", "--status-file", files["status"].name, "--unwrap",
                 "--output", "-", "--decrypt"],
                stdin=self.source, stdout=subprocess.PIPE, stderr=files["errors"], env=env)
            assert decrypt.stdout is not None
            verify = subprocess.Popen(
                gpg_command(self.gpg_binary, self.verify_home, "--status-file", files["verify_status"].name,
                            "--output", "-", "--decrypt"),
                stdin=decrypt.stdout, stdout=subprocess.PIPE, stderr=files["verify_errors"])
            decrypt.stdout.close()  # the verifying gpg holds it now
            try:
                yield decrypt, verify, files
            finally:
                for proc in (verify, decrypt):
                    if proc.poll() is None:
                        proc.kill()
                    proc.wait()
                if verify.stdout is not None:
                    verify.stdout.close()

    def _finish(self, stream: _Bounded, decrypt: subprocess.Popen, verify: subprocess.Popen,
                files: dict[str, IO[bytes]]) -> None:
        """Drain (bounded), wait, then say the most basic thing wrong: not decrypted, not
        encrypted, not signed by the signer (in that order)."""
        while stream.read(CHUNK):
            pass
        verify.wait()
        decrypt.wait()
        if decrypt.returncode != 0:
            raise self._gpg_failed(decrypt, files["errors"], "decrypt or verify")
        # gpg --decrypt also passes on data that was never encrypted (gpg --store), which anyone
        # can make: only an archive decrypted with the backup key is ours.
        if not {"BEGIN_DECRYPTION", "DECRYPTION_OKAY"} <= {fields[0] for fields in _status(files["status"])}:
            raise BackupError(f"{self.archive} is not encrypted: a DeadDrop backup is always encrypted to the "
                              "backup key, so this file is refused")
        _check_signature(self.archive, _status(files["verify_status"]), self.signer, self.signer_file)
        if verify.returncode != 0:
            raise self._gpg_failed(verify, files["verify_errors"], "read the signed archive in")

    def _gpg_failed(self, proc: subprocess.Popen, stream: IO[bytes], what: str) -> BackupError:
        stream.seek(0)
        lines = stream.read().decode("utf-8", "replace").strip().splitlines()
        return BackupError(f"gpg could not {what} {self.archive}: {lines[-1] if lines else f'exit {proc.returncode}'}")


def _status(status: IO[bytes]) -> list[list[str]]:
    status.seek(0)
    return [line.split()[1:] for line in status.read().decode("ascii", "replace").splitlines()
            if line.startswith("[GNUPG:] ") and len(line.split()) > 1]


def _check_signature(archive: str, lines: list[list[str]], signer: str, signer_file: str) -> None:
    """Exactly one signature, valid, by the signer's key (its primary fingerprint), not revoked."""
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


# -- pass 1: read, write nothing -------------------------------------------------------------------


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return all(_SAFE_PART.match(p) and p not in (".", "..") for p in parts) and not name.startswith("/")


def _survey(stream: IO[bytes]) -> tuple[dict[str, dict[str, Any]], bytes]:
    """Every member's size, mode and hash, and the manifest's bytes (parsed only once the
    signature is checked)."""
    seen: dict[str, dict[str, Any]] = {}
    manifest: bytes | None = None
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if manifest is not None:
                raise BackupError(f"the archive has entries after its manifest ({member.name!r})")
            if not member.isfile() or not _safe_name(member.name) or member.name in seen:
                raise BackupError(f"the archive holds an entry that is not a plain file with a safe name: {member.name!r}")
            f = tar.extractfile(member)
            assert f is not None
            if member.name == MANIFEST:
                if member.size > 64 * 1024 * 1024:
                    raise BackupError("the archive's manifest is implausibly large")
                manifest = f.read()
                continue
            seen[member.name] = _hash_member(f, member)
    if manifest is None:
        raise BackupError("the archive has no DeadDrop backup manifest (not a backup, or cut short)")
    return seen, manifest


def _parse_manifest(raw: bytes, seen: dict[str, dict[str, Any]]) -> Manifest:
    """The signed manifest, which must list exactly the files the archive holds."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise BackupError("the archive's manifest cannot be read") from None
    if not isinstance(body, dict) or "format" not in body:
        raise BackupError("the archive has no DeadDrop backup manifest (not a backup, or cut short)")
    if body["format"] not in (FORMAT, UNNUMBERED_FORMAT):
        raise BackupError(f"the archive is a {body['format']} backup, made by a DeadDrop that did not sign "
                          f"its backups: this one restores only signed archives ({FORMAT}, {UNNUMBERED_FORMAT})")
    if body.get("files") != seen:
        missing = sorted(set(body.get("files") or ()) - set(seen))
        changed = sorted(n for n in seen if (body.get("files") or {}).get(n) != seen[n])
        raise BackupError(f"the archive does not match its manifest (missing {missing[:3]}, changed {changed[:3]})")
    options = body.get("start_options")
    if options is not None and not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
        raise BackupError("the archive's manifest holds bad start options")
    folders = body.get("folders")
    if not isinstance(folders, dict) or "." not in folders:
        raise BackupError("the archive's manifest lists no folders")
    for name, mode in folders.items():
        if not isinstance(mode, int) or not 0 <= mode <= 0o777 or (name != "." and not _safe_name(name)):
            raise BackupError(f"the archive's manifest holds a bad folder entry: {name!r}")
    created, numbered = str(body.get("created")), None
    if body["format"] == FORMAT:
        instance, sequence = body.get("instance"), body.get("sequence")
        if not (isinstance(instance, str) and _INSTANCE.match(instance) and isinstance(sequence, int)
                and sequence >= 1):
            raise BackupError("the archive's manifest holds no valid backup number")
        try:
            ancestry = backup_sequence.parse_ancestry(body.get("ancestry"), sequence)
        except ValueError:
            raise BackupError("the archive's manifest holds a bad ancestry (the backups it was restored from)") from None
        numbered = Numbered(instance, sequence, created, ancestry)
    data_dir = body.get("data_dir")
    return Manifest(seen, folders, int(body["schema_version"]), created, numbered,
                    None if options is None else tuple(options), data_dir if isinstance(data_dir, str) else None)


# -- pass 2: write what the verified manifest lists ------------------------------------------------


def _extract(stream: IO[bytes], data_dir: str, manifest: Manifest, manifest_bytes: bytes,
             skip_tls: bool) -> tuple[int, int, tuple[str, ...]]:
    """Write each member the manifest lists, as listed (with ``skip_tls``, the ``tls/`` ones are
    only hashed: the target's own certificate stays). -> (files written, bytes, not restored)."""
    done: set[str] = set()
    not_restored: list[str] = []
    total = 0
    manifest_seen = False

    def changed(name: str) -> BackupError:
        return BackupError(f"the archive changed after its signature was checked ({name!r}): refused")

    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            f = tar.extractfile(member) if member.isfile() else None
            if f is None or manifest_seen or member.name in done:
                raise changed(member.name)
            if member.name == MANIFEST:
                if member.size != len(manifest_bytes) or f.read() != manifest_bytes:
                    raise changed(member.name)
                manifest_seen = True
                continue
            expected = manifest.files.get(member.name)
            if expected is None or expected["size"] != member.size or expected["mode"] != member.mode & 0o777:
                raise changed(member.name)
            if skip_tls and member.name.startswith(TLS_DIR + "/"):
                got = _hash_member(f, member)
                not_restored.append(member.name)
            else:
                got = _write_member(f, data_dir, member)
                total += member.size
            if got != expected:
                raise changed(member.name)
            done.add(member.name)
    if not manifest_seen or done != set(manifest.files):
        raise changed(MANIFEST)
    return len(done) - len(not_restored), total, tuple(not_restored)


def _restore_folders(data_dir: str, folders: dict[str, int]) -> None:
    """Every folder the data dir had (empty ones too), with its mode; the deepest first, so a
    parent's mode is never in the way."""
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
