"""SQL for the digest mail: who gets it, and what arrived since their last one.

The counts are kept by triggers (schema step 7) in the transaction that stores a submission;
these functions only read them, and take away what a digest reported once the mail server
accepted it (anything that arrived meanwhile stays for the next one).
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DeskCount:
    """What one of a recipient's desks received since their last digest (issue 29)."""

    desk_id: int
    name: str
    new_submissions: int
    new_sources: int


@dataclass(frozen=True)
class Recipient:
    journalist_id: int
    username: str
    email: str
    public_key: str
    fingerprint: str
    new_submissions: int
    new_sources: int
    language: str | None = None  # the account's (None: not chosen, English)
    # Each of the journalist's desks, zeros too, when the instance has several (else none: the
    # mail is as it was before desks).
    desks: tuple[DeskCount, ...] = ()


_SELECT = ("SELECT d.journalist_id, j.username, d.email, d.public_key, d.fingerprint, d.new_submissions,"
           " d.new_sources, j.language FROM digest_recipients d JOIN journalists j ON j.id = d.journalist_id")


def recipients(conn: sqlite3.Connection) -> list[Recipient]:
    return [_with_desks(conn, Recipient(*row)) for row in conn.execute(_SELECT + " ORDER BY j.username").fetchall()]


def recipient(conn: sqlite3.Connection, journalist_id: int) -> Recipient | None:
    row = conn.execute(_SELECT + " WHERE d.journalist_id = ?", (journalist_id,)).fetchone()
    return _with_desks(conn, Recipient(*row)) if row else None


def _with_desks(conn: sqlite3.Connection, r: Recipient) -> Recipient:
    if conn.execute("SELECT COUNT(*) FROM desks").fetchone()[0] < 2:
        return r
    rows = conn.execute(
        "SELECT d.id, d.name, COALESCE(c.new_submissions, 0), COALESCE(c.new_sources, 0)"
        " FROM desk_members m JOIN desks d ON d.id = m.desk_id"
        " LEFT JOIN digest_desk_counts c ON c.desk_id = d.id AND c.journalist_id = m.journalist_id"
        " WHERE m.journalist_id = ? ORDER BY d.is_default DESC, d.name", (r.journalist_id,)).fetchall()
    return replace(r, desks=tuple(DeskCount(*row) for row in rows))


def register(conn: sqlite3.Connection, journalist_id: int, email: str, public_key: str, fingerprint: str) -> bool:
    """Set (or replace) a journalist's address and key. -> True if they were registered before.

    A first registration starts counting from now; a changed address or key keeps the counts.
    """
    before = conn.execute("SELECT 1 FROM digest_recipients WHERE journalist_id = ?", (journalist_id,)).fetchone()
    conn.execute(
        "INSERT INTO digest_recipients(journalist_id, email, public_key, fingerprint) VALUES (?,?,?,?)"
        " ON CONFLICT(journalist_id) DO UPDATE SET email = excluded.email, public_key = excluded.public_key,"
        " fingerprint = excluded.fingerprint",
        (journalist_id, email, public_key, fingerprint),
    )
    return before is not None


def unregister(conn: sqlite3.Connection, journalist_id: int) -> bool:
    return conn.execute("DELETE FROM digest_recipients WHERE journalist_id = ?", (journalist_id,)).rowcount > 0


def reported(conn: sqlite3.Connection, journalist_id: int, submissions: int, sources: int,
             desks: tuple[DeskCount, ...] = ()) -> None:
    """A digest with these counts was accepted: they are no longer new for this journalist."""
    conn.execute(
        "UPDATE digest_recipients SET new_submissions = MAX(0, new_submissions - ?),"
        " new_sources = MAX(0, new_sources - ?) WHERE journalist_id = ?",
        (submissions, sources, journalist_id),
    )
    conn.executemany(
        "UPDATE digest_desk_counts SET new_submissions = MAX(0, new_submissions - ?),"
        " new_sources = MAX(0, new_sources - ?) WHERE journalist_id = ? AND desk_id = ?",
        [(d.new_submissions, d.new_sources, journalist_id, d.desk_id) for d in desks])


def count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM digest_recipients").fetchone()[0])
