# -*- test-case-name: tests.integration.test_desks,tests.integration.test_desk_migration -*-
"""The instance's desks as sources and encryption see them (issue 29).

A desk is a name and description in every source language, its own submission key (its own
SVS) and its members. ``Desks`` keeps a snapshot of them, read from the database at start-up,
every ``RELOAD_SECONDS`` (``deaddrop-admin desk ...`` changes them from another process) and
after every change made through the server. Each desk's public key is written once to
``DATA/desk-keys/FINGERPRINT.asc`` (what ``gpg --recipient-file`` reads while an upload streams)
and imported into the server's keyring (for replies).

Which desks read a source's submissions is the source's choice, kept with the source; with
one desk there is nothing to choose, and that desk reads everything, as before desks.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from twisted.internet.defer import inlineCallbacks

from deaddrop.crypto.gpg import Keyring
from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread
from deaddrop.durable import write_atomically
from deaddrop.newsroom.identity import SourceIdentity
from deaddrop.store import desk_queries
from deaddrop.store.db import Database

# How stale the snapshot may be after an admin changed desks with ``deaddrop-admin``.
RELOAD_SECONDS = 10.0
KEY_DIR = "desk-keys"


class DeskNotChosen(Exception):
    """The instance has several desks and the source has chosen none yet."""


class NoSuchDesk(LookupError):
    pass


@dataclass(frozen=True)
class DeskInfo:
    id: int
    uuid: str
    name: str  # the admin's name, and what sources see where the desk has no text in their language
    texts: dict[str, dict[str, str]]  # language -> {"name": ..., "description": ...}
    fingerprint: str | None
    key_file: str | None  # DATA/desk-keys/FINGERPRINT.asc
    members: int
    member_names: tuple[str, ...]  # only if the desk shows its members to sources
    retention_days: int | None
    is_default: bool
    public_key: str | None = field(default=None, repr=False)  # armored: what workstations encrypt replies to

    def text(self, language: str, what: str, fallback: str = "en") -> str:
        """The desk's ``what`` ("name" or "description") in ``language``, else in ``fallback``."""
        for lang in (language, fallback):
            value = self.texts.get(lang, {}).get(what)
            if value:
                return value
        return self.name if what == "name" else ""


@dataclass
class Desks:
    db: Database
    keyring: Keyring
    crypto_pool: WorkerPool
    data_dir: str
    _desks: tuple[DeskInfo, ...] = ()
    _imported: set[str] = field(default_factory=set)

    # -- the snapshot ----------------------------------------------------------------------

    def all(self) -> tuple[DeskInfo, ...]:
        """Every desk, the default first."""
        return self._desks

    def offered(self) -> tuple[DeskInfo, ...]:
        """The desks a source may choose: those with a key and at least one journalist. A desk
        nobody reads is not offered: a source that chose it would be writing to no one."""
        return tuple(d for d in self._desks if d.key_file and d.members > 0)

    def is_offered(self, desk: DeskInfo) -> bool:
        return desk in self.offered()

    @property
    def several(self) -> bool:
        """Whether sources choose (with one desk offered, nothing changes on their pages)."""
        return len(self.offered()) > 1

    def by_id(self, desk_id: int) -> DeskInfo | None:
        return next((d for d in self._desks if d.id == desk_id), None)

    def by_uuid(self, uuid: str) -> DeskInfo | None:
        return next((d for d in self._desks if d.uuid == uuid), None)

    @property
    def default(self) -> DeskInfo:
        return next(d for d in self._desks if d.is_default)

    def resolve(self, chosen: Iterable[int]) -> tuple[DeskInfo, ...]:
        """The desks a source's submissions go to: those it chose (that can receive), or, on an
        instance with one desk, that desk. Raises ``DeskNotChosen``."""
        desks = tuple(d for d in (self.by_id(i) for i in sorted(set(chosen))) if d is not None and d.key_file)
        if desks:
            return desks  # a desk chosen earlier keeps receiving, even while nobody is on it
        # No choice to make: the one desk offered (or, before any journalist exists, the one desk).
        only = self.offered() or tuple(d for d in self._desks if d.key_file)
        if len(only) == 1:
            return only
        raise DeskNotChosen()

    @inlineCallbacks
    def of_source(self, identity: SourceIdentity):
        """``identity`` with the desks the database has for it now (another session of the same
        source may have added one, or its first submission gave it the instance's one desk)."""
        desks = yield self.db.run(desk_queries.desks_of_source, identity.source_id)
        return dataclasses.replace(identity, desks=desks)

    def names_for(self, desk_ids: Iterable[int], language: str) -> list[str]:
        """What a source's pages say its messages go to, in its language."""
        return [d.text(language, "name") for d in (self.by_id(i) for i in desk_ids) if d is not None]

    # -- loading ---------------------------------------------------------------------------

    def reload_blocking(self) -> None:
        """At start-up, before the reactor runs."""
        self._desks = self._materialise(self.db.run_blocking(_rows))

    @inlineCallbacks
    def reload(self):
        rows = yield self.db.run(_rows)
        self._desks = yield self.crypto_pool.run(self._materialise, rows)
        return self._desks

    def _materialise(self, rows: list[dict[str, Any]]) -> tuple[DeskInfo, ...]:
        """Write each desk's key file once and import its key once (a pool thread)."""
        forbid_reactor_thread("gpg")
        folder = os.path.join(self.data_dir, KEY_DIR)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        desks = []
        for row in rows:
            fingerprint, key_file = row["key_fingerprint"], None
            if fingerprint and row["public_key"]:
                key_file = os.path.join(folder, f"{fingerprint}.asc")
                if not os.path.isfile(key_file):
                    write_atomically(key_file, row["public_key"].encode("utf-8"), mode=0o644)
                if fingerprint not in self._imported:
                    self.keyring.import_submission_key(row["public_key"])
                    self._imported.add(fingerprint)
            desks.append(DeskInfo(
                row["id"], row["uuid"], row["name"], row["texts"], fingerprint, key_file, row["members"],
                tuple(row["member_names"]), row["retention_days"], bool(row["is_default"]),
                row["public_key"] if key_file else None))
        return tuple(desks)


def _rows(conn: Any) -> list[dict[str, Any]]:
    rows = []
    for row in desk_queries.all_desks(conn):
        names = desk_queries.member_names(conn, row["id"]) if row["show_members"] else []
        rows.append(dict(row, texts=desk_queries.texts_of(row), member_names=names))
    return rows
