"""Backups of a restored copy never pass for the original's: every restore starts a line of
backups of its own, and ``restore --not-older-than`` follows the lines an archive descends from
(the adversary review's item 5, on issue 26 item 4)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread

from tests._support import kill_gpg_agent
from tests.integration.test_admin_cli import run_cli
from tests.integration.test_backup import BackupWorkspace


class BackupLineageTests(BackupWorkspace):
    @inlineCallbacks
    def journalists(self, data_dir: str):
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--json", "--data-dir", data_dir)
        self.assertEqual(code, 0, err)
        return [j["username"] for j in json.loads(out)["journalists"]]

    def another_machine(self) -> list[str]:
        """restore's options with a copy of the backup key's home that remembers nothing yet (the
        same key, on another machine)."""
        kill_gpg_agent(self.admin.home)
        home = os.path.join(self.work, f"keys-{len(os.listdir(self.work))}")
        shutil.copytree(self.admin.home, home, ignore=shutil.ignore_patterns("S.*", "deaddrop-newest-backup"))
        self.addCleanup(kill_gpg_agent, home)
        return ["--gnupg-home", home, "--signer", self.admin.signer]

    def restore_with(self, keys: list[str], archive: str, target: str, *extra: str):
        return deferToThread(run_cli, "restore", archive, "--data-dir", target, *keys, *extra)

    @inlineCallbacks
    def backup_with_mallory(self):
        """The original with a journalist, mallory, whose deletion must not be undone: its #1."""
        for argv in (("ca", "init"), ("journalist", "add", "mallory")):
            code, out, err = yield self.cli(*argv)
            self.assertEqual(code, 0, err)
        archive, number, _ = yield self.backup("x1.gpg")
        self.assertEqual(number, 1)
        return archive

    @inlineCallbacks
    def test_a_restore_drills_backups_do_not_roll_back_the_original(self):
        # The review's drill: the original (A) has mallory at #1; a drill restores #1 elsewhere;
        # A deletes mallory and makes #2; the drill copy makes its #2 and #3.
        x1 = yield self.backup_with_mallory()
        drill = os.path.join(self.work, "drill")
        code, out, err = yield self.restore_with(self.another_machine(), x1, drill)
        self.assertEqual(code, 0, err)
        code, out, err = yield self.cli("journalist", "delete", "mallory")
        self.assertEqual(code, 0, err)
        x2, two, _ = yield self.backup("x2.gpg")
        yield self.backup("y2.gpg", data_dir=drill)
        y3, three, y3_created = yield self.backup("y3.gpg", data_dir=drill)
        a, d = self.instances[x1], self.instances[y3]
        self.assertEqual((self.instances[x2], two, three), (a, 2, 3))
        self.assertNotEqual(a, d)
        self.assertIn("mallory", (yield self.journalists(drill)))

        # On a machine that remembers nothing: the plain number cannot say whose #2 it is.
        keys = self.another_machine()
        target = os.path.join(self.work, "victim-restore")
        code, out, err = yield self.restore_with(keys, y3, target, "--not-older-than", str(two))
        self.assertEqual(code, 1, out)
        self.assertEqual(
            err, f"deaddrop-admin: error: {y3} is backup #3 of instance {d}, {y3_created} (restored from backup #1 of "
                 f"instance {a}): --not-older-than 2 does not say which instance's backup #2 you mean, and this archive "
                 f"holds the #2 of instance {d} but not of instance {a} (only through its #1): a copy restored from an "
                 "older backup and backed up since has numbers of its own; an older backup brings back deleted "
                 "accounts and sources, and an older CRL; refused. Give the instance your newest backup printed "
                 "('backup #2 of instance ...'): --not-older-than INSTANCE:2\n")
        self.assertFalse(os.path.exists(target))
        # As the original's backup printed it: refused, saying how far the copy holds the original.
        code, out, err = yield self.restore_with(keys, y3, target, "--not-older-than", f"{a}:2")
        self.assertEqual(code, 1, out)
        self.assertIn(f"{y3} is backup #3 of instance {d}, {y3_created} (restored from backup #1 of instance {a}), "
                      f"which holds instance {a} only through its backup #1, older than --not-older-than {a}:2", err)
        self.assertFalse(os.path.exists(target))
        # The genuine #2 restores, and mallory stays deleted.
        code, out, err = yield self.restore_with(keys, x2, target, "--not-older-than", f"{a}:2")
        self.assertEqual(code, 0, err)
        self.assertNotIn("mallory", (yield self.journalists(target)))
        # This home now remembers #2 of A: a plain restore of the copy, which holds A only
        # through #1, is refused too.
        code, out, err = yield self.restore_with(keys, y3, os.path.join(self.work, "again"))
        self.assertEqual(code, 1, out)
        self.assertIn(f"which holds backup #1 of instance {a} only, older than backup #2 of instance {a}, ", err)
        self.assertIn("To go back to it deliberately, add --allow-older", err)

        # The other way round: a home that restored the copy's #3 first (nothing to compare it
        # with) remembers it for the copy's line only, and the genuine #2 still restores.
        keys = self.another_machine()
        code, out, err = yield self.restore_with(keys, y3, os.path.join(self.work, "copy-first"))
        self.assertEqual(code, 0, err)
        code, out, err = yield self.restore_with(keys, x2, os.path.join(self.work, "then-genuine"),
                                                 "--not-older-than", f"{a}:2")
        self.assertEqual(code, 0, err)
        with open(os.path.join(keys[1], "deaddrop-newest-backup")) as f:
            remembered = {i[:8]: e.get("sequence") for i, e in json.load(f).items()}
        self.assertEqual((remembered[a], remembered[d]), (2, 3))

    @inlineCallbacks
    def test_a_genuine_recovery_is_accepted_with_the_plain_number(self):
        # The original makes #1 and #2 (mallory deleted between), then dies; #2 restores on a new
        # server, which makes #3; later #3 is restored with the number kept from the original.
        x1 = yield self.backup_with_mallory()
        code, out, err = yield self.cli("journalist", "delete", "mallory")
        self.assertEqual(code, 0, err)
        x2, two, _ = yield self.backup("x2.gpg")
        new_server = os.path.join(self.work, "new-server")
        code, out, err = yield self.restore(x2, new_server, "--not-older-than", str(two))
        self.assertEqual(code, 0, err)
        z3, three, _ = yield self.backup("z3.gpg", data_dir=new_server)
        a, b = self.instances[x2], self.instances[z3]
        self.assertEqual((two, three), (2, 3))
        self.assertNotEqual(a, b)

        for keys in (self.admin.restore_args(), self.another_machine()):
            for wanted in ("2", f"{a}:2", f"{b}:3"):
                target = os.path.join(self.work, f"z3-{len(os.listdir(self.work))}")
                code, out, err = yield self.restore_with(keys, z3, target, "--not-older-than", wanted)
                self.assertEqual(code, 0, err)
                self.assertTrue(out.startswith(f"backup #3 of instance {b}, "), out)
                self.assertIn(f"(restored from backup #2 of instance {a}): signed by", out)
                self.assertNotIn("mallory", (yield self.journalists(target)))
        # The original's older backup holds nothing of the new server's line...
        code, out, err = yield self.restore(x1, os.path.join(self.work, "x1"), "--not-older-than", f"{b}:3")
        self.assertEqual(code, 1, out)
        self.assertIn(f"which holds no backup of instance {b} (--not-older-than {b}:3)", err)
        # ... and once the new server's #3 was restored, even #2, the backup it came from, is
        # older than what this backup key saw.
        code, out, err = yield self.restore(x2, os.path.join(self.work, "x2"))
        self.assertEqual(code, 1, out)
        self.assertIn(f"{x2} is backup #2 of instance {a}, ", err)
        self.assertIn(f"older than backup #3 of instance {b}, ", err)
        self.assertIn("(of a copy restored from its #2) which a restore with this backup key already saw", err)

    @inlineCallbacks
    def test_a_malformed_instance_or_number_is_refused_saying_what_to_give(self):
        x1, _, _ = yield self.backup("x1.gpg")
        for wanted in ("0", "x", "3f9a2c:1", "3f9a2c1d:", ":1", "3f9a2c1d:-1"):
            proc = yield deferToThread(
                subprocess.run, [sys.executable, "-m", "deaddrop.admin.cli", "restore", x1, "--data-dir",
                                 os.path.join(self.work, "t"), *self.admin.restore_args(), "--not-older-than", wanted],
                capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2, (wanted, proc.stdout))
            self.assertIn("give the instance and number as 'backup' printed them ('backup #42 of instance 3f9a2c1d' "
                          "is 3f9a2c1d:42; at least 8 hex digits), or a number alone", proc.stderr)
        # The whole id, in capitals, names the same instance.
        with open(os.path.join(self.data_dir, "backup-sequence")) as f:
            instance = json.load(f)["instance"]
        code, out, err = yield self.restore(x1, os.path.join(self.work, "t"), "--not-older-than", f"{instance.upper()}:1")
        self.assertEqual(code, 0, err)
