"""The journalist interface over real mutual TLS: logins bound to the certificate's name
(issue 10), and the first-day items of issue 13 (reused one-time code, "Delete selected"
confirmation, the client-certificate line when an admin adds a user)."""
from __future__ import annotations

import os
import re

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.web.journalist import pages
from tests._support import (
    ApiClient, Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events,
    start_journalist_server,
)

_SUBMISSION = re.compile(r'name="submission" value="([0-9a-f-]{36})"')


class FirstDayTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.alice = yield add_journalist(self.server, "alice", admin=True)
        self.bob = yield add_journalist(self.server, "bob")
        self.certs = {name: issue_client_cert(self.server, name) for name in ("alice", "bob")}
        self.devices = {a.username: TotpDevice(self.server, a.totp_secret) for a in (self.alice, self.bob)}

    def browser(self, cert_name: str) -> JournalistBrowser:
        b = JournalistBrowser(self.server, self.certs[cert_name])
        self.addCleanup(b.close)
        return b

    def failures(self) -> list[tuple]:
        return [(e.get("username"), e.get("reason")) for e in security_events(self.server)
                if e["event"] == "journalist.login.fail"]

    # -- a login is accepted only over a certificate issued for that username ----------------

    @inlineCallbacks
    def test_web_login_only_over_the_accounts_own_certificate(self):
        code = self.devices["bob"].code()
        response, html = yield self.browser("alice").log_in(self.bob, code=code)
        self.assertEqual(response.code, 403)
        self.assertIn(pages.CERTIFICATE_MISMATCH_ERROR, html)
        self.assertNotIn("<h1>Sources</h1>", html)
        self.assertEqual(self.failures(), [("bob", "certificate_mismatch")])
        # Refused before any factor was checked: the same code still works over bob's certificate.
        response, html = yield self.browser("bob").log_in(self.bob, code=code)
        self.assertIn("<h1>Sources</h1>", html)

    @inlineCallbacks
    def test_api_token_only_over_the_accounts_own_certificate(self):
        code = self.devices["bob"].code()
        body = {"username": "bob", "passphrase": self.bob.passphrase, "one_time_code": code}
        over_alice = ApiClient(self.server, self.certs["alice"])
        self.addCleanup(over_alice.close)
        status, data = yield over_alice.json("POST", "/api/v1/token", body)
        self.assertEqual(status, 403)
        self.assertNotIn("token", data)
        self.assertEqual(self.failures(), [("bob", "certificate_mismatch")])
        over_bob = ApiClient(self.server, self.certs["bob"])
        self.addCleanup(over_bob.close)
        status, data = yield over_bob.json("POST", "/api/v1/token", body)
        self.assertEqual(status, 200)
        self.assertIn("token", data)

    @inlineCallbacks
    def test_a_session_or_token_counts_only_over_its_own_certificate(self):
        bob_web = self.browser("bob")
        yield bob_web.log_in(self.bob, self.devices["bob"])
        response, html = yield bob_web.get("/sources", follow=False)
        self.assertEqual(response.code, 200)
        # Bob's cookie, presented over Alice's certificate, is no login.
        over_alice = self.browser("alice")
        for cookie in bob_web.cookies:
            over_alice.cookies.set_cookie(cookie)
        response, html = yield over_alice.get("/sources", follow=False)
        self.assertEqual((response.code, response.headers.getRawHeaders(b"location")), (303, [b"/login"]))
        bob_api = ApiClient(self.server, self.certs["bob"])
        self.addCleanup(bob_api.close)
        yield bob_api.log_in(self.bob, self.devices["bob"])
        stolen = ApiClient(self.server, self.certs["alice"])
        self.addCleanup(stolen.close)
        stolen.token = bob_api.token
        status, _ = yield stolen.json("GET", "/api/v1/sources")
        self.assertEqual(status, 403)
        status, _ = yield bob_api.json("GET", "/api/v1/sources")
        self.assertEqual(status, 200)

    # -- a reused one-time code ---------------------------------------------------------------

    @inlineCallbacks
    def test_reused_code_is_named_only_once_the_passphrase_is_right(self):
        code = self.devices["alice"].code()
        b = self.browser("alice")
        response, html = yield b.log_in(self.alice, code=code)
        self.assertIn("<h1>Sources</h1>", html)
        other = self.browser("alice")
        response, html = yield other.log_in(self.alice, code=code, passphrase="wrong " + self.alice.passphrase)
        self.assertEqual(response.code, 403)
        self.assertIn(pages.GENERIC_LOGIN_ERROR, html)
        self.assertNotIn(pages.REUSED_CODE_ERROR, html)
        response, html = yield other.log_in(self.alice, code=code)
        self.assertEqual(response.code, 403)
        self.assertIn(pages.REUSED_CODE_ERROR, html)
        self.assertNotIn(pages.GENERIC_LOGIN_ERROR, html)
        self.assertEqual(self.failures(), [("alice", "bad_passphrase"), ("alice", "totp_reused")])

    # -- "Delete selected" asks first ---------------------------------------------------------

    @inlineCallbacks
    def test_delete_selected_lists_the_files_and_deletes_only_when_confirmed(self):
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("first message")
        yield source.submit("second message", [("notes.txt", b"NOTES " * 50)])
        b = self.browser("alice")
        yield b.log_in(self.alice, self.devices["alice"])
        response, html = yield b.get("/sources")
        path = re.search(r'href="(/sources/[0-9a-f-]{36})"', html).group(1)
        response, html = yield b.get(path)
        chosen = _SUBMISSION.findall(html)
        names = re.findall(r'>(\d-[a-z]+_[a-z]+_[a-z]+-(?:msg|doc\.gz)\.gpg)<', html)
        self.assertEqual(len(chosen), 3)
        response, html = yield b.post(f"{path}/selected", data={
            "csrf_token": b.csrf(html), "action": "delete", "submission": chosen[1:]})
        self.assertEqual(response.code, 200)
        self.assertIn("Delete 2 files of", html)
        for name in names[1:]:
            self.assertIn(name, html)
        self.assertNotIn(names[0], html)
        self.assertEqual(sorted(_SUBMISSION.findall(html)), sorted(chosen[1:]))
        self.assertIn('value="delete-confirmed"', html)
        # Nothing is gone yet.
        response, page = yield b.get(path)
        self.assertEqual(_SUBMISSION.findall(page), chosen)
        response, html = yield b.post(f"{path}/selected", data={
            "csrf_token": b.csrf(html), "action": "delete-confirmed", "submission": chosen[1:]})
        self.assertIn("Deleted 2 submissions.", html)
        self.assertEqual(_SUBMISSION.findall(html), chosen[:1])

    # -- adding a user says a certificate is needed too -----------------------------------------

    @inlineCallbacks
    def test_adding_a_user_names_the_cert_issue_command(self):
        b = self.browser("alice")
        yield b.log_in(self.alice, self.devices["alice"])
        response, html = yield b.get("/admin/users")
        response, html = yield b.post("/admin/users", data={"csrf_token": b.csrf(html), "username": "carol"})
        self.assertEqual(response.code, 200, html[:500])
        line = re.search(r'<code id="cert-command">([^<]+)</code>', html).group(1)
        self.assertEqual(line, f"deaddrop-admin cert issue carol --data-dir {self.server.data_dir} --out carol.p12")
        self.assertIn("also needs a client certificate", html)
