"""The source's choice of desks (issue 29), over HTTP, without JavaScript: a new source sees the
desks before its first submission, its choice follows it on every later page inside a closed
panel, it may add a desk and never remove one; with one desk, nothing changes."""
from __future__ import annotations

import html as htmllib
import os
import re

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from tests._support import Browser, multipart_body, start_server
from tests.integration.test_admin_cli import run_cli as run_admin
from tests.integration.test_desks import TwoDesks, db_rows

_CODENAME = re.compile(r'name="codename" value="([^"]+)"')
_PANEL = re.compile(r'<details class="card reveal" id="desks">.*?</details>', re.S)


@inlineCallbacks
def new_codename(browser: Browser):
    """/generate, then /create: -> the page it led to (response, html)."""
    response, html = yield browser.get("/generate")
    codename = _CODENAME.search(html).group(1)
    return (yield browser.post("/create", data={"codename": codename, "csrf_token": browser.csrf(html)}))


def ticked(html: str) -> list[str]:
    """The desks' names the page shows as already chosen (ticked and fixed)."""
    return re.findall(r'<input[^>]*checked=""[^>]*disabled=""[^>]*/?><label[^>]*>([^<]+)</label>', html)


class DeskChoiceTests(TwoDesks):
    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        data = ("--data-dir", self.server.data_dir)
        for argv in (("rename", "A", "Investigations"), ("rename", "B", "Local news"),
                     ("describe", "Investigations", "--description", "Public money and who spends it."),
                     ("describe", "Investigations", "--lang", "es", "--title", "Investigación",
                      "--description", "El dinero público y quién lo gasta.")):
            code, _, err = yield deferToThread(run_admin, "desk", *argv, *data)
            self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)

    def choose(self, html: str, *desks):
        """Post the choice page's form as a browser does: the desks ticked, and a message it
        carries (refused for want of a choice) with its form's token."""
        fields = [("csrf_token", self.browser.csrf(html))] + [("desk", d.uuid) for d in desks]
        kept = re.search(r'<textarea name="msg"[^>]*>([^<]*)</textarea>', html)
        if kept:
            token = re.search(r'name="form_token" value="([^"]+)"', html).group(1)
            fields += [("form_token", token), ("msg", htmllib.unescape(kept.group(1)))]
        return self.browser.post("/desks", data=fields)

    @inlineCallbacks
    def test_a_new_source_chooses_before_its_first_submission_and_its_choice_follows_it(self):
        response, html = yield new_codename(self.browser)
        self.assertEqual(response.code, 200)
        self.assertIn("<h1>Choose who reads your messages</h1>", html)
        for shown in ("Investigations", "Public money and who spends it.", "Local news", "Read by 1 person."):
            self.assertIn(shown, html)
        # A desk nobody reads is not offered: a source that chose it would write to no one.
        self.assertNotIn("Newsroom", html)
        self.assertNotIn("Read by 0 people.", html)
        self.assertNotIn("alice", html)  # how many read a desk, never who (unless it says so)
        self.assertNotIn('id="desks"', html)
        # The submission form waits for the choice: /lookup leads here until one is made.
        response, again = yield self.browser.get("/lookup")
        self.assertIn("<h1>Choose who reads your messages</h1>", again)
        response, html = yield self.choose(html)
        self.assertEqual(response.code, 400)
        self.assertIn("Choose at least one desk.", html)

        response, html = yield self.choose(html, self.desk_a)
        self.assertEqual(response.code, 200)
        self.assertIn("Your choice is saved.", html)
        [panel] = _PANEL.findall(html)  # closed: opened only by the source
        self.assertIn("Your messages go to:", panel)
        self.assertIn("Investigations", panel)
        self.assertNotIn("Local news", panel)
        self.assertIn('href="/desks">Add a desk', panel)
        self.assertNotIn("Investigations", _PANEL.sub("", html))  # nowhere else on the page
        response, html = yield self.browser.submit("for investigations")
        self.assertEqual(response.code, 200)
        rows = db_rows(self.server, "SELECT d.desk_id FROM submission_desks d JOIN submissions s"
                                    " ON s.id = d.submission_id")
        self.assertEqual(rows, [(self.desk_a.id,)])
        self.assertEqual(len(_PANEL.findall(html)), 1)  # the page after sending says it too

        # Later: B added, A stays (it cannot be unticked); B's members shown once B says so.
        code, _, err = yield deferToThread(run_admin, "desk", "set", "Local news", "--show-members", "on",
                                           "--data-dir", self.server.data_dir)
        self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()
        response, html = yield self.browser.get("/desks")
        self.assertEqual(ticked(html), ["Investigations"])
        self.assertIn("Your messages already go here.", html)
        self.assertIn("<li dir=\"auto\">bob</li>", html)
        self.assertNotIn("alice", html)
        # Sending only A's uuid again, or nothing, removes nothing and adds nothing.
        response, html = yield self.choose(html)
        self.assertEqual(len(db_rows(self.server, "SELECT * FROM source_desks")), 1)
        response, html = yield self.browser.get("/desks")
        response, html = yield self.choose(html, self.desk_b)
        [panel] = _PANEL.findall(html)
        self.assertIn("Investigations", panel)
        self.assertIn("Local news", panel)
        self.assertNotIn("Add a desk", panel)  # every desk offered is chosen (the default has no reader)
        response, html = yield self.browser.submit("for both")
        self.assertEqual(sorted(db_rows(self.server, "SELECT desk_id FROM submission_desks")),
                         sorted([(self.desk_a.id,), (self.desk_a.id,), (self.desk_b.id,)]))

    @inlineCallbacks
    def test_a_submission_before_the_choice_leads_to_it_and_its_message_waits_in_its_form(self):
        """DeskNotChosen through /submit's table: a form shown before a second desk existed, or
        posted straight; with files (refused at their first byte) and without."""
        response, html = yield new_codename(self.browser)
        for files in ([], [("plan.pdf", b"PDF-BYTES" * 1000)]):
            fields = [("csrf_token", self.browser.csrf(html)), ("msg", "TYPED-BEFORE-CHOOSING")]
            body, content_type = multipart_body(fields, files or [("", b"")])
            response, html = yield self.browser.post("/submit", data=body, headers={
                "User-Agent": self.browser.USER_AGENT, "Content-Type": content_type})
            self.assertEqual(response.code, 409)  # the choice page, answered now, the message in its form
            self.assertIn(">TYPED-BEFORE-CHOOSING</textarea>", html)
            self.assertIn("<h1>Choose who reads your messages</h1>", html)
            self.assertIn("Your message has not been sent yet: first choose who reads it.", html)
            self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions"), [(0,)])
        self.assertEqual(os.listdir(self.newsroom.store.tmp), [])  # no file byte kept
        response, html = yield self.choose(html, self.desk_b)
        self.assertIn("Your choice is saved. Your message is in the form below: press Send to send it.", html)
        self.assertIn(">TYPED-BEFORE-CHOOSING</textarea>", html)
        fields = [("csrf_token", self.browser.csrf(html)), ("msg", "TYPED-BEFORE-CHOOSING"),
                  ("form_token", re.search(r'name="form_token" value="([^"]+)"', html).group(1))]
        body, content_type = multipart_body(fields, [("", b"")])
        response, html = yield self.browser.post("/submit", data=body, headers={
            "User-Agent": self.browser.USER_AGENT, "Content-Type": content_type})
        self.assertEqual(response.code, 200)
        self.assertEqual(db_rows(self.server, "SELECT desk_id FROM submission_desks"), [(self.desk_b.id,)])

    @inlineCallbacks
    def carried_to_the_choice(self, message: str):
        """A new source, logged out, logs in again with ``message`` carried through the login
        page: -> the choice page it leads to (response, html)."""
        response, html = yield self.browser.get("/generate")
        codename = _CODENAME.search(html).group(1)
        yield self.browser.post("/create", data={"codename": codename, "csrf_token": self.browser.csrf(html)})
        yield self.browser.get("/logout")
        response, html = yield self.browser.get("/login")
        return (yield self.browser.post("/login", data={
            "codename": codename, "msg": message, "csrf_token": self.browser.csrf(html)}))

    @inlineCallbacks
    def test_a_message_carried_through_the_login_page_waits_for_the_choice_too(self):
        response, html = yield self.carried_to_the_choice("CARRIED-BEFORE-CHOOSING")
        self.assertIn("Your message has not been sent yet: first choose who reads it.", html)
        response, html = yield self.choose(html, self.desk_a)
        self.assertIn(">CARRIED-BEFORE-CHOOSING</textarea>", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions"), [(0,)])

    @inlineCallbacks
    def test_a_desk_chosen_while_it_stopped_being_offered_is_never_replaced_by_the_other(self):
        """The source ticks Local news and sends the choice page; meanwhile Local news lost its last
        member, which leaves one desk offered: the choice must not be dropped in silence, leaving a
        source who meant Local news to send to Investigations, nor the message it carried lost
        (adversary review 3: it was redirected to /lookup, which names no desk with one offered,
        and its next message went to Investigations)."""
        response, html = yield self.carried_to_the_choice("FOR-LOCAL-NEWS-ONLY")
        self.assertIn("<h1>Choose who reads your messages</h1>", html)
        code, _, err = yield deferToThread(run_admin, "desk", "members", "Local news", "--remove", "bob",
                                           "--data-dir", self.server.data_dir)
        self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()
        response, html = yield self.choose(html, self.desk_b)
        self.assertEqual(response.code, 400)
        self.assertIn("<h1>Choose who reads your messages</h1>", html)
        self.assertIn("Choose at least one desk.", html)
        self.assertNotIn("Local news", html)  # the desks as they are now: Investigations alone
        self.assertIn(">FOR-LOCAL-NEWS-ONLY</textarea>", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM source_desks"), [(0,)])
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions"), [(0,)])
        # Ticking the one desk offered now is a choice like any other: saved, the message back.
        response, html = yield self.choose(html, self.desk_a)
        self.assertEqual(response.code, 200)
        self.assertIn("Your choice is saved. Your message is in the form below: press Send to send it.", html)
        self.assertIn(">FOR-LOCAL-NEWS-ONLY</textarea>", html)
        self.assertEqual(db_rows(self.server, "SELECT desk_id FROM source_desks"), [(self.desk_a.id,)])

    @inlineCallbacks
    def test_a_choice_page_sent_with_nothing_ticked_once_no_choice_is_needed_keeps_its_message(self):
        """The message waiting on the choice page comes back in the submission form when, by the
        time the page is sent with nothing ticked, there is nothing to choose: one desk is left
        (it was redirected to /lookup, the message lost)."""
        response, html = yield self.carried_to_the_choice("WAITING-FOR-A-DESK")
        code, _, err = yield deferToThread(run_admin, "desk", "members", "Local news", "--remove", "bob",
                                           "--data-dir", self.server.data_dir)
        self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()
        response, html = yield self.choose(html)
        self.assertEqual(response.code, 200)
        self.assertIn("<h1>Send more and read replies</h1>", html)
        self.assertIn("Your message is in the form below: press Send to send it.", html)
        self.assertIn(">WAITING-FOR-A-DESK</textarea>", html)
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions"), [(0,)])

    @inlineCallbacks
    def test_the_choice_page_carries_the_message_across_its_language_menu_and_keeps_it_nowhere(self):
        """The message refused for want of a choice rides in the choice page's form (a store of
        drafts shared by all sources was a clock of their activity: docs/threat-model.md,
        "Shared stores"), so that page's language menu posts it along, like any page with a form."""
        response, html = yield new_codename(self.browser)
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)), ("msg", "KEPT-ACROSS-9b1e")],
                                            [("", b"")])
        response, html = yield self.browser.post("/submit", data=body, headers={
            "User-Agent": self.browser.USER_AGENT, "Content-Type": content_type})
        self.assertIn('form="desk-form" formaction="/language/es?next=/desks" formmethod="post"', html)
        sessions = self.server.service.source.sessions.where(lambda s: True)
        self.assertEqual(sorted(name for s in sessions for name in s.sealed), ["codename", "passphrase"])
        token = re.search(r'name="form_token" value="([^"]+)"', html).group(1)
        response, html = yield self.browser.post("/language/es?next=/desks", data={
            "csrf_token": self.browser.csrf(html), "form_token": token, "msg": "KEPT-ACROSS-9b1e"})
        self.assertEqual(response.code, 200)
        self.assertIn('<html lang="es" dir="ltr">', html)
        self.assertIn(">KEPT-ACROSS-9b1e</textarea>", html)
        response, html = yield self.choose(html, self.desk_a)
        self.assertIn(">KEPT-ACROSS-9b1e</textarea>", html)
        self.assertEqual(re.search(r'name="form_token" value="([^"]+)"', html).group(1), token)

    @inlineCallbacks
    def test_the_desks_are_described_in_the_source_s_language(self):
        response, html = yield self.browser.get("/language/es?next=/generate")
        response, html = yield new_codename(self.browser)
        self.assertIn("Investigación", html)
        self.assertIn("El dinero público y quién lo gasta.", html)
        self.assertIn("Local news", html)  # no Spanish text: its name
        self.assertIn('lang="es"', html)


class OneDeskTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_with_one_desk_nothing_changes_on_the_pages(self):
        server = yield start_server(self)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.submit("one desk")
        self.assertEqual(response.code, 200)
        for page in ("/lookup", "/desks"):
            response, html = yield browser.get(page)
            self.assertIn("<h1>Send more and read replies</h1>", html)
            self.assertNotIn("desk", html.lower())


class UnreadDeskTests(TwoDesks):
    """A desk with no journalist is not offered; with one desk offered, nothing changes."""

    @inlineCallbacks
    def test_a_desk_nobody_reads_is_not_offered_and_one_offered_desk_needs_no_choice(self):
        data = ("--data-dir", self.server.data_dir)
        code, _, err = yield deferToThread(run_admin, "desk", "members", "B", "--remove", "bob", *data)
        self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()
        self.assertEqual([d.name for d in self.newsroom.desks.offered()], ["A"])
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        response, html = yield new_codename(browser)
        self.assertNotIn("Choose who reads your messages", html)  # one desk offered: no choice
        self.assertNotIn('id="desks"', html)
        response, html = yield browser.submit("to whoever reads")
        self.assertEqual(response.code, 200)
        rows = db_rows(self.server, "SELECT d.desk_id FROM submission_desks d JOIN submissions s"
                                    " ON s.id = d.submission_id")
        self.assertEqual(rows, [(self.desk_a.id,)])
        # A desk nobody reads cannot be added either, not even by a hand-made form.
        identity, _ = yield self.new_source(self.desk_a)
        from deaddrop.newsroom.desks import NoSuchDesk
        yield self.assertFailure(self.newsroom.add_desks(identity, [self.desk_b.uuid]), NoSuchDesk)
