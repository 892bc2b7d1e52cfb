"""``deaddrop-admin journalist ...`` on an initialised data dir, and against a running server; the
refusal of an uninitialised one; global options before or after the sub-command."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.admin.cli import main
from deaddrop.newsroom.accounts import verify_passphrase
from tests._support import (
    JournalistAccount, JournalistBrowser, TotpDevice, initialised_data_dir, issue_client_cert, short_tempdir,
    start_journalist_server,
)

FAST = ["--kdf-cost", "insecure-fast"]


def off_reactor(fn, *args):
    """Call a blocking function on a thread of its own and wait for it."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn(*args)))
    thread.start()
    thread.join()
    assert result, "the call raised"
    return result[0]


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``deaddrop-admin ARGV`` in this process, on a thread of its own, as the console script
    runs it (never on the reactor thread, which the blocking-call guard forbids)."""
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(list(argv))

    return off_reactor(run), out.getvalue(), err.getvalue()


class AdminCliTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        # The server's first start initialises the data dir; deaddrop-admin never does.
        self.data_dir = yield initialised_data_dir(self)

    def cli(self, *argv: str) -> tuple[int, str, str]:
        return run_cli(*argv, "--data-dir", self.data_dir)

    def cli_json(self, *argv: str) -> tuple[int, dict]:
        code, out, err = self.cli(*argv, "--json")
        self.assertEqual(len(out.strip().splitlines()), 1, out)
        return code, json.loads(out)

    def rows(self, sql: str, *args):
        conn = sqlite3.connect(os.path.join(self.data_dir, "db.sqlite"))
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def events(self) -> list[dict]:
        with open(os.path.join(self.data_dir, "logs", "security.jsonl")) as f:
            return [e for e in map(json.loads, f) if e["event"].startswith("admin.")]

    def test_an_uninitialised_data_dir_is_refused_and_left_alone(self):
        # Issue 12: a mistyped --data-dir made a new database and printed credentials for it.
        parent = short_tempdir()
        self.addCleanup(shutil.rmtree, parent, True)
        missing, empty = os.path.join(parent, "typo"), os.path.join(parent, "empty")
        os.mkdir(empty)
        commands = [("journalist", "add", "alice", *FAST), ("journalist", "list"), ("journalist", "delete", "a"),
                    ("journalist", "reset-2fa", "a"), ("journalist", "reset-password", "a", *FAST),
                    ("status",), ("onion-client", "add", "alice"), ("onion-client", "list"),
                    ("onion-client", "remove", "alice")]
        for path in (missing, empty):
            for argv in commands:
                code, out, err = run_cli(*argv, "--data-dir", path)
                self.assertEqual((code, out), (1, ""), argv)
                self.assertEqual(err, f"deaddrop-admin: error: {path} is not an initialised DeadDrop data directory"
                                      " (check --data-dir; the server initialises it at its first start,"
                                      " or use 'deaddrop-admin restore')\n", argv)
        self.assertFalse(os.path.exists(missing))
        self.assertEqual(os.listdir(empty), [])

    def test_global_options_before_or_after_the_sub_command(self):
        # Issue 13: git style; "deaddrop-admin --data-dir D status" used to fail with "invalid choice".
        self.cli("journalist", "add", "alice", *FAST)
        for argv in [("--data-dir", self.data_dir, "--json", "journalist", "list"),
                     ("--json", "journalist", "list", "--data-dir", self.data_dir),
                     ("--data-dir", self.data_dir, "journalist", "list", "--json"),
                     ("journalist", "list", "--json", "--data-dir", self.data_dir)]:
            code, out, err = run_cli(*argv)
            self.assertEqual(code, 0, (argv, err))
            self.assertEqual([j["username"] for j in json.loads(out)["journalists"]], ["alice"], argv)
        code, out, err = run_cli("--data-dir", self.data_dir, "journalist", "list")
        self.assertEqual((code, out.split()[0]), (0, "alice"))
        # The value after the sub-command wins over one before it.
        code, out, err = run_cli("--data-dir", "/nonexistent", "journalist", "list", "--data-dir", self.data_dir)
        self.assertEqual(code, 0, err)

    def test_add_on_an_initialised_data_dir_prints_credentials_once(self):
        code, data = self.cli_json("journalist", "add", "alice", "--admin", *FAST)
        self.assertEqual(code, 0)
        self.assertEqual(stat_mode(self.data_dir), 0o700)
        self.assertEqual((data["username"], data["is_admin"]), ("alice", True))
        self.assertEqual(len(data["passphrase"].split()), 7)
        self.assertRegex(data["totp_secret"], r"^[A-Z2-7]{32}$")
        self.assertEqual(data["totp_uri"], f"otpauth://totp/DeadDrop:alice?secret={data['totp_secret']}&issuer=DeadDrop")
        [(stored_hash, secret, is_admin)] = self.rows("SELECT password_hash, totp_secret, is_admin FROM journalists")
        self.assertTrue(off_reactor(verify_passphrase, stored_hash, data["passphrase"]))
        self.assertNotIn(data["passphrase"], stored_hash)
        self.assertEqual((secret, is_admin), (data["totp_secret"], 1))
        self.assertEqual([(e["event"], e["target"]) for e in self.events()], [("admin.journalist.added", "alice")])

        code, out, err = self.cli("journalist", "add", "bob", *FAST)
        self.assertEqual(code, 0)
        self.assertIn("added journalist bob\n", out)
        self.assertRegex(out, r"passphrase: +(\w+ ){6}\w+\n")
        self.assertIn("otpauth://totp/DeadDrop:bob?secret=", out)
        self.assertIn("█", out)  # the QR code
        # The account alone does not get bob in: the exact certificate line is named.
        self.assertIn("deaddrop-admin cert issue bob --ca-dir CA_DIR --out bob.p12", out)

    def test_duplicate_and_unknown_names_are_one_line_errors(self):
        self.assertEqual(self.cli("journalist", "add", "alice", *FAST)[0], 0)
        for argv, message in [(("journalist", "add", "ALICE", *FAST), "a journalist named 'ALICE' already exists"),
                              (("journalist", "add", "bad name!", *FAST), "invalid username"),
                              (("journalist", "delete", "nobody"), "no journalist named 'nobody'"),
                              (("journalist", "reset-2fa", "nobody"), "no journalist named 'nobody'"),
                              (("journalist", "reset-password", "nobody"), "no journalist named 'nobody'")]:
            code, out, err = self.cli(*argv)
            self.assertEqual(code, 1, argv)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertIn(message, err)
            code, data = self.cli_json(*argv)
            self.assertEqual(code, 1)
            self.assertIn(message, data["error"])
        self.assertEqual(self.rows("SELECT COUNT(*) FROM journalists"), [(1,)])

    def test_list_reset_and_delete(self):
        code, data = self.cli_json("journalist", "list")
        self.assertEqual((code, data["journalists"]), (0, []))
        for name in ["carol", "alice"]:
            self.cli("journalist", "add", name, *FAST)
        code, data = self.cli_json("journalist", "list")
        self.assertEqual([j["username"] for j in data["journalists"]], ["alice", "carol"])
        self.assertEqual({j["is_admin"] for j in data["journalists"]}, {False})

        [(old_hash, old_secret, epoch)] = self.rows(
            "SELECT password_hash, totp_secret, auth_epoch FROM journalists WHERE username = 'alice'")
        code, data = self.cli_json("journalist", "reset-password", "alice", *FAST)
        self.assertEqual(code, 0)
        [(new_hash, new_epoch)] = self.rows("SELECT password_hash, auth_epoch FROM journalists WHERE username = 'alice'")
        self.assertTrue(off_reactor(verify_passphrase, new_hash, data["passphrase"]))
        self.assertNotEqual(new_hash, old_hash)
        self.assertEqual(new_epoch, epoch + 1)

        code, data = self.cli_json("journalist", "reset-2fa", "alice")
        self.assertEqual(code, 0)
        [(secret,)] = self.rows("SELECT totp_secret FROM journalists WHERE username = 'alice'")
        self.assertEqual(secret, data["totp_secret"])
        self.assertNotEqual(secret, old_secret)

        code, data = self.cli_json("journalist", "delete", "alice")
        self.assertEqual((code, data["deleted"]), (0, "alice"))
        code, data = self.cli_json("journalist", "list")
        self.assertEqual([j["username"] for j in data["journalists"]], ["carol"])
        self.assertEqual([e["event"] for e in self.events()][-3:],
                         ["admin.journalist.password_reset", "admin.journalist.2fa_reset", "admin.journalist.deleted"])

    def test_the_installed_console_script(self):
        script = os.path.join(os.path.dirname(sys.executable), "deaddrop-admin")
        if not os.path.exists(script):
            raise unittest.SkipTest("deaddrop-admin is not installed next to this Python")
        proc = subprocess.run([script, "journalist", "add", "dora", "--json", "--data-dir", self.data_dir, *FAST],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["username"], "dora")
        proc = subprocess.run([script, "journalist", "add", "dora", "--data-dir", self.data_dir, *FAST],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr, "deaddrop-admin: error: a journalist named 'dora' already exists\n")


def stat_mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777


class AdminCliWithRunningServerTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_accounts_made_and_reset_while_the_server_runs(self):
        server = yield start_journalist_server(self, data_dir=short_tempdir())
        code, out, err = yield deferToThread(run_cli, "journalist", "add", "erin", "--json", "--data-dir",
                                             server.data_dir, *FAST)
        self.assertEqual(code, 0, err)
        data = json.loads(out)
        account = JournalistAccount("erin", data["passphrase"], data["totp_secret"], data["uuid"], False)
        browser = JournalistBrowser(server, issue_client_cert(server, "erin"))
        self.addCleanup(browser.close)
        device = TotpDevice(server, account.totp_secret)
        response, html = yield browser.log_in(account, device)
        self.assertIn("<h1>Sources</h1>", html)
        code, out, err = yield deferToThread(run_cli, "journalist", "reset-password", "erin", "--json", "--data-dir",
                                             server.data_dir, *FAST)
        self.assertEqual(code, 0, err)
        response, html = yield browser.get("/sources")
        self.assertIn("Journalist log in", html)  # the old session ended
        account.passphrase = json.loads(out)["passphrase"]
        response, html = yield browser.log_in(account, device)
        self.assertIn("<h1>Sources</h1>", html)
        response, html = yield browser.get("/account")
        self.assertRegex(html, re.escape("Username: erin"))
