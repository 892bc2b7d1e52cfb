"""``deaddrop-admin journalist add NAME --hotp-secret HEX`` and ``reset-2fa --hotp-secret``
against a running server: the YubiKey's codes log in on the web and the API (issue 30, item 3)."""
from __future__ import annotations

import json

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.second_factor import hotp
from deaddrop.web.journalist import pages
from tests._support import (
    ApiClient, JournalistAccount, JournalistBrowser, TotpDevice, issue_client_cert, security_events, short_tempdir,
    start_journalist_server,
)
from tests.integration.test_admin_cli import FAST, run_cli
from tests.test_hotp import RFC4226_CODES, RFC4226_SECRET


class HotpAccountsTests(unittest.TestCase):
    timeout = 90

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self, data_dir=short_tempdir())

    def cli(self, *argv):
        return deferToThread(run_cli, *argv, "--data-dir", self.server.data_dir)

    @inlineCallbacks
    def test_a_yubikey_account_logs_in_with_its_codes_once_each(self):
        code, out, err = yield self.cli("journalist", "add", "yuki", "--hotp-secret",
                                        " ".join(RFC4226_SECRET.hex()[i:i + 4] for i in range(0, 40, 4)), *FAST)
        self.assertEqual(code, 0, err)
        self.assertIn("the YubiKey programmed with that HOTP secret", out)
        self.assertNotIn("otpauth", out)
        code, out, err = yield self.cli("journalist", "reset-password", "yuki", "--json", *FAST)
        passphrase = json.loads(out)["passphrase"]
        account = JournalistAccount("yuki", passphrase, "", "", False)
        client = issue_client_cert(self.server, "yuki")
        browser = JournalistBrowser(self.server, client)
        self.addCleanup(browser.close)
        response, html = yield browser.log_in(account, code=RFC4226_CODES[0])
        self.assertIn("<h1>Sources</h1>", html)
        yield browser.post("/logout", data={"csrf_token": browser.csrf(html)})
        response, html = yield browser.log_in(account, code=RFC4226_CODES[0])
        self.assertEqual(response.code, 403)
        self.assertIn(pages.REUSED_CODE_ERROR, html)
        # Three presses the server never saw: the code after them still logs in (resynchronised).
        response, html = yield browser.log_in(account, code=RFC4226_CODES[4])
        self.assertIn("<h1>Sources</h1>", html)
        # The API takes the next code, as it takes a TOTP code.
        api = ApiClient(self.server, client)
        self.addCleanup(api.close)
        status, data = yield api.json("POST", "/api/v1/token", {
            "username": "yuki", "passphrase": passphrase, "one_time_code": RFC4226_CODES[5]})
        self.assertEqual(status, 200, data)
        status, data = yield api.json("POST", "/api/v1/token", {
            "username": "yuki", "passphrase": passphrase, "one_time_code": RFC4226_CODES[5]})
        self.assertEqual(status, 403)
        self.assertEqual([e["event"] for e in security_events(self.server) if "hotp" in e["event"]],
                         ["journalist.hotp.reused", "journalist.hotp.reused"])

    @inlineCallbacks
    def test_a_yubikey_far_ahead_is_asked_for_its_next_code_by_the_page_and_the_api(self):
        code, out, err = yield self.cli("journalist", "add", "yuki", "--hotp-secret", RFC4226_SECRET.hex(), "--json",
                                        *FAST)
        self.assertEqual(code, 0, err)
        account = JournalistAccount("yuki", json.loads(out)["passphrase"], "", "", False)
        client = issue_client_cert(self.server, "yuki")
        browser = JournalistBrowser(self.server, client)
        self.addCleanup(browser.close)
        # Four presses the server never saw: the form asks for the next code, without a script.
        response, html = yield browser.log_in(account, code=RFC4226_CODES[4])
        self.assertEqual(response.code, 403)
        self.assertIn(pages.NEXT_CODE_PROMPT, html)
        self.assertIn('value="yuki"', html)
        self.assertNotIn("<script", html)
        response, html = yield browser.post("/login", data={
            "csrf_token": browser.csrf(html), "username": "yuki", "passphrase": account.passphrase,
            "one_time_code": RFC4226_CODES[5]})
        self.assertIn("<h1>Sources</h1>", html)
        # The API says the same to a client that sent a code far ahead (4 past 6), and takes the next one.
        api = ApiClient(self.server, client)
        self.addCleanup(api.close)
        body = {"username": "yuki", "passphrase": account.passphrase, "one_time_code": hotp.code(RFC4226_SECRET, 10)}
        status, data = yield api.json("POST", "/api/v1/token", body)
        self.assertEqual(status, 403)
        self.assertIn("the YubiKey is ahead of this server; within 5 minutes, send its next code", data["message"])
        body["one_time_code"] = hotp.code(RFC4226_SECRET, 11)
        status, data = yield api.json("POST", "/api/v1/token", body)
        self.assertEqual(status, 200, data)
        self.assertEqual([e["reason"] for e in security_events(self.server) if e["event"] == "journalist.login.fail"],
                         ["hotp_next_code", "hotp_next_code"])

    @inlineCallbacks
    def test_reset_2fa_moves_an_account_between_an_app_and_a_yubikey(self):
        code, out, err = yield self.cli("journalist", "add", "erin", "--json", *FAST)
        data = json.loads(out)
        account = JournalistAccount("erin", data["passphrase"], data["totp_secret"], data["uuid"], False)
        browser = JournalistBrowser(self.server, issue_client_cert(self.server, "erin"))
        self.addCleanup(browser.close)
        device = TotpDevice(self.server, account.totp_secret)
        code, out, err = yield self.cli("journalist", "reset-2fa", "erin", "--hotp-secret", RFC4226_SECRET.hex())
        self.assertEqual(code, 0, err)
        response, html = yield browser.log_in(account, device)
        self.assertEqual(response.code, 403)  # the app's codes no longer work
        response, html = yield browser.log_in(account, code=RFC4226_CODES[0])
        self.assertIn("<h1>Sources</h1>", html)
        code, out, err = yield self.cli("journalist", "reset-2fa", "erin", "--json")
        account.totp_secret = json.loads(out)["totp_secret"]
        response, html = yield browser.log_in(account, code=RFC4226_CODES[1])
        self.assertEqual(response.code, 403)  # nor the YubiKey's, once reset to an app
        response, html = yield browser.log_in(account, TotpDevice(self.server, account.totp_secret))
        self.assertIn("<h1>Sources</h1>", html)
