"""SQL for retention: rows older than a cutoff, deleted in the transaction that finds them."""
from __future__ import annotations

import sqlite3


def expire_submissions(conn: sqlite3.Connection, cutoff: float) -> list[tuple[str, str]]:
    """Delete submissions created before ``cutoff``. -> (filesystem id, filename) of their files."""
    rows = conn.execute(
        "SELECT x.id, s.filesystem_id, x.filename FROM submissions x JOIN sources s ON s.id = x.source_id"
        " WHERE x.created_at < ?", (cutoff,)).fetchall()
    conn.executemany("DELETE FROM submissions WHERE id = ?", [(r[0],) for r in rows])
    return [(r[1], r[2]) for r in rows]


def expire_replies(conn: sqlite3.Connection, cutoff: float) -> list[tuple[str, str]]:
    """Delete replies created before ``cutoff``. -> the files still on disk (a reply the source
    deleted has lost its file already)."""
    rows = conn.execute(
        "SELECT r.id, s.filesystem_id, r.filename, r.deleted_by_source FROM replies r"
        " JOIN sources s ON s.id = r.source_id WHERE r.created_at < ?", (cutoff,)).fetchall()
    conn.executemany("DELETE FROM replies WHERE id = ?", [(r[0],) for r in rows])
    return [(r[1], r[2]) for r in rows if not r[3]]


def idle_empty_sources(conn: sqlite3.Connection, cutoff: float) -> list[int]:
    """Sources with nothing left (no submission, no reply) and no activity since ``cutoff``."""
    return [r[0] for r in conn.execute(
        "SELECT s.id FROM sources s WHERE s.last_updated < ?"
        " AND NOT EXISTS (SELECT 1 FROM submissions x WHERE x.source_id = s.id)"
        " AND NOT EXISTS (SELECT 1 FROM replies r WHERE r.source_id = s.id)", (cutoff,))]
