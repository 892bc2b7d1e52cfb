import os

from twisted.trial import unittest

from deaddrop.durable import write_atomically
from deaddrop.store.files import Store, stored_filename
from tests._support import short_tempdir

FID = "a" * 52


class StoreTests(unittest.TestCase):
    def setUp(self):
        self.data = short_tempdir()
        self.store = Store(self.data)

    def temp(self, content=b"ciphertext"):
        path = self.store.new_temp_path()
        with open(path, "wb") as f:
            f.write(content)
        return path

    def test_names(self):
        self.assertEqual(stored_filename(3, "brave otter", "doc"), "3-brave_otter-doc.gz.gpg")
        self.assertEqual(stored_filename(1, "brave otter", "msg"), "1-brave_otter-msg.gpg")
        for bad in ["../x", "1-a_b-msg.gpg/..", "0-a_b-msg.gpg", "1-ab-msg.gpg"]:
            self.assertRaises(ValueError, self.store.path_of, FID, bad)
        self.assertRaises(ValueError, self.store.source_dir, "../" + "a" * 49)

    def test_place_moves_into_place_and_never_overwrites(self):
        final = self.store.place(self.temp(b"one"), FID, "1-a_b-msg.gpg")
        with open(final, "rb") as f:
            self.assertEqual(f.read(), b"one")
        self.assertRaises(FileExistsError, self.store.place, self.temp(b"two"), FID, "1-a_b-msg.gpg")
        with open(final, "rb") as f:
            self.assertEqual(f.read(), b"one")

    def test_recovery_reconciles_store_and_database(self):
        self.store.place(self.temp(), FID, "1-a_b-msg.gpg")
        self.store.place(self.temp(), FID, "2-a_b-doc.gz.gpg")  # no row: never acknowledged
        leftover = self.temp()  # a request in flight when the process died
        known = {FID: {"1-a_b-msg.gpg", "3-a_b-reply.gpg"}}  # row 3's file never made it
        report, missing = self.store.recover(known)
        self.assertEqual((report.temp_files_removed, report.files_without_row, report.rows_without_file), (1, 1, 1))
        self.assertEqual(missing, {FID: {"3-a_b-reply.gpg"}})
        self.assertFalse(os.path.exists(leftover))
        self.assertEqual(os.listdir(self.store.source_dir(FID)), ["1-a_b-msg.gpg"])

    def test_atomic_write_leaves_no_temp_and_sets_mode(self):
        path = os.path.join(self.data, "f")
        write_atomically(path, b"x", mode=0o600)
        write_atomically(path, b"y", mode=0o600)
        self.assertEqual(open(path, "rb").read(), b"y")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual([n for n in os.listdir(self.data) if n.startswith(".tmp-")], [])


class SourceWalkPlanTests(unittest.TestCase):
    """The whole source list is read in batches by row id: each batch must cost a batch."""

    def test_a_batch_reads_row_ids_from_where_the_last_ended(self):
        import sqlite3

        from deaddrop.store import journalist_queries as jq, migrations

        conn = sqlite3.connect(":memory:")
        migrations.upgrade(conn)
        plan = " / ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + jq.SOURCES_BY_ID_SQL,
                                                         {"reader": 1, "after": 0, "limit": 250}))
        self.assertIn("USING INTEGER PRIMARY KEY (rowid>?)", plan)
        self.assertNotIn("TEMP B-TREE", plan)  # no sort of every visible source per batch
        conn.close()
