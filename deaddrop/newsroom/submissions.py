# -*- test-case-name: tests.integration.test_submissions,tests.integration.test_source_flow -*-
"""A source's submission, stored whole or not at all (``newsroom.submissions``).

Its files are encrypted as they stream in (``encrypt_stream``), their body admitted at its
headers with disk room for all it brings, the message included (``admit_upload``, see
``newsroom.uploads``); once the body has arrived, ``submit`` is the one call that stores it:
it encrypts the message, commits message and files together, and on every failure discards
every part, so nothing of a submission that was not stored stays in the temp folder. Only
ciphertext is ever written: the plaintext goes from the socket into gpg.
"""
from __future__ import annotations

import errno
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks

from deaddrop.admission.disk_space import DiskSpace
from deaddrop.admission.upload_slots import UploadSlots
from deaddrop.crypto.pool import WorkerPool
from deaddrop.crypto.streaming import StreamEncryption
from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.newsroom.encryption import EncryptedPart, SubmissionEncryption
from deaddrop.newsroom.identity import SourceIdentity, SourceNotFound
from deaddrop.newsroom.replies import SourceReplies
from deaddrop.newsroom.uploads import HasTempPath, UploadHold, discard
from deaddrop.store import queries
from deaddrop.store.db import Database
from deaddrop.store.files import Store


class ReceivedFile(Protocol):
    """A file of an upload body, encrypted as it streamed in (``encrypt_stream``)."""

    temp_path: str
    ciphertext_size: int


@dataclass(frozen=True)
class Stored:
    """What a submission stored: the source's page says it back."""

    message: bool
    documents: int


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


@dataclass
class Submissions:
    """Uploads admitted and encrypted as they arrive, and submissions committed or discarded."""

    db: Database
    store: Store
    encrypting: SubmissionEncryption  # to the keys of the source's desks, into the temp folder
    io_pool: WorkerPool  # renames and fsyncs into the store: never behind uploads
    uploads: UploadSlots  # key: source id (and its circuit); a slot is held for an upload's whole life
    disk: DiskSpace | None  # admits uploads against free space (None: not checked)
    activity: SourceActivity
    replies: SourceReplies  # makes the source's key pair after its first submission
    clock: Callable[[], float]
    # The newsroom's names committed but not yet in the store (``Newsroom.is_placed``).
    placing: set[str]

    # -- the one call ------------------------------------------------------------------------

    def submit(self, identity: SourceIdentity, message: str, files: Sequence[ReceivedFile],
               passphrase: str | None = None) -> "Deferred[Stored]":
        """Store a source's submission: ``message`` (if it says anything) and ``files``. -> ``Stored``.

        The room it holds on the disk: ``files`` came in a body admitted with room for all of it,
        the message included (``admit_upload``), so the message is encrypted in that room; a
        message sent without files is admitted on its own (``encrypt_message``). Message and
        files are committed together (``commit``), and with ``passphrase`` the source's key pair
        is made after its first submission.

        On every failure, every part is discarded, the files included, and the error raised:
        ``Busy`` (the message queue is full), ``NoRoom``, ``EncryptionFailed``, ``StorageFailed``,
        ``SourceNotFound`` (deleted meanwhile), or anything unexpected. Cancelling it stops it
        half-way: callers that must see it through (a request whose client may hang up) shield it.
        """
        return self._submit(identity, message, list(files), passphrase)

    @inlineCallbacks
    def _submit(self, identity: SourceIdentity, message: str, files: list[ReceivedFile], passphrase: str | None):
        parts = [EncryptedPart("doc", f.temp_path, f.ciphertext_size) for f in files]
        try:
            if message.strip():
                text = yield self.encrypt_message(identity, message, room_held=bool(files))
                parts.insert(0, text)
            yield self.commit(identity, parts, passphrase)
        except BaseException:
            self.discard(parts)
            raise
        return Stored(message=bool(message.strip()), documents=len(files))

    # -- as a body arrives ---------------------------------------------------------------------

    def may_upload(self, source_id: int) -> bool:
        """Whether this source may start another upload (each holds a pump slot while it arrives)."""
        return self.uploads.holding(source_id) < self.uploads.per_key

    def admit_upload(self, source_id: int | None, circuit: Any, evict: Callable[[], Any]) -> UploadHold:
        """What one upload body will hold while it arrives (see ``newsroom.uploads``); ``evict`` is
        called if it is ended to make room for another."""
        return UploadHold(self.uploads, self.disk, self.activity, source_id, circuit, evict)

    def encrypt_stream(self, *, gzip_name: str | None, compress: bool,
                       on_pause: Callable[[], None], on_resume: Callable[[], None],
                       identity: SourceIdentity | None = None) -> StreamEncryption:
        """A file of an upload body, encrypted into the temp folder as it arrives, to the keys of
        ``identity``'s desks (None: the one desk of an instance that has one). Raises
        ``DeskNotChosen``."""
        return self.encrypting.stream(identity, gzip_name=gzip_name, compress=compress, on_pause=on_pause,
                                      on_resume=on_resume)

    def in_flight(self, source_id: int) -> bool:
        """Whether a submission of this source is arriving or being encrypted now."""
        return bool(self.uploads.holding(source_id) or self.encrypting.messages.holding(source_id))

    def discard(self, received: Iterable[HasTempPath]) -> None:
        """Remove the ciphertext of parts that will not be stored."""
        received = list(received)
        self.encrypting.forget(part.temp_path for part in received)
        discard(self.store, received)

    def abort_streams(self) -> None:
        """At shutdown: stop every upload in flight, or its pump thread would block pool.stop()."""
        self.encrypting.abort_all()

    # -- the steps of ``submit`` -----------------------------------------------------------------

    def encrypt_message(self, identity: SourceIdentity, text: str, room_held: bool = False) -> Deferred:
        """Encrypt a text part on the message pool: slow file uploads cannot hold it up.

        Raises ``NoRoom`` if the disk cannot take its largest ciphertext and keep its reserve,
        unless ``room_held``: it came in a body whose files were admitted (``UploadHold``), and
        that body's length counted it. Raises ``DeskNotChosen`` if the source must choose first."""
        return self.encrypting.message(identity, text, room_held)

    def commit(self, identity: SourceIdentity, parts: list[EncryptedPart], passphrase: str | None = None) -> Deferred:
        """Make encrypted parts durable and visible. Only after this returns is it acknowledged.

        Raises ``StorageFailed`` (``disk_full`` set when space ran out) if the database or the
        store could not take it; then no part of it is left in either.

        With ``passphrase``, the source's key pair is made after its first submission. The key
        generation is registered before the submission becomes visible to journalists, so a
        reply sent meanwhile waits for the key instead of failing.
        """
        committed: Deferred = Deferred()
        if passphrase is not None:
            self.replies.ensure_key(identity, passphrase, after=committed)
        d = self._commit(identity, parts)

        def done(result: Any) -> Any:
            committed.callback(None)
            return result

        return d.addBoth(done)

    @inlineCallbacks
    def _commit(self, identity: SourceIdentity, parts: list[EncryptedPart]):
        placed: list[str] = []
        try:
            desks = self.encrypting.sent_to(identity, parts)  # each part records the desks it was encrypted to
            names = yield self.db.run(
                queries.insert_submissions, identity.source_id, identity.designation,
                [(p.kind, p.size, d) for p, d in zip(parts, desks)], self.clock(),
            )
            if names is None:
                raise SourceNotFound()
            self.placing.update(names)
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
                self.placing.difference_update(names)
        except (OSError, sqlite3.Error) as e:
            self.discard(parts)
            raise StorageFailed(f"storing a submission failed: {type(e).__name__}", disk_full=is_disk_full(e)) from e
        except BaseException:
            self.discard(parts)
            raise
        for part, sent_to in zip(parts, desks):  # counted per desk too, for the day's report
            desk_uuids = [d.uuid for d in map(self.encrypting.desks.by_id, sent_to) if d is not None]
            self.activity.stored(part.kind, desk_uuids)
        return names
