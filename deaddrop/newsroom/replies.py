# -*- test-case-name: tests.integration.test_source_flow -*-
"""A source's key pair and the replies encrypted to it: the part of the newsroom that lets the
newsroom answer a source, and the source read and delete the answers (``newsroom.replies``).

A source gets its key pair after its first submission (nobody can reply to a source that never
wrote); a reply is encrypted to that key and the keys of the desks that send it (the source's
desks the journalist is on), written as a temp file and moved into the store once its row exists.
"""
from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.defer import Deferred, inlineCallbacks

from deaddrop.admission.queues import AdmissionQueue
from deaddrop.crypto.gpg import GpgError, Keyring
from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread
from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.durable import write_new_file
from deaddrop.newsroom.identity import KeyNotReady, SourceIdentity, SourceNotFound
from deaddrop.newsroom.read_marks import ReadMarks
from deaddrop.store import desk_queries, queries
from deaddrop.store.db import Database
from deaddrop.store.files import Store


@dataclass(frozen=True)
class Reply:
    filename: str
    text: str | None  # None when it could not be decrypted
    created_at: float = 0.0
    new: bool = False  # not yet shown to the source
    # What the source's page names a reply by: its place among this source's own submissions
    # and replies. The file name carries the newsroom's designation, which a source must never see.
    number: int = 0


@dataclass
class SourceReplies:
    """Source key pairs and replies, on the newsroom's pools and store."""

    db: Database
    store: Store
    keyring: Keyring
    crypto_pool: WorkerPool
    io_pool: WorkerPool
    desks: Any  # newsroom.desks.Desks: whose keys a reply is encrypted to
    activity: SourceActivity
    keygen: AdmissionQueue  # key: source id
    decrypt: AdmissionQueue  # key: source id; a logged-in source's replies
    clock: Callable[[], float]
    # The newsroom's names committed but not yet in the store (``Newsroom.is_placed``): a reply
    # is one of them while it is moved in, and a source is not shown it until it is.
    placing: set[str]
    # Replies shown to their source since the last midnight UTC, written then (see read_marks).
    read_marks: ReadMarks = field(default_factory=ReadMarks)
    _keygen: dict[int, Deferred] = field(default_factory=dict)

    # -- source key pairs ----------------------------------------------------------------

    def ensure_key(self, identity: SourceIdentity, passphrase: str, after: Deferred | None = None) -> Deferred:
        """Make the source's key pair unless it exists or is being made. Never fails loudly.

        Only a source that has submitted something gets one (nobody can reply to the others).
        ``after``: wait for it first (a first submission being committed).
        """
        if identity.source_id in self._keygen:
            return self._keygen[identity.source_id]
        d = self._make_key(identity, passphrase, after)
        self._keygen[identity.source_id] = d

        def done(result: Any) -> Any:
            self._keygen.pop(identity.source_id, None)
            return result

        def failed(f: Any) -> None:
            # Counted for the day's report, not logged now: the first submission happened now.
            self.activity.failed(f"source key generation failed: {f.type.__name__}")
            return None

        d.addBoth(done)
        d.addErrback(failed)
        return d

    @inlineCallbacks
    def _make_key(self, identity: SourceIdentity, passphrase: str, after: Deferred | None):
        if after is not None:
            yield after
        row = yield self.db.run(queries.source_by_id, identity.source_id)
        if row is None or row["pending"]:
            return None
        if row["key_fingerprint"]:
            return row["key_fingerprint"]
        info = yield self.keygen.run(identity.source_id, self.keyring.generate_source_key, passphrase)
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
            waiter: Deferred[None] = Deferred()

            def release(result: Any) -> Any:  # the generation's outcome goes on to its own waiters
                waiter.callback(None)
                return result

            pending.addBoth(release)
            yield waiter
        row = yield self.db.run(queries.source_by_id, source_id)
        if row is None:
            raise SourceNotFound()
        if not row["key_fingerprint"]:
            raise KeyNotReady()
        return row["key_fingerprint"]

    # -- replies -------------------------------------------------------------------------

    @inlineCallbacks
    def for_source(self, identity: SourceIdentity, passphrase: str):
        """The source's replies, decrypted in its decryption queue (``Busy`` when full)."""
        rows = yield self.db.run(queries.replies_for_source, identity.source_id)
        placed = [row for row in rows if row["filename"] not in self.placing]
        if not placed:
            return []
        texts = yield self.decrypt.run(identity.source_id, self._read_replies, identity.filesystem_id,
                                              [row["filename"] for row in placed], passphrase)
        marks = self.read_marks
        return [Reply(row["filename"], text, row["created_at"],
                      not (row["read_by_source"] or marks.shown(identity.source_id, row["filename"])), row["n"])
                for row, text in zip(placed, texts)]

    def _read_replies(self, filesystem_id: str, filenames: list[str], passphrase: str) -> list[str | None]:
        return [self._read_reply(filesystem_id, name, passphrase) for name in filenames]

    def mark_read(self, identity: SourceIdentity, replies: list[Reply]) -> None:
        """After the source was shown ``replies``: they are no longer counted as new. Nothing is
        written now (a write would date the reading): the marks wait for midnight (``read_marks``)."""
        self.read_marks.add(identity.source_id, [r.filename for r in replies if r.new])

    def _read_reply(self, filesystem_id: str, filename: str, passphrase: str) -> str | None:
        forbid_reactor_thread("gpg")
        try:
            with self.store.open_stored(filesystem_id, filename) as f:
                return self.keyring.decrypt(f.read(), passphrase).decode("utf-8", "replace")
        except (OSError, GpgError):
            return None

    @inlineCallbacks
    def delete(self, identity: SourceIdentity, number: int):
        """Delete *this source's* reply ``number`` (``Reply.number``). -> True if it was theirs and is gone."""
        filename = yield self.db.run(queries.mark_reply_deleted_by_source, identity.source_id, number)
        if filename is not None:
            yield self.crypto_pool.run(self.store.remove, identity.filesystem_id, filename)
        return filename is not None

    @inlineCallbacks
    def delete_all(self, identity: SourceIdentity):
        filenames = yield self.db.run(queries.mark_all_replies_deleted_by_source, identity.source_id)
        for filename in filenames:
            yield self.crypto_pool.run(self.store.remove, identity.filesystem_id, filename)
        return len(filenames)

    @inlineCallbacks
    def add(self, source_id: int, plaintext: str, journalist_id: int | None = None):
        """Encrypt a journalist's reply to the source key and the keys of the desks sending it
        (the source's desks the journalist is on; None: all the source's desks); store it.

        Waits for a key generation in flight, so a reply is never lost to a slow key.
        """
        fingerprint = yield self.key_ready(source_id)
        desks = yield self.sending_desks(source_id, journalist_id)
        ciphertext = yield self.crypto_pool.run(
            self.keyring.encrypt, plaintext.encode("utf-8"), [fingerprint] + [d.fingerprint for d in desks]
        )
        result = yield self.store_encrypted(source_id, ciphertext, journalist_id, desks=desks)
        return result

    @inlineCallbacks
    def sending_desks(self, source_id: int, journalist_id: int | None):
        """The desks a reply of ``journalist_id`` to the source is encrypted to (the source's
        desks the journalist is on; None: all the source's desks). -> ``DeskInfo``s with keys."""
        ids = yield self.db.run(desk_queries.shared_desks, source_id, journalist_id)
        if any(self.desks.by_id(i) is None for i in ids):
            yield self.desks.reload()  # a desk added moments ago
        desks = [d for d in (self.desks.by_id(i) for i in ids) if d is not None and d.fingerprint]
        if not desks:
            raise SourceNotFound()  # not the journalist's source (the desk checked that already)
        return desks

    @inlineCallbacks
    def store_encrypted(self, source_id: int, ciphertext: bytes, journalist_id: int | None = None,
                        reply_uuid: str | None = None, desks: Any = None):
        """Store an encrypted reply for the desks sending it (``desks``; None: the source's desks
        the journalist is on)."""
        if desks is None:
            desks = yield self.sending_desks(source_id, journalist_id)
        temp = self.store.new_temp_path()
        yield self.io_pool.run(_write_temp, temp, ciphertext)
        try:
            row = yield self.db.run(
                queries.insert_reply, source_id, reply_uuid or str(uuidlib.uuid4()), len(ciphertext),
                hashlib.sha256(ciphertext).hexdigest(), journalist_id, self.clock(), tuple(d.id for d in desks),
            )
            if row is None:
                raise SourceNotFound()
            self.placing.add(row["filename"])
            try:
                yield self.io_pool.run(self.store.place, temp, row["filesystem_id"], row["filename"])
            except BaseException:
                yield self.db.run(queries.delete_reply_row, row["filename"])
                raise
            finally:
                self.placing.discard(row["filename"])
        except BaseException:
            self.store.discard_temp(temp)
            raise
        return row


def _write_temp(path: str, data: bytes) -> None:
    forbid_reactor_thread("store")
    write_new_file(path, data)
