"""Codes for an account with security keys (issue 30, items 4 and 5): the one-time API code
(taken after a key login; ``deaddrop-journalist login`` accepts it once), and printed recovery
codes (Argon2id hashes, shown once, each used once in place of a key, a security event)."""
from __future__ import annotations

import io
import os
import re
import sqlite3

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.web.journalist import key_codes
from deaddrop.workstation import cli as ws_cli
from tests._soft_key import SoftKey, enrol, log_in_with_key
from tests._support import (
    JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events, short_tempdir,
    start_journalist_server,
)

_CODE = re.compile(r'<li class="codename">([A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4})</li>')


class KeyCodesTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.port = int(self.server.journalist_url.rsplit(":", 1)[1])
        self.account = yield add_journalist(self.server, "dana")
        self.client = issue_client_cert(self.server, "dana")
        self.key = SoftKey(f"https://localhost:{self.port}")
        self.browser = self.new_browser()
        yield self.browser.log_in(self.account, TotpDevice(self.server, self.account.totp_secret))
        # Codes before a key: none to make.
        response, html = yield self.browser.get("/account")
        response, html = yield self.browser.post("/account/api-code", data={"csrf_token": self.browser.csrf(html)})
        self.assertEqual(response.code, 403)
        self.assertIn("Register a security key first", html)
        response, html = yield enrol(self.browser, self.port, self.key, "blue YubiKey")
        # Nor in a session that began with a code rather than the key.
        response, html = yield self.browser.post("/account/recovery-codes", data={"csrf_token": self.browser.csrf(html)})
        self.assertEqual(response.code, 403)
        self.assertIn("log in again with your security key first", html)
        yield self.browser.post("/logout", data={"csrf_token": self.browser.csrf(html)})
        response, html = yield log_in_with_key(self.browser, self.port, "dana", self.account.passphrase, self.key)
        self.assertIn("<h1>Sources</h1>", html)

    def new_browser(self) -> JournalistBrowser:
        browser = JournalistBrowser(self.server, self.client)
        self.addCleanup(browser.close)
        return browser

    def events(self, name: str) -> list[dict]:
        return [e for e in security_events(self.server) if e["event"] == name]

    @inlineCallbacks
    def test_recovery_codes_are_argon2id_hashes_shown_once_and_each_works_once(self):
        response, html = yield self.browser.get("/account")
        self.assertIn("0 unused recovery codes", html)
        response, html = yield self.browser.post("/account/recovery-codes", data={"csrf_token": self.browser.csrf(html)})
        codes = _CODE.findall(html)
        self.assertEqual(len(set(codes)), 10)
        conn = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        stored = [h for (h,) in conn.execute("SELECT code_hash FROM recovery_codes")]
        conn.close()
        self.assertEqual(len(stored), 10)
        self.assertTrue(all(h.startswith("$argon2id$") for h in stored))
        with open(os.path.join(self.server.data_dir, "db.sqlite"), "rb") as f:
            database = f.read()
        for code in codes:
            self.assertNotIn(code.encode(), database)
            self.assertNotIn(code.replace("-", "").encode(), database)
        response, html = yield self.browser.get("/account")
        self.assertIn("10 unused recovery codes", html)
        self.assertFalse(_CODE.findall(html))  # shown once
        # Keys lost: the passphrase, then a recovery code at the key step.
        stranger = self.new_browser()

        @inlineCallbacks
        def recover(code: str):
            response, html = yield stranger.get("/login")
            response, html = yield stranger.post("/login", data={
                "csrf_token": stranger.csrf(html), "username": "dana", "passphrase": self.account.passphrase})
            return (yield stranger.post("/login/recovery", data={"csrf_token": stranger.csrf(html),
                                                                 "recovery_code": code.lower()}))

        response, html = yield recover(codes[3])
        self.assertIn("Register a security key", html)  # sent to enrol a new key
        self.assertIn("You logged in with a recovery code (9 left)", html)
        self.assertEqual([(e["username"], e["count"]) for e in self.events("journalist.recovery_code.used")],
                         [("dana", 9)])
        stranger = self.new_browser()
        response, html = yield recover(codes[3])
        self.assertEqual(response.code, 403)
        self.assertIn(key_codes.RECOVERY_ERROR, html)
        self.assertIn("bad_recovery_code", [e.get("reason") for e in self.events("journalist.login.fail")])

    @inlineCallbacks
    def test_deaddrop_journalist_login_takes_the_api_code_once(self):
        response, html = yield self.browser.get("/account")
        response, html = yield self.browser.post("/account/api-code", data={"csrf_token": self.browser.csrf(html)})
        [code] = _CODE.findall(html)
        self.assertIn("It works once", html)
        work = short_tempdir("dd-ws-")
        password_file = os.path.join(work, "password")
        with open(password_file, "w") as f:
            f.write(self.account.passphrase + "\n")
        key_pem, cert_pem = self.client

        def run(*command: str, code: str):
            argv = ["--url", self.server.journalist_url, "--ca", self.server.server_cert, "--cert", cert_pem,
                    "--key", key_pem, "--username", "dana", "--password-file", password_file, "--totp", code,
                    "--session-file", os.path.join(work, "session.json"), *command]
            out = io.StringIO()
            return ws_cli.run(reactor, ws_cli.build_parser().parse_args(argv), out=out).addCallback(
                lambda status: (status, out.getvalue()))

        status, out = yield run("login", code=code)
        self.assertEqual(status, 0)
        self.assertIn("logged in as dana", out)
        status, out = yield run("sources", code="000000")  # the cached token, no code needed
        self.assertEqual(status, 0)
        with self.assertRaises(ws_cli.ApiError) as refused:
            yield run("login", code=code)  # once only
        self.assertEqual(refused.exception.status, 403)
        self.assertEqual([e["event"] for e in security_events(self.server) if e["event"].startswith("journalist.api")],
                         ["journalist.api_code.issued", "journalist.api_code.used"])
