"""Every journalist route's CSP and HTML (issue 30): the security key pages (the key step of
logging in, registering a key) run one script, the static ``webauthn.js`` named by a nonce in
their CSP, with its integrity pinned; every other page and response has no script at all, and a
policy that allows none."""
from __future__ import annotations

import html as htmllib
import json
import re
import sqlite3
import os
import uuid as uuidlib

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.web._common.headers import CSP
from deaddrop.web._common.static import hashed_url, integrity
from deaddrop.web.journalist.app import JournalistInterface
from tests._soft_key import SoftKey
from tests._support import (
    Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, start_journalist_server,
)

# The pages that may run the WebAuthn script (and do, when they can talk to a key): the key step of
# logging in (also when a recovery code was refused there) and registering a key.
SCRIPT_PAGES = {"login_key_form", "login_key", "login_recovery", "enrol_form", "enrol"}
_SCRIPT_TAG = re.compile(r"<script\b[^>]*>", re.I)
_INLINE = re.compile(r"""\son[a-z]+\s*=|javascript:|<iframe|<object|<embed""", re.I)


def _csp_nonce(csp: str) -> str | None:
    found = re.fullmatch(re.escape(CSP).replace(re.escape("default-src 'none';"),
                                                r"default-src 'none'; script-src 'nonce-([A-Za-z0-9_-]{20,})';"), csp)
    return found.group(1) if found else None


class EveryRouteScriptTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.port = int(self.server.journalist_url.rsplit(":", 1)[1])
        self.host = {"Host": [f"localhost:{self.port}"], "User-Agent": [Browser.USER_AGENT]}
        self.alice = yield add_journalist(self.server, "alice", admin=True)
        self.bob = yield add_journalist(self.server, "bob")
        self.browser = JournalistBrowser(self.server, issue_client_cert(self.server, "alice"))
        self.addCleanup(self.browser.close)
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("hello", [("a.txt", b"a file")])
        self.seen: dict[str, list[tuple[int, str, str]]] = {}

    def _db(self, sql: str):
        conn = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    @inlineCallbacks
    def _call(self, endpoint: str, method: str, path: str, data: dict | None = None):
        """One request by the journalist's name (as a browser opening it by name would): noted."""
        if method == "GET":
            response, html = yield self.browser.get(path, follow=False, headers=self.host)
        else:
            form = dict(data or {})
            form.setdefault("csrf_token", self.browser.csrf(self.last_page))
            response, html = yield self.browser.post(path, data=form, follow=False, headers=self.host)
        csp = response.headers.getRawHeaders(b"content-security-policy", [b""])[0].decode()
        self.seen.setdefault(endpoint, []).append((response.code, csp, html))
        if "csrf_token" in html:
            self.last_page = html
        return response, html

    def _check(self, endpoint: str, code: int, csp: str, html: str) -> bool:
        """-> whether this response ran the script. Fails on any other script, or a looser CSP."""
        tags = _SCRIPT_TAG.findall(html)
        self.assertFalse(_INLINE.search(html), f"{endpoint}: inline script or embedding")
        if not tags:
            self.assertEqual(csp, CSP, f"{endpoint} ({code}) has no script but a policy that allows one")
            return False
        self.assertIn(endpoint, SCRIPT_PAGES, f"{endpoint} serves a script")
        nonce = _csp_nonce(csp)
        self.assertIsNotNone(nonce, f"{endpoint}: CSP {csp!r} does not name the script by a nonce")
        [tag] = tags
        self.assertEqual(html.count("</script>"), 1)
        self.assertIn(f'src="{hashed_url("webauthn.js")}"', tag)
        self.assertIn(f'nonce="{nonce}"', tag)
        self.assertIn(f'integrity="{integrity("webauthn.js")}"', tag)
        return True

    @inlineCallbacks
    def test_only_the_key_pages_run_a_script_and_only_ours(self):
        device = TotpDevice(self.server, self.alice.totp_secret)
        key = SoftKey(f"https://localhost:{self.port}")
        [(source_uuid,)] = self._db("SELECT uuid FROM sources")
        submission = self._db("SELECT uuid FROM submissions")[0][0]
        bob_uuid = self.bob.uuid

        yield self._call("index", "GET", "/")
        yield self._call("login_form", "GET", "/login")
        yield self._call("login_key_form", "GET", "/login/key")  # nothing pending: back to /login
        yield self._call("login", "POST", "/login", {"username": "alice", "passphrase": self.alice.passphrase,
                                                      "one_time_code": device.code()})
        yield self._call("robots", "GET", "/robots.txt")
        yield self._call("static", "GET", hashed_url("webauthn.js"))
        yield self._call("static", "GET", hashed_url("style.css"))
        yield self._call("sources", "GET", "/sources")
        yield self._call("source", "GET", f"/sources/{source_uuid}")
        yield self._call("account", "GET", "/account")
        yield self._call("choose_language", "POST", "/account/language", {"language": "en"})
        # Register a key (a key in software, answering the page's options as a browser would).
        response, html = yield self._call("enrol_form", "GET", "/account/keys/new")
        options = json.loads(htmllib.unescape(re.search(r'data-options="([^"]*)"', html).group(1)))
        yield self._call("enrol", "POST", "/account/keys/new", {"name": "soft key",
                                                                 "credential": json.dumps(key.create(options))})
        yield self._call("enrol", "POST", "/account/keys/new", {"name": "", "credential": "{}"})  # its error page
        [(key_id,)] = self._db("SELECT id FROM security_keys")
        yield self._call("account", "GET", "/account")
        yield self._call("remove", "POST", f"/account/keys/{key_id}/remove")  # its confirmation page
        yield self._call("new_passphrase", "POST", "/account/new-passphrase", {"passphrase": "wrong"})
        yield self._call("fetch_submission", "GET", f"/sources/{source_uuid}/submissions/{submission}/fetch")
        yield self._call("download_submission", "GET", f"/sources/{source_uuid}/submissions/{submission}/download")
        yield self._call("download_reply", "GET", f"/sources/{source_uuid}/replies/{uuidlib.uuid4()}/download")
        yield self._call("source", "GET", f"/sources/{source_uuid}")
        yield self._call("download_unread", "POST", f"/sources/{source_uuid}/download-unread")
        yield self._call("download_zip", "GET", f"/sources/{source_uuid}/zip/{uuidlib.uuid4().hex}")
        yield self._call("source", "GET", f"/sources/{source_uuid}")
        yield self._call("selected", "POST", f"/sources/{source_uuid}/selected", {"action": "read"})
        yield self._call("mark_source_unread", "POST", f"/sources/{source_uuid}/unread")
        yield self._call("star", "POST", f"/sources/{source_uuid}/star")
        yield self._call("reply", "POST", f"/sources/{source_uuid}/reply", {"message": ""})
        yield self._call("sources_selected", "POST", "/sources/selected", {"action": "star", "source": source_uuid})
        yield self._call("users", "GET", "/admin/users")
        yield self._call("add_user", "POST", "/admin/users", {"username": ""})
        for action in ("delete", "reset-password", "reset-2fa"):
            yield self._call("confirm_account_action", "GET", f"/admin/users/{bob_uuid}/{action}")
        yield self._call("reset_credentials", "POST", f"/admin/users/{bob_uuid}/reset-2fa")
        yield self._call("delete_user", "POST", f"/admin/users/{bob_uuid}/delete")
        yield self._call("settings_form", "GET", "/admin/settings")
        yield self._call("save_settings", "POST", "/admin/settings")
        yield self._call("source_texts_form", "GET", "/admin/source-texts")
        yield self._call("save_source_texts", "POST", "/admin/source-texts")
        yield self._call("save_source_logo", "POST", "/admin/source-logo")
        [(desk_uuid,)] = self._db("SELECT uuid FROM desks")
        yield self._call("desks", "GET", "/admin/desks")
        yield self._call("add_desk", "POST", "/admin/desks", {"name": "", "key": ""})  # its error page
        yield self._call("desk", "GET", f"/admin/desks/{desk_uuid}")
        yield self._call("change_desk", "POST", f"/admin/desks/{desk_uuid}/rename", {"name": ""})
        yield self._call("set_desk_key", "POST", f"/admin/desks/{desk_uuid}/key", {"key": "not a key"})
        yield self._call("confirm_removal", "GET", f"/admin/desks/{desk_uuid}/remove")
        yield self._call("remove_desk", "POST", f"/admin/desks/{desk_uuid}/remove")  # its confirmation page
        yield self._call("delete_source_confirm", "GET", f"/sources/{source_uuid}/delete")
        yield self._call("delete_source", "POST", f"/sources/{source_uuid}/delete")
        yield self._call("logout", "POST", "/logout")
        # The key step of logging in: its page, a wrong recovery code and a refused answer (its page
        # again), then the key; then the codes an account with keys makes.
        yield self._call("login_form", "GET", "/login")
        yield self._call("login", "POST", "/login", {"username": "alice", "passphrase": self.alice.passphrase})
        yield self._call("login_recovery", "POST", "/login/recovery", {"recovery_code": "AAAA-AAAA-AAAA-AAAA"})
        response, html = yield self._call("login_key_form", "GET", "/login/key")
        options = json.loads(htmllib.unescape(re.search(r'data-options="([^"]*)"', html).group(1)))
        yield self._call("login_key", "POST", "/login/key", {"credential": "{}"})
        response, html = yield self._call("login_key", "POST", "/login/key",
                                          {"credential": json.dumps(key.get(options))})
        self.assertEqual(response.code, 403)  # that challenge was used up by the refused answer
        response, html = yield self.browser.get("/login/key", follow=False, headers=self.host)
        options = json.loads(htmllib.unescape(re.search(r'data-options="([^"]*)"', html).group(1)))
        self.last_page = html
        response, html = yield self._call("login_key", "POST", "/login/key",
                                          {"credential": json.dumps(key.get(options))})
        self.assertEqual((response.code, response.headers.getRawHeaders(b"location")), (303, [b"/sources"]))
        yield self._call("account", "GET", "/account")
        yield self._call("api_code", "POST", "/account/api-code")
        yield self._call("recovery_codes", "POST", "/account/recovery-codes")

        endpoints = {rule.endpoint for rule in JournalistInterface.app.url_map.iter_rules()}
        self.assertEqual(endpoints - set(self.seen), {"api_branch", "api_branch_branch"})  # JSON, no HTML
        ran = {endpoint for endpoint, responses in self.seen.items()
               for code, csp, html in responses if self._check(endpoint, code, csp, html)}
        self.assertEqual(ran, SCRIPT_PAGES)
