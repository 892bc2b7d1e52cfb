"""SQL for retention: rows older than their desks keep them, deleted in the transaction that
finds them.

Each desk keeps what it was sent for its own ``retention_days`` if it sets one, else for the
instance's (``default``; None: for ever). A submission or reply sent to several desks goes once
every one of them has stopped keeping it: no desk loses what it keeps because another keeps
less. A source with nothing left goes once idle for as long as the longest of its desks keeps.
"""
from __future__ import annotations

import sqlite3

DAY = 86400.0


def _expired(links: str, column: str, created: str) -> str:
    """SQL: the row (``created`` its time) is kept by none of its desks (linked by ``links``)."""
    days = "COALESCE(k.retention_days, :default)"
    keeps = (f"SELECT 1 FROM {links} d JOIN desks k ON k.id = d.desk_id WHERE d.{column} = {{id}}"
             f" AND ({days} IS NULL OR {created} >= :now - {days} * {DAY})")
    anywhere = f"SELECT 1 FROM {links} d WHERE d.{column} = {{id}}"
    # A row on no desk (none is, since schema 10) follows the instance's setting.
    return (f"(NOT EXISTS ({keeps}) AND (EXISTS ({anywhere})"
            f" OR (:default IS NOT NULL AND {created} < :now - :default * {DAY})))")


def expire_submissions(conn: sqlite3.Connection, now: float, default: int | None) -> list[tuple[str, str]]:
    """Delete submissions no desk keeps any more. -> (filesystem id, filename) of their files."""
    rows = conn.execute(
        "SELECT x.id, s.filesystem_id, x.filename FROM submissions x JOIN sources s ON s.id = x.source_id"
        f" WHERE {_expired('submission_desks', 'submission_id', 'x.created_at').format(id='x.id')}",
        {"now": now, "default": default}).fetchall()
    conn.executemany("DELETE FROM submissions WHERE id = ?", [(r[0],) for r in rows])
    return [(r[1], r[2]) for r in rows]


def expire_replies(conn: sqlite3.Connection, now: float, default: int | None) -> list[tuple[str, str]]:
    """Delete replies no desk keeps any more. -> the files still on disk (a reply the source
    deleted has lost its file already)."""
    rows = conn.execute(
        "SELECT r.id, s.filesystem_id, r.filename, r.deleted_by_source FROM replies r"
        f" JOIN sources s ON s.id = r.source_id WHERE {_expired('reply_desks', 'reply_id', 'r.created_at').format(id='r.id')}",
        {"now": now, "default": default}).fetchall()
    conn.executemany("DELETE FROM replies WHERE id = ?", [(r[0],) for r in rows])
    return [(r[1], r[2]) for r in rows if not r[3]]


def idle_empty_sources(conn: sqlite3.Connection, now: float, default: int | None) -> list[int]:
    """Sources with nothing left (no submission, no reply), idle for as long as every one of
    their desks keeps things."""
    return [r[0] for r in conn.execute(
        f"SELECT s.id FROM sources s WHERE {_expired('source_desks', 'source_id', 's.last_updated').format(id='s.id')}"
        " AND NOT EXISTS (SELECT 1 FROM submissions x WHERE x.source_id = s.id)"
        " AND NOT EXISTS (SELECT 1 FROM replies r WHERE r.source_id = s.id)", {"now": now, "default": default})]


def any_desk_retention(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM desks WHERE retention_days IS NOT NULL LIMIT 1").fetchone() is not None
