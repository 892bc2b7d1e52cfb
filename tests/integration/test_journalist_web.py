"""The journalist web interface end to end: the real server, mutual TLS on a real port, real gpg.

Sources are driven through the source listener with ``Browser``; journalists through the
journalist listener with client certificates from the data dir's demo CA.
"""
from __future__ import annotations

import io
import os
import re
import sqlite3
import zipfile

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom.settings import InstanceSettings

from deaddrop.transport import ca
from deaddrop.web.journalist import pages
from tests._support import (
    Browser, JournalistBrowser, LogCapture, TotpDevice, add_journalist, issue_client_cert, client_pems, security_events,
    start_journalist_server, start_server, test_svs, wait_until,
)

_SOURCE_LINK = re.compile(r'href="/sources/([0-9a-f-]{36})"')
_SUBMISSION_LINK = re.compile(r'href="(/sources/[0-9a-f-]{36}/submissions/[0-9a-f-]{36})/fetch"')
# The source page sends the browser on to a download it asked for (issue 22).
_DOWNLOAD_REFRESH = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)"')


def db_rows(server, sql, *args):
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


class JournalistWebTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        self.logs = LogCapture().start()
        self.addCleanup(self.logs.stop)
        self.server = yield start_journalist_server(self)
        self.cert = issue_client_cert(self.server, "alice")
        self.admin = yield add_journalist(self.server, "alice", admin=True)
        self.reporter = yield add_journalist(self.server, "bob")

    def browser(self, cert=True) -> JournalistBrowser:
        b = JournalistBrowser(self.server, self.cert if cert is True else cert)
        self.addCleanup(b.close)
        return b

    def source_browser(self) -> Browser:
        b = Browser(self.server.source_url)
        self.addCleanup(b.close)
        return b

    def device(self, account) -> TotpDevice:
        """One authenticator per account, as in life: codes are never reused by accident."""
        devices = self.__dict__.setdefault("_devices", {})
        if account.username not in devices:
            devices[account.username] = TotpDevice(self.server, account.totp_secret)
        return devices[account.username]

    def cert_for(self, username: str):
        """Each journalist's own certificate: a login is accepted only over it."""
        certs = self.__dict__.setdefault("_certs", {"alice": self.cert})
        if username not in certs:
            certs[username] = issue_client_cert(self.server, username)
        return certs[username]

    @inlineCallbacks
    def logged_in(self, account=None):
        account = account or self.admin
        b = self.browser(self.cert_for(account.username))
        response, html = yield b.log_in(account, self.device(account))
        self.assertEqual(response.code, 200, html[:300])
        self.assertIn("<h1>Sources</h1>", html)
        return b

    @inlineCallbacks
    def new_source(self, message="hello from a source", files=()):
        source = self.source_browser()
        codename = yield source.create_source()
        response, html = yield source.submit(message, list(files))
        self.assertEqual(response.code, 200, html[:300])
        return source, codename

    def secrets_of_sources(self):
        found = []
        for fid, designation in db_rows(self.server, "SELECT filesystem_id, designation FROM sources"):
            found += [fid, designation, designation.replace(" ", "_")]
        return found

    # -- TLS ---------------------------------------------------------------------------------

    @inlineCallbacks
    def test_client_certificates_through_the_full_server(self):
        # Valid certificate: the login page.
        response, html = yield self.browser().get("/login")
        self.assertEqual(response.code, 200)
        self.assertIn("Journalist log in", html)
        # No certificate, or one from another CA: no HTTP at all.
        other_ca = os.path.join(self.server.data_dir, "other-ca")
        ca.init_ca(other_ca)
        r = ca.issue_client_cert(other_ca, "mallory", os.path.join(other_ca, "mallory.p12"), b"pw")
        for client, reason in [(None, "no_certificate"), (client_pems(r["p12"], b"pw"), "unknown_ca")]:
            before = len([e for e in security_events(self.server) if e["event"] == "tls.client_cert.refused"])
            with self.assertRaises(Exception):
                yield self.browser(client).get("/login")
            yield wait_until(lambda: len([e for e in security_events(self.server)
                                          if e["event"] == "tls.client_cert.refused"]) > before)
            self.assertEqual([e for e in security_events(self.server)
                              if e["event"] == "tls.client_cert.refused"][-1]["reason"], reason)
        # Revoked: the server picks the new CRL up on its own, without a restart.
        ca.revoke(self.server.ca_dir, "alice")
        ca.write_crl(self.server.ca_dir, os.path.join(self.server.ca_dir, "crl.pem"))
        yield wait_until(lambda: any(e["event"] == "crl.reloaded" for e in security_events(self.server)))
        with self.assertRaises(Exception):
            yield self.browser().get("/login")
        yield wait_until(lambda: any(e.get("reason") == "revoked" for e in security_events(self.server)))
        # A colleague's certificate still works.
        response, html = yield self.browser(issue_client_cert(self.server, "carol")).get("/login")
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_interfaces_are_separate(self):
        b = self.browser()
        for path in ["/generate", "/lookup", "/submit", "/metadata"]:
            response, _ = yield b.get(path, follow=False)
            self.assertEqual(response.code, 404, path)
        source = self.source_browser()
        for path in ["/sources", "/admin/users", "/api/v1/sources", "/api/v1/token", "/account"]:
            response, _ = yield source.get(path, follow=False)
            self.assertEqual(response.code, 404, path)
        response, _ = yield b.get("/login")
        self.assertIn(b"dd_journalist", b"".join(response.headers.getRawHeaders(b"set-cookie")))
        for header, value in [(b"content-security-policy", b"default-src 'none'"), (b"x-frame-options", b"DENY"),
                              (b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer")]:
            self.assertIn(value, response.headers.getRawHeaders(header)[0])
        cookie = [c for c in b.cookies if c.name == "dd_journalist"][0]
        self.assertTrue(cookie.secure)
        self.assertTrue(cookie.has_nonstandard_attr("HttpOnly") or cookie.has_nonstandard_attr("httponly"))

    # -- logging in --------------------------------------------------------------------------

    @inlineCallbacks
    def test_login_needs_all_three_factors(self):
        device = TotpDevice(self.server, self.admin.totp_secret)
        b = self.browser()
        for kwargs in [dict(passphrase="wrong " + self.admin.passphrase), dict(code="000000"), dict(code=""),
                       dict(passphrase="")]:
            response, html = yield b.log_in(self.admin, device, **kwargs)
            self.assertEqual(response.code, 403, kwargs)
            self.assertIn(pages.GENERIC_LOGIN_ERROR, html)
            response, html = yield b.get("/sources")
            self.assertIn("Journalist log in", html)
        response, html = yield b.log_in(self.admin, device)
        self.assertIn("<h1>Sources</h1>", html)
        reasons = [e["reason"] for e in security_events(self.server) if e["event"] == "journalist.login.fail"]
        self.assertEqual(reasons, ["bad_passphrase", "bad_totp", "bad_totp", "bad_passphrase"])
        self.assertEqual([e["username"] for e in security_events(self.server)
                          if e["event"] == "journalist.login.ok"], ["alice"])

    @inlineCallbacks
    def test_a_code_is_never_accepted_twice(self):
        code = TotpDevice(self.server, self.admin.totp_secret).code()
        first = self.browser()
        response, html = yield first.log_in(self.admin, code=code)
        self.assertIn("<h1>Sources</h1>", html)
        second = self.browser()
        response, html = yield second.log_in(self.admin, code=code)
        self.assertEqual(response.code, 403)
        # Issue 13: with the right passphrase, the page says what happened.
        self.assertIn(pages.REUSED_CODE_ERROR, html)
        self.assertEqual([e["username"] for e in security_events(self.server) if e["event"] == "journalist.totp.reused"],
                         ["alice"])

    @inlineCallbacks
    def test_five_failures_a_minute_throttle_the_account_only(self):
        b = self.browser()
        for _ in range(5):
            response, html = yield b.log_in(self.admin, passphrase="nope")
            self.assertEqual(response.code, 403)
        # Now even the right credentials are refused, without being checked.
        response, html = yield b.log_in(self.admin)
        self.assertEqual(response.code, 429)
        self.assertIn(pages.THROTTLED_LOGIN_ERROR, html)
        self.assertEqual(len([e for e in security_events(self.server) if e["event"] == "journalist.login.throttled"]), 1)
        # Another account is not affected.
        yield self.logged_in(self.reporter)
        # After a minute the account may try again.
        throttle = self.server.service.accounts.throttle
        real = throttle._clock
        throttle._clock = lambda: real() + 61
        yield self.logged_in(self.admin)

    @inlineCallbacks
    def test_forms_need_the_csrf_token(self):
        b = yield self.logged_in()
        response, html = yield b.post("/admin/users", data={"username": "eve", "csrf_token": "forged"})
        self.assertEqual(response.code, 403)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM journalists WHERE username = 'eve'"), [(0,)])

    # -- admin -------------------------------------------------------------------------------

    @inlineCallbacks
    def test_non_admins_are_refused_on_admin_pages(self):
        b = yield self.logged_in(self.reporter)
        response, html = yield b.get("/sources")
        self.assertNotIn('href="/admin/users"', html)
        csrf = b.csrf(html)
        for method, path in [("get", "/admin/users"), ("get", "/admin/settings"), ("post", "/admin/users"),
                             ("post", "/admin/settings"), ("post", f"/admin/users/{self.admin.uuid}/delete"),
                             ("post", f"/admin/users/{self.admin.uuid}/reset-2fa")]:
            if method == "get":
                response, html = yield b.get(path)
            else:
                response, html = yield b.post(path, data={"csrf_token": csrf, "username": "x",
                                                          "organisation_name": "x", "max_upload_mb": "1"})
            self.assertEqual(response.code, 403, path)
        self.assertEqual(len(db_rows(self.server, "SELECT id FROM journalists")), 2)

    @inlineCallbacks
    def test_admin_adds_resets_and_deletes_users_but_not_itself(self):
        b = yield self.logged_in()
        response, html = yield b.get("/admin/users")
        response, html = yield b.post("/admin/users", data={"csrf_token": b.csrf(html), "username": "carol"})
        self.assertEqual(response.code, 200)
        passphrase = re.search(r'id="passphrase">([^<]+)<', html).group(1)
        secret = re.search(r'id="totp-secret">([A-Z2-7]+)<', html).group(1)
        self.assertEqual(len(passphrase.split()), 7)
        self.assertIn("<svg", html)
        self.assertIn("otpauth://totp/", html)
        from tests._support import JournalistAccount

        carol = JournalistAccount("carol", passphrase, secret, "", False)
        carol_browser = yield self.logged_in(carol)
        # A duplicate name is refused.
        response, html = yield b.get("/admin/users")
        response, html = yield b.post("/admin/users", data={"csrf_token": b.csrf(html), "username": "CAROL"})
        self.assertEqual(response.code, 400)
        self.assertIn("already exists", html)
        # Resetting carol's passphrase logs her out.
        carol_uuid = db_rows(self.server, "SELECT uuid FROM journalists WHERE username = 'carol'")[0][0]
        response, html = yield b.post(f"/admin/users/{carol_uuid}/reset-password",
                                      data={"csrf_token": b.csrf(html), "confirm": "yes"})
        new_passphrase = re.search(r'id="passphrase">([^<]+)<', html).group(1)
        self.assertNotEqual(new_passphrase, passphrase)
        response, html = yield carol_browser.get("/sources")
        self.assertIn("Journalist log in", html)
        carol.passphrase = new_passphrase
        carol_browser = yield self.logged_in(carol)
        # The admin cannot delete itself...
        response, html = yield b.get("/admin/users")
        response, html = yield b.post(f"/admin/users/{self.admin.uuid}/delete",
                                      data={"csrf_token": b.csrf(html), "confirm": "yes"})
        self.assertEqual(response.code, 400)
        self.assertIn("You cannot delete your own account", html)
        # ...but can delete carol, whose session ends at once.
        response, html = yield b.post(f"/admin/users/{carol_uuid}/delete",
                                      data={"csrf_token": b.csrf(html), "confirm": "yes"})
        self.assertIn("Deleted carol", html)
        response, html = yield carol_browser.get("/sources")
        self.assertIn("Journalist log in", html)
        events = [(e["event"], e.get("target")) for e in security_events(self.server) if e["event"].startswith("admin.")]
        self.assertEqual(events, [("admin.journalist.added", "carol"), ("admin.journalist.password_reset", "carol"),
                                  ("admin.journalist.deleted", "carol")])

    @inlineCallbacks
    def test_instance_settings_reach_the_source_side_and_the_database(self):
        b = yield self.logged_in()
        response, html = yield b.get("/admin/settings")
        response, html = yield b.post("/admin/settings", data={
            "csrf_token": b.csrf(html), "organisation_name": "The Daily Planet", "max_upload_mb": "7",
            "refuse_uploads": "1"})
        self.assertIn("Settings saved", html)
        source = self.source_browser()
        response, body = yield source.get("/metadata")
        meta = __import__("json").loads(body)
        self.assertEqual((meta["organization_name"], meta["allow_document_uploads"]), ("The Daily Planet", False))
        yield source.create_source()
        response, html = yield source.get("/lookup")
        self.assertNotIn('type="file"', html)
        stored = dict(db_rows(self.server, "SELECT key, value FROM settings"))
        self.assertEqual({k: v for k, v in stored.items() if k in InstanceSettings.KEYS},
                         {"organisation_name": "The Daily Planet", "max_upload_size": "7000000",
                          "allow_uploads": "0", "retention_days": "0"})
        response, html = yield b.get("/admin/settings")
        response, html = yield b.post("/admin/settings", data={
            "csrf_token": b.csrf(html), "organisation_name": "", "max_upload_mb": "0"})
        self.assertEqual(response.code, 400)

    @inlineCallbacks
    def test_saving_the_settings_changes_only_what_was_changed_and_sizes_round_trip(self):
        """Issue 17 §5: saving only the retention field once turned 200,000 bytes into 1 MiB."""
        import re

        self.server.service.settings.max_upload_size = 200_000
        b = yield self.logged_in()
        response, html = yield b.get("/admin/settings")
        self.assertIn('value="0.2"', html)  # the sources' unit (they read "0.2 MB"), exactly

        def form(html: str, **changes: str) -> dict:
            fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', html))
            fields = {k: v for k, v in fields.items() if k != "refuse_uploads"}
            fields.update(changes)
            return fields

        response, html = yield b.post("/admin/settings", data=form(html, retention_days="30"))
        self.assertIn("Settings saved", html)
        settings = self.server.service.settings
        self.assertEqual((settings.max_upload_size, settings.retention_days, settings.allow_uploads),
                         (200_000, 30, True))
        # Exact sizes round-trip; another admin's change to a field this form did not touch stays.
        response, html = yield b.get("/admin/settings")
        settings.organisation_name = "Changed meanwhile"
        response, html = yield b.post("/admin/settings", data=form(html, max_upload_mb="1.234567"))
        self.assertEqual((settings.max_upload_size, settings.organisation_name), (1_234_567, "Changed meanwhile"))
        response, html = yield b.get("/admin/settings")
        self.assertIn('value="1.234567"', html)
        for bad in ["0.001", "1.2345678", "1,5", "-1", "100001", "abc"]:
            response, html = yield b.post("/admin/settings", data=form(html, max_upload_mb=bad))
            self.assertEqual(response.code, 400, bad)
            self.assertIn("number of MB (1 MB = 1,000,000 bytes", html)
        self.assertEqual(settings.max_upload_size, 1_234_567)

    @inlineCallbacks
    def test_source_texts_and_logo_per_language_from_the_settings(self):
        """Issue 11: admins write what sources see, per language, and upload a checked PNG logo."""
        from deaddrop.newsroom import png
        from tests._support import multipart_body

        b = yield self.logged_in()
        response, html = yield b.get("/admin/settings")
        self.assertIn('href="/admin/source-texts"', html)
        response, html = yield b.get("/admin/source-texts")
        response, html = yield b.post("/admin/source-texts", data={
            "csrf_token": b.csrf(html), "language": "es", "welcome": "Bienvenida WELCOME-ES-4c1",
            "instructions": "Instrucciones INSTR-ES-9d2"})
        self.assertIn("Texts for Español saved", html)

        def upload(content: bytes, remove: bool = False):
            fields = [("csrf_token", b.csrf()), ("language", "en")] + ([("remove", "1")] if remove else [])
            body, content_type = multipart_body(fields, [("logo.png", content)], file_field="logo")
            return b.post("/admin/source-logo", data=body, headers={"Content-Type": content_type})

        for bad, why in [(b"GIF89a" + b"\0" * 100, "not a PNG image"), (png.tiny_png()[:-8], "cut short"),
                         (png.tiny_png(2000, 1), "at most 1024 x 1024")]:
            response, html = yield upload(bad)
            self.assertEqual(response.code, 400, why)
            self.assertIn(why, html)
        # Too large, within the body's limit or far beyond it (answered at its first file byte):
        # the page says what is accepted and has the forms to try again, never a dead end.
        for size in (60_000, 3_000_000):
            response, html = yield upload(b"\x89PNG" + b"x" * size)
            self.assertEqual(response.code, 413, size)
            self.assertIn("The logo was not saved: that file is larger than 50,000 bytes, the most a logo may have. "
                          "Choose a PNG image of at most 50,000 bytes and 1024 x 1024 pixels", html)
            self.assertIn('action="/admin/source-logo"', html)  # upload again, right there
            self.assertIn("<h1>What sources see</h1>", html)
        response, html = yield b.get("/admin/source-texts")
        response, html = yield upload(png.tiny_png(8, 8))
        self.assertIn("Logo for English saved", html)
        source = self.source_browser()
        response, page = yield source.get("/", headers={"Accept-Language": "es"})
        self.assertIn("WELCOME-ES-4c1", page)
        url = __import__("re").search(r'<img src="(/logo/[0-9a-f]+\.png)"', page).group(1)
        response, served = yield source.get(url)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"image/png"])
        self.assertTrue(served.startswith("\ufffdPNG"))
        yield source.create_source()
        response, page = yield source.get("/lookup", headers={"Accept-Language": "es"})
        self.assertIn("INSTR-ES-9d2", page)
        response, page = yield source.get("/lookup", headers={"Accept-Language": "fr"})
        self.assertNotIn("INSTR-ES-9d2", page)  # no French text, no English one: the built-in page
        stored = dict(db_rows(self.server, "SELECT key, value FROM settings"))
        self.assertEqual(stored["source.welcome.es"], "Bienvenida WELCOME-ES-4c1")
        self.assertIn("source.logo.en", stored)
        response, html = yield upload(b"", remove=True)
        self.assertIn("Logo for English removed", html)
        response, page = yield source.get("/")
        self.assertNotIn("<img", page)

    @inlineCallbacks
    def test_new_passphrase_ends_other_sessions_and_tokens(self):
        device = self.device(self.admin)
        here = self.browser()
        yield here.log_in(self.admin, device)
        elsewhere = self.browser()
        yield elsewhere.log_in(self.admin, device)
        from tests._support import ApiClient

        api = ApiClient(self.server, self.cert)
        self.addCleanup(api.close)
        yield api.log_in(self.admin, device)
        response, html = yield here.get("/account")
        response, html = yield here.post("/account/new-passphrase", data={
            "csrf_token": here.csrf(html), "passphrase": self.admin.passphrase, "one_time_code": device.code()})
        self.assertEqual(response.code, 200, html[:300])
        new = re.search(r'id="new-passphrase">([^<]+)<', html).group(1)
        response, html = yield here.get("/sources")
        self.assertIn("<h1>Sources</h1>", html)  # this session goes on
        response, html = yield elsewhere.get("/sources")
        self.assertIn("Journalist log in", html)  # that one ended
        status, data = yield api.json("GET", "/api/v1/user")
        self.assertEqual(status, 403)
        self.admin.passphrase = new
        yield self.logged_in(self.admin)

    # -- the newsroom's work -----------------------------------------------------------------

    @inlineCallbacks
    def test_a_two_word_designation_made_before_works_in_the_list_the_filter_and_zips(self):
        """Issue 17 §4: new designations have three words, and one made before keeps working."""
        from deaddrop.newsroom import codenames
        from deaddrop.svs._names import parse_submission_name

        drawn = codenames.generate_designation
        codenames.generate_designation = lambda: "amber lantern"
        try:
            yield self.new_source("LEGACY-MARKER")
        finally:
            codenames.generate_designation = drawn
        yield self.new_source("NEW-MARKER")
        designations = sorted(d for (d,) in db_rows(self.server, "SELECT designation FROM sources"))
        self.assertEqual(len(designations), 2)
        self.assertEqual(designations[0], "amber lantern")
        self.assertEqual(len(designations[1].split()), 3)
        b = yield self.logged_in()
        response, html = yield b.get("/sources?q=AMBER+lantern")
        self.assertEqual(len(_SOURCE_LINK.findall(html)), 1)
        self.assertIn("amber lantern</a>", html)
        source_uuid = _SOURCE_LINK.search(html).group(1)
        response, html = yield b.get(f"/sources/{source_uuid}")
        response, html = yield b.post(f"/sources/{source_uuid}/download-unread", data={"csrf_token": b.csrf(html)})
        response, body = yield b.get_bytes(_DOWNLOAD_REFRESH.search(html).group(1))
        with zipfile.ZipFile(io.BytesIO(body)) as zf:
            self.assertEqual(zf.namelist(), ["amber_lantern/1-amber_lantern-msg.gpg"])
            self.assertEqual(test_svs().decrypt(zf.read(zf.namelist()[0])), b"LEGACY-MARKER")
        self.assertEqual(parse_submission_name(zf.namelist()[0]).designation, "amber_lantern")

    @inlineCallbacks
    def test_submission_download_zip_and_reply_round_trip(self):
        marker = "MESSAGE-MARKER-51c2"
        source, codename = yield self.new_source(marker)
        pending_source = self.source_browser()
        yield pending_source.create_source()  # never submits: journalists never see it
        (designation,) = db_rows(self.server, "SELECT designation FROM sources WHERE pending = 0")[0]
        b = yield self.logged_in()
        response, html = yield b.get("/sources")
        self.assertEqual(len(_SOURCE_LINK.findall(html)), 1)
        self.assertRegex(html, re.escape(designation) + r"</a></td><td><span class=\"badge\">1 unread</span>")
        source_uuid = _SOURCE_LINK.search(html).group(1)
        response, html = yield b.get(f"/sources/{source_uuid}")
        [link] = _SUBMISSION_LINK.findall(html)
        response, body = yield b.get_bytes(link + "/download")
        self.assertEqual(response.code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"application/pgp-encrypted"])
        self.assertEqual(test_svs().decrypt(body).decode(), marker)
        response, html = yield b.get("/sources")
        self.assertIn("0 unread", html)

        # Two more, then "download all unread" zips exactly those and marks them read.
        yield source.submit("second message", [("notes.txt", b"NOTES-MARKER " * 100)])
        response, html = yield b.get("/sources")
        self.assertIn("2 unread", html)
        response, html = yield b.get(f"/sources/{source_uuid}")
        response, html = yield b.post(f"/sources/{source_uuid}/download-unread", data={"csrf_token": b.csrf(html)})
        response, body = yield b.get_bytes(_DOWNLOAD_REFRESH.search(html).group(1))
        self.assertEqual(response.code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"application/zip"])
        folder = designation.replace(" ", "_")
        with zipfile.ZipFile(io.BytesIO(body)) as zf:
            names = zf.namelist()
            self.assertEqual(sorted(names), [f"{folder}/2-{folder}-msg.gpg", f"{folder}/3-{folder}-doc.gz.gpg"])
            self.assertTrue(all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist()))
            self.assertEqual(test_svs().decrypt(zf.read(f"{folder}/2-{folder}-msg.gpg")), b"second message")
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "tmp")), [])
        response, html = yield b.get("/sources")
        self.assertIn("0 unread", html)
        # "Download selected" zips just the chosen ones, read or not.
        response, html = yield b.get(f"/sources/{source_uuid}")
        first = re.search(r'name="submission" value="([0-9a-f-]{36})"', html).group(1)
        response, html = yield b.post(f"/sources/{source_uuid}/selected", data={
            "csrf_token": b.csrf(html), "action": "download", "submission": first})
        response, body = yield b.get_bytes(_DOWNLOAD_REFRESH.search(html).group(1))
        with zipfile.ZipFile(io.BytesIO(body)) as zf:
            self.assertEqual(zf.namelist(), [f"{folder}/1-{folder}-msg.gpg"])
            self.assertEqual(test_svs().decrypt(zf.read(zf.namelist()[0])).decode(), marker)

        # Reply from the browser; the source reads it on /lookup.
        response, html = yield b.get(f"/sources/{source_uuid}")
        response, html = yield b.post(f"/sources/{source_uuid}/reply",
                                      data={"csrf_token": b.csrf(html), "reply": "REPLY-MARKER-9d hello source"})
        self.assertIn("Reply sent", html)
        self.assertRegex(html, r"4-[a-z]+_[a-z]+_[a-z]+-reply\.gpg")
        response, page = yield source.get("/lookup")
        self.assertIn("REPLY-MARKER-9d hello source", page)

        # Star, and delete one submission.
        response, html = yield b.post(f"/sources/{source_uuid}/star", data={"csrf_token": b.csrf(html), "starred": "1"})
        self.assertIn("★", html)
        first_uuid = re.search(r'name="submission" value="([0-9a-f-]{36})"', html).group(1)
        response, html = yield b.post(f"/sources/{source_uuid}/selected", data={
            "csrf_token": b.csrf(html), "action": "delete", "submission": first_uuid})
        self.assertIn("Delete 1 file of", html)  # a confirmation first (issue 13)
        response, html = yield b.post(f"/sources/{source_uuid}/selected", data={
            "csrf_token": b.csrf(html), "action": "delete-confirmed", "submission": first_uuid})
        self.assertIn("Deleted 1 submission.", html)
        self.assertEqual(len(re.findall(r'name="submission"', html)), 2)
        self.assertFalse(any(n.startswith("1-") for n in os.listdir(
            os.path.join(self.server.data_dir, "store", db_rows(self.server, "SELECT filesystem_id FROM sources"
                                                                " WHERE pending = 0")[0][0]))))

        # No page ever showed anything derived from a codename, and no plaintext reached disk.
        for fid, in db_rows(self.server, "SELECT filesystem_id FROM sources"):
            for page in b.pages:
                self.assertNotIn(fid, page)
        for root, _dirs, names in os.walk(self.server.data_dir):
            for name in names:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        data = f.read()
                    self.assertNotIn(b"REPLY-MARKER-9d", data, path)
        log = open(os.path.join(self.server.data_dir, "logs", "security.jsonl")).read()
        for secret in self.secrets_of_sources() + [codename]:
            self.assertNotIn(secret, log)
        self.assertNotIn("REPLY-MARKER", self.logs.text())
        self.assertNotIn("request failed", self.logs.text())

    @inlineCallbacks
    def test_reply_without_a_source_key_keeps_the_text(self):
        yield self.new_source()
        b = yield self.logged_in()
        response, html = yield b.get("/sources")
        source_uuid = _SOURCE_LINK.search(html).group(1)
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources")
        yield self.server.service.newsroom.replies.key_ready(source_id)  # made after the first submission
        [(fingerprint,)] = db_rows(self.server, "SELECT key_fingerprint FROM sources")
        self.assertTrue(fingerprint)
        yield self.server.service.db.run(lambda conn: conn.execute("UPDATE sources SET key_fingerprint = NULL"))
        response, html = yield b.get(f"/sources/{source_uuid}")
        response, html = yield b.post(f"/sources/{source_uuid}/reply",
                                      data={"csrf_token": b.csrf(html), "reply": "keep <this> text"})
        self.assertEqual(response.code, 409)
        self.assertIn("NOT sent", html)
        self.assertIn("keep &lt;this&gt; text</textarea>", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM replies"), [(0,)])

    @inlineCallbacks
    def test_deleting_a_source_removes_everything_and_logs_it_out(self):
        source, codename = yield self.new_source("to be deleted", [("a.txt", b"x" * 1000)])
        b = yield self.logged_in()
        response, html = yield b.get("/sources")
        source_uuid = _SOURCE_LINK.search(html).group(1)
        [(source_id, fid)] = db_rows(self.server, "SELECT id, filesystem_id FROM sources")
        yield self.server.service.newsroom.replies.add(source_id, "a reply", None)
        # The reply waited for the key pair made after the first submission: it exists now.
        [(fingerprint,)] = db_rows(self.server, "SELECT key_fingerprint FROM sources")
        self.assertEqual(len(os.listdir(os.path.join(self.server.data_dir, "store", fid))), 3)
        response, html = yield b.get(f"/sources/{source_uuid}/delete")
        self.assertIn("This cannot be undone", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM sources"), [(1,)])  # a GET deletes nothing
        response, html = yield b.post(f"/sources/{source_uuid}/delete", data={"csrf_token": b.csrf(html)})
        self.assertIn("were deleted", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM sources"), [(0,)])
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions"), [(0,)])
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM replies"), [(0,)])
        self.assertFalse(os.path.exists(os.path.join(self.server.data_dir, "store", fid)))
        keys = yield self.server.service.newsroom.crypto_pool.run(
            self.server.service.newsroom.keyring._gpg.list_keys, False, [fingerprint])
        self.assertEqual(list(keys), [])
        # The source's open session ended, and the codename no longer works.
        response, html = yield source.get("/lookup")
        # Issue 11: logged out, and told why, calmly (not "session expired").
        self.assertIn("The newsroom has closed the conversation for this codename", html)
        response, html = yield source.login(codename)
        self.assertEqual(response.code, 403)
        response, html = yield b.get(f"/sources/{source_uuid}")
        self.assertEqual(response.code, 404)


class JournalistSessionTimeoutTests(unittest.TestCase):
    timeout = 30

    @inlineCallbacks
    def test_idle_sessions_end(self):
        server = yield start_journalist_server(self, journalist_session_idle=0.5)
        account = yield add_journalist(server, "alice")
        b = JournalistBrowser(server, issue_client_cert(server, "alice"))
        self.addCleanup(b.close)
        response, html = yield b.log_in(account)
        self.assertIn("<h1>Sources</h1>", html)
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        yield deferLater(reactor, 0.8, lambda: None)
        response, html = yield b.get("/sources")
        self.assertIn("Journalist log in", html)


class DisabledJournalistInterfaceTests(unittest.TestCase):
    timeout = 30

    @inlineCallbacks
    def test_without_a_ca_only_the_source_side_runs_and_says_how_to_enable_it(self):
        logs = LogCapture().start()
        self.addCleanup(logs.stop)
        server = yield start_server(self)
        self.assertIsNone(server.service.journalist_listener)
        lines = [line for line in logs.lines if "journalist interface NOT started" in line]
        self.assertEqual(len(lines), 1)
        self.assertIn("deaddrop-admin ca init", lines[0])
        self.assertIn("--journalist-ca", lines[0])
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        response, html = yield browser.get("/")
        self.assertEqual(response.code, 200)
