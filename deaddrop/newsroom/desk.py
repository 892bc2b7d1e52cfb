# -*- test-case-name: tests.test_desk,tests.test_downloads -*-
"""Journalist use cases over the newsroom: sources, submissions, downloads, replies, deletion.

What leaves this module is what a journalist may see: a source's random ``uuid``, its
designation, counts, its public key, and the stored (encrypted) files. A source's filesystem
id is derived from its codename, so it never leaves: the desk looks it up itself whenever it
needs a path, and no view object carries it.

Every blocking call runs in a pool: SQLite through ``db.run``, hashing, zipping and opening
files in the stream pool, GnuPG in the crypto pool.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import sqlite3
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable

from twisted.internet.defer import Deferred, inlineCallbacks

from deaddrop.crypto import armor
from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.newsroom.identity import KeyNotReady, SourceNotFound
from deaddrop.newsroom.newsroom import Newsroom
from deaddrop.store import journalist_queries as jq

__all__ = ["Desk", "KeyNotReady", "SourceFilter", "SourceNotFound"]

_ARMOR_BEGIN = "-----BEGIN PGP MESSAGE-----"
_ARMOR_END = "-----END PGP MESSAGE-----"
_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_REPLY_CHARS = 100_000


class NotFound(LookupError):
    pass


class NotEncryptedToSource(ValueError):
    """An API reply that is not an OpenPGP message to the source's key (e.g. plaintext)."""


class DuplicateReply(ValueError):
    pass


@dataclass(frozen=True)
class SourceView:
    id: int  # the database row id: internal, never shown (the uuid is the public name)
    uuid: str
    designation: str
    is_starred: bool
    last_updated: float
    unread: int
    documents: int
    messages: int
    interaction_count: int
    key_fingerprint: str | None
    public_key: str | None = field(repr=False)
    # The journalist whose view this is: what it holds, and what the desk does with it, is what
    # that journalist's desks may see (counts included).
    reader: int = 0

    @classmethod
    def from_row(cls, row: Any, reader: int) -> "SourceView":
        return cls(row["id"], row["uuid"], row["designation"], bool(row["is_starred"]), float(row["last_updated"]),
                   int(row["unread"]), int(row["documents"]), int(row["messages"]), int(row["last_number"]),
                   row["key_fingerprint"], row["public_key"], reader)

    @property
    def folder_name(self) -> str:
        return self.designation.replace(" ", "_")


@dataclass(frozen=True)
class SubmissionView:
    id: int
    uuid: str
    source_uuid: str
    filename: str
    kind: str  # "msg" or "doc"
    size: int
    is_read: bool
    seen_by: tuple[str, ...]
    created_at: float

    @property
    def is_message(self) -> bool:
        return self.kind == "msg"


@dataclass(frozen=True)
class ReplyView:
    id: int
    uuid: str
    source_uuid: str
    filename: str
    size: int
    journalist_uuid: str | None
    journalist_username: str | None
    deleted_by_source: bool
    seen_by: tuple[str, ...]
    created_at: float


@dataclass
class Download:
    """An open file to stream; whoever serves it closes it (the producers do)."""

    file: BinaryIO
    size: int
    filename: str
    sha256: str | None = None
    content_type: str = "application/pgp-encrypted"

    def close(self) -> None:
        self.file.close()


def source_cursor(source: SourceView) -> str:
    """Where a page ended: the listing order's keys of its last source (all already public)."""
    return f"{int(source.is_starred)}_{source.last_updated!r}_{source.uuid}"


def parse_source_cursor(text: str) -> tuple[int, float, str]:
    starred, _, rest = text.partition("_")
    when, _, uuid = rest.rpartition("_")
    try:
        key = (int(starred), float(when), uuid)
    except ValueError:
        raise ValueError("not a page cursor") from None
    if starred not in ("0", "1") or not valid_uuid(uuid) or key[1] != key[1] or abs(key[1]) == float("inf"):
        raise ValueError("not a page cursor")
    return key


@dataclass(frozen=True)
class SourceFilter:
    """What the journalist narrowed the source list to: a part of the designation, starred,
    with unread submissions (each optional; all together narrow further)."""

    designation: str | None = None
    starred: bool = False
    unread: bool = False

    @property
    def active(self) -> bool:
        return bool(self.designation) or self.starred or self.unread


def _page_and_total(conn: sqlite3.Connection, reader: int, limit: int, offset: int,
                    only: SourceFilter) -> tuple[list, int]:
    narrow = (only.designation, only.starred, only.unread)
    return jq.visible_sources(conn, reader, limit, offset, *narrow), jq.count_visible_sources(conn, reader, *narrow)


def _after_and_total(conn: sqlite3.Connection, reader: int, after: tuple[int, float, str] | None,
                     limit: int) -> tuple[list, int]:
    return jq.visible_sources_after(conn, reader, after, limit), jq.count_visible_sources(conn, reader)


def valid_uuid(text: Any) -> bool:
    return isinstance(text, str) and _UUID_RE.fullmatch(text) is not None


class Desk:
    """Every call is for one journalist, the reader (a journalist id; a ``SourceView`` carries
    its reader): it sees, counts, downloads and deletes only what its desks were sent, and a
    source of other desks only is, to it, a source that does not exist."""

    def __init__(self, newsroom: Newsroom) -> None:
        self.newsroom = newsroom
        self.db = newsroom.db
        self.store = newsroom.store

    # -- sources ---------------------------------------------------------------------------

    @inlineCallbacks
    def sources(self, reader: int, page: int = 1, per_page: int = -1, only: SourceFilter = SourceFilter()):
        """-> (one page of sources in listing order, how many there are); ``page`` from 1."""
        rows, total = yield self.db.run(_page_and_total, reader, per_page, max(0, (page - 1) * per_page), only)
        return [SourceView.from_row(r, reader) for r in rows], total

    @inlineCallbacks
    def sources_among(self, reader: int, uuids: list[str]):
        """The visible sources among ``uuids`` (a journalist's selection), in listing order."""
        rows = yield self.db.run(jq.visible_sources_by_uuid, reader,
                                 [u for u in dict.fromkeys(uuids) if valid_uuid(u)])
        return [SourceView.from_row(r, reader) for r in rows]

    @inlineCallbacks
    def sources_after(self, reader: int, cursor: str | None, limit: int):
        """-> (sources after ``cursor`` in listing order, the total, the next page's cursor or None).

        Raises ``ValueError`` for a cursor this desk did not hand out."""
        after = parse_source_cursor(cursor) if cursor is not None else None
        rows, total = yield self.db.run(_after_and_total, reader, after, limit + 1)
        sources = [SourceView.from_row(r, reader) for r in rows[:limit]]
        return sources, total, source_cursor(sources[-1]) if len(rows) > limit else None

    @inlineCallbacks
    def sources_by_id(self, reader: int, after_id: int, limit: int):
        """-> up to ``limit`` sources after row id ``after_id`` (see ``jq.visible_sources_by_id``):
        one short transaction each, for walking every source without holding them all."""
        rows = yield self.db.run(jq.visible_sources_by_id, reader, after_id, limit)
        return [SourceView.from_row(r, reader) for r in rows]

    @inlineCallbacks
    def source(self, reader: int, uuid: str):
        """A source that has submitted something to a desk of ``reader``, or None (pending
        sources, and other desks' sources, do not exist here)."""
        if not valid_uuid(uuid):
            return None
        row = yield self.db.run(jq.visible_source, reader, uuid)
        return SourceView.from_row(row, reader) if row is not None else None

    def set_starred(self, source: SourceView, starred: bool):
        return self.db.run(jq.set_starred, source.id, starred)

    @inlineCallbacks
    def delete_source(self, source: SourceView):
        """For the reader's desks: what they were sent goes, and the source leaves them. A source
        left on no desk goes whole (files, key, rows; its own sessions end: Newsroom's hooks);
        one also on another desk stays there, with what that desk was sent."""
        fid, names, alone = yield self.db.run_and_scrub(jq.leave_source, source.reader, source.id)
        if alone:
            deleted = yield self.newsroom.delete_source(source.id)
            return deleted
        yield self._remove_files(fid, names)
        return True

    @inlineCallbacks
    def _remove_files(self, fid: str | None, names: list[str]):
        if fid is not None:
            for name in names:
                yield self.newsroom.crypto_pool.run(self.store.remove, fid, name)

    # -- submissions and replies -----------------------------------------------------------

    @inlineCallbacks
    def submissions(self, source: SourceView):
        rows = yield self.db.run(jq.submissions_of, source.reader, source.id)
        return [_submission(r, source.uuid) for r in rows if self.newsroom.is_placed(r["filename"])]

    @inlineCallbacks
    def all_submissions(self, reader: int):
        rows = yield self.db.run(jq.all_visible_submissions, reader)
        return [_submission(r, r["source_uuid"]) for r in rows if self.newsroom.is_placed(r["filename"])]

    def submission(self, source: SourceView, uuid: str) -> Deferred:
        """The source's submission ``uuid``, or None."""
        return self.submissions(source).addCallback(_with_uuid, uuid)

    @inlineCallbacks
    def replies(self, source: SourceView):
        rows = yield self.db.run(jq.replies_of, source.reader, source.id)
        names = yield self.db.run(jq.usernames_by_id)
        return [_reply(r, source.uuid, names) for r in rows if self.newsroom.is_placed(r["filename"])]

    @inlineCallbacks
    def all_replies(self, reader: int):
        rows = yield self.db.run(jq.all_visible_replies, reader)
        names = yield self.db.run(jq.usernames_by_id)
        return [_reply(r, r["source_uuid"], names) for r in rows if self.newsroom.is_placed(r["filename"])]

    def reply(self, source: SourceView, uuid: str) -> Deferred:
        """The source's reply ``uuid``, or None."""
        return self.replies(source).addCallback(_with_uuid, uuid)

    # -- downloads -------------------------------------------------------------------------

    @inlineCallbacks
    def open_submission(self, source: SourceView, item: SubmissionView, journalist_id: int | None):
        """Open the stored ``.gpg`` for streaming, hashing it first if nobody has yet; marks it seen."""
        download = yield self._open_stored(source, item.filename, item.id, _submission_sha256, jq.set_submission_sha256)
        yield self.db.run(jq.mark_seen, journalist_id, [item.id])
        return download

    @inlineCallbacks
    def open_reply(self, source: SourceView, item: ReplyView, journalist_id: int | None):
        if item.deleted_by_source:
            raise NotFound()
        download = yield self._open_stored(source, item.filename, item.id, _reply_sha256, jq.set_reply_sha256)
        yield self.db.run(jq.mark_seen, journalist_id, [], [item.id])
        return download

    @inlineCallbacks
    def _open_stored(self, source: SourceView, filename: str, row_id: int,
                     read_sha256: Any, save_sha256: Any):
        """Open a stored file for streaming; hash it (once, in a pool thread) for its ETag."""
        fid = yield self.db.run(jq.source_filesystem_id, source.id)
        if fid is None:
            raise NotFound()
        known = yield self.db.run(read_sha256, row_id)
        try:
            f, size, digest = yield self.newsroom.io_pool.run(
                _open_and_hash, self.store.open_stored, fid, filename, known is None)
        except FileNotFoundError:
            raise NotFound() from None
        if known is None:
            yield self.db.run(save_sha256, row_id, digest)
        return Download(f, size, filename, known or digest)

    @inlineCallbacks
    def zip_submissions(self, source: SourceView, uuids: list[str] | None, journalist_id: int | None):
        """A stored (uncompressed) zip of the chosen submissions, or of all unread ones if ``uuids``
        is None: built in a pool thread into ``DATA/tmp``, opened, unlinked, and marked seen.

        Entries are ``<designation_with_underscore>/<stored filename>``: still encrypted.
        Returns None when there is nothing to download.
        """
        items = yield self.submissions(source)
        if uuids is None:
            chosen = [i for i in items if not i.is_read]
        else:
            wanted = set(uuids)
            chosen = [i for i in items if i.uuid in wanted]
        if not chosen:
            return None
        fid = yield self.db.run(jq.source_filesystem_id, source.id)
        if fid is None:
            raise NotFound()
        entries = [(fid, i.filename, f"{source.folder_name}/{i.filename}") for i in chosen]
        temp = os.path.join(self.store.tmp, f"{secrets.token_hex(16)}.zip.part")
        try:
            f, size = yield self.newsroom.io_pool.run(_build_zip, temp, self.store.open_stored, entries)
        except FileNotFoundError:
            raise NotFound() from None
        yield self.db.run(jq.mark_seen, journalist_id, [i.id for i in chosen])
        name = f"{source.folder_name}.zip"
        return Download(f, size, name, content_type="application/zip")

    @inlineCallbacks
    def mark_seen(self, journalist_id: int, submission_uuids: list[str], reply_uuids: list[str]):
        """All or nothing: raises ``NotFound`` if any uuid is not a submission or reply the
        journalist may see."""
        subs = yield self.db.run(jq.ids_for_uuids, "submissions", journalist_id, list(submission_uuids))
        reps = yield self.db.run(jq.ids_for_uuids, "replies", journalist_id, list(reply_uuids))
        if len(subs) != len(set(submission_uuids)) or len(reps) != len(set(reply_uuids)):
            raise NotFound()
        yield self.db.run(jq.mark_seen, journalist_id, list(subs.values()), list(reps.values()))

    @inlineCallbacks
    def mark_sources(self, sources: list[SourceView], journalist_id: int, read: bool):
        """Every submission of these sources read (by this journalist) or unread again (for all)."""
        ids = yield self.db.run(jq.submission_ids_of, journalist_id, [s.id for s in sources])
        yield self._mark(ids, journalist_id, read)
        return len(ids)

    @inlineCallbacks
    def mark_submissions(self, source: SourceView, uuids: list[str], journalist_id: int, read: bool):
        """The chosen submissions of ``source`` read or unread again. -> how many there were."""
        wanted = set(uuids)
        ids = [i.id for i in (yield self.submissions(source)) if i.uuid in wanted]
        yield self._mark(ids, journalist_id, read)
        return len(ids)

    def _mark(self, submission_ids: list[int], journalist_id: int, read: bool):
        if read:
            return self.db.run(jq.mark_seen, journalist_id, submission_ids)
        return self.db.run(jq.mark_unseen, submission_ids)

    # -- deletion --------------------------------------------------------------------------

    @inlineCallbacks
    def delete_submissions(self, source: SourceView, uuids: list[str]):
        """Rows first (then they are gone for the reader's desks), files after (of those no
        other desk was sent). -> how many the reader no longer has."""
        fid, names, count = yield self.db.run_and_scrub(jq.delete_submissions, source.reader, source.id,
                                                        [u for u in uuids if valid_uuid(u)])
        yield self._remove_files(fid, names)
        return count

    @inlineCallbacks
    def delete_conversation(self, source: SourceView):
        """Every submission and reply of ``source`` the reader sees (rows, then files of what no
        other desk was sent); the source, its key and its designation stay, so the conversation
        can start again. -> how many the reader no longer has."""
        fid, names, count = yield self.db.run_and_scrub(jq.delete_conversation, source.reader, source.id)
        yield self._remove_files(fid, names)
        return count

    @inlineCallbacks
    def delete_reply(self, source: SourceView, uuid: str):
        fid, name = yield self.db.run_and_scrub(jq.delete_reply, source.reader, source.id, uuid)
        if fid is None:
            return False
        if name is not None:
            yield self.newsroom.crypto_pool.run(self.store.remove, fid, name)
        return True

    # -- replies ---------------------------------------------------------------------------

    def reply_keys(self, source: SourceView) -> Deferred:
        """The desks whose keys a reply from the reader to ``source`` is encrypted to besides the
        source's own: the source's desks the reader is on (``DeskInfo``, with ``public_key``). A
        workstation encrypts to exactly these, so the desks that will list the reply can read it
        on their SVS, and no other desk can."""
        return self.newsroom.replies.sending_desks(source.id, source.reader)

    def reply_plaintext(self, source: SourceView, text: str, journalist_id: int):
        """Encrypted here to the source key and the keys of the source's desks the journalist is
        on; the plaintext is never stored. Raises ``KeyNotReady`` if the source has no key yet."""
        return self.newsroom.replies.add(source.id, text, journalist_id)

    @inlineCallbacks
    def reply_encrypted(self, source: SourceView, armored: Any, reply_uuid: str | None, journalist_id: int):
        """Store a reply the client already encrypted. It must be exactly one ASCII-armored
        OpenPGP message with the source's key among its recipients: anything else (plaintext
        above all) is refused, so nothing readable is ever stored."""
        if not isinstance(armored, str) or len(armored) > MAX_REPLY_CHARS * 4 or not armored.isascii():
            raise NotEncryptedToSource("the reply must be an ASCII-armored OpenPGP message")
        text = armored.strip()
        if not (text.startswith(_ARMOR_BEGIN) and text.endswith(_ARMOR_END) and text.count(_ARMOR_BEGIN) == 1):
            raise NotEncryptedToSource("the reply must be one ASCII-armored OpenPGP message and nothing else")
        if reply_uuid is not None:
            exists = yield self.db.run(jq.reply_uuid_exists, reply_uuid)
            if exists:
                raise DuplicateReply()
        if not source.key_fingerprint:
            raise KeyNotReady()
        try:
            # Only the message itself is kept: armor headers (Comment: ...) are readable text.
            text = armor.armor(armor.dearmor(text)).strip()
        except ValueError as e:
            raise NotEncryptedToSource(f"the reply must be an ASCII-armored OpenPGP message ({e})") from None
        keyring = self.newsroom.keyring
        recipients = yield self.newsroom.crypto_pool.run(keyring.recipients_of, text)
        source_ids = yield self.newsroom.crypto_pool.run(keyring.subkey_ids, source.key_fingerprint)
        if not set(recipients) & set(source_ids):
            raise NotEncryptedToSource("the reply is not encrypted to the source's key")
        try:
            row = yield self.newsroom.replies.store_encrypted(source.id, (text + "\n").encode("ascii"), journalist_id,
                                                            reply_uuid)
        except sqlite3.IntegrityError:
            raise DuplicateReply() from None
        return row


# -- blocking helpers (pool threads) ------------------------------------------------------

def _submission_sha256(conn: sqlite3.Connection, submission_id: int) -> str | None:
    row = conn.execute("SELECT sha256 FROM submissions WHERE id = ?", (submission_id,)).fetchone()
    return row[0] if row else None


def _reply_sha256(conn: sqlite3.Connection, reply_id: int) -> str | None:
    row = conn.execute("SELECT sha256 FROM replies WHERE id = ?", (reply_id,)).fetchone()
    return row[0] if row else None


def _open_and_hash(open_stored: Callable[[str, str], BinaryIO], fid: str, filename: str,
                   want_hash: bool) -> tuple[BinaryIO, int, str | None]:
    forbid_reactor_thread("store")
    f = open_stored(fid, filename)  # a regular file in the store, never a link's target
    try:
        size = os.fstat(f.fileno()).st_size
        digest = None
        if want_hash:
            h = hashlib.sha256()
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
            digest = h.hexdigest()
            f.seek(0)
        return f, size, digest
    except BaseException:
        f.close()
        raise


def _build_zip(temp_path: str, open_stored: Callable[[str, str], BinaryIO],
               entries: list[tuple[str, str, str]]) -> tuple[BinaryIO, int]:
    """Write the zip (files copied in chunks, never whole in memory), then hand back an open,
    already unlinked file: nothing is left in DATA/tmp however the download ends.

    ``entries`` are (filesystem id, stored name, name in the zip); each file is opened the
    store's careful way (no links followed)."""
    forbid_reactor_thread("store")
    fd = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for fid, filename, arcname in entries:
                with open_stored(fid, filename) as src:
                    st = os.fstat(src.fileno())
                    info = zipfile.ZipInfo(arcname, time.gmtime(max(st.st_mtime, 315532800))[:6])
                    info.compress_type = zipfile.ZIP_STORED
                    info.file_size = st.st_size
                    with zf.open(info, "w", force_zip64=st.st_size >= zipfile.ZIP64_LIMIT) as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        f = open(temp_path, "rb")
    finally:
        try:
            os.remove(temp_path)
        except FileNotFoundError:
            pass
    return f, os.fstat(f.fileno()).st_size


def _with_uuid(items: list[Any], uuid: str) -> Any:
    return next((item for item in items if item.uuid == uuid), None)


def _submission(row: Any, source_uuid: str) -> SubmissionView:
    return SubmissionView(row["id"], row["uuid"], source_uuid, row["filename"], row["kind"], int(row["size"]),
                          bool(row["seen"]), tuple(row["seen_by"]), float(row["created_at"]))


def _reply(row: Any, source_uuid: str, names: dict[int, tuple[str, str]]) -> ReplyView:
    username, juuid = names.get(row["journalist_id"], (None, None))
    return ReplyView(row["id"], row["uuid"], source_uuid, row["filename"], int(row["size"]), juuid, username,
                     bool(row["deleted_by_source"]), tuple(row["seen_by"]), float(row["created_at"]))
