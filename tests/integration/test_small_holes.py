"""Issue 10's smaller holes, on the real server (mutual TLS, real gpg, real files).

Downloads never serve a symbolic link's target; API replies lose their armor headers; tor2web
requests and filled honeypots get 403; ``/api/v1/token`` names a missing field; journalist
passphrases over 128 characters are refused before any hashing.
"""
from __future__ import annotations

import os
import re
import shutil

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from tests._support import (
    ApiClient, Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, multipart_body,
    start_journalist_server, test_svs,
)
from tests.integration.test_journalist_api import ClientKeyring, db_rows
from tests.integration.test_source_flow import stored_files

_SOURCE_LINK = re.compile(r'href="/sources/([0-9a-f-]{36})"')
_SUBMISSION_LINK = re.compile(r'href="(/sources/[0-9a-f-]{36}/submissions/[0-9a-f-]{36})/fetch"')
TARGET_MARKER = b"SYMLINK-TARGET-MARKER "


class SmallHolesTests(unittest.TestCase):
    timeout = 90

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.cert = issue_client_cert(self.server, "alice")
        self.account = yield add_journalist(self.server, "alice")
        self.device = TotpDevice(self.server, self.account.totp_secret)
        self.api = ApiClient(self.server, self.cert)
        self.addCleanup(self.api.close)
        yield self.api.log_in(self.account, self.device)
        self.source = Browser(self.server.source_url)
        self.addCleanup(self.source.close)

    @inlineCallbacks
    def submitted_source(self):
        yield self.source.create_source()
        response, _ = yield self.source.submit("a message", [("doc.txt", b"a document")])
        self.assertEqual(response.code, 200)
        status, data = yield self.api.json("GET", "/api/v1/sources")
        [source] = data["sources"]
        return source

    # -- downloads and symbolic links --------------------------------------------------------

    def plant_links(self):
        """Replace the stored message with a link to a file outside the store; return its name."""
        target = os.path.join(self.server.data_dir, "outside.txt")
        with open(target, "wb") as f:
            f.write(TARGET_MARKER * 10)
        [(fid,)] = db_rows(self.server, "SELECT filesystem_id FROM sources WHERE pending = 0")
        folder = os.path.join(self.server.data_dir, "store", fid)
        [msg] = [n for n in os.listdir(folder) if n.endswith("-msg.gpg")]
        os.remove(os.path.join(folder, msg))
        os.symlink(target, os.path.join(folder, msg))
        return fid, msg

    @inlineCallbacks
    def test_downloads_do_not_follow_links_in_the_store(self):
        source = yield self.submitted_source()
        fid, msg = self.plant_links()
        status, data = yield self.api.json("GET", f"/api/v1/sources/{source['uuid']}/submissions")
        by_name = {s["filename"]: s for s in data["submissions"]}
        # API
        response, body = yield self.api.request("GET", by_name[msg]["download_url"])
        self.assertEqual(response.code, 404)
        self.assertNotIn(TARGET_MARKER, body)
        # HTML: one file, and "Download selected"
        browser = JournalistBrowser(self.server, self.cert)
        self.addCleanup(browser.close)
        response, html = yield browser.log_in(self.account, self.device)
        self.assertEqual(response.code, 200)
        response, html = yield browser.get(f"/sources/{source['uuid']}")
        links = _SUBMISSION_LINK.findall(html)
        self.assertEqual(len(links), 2)
        for link in links:
            response, body = yield browser.get_bytes(link + "/download")
            self.assertNotIn(TARGET_MARKER, body)
            if by_name[msg]["uuid"] in link:
                self.assertEqual(response.code, 404)
            else:
                self.assertEqual(response.code, 200)  # the real file next to it still downloads
        uuids = re.findall(r'name="submission" value="([0-9a-f-]{36})"', html)
        response, html = yield browser.post(f"/sources/{source['uuid']}/selected", data={
            "csrf_token": browser.csrf(html), "action": "download", "submission": uuids})
        zip_url = re.search(r'<meta http-equiv="refresh" content="0; url=([^"]+)"', html).group(1)
        response, body = yield browser.get_bytes(zip_url)
        self.assertEqual(response.code, 404)
        self.assertNotIn(TARGET_MARKER, body)
        # A linked source folder is refused as a whole, even holding real files.
        real = os.path.join(self.server.data_dir, "elsewhere")
        folder = os.path.join(self.server.data_dir, "store", fid)
        shutil.move(folder, real)
        os.remove(os.path.join(real, msg))
        with open(os.path.join(real, msg), "wb") as f:
            f.write(TARGET_MARKER)
        os.symlink(real, folder)
        for item in data["submissions"]:
            response, body = yield self.api.request("GET", item["download_url"])
            self.assertEqual(response.code, 404)
            self.assertNotIn(TARGET_MARKER, body)
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "tmp")), [])

    # -- API replies keep no armor headers ----------------------------------------------------

    @inlineCallbacks
    def test_api_reply_armor_headers_are_not_stored(self):
        source = yield self.submitted_source()
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources WHERE pending = 0")
        yield self.server.service.newsroom.replies.key_ready(source_id)
        status, data = yield self.api.json("GET", "/api/v1/sources")
        [source] = data["sources"]
        svs = test_svs()
        with open(svs.public_key_path) as f:
            submission_key = f.read()
        client = ClientKeyring(self)
        armored = client.encrypt("REPLY-BODY hello", [source["key"]["public"], submission_key],
                                 [source["key"]["fingerprint"], svs.fingerprint])
        lines = armored.splitlines()
        self.assertEqual(lines[0], "-----BEGIN PGP MESSAGE-----")
        hostile = "\n".join([lines[0], "Comment: ARMOR-HEADER-MARKER the plaintext, readable",
                             "Version: ARMOR-VERSION-MARKER"] + lines[1:]) + "\n"
        status, data = yield self.api.json("POST", f"/api/v1/sources/{source['uuid']}/replies", {"reply": hostile})
        self.assertEqual(status, 201, data)
        [reply] = [p for p in stored_files(self.server.data_dir) if p.endswith("-reply.gpg")]
        with open(reply, "rb") as f:
            stored = f.read()
        self.assertNotIn(b"MARKER", stored)
        self.assertTrue(stored.startswith(b"-----BEGIN PGP MESSAGE-----\n\n"), stored[:80])
        self.assertEqual(svs.decrypt(stored), b"REPLY-BODY hello")
        response, html = yield self.source.get("/lookup")
        self.assertIn("REPLY-BODY hello", html)
        # A broken checksum or body is refused, not stored.
        body = [i for i, line in enumerate(lines) if line.startswith("=")]
        broken = list(lines)
        broken[body[-1]] = "=AAAA"
        status, data = yield self.api.json("POST", f"/api/v1/sources/{source['uuid']}/replies",
                                           {"reply": "\n".join(broken)})
        self.assertEqual(status, 400, data)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM replies"), [(1,)])

    # -- the source interface -----------------------------------------------------------------

    @inlineCallbacks
    def test_tor2web_requests_get_403_and_a_page_saying_why(self):
        for path in ("/", "/generate", "/login"):
            response, html = yield self.source.get(path, headers={"X-tor2web": "encrypted"})
            self.assertEqual(response.code, 403, path)
            self.assertIn("Tor Browser", html)
            self.assertIn("tor2web", html)
        # An upload through a proxy is refused before its body is read: nothing stored.
        yield self.source.create_source()
        response, html = yield self.source.get("/lookup")
        body, content_type = multipart_body([("csrf_token", self.source.csrf(html)), ("msg", "via proxy")],
                                            [("x.bin", os.urandom(100_000))])
        response, html = yield self.source.post("/submit", data=body, headers={
            "Content-Type": content_type, "X-Tor2web": "1"})
        self.assertEqual(response.code, 403)
        self.assertIn("Tor Browser", html)
        self.assertEqual(stored_files(self.server.data_dir), [])
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "tmp")), [])
        response, html = yield self.source.get("/lookup")  # without the header, all is normal
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_a_filled_honeypot_gets_403(self):
        yield self.source.create_source()
        response, html = yield self.source.submit("buy pills", extra=[("website", "http://spam.example")])
        self.assertEqual(response.code, 403)
        self.assertEqual(stored_files(self.server.data_dir), [])

    # -- journalist logins ---------------------------------------------------------------------

    @inlineCallbacks
    def test_token_request_missing_a_field_gets_400_naming_it(self):
        anonymous = ApiClient(self.server, self.cert)
        self.addCleanup(anonymous.close)
        full = {"username": "alice", "passphrase": self.account.passphrase, "one_time_code": "000000"}
        for missing in full:
            body = {k: v for k, v in full.items() if k != missing}
            status, data = yield anonymous.json("POST", "/api/v1/token", body)
            self.assertEqual(status, 400, (missing, data))
            self.assertIn(f"'{missing}'", data["message"])
        status, data = yield anonymous.json("POST", "/api/v1/token", dict(full, username="mallory"))
        self.assertEqual(status, 403)  # wrong values stay 403
        status, data = yield anonymous.json("POST", "/api/v1/token", dict(full, passphrase=12345))
        self.assertEqual(status, 403)

    @inlineCallbacks
    def test_passphrases_over_128_characters_are_never_hashed(self):
        accounts = self.server.service.accounts
        calls = []
        real = accounts._verify

        def counting(stored, passphrase):
            calls.append(len(passphrase) if isinstance(passphrase, str) else None)
            return real(stored, passphrase)

        self.patch(accounts, "_verify", counting)
        anonymous = ApiClient(self.server, self.cert)
        self.addCleanup(anonymous.close)
        status, _ = yield anonymous.json("POST", "/api/v1/token", {
            "username": "alice", "passphrase": "x" * 128, "one_time_code": "000000"})
        self.assertEqual((status, calls), (403, [128]))
        for passphrase in ("x" * 129, self.account.passphrase + " " + "y" * 128, "z" * 100_000):
            status, _ = yield anonymous.json("POST", "/api/v1/token", {
                "username": "alice", "passphrase": passphrase, "one_time_code": self.device.code()})
            self.assertEqual(status, 403)
        self.assertEqual(calls, [128])
