"""What ``deaddrop-admin status`` reads of the /proc mount (adversary review 3, a local user)."""
from __future__ import annotations

import os

from twisted.trial import unittest

from deaddrop.admin._process_privacy import process_privacy

_LINE = "22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw{extra}\n"
_OTHER = "30 22 0:26 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw,fd=30\n"


class ProcessPrivacyTests(unittest.TestCase):
    def read(self, *lines: str):
        path = self.mktemp()
        with open(path, "w") as f:
            f.writelines(lines)
        return process_privacy(path)

    def test_only_a_proc_that_does_not_list_other_users_processes_hides_them(self):
        for extra, hidden in (("", False), (",hidepid=noaccess", False), (",hidepid=1", False),
                              (",hidepid=invisible", True), (",hidepid=2", True), (",hidepid=ptraceable", True),
                              (",hidepid=4", True), (",hidepid=invisible,gid=4", True)):
            found = self.read(_LINE.format(extra=extra), _OTHER)
            self.assertEqual(found["hidden"], hidden, extra)
            if not hidden:
                self.assertIn("mount -o remount,hidepid=invisible /proc", found["detail"])

    def test_the_last_proc_mounted_there_is_the_one_seen_and_an_unreadable_table_says_nothing(self):
        found = self.read(_LINE.format(extra=""), _LINE.format(extra=",hidepid=invisible"))
        self.assertTrue(found["hidden"])
        self.assertIsNone(process_privacy(os.path.join(self.mktemp(), "missing")))
