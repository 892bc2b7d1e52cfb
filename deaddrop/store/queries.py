"""SQL for the use cases. Each function takes the connection first and runs inside the one
transaction ``Database.run`` opened for it, on the database thread."""
from __future__ import annotations

import sqlite3
from typing import Any, cast

from deaddrop.store import desk_queries
from deaddrop.store.files import day_of, stored_filename

Row = sqlite3.Row


# -- sources -------------------------------------------------------------------------------

# A source an admin retired before it logged in since login tags began: no codename opens it.
RETIRED_TAG = -1


def insert_source(conn: sqlite3.Connection, uuid: str, filesystem_id: str, designation: str, now: float,
                  login_tag: int | None = None) -> int:
    # Times of sources, submissions and replies are kept to the day (day_of): a seized
    # database must not tell when, within a day, a source came or wrote.
    now = day_of(now)
    cur = conn.execute(
        "INSERT INTO sources(uuid, filesystem_id, login_id, designation, created_at, last_updated, login_tag)"
        " VALUES (?,?,?,?,?,?,?)",
        (uuid, filesystem_id, filesystem_id, designation, now, now, login_tag),
    )
    return cast(int, cur.lastrowid)  # (an INSERT sets it)


def login_tag_state(conn: sqlite3.Connection, tag: int) -> tuple[bool, bool]:
    """(some source has ``tag``, some source has no tag yet): two index lookups."""
    row = conn.execute(
        "SELECT EXISTS(SELECT 1 FROM sources WHERE login_tag = ?),"
        " EXISTS(SELECT 1 FROM sources WHERE login_tag IS NULL)", (tag,)).fetchone()
    return bool(row[0]), bool(row[1])


def set_login_tag(conn: sqlite3.Connection, source_id: int, tag: int) -> bool:
    """Tag a source made before tags, at its login (never a retired one)."""
    cur = conn.execute("UPDATE sources SET login_tag = ? WHERE id = ? AND login_tag IS NULL", (tag, source_id))
    return cur.rowcount == 1


def untagged_sources(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM sources WHERE login_tag IS NULL").fetchone()[0])


def retire_untagged_sources(conn: sqlite3.Connection, idle_days: int, now: float) -> int:
    """Retire sources without a tag idle for ``idle_days`` (counted from their last activity, and
    never from before tags began): they can no longer log in; journalists keep what they sent."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'login_tags_since'").fetchone()
    since = float(row[0]) if row is not None else 0.0
    cutoff = day_of(now) - idle_days * 86400.0
    if since > cutoff:
        return 0
    cur = conn.execute("UPDATE sources SET login_tag = ? WHERE login_tag IS NULL AND last_updated <= ?",
                       (RETIRED_TAG, cutoff))
    return cur.rowcount


def pending_source_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM sources WHERE pending = 1").fetchone()[0])


def pending_sources_beyond(conn: sqlite3.Connection, keep: int) -> list[int]:
    """Pending sources (never submitted) other than the ``keep`` newest, oldest first."""
    rows = conn.execute("SELECT id FROM sources WHERE pending = 1 ORDER BY id DESC LIMIT -1 OFFSET ?",
                        (keep,)).fetchall()
    return [row["id"] for row in reversed(rows)]


def source_by_login_id(conn: sqlite3.Connection, login_id: str) -> Row | None:
    """A source by the filesystem id of the current KDF scheme.

    A row without a login id whose filesystem id is already of the current scheme (its login id
    lost, e.g. copied into a first-release schema) is found too, and gets its login id back.
    """
    row = conn.execute("SELECT * FROM sources WHERE login_id = ?", (login_id,)).fetchone()
    if row is None:
        row = conn.execute("SELECT * FROM sources WHERE filesystem_id = ? AND login_id IS NULL",
                           (login_id,)).fetchone()
        if row is not None:
            conn.execute("UPDATE sources SET login_id = ? WHERE id = ?", (login_id, row["id"]))
    return row


def legacy_source_by_filesystem_id(conn: sqlite3.Connection, filesystem_id: str) -> Row | None:
    """A source of the first KDF scheme not yet migrated."""
    return conn.execute("SELECT * FROM sources WHERE filesystem_id = ? AND login_id IS NULL",
                        (filesystem_id,)).fetchone()


def any_legacy_source(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sources WHERE login_id IS NULL LIMIT 1").fetchone() is not None


def migrate_source_login(conn: sqlite3.Connection, source_id: int, login_id: str, key_wrap: bytes | None) -> bool:
    cur = conn.execute("UPDATE sources SET login_id = ?, key_wrap = ? WHERE id = ? AND login_id IS NULL",
                       (login_id, key_wrap, source_id))
    return cur.rowcount == 1


def count_sources(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0]


def pending_sources_before(conn: sqlite3.Connection, cutoff: float) -> list[int]:
    """Sources that never submitted anything, created before ``cutoff``."""
    rows = conn.execute("SELECT id FROM sources WHERE pending = 1 AND created_at < ?", (cutoff,)).fetchall()
    return [row["id"] for row in rows]


def source_by_id(conn: sqlite3.Connection, source_id: int) -> Row | None:
    return conn.execute("SELECT * FROM sources WHERE id = ?", (source_id,)).fetchone()


def source_by_uuid(conn: sqlite3.Connection, uuid: str) -> Row | None:
    return conn.execute("SELECT * FROM sources WHERE uuid = ?", (uuid,)).fetchone()


def set_source_key(conn: sqlite3.Connection, source_id: int, fingerprint: str, public_key: str) -> bool:
    cur = conn.execute(
        "UPDATE sources SET key_fingerprint = ?, public_key = ? WHERE id = ? AND key_fingerprint IS NULL",
        (fingerprint, public_key, source_id),
    )
    return cur.rowcount == 1


def delete_source(conn: sqlite3.Connection, source_id: int) -> Row | None:
    row = source_by_id(conn, source_id)
    if row is not None:
        conn.execute("DELETE FROM sources WHERE id = ?", (source_id,))
    return row


def _allocate(conn: sqlite3.Connection, source_id: int, count: int) -> tuple[int, str] | None:
    row = conn.execute("SELECT next_n, designation FROM sources WHERE id = ?", (source_id,)).fetchone()
    if row is None:
        return None
    conn.execute("UPDATE sources SET next_n = next_n + ? WHERE id = ?", (count, source_id))
    return row["next_n"], row["designation"]


# -- submissions ---------------------------------------------------------------------------

def insert_submissions(
    conn: sqlite3.Connection, source_id: int, designation: str, parts: list[tuple[str, int, tuple[int, ...]]],
    now: float,
) -> list[str] | None:
    """Allocate numbers (never reused) and insert one row per part (kind, size, the desks whose
    keys it was encrypted to); those desks become the source's too. -> stored filenames."""
    import uuid as uuidlib

    allocated = _allocate(conn, source_id, len(parts))
    if allocated is None:
        return None
    now = day_of(now)
    first_n, designation = allocated
    # Before the source stops being pending: the digest counts it for its desks' journalists.
    desk_queries.add_source_desks(conn, source_id, sorted({d for _, _, desks in parts for d in desks}))
    names = []
    for offset, (kind, size, desks) in enumerate(parts):
        n = first_n + offset
        name = stored_filename(n, designation, kind)
        cur = conn.execute(
            "INSERT INTO submissions(uuid, source_id, n, filename, kind, size, created_at) VALUES (?,?,?,?,?,?,?)",
            (str(uuidlib.uuid4()), source_id, n, name, kind, size, now),
        )
        desk_queries.record_submission_desks(conn, cast(int, cur.lastrowid), desks)
        names.append(name)
    conn.execute("UPDATE sources SET pending = 0, last_updated = ? WHERE id = ?", (now, source_id))
    return names


def delete_submissions_by_filename(conn: sqlite3.Connection, filenames: list[str]) -> None:
    conn.executemany("DELETE FROM submissions WHERE filename = ?", [(f,) for f in filenames])


# -- replies -------------------------------------------------------------------------------

def insert_reply(
    conn: sqlite3.Connection, source_id: int, uuid: str, size: int, sha256: str,
    journalist_id: int | None, now: float, desks: tuple[int, ...],
) -> dict[str, Any] | None:
    """``desks``: those whose keys the reply was encrypted to (who may read it besides the source)."""
    allocated = _allocate(conn, source_id, 1)
    if allocated is None:
        return None
    now = day_of(now)
    n, designation = allocated
    name = stored_filename(n, designation, "reply")
    cur = conn.execute(
        "INSERT INTO replies(uuid, source_id, n, filename, size, sha256, journalist_id, created_at)"
        " VALUES (?,?,?,?,?,?,?,?)",
        (uuid, source_id, n, name, size, sha256, journalist_id, now),
    )
    desk_queries.record_reply_desks(conn, cast(int, cur.lastrowid), desks)
    conn.execute("UPDATE sources SET last_updated = ? WHERE id = ?", (now, source_id))
    fid = conn.execute("SELECT filesystem_id FROM sources WHERE id = ?", (source_id,)).fetchone()[0]
    return {"filename": name, "filesystem_id": fid, "uuid": uuid, "n": n}


def delete_reply_row(conn: sqlite3.Connection, filename: str) -> None:
    conn.execute("DELETE FROM replies WHERE filename = ?", (filename,))


def replies_for_source(conn: sqlite3.Connection, source_id: int) -> list[Row]:
    return conn.execute(
        "SELECT replies.*, reply_read_by_source.reply_id IS NOT NULL AS read_by_source FROM replies"
        " LEFT JOIN reply_read_by_source ON reply_read_by_source.reply_id = replies.id"
        " WHERE source_id = ? AND deleted_by_source = 0 ORDER BY n", (source_id,)
    ).fetchall()


def mark_replies_read_by_source(conn: sqlite3.Connection, source_id: int, filenames: list[str]) -> None:
    for filename in filenames:
        conn.execute(
            "INSERT OR IGNORE INTO reply_read_by_source(reply_id)"
            " SELECT id FROM replies WHERE source_id = ? AND filename = ?", (source_id, filename),
        )


def mark_reply_deleted_by_source(conn: sqlite3.Connection, source_id: int, n: int) -> str | None:
    """Mark the source's reply number ``n`` deleted. -> its file name, or None if it has no such reply."""
    row = conn.execute(
        "SELECT id, filename FROM replies WHERE source_id = ? AND n = ? AND deleted_by_source = 0", (source_id, n)
    ).fetchone()
    if row is None:
        return None
    conn.execute("UPDATE replies SET deleted_by_source = 1 WHERE id = ?", (row["id"],))
    return row["filename"]


def mark_all_replies_deleted_by_source(conn: sqlite3.Connection, source_id: int) -> list[str]:
    rows = conn.execute(
        "SELECT filename FROM replies WHERE source_id = ? AND deleted_by_source = 0", (source_id,)
    ).fetchall()
    conn.execute("UPDATE replies SET deleted_by_source = 1 WHERE source_id = ?", (source_id,))
    return [r["filename"] for r in rows]


# -- recovery ------------------------------------------------------------------------------

def all_stored_filenames(conn: sqlite3.Connection) -> dict[str, set[str]]:
    known: dict[str, set[str]] = {}
    for row in conn.execute(
        "SELECT s.filesystem_id AS fid, x.filename AS filename FROM sources s JOIN submissions x ON x.source_id = s.id"
        " UNION ALL SELECT s.filesystem_id, r.filename FROM sources s JOIN replies r ON r.source_id = s.id"
        " WHERE r.deleted_by_source = 0"
    ):
        known.setdefault(row["fid"], set()).add(row["filename"])
    return known


def delete_rows_for_missing_files(conn: sqlite3.Connection, missing: dict[str, set[str]]) -> None:
    for names in missing.values():
        for name in names:
            conn.execute("DELETE FROM submissions WHERE filename = ?", (name,))
            conn.execute("DELETE FROM replies WHERE filename = ? AND deleted_by_source = 0", (name,))


# -- settings ------------------------------------------------------------------------------

def get_settings(conn: sqlite3.Connection) -> dict[str, str]:
    return {row["key"]: row["value"] for row in conn.execute("SELECT key, value FROM settings")}


def set_setting(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def delete_setting(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM settings WHERE key = ?", (key,))
