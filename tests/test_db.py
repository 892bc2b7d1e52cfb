"""SQLite as the server drives it (``deaddrop/store/db.py``)."""
import os
import sqlite3

from twisted.trial import unittest

from deaddrop.store.db import connect, transaction
from tests._support import short_tempdir


def _shm(path: str) -> bytes:
    with open(path + "-shm", "rb") as f:
        return f.read()


class ReadsWriteNothingTests(unittest.TestCase):
    """A read changes no file: SQLite's ``-shm`` is written through a shared mapping, and ext4
    gives such a file a new mtime and ctime at the first write after the kernel wrote its pages
    out (a ctime no cut can hide). A reader writes there when no reader's mark yet names the WAL's
    last commit: so each write transaction leaves that mark itself, at the moment of its write."""

    def setUp(self):
        self.path = os.path.join(short_tempdir(), "db.sqlite")
        self.conn = connect(self.path)
        self.addCleanup(self.conn.close)
        transaction(self.conn, lambda c: c.execute("CREATE TABLE t (x)"))

    def test_a_read_after_a_write_changes_nothing_in_the_shared_memory_file(self):
        transaction(self.conn, lambda c: c.execute("INSERT INTO t VALUES (1)"))
        before = _shm(self.path)
        self.assertEqual(transaction(self.conn, lambda c: c.execute("SELECT x FROM t").fetchall())[0][0], 1)
        self.assertEqual(_shm(self.path), before)

    def test_nor_another_process_reading_while_the_server_runs(self):
        transaction(self.conn, lambda c: c.execute("INSERT INTO t VALUES (2)"))
        before = _shm(self.path)
        other = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            self.assertEqual(other.execute("SELECT x FROM t").fetchall(), [(2,)])
        finally:
            other.close()
        self.assertEqual(_shm(self.path), before)
