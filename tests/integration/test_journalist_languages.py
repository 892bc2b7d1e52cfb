"""Issue 31 item 3: each journalist account keeps the language it chose for the journalist
interface and its digest; until it chooses, the browser's language decides. The real server
over mutual TLS; the database read directly to see what is kept."""
from __future__ import annotations

import os
import sqlite3

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom.accounts import Journalist
from deaddrop.newsroom.languages import JOURNALIST_LANGUAGES
from deaddrop.store import migrations
from deaddrop.web.journalist import i18n
from tests._support import JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, start_journalist_server
from tests.integration.test_journalist_web import db_rows

# The language the tests choose: the last on the list (right to left once Farsi ships).
CHOSEN = JOURNALIST_LANGUAGES[-1]


def _html_tag(code: str) -> str:
    speech = i18n.speech(code)
    return f'<html lang="{speech.tag}" dir="{speech.direction}">'


class AccountLanguageTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.cert = issue_client_cert(self.server, "alice")
        self.account = yield add_journalist(self.server, "alice", admin=True)
        self.device = TotpDevice(self.server, self.account.totp_secret)

    @inlineCallbacks
    def logged_in(self, accept_language: str | None = None):
        b = JournalistBrowser(self.server, self.cert)
        self.addCleanup(b.close)
        headers = {"User-Agent": b.USER_AGENT, **({"Accept-Language": accept_language} if accept_language else {})}
        response, html = yield b.get("/login", headers=headers)
        response, html = yield b.post("/login", headers=headers, data={
            "csrf_token": b.csrf(html), "username": "alice", "passphrase": self.account.passphrase,
            "one_time_code": self.device.code()})
        self.assertEqual(response.code, 200, html[:300])
        return b, headers

    def stored(self):
        return db_rows(self.server, "SELECT language FROM journalists WHERE username = 'alice'")[0][0]

    @inlineCallbacks
    def test_the_language_chosen_on_the_account_page_is_kept_with_the_account(self):
        b, headers = yield self.logged_in()
        response, html = yield b.get("/account", headers=headers)
        for code, name in i18n.choices():  # each language named in its own words
            self.assertIn(f'value="{code}" lang="{i18n.speech(code).tag}"', html)
            self.assertIn(f">{name}</option>", html)
        self.assertIsNone(self.stored())
        response, html = yield b.post("/account/language", headers=headers,
                                      data={"csrf_token": b.csrf(html), "language": CHOSEN})
        self.assertEqual(response.code, 200)
        self.assertIn(_html_tag(CHOSEN), html)
        self.assertIn(i18n.speech(CHOSEN)._("Language saved."), html)
        self.assertIn(f'<option value="{CHOSEN}" lang="{i18n.speech(CHOSEN).tag}" selected="">', html)
        self.assertEqual(self.stored(), CHOSEN)
        # Another browser, another day, a browser asking for English: the account's choice wins.
        other, headers = yield self.logged_in(accept_language="en-GB,en;q=0.9")
        response, html = yield other.get("/sources", headers=headers)
        self.assertIn(_html_tag(CHOSEN), html)

    @inlineCallbacks
    def test_an_unknown_language_is_refused_and_nothing_is_stored(self):
        b, headers = yield self.logged_in()
        response, html = yield b.get("/account", headers=headers)
        for code in ("xx", "", "en'; DROP TABLE journalists; --"):
            response, _html = yield b.post("/account/language", headers=headers,
                                           data={"csrf_token": b.csrf(html), "language": code})
            self.assertEqual(response.code, 400)
        self.assertIsNone(self.stored())

    @inlineCallbacks
    def test_until_one_is_chosen_the_browser_s_language_decides(self):
        b, headers = yield self.logged_in(accept_language=f"{i18n.speech(CHOSEN).tag};q=0.9, xx")
        response, html = yield b.get("/sources", headers=headers)
        self.assertIn(_html_tag(CHOSEN), html)
        self.assertIsNone(self.stored())


class SchemaTests(unittest.TestCase):
    def test_accounts_made_before_the_language_column_keep_everything_and_have_none_chosen(self):
        path = os.path.join(self.mktemp() + ".sqlite")
        conn = sqlite3.connect(path, isolation_level=None)
        # The schema just before the journalist's language (issue 31 item 3).
        [language_step] = [v for v, step in migrations.STEPS if step is migrations._v12_journalist_language]
        conn.executescript(migrations.BASELINE_SQL)
        for version, step in migrations.STEPS[:language_step - migrations.BASELINE - 1]:
            step(conn)
        conn.execute("INSERT INTO meta(key, value) VALUES('schema_version', ?)", (str(language_step - 1),))
        conn.execute("INSERT INTO journalists(uuid, username, password_hash, totp_secret, is_admin, created_at,"
                     " password_changed_at) VALUES ('u-1', 'alice', 'hash', 'SECRET', 1, 1.0, 1.0)")
        self.assertEqual(migrations.upgrade(conn), (language_step - 1, migrations.CURRENT))
        conn.row_factory = sqlite3.Row
        [row] = conn.execute("SELECT * FROM journalists").fetchall()
        conn.close()
        self.assertEqual((row["username"], row["password_hash"], row["totp_secret"], row["language"]),
                         ("alice", "hash", "SECRET", None))
        self.assertIsNone(Journalist.from_row(row).language)
