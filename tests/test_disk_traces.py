"""What the database and the keyring keep on disk, piece by piece (real SQLite, real gpg).

The end-to-end byte search of a whole data dir is tests/integration/test_seized_disk.py.
"""
from __future__ import annotations

import binascii
import os
import sqlite3
import time

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.crypto import armor
from deaddrop.crypto.gpg import Keyring
from deaddrop.store import db, migrations
from tests._support import kill_gpg_agent, short_tempdir, test_svs
from tests._time_traces import find_in_tree, second_needles, wait_for_next_second

DAY = 86400


class SqliteTests(unittest.TestCase):
    def setUp(self):
        self.dir = short_tempdir()
        self.path = os.path.join(self.dir, "db.sqlite")

    def test_secure_delete_is_on_even_where_the_library_default_is_off(self):
        real_connect = sqlite3.connect

        def library_without_the_default(*args, **kwargs):
            # Debian builds SQLite with SECURE_DELETE on; others (and pip wheels) don't.
            conn = real_connect(*args, **kwargs)
            conn.execute("PRAGMA secure_delete=OFF")
            return conn

        self.patch(db.sqlite3, "connect", library_without_the_default)
        conn = db.connect(self.path)
        self.addCleanup(conn.close)
        self.assertEqual(conn.execute("PRAGMA secure_delete").fetchone()[0], 1)

    def test_scrub_leaves_no_deleted_row_in_the_wal_or_the_database(self):
        conn = db.connect(self.path)
        self.addCleanup(conn.close)
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # as under load: the WAL keeps growing
        conn.execute("INSERT INTO t VALUES ('WAL-MARKER-1234567')")
        conn.execute("INSERT INTO t VALUES ('stays')")
        conn.execute("DELETE FROM t WHERE x LIKE 'WAL-MARKER%'")

        def on_disk() -> bytes:
            blob = b""
            for suffix in ("", "-wal"):
                if os.path.exists(self.path + suffix):
                    with open(self.path + suffix, "rb") as f:
                        blob += f.read()
            return blob

        self.assertIn(b"WAL-MARKER-1234567", on_disk())  # what the fix is about
        self.assertTrue(db.scrub_wal(conn))
        self.assertNotIn(b"WAL-MARKER-1234567", on_disk())
        self.assertEqual(os.path.getsize(self.path + "-wal"), 0)
        self.assertEqual([tuple(r) for r in conn.execute("SELECT x FROM t")], [("stays",)])

    def test_existing_times_are_cut_to_the_day(self):
        conn = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(conn.close)
        for statement in migrations.BASELINE_SQL.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        precise = 1764777777.123456
        conn.execute("INSERT INTO sources(uuid, filesystem_id, designation, created_at, last_updated)"
                     " VALUES ('u', 'f', 'd', ?, ?)", (precise, precise + 100))
        conn.execute("INSERT INTO submissions(uuid, source_id, n, filename, kind, size, created_at)"
                     " VALUES ('s', 1, 1, '1-d_d-msg.gpg', 'msg', 1, ?)", (precise,))
        conn.execute("INSERT INTO replies(uuid, source_id, n, filename, size, created_at)"
                     " VALUES ('r', 1, 2, '2-d_d-reply.gpg', 1, ?)", (precise,))
        migrations.upgrade(conn)
        day = precise - precise % DAY
        self.assertEqual(conn.execute("SELECT created_at, last_updated FROM sources").fetchall(), [(day, day)])
        self.assertEqual(conn.execute("SELECT created_at FROM submissions").fetchall(), [(day,)])
        self.assertEqual(conn.execute("SELECT created_at FROM replies").fetchall(), [(day,)])


class KeyringTraceTests(unittest.TestCase):
    def setUp(self):
        self.home = os.path.join(short_tempdir(), "g")
        self.addCleanup(kill_gpg_agent, self.home)

    def files(self, root: str | None = None) -> dict[str, bytes]:
        found = {}
        for dirpath, _dirs, names in os.walk(root or self.home):
            for name in names:
                path = os.path.join(dirpath, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        found[os.path.relpath(path, root or self.home)] = f.read()
        return found

    @inlineCallbacks
    def test_no_revocation_certificate_is_ever_written(self):
        keyring = Keyring(self.home)
        info = yield deferToThread(keyring.generate_source_key, "p" * 40)
        self.assertTrue((yield deferToThread(keyring.has_secret_key, info.fingerprint)))
        self.assertFalse(os.path.isdir(os.path.join(self.home, "openpgp-revocs.d")))
        self.assertFalse([n for n in self.files() if n.endswith(".rev")])

    @inlineCallbacks
    def test_key_files_keep_no_time_finer_than_the_day(self):
        # The key pair is made at a source's first submission: an exact mtime on its secret
        # key file would date that submission to the nanosecond on a seized disk.
        keyring = Keyring(self.home)
        yield deferToThread(keyring.generate_source_key, "p" * 40)
        yield deferToThread(keyring.generate_source_key, "q" * 40)
        secrets_dir = os.path.join(self.home, "private-keys-v1.d")
        paths = [secrets_dir] + [os.path.join(secrets_dir, n) for n in os.listdir(secrets_dir)]
        paths += [os.path.join(self.home, "pubring.kbx")]
        self.assertGreaterEqual(len(paths), 5)
        for path in paths:
            self.assertEqual(os.stat(path).st_mtime % 86400, 0, path)

    @inlineCallbacks
    def test_a_key_pair_made_now_writes_the_second_nowhere(self):
        # A source's key pair is made at its first submission: the keybox's blob time, the
        # trust database and the agent's "protected-at" in the secret key files would each
        # date that submission to the second.
        keyring = Keyring(self.home)
        yield deferToThread(keyring.generate_source_key, "p" * 40)  # the keyring exists already
        first = yield deferToThread(wait_for_next_second)
        info = yield deferToThread(keyring.generate_source_key, "q" * 40)
        last = int(time.time())
        self.assertTrue((yield deferToThread(keyring.has_secret_key, info.fingerprint)))
        self.assertEqual(find_in_tree(self.home, second_needles(range(first, last + 1))), [])
        # The key still works: a message to it decrypts with its passphrase.
        ciphertext = yield deferToThread(keyring.encrypt, b"still usable", [info.fingerprint])
        self.assertEqual((yield deferToThread(keyring.decrypt, ciphertext, "q" * 40)), b"still usable")

    def test_revocation_certificates_of_older_versions_are_removed(self):
        revocs = os.path.join(self.home, "openpgp-revocs.d")
        os.makedirs(revocs)
        with open(os.path.join(revocs, "ABCDEF.rev"), "wb") as f:
            f.write(b"REVOCATION-CERTIFICATE")
        Keyring(self.home)
        self.assertFalse(os.path.isdir(revocs))
        self.assertNotIn(b"REVOCATION-CERTIFICATE", b"".join(self.files().values()))

    @inlineCallbacks
    def test_a_deleted_key_leaves_no_fingerprint_in_keyring_backup_or_trustdb(self):
        keyring = Keyring(self.home)
        with open(test_svs().public_key_path) as f:
            yield deferToThread(keyring.import_submission_key, f.read())
        doomed = yield deferToThread(keyring.generate_source_key, "d" * 40)
        kept = yield deferToThread(keyring.generate_source_key, "k" * 40)
        binary = binascii.unhexlify(doomed.fingerprint)
        self.assertTrue(any(binary in data for data in self.files().values()))
        yield deferToThread(keyring.delete_key_pair, doomed.fingerprint)
        # Nor the trust database of the folder gpg runs in (in memory, but memory can be swapped).
        for name, data in list(self.files().items()) + list(self.files(keyring.run_home).items()):
            self.assertNotIn(binary, data, name)
            self.assertNotIn(doomed.fingerprint.encode(), data, name)
        # The others are all still there and usable.
        self.assertTrue((yield deferToThread(keyring.has_secret_key, kept.fingerprint)))
        ciphertext = yield deferToThread(keyring.encrypt, b"still works", [kept.fingerprint, test_svs().fingerprint])
        self.assertEqual((yield deferToThread(keyring.decrypt, ciphertext, "k" * 40)), b"still works")
        self.assertEqual(test_svs().decrypt(ciphertext), b"still works")
        # Deleting the last source key leaves the submission key.
        yield deferToThread(keyring.delete_key_pair, kept.fingerprint)
        again = yield deferToThread(keyring.encrypt, b"x", [test_svs().fingerprint])
        self.assertEqual(test_svs().decrypt(again), b"x")


    @inlineCallbacks
    def test_a_key_made_while_the_keyring_is_rebuilt_is_kept(self):
        # The rebuild runs beside the live keyring without holding it; a key generated in
        # the meantime must end up in the rebuilt one.
        keyring = Keyring(self.home)
        doomed = yield deferToThread(keyring.generate_source_key, "d" * 40)
        made = []
        build = keyring._build_keybox

        def build_while_a_source_arrives(exported):
            if not made:
                made.append(keyring.generate_source_key("n" * 40))
            return build(exported)

        self.patch(keyring, "_build_keybox", build_while_a_source_arrives)
        yield deferToThread(keyring.delete_key_pair, doomed.fingerprint)
        [newcomer] = made
        self.assertEqual((yield deferToThread(keyring.export_public_key, newcomer.fingerprint)),
                         newcomer.public_armored)
        ciphertext = yield deferToThread(keyring.encrypt, b"hello", [newcomer.fingerprint])
        self.assertEqual((yield deferToThread(keyring.decrypt, ciphertext, "n" * 40)), b"hello")
        binary = binascii.unhexlify(doomed.fingerprint)
        for name, data in self.files().items():
            self.assertNotIn(binary, data, name)
        self.assertFalse([n for n in self.files() if ".new-" in n])


class ArmorTests(unittest.TestCase):
    def test_headers_are_dropped_and_the_message_kept(self):
        data = os.urandom(300)
        text = armor.armor(data)
        self.assertTrue(text.startswith(armor.BEGIN + "\n\n"))
        with_headers = text.replace(armor.BEGIN + "\n", armor.BEGIN + "\nComment: hello\nVersion: x\n", 1)
        self.assertEqual(armor.dearmor(with_headers), data)
        self.assertEqual(armor.armor(armor.dearmor(with_headers)), text)

    def test_malformed_armor_is_refused(self):
        text = armor.armor(b"\x85abc")
        for bad in [text.replace("=", "=A", 1), text.replace(armor.END, ""), "hello",
                    text.replace("\n\n", "\nComment: x\n", 1), armor.BEGIN + "\n\n" + "!!!!\n" + armor.END]:
            with self.assertRaises(ValueError, msg=bad):
                armor.dearmor(bad)
