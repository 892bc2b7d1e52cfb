"""deaddrop.durable: the one crash-safe writer every layer uses."""
from __future__ import annotations

import os
import stat

from twisted.trial import unittest

from deaddrop import durable


class DurableTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.makedirs(self.dir)

    def leftovers(self) -> list[str]:
        return [n for n in os.listdir(self.dir) if n.startswith(durable.TEMP_PREFIX)]

    def test_write_atomically_replaces_whole_with_the_mode_and_no_temp_left(self):
        path = os.path.join(self.dir, "f")
        durable.write_atomically(path, b"old")
        durable.write_atomically(path, b"new", 0o644)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"new")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)
        durable.write_atomically(path, b"torrc", durable=False)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"torrc")
        self.assertEqual(self.leftovers(), [])

    def test_a_failed_replace_keeps_the_old_file_and_removes_the_temp(self):
        path = os.path.join(self.dir, "d")
        os.makedirs(os.path.join(path, "busy"))  # a non-empty directory cannot be replaced by a file
        self.assertRaises(OSError, durable.write_atomically, path, b"x")
        self.assertTrue(os.path.isdir(path))
        self.assertEqual(self.leftovers(), [])

    def test_create_exclusively_never_replaces(self):
        path = os.path.join(self.dir, "pepper")
        self.assertTrue(durable.create_exclusively(path, b"first"))
        self.assertFalse(durable.create_exclusively(path, b"second"))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"first")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(self.leftovers(), [])

    def test_write_new_file_refuses_an_existing_one(self):
        path = os.path.join(self.dir, "temp")
        durable.write_new_file(path, b"ciphertext")
        self.assertRaises(FileExistsError, durable.write_new_file, path, b"other")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"ciphertext")
