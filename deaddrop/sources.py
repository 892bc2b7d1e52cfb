"""Source use cases: create, log in, submit, read and delete replies; replies from journalists.

This is the only layer that sees a codename, and only for as long as the KDF needs it: what
a session keeps is the filesystem id (to find the source's files) and the key passphrase (to
decrypt replies while the source is logged in), both derived, never the codename itself.
"""
from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
import time
import uuid as uuidlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.logger import Logger

from deaddrop import codenames
from deaddrop.crypto.gpg import GpgError, Keyring
from deaddrop.crypto.kdf import CodenameKdf
from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread
from deaddrop.crypto.streaming import EncryptionTarget, StreamEncryption
from deaddrop.events import SecurityEvents
from deaddrop.store import queries
from deaddrop.store.db import Database
from deaddrop.store.files import Store

_log = Logger()


@dataclass(frozen=True)
class SourceIdentity:
    source_id: int
    filesystem_id: str
    designation: str


@dataclass
class EncryptedPart:
    """A submission part already encrypted into a temp file, waiting to be committed."""

    kind: str  # "msg" or "doc"
    temp_path: str
    size: int = 0


@dataclass(frozen=True)
class Reply:
    filename: str
    text: str | None  # None when it could not be decrypted


class SourceNotFound(Exception):
    pass


class StorageFailed(Exception):
    """The database or the store could not take a submission; ``disk_full`` if space ran out."""

    def __init__(self, message: str, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


def is_disk_full(error: BaseException) -> bool:
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        return code == getattr(sqlite3, "SQLITE_FULL", 13) or "disk is full" in str(error)
    return False


class KeyNotReady(Exception):
    """The source's key pair does not exist yet and cannot be made without its codename."""


@dataclass
class Newsroom:
    """The use cases, wired to their blocking back-ends through thread pools."""

    reactor: Any
    db: Database
    store: Store
    keyring: Keyring
    kdf: CodenameKdf
    crypto_pool: WorkerPool
    stream_pool: WorkerPool  # one thread per upload in flight, pumping it into gpg
    io_pool: WorkerPool  # short file-system work (renames, fsyncs, reads): never behind uploads
    encryption: EncryptionTarget
    submission_fingerprint: str
    events: SecurityEvents
    clock: Callable[[], float] = time.time
    _keygen: dict[int, Deferred] = field(default_factory=dict)
    # Stored filenames whose row is committed but whose file is not in the store yet. Readers
    # skip those rows, or a download would 404 and /lookup show an unreadable reply. (Safe
    # because the one database thread answers in order: an insert's result reaches the
    # reactor, which adds its names here, before the result of any later query.)
    _placing: set[str] = field(default_factory=set)
    _source_deleted_hooks: list[Callable[[int], None]] = field(default_factory=list)
    _streams: "weakref.WeakSet[StreamEncryption]" = field(default_factory=lambda: weakref.WeakSet())

    # -- accounts ------------------------------------------------------------------------

    @inlineCallbacks
    def create_source(self, codename: str):
        """Make a source for a freshly generated codename. -> (SourceIdentity, passphrase)."""
        fid, passphrase = yield self._derive(codename)
        for _attempt in range(20):
            designation = codenames.generate_designation()
            try:
                source_id = yield self.db.run(
                    queries.insert_source, str(uuidlib.uuid4()), fid, designation, self.clock()
                )
            except sqlite3.IntegrityError as e:
                if "filesystem_id" in str(e):
                    raise ValueError("codename already in use")
                continue  # designation taken: draw another
            break
        else:
            raise RuntimeError("could not find a free designation")
        yield self.io_pool.run(self.store.make_source_dir, fid)
        identity = SourceIdentity(source_id, fid, designation)
        # Key generation runs after /create answers; replies wait for it (key_ready).
        self.ensure_key(identity, passphrase)
        return identity, passphrase

    @inlineCallbacks
    def login(self, codename: str):
        """-> (SourceIdentity, passphrase) or None. Costs two KDF runs either way."""
        fid, passphrase = yield self._derive(codename)
        row = yield self.db.run(queries.source_by_filesystem_id, fid)
        if row is None:
            return None
        identity = SourceIdentity(row["id"], fid, row["designation"])
        if row["key_fingerprint"] is None:
            self.ensure_key(identity, passphrase)
        return identity, passphrase

    def _derive(self, codename: str) -> Deferred:
        # Both derivations always run (in parallel), so a failed login costs what a good one does.
        d = DeferredList(
            [self.crypto_pool.run(self.kdf.filesystem_id, codename), self.crypto_pool.run(self.kdf.key_passphrase, codename)],
            fireOnOneErrback=True, consumeErrors=True,
        )
        return d.addCallback(lambda results: (results[0][1], results[1][1]))

    # -- source key pairs ----------------------------------------------------------------

    def ensure_key(self, identity: SourceIdentity, passphrase: str) -> Deferred:
        """Make the source's key pair unless it exists or is being made. Never fails loudly."""
        if identity.source_id in self._keygen:
            return self._keygen[identity.source_id]
        d = self._make_key(identity, passphrase)
        self._keygen[identity.source_id] = d

        def done(result: Any) -> Any:
            self._keygen.pop(identity.source_id, None)
            return result

        def failed(f: Any) -> None:
            _log.error("source key generation failed: {err}", err=f.getErrorMessage())
            return None

        d.addBoth(done)
        d.addErrback(failed)
        return d

    @inlineCallbacks
    def _make_key(self, identity: SourceIdentity, passphrase: str):
        row = yield self.db.run(queries.source_by_id, identity.source_id)
        if row is None:
            return None
        if row["key_fingerprint"]:
            return row["key_fingerprint"]
        info = yield self.crypto_pool.run(self.keyring.generate_source_key, passphrase)
        stored = yield self.db.run(queries.set_source_key, identity.source_id, info.fingerprint, info.public_armored)
        if not stored:  # the source was deleted meanwhile
            yield self.crypto_pool.run(self.keyring.delete_key_pair, info.fingerprint)
            return None
        return info.fingerprint

    @inlineCallbacks
    def key_ready(self, source_id: int):
        """The source's key fingerprint, waiting for a generation in flight. Raises KeyNotReady."""
        pending = self._keygen.get(source_id)
        if pending is not None:
            waiter: Deferred = Deferred()
            pending.addBoth(lambda r: (waiter.callback(None), r)[1])
            yield waiter
        row = yield self.db.run(queries.source_by_id, source_id)
        if row is None:
            raise SourceNotFound()
        if not row["key_fingerprint"]:
            raise KeyNotReady()
        return row["key_fingerprint"]

    # -- submissions ---------------------------------------------------------------------

    def encrypt_stream(self, *, gzip_name: str | None, compress: bool,
                       on_pause: Callable[[], None], on_resume: Callable[[], None]) -> StreamEncryption:
        stream = StreamEncryption(
            self.reactor, self.stream_pool, self.encryption, self.store.new_temp_path(),
            gzip_name=gzip_name, compress=compress, on_pause=on_pause, on_resume=on_resume,
        )
        self._streams.add(stream)
        return stream

    def abort_streams(self) -> None:
        """At shutdown: stop every upload in flight, or its pump thread would block pool.stop()."""
        for stream in list(self._streams):
            stream.abort()

    @inlineCallbacks
    def encrypt_message(self, text: str):
        stream = self.encrypt_stream(gzip_name=None, compress=True, on_pause=lambda: None, on_resume=lambda: None)
        stream.write(text.encode("utf-8"))
        size = yield stream.finish()
        return EncryptedPart("msg", stream.out_path, size)

    @inlineCallbacks
    def commit_submission(self, identity: SourceIdentity, parts: list[EncryptedPart]):
        """Make encrypted parts durable and visible. Only after this returns is it acknowledged.

        Raises ``StorageFailed`` (``disk_full`` set when space ran out) if the database or the
        store could not take it; then no part of it is left in either.
        """
        placed: list[str] = []
        try:
            names = yield self.db.run(
                queries.insert_submissions, identity.source_id, identity.designation,
                [(p.kind, p.size) for p in parts], self.clock(),
            )
            if names is None:
                raise SourceNotFound()
            self._placing.update(names)
            try:
                for part, name in zip(parts, names):
                    yield self.io_pool.run(self.store.place, part.temp_path, identity.filesystem_id, name)
                    placed.append(name)
            except BaseException:
                # Parts already moved into the store go too: an unacknowledged submission must
                # not stay half visible (a file without its row) until the next restart.
                for name in placed:
                    yield self.io_pool.run(self.store.remove, identity.filesystem_id, name)
                yield self.db.run(queries.delete_submissions_by_filename, names)
                raise
            finally:
                self._placing.difference_update(names)
        except (OSError, sqlite3.Error) as e:
            for part in parts:
                self.store.discard_temp(part.temp_path)
            raise StorageFailed(f"storing a submission failed: {type(e).__name__}", disk_full=is_disk_full(e)) from e
        except BaseException:
            for part in parts:
                self.store.discard_temp(part.temp_path)
            raise
        for part in parts:
            try:
                self.events.emit("submission.stored", kind="message" if part.kind == "msg" else "file")
            except OSError as e:
                # The submission is durable: a security log that cannot be appended to (disk
                # full) must not turn its confirmation into an error page.
                _log.error("security event submission.stored not written: {error}", error=os.strerror(e.errno or 0))
        return names

    def is_placed(self, filename: str) -> bool:
        """False while a committed submission or reply is still being moved into the store."""
        return filename not in self._placing

    # -- replies -------------------------------------------------------------------------

    @inlineCallbacks
    def replies_for(self, identity: SourceIdentity, passphrase: str):
        rows = yield self.db.run(queries.replies_for_source, identity.source_id)
        replies = []
        for row in rows:
            if not self.is_placed(row["filename"]):
                continue
            text = yield self.crypto_pool.run(self._read_reply, identity.filesystem_id, row["filename"], passphrase)
            replies.append(Reply(row["filename"], text))
        return replies

    def _read_reply(self, filesystem_id: str, filename: str, passphrase: str) -> str | None:
        forbid_reactor_thread("gpg")
        try:
            with self.store.open_stored(filesystem_id, filename) as f:
                return self.keyring.decrypt(f.read(), passphrase).decode("utf-8", "replace")
        except (OSError, GpgError):
            return None

    @inlineCallbacks
    def delete_reply(self, identity: SourceIdentity, filename: str):
        """Delete one of *this source's* replies. -> True if it was theirs and is gone."""
        deleted = yield self.db.run(queries.mark_reply_deleted_by_source, identity.source_id, filename)
        if deleted:
            yield self.crypto_pool.run(self.store.remove, identity.filesystem_id, filename)
        return bool(deleted)

    @inlineCallbacks
    def delete_all_replies(self, identity: SourceIdentity):
        filenames = yield self.db.run(queries.mark_all_replies_deleted_by_source, identity.source_id)
        for filename in filenames:
            yield self.crypto_pool.run(self.store.remove, identity.filesystem_id, filename)
        return len(filenames)

    @inlineCallbacks
    def add_reply(self, source_id: int, plaintext: str, journalist_id: int | None = None):
        """Encrypt a journalist's reply to the source key and the submission key; store it.

        Waits for a key generation in flight, so a reply is never lost to a slow key.
        """
        fingerprint = yield self.key_ready(source_id)
        ciphertext = yield self.crypto_pool.run(
            self.keyring.encrypt, plaintext.encode("utf-8"), [fingerprint, self.submission_fingerprint]
        )
        result = yield self.store_encrypted_reply(source_id, ciphertext, journalist_id)
        return result

    @inlineCallbacks
    def store_encrypted_reply(self, source_id: int, ciphertext: bytes, journalist_id: int | None = None,
                              reply_uuid: str | None = None):
        temp = self.store.new_temp_path()
        yield self.io_pool.run(_write_temp, temp, ciphertext)
        try:
            row = yield self.db.run(
                queries.insert_reply, source_id, reply_uuid or str(uuidlib.uuid4()), len(ciphertext),
                hashlib.sha256(ciphertext).hexdigest(), journalist_id, self.clock(),
            )
            if row is None:
                raise SourceNotFound()
            self._placing.add(row["filename"])
            try:
                yield self.io_pool.run(self.store.place, temp, row["filesystem_id"], row["filename"])
            except BaseException:
                yield self.db.run(queries.delete_reply_row, row["filename"])
                raise
            finally:
                self._placing.discard(row["filename"])
        except BaseException:
            self.store.discard_temp(temp)
            raise
        return row

    # -- deletion ------------------------------------------------------------------------

    def on_source_deleted(self, hook: Callable[[int], None]) -> None:
        self._source_deleted_hooks.append(hook)

    @inlineCallbacks
    def delete_source(self, source_id: int):
        row = yield self.db.run_and_scrub(queries.delete_source, source_id)
        if row is None:
            return False
        for hook in self._source_deleted_hooks:
            hook(source_id)
        yield self.crypto_pool.run(self.store.remove_source, row["filesystem_id"])
        if row["key_fingerprint"]:
            yield self.crypto_pool.run(self.keyring.delete_key_pair, row["key_fingerprint"])
        return True

    # -- start-up ------------------------------------------------------------------------

    def recover_blocking(self) -> Any:
        """Reconcile store and database before serving (start-up, before the reactor runs)."""
        known = self.db.run_blocking(queries.all_stored_filenames)
        report, missing = self.store.recover(known)
        if missing:
            self.db.run_blocking(queries.delete_rows_for_missing_files, missing)
        return report


def _write_temp(path: str, data: bytes) -> None:
    forbid_reactor_thread("store")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


