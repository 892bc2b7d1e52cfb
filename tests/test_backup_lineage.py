"""Which backups an archive's state holds, judged from its ancestry and what restore remembers
(``deaddrop.admin.backup_lineage``, ``deaddrop.admin.backup_sequence``), without gpg."""
from __future__ import annotations

import os
import shutil
import tempfile

from twisted.trial import unittest

from deaddrop.admin import backup_sequence
from deaddrop.admin.backup_lineage import Backup, Numbered, SequenceError, Wanted, check_wanted, parse_wanted

A, B, C, D = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
T = "2026-12-04T17:43:05Z"


def archive(instance: str, sequence: int, *ancestry: Backup) -> Numbered:
    return Numbered(instance, sequence, T, tuple(ancestry))


class WantedTests(unittest.TestCase):
    def test_a_number_or_an_instance_and_a_number(self):
        self.assertEqual(parse_wanted("42"), Wanted(42, None))
        self.assertEqual(parse_wanted("3F9A2C1D:42"), Wanted(42, "3f9a2c1d"))
        self.assertEqual(parse_wanted(f"{A}:7"), Wanted(7, A))
        for bad in ("0", "x", "3f9a2c:42", "3f9a2c1d:", ":42", "3f9a2c1d:0", "3f9a2c1g:1", f"{A}0:1"):
            self.assertRaises(ValueError, parse_wanted, bad)


class PlainNumberTests(unittest.TestCase):
    """--not-older-than N: accepted only when every line that could have made a #N is one whose
    #N the archive holds."""

    def judge(self, found: Numbered, sequence: int, known: dict[str, int] | None = None) -> str:
        try:
            check_wanted("ARCHIVE", found, Wanted(sequence, None), known or {})
        except SequenceError as e:
            return str(e)
        return "accepted"

    def test_an_instance_never_restored_is_judged_by_its_number(self):
        self.assertEqual(self.judge(archive(A, 3), 2), "accepted")
        self.assertEqual(self.judge(archive(A, 3), 3), "accepted")
        self.assertIn("older than --not-older-than 4", self.judge(archive(A, 3), 4))

    def test_a_copy_restored_from_before_n_is_ambiguous(self):
        # The drill: the copy (D) restored from A's #1 made #2 and #3; A's own #2 it does not hold.
        said = self.judge(archive(D, 3, Backup(A, 1)), 2)
        self.assertIn("does not say which instance's backup #2 you mean", said)
        self.assertIn("holds the #2 of instance dddddddd but not of instance aaaaaaaa (only through its #1)", said)
        self.assertIn("--not-older-than INSTANCE:2", said)
        # A number at or below the backup it was restored from can only be A's.
        self.assertEqual(self.judge(archive(D, 3, Backup(A, 1)), 1), "accepted")

    def test_a_recovery_from_n_holds_n(self):
        self.assertEqual(self.judge(archive(B, 3, Backup(A, 2)), 2), "accepted")
        self.assertEqual(self.judge(archive(C, 5, Backup(A, 2), Backup(B, 4)), 2), "accepted")
        # B's #3 or #4: A may have gone on to a #3 that C does not hold.
        self.assertIn("does not say which", self.judge(archive(C, 5, Backup(A, 2), Backup(B, 4)), 3))

    def test_copies_this_backup_key_restored_count_too(self):
        # A server moved to B (restored from A's #5) while the old one went on to #7: A's #7 does
        # not hold B's #6, and this home knows B exists.
        self.assertEqual(self.judge(archive(A, 7), 6), "accepted")
        said = self.judge(archive(A, 7), 6, {B: 5, A: 0})
        self.assertIn("not of instance bbbbbbbb (a copy a restore with this backup key made from a #5)", said)
        self.assertEqual(self.judge(archive(A, 7), 5, {B: 5, A: 0}), "accepted")
        # Another instance whose backups this key restored: its numbers are its own.
        self.assertIn("another instance whose backups", self.judge(archive(A, 7), 6, {C: 0}))


class NamedInstanceTests(unittest.TestCase):
    def judge(self, found: Numbered, wanted: str) -> str:
        try:
            check_wanted("ARCHIVE", found, parse_wanted(wanted), {})
        except SequenceError as e:
            return str(e)
        return "accepted"

    def test_the_archive_must_hold_that_instances_backup(self):
        drill = archive(D, 3, Backup(A, 1))
        self.assertIn("which holds instance aaaaaaaa only through its backup #1, older than --not-older-than "
                      "aaaaaaaa:2", self.judge(drill, "aaaaaaaa:2"))
        self.assertEqual(self.judge(drill, "aaaaaaaa:1"), "accepted")
        self.assertEqual(self.judge(drill, "dddddddd:3"), "accepted")
        self.assertIn("older than --not-older-than dddddddd:4", self.judge(drill, "dddddddd:4"))
        self.assertIn("which holds no backup of instance bbbbbbbb", self.judge(drill, "bbbbbbbb:1"))
        self.assertIn("which holds no backup of instance dddddddd", self.judge(archive(A, 9), "dddddddd:1"))

    def test_a_prefix_matching_two_lines_is_refused(self):
        one, two = "3f9a2c1d" + "0" * 24, "3f9a2c1d" + "1" * 24
        self.assertIn("give more of its digits", self.judge(archive(two, 3, Backup(one, 1)), "3f9a2c1d:1"))
        self.assertEqual(self.judge(archive(two, 3, Backup(one, 1)), f"{one}:1"), "accepted")


class RememberedTests(unittest.TestCase):
    """The state file keeps each line's newest restored backup, and the lines restores started."""

    def setUp(self):
        home = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, home)
        self.state = os.path.join(home, backup_sequence.STATE_FILE)

    def judge(self, found: Numbered, wanted: str | None = None, allow_older: bool = False) -> str:
        try:
            backup_sequence.check_not_older("ARCHIVE", found, parse_wanted(wanted) if wanted else None, self.state,
                                            allow_older)
        except SequenceError as e:
            return str(e)
        return "accepted"

    def test_each_line_is_compared_with_its_own_newest(self):
        backup_sequence.remember(self.state, archive(D, 3, Backup(A, 1)), C)  # the drill copy's #3
        # A's genuine #2 is not older than the copy's #3: they are different lines.
        self.assertEqual(self.judge(archive(A, 2)), "accepted")
        backup_sequence.remember(self.state, archive(A, 2), B)
        # Now the copy, which holds A only through #1, is older than A's #2.
        said = self.judge(archive(D, 3, Backup(A, 1)))
        self.assertIn("which holds backup #1 of instance aaaaaaaa only, older than backup #2 of instance aaaaaaaa, "
                      f"{T} which a restore with this backup key already saw", said)
        self.assertEqual(self.judge(archive(D, 3, Backup(A, 1)), allow_older=True), "accepted")
        self.assertEqual(backup_sequence.newest_seen(self.state, A), Numbered(A, 2, T))
        self.assertEqual(backup_sequence.newest_seen(self.state, D), Numbered(D, 3, T))
        self.assertIsNone(backup_sequence.newest_seen(self.state, B))  # started here, none of its backups seen

    def test_the_backup_a_remembered_copy_came_from_is_older_than_the_copy(self):
        backup_sequence.remember(self.state, archive(B, 3, Backup(A, 2)), C)
        self.assertIn("older than backup #3 of instance bbbbbbbb, 2026-12-04T17:43:05Z (of a copy restored from its #2)",
                      self.judge(archive(A, 2)))
        self.assertIn("older than backup #2 of instance aaaaaaaa which", self.judge(archive(A, 1)))
        # A's later backups (the old server went on) are another branch: not compared...
        self.assertEqual(self.judge(archive(A, 4)), "accepted")
        # ... but a plain number is ambiguous where B could have made it.
        self.assertIn("does not say which", self.judge(archive(A, 4), "3"))
        self.assertIn("which holds no backup of instance bbbbbbbb", self.judge(archive(A, 4), "bbbbbbbb:3"))
        # A line restore only started (C, from B's #3) has no backup to compare with.
        self.assertEqual(self.judge(archive(B, 3, Backup(A, 2))), "accepted")

    def test_a_damaged_memory_refuses(self):
        with open(self.state, "w") as f:
            f.write('{"' + A + '": {"sequence": "two"}}')
        self.assertIn("cannot be read", self.judge(archive(A, 2)))
