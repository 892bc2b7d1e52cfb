"""SQLite metadata: one connection, one dedicated thread, explicit transactions.

Every query runs through ``Database.run(fn, ...)``, which calls ``fn(conn, ...)`` on the DB
thread inside ``BEGIN IMMEDIATE ... COMMIT``. One writer thread means no lock juggling inside
the process; WAL lets ``deaddrop-admin`` read and write while the server runs.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred

from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread
from deaddrop.durable import replace_durably
from deaddrop.store import migrations
from deaddrop.store.migrations import SchemaError

T = TypeVar("T")

# Kept for callers that ask which schema this code writes; migrations.py owns the steps.
SCHEMA_VERSION = migrations.CURRENT


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    # FULL: an acknowledged submission's row must survive a power cut, not only kill -9.
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=10000")
    # Deleted rows are overwritten with zeros, not just unlinked from the b-tree: a deleted
    # source's ids must not stay readable in free pages. Debian's SQLite does this by default;
    # other builds don't, so say it.
    conn.execute("PRAGMA secure_delete=ON")
    return conn


def make_private(path: str) -> None:
    """The database holds journalists' TOTP secrets and passphrase hashes: mode 0600, and its
    WAL and shared-memory files with it (SQLite gives them the database file's mode)."""
    if not os.path.exists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for name in (path, path + "-wal", path + "-shm"):
        try:
            os.chmod(name, 0o600)
        except OSError:
            pass  # absent, or not ours: SQLite says so if it matters, `status` reports the owner


def scrub_wal(conn: sqlite3.Connection) -> bool:
    """Copy the WAL into the database and truncate it to zero bytes.

    After a deletion the WAL still holds the pages as they were before it (a deleted source's
    ids among them) until a checkpoint; TRUNCATE also empties the file. -> True if it could
    (a reader holding an old snapshot makes it busy: the next scrub will do it).
    """
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return not busy


def migrate(conn: sqlite3.Connection, path: str = "the database") -> tuple[int | None, int]:
    """Create or upgrade the schema (see ``migrations``). -> (version before, version after)."""
    return migrations.upgrade(conn, path)


def backup_to(conn: sqlite3.Connection, destination: str) -> None:
    """A consistent copy of the live database (SQLite's online backup API) at ``destination``,
    written under a temporary name, fsynced and renamed, mode 0600."""
    temp = f"{destination}.tmp-{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    try:
        target = sqlite3.connect(temp)
        try:
            conn.backup(target)
            # The copy is a standalone file: no WAL beside it to lose.
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
        replace_durably(temp, destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)
        raise


class MigrationFailed(SchemaError):
    """A schema step failed, and the database was put back as it was before the upgrade began
    (from the copy): the previous DeadDrop can run it again."""

    def __init__(self, path: str, before: int, copy: str, cause: BaseException) -> None:
        super().__init__(
            f"upgrading {path} from schema version {before} to {migrations.CURRENT} failed ({cause}); "
            f"the database is back at version {before}, as the previous DeadDrop left it, and its copy is {copy}"
        )
        self.before, self.copy = before, copy


def restore_from_copy(conn: sqlite3.Connection, copy: str) -> None:
    """Put the whole database back as ``copy`` holds it (SQLite's backup API, the other way)."""
    source = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        source.backup(conn)
    finally:
        source.close()


def upgrade_with_backup(conn: sqlite3.Connection, path: str) -> str | None:
    """The server's start-up upgrade (and ``deaddrop-admin migrate``'s): refuse a newer schema;
    before changing an older one, copy the database to ``DATA/backups/db-schemaN-TIME.sqlite``.
    -> that copy's path, if any. Each step commits on its own, so a step failing after others
    succeeded would leave a version the previous DeadDrop refuses: the copy is then put back
    whole and ``MigrationFailed`` says so."""
    version = migrations.schema_version(conn)
    migrations.check_known(version, path)
    copy = None
    if version is not None and version < migrations.CURRENT:
        directory = os.path.join(os.path.dirname(os.path.abspath(path)), "backups")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        copy = os.path.join(directory, f"db-schema{version}-{stamp}.sqlite")
        backup_to(conn, copy)
    try:
        migrate(conn, path)
    except Exception as e:
        if version is None or copy is None:
            raise
        restore_from_copy(conn, copy)
        raise MigrationFailed(path, version, copy, e) from e
    return copy


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
    _leave_read_mark(conn)
    return result


def _leave_read_mark(conn: sqlite3.Connection) -> None:
    """A read now, so that the next read (a source's login, perhaps) writes nothing.

    A reader needs one of the WAL index's read marks to name the WAL's last commit; when none
    does (after every write) it writes one, in ``-shm``, which SQLite maps shared. ext4 dates
    a file written through such a mapping at the first write after the kernel wrote its pages
    out: a new mtime and ctime (which no cut can hide) at the second of that read. Taken here,
    the mark is written with the commit's own pages, at the moment the write is dated anyway."""
    conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()


class Database:
    def __init__(self, reactor: Any, path: str) -> None:
        self.path = path
        self._pool = WorkerPool(reactor, "deaddrop-db", max_threads=1, min_threads=1)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def open(self) -> str | None:
        """Blocking: call before the reactor runs (or from a thread). Creates or upgrades the
        schema (after a backup copy of an older one: -> its path) and refuses a newer one."""
        make_private(self.path)
        self._conn = connect(self.path)
        try:
            return upgrade_with_backup(self._conn, self.path)
        except BaseException:
            self._conn.close()
            self._conn = None
            raise

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Deferred[T]":
        return self._pool.run(self._in_transaction, fn, *args, **kwargs)

    def run_and_scrub(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Deferred[T]":
        """``run`` for deletions: after the commit, the WAL is checkpointed and truncated so
        no copy of the deleted rows stays in it."""
        return self._pool.run(self._then_scrub, fn, *args, **kwargs)

    def _then_scrub(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        result = self._in_transaction(fn, *args, **kwargs)
        with self._lock:
            assert self._conn is not None
            scrub_wal(self._conn)
        return result

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
