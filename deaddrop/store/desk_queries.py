"""SQL for desks: who reads which source (issue 29).

A desk has its own submission key and its members (journalist accounts). A source's desks are
in ``source_desks``; each submission and reply records the desks whose keys it was encrypted to
(``submission_desks``, ``reply_desks``). A journalist sees a source, a submission or a reply
only through a desk they are a member of: ``visible_to`` below is the one clause that says so,
used by every journalist query. Like ``queries``, each function takes the connection first and
runs inside one transaction.
"""
from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, cast

Row = sqlite3.Row


class DeskError(ValueError):
    """A desk change that cannot be made (one line for the admin)."""


# -- what a journalist may see --------------------------------------------------------------

def source_visible_to(alias: str = "s", reader: str = "?") -> str:
    """SQL: the source ``alias`` is on a desk of the journalist bound at ``reader``."""
    return (f"EXISTS (SELECT 1 FROM source_desks sd JOIN desk_members m ON m.desk_id = sd.desk_id"
            f" WHERE sd.source_id = {alias}.id AND m.journalist_id = {reader})")


def item_visible_to(table: str, alias: str = "x", reader: str = "?") -> str:
    """SQL: the submission or reply ``alias`` was encrypted to a desk of the journalist bound
    at ``reader`` (``table``: "submissions" or "replies", fixed by the caller)."""
    item = {"submissions": "submission", "replies": "reply"}[table]
    return (f"EXISTS (SELECT 1 FROM {item}_desks d JOIN desk_members m ON m.desk_id = d.desk_id"
            f" WHERE d.{item}_id = {alias}.id AND m.journalist_id = {reader})")


# -- desks ---------------------------------------------------------------------------------

_DESK_COLUMNS = ("d.*, (SELECT COUNT(*) FROM desk_members m WHERE m.desk_id = d.id) AS members,"
                 " (SELECT COUNT(*) FROM source_desks s WHERE s.desk_id = d.id) AS sources")


def all_desks(conn: sqlite3.Connection) -> list[Row]:
    """Every desk, the default first, then by name; with ``members`` and ``sources`` counted."""
    return conn.execute(f"SELECT {_DESK_COLUMNS} FROM desks d ORDER BY d.is_default DESC, d.name").fetchall()


def desk_by_name(conn: sqlite3.Connection, name: str) -> Row | None:
    return conn.execute(f"SELECT {_DESK_COLUMNS} FROM desks d WHERE d.name = ?", (name,)).fetchone()


def desk_by_id(conn: sqlite3.Connection, desk_id: int) -> Row | None:
    return conn.execute(f"SELECT {_DESK_COLUMNS} FROM desks d WHERE d.id = ?", (desk_id,)).fetchone()


def default_desk_id(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT id FROM desks WHERE is_default = 1").fetchone()[0])


def member_names(conn: sqlite3.Connection, desk_id: int) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT j.username FROM desk_members m JOIN journalists j ON j.id = m.journalist_id"
        " WHERE m.desk_id = ? ORDER BY j.username COLLATE NOCASE", (desk_id,))]


def insert_desk(conn: sqlite3.Connection, uuid: str, name: str, fingerprint: str, public_key: str,
                now: float, texts: dict[str, dict[str, str]] | None = None) -> int:
    """Raises ``DeskError`` if the name (case-insensitively) is taken."""
    try:
        cur = conn.execute(
            "INSERT INTO desks(uuid, name, texts, key_fingerprint, public_key, created_at) VALUES (?,?,?,?,?,?)",
            (uuid, name, json.dumps(texts or {}, sort_keys=True), fingerprint, public_key, now))
    except sqlite3.IntegrityError:
        raise DeskError(f"there is already a desk named {name!r}") from None
    return cast(int, cur.lastrowid)  # (an INSERT sets it)


def rename_desk(conn: sqlite3.Connection, desk_id: int, name: str) -> None:
    try:
        conn.execute("UPDATE desks SET name = ? WHERE id = ?", (name, desk_id))
    except sqlite3.IntegrityError:
        raise DeskError(f"there is already a desk named {name!r}") from None


def set_texts(conn: sqlite3.Connection, desk_id: int, texts: dict[str, dict[str, str]]) -> None:
    conn.execute("UPDATE desks SET texts = ? WHERE id = ?", (json.dumps(texts, sort_keys=True), desk_id))


def texts_of(row: Any) -> dict[str, dict[str, str]]:
    """The desk's texts for sources: {language: {"name": ..., "description": ...}}."""
    try:
        texts = json.loads(row["texts"] or "{}")
    except ValueError:
        return {}
    return texts if isinstance(texts, dict) else {}


def set_key(conn: sqlite3.Connection, desk_id: int, fingerprint: str, public_key: str) -> None:
    conn.execute("UPDATE desks SET key_fingerprint = ?, public_key = ? WHERE id = ?",
                 (fingerprint, public_key, desk_id))


def set_show_members(conn: sqlite3.Connection, desk_id: int, show: bool) -> None:
    conn.execute("UPDATE desks SET show_members = ? WHERE id = ?", (1 if show else 0, desk_id))


def set_retention(conn: sqlite3.Connection, desk_id: int, days: int | None) -> None:
    conn.execute("UPDATE desks SET retention_days = ? WHERE id = ?", (days, desk_id))


def remove_desk(conn: sqlite3.Connection, desk_id: int) -> None:
    """Refused for the default desk (it holds the instance's key) and for a desk with sources
    (what they sent was sent to it: it stays where it was sent)."""
    row = desk_by_id(conn, desk_id)
    if row is None:
        raise DeskError("no such desk")
    if row["is_default"]:
        raise DeskError(f"{row['name']!r} is the default desk (its key is the instance's submission key): "
                        "it cannot be removed")
    if row["sources"]:
        raise DeskError(f"{row['name']!r} still has {row['sources']} source(s): a desk is removed only once "
                        "no source has chosen it (delete those sources first)")
    conn.execute("DELETE FROM desks WHERE id = ?", (desk_id,))


def set_default_key(conn: sqlite3.Connection, fingerprint: str, public_key: str) -> str | None:
    """The instance's submission key is the default desk's (start-up). -> the fingerprint it had."""
    row = conn.execute("SELECT id, key_fingerprint, public_key FROM desks WHERE is_default = 1").fetchone()
    if row["key_fingerprint"] != fingerprint or row["public_key"] != public_key:
        set_key(conn, row["id"], fingerprint, public_key)
    return row["key_fingerprint"]


# -- members -------------------------------------------------------------------------------

def add_member(conn: sqlite3.Connection, desk_id: int, journalist_id: int) -> bool:
    cur = conn.execute("INSERT OR IGNORE INTO desk_members(desk_id, journalist_id) VALUES (?, ?)",
                       (desk_id, journalist_id))
    return cur.rowcount == 1


def remove_member(conn: sqlite3.Connection, desk_id: int, journalist_id: int) -> bool:
    cur = conn.execute("DELETE FROM desk_members WHERE desk_id = ? AND journalist_id = ?", (desk_id, journalist_id))
    return cur.rowcount == 1


def join_default_desk(conn: sqlite3.Connection, journalist_id: int) -> None:
    """A new account reads the default desk (on an instance with one desk: everything, as before)."""
    add_member(conn, default_desk_id(conn), journalist_id)


def desks_of_journalist(conn: sqlite3.Connection, journalist_id: int) -> list[int]:
    return [r[0] for r in conn.execute("SELECT desk_id FROM desk_members WHERE journalist_id = ? ORDER BY desk_id",
                                       (journalist_id,))]


# -- sources and what they sent ------------------------------------------------------------

def desks_of_source(conn: sqlite3.Connection, source_id: int) -> tuple[int, ...]:
    return tuple(r[0] for r in conn.execute("SELECT desk_id FROM source_desks WHERE source_id = ? ORDER BY desk_id",
                                            (source_id,)))


def add_source_desks(conn: sqlite3.Connection, source_id: int, desk_ids: Iterable[int]) -> tuple[int, ...]:
    """Add desks to a source's (never removes one). -> all its desks now."""
    for desk_id in desk_ids:
        conn.execute("INSERT OR IGNORE INTO source_desks(source_id, desk_id)"
                     " SELECT ?, id FROM desks WHERE id = ?", (source_id, desk_id))
    return desks_of_source(conn, source_id)


def record_submission_desks(conn: sqlite3.Connection, submission_id: int, desk_ids: Iterable[int]) -> None:
    conn.executemany("INSERT INTO submission_desks(submission_id, desk_id) VALUES (?, ?)",
                     [(submission_id, d) for d in desk_ids])


def record_reply_desks(conn: sqlite3.Connection, reply_id: int, desk_ids: Iterable[int]) -> None:
    conn.executemany("INSERT INTO reply_desks(reply_id, desk_id) VALUES (?, ?)", [(reply_id, d) for d in desk_ids])


def shared_desks(conn: sqlite3.Connection, source_id: int, journalist_id: int | None) -> tuple[int, ...]:
    """The source's desks the journalist is on (None: all the source's desks)."""
    if journalist_id is None:
        return desks_of_source(conn, source_id)
    return tuple(r[0] for r in conn.execute(
        "SELECT s.desk_id FROM source_desks s JOIN desk_members m ON m.desk_id = s.desk_id"
        " WHERE s.source_id = ? AND m.journalist_id = ? ORDER BY s.desk_id", (source_id, journalist_id)))
