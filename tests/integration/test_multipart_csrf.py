"""CSRF on every state-changing request, multipart bodies included (issue 26, item 7).

A multipart body is read by the upload as it arrives, not by the route guards, so each route that
takes one must check the token itself. The routes are found from the Klein route tables and the
sites that serve them (``takes_upload``), so a route that starts taking multipart bodies is
covered here without anyone remembering to: a logged-in user's token-less body gets 403 and
changes nothing (no row, no stored file, nothing sources see). Every other POST route refuses a
multipart body unread (415).
"""
from __future__ import annotations

import os
import re
import sqlite3

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom import png
from deaddrop.web.journalist.api import JournalistAPI
from deaddrop.web.journalist.app import JournalistInterface
from deaddrop.web.source.app import SourceInterface
from tests._support import (Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert,
                            multipart_body, start_journalist_server)
from tests.integration.test_journalist_api import db_rows

# Token-less bodies each multipart route would otherwise act on: (fields, files, file field).
# A multipart route missing here fails the test, naming it: add what it would act on.
TOKENLESS_BODIES = {
    "/submit": [
        ([("msg", "A MESSAGE WITH NO TOKEN")], [("", b"")], "fh"),
        ([("msg", "A MESSAGE WITH NO TOKEN")], [("a.txt", b"A FILE WITH NO TOKEN")], "fh"),
    ],
    "/admin/source-logo": [
        ([("language", "en"), ("remove", "1")], [], "logo"),  # the removal of the report
        ([("language", "en")], [("logo.png", png.tiny_png(4, 4))], "logo"),
    ],
}
_VARIABLE = re.compile(r"<(?:[^:<>]+:)?[^<>]+>")


def post_routes(interface: type, prefix: str = "") -> set[str]:
    """Every POST route of a Klein interface class, URL variables filled with a stand-in."""
    return {prefix + _VARIABLE.sub("00000000-0000-0000-0000-000000000000", rule.rule)
            for rule in interface.app.url_map.iter_rules() if "POST" in (rule.methods or ())}


def state_of(data_dir: str) -> dict:
    """Every row of every table and every stored file: what a state change would change."""
    conn = sqlite3.connect(os.path.join(data_dir, "db.sqlite"))
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        state: dict = {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in tables}
    finally:
        conn.close()
    state["store"] = sorted(os.path.relpath(os.path.join(d, n), data_dir)
                            for d, _, names in os.walk(os.path.join(data_dir, "store")) for n in names)
    return state


class MultipartCsrfTests(unittest.TestCase):
    timeout = 90

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        admin = yield add_journalist(self.server, "alice", admin=True)
        self.journalist = JournalistBrowser(self.server, issue_client_cert(self.server, "alice"))
        self.addCleanup(self.journalist.close)
        response, html = yield self.journalist.log_in(admin, TotpDevice(self.server, admin.totp_secret))
        self.assertEqual(response.code, 200, html[:300])
        self.source = Browser(self.server.source_url)
        self.addCleanup(self.source.close)
        yield self.source.create_source()
        response, html = yield self.source.submit("a first message")
        self.assertEqual(response.code, 200)
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources")
        yield self.server.service.newsroom.replies.key_ready(source_id)  # made in the background: a change
        # A logo to remove (with the token, as the settings page sends it).
        yield self.journalist.get("/admin/source-texts")
        body, content_type = multipart_body([("csrf_token", self.journalist.csrf()), ("language", "en")],
                                            [("logo.png", png.tiny_png(8, 8))], file_field="logo")
        response, html = yield self.journalist.post("/admin/source-logo", data=body,
                                                    headers={"Content-Type": content_type})
        self.assertIn("Logo for English saved", html)

    def interfaces(self):
        """(name, every POST route, the site serving them, the logged-in client that posts)."""
        service = self.server.service
        return [
            ("source", post_routes(SourceInterface), service.source.site(reactor), self.source),
            ("journalist", post_routes(JournalistInterface) | post_routes(JournalistAPI, "/api/v1"),
             service.journalist.site(reactor), self.journalist),
        ]

    @inlineCallbacks
    def logo_shown(self) -> bool:
        response, html = yield self.source.get("/")
        return "<img" in html

    @inlineCallbacks
    def test_a_multipart_body_without_a_token_is_refused_by_every_route_and_changes_nothing(self):
        covered = set()
        for side, routes, site, client in self.interfaces():
            multipart = {r for r in routes if site.takes_upload(b"POST", r.encode())}
            self.assertEqual(multipart - set(TOKENLESS_BODIES), set(),
                             f"a {side} route takes multipart bodies: add its token-less bodies to TOKENLESS_BODIES")
            for route in sorted(routes):
                bodies = TOKENLESS_BODIES.get(route, [([("x", "y")], [("a.txt", b"z")], "fh")])
                for fields, files, file_field in bodies:
                    before = state_of(self.server.data_dir)
                    body, content_type = multipart_body(fields, files, file_field=file_field)
                    response, html = yield client.post(route, data=body, headers={"Content-Type": content_type})
                    expected = 403 if route in multipart else 415
                    self.assertEqual(response.code, expected, (side, route, fields, html[:300]))
                    self.assertEqual(state_of(self.server.data_dir), before, (side, route, fields))
                    if route in multipart:
                        covered.add(route)
        self.assertEqual(covered, set(TOKENLESS_BODIES))  # both multipart routes were found and tried
        self.assertTrue((yield self.logo_shown()))
        response, html = yield self.source.get("/lookup")
        self.assertNotIn("WITH NO TOKEN", html)
