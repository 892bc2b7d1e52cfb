# -*- test-case-name: tests.integration.test_desks,tests.test_streaming,tests.integration.test_source_flow -*-
"""Submissions encrypted as they arrive, to the keys of the desks the source chose (issue 29):
the newsroom's part that turns a file part or a message into ciphertext in ``DATA/tmp``.

One ciphertext for all the source's desks, not one per desk: gpg encrypts the data once under
one session key and wraps that key for each desk's key (one ``--recipient-file`` each). A
5 GB upload is then written once, read by one gpg process and stored once, whatever the number
of desks; each desk's SVS opens the same file. (Its OpenPGP header names the key ids it was
encrypted to, as the database names the desks.) A desk a source adds later cannot open what
was sent before: a session key cannot be wrapped anew without a secret key the server never
has, and the desks recorded for each file say exactly which keys it was encrypted to.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from twisted.internet.defer import inlineCallbacks

from deaddrop.admission.disk_space import DiskSpace, NoRoom
from deaddrop.admission.queues import AdmissionQueue
from deaddrop.crypto.pool import WorkerPool
from deaddrop.crypto.streaming import EncryptionTarget, StreamEncryption
from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.newsroom.desks import Desks
from deaddrop.newsroom.identity import SourceIdentity
from deaddrop.store.files import Store


@dataclass
class EncryptedPart:
    """A submission part already encrypted into a temp file, waiting to be committed."""

    kind: str  # "msg" or "doc"
    temp_path: str
    size: int = 0


@dataclass
class SubmissionEncryption:
    reactor: Any
    store: Store
    desks: Desks
    target: EncryptionTarget  # the gpg to run; its key files are the desks'
    stream_pool: WorkerPool  # one thread per upload in flight, pumping it into gpg
    message_pool: WorkerPool  # text-only parts: never behind slow file uploads
    messages: AdmissionQueue  # key: source id
    activity: SourceActivity
    disk: DiskSpace | None = None
    _streams: "weakref.WeakSet[StreamEncryption]" = field(default_factory=lambda: weakref.WeakSet())
    # The desks each encrypted temp file was encrypted to, until it is committed or discarded:
    # a submission records exactly those (a desk the source adds meanwhile cannot open it).
    _sent_to: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def _for(self, identity: SourceIdentity | None) -> tuple[EncryptionTarget, tuple[int, ...]]:
        """Raises ``DeskNotChosen`` before anything is started."""
        desks = self.desks.resolve(identity.desks if identity is not None else ())
        return self.target.to([d.key_file for d in desks if d.key_file]), tuple(d.id for d in desks)

    def _start(self, pool: WorkerPool, target: EncryptionTarget, desk_ids: tuple[int, ...], **kw: Any) -> StreamEncryption:
        stream = StreamEncryption(self.reactor, pool, target, self.store.new_temp_path(), **kw)
        self._streams.add(stream)
        self._sent_to[stream.out_path] = desk_ids
        stream.on_gone = lambda: self.forget([stream.out_path])
        return stream

    def stream(self, identity: SourceIdentity | None, *, gzip_name: str | None, compress: bool,
               on_pause: Callable[[], None], on_resume: Callable[[], None]) -> StreamEncryption:
        """A file part, encrypted as it arrives to the keys of ``identity``'s desks (None: the
        one desk of an instance that has one)."""
        target, desk_ids = self._for(identity)
        return self._start(self.stream_pool, target, desk_ids, gzip_name=gzip_name, compress=compress,
                           on_pause=on_pause, on_resume=on_resume)

    def message(self, identity: SourceIdentity, text: str, room_held: bool = False):
        """A text part, on the message pool. Raises ``NoRoom`` if the disk cannot take its
        largest ciphertext and keep its reserve, unless ``room_held`` (see Newsroom)."""
        target, desk_ids = self._for(identity)
        return self.messages.admit(identity.source_id,
                                   lambda ticket: self._message(text, target, desk_ids, room_held))

    @inlineCallbacks
    def _message(self, text: str, target: EncryptionTarget, desk_ids: tuple[int, ...], room_held: bool):
        data = text.encode("utf-8")
        room = None
        if self.disk is not None and not room_held:
            try:
                # Held while it is written; then its bytes are off the free space. Text may use
                # the TEXT_ROOM that file uploads must leave.
                room = self.disk.admit(len(data), text=True)
            except NoRoom:
                self.activity.not_stored("no_room")  # for the day's report (disk_watch tells the admin)
                raise
        try:
            stream = self._start(self.message_pool, target, desk_ids, gzip_name=None, compress=True,
                                 on_pause=lambda: None, on_resume=lambda: None)
            stream.write(data)
            size = yield stream.finish()
        finally:
            if room is not None:
                room.release()
        return EncryptedPart("msg", stream.out_path, size)

    def sent_to(self, identity: SourceIdentity, parts: Iterable[EncryptedPart]) -> list[tuple[int, ...]]:
        """The desks each part was encrypted to, forgotten here (a part that came some other way:
        the source's desks now)."""
        found = [self._sent_to.pop(p.temp_path, None) for p in parts]
        if any(d is None for d in found):
            now = tuple(d.id for d in self.desks.resolve(identity.desks))
            found = [d if d is not None else now for d in found]
        return [d for d in found if d is not None]

    def forget(self, paths: Iterable[str]) -> None:
        for path in paths:
            self._sent_to.pop(path, None)

    def abort_all(self) -> None:
        """At shutdown: stop every upload in flight, or its pump thread would block pool.stop()."""
        for stream in list(self._streams):
            stream.abort()
