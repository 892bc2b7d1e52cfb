"""``deaddrop-admin --instance NAME`` and ``deaddrop-admin instance add|list`` (issue 32, item 4),
with /var/lib/deaddrop and /etc/deaddrop moved to a scratch folder and the system user faked
(the real users, folders and two instances side by side: tests/integration/test_debian_package.py)."""
from __future__ import annotations

import os
import shutil

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.admin import _instance_commands, instances
from tests._support import initialised_data_dir, short_tempdir
from tests.integration.test_admin_cli import run_cli


class InstanceTests(unittest.TestCase):
    timeout = 60

    def setUp(self) -> None:
        scratch = short_tempdir("dd-inst-")
        self.addCleanup(shutil.rmtree, scratch, True)
        self.data_root, self.conf_root = os.path.join(scratch, "var-lib-deaddrop"), os.path.join(scratch, "etc-deaddrop")
        self.patch(instances, "DATA_ROOT", self.data_root)
        self.patch(instances, "CONF_ROOT", self.conf_root)
        self.patch(_instance_commands, "is_root", lambda: True)
        self.users: list[str] = []

        def system_user(name: str, home: str) -> tuple[int, int, bool]:
            made = name not in self.users
            self.users.append(name)
            return os.getuid(), os.getgid(), made

        self.patch(_instance_commands, "system_user", system_user)
        self.patch(_instance_commands, "chown", lambda path, uid, gid: None)

    def add(self, *argv: str) -> tuple[int, str, str]:
        return run_cli("instance", "add", *argv)

    def test_add_makes_the_user_the_folders_and_an_options_file_with_free_ports(self):
        code, out, err = self.add("alpha")
        self.assertEqual((code, err), (0, ""))
        self.assertIn("made the system user deaddrop-alpha", out)
        self.assertEqual(os.stat(self.data_root).st_mode & 0o7777, 0o711)
        self.assertEqual(os.stat(os.path.join(self.data_root, "alpha")).st_mode & 0o7777, 0o700)
        self.assertEqual(os.stat(os.path.join(self.conf_root, "alpha")).st_mode & 0o7777, 0o750)
        with open(os.path.join(self.conf_root, "alpha.conf")) as f:
            alpha = f.read()
        self.assertIn("DEADDROP_SOURCE_LISTEN=tcp:8081:interface=127.0.0.1\n", alpha)
        self.assertIn("DEADDROP_JOURNALIST_LISTEN=tcp:8444:interface=10.8.0.1\n", alpha)
        self.assertIn(f"DEADDROP_SUBMISSION_KEY={self.conf_root}/alpha/submission-public.asc\n", alpha)
        self.assertIn("next:\n  1. copy the SVS's submission-public.asc", out)
        self.assertIn("systemctl enable --now deaddrop@alpha.service", out)
        # The next instance takes the next ports; adding one again changes nothing.
        self.add("beta")
        with open(os.path.join(self.conf_root, "beta.conf")) as f:
            self.assertIn("DEADDROP_SOURCE_LISTEN=tcp:8082:interface=127.0.0.1\n", f.read())
        code, out, err = self.add("alpha")
        self.assertEqual(code, 0)
        self.assertIn(f"kept {self.conf_root}/alpha.conf as it is", out)
        self.assertNotIn("made", out)
        code, out, err = run_cli("instance", "list")
        self.assertEqual(out.splitlines(), [
            f"alpha: deaddrop@alpha.service as deaddrop-alpha, data {self.data_root}/alpha (not started yet)",
            f"beta: deaddrop@beta.service as deaddrop-beta, data {self.data_root}/beta (not started yet)"])

    def test_names_that_cannot_be_an_instance_are_refused(self):
        for name in ("deaddrop", "Alpha", "1st", "a" * 24, "a/b", "a_b"):
            code, out, err = self.add(name)
            self.assertEqual(code, 1, name)
            self.assertIn("cannot name an instance", err)
        self.assertFalse(os.path.exists(self.data_root))

    @inlineCallbacks
    def test_add_refuses_beside_an_initialised_single_instance_and_without_root(self):
        # /var/lib/deaddrop as deaddrop.service leaves it after its first start.
        single = yield initialised_data_dir(self)
        self.patch(instances, "DATA_ROOT", single)
        mode = os.stat(single).st_mode & 0o7777
        code, out, err = yield deferToThread(self.add, "alpha")
        self.assertEqual(code, 1)
        self.assertIn(f"{single} is deaddrop.service's initialised data dir", err)
        self.assertEqual((os.stat(single).st_mode & 0o7777, os.path.exists(os.path.join(single, "alpha"))), (mode, False))
        self.assertEqual(self.users, [])
        self.patch(instances, "DATA_ROOT", self.data_root)
        self.patch(_instance_commands, "is_root", lambda: False)
        code, out, err = yield deferToThread(self.add, "beta")
        self.assertEqual(err, "deaddrop-admin: error: instance add makes a system user and folders in /var/lib and /etc: "
                              "run it as root\n")
        self.assertFalse(os.path.exists(self.data_root))

    @inlineCallbacks
    def test_instance_names_the_data_dir_of_every_command(self):
        data_dir = yield initialised_data_dir(self)
        os.makedirs(self.data_root)
        os.rename(data_dir, os.path.join(self.data_root, "alpha"))
        code, out, err = yield deferToThread(run_cli, "--instance", "alpha", "journalist", "add", "alice")
        self.assertEqual((code, err), (0, ""))
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--instance", "alpha")
        self.assertIn("alice", out)
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--instance", "beta")
        self.assertEqual(code, 1)
        self.assertIn(f"{self.data_root}/beta is not an initialised DeadDrop data directory", err)
        code, out, err = yield deferToThread(run_cli, "--instance", "alpha", "journalist", "list", "--data-dir", "x")
        self.assertEqual(err, f"deaddrop-admin: error: --instance alpha names the data dir ({self.data_root}/alpha): "
                              "give it or --data-dir, not both\n")
