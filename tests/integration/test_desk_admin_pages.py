"""The admin pages for desks (issue 29), over mutual TLS, with the rules and events of
``deaddrop-admin desk``: list and add, rename, members, texts per language, settings, a key set
or replaced only after a confirmation page with both fingerprints, and removal."""
from __future__ import annotations

import html as htmllib
import re

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread

from tests._support import JournalistBrowser, add_journalist, issue_client_cert, security_events
from tests.integration.test_desks import Station, TwoDesks, db_rows


def grouped(fingerprint: str) -> str:
    return " ".join(fingerprint[i:i + 4] for i in range(0, len(fingerprint), 4))


class DeskAdminPagesTests(TwoDesks):
    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.admin = yield add_journalist(self.server, "editor", admin=True)
        self.browser = JournalistBrowser(self.server, issue_client_cert(self.server, "editor"))
        self.addCleanup(self.browser.close)
        response, html = yield self.browser.log_in(self.admin)
        self.assertEqual(response.code, 200, html[:300])

    def post(self, path: str, html: str, **fields):
        return self.browser.post(path, data={"csrf_token": self.browser.csrf(html), **fields})

    def events(self, prefix: str = "admin.desk.") -> list[dict]:
        return [e for e in security_events(self.server) if e["event"].startswith(prefix)]

    def read(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    @inlineCallbacks
    def test_the_list_and_adding_a_desk_as_the_command_line_does(self):
        response, html = yield self.browser.get("/admin/desks")
        self.assertEqual(response.code, 200)
        for shown in ("Newsroom", "A", "B", grouped(self.desk_a.fingerprint), "alice", "bob"):
            self.assertIn(shown, html)
        station = yield deferToThread(Station, self)
        # A key another desk has is refused, as is anything but one public key.
        response, html = yield self.post("/admin/desks", html, name="Health", key=self.read(self.a.public_key))
        self.assertEqual(response.code, 400)
        self.assertIn("That key is already the key of desk A", html)
        response, html = yield self.post("/admin/desks", html, name="Health", key="not a key")
        self.assertEqual(response.code, 400)
        self.assertIn("That is not a usable public key", html)
        response, html = yield self.post("/admin/desks", html, name="a", key=self.read(station.public_key))
        self.assertEqual(response.code, 400)
        self.assertIn("There is already a desk with that name.", html)
        response, html = yield self.post("/admin/desks", html, name="  Health  desk ", key=self.read(station.public_key),
                                         description="Hospitals and who pays them.")
        self.assertEqual(response.code, 200)
        self.assertIn("<h1 dir=\"auto\">Health desk</h1>", html)
        [event] = [e for e in self.events() if e["event"] == "admin.desk.added" and e["target"] == "Health desk"]
        self.assertEqual(event["username"], "editor")
        fingerprint = event["fingerprint"]
        self.assertIn(grouped(fingerprint), html)
        # Sources see it at once (the server re-read its desks).
        health = next(d for d in self.newsroom.desks.all() if d.name == "Health desk")
        self.assertEqual((health.fingerprint, health.text("en", "description")),
                         (fingerprint, "Hospitals and who pays them."))

    @inlineCallbacks
    def test_a_desk_s_page_renames_members_texts_and_settings(self):
        base = f"/admin/desks/{self.desk_a.uuid}"
        response, html = yield self.browser.get(base)
        self.assertEqual(response.code, 200)
        response, html = yield self.post(base + "/rename", html, name="B")
        self.assertEqual(response.code, 400)
        response, html = yield self.post(base + "/rename", html, name="Investigations")
        self.assertIn("Investigations", html)
        # Members: the accounts the form showed, ticked or not; an account made since stays as it is.
        yield add_journalist(self.server, "newcomer")
        response, html = yield self.browser.post(base + "/members", data=[
            ("csrf_token", self.browser.csrf(html)), ("shown", "alice"), ("shown", "bob"), ("member", "bob")])
        members = db_rows(self.server, "SELECT j.username FROM desk_members m JOIN journalists j ON j.id ="
                                       " m.journalist_id WHERE m.desk_id = ? ORDER BY 1", self.desk_a.id)
        self.assertEqual(members, [("bob",)])
        response, html = yield self.post(base + "/texts", html, language="es", title="Investigación",
                                         description="Dinero público.")
        response, html = yield self.post(base + "/settings", html, show_members="1", retention_days="30")
        self.assertEqual(response.code, 200)
        response, html = yield self.post(base + "/settings", html, retention_days="0")
        self.assertEqual(response.code, 400)
        self.assertIn("The number of days must be from 1 to", html)
        desk = self.newsroom.desks.by_id(self.desk_a.id)
        self.assertEqual((desk.name, desk.text("es", "name"), desk.text("es", "description"), desk.member_names,
                          desk.retention_days), ("Investigations", "Investigación", "Dinero público.", ("bob",), 30))
        seen = [(e["event"], e.get("target"), e.get("username")) for e in self.events()]
        for expected in (("admin.desk.renamed", "Investigations", "editor"), ("admin.desk.member_added", "bob", "editor"),
                         ("admin.desk.member_removed", "alice", "editor"),
                         ("admin.desk.described", "Investigations", "editor"),
                         ("admin.desk.changed", "Investigations", "editor")):
            self.assertIn(expected, seen)
        # A journalist who is not an admin does not get these pages.
        alice = JournalistBrowser(self.server, issue_client_cert(self.server, "alice"))
        self.addCleanup(alice.close)
        yield alice.log_in(self.alice)
        response, html = yield alice.get(base)
        self.assertEqual(response.code, 403)

    @inlineCallbacks
    def test_a_key_is_replaced_only_after_a_confirmation_that_shows_both_fingerprints(self):
        base = f"/admin/desks/{self.desk_a.uuid}"
        other = yield deferToThread(Station, self)
        new_key = self.read(other.public_key)
        response, html = yield self.browser.get(base)
        self.assertIn(grouped(self.desk_a.fingerprint), html)
        response, page = yield self.post(base + "/key", html, key=new_key)
        self.assertEqual(response.code, 200)
        self.assertIn("Replace the key of A", page)
        new_fingerprint = re.findall(r'class="fingerprint">([0-9A-F ]+)</code>', page)[1].replace(" ", "")
        self.assertEqual(re.findall(r'class="fingerprint">([0-9A-F ]+)</code>', page)[0], grouped(self.desk_a.fingerprint))
        self.assertEqual(self.newsroom.desks.by_id(self.desk_a.id).fingerprint, self.desk_a.fingerprint)  # not yet
        carried = htmllib.unescape(re.search(r'name="key" value="([^"]*)"', page).group(1))
        self.assertEqual(carried.strip(), new_key.strip())
        response, html = yield self.post(base + "/key", page, key=carried, confirm="yes")  # box not ticked
        self.assertEqual(response.code, 400)
        self.assertEqual(self.newsroom.desks.by_id(self.desk_a.id).fingerprint, self.desk_a.fingerprint)
        response, html = yield self.post(base + "/key", page, key=carried, confirm="yes", compared="yes")
        self.assertEqual(response.code, 200)
        self.assertEqual(self.newsroom.desks.by_id(self.desk_a.id).fingerprint, new_fingerprint)
        [event] = self.events("admin.desk.key_replaced")
        self.assertEqual((event["target"], event["fingerprint"], event["username"]), ("A", new_fingerprint, "editor"))
        self.assertIn(self.desk_a.fingerprint, event["detail"])
        # B's key is refused for A; the default desk's key is the instance's, never replaced here.
        response, html = yield self.post(base + "/key", html, key=self.read(self.b.public_key), confirm="yes",
                                         compared="yes")
        self.assertEqual(response.code, 400)
        self.assertIn("That key is already the key of desk B", html)
        default = f"/admin/desks/{self.newsroom.desks.default.uuid}"
        response, html = yield self.browser.get(default)
        self.assertNotIn('action="' + default + '/key"', html)
        response, html = yield self.post(default + "/key", html, key=new_key, confirm="yes", compared="yes")
        self.assertEqual(response.code, 400)
        self.assertEqual(len(self.events("admin.desk.key_replaced")), 1)

    @inlineCallbacks
    def test_a_desk_with_sources_or_the_default_desk_is_not_removed(self):
        identity, passphrase = yield self.new_source(self.desk_b)
        yield self.send(identity, passphrase, "keep my desk")
        for desk, says in ((self.desk_b, "cannot be removed: sources have chosen it"),
                           (self.newsroom.desks.default, "The default desk cannot be removed")):
            response, html = yield self.browser.get(f"/admin/desks/{desk.uuid}/remove")
            response, html = yield self.post(f"/admin/desks/{desk.uuid}/remove", html, confirm="yes")
            self.assertEqual(response.code, 400)
            self.assertIn(says, html)
        response, html = yield self.browser.get(f"/admin/desks/{self.desk_a.uuid}/remove")
        self.assertIn("Remove A", html)
        response, html = yield self.post(f"/admin/desks/{self.desk_a.uuid}/remove", html, confirm="yes")
        self.assertEqual(response.code, 200)
        self.assertEqual([d.name for d in self.newsroom.desks.all()], ["Newsroom", "B"])
        self.assertEqual([(e["target"], e["username"]) for e in self.events("admin.desk.removed")], [("A", "editor")])
        response, html = yield self.browser.get(f"/admin/desks/{self.desk_a.uuid}")
        self.assertEqual(response.code, 404)
