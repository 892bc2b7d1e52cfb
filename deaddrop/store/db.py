"""SQLite metadata: one connection, one dedicated thread, explicit transactions.

Every query runs through ``Database.run(fn, ...)``, which calls ``fn(conn, ...)`` on the DB
thread inside ``BEGIN IMMEDIATE ... COMMIT``. One writer thread means no lock juggling inside
the process; WAL lets ``deaddrop-admin`` read and write while the server runs.
"""
from __future__ import annotations

import sqlite3
import threading
from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred

from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread

T = TypeVar("T")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    filesystem_id TEXT NOT NULL UNIQUE,
    designation TEXT NOT NULL UNIQUE,
    key_fingerprint TEXT,
    public_key TEXT,
    created_at REAL NOT NULL,
    last_updated REAL NOT NULL,
    next_n INTEGER NOT NULL DEFAULT 1,
    is_starred INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    filename TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('msg', 'doc')),
    size INTEGER NOT NULL,
    sha256 TEXT,
    seen INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS submissions_source ON submissions(source_id);
CREATE TABLE IF NOT EXISTS replies (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    filename TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    sha256 TEXT,
    journalist_id INTEGER,
    deleted_by_source INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS replies_source ON replies(source_id);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journalists (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    username TEXT NOT NULL COLLATE NOCASE UNIQUE,
    password_hash TEXT NOT NULL,
    totp_secret TEXT NOT NULL,
    last_totp_step INTEGER NOT NULL DEFAULT 0,
    is_admin INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    password_changed_at REAL NOT NULL,
    auth_epoch INTEGER NOT NULL DEFAULT 0,
    last_login_at REAL
);
CREATE TABLE IF NOT EXISTS api_tokens (
    token_hash TEXT PRIMARY KEY,
    journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,
    auth_epoch INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS api_tokens_journalist ON api_tokens(journalist_id);
CREATE TABLE IF NOT EXISTS submission_seen (
    submission_id INTEGER NOT NULL REFERENCES submissions(id) ON DELETE CASCADE,
    journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,
    PRIMARY KEY (submission_id, journalist_id)
);
CREATE TABLE IF NOT EXISTS reply_seen (
    reply_id INTEGER NOT NULL REFERENCES replies(id) ON DELETE CASCADE,
    journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,
    PRIMARY KEY (reply_id, journalist_id)
);
"""


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    # FULL: an acknowledged submission's row must survive a power cut, not only kill -9.
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES('schema_version', ?) ON CONFLICT(key) DO NOTHING",
        (str(SCHEMA_VERSION),),
    )
    conn.execute("COMMIT")


def transaction(conn: sqlite3.Connection, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(conn, ...)`` inside one write transaction (for the admin CLI too)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn, *args, **kwargs)
        # COMMIT is where WAL mode writes: on a full disk it fails, and must not leave the one
        # connection inside an open transaction (every later BEGIN would fail).
        conn.execute("COMMIT")
    except BaseException:
        # SQLite may already have rolled back by itself (SQLITE_FULL, SQLITE_IOERR); a second
        # ROLLBACK would raise and hide the error that says what happened.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


class Database:
    def __init__(self, reactor: Any, path: str) -> None:
        self.path = path
        self._pool = WorkerPool(reactor, "deaddrop-db", max_threads=1, min_threads=1)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        """Blocking: call before the reactor runs (or from a thread)."""
        self._conn = connect(self.path)
        migrate(self._conn)

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Deferred[T]":
        return self._pool.run(self._in_transaction, fn, *args, **kwargs)

    def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """For start-up and recovery, before the reactor runs."""
        return self._in_transaction(fn, *args, **kwargs)

    def _in_transaction(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        forbid_reactor_thread("SQLite")
        assert self._conn is not None, "Database.open() was not called"
        with self._lock:
            return transaction(self._conn, fn, *args, **kwargs)

    def close(self) -> None:
        self._pool.stop()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
