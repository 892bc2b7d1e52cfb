"""Whose accounts must log in with a security key (issue 30, item 2): ``deaddrop-admin settings
require-security-keys on|admins|off [--grace-days N]`` while the server runs; a grace period to
enrol; the last key of such an account cannot be removed; an admin's reset gives time again."""
from __future__ import annotations

import json
import re

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.web.journalist import pages
from tests._soft_key import SoftKey, enrol, log_in_with_key
from tests._support import (
    JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events, short_tempdir,
    start_journalist_server,
)
from tests.integration.test_admin_cli import run_cli


class KeyPolicyTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self, data_dir=short_tempdir())
        self.port = int(self.server.journalist_url.rsplit(":", 1)[1])
        self.clients: dict[str, tuple[str, str]] = {}

    def cli(self, *argv):
        return deferToThread(run_cli, "settings", "require-security-keys", *argv, "--data-dir", self.server.data_dir)

    def browser(self, name: str) -> JournalistBrowser:
        """A fresh browser (no cookie) with ``name``'s certificate."""
        if name not in self.clients:
            self.clients[name] = issue_client_cert(self.server, name)
        browser = JournalistBrowser(self.server, self.clients[name])
        self.addCleanup(browser.close)
        return browser

    @inlineCallbacks
    def test_required_keys_after_the_grace_period_and_admins_only(self):
        alice = yield add_journalist(self.server, "alice", admin=True)
        bob = yield add_journalist(self.server, "bob")
        apps = {"alice": TotpDevice(self.server, alice.totp_secret), "bob": TotpDevice(self.server, bob.totp_secret)}
        code, out, err = yield self.cli("--json")
        self.assertEqual(json.loads(out)["require_security_keys"], "off")
        code, out, err = yield self.cli("admins", "--grace-days", "0")
        self.assertEqual(code, 0, err)
        self.assertIn("required of administrator accounts", out)
        # alice (an admin) is past her grace period: her right code is refused; bob is not concerned.
        response, html = yield self.browser("alice").log_in(alice, apps["alice"])
        self.assertEqual(response.code, 403)
        self.assertIn(pages.GENERIC_LOGIN_ERROR, html)
        response, html = yield self.browser("bob").log_in(bob, apps["bob"])
        self.assertIn("<h1>Sources</h1>", html)
        self.assertNotIn("requires a security key", html)
        # Everyone, with a fortnight's grace from now on: bob logs in and is told by when.
        code, out, err = yield self.cli("on", "--grace-days", "14")
        response, html = yield self.browser("bob").log_in(bob, apps["bob"])
        self.assertIn("<h1>Sources</h1>", html)
        self.assertIn("Your newsroom requires a security key for this account", html)
        # (The grace period runs from when keys became required, for everyone: alice has 14 days too.)
        response, html = yield self.browser("alice").log_in(alice, apps["alice"])
        self.assertIn("Your newsroom requires a security key for this account", html)
        yield self.cli("on", "--grace-days", "0")
        response, html = yield self.browser("alice").log_in(alice, apps["alice"])
        self.assertEqual(response.code, 403)
        code, out, err = yield self.cli("off")
        response, html = yield self.browser("alice").log_in(alice, apps["alice"])
        self.assertIn("<h1>Sources</h1>", html)
        events = [e for e in security_events(self.server) if e["event"] == "admin.security_keys.required"]
        self.assertEqual([(e["kind"], e["count"]) for e in events], [("admins", 0), ("on", 14), ("on", 0), ("off", 0)])
        self.assertEqual([e.get("reason") for e in security_events(self.server) if e["event"] == "journalist.login.fail"],
                         ["keys_required", "keys_required"])

    @inlineCallbacks
    def test_the_last_key_of_an_account_that_must_have_one_stays_and_a_reset_gives_time_again(self):
        alice = yield add_journalist(self.server, "alice", admin=True)
        carol = yield add_journalist(self.server, "carol")
        yield self.cli("on", "--grace-days", "0")
        # carol was made before keys were required and never enrolled: an admin resets her
        # two-factor, which gives her a grace period of her own.
        response, html = yield self.browser("carol").log_in(carol, TotpDevice(self.server, carol.totp_secret))
        self.assertEqual(response.code, 403)
        yield self.cli("on", "--grace-days", "7")
        admin = self.browser("alice")
        code, out, err = yield deferToThread(run_cli, "journalist", "reset-2fa", "carol", "--json",
                                             "--data-dir", self.server.data_dir)
        carol.totp_secret = json.loads(out)["totp_secret"]
        browser = self.browser("carol")
        response, html = yield browser.log_in(carol, TotpDevice(self.server, carol.totp_secret))
        self.assertIn("register one on your Account page before", html)
        key = SoftKey(f"https://localhost:{self.port}")
        response, html = yield enrol(browser, self.port, key, "blue YubiKey")
        self.assertIn("Registered blue YubiKey", html)
        [key_id] = re.findall(r"/account/keys/(\d+)/remove", html)
        response, html = yield browser.post(f"/account/keys/{key_id}/remove", data={
            "csrf_token": browser.csrf(html), "confirm": "yes"})
        self.assertEqual(response.code, 400)
        self.assertIn("your newsroom requires one", html)
        self.assertIn("blue YubiKey", html)
        # With keys, carol logs in only with a key: her right code leads to the key step.
        yield browser.post("/logout", data={"csrf_token": browser.csrf(html)})
        response, html = yield browser.log_in(carol, TotpDevice(self.server, carol.totp_secret))
        self.assertIn("Touch your security key", html)
        response, html = yield log_in_with_key(browser, self.port, "carol", carol.passphrase, key)
        self.assertIn("<h1>Sources</h1>", html)
        # She loses the key: an admin resets her two-factor (after a confirmation page), the key
        # is forgotten, and a new app secret gives her a week to enrol a new key.
        response, html = yield admin.log_in(alice, TotpDevice(self.server, alice.totp_secret))
        self.assertIn("<h1>Sources</h1>", html)
        response, html = yield admin.get("/admin/users")
        self.assertRegex(html, r"carol</td><td[^>]*>1 security key</td>")
        response, html = yield admin.get(f"/admin/users/{carol.uuid}/reset-2fa")
        self.assertIn("security keys no longer log them in", html)
        response, html = yield admin.post(f"/admin/users/{carol.uuid}/reset-2fa", data={
            "csrf_token": admin.csrf(html), "confirm": "yes"})
        secret = re.search(r'id="totp-secret"[^>]*>([A-Z2-7]+)<', html).group(1)
        self.assertEqual([e["target"] for e in security_events(self.server) if e["event"] == "admin.journalist.keys_reset"],
                         ["carol"])
        response, html = yield log_in_with_key(self.browser("carol"), self.port, "carol", carol.passphrase, key)
        self.assertEqual(response.code, 403)  # no key step any more: the code field was empty
        response, html = yield self.browser("carol").log_in(carol, TotpDevice(self.server, secret))
        self.assertIn("register one on your Account page before", html)
