"""SQL for journalist accounts, API tokens and the journalist desk.

Like ``queries``, each function takes the connection first and runs inside the one
transaction ``Database.run`` (or ``db.transaction`` in the admin CLI) opened for it.

Nothing here returns a source's filesystem id to a caller that could hand it to a
journalist: functions that need it to find files return it in a separate, clearly named
field, and the desk keeps it to itself.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Iterable, cast

from deaddrop.store import desk_queries

Row = sqlite3.Row


# -- journalists ---------------------------------------------------------------------------

def insert_journalist(conn: sqlite3.Connection, uuid: str, username: str, password_hash: str,
                      totp_secret: str, is_admin: bool, now: float) -> int:
    """Raises ``sqlite3.IntegrityError`` if the username (case-insensitively) is taken. The
    account reads the default desk (an admin moves it to others: ``desk members``)."""
    cur = conn.execute(
        "INSERT INTO journalists(uuid, username, password_hash, totp_secret, is_admin, created_at,"
        " password_changed_at) VALUES (?,?,?,?,?,?,?)",
        (uuid, username, password_hash, totp_secret, 1 if is_admin else 0, now, now),
    )
    journalist_id = cast(int, cur.lastrowid)  # (an INSERT sets it)
    desk_queries.join_default_desk(conn, journalist_id)
    return journalist_id


def journalist_by_id(conn: sqlite3.Connection, journalist_id: int) -> Row | None:
    return conn.execute("SELECT * FROM journalists WHERE id = ?", (journalist_id,)).fetchone()


def journalist_by_username(conn: sqlite3.Connection, username: str) -> Row | None:
    return conn.execute("SELECT * FROM journalists WHERE username = ?", (username,)).fetchone()


def journalist_by_uuid(conn: sqlite3.Connection, uuid: str) -> Row | None:
    return conn.execute("SELECT * FROM journalists WHERE uuid = ?", (uuid,)).fetchone()


def list_journalists(conn: sqlite3.Connection) -> list[Row]:
    return conn.execute("SELECT * FROM journalists ORDER BY username COLLATE NOCASE").fetchall()


def accept_totp_step(conn: sqlite3.Connection, journalist_id: int, step: int) -> bool:
    """Record ``step`` as used; False if it (or a later one) was already used: never twice."""
    cur = conn.execute(
        "UPDATE journalists SET last_totp_step = ? WHERE id = ? AND last_totp_step < ?",
        (step, journalist_id, step),
    )
    return cur.rowcount == 1


def record_login(conn: sqlite3.Connection, journalist_id: int, now: float) -> None:
    conn.execute("UPDATE journalists SET last_login_at = ? WHERE id = ?", (now, journalist_id))


def set_password_hash(conn: sqlite3.Connection, journalist_id: int, password_hash: str, now: float) -> int | None:
    """New passphrase: every session and API token of the account ends. -> the new epoch."""
    cur = conn.execute(
        "UPDATE journalists SET password_hash = ?, password_changed_at = ?, auth_epoch = auth_epoch + 1"
        " WHERE id = ?", (password_hash, now, journalist_id),
    )
    if cur.rowcount != 1:
        return None
    conn.execute("DELETE FROM api_tokens WHERE journalist_id = ?", (journalist_id,))
    return int(conn.execute("SELECT auth_epoch FROM journalists WHERE id = ?", (journalist_id,)).fetchone()[0])


def set_totp_secret(conn: sqlite3.Connection, journalist_id: int, secret: str) -> int | None:
    """New two-factor secret: sessions and tokens end too (the old device may be lost)."""
    cur = conn.execute(
        "UPDATE journalists SET totp_secret = ?, last_totp_step = 0, auth_epoch = auth_epoch + 1 WHERE id = ?",
        (secret, journalist_id),
    )
    if cur.rowcount != 1:
        return None
    conn.execute("DELETE FROM api_tokens WHERE journalist_id = ?", (journalist_id,))
    return int(conn.execute("SELECT auth_epoch FROM journalists WHERE id = ?", (journalist_id,)).fetchone()[0])


def set_language(conn: sqlite3.Connection, journalist_id: int, code: str | None) -> bool:
    """-> whether the account exists."""
    return conn.execute("UPDATE journalists SET language = ? WHERE id = ?", (code, journalist_id)).rowcount > 0


def delete_journalist(conn: sqlite3.Connection, journalist_id: int) -> bool:
    cur = conn.execute("DELETE FROM journalists WHERE id = ?", (journalist_id,))
    return cur.rowcount == 1


def usernames_by_id(conn: sqlite3.Connection) -> dict[int, tuple[str, str]]:
    return {r["id"]: (r["username"], r["uuid"]) for r in conn.execute("SELECT id, username, uuid FROM journalists")}


# -- API tokens ----------------------------------------------------------------------------

def insert_token(conn: sqlite3.Connection, token_hash: str, journalist_id: int, auth_epoch: int,
                 now: float, expires_at: float) -> None:
    conn.execute(
        "INSERT INTO api_tokens(token_hash, journalist_id, auth_epoch, created_at, expires_at) VALUES (?,?,?,?,?)",
        (token_hash, journalist_id, auth_epoch, now, expires_at),
    )


def journalist_for_token(conn: sqlite3.Connection, token_hash: str, now: float) -> Row | None:
    """The account behind a live token: unexpired, and issued since the last credential change."""
    return conn.execute(
        "SELECT j.* FROM api_tokens t JOIN journalists j ON j.id = t.journalist_id"
        " WHERE t.token_hash = ? AND t.expires_at > ? AND t.auth_epoch = j.auth_epoch",
        (token_hash, now),
    ).fetchone()


def delete_token(conn: sqlite3.Connection, token_hash: str) -> bool:
    return conn.execute("DELETE FROM api_tokens WHERE token_hash = ?", (token_hash,)).rowcount == 1


def purge_expired_tokens(conn: sqlite3.Connection, now: float) -> int:
    return conn.execute(
        "DELETE FROM api_tokens WHERE expires_at <= ? OR auth_epoch <>"
        " (SELECT auth_epoch FROM journalists j WHERE j.id = api_tokens.journalist_id)", (now,),
    ).rowcount


# -- the desk: sources ---------------------------------------------------------------------
#
# Every query below is for one journalist, the reader (bound as ``:reader``): it sees a source
# through the desks it shares with it, and of that source only the submissions and replies
# encrypted to one of its desks. Another desk's source is to it a source that does not exist.

_SEES_SOURCE = desk_queries.source_visible_to("s", ":reader")
_SEES_SUBMISSION = desk_queries.item_visible_to("submissions", "x", ":reader")
_SEES_REPLY = desk_queries.item_visible_to("replies", "x", ":reader")

# The number of the last submission or reply the reader sees (SecureDrop's interaction_count),
# never the source's own counter: that one counts what the source exchanged with every desk, so a
# journalist of a desk it shares with another would read, live, how many replies that desk sent
# it and what it sent there before it chose theirs.
_LAST_NUMBER_SEEN = (
    f"MAX(COALESCE((SELECT MAX(x.n) FROM submissions x WHERE x.source_id = s.id AND {_SEES_SUBMISSION}), 0),"
    f" COALESCE((SELECT MAX(x.n) FROM replies x WHERE x.source_id = s.id AND {_SEES_REPLY}), 0))"
)

_SOURCE_COLUMNS = (
    "s.id, s.uuid, s.designation, s.key_fingerprint, s.public_key, s.last_updated, s.is_starred,"
    f" {_LAST_NUMBER_SEEN} AS last_number,"
    f" (SELECT COUNT(*) FROM submissions x WHERE x.source_id = s.id AND x.seen = 0 AND {_SEES_SUBMISSION}) AS unread,"
    f" (SELECT COUNT(*) FROM submissions x WHERE x.source_id = s.id AND x.kind = 'doc' AND {_SEES_SUBMISSION})"
    " AS documents,"
    f" (SELECT COUNT(*) FROM submissions x WHERE x.source_id = s.id AND x.kind = 'msg' AND {_SEES_SUBMISSION})"
    " AS messages"
)


# Starred first, then most recently active; the uuid breaks ties (times may be coarse), so the
# order is total and a cursor can say exactly where a page ended. Index: sources_listing.
_LISTING_ORDER = "s.is_starred DESC, s.last_updated DESC, s.uuid DESC"


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _source_filter(reader: int, designation: str | None, starred: bool, unread: bool) -> tuple[str, dict[str, Any]]:
    """The WHERE clause of the source list: the reader's visible sources, narrowed by its filters."""
    where, args = ["s.pending = 0", _SEES_SOURCE], dict[str, Any](reader=reader)
    if designation:
        # Designations are ASCII words, so LIKE's ASCII-only case folding is the right one.
        where.append("s.designation LIKE :designation ESCAPE '\\'")
        args["designation"] = f"%{_escape_like(designation)}%"
    if starred:
        where.append("s.is_starred = 1")
    if unread:
        where.append(f"EXISTS (SELECT 1 FROM submissions x WHERE x.source_id = s.id AND x.seen = 0 AND {_SEES_SUBMISSION})")
    return " AND ".join(where), args


def visible_sources(conn: sqlite3.Connection, reader: int, limit: int = -1, offset: int = 0,
                    designation: str | None = None, starred: bool = False, unread: bool = False) -> list[Row]:
    """Sources that submitted something (``pending = 0``) to a desk of ``reader``, in listing
    order; one page of them, optionally only those whose designation contains ``designation``,
    starred, or with unread submissions."""
    where, args = _source_filter(reader, designation, starred, unread)
    return conn.execute(
        f"SELECT {_SOURCE_COLUMNS} FROM sources s WHERE {where} ORDER BY {_LISTING_ORDER} LIMIT :limit OFFSET :offset",
        {**args, "limit": limit, "offset": offset},
    ).fetchall()


def visible_sources_after(conn: sqlite3.Connection, reader: int, after: tuple[int, float, str] | None,
                          limit: int) -> list[Row]:
    """Up to ``limit`` of ``reader``'s sources in listing order that come after ``after``
    (starred, last_updated, uuid).

    A keyset page: unlike an offset it neither skips nor repeats a source when others are
    added or deleted between two pages, and it costs the same on the last page as on the first.
    """
    if after is None:
        return visible_sources(conn, reader, limit)
    return conn.execute(
        f"SELECT {_SOURCE_COLUMNS} FROM sources s WHERE s.pending = 0 AND {_SEES_SOURCE}"
        " AND (s.is_starred, s.last_updated, s.uuid) < (:starred, :updated, :uuid)"
        f" ORDER BY {_LISTING_ORDER} LIMIT :limit",
        {"reader": reader, "starred": after[0], "updated": after[1], "uuid": after[2], "limit": limit},
    ).fetchall()


def visible_sources_by_id(conn: sqlite3.Connection, reader: int, after_id: int, limit: int) -> list[Row]:
    """Up to ``limit`` of ``reader``'s sources whose row id is above ``after_id``, by row id.

    For walking the whole list in short transactions: a row id never changes, so a walk sees
    every source that exists from its start to its end exactly once, however often sources
    are starred or write meanwhile (the listing order moves them about)."""
    return conn.execute(SOURCES_BY_ID_SQL, {"reader": reader, "after": after_id, "limit": limit}).fetchall()


# NOT INDEXED: with an index on ``pending`` SQLite would read every visible source and sort
# them for each batch; walking the row ids reads just the batch.
SOURCES_BY_ID_SQL = (f"SELECT {_SOURCE_COLUMNS} FROM sources s NOT INDEXED WHERE s.pending = 0 AND s.id > :after"
                     f" AND {_SEES_SOURCE} ORDER BY s.id LIMIT :limit")


def count_visible_sources(conn: sqlite3.Connection, reader: int, designation: str | None = None,
                          starred: bool = False, unread: bool = False) -> int:
    where, args = _source_filter(reader, designation, starred, unread)
    return conn.execute(f"SELECT COUNT(*) FROM sources s WHERE {where}", args).fetchone()[0]


def visible_sources_by_uuid(conn: sqlite3.Connection, reader: int, uuids: list[str]) -> list[Row]:
    """``reader``'s sources among ``uuids``, in listing order (what a journalist selected)."""
    if not uuids:
        return []
    marks = ",".join(f":u{i}" for i in range(len(uuids)))
    return conn.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources s WHERE s.pending = 0 AND {_SEES_SOURCE}"
                        f" AND s.uuid IN ({marks}) ORDER BY {_LISTING_ORDER}",
                        {"reader": reader, **{f"u{i}": u for i, u in enumerate(uuids)}}).fetchall()


def visible_source(conn: sqlite3.Connection, reader: int, uuid: str) -> Row | None:
    """The source ``uuid`` if it is on a desk of ``reader``: else None, as for no source at all."""
    return conn.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources s WHERE s.uuid = :uuid AND s.pending = 0"
                        f" AND {_SEES_SOURCE}", {"reader": reader, "uuid": uuid}).fetchone()


def source_filesystem_id(conn: sqlite3.Connection, source_id: int) -> str | None:
    row = conn.execute("SELECT filesystem_id FROM sources WHERE id = ?", (source_id,)).fetchone()
    return row[0] if row else None


def set_starred(conn: sqlite3.Connection, source_id: int, starred: bool) -> bool:
    return conn.execute("UPDATE sources SET is_starred = ? WHERE id = ? AND pending = 0",
                        (1 if starred else 0, source_id)).rowcount == 1


# -- the desk: submissions and replies -----------------------------------------------------

def _seen_by(conn: sqlite3.Connection, table: str, column: str, ids: list[int]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {i: [] for i in ids}
    if not ids:
        return found
    marks = ",".join("?" * len(ids))
    for row in conn.execute(
        f"SELECT t.{column} AS item, j.uuid AS juuid FROM {table} t JOIN journalists j ON j.id = t.journalist_id"
        f" WHERE t.{column} IN ({marks}) ORDER BY j.username", ids,
    ):
        found[row["item"]].append(row["juuid"])
    return found


# Who has seen a submission or a reply: the table of marks and its column naming the item.
_SEEN = {"submissions": ("submission_seen", "submission_id"), "replies": ("reply_seen", "reply_id")}


def _items(conn: sqlite3.Connection, table: str, reader: int, source_id: int | None) -> list[dict[str, Any]]:
    """The rows of ``table`` (submissions or replies) ``reader`` may see, each with ``seen_by``:
    one source's in order (``source_id``), or, with None, every source's but a pending one's,
    each with ``source_uuid``."""
    seen_table, column = _SEEN[table]  # (a fixed name: nothing else is put into the SQL)
    sees = desk_queries.item_visible_to(table, "x", ":reader")
    if source_id is not None:
        rows = conn.execute(f"SELECT x.* FROM {table} x WHERE x.source_id = :source AND {sees} ORDER BY x.n",
                            {"source": source_id, "reader": reader}).fetchall()
    else:
        rows = conn.execute(
            f"SELECT x.*, s.uuid AS source_uuid FROM {table} x JOIN sources s ON s.id = x.source_id"
            f" WHERE s.pending = 0 AND {sees} ORDER BY x.source_id, x.n", {"reader": reader}
        ).fetchall()
    seen = _seen_by(conn, seen_table, column, [r["id"] for r in rows])
    return [dict(r, seen_by=seen[r["id"]]) for r in rows]


def submissions_of(conn: sqlite3.Connection, reader: int, source_id: int) -> list[dict[str, Any]]:
    return _items(conn, "submissions", reader, source_id)


def all_visible_submissions(conn: sqlite3.Connection, reader: int) -> list[dict[str, Any]]:
    return _items(conn, "submissions", reader, None)


def replies_of(conn: sqlite3.Connection, reader: int, source_id: int) -> list[dict[str, Any]]:
    return _items(conn, "replies", reader, source_id)


def all_visible_replies(conn: sqlite3.Connection, reader: int) -> list[dict[str, Any]]:
    return _items(conn, "replies", reader, None)


def set_submission_sha256(conn: sqlite3.Connection, submission_id: int, digest: str) -> None:
    conn.execute("UPDATE submissions SET sha256 = ? WHERE id = ? AND sha256 IS NULL", (digest, submission_id))


def set_reply_sha256(conn: sqlite3.Connection, reply_id: int, digest: str) -> None:
    conn.execute("UPDATE replies SET sha256 = ? WHERE id = ? AND sha256 IS NULL", (digest, reply_id))


def mark_seen(conn: sqlite3.Connection, journalist_id: int | None, submission_ids: Iterable[int],
              reply_ids: Iterable[int] = ()) -> None:
    for sid in submission_ids:
        conn.execute("UPDATE submissions SET seen = 1 WHERE id = ?", (sid,))
        if journalist_id is not None:
            conn.execute("INSERT OR IGNORE INTO submission_seen(submission_id, journalist_id) VALUES (?, ?)",
                         (sid, journalist_id))
    if journalist_id is not None:
        for rid in reply_ids:
            conn.execute("INSERT OR IGNORE INTO reply_seen(reply_id, journalist_id) VALUES (?, ?)", (rid, journalist_id))


def mark_unseen(conn: sqlite3.Connection, submission_ids: Iterable[int]) -> None:
    """Unread again, for everyone: as if nobody had opened them (who had is forgotten too)."""
    for sid in submission_ids:
        conn.execute("UPDATE submissions SET seen = 0 WHERE id = ?", (sid,))
        conn.execute("DELETE FROM submission_seen WHERE submission_id = ?", (sid,))


def submission_ids_of(conn: sqlite3.Connection, reader: int, source_ids: list[int]) -> list[int]:
    """The submissions ``reader`` may see of these sources."""
    ids: list[int] = []
    for source_id in source_ids:
        ids += [r["id"] for r in _items(conn, "submissions", reader, source_id)]
    return ids


def ids_for_uuids(conn: sqlite3.Connection, table: str, reader: int, uuids: list[str]) -> dict[str, int]:
    """uuid -> id for the submissions or replies of visible sources that ``reader`` may see
    (``table`` is fixed by the caller)."""
    assert table in ("submissions", "replies")
    sees = desk_queries.item_visible_to(table, "t", ":reader")
    found: dict[str, int] = {}
    for uuid in uuids:
        row = conn.execute(
            f"SELECT t.id FROM {table} t JOIN sources s ON s.id = t.source_id WHERE t.uuid = :uuid AND s.pending = 0"
            f" AND {sees}", {"uuid": uuid, "reader": reader},
        ).fetchone()
        if row is not None:
            found[uuid] = row[0]
    return found


# -- the desk: deletion --------------------------------------------------------------------
#
# A journalist deletes for their own desks only. A submission or reply also encrypted to a desk
# of which the journalist is no member stays for that desk (only the journalist's desks let go
# of it); one left on no desk is deleted with its file.

def _withdraw(conn: sqlite3.Connection, table: str, reader: int, ids: list[int]) -> list[str]:
    """Take ``reader``'s desks off these items; delete those left on no desk. -> their file names."""
    item = {"submissions": "submission", "replies": "reply"}[table]
    gone = []
    for item_id in ids:
        conn.execute(f"DELETE FROM {item}_desks WHERE {item}_id = ? AND desk_id IN"
                     " (SELECT desk_id FROM desk_members WHERE journalist_id = ?)", (item_id, reader))
        if conn.execute(f"SELECT 1 FROM {item}_desks WHERE {item}_id = ?", (item_id,)).fetchone() is None:
            row = conn.execute(f"SELECT filename, {'0' if table == 'submissions' else 'deleted_by_source'} AS hidden"
                               f" FROM {table} WHERE id = ?", (item_id,)).fetchone()
            conn.execute(f"DELETE FROM {table} WHERE id = ?", (item_id,))
            if not row["hidden"]:  # a reply the source deleted has no file left
                gone.append(row["filename"])
    return gone


def delete_submissions(conn: sqlite3.Connection, reader: int, source_id: int,
                       uuids: list[str]) -> tuple[str | None, list[str], int]:
    """Delete the listed submissions of one source for ``reader``'s desks.
    -> (filesystem id, the file names to remove, how many the reader no longer sees)."""
    wanted = set(uuids)
    ids = [r["id"] for r in _items(conn, "submissions", reader, source_id) if r["uuid"] in wanted]
    return source_filesystem_id(conn, source_id), _withdraw(conn, "submissions", reader, ids), len(ids)


def delete_conversation(conn: sqlite3.Connection, reader: int, source_id: int) -> tuple[str | None, list[str], int]:
    """Delete every submission and reply of one source that ``reader`` sees, keeping the source
    and its key. -> (filesystem id, the stored file names to remove, how many the reader no
    longer sees)."""
    subs = [r["id"] for r in _items(conn, "submissions", reader, source_id)]
    reps = [r["id"] for r in _items(conn, "replies", reader, source_id)]
    names = _withdraw(conn, "submissions", reader, subs) + _withdraw(conn, "replies", reader, reps)
    return source_filesystem_id(conn, source_id), names, len(subs) + len(reps)


def leave_source(conn: sqlite3.Connection, reader: int, source_id: int) -> tuple[str | None, list[str], bool]:
    """Delete a source for ``reader``'s desks: its conversation as they see it, and its place on
    them. -> (filesystem id, file names to remove, whether no desk is left: then the caller
    deletes the source itself, key and folder)."""
    fid, names, _ = delete_conversation(conn, reader, source_id)
    conn.execute("DELETE FROM source_desks WHERE source_id = ? AND desk_id IN"
                 " (SELECT desk_id FROM desk_members WHERE journalist_id = ?)", (source_id, reader))
    alone = conn.execute("SELECT 1 FROM source_desks WHERE source_id = ?", (source_id,)).fetchone() is None
    return fid, names, alone


def reply_uuid_exists(conn: sqlite3.Connection, uuid: str) -> bool:
    return conn.execute("SELECT 1 FROM replies WHERE uuid = ?", (uuid,)).fetchone() is not None


def delete_reply(conn: sqlite3.Connection, reader: int, source_id: int, uuid: str) -> tuple[str | None, str | None]:
    """-> (filesystem id, the file to remove if any); (None, None) if ``reader`` sees no such reply."""
    rows = [r for r in _items(conn, "replies", reader, source_id) if r["uuid"] == uuid]
    if not rows:
        return None, None
    names = _withdraw(conn, "replies", reader, [rows[0]["id"]])
    return source_filesystem_id(conn, source_id), (names[0] if names else None)
