"""Triage on the journalist web (issue 22 §4): filters, select all, unread again, dates, counts
that follow a download, certificate status and confirmations on the users page. No JavaScript.

The real server over mutual TLS; most sources are seeded straight into its database (the list
reads only rows), the ones whose files are downloaded are made the real way.
"""
from __future__ import annotations

import base64
import io
import json
import os
import re
import sqlite3
import time
import uuid as uuidlib
import zipfile

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.transport import ca
from tests._support import (
    Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events,
    start_journalist_server, test_svs, wait_until,
)
from tests.integration.test_source_pagination import seed_sources

_SOURCE_LINK = re.compile(r'href="/sources/([0-9a-f-]{36})"')
_FETCH_LINK = re.compile(r'href="(/sources/[0-9a-f-]{36}/submissions/([0-9a-f-]{36})/fetch)"')
_REFRESH = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)"')


def db_rows(server, sql, *args):
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"), timeout=30)
    try:
        with conn:
            return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def checked_boxes(html: str, name: str) -> list[str]:
    return re.findall(rf'<input type="checkbox" name="{name}" value="([0-9a-f-]{{36}})"[^>]*checked', html)


def boxes(html: str, name: str) -> list[str]:
    return re.findall(rf'<input type="checkbox" name="{name}" value="([0-9a-f-]{{36}})"', html)


class TriageTests(unittest.TestCase):
    timeout = 90

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.cert = issue_client_cert(self.server, "alice")
        self.admin = yield add_journalist(self.server, "alice", admin=True)
        self.device = TotpDevice(self.server, self.admin.totp_secret)

    @inlineCallbacks
    def logged_in(self):
        b = JournalistBrowser(self.server, self.cert)
        self.addCleanup(b.close)
        response, html = yield b.log_in(self.admin, self.device)
        self.assertIn("<h1>Sources</h1>", html)
        return b

    def add_submission(self, source_uuid: str, seen: bool) -> None:
        """A submission row (no file: the list reads only rows)."""
        [(source_id, n)] = db_rows(self.server, "SELECT id, next_n FROM sources WHERE uuid = ?", source_uuid)
        db_rows(self.server, "INSERT INTO submissions (uuid, source_id, n, filename, kind, size, seen, created_at)"
                             " VALUES (?, ?, ?, ?, 'msg', 10, ?, 0)",
                str(uuidlib.uuid4()), source_id, n, f"{n}-seeded-{uuidlib.uuid4().hex[:8]}-msg.gpg", int(seen))
        db_rows(self.server, "UPDATE sources SET next_n = next_n + 1 WHERE id = ?", source_id)
        db_rows(self.server, "INSERT INTO submission_desks(submission_id, desk_id) SELECT x.id, d.id"
                             " FROM submissions x, desks d WHERE x.source_id = ? AND x.n = ? AND d.is_default = 1",
                source_id, n)

    def designation(self, uuid: str) -> str:
        return db_rows(self.server, "SELECT designation FROM sources WHERE uuid = ?", uuid)[0][0]

    # -- the source list ---------------------------------------------------------------------

    @inlineCallbacks
    def test_the_source_list_filters_by_designation_starred_and_unread(self):
        uuids = seed_sources(self.server, 70, starred_every=3)
        starred = {u for (u,) in db_rows(self.server, "SELECT uuid FROM sources WHERE is_starred = 1")}
        unread = {uuids[1], uuids[3]}  # one starred (n=3), one not
        for u in unread:
            self.add_submission(u, seen=False)
        self.add_submission(uuids[2], seen=True)  # read: not "unread"
        b = yield self.logged_in()

        response, html = yield b.get("/sources?q=SOURCE+000004")  # any case, any part
        self.assertEqual(_SOURCE_LINK.findall(html), [uuids[4]])
        self.assertIn('value="SOURCE 000004"', html)  # the form keeps what was typed
        response, html = yield b.get("/sources?q=%25")  # LIKE's wildcards are plain characters here
        self.assertEqual(_SOURCE_LINK.findall(html), [])
        self.assertIn("No source matches these filters.", html)
        self.assertIn('href="/sources"', html)

        response, html = yield b.get("/sources?starred=1")
        self.assertEqual(set(_SOURCE_LINK.findall(html)), starred)
        self.assertIn('name="starred" value="1" checked', html)
        response, html = yield b.get("/sources?unread=1")
        self.assertEqual(set(_SOURCE_LINK.findall(html)), unread)
        response, html = yield b.get("/sources?unread=1&starred=1")
        self.assertEqual(set(_SOURCE_LINK.findall(html)), unread & starred)
        self.assertEqual(len(unread & starred), 1)

        # 70 sources match "seeded": two pages, and the pager keeps the filter.
        response, html = yield b.get("/sources?q=seeded")
        self.assertEqual(len(_SOURCE_LINK.findall(html)), 50)
        self.assertIn('href="/sources?q=seeded&amp;page=2"', html)
        self.assertIn("Sources 1–50 of 70", html)
        response, html = yield b.get("/sources?q=seeded&page=2")
        self.assertEqual(len(_SOURCE_LINK.findall(html)), 20)

    @inlineCallbacks
    def test_select_all_on_a_page_and_act_on_the_selection(self):
        uuids = seed_sources(self.server, 55)
        for u in uuids[:3]:
            self.add_submission(u, seen=False)
        b = yield self.logged_in()
        response, html = yield b.get("/sources")
        self.assertEqual(len(boxes(html, "source")), 50)
        self.assertEqual(checked_boxes(html, "source"), [])
        self.assertIn('href="/sources?select=all"', html)
        response, html = yield b.get("/sources?page=2&select=all")  # without JavaScript: the page, ticked
        self.assertEqual(len(checked_boxes(html, "source")), 5)
        self.assertEqual(checked_boxes(html, "source"), boxes(html, "source"))
        self.assertIn('href="/sources?page=2"', html)  # and the way back to none

        # Star what was selected on a filtered page: the answer is that same page.
        response, html = yield b.get("/sources?q=seeded&select=all")
        picked = checked_boxes(html, "source")[:2]
        response, _ = yield b.post("/sources/selected", follow=False, data={
            "csrf_token": b.csrf(html), "action": "star", "source": picked, "q": "seeded", "page": "1"})
        self.assertEqual(response.code, 303)
        self.assertEqual(response.headers.getRawHeaders(b"location"), [b"/sources?q=seeded"])
        self.assertEqual({u for (u,) in db_rows(self.server, "SELECT uuid FROM sources WHERE is_starred = 1")},
                         set(picked))
        response, html = yield b.get("/sources?q=seeded")
        self.assertIn("Starred 2 sources.", html)

        # Read, then unread again, for whole sources.
        response, html = yield b.post("/sources/selected", data={
            "csrf_token": b.csrf(html), "action": "read", "source": uuids[:3]})
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions WHERE seen = 0"), [(0,)])
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submission_seen"), [(3,)])
        response, html = yield b.post("/sources/selected", data={
            "csrf_token": b.csrf(html), "action": "unread", "source": uuids[:2]})
        self.assertIn("Marked every submission of 2 sources unread.", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions WHERE seen = 0"), [(2,)])
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submission_seen"), [(1,)])

        # Nothing selected: said so, nothing done.
        response, html = yield b.post("/sources/selected", data={"csrf_token": b.csrf(html), "action": "star"})
        self.assertIn("Select at least one source first.", html)

        # Delete: a confirmation listing them first, then they go.
        doomed = uuids[10:12]
        for u in doomed:  # filesystem ids of the real shape, so the store can remove their folders
            fid = base64.b32encode(os.urandom(32)).decode().lower().rstrip("=")[:52]
            db_rows(self.server, "UPDATE sources SET filesystem_id = ? WHERE uuid = ?", fid, u)
        response, html = yield b.post("/sources/selected", data={
            "csrf_token": b.csrf(html), "action": "delete", "source": doomed})
        self.assertIn("Delete 2 sources?", html)
        self.assertEqual(sorted(re.findall(r'<li class="to-delete">([^<(]+) \(', html)),
                         sorted(self.designation(u) for u in doomed))
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM sources"), [(55,)])
        response, html = yield b.post("/sources/selected", data={
            "csrf_token": b.csrf(html), "action": "delete-confirmed", "source": doomed, "page": "1"})
        self.assertIn("Deleted 2 sources and everything they sent.", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM sources"), [(53,)])
        self.assertEqual([e["event"] for e in security_events(self.server)].count("journalist.source.deleted"), 2)

    # -- one source: downloads, unread again, dates ------------------------------------------

    @inlineCallbacks
    def test_counts_follow_a_download_and_files_can_be_unread_again(self):
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        document = os.urandom(30_000)
        response, html = yield source.submit("TRIAGE-MESSAGE", [("notes.bin", document)])
        self.assertEqual(response.code, 200)
        [(source_uuid, source_id)] = db_rows(self.server, "SELECT uuid, id FROM sources WHERE pending = 0")
        yield self.server.service.newsroom.replies.key_ready(source_id)
        b = yield self.logged_in()
        response, html = yield b.get(f"/sources/{source_uuid}")
        self.assertIn("Download all unread (2)", html)
        fetches = _FETCH_LINK.findall(html)
        self.assertEqual(len(fetches), 2)
        doc_url, doc_uuid = next((url, u) for url, u in fetches if url and self.kind(u) == "doc")

        # A file's link: marked read first, then the page again, new counts on it, sending the
        # browser on to the file (a download does not replace the page).
        response, _ = yield b.get(doc_url, follow=False)
        self.assertEqual(response.code, 303)
        response, html = yield b.get(doc_url)
        self.assertIn("Download all unread (1)", html)
        [refresh] = _REFRESH.findall(html)
        self.assertEqual(refresh, f"/sources/{source_uuid}/submissions/{doc_uuid}/download")
        self.assertIn('id="downloading"', html)
        response, body = yield b.get_bytes(refresh)
        self.assertEqual(response.code, 200)
        self.assertEqual(body[:3], self.stored(doc_uuid)[:3])
        response, html = yield b.get("/sources")
        self.assertIn("1 unread", html)
        response, html = yield b.get(f"/sources/{source_uuid}")
        self.assertEqual(_REFRESH.findall(html), [])  # an ordinary visit downloads nothing

        # That file, unread again: for everyone, as if never opened.
        response, html = yield b.post(f"/sources/{source_uuid}/selected", data={
            "csrf_token": b.csrf(html), "action": "unread", "submission": doc_uuid})
        self.assertIn("Marked 1 submission unread.", html)
        self.assertIn("Download all unread (2)", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submission_seen"), [(0,)])

        # "Download all unread": marked read, the page again, then the zip of exactly those.
        response, html = yield b.post(f"/sources/{source_uuid}/download-unread", data={"csrf_token": b.csrf(html)})
        self.assertIn("Download all unread (0)", html)
        self.assertIn("a zip of 2 files", html)
        [refresh] = _REFRESH.findall(html)
        response, body = yield b.get_bytes(refresh)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"application/zip"])
        with zipfile.ZipFile(io.BytesIO(body)) as zf:
            self.assertEqual(len(zf.namelist()), 2)
            message = next(n for n in zf.namelist() if n.endswith("-msg.gpg"))
            self.assertEqual(test_svs().decrypt(zf.read(message)), b"TRIAGE-MESSAGE")
        response, html = yield b.get("/sources")
        self.assertIn("0 unread", html)
        # A ticket is this session's own.
        other = JournalistBrowser(self.server, self.cert)
        self.addCleanup(other.close)
        yield other.log_in(self.admin, self.device)
        response, _ = yield other.get_bytes(refresh)
        self.assertEqual(response.code, 404)

        # The whole source unread again, from its page.
        response, html = yield b.get(f"/sources/{source_uuid}")
        response, html = yield b.post(f"/sources/{source_uuid}/unread", data={"csrf_token": b.csrf(html)})
        self.assertIn("Marked 2 submissions unread.", html)
        self.assertIn("Download all unread (2)", html)
        # Select all, without JavaScript, then mark read.
        response, html = yield b.get(f"/sources/{source_uuid}?select=all")
        self.assertEqual(sorted(checked_boxes(html, "submission")), sorted(u for _, u in fetches))
        response, html = yield b.post(f"/sources/{source_uuid}/selected", data={
            "csrf_token": b.csrf(html), "action": "read", "submission": checked_boxes(html, "submission")})
        self.assertIn("Download all unread (0)", html)

        # Replies carry their date.
        response, html = yield b.post(f"/sources/{source_uuid}/reply",
                                      data={"csrf_token": b.csrf(html), "reply": "thank you"})
        [(created,)] = db_rows(self.server, "SELECT created_at FROM replies")
        day = time.strftime("%Y-%m-%d", time.gmtime(created))
        said = time.strftime("%B %-d, %Y", time.gmtime(created))  # Babel's long English date (issue 31 item 3)
        self.assertRegex(html, rf'-reply\.gpg</a> \(by alice, <time datetime="{day}">{said}</time>\)')
        self.assertRegex(html, rf'<td data-label="Received">{said}</td>')

    def kind(self, submission_uuid: str) -> str:
        return db_rows(self.server, "SELECT kind FROM submissions WHERE uuid = ?", submission_uuid)[0][0]

    def stored(self, submission_uuid: str) -> bytes:
        [(fid, name)] = db_rows(self.server, "SELECT s.filesystem_id, x.filename FROM submissions x JOIN sources s"
                                             " ON s.id = x.source_id WHERE x.uuid = ?", submission_uuid)
        with open(os.path.join(self.server.data_dir, "store", fid, name), "rb") as f:
            return f.read()

    # -- users -------------------------------------------------------------------------------

    @inlineCallbacks
    def test_users_page_shows_each_certificate_from_the_issued_list_and_the_crl(self):
        ca_dir = self.server.ca_dir
        out = os.path.join(self.server.data_dir, "clients")
        for name in ("bob", "carol", "dave", "erin", "frank"):
            yield add_journalist(self.server, name)
        ca.issue_client_cert(ca_dir, "bob", os.path.join(out, "bob.p12"), b"pw", days=10)      # expiring
        ca.issue_client_cert(ca_dir, "carol", os.path.join(out, "carol.p12"), b"pw")           # revoked
        ca.revoke(ca_dir, "carol")
        ca.write_crl(ca_dir, os.path.join(ca_dir, "crl.pem"))
        yield wait_until(lambda: any(e["event"] == "crl.reloaded" for e in security_events(self.server)))
        ca.issue_client_cert(ca_dir, "erin", os.path.join(out, "erin.p12"), b"pw")             # revoked, no new CRL
        ca.revoke(ca_dir, "erin")
        ca.issue_client_cert(ca_dir, "frank", os.path.join(out, "frank.p12"), b"pw")           # expired
        state_path = os.path.join(ca_dir, "state.json")
        with open(state_path) as f:
            state = json.load(f)
        for entry in state["certs"]:
            if entry["name"] == "frank":
                entry["not_after"] = "2020-01-02T00:00:00+00:00"
        with open(state_path, "w") as f:
            json.dump(state, f)
        # dave: no certificate at all.
        b = yield self.logged_in()
        response, html = yield b.get("/admin/users")
        shown = dict(re.findall(r'<tr><td class="lead">(\w+)(?:<[^>]+>)*?.*?<span class="cert cert-\w+">([^<]+)</span>',
                                html))
        day = r"[A-Z][a-z]+ \d{1,2}, \d{4}"  # days as Babel writes them in English
        self.assertRegex(shown["alice"], rf"^valid until {day}$")
        self.assertRegex(shown["bob"], rf"^expires {day} \(in (9|10) days\)$")
        self.assertRegex(shown["carol"], rf"^revoked {day}$")
        self.assertEqual(shown["dave"], "none issued")
        self.assertIn("not yet in the server's CRL", shown["erin"])
        self.assertEqual(shown["frank"], "expired January 2, 2020")
        self.assertNotIn("has no copy of that list", html)

        # Without the issued list the page says where the status comes from.
        os.rename(state_path, state_path + ".away")
        self.addCleanup(os.rename, state_path + ".away", state_path)
        response, html = yield b.get("/admin/users")
        self.assertIn("has no copy of that list", html)
        self.assertIn('<span class="cert cert-warn">unknown</span>', html)

    @inlineCallbacks
    def test_account_actions_are_confirmed_first(self):
        bob = yield add_journalist(self.server, "bob")
        b = yield self.logged_in()
        response, html = yield b.get("/admin/users")
        # The users page holds links to confirmation pages, no forms that act at once.
        for action in ("delete", "reset-password", "reset-2fa"):
            self.assertIn(f'href="/admin/users/{bob.uuid}/{action}"', html)
            self.assertNotIn(f'action="/admin/users/{bob.uuid}/{action}"', html)
        self.assertNotIn(f'href="/admin/users/{self.admin.uuid}/delete"', html)  # never oneself

        before = db_rows(self.server, "SELECT password_hash, totp_secret FROM journalists WHERE username = 'bob'")
        for action, heading in [("reset-password", "A new passphrase for bob?"),
                                ("reset-2fa", "A new two-factor secret for bob?"), ("delete", "Delete bob?")]:
            response, html = yield b.get(f"/admin/users/{bob.uuid}/{action}")
            self.assertEqual(response.code, 200)
            self.assertIn(f"<h1>{heading}</h1>", html)
            self.assertIn('name="confirm" value="yes"', html)
            # A form without the confirmation (an old page, a replayed post) only asks again.
            response, html = yield b.post(f"/admin/users/{bob.uuid}/{action}", data={"csrf_token": b.csrf(html)})
            self.assertIn(f"<h1>{heading}</h1>", html)
            self.assertEqual(db_rows(self.server, "SELECT password_hash, totp_secret FROM journalists"
                                                  " WHERE username = 'bob'"), before)
        response, html = yield b.get(f"/admin/users/{bob.uuid}/reset-password")
        response, html = yield b.post(f"/admin/users/{bob.uuid}/reset-password",
                                      data={"csrf_token": b.csrf(html), "confirm": "yes"})
        self.assertIn("New passphrase for bob", html)
        response, html = yield b.get(f"/admin/users/{bob.uuid}/reset-2fa")
        response, html = yield b.post(f"/admin/users/{bob.uuid}/reset-2fa",
                                      data={"csrf_token": b.csrf(html), "confirm": "yes"})
        self.assertIn("New two-factor secret for bob", html)
        after = db_rows(self.server, "SELECT password_hash, totp_secret FROM journalists WHERE username = 'bob'")
        self.assertNotEqual(after[0][0], before[0][0])
        self.assertNotEqual(after[0][1], before[0][1])
        response, html = yield b.get(f"/admin/users/{bob.uuid}/delete")
        response, html = yield b.post(f"/admin/users/{bob.uuid}/delete", data={"csrf_token": b.csrf(html),
                                                                                "confirm": "yes"})
        self.assertIn("Deleted bob.", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM journalists WHERE username = 'bob'"), [(0,)])
        response, html = yield b.get(f"/admin/users/{self.admin.uuid}/delete")
        self.assertEqual(response.code, 400)
        self.assertIn("You cannot delete your own account", html)
