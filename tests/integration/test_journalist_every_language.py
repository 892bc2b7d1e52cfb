"""Issue 31 item 3: no English sentence on any journalist page in any journalist language.

One server with a source that sent a message and a document and got a reply; a crawler
(tests/_journalist_states.py) walks every journalist and admin page, refusal and flash it can
reach without a security key, in each language in turn; tests/_english.py reads each page's text
for English left in it (the journalist catalogue's messages, or English prose in no catalogue).
"""
from __future__ import annotations

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.i18n import catalogs
from deaddrop.newsroom.languages import JOURNALIST_LANGUAGES
from deaddrop.web.journalist import i18n
from tests._english import EnglishFinder, text_chunks
from tests._journalist_states import People, crawl
from tests._support import Browser, TotpDevice, add_journalist, issue_client_cert, start_journalist_server

# What each state says in English: the crawl reached the state it is named for.
REACHED = {
    "login": "Journalist log in",
    "login-failed": "Login failed. Check your username, passphrase and one-time code.",
    "login-wrong-certificate": "This browser's certificate was issued for another user.",
    "login-expired": "Your session expired. Please log in again.",
    "not-found-anonymous": "There is nothing at this address.",
    "account-language-saved": "Language saved.",
    "sources": "Select all sources on this page",
    "sources-none-match": "No source matches these filters.",
    "sources-select-all": "Clear the selection",
    "sources-starred": "Starred 1 source.",
    "sources-nothing-selected": "Select at least one source first.",
    "sources-confirm-delete": "Delete 1 source?",
    "sources-bad-action": "Choose an action for the selected sources.",
    "source": "Files download as stored: encrypted.",
    "source-marked-unread": "Marked 2 submissions unread.",
    "source-confirm-delete-files": "Deleted files are gone from the server for good.",
    "source-nothing-selected": "Select at least one submission first.",
    "source-reply-empty": "Write a reply first.",
    "source-confirm-delete": "The source's codename will no longer work.",
    "source-not-found": "There is no such source (it may have been deleted).",
    "stale-form": "The form was stale or came from elsewhere. Nothing was changed.",
    "account": "The language of these pages and of your digest mail.",
    "account-wrong-passphrase": "That passphrase or one-time code was wrong. Nothing was changed.",
    "key-enrol-no-name": "Security keys work only when this interface is opened by its name: localhost.",
    "api-code-without-a-key": "Register a security key first.",
    "users": "A passphrase and a two-factor secret are generated and shown once.",
    "users-confirm-delete": "can no longer log in",
    "users-confirm-reset-password": "old passphrase stops working",
    "users-confirm-reset-2fa": "must add it to their authenticator app",
    "users-bad-name": "That username cannot be used",
    "users-added": "They are shown only this once.",
    "users-no-such-user": "There is no such user.",
    "settings": "Instance settings",
    "settings-refused": "The largest upload must be a number of MB",
    "settings-saved": "Settings saved.",
    "source-texts": "What sources see",
    "source-texts-saved": "Texts for Deutsch saved.",
    "desks": "Each desk has its own submission key",
    "desks-bad-name": "A desk name must be 1 to",
    "desk": "1 source has chosen this desk.",
    "desk-saved": "Saved.",
    "desk-confirm-remove": "A desk that a source has chosen cannot be removed",
    "desk-not-removed": "The default desk cannot be removed",
    "not-found": "There is nothing at this address.",
}


class JournalistEveryLanguageTests(unittest.TestCase):
    timeout = 600

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        admin = yield add_journalist(self.server, "alice", admin=True)
        other = yield add_journalist(self.server, "bob")
        self.people = People(admin, issue_client_cert(self.server, "alice"), TotpDevice(self.server, admin.totp_secret),
                             other, issue_client_cert(self.server, "bob"))
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("a message from a source", [("notes.txt", b"a document")])

    @inlineCallbacks
    def test_no_english_on_any_journalist_page_in_any_language(self):
        problems = []
        for code in JOURNALIST_LANGUAGES:
            seen = yield crawl(self, self.server, self.people, code)
            self.assertEqual(set(seen), set(REACHED))
            speech = i18n.speech(code)
            finder = EnglishFinder(code, catalogs.JOURNALIST.locale_dir) if code != "en" else None
            for state, html in sorted(seen.items()):
                page_lang, chunks = text_chunks(html)
                if code == "en":
                    self.assertIn(REACHED[state], " ".join(chunks), f"{state}: {' | '.join(chunks)[:1500]}")
                    continue
                if f'<html lang="{speech.tag}" dir="{speech.direction}">' not in html:
                    problems.append(f"{code}/{state}: the page is not marked {speech.tag} {speech.direction}")
                problems += [f"{code}/{state}: {found}" for found in finder.findings(html)]
        self.assertEqual(problems, [], "\n".join(problems))

    def test_the_finder_finds_a_page_left_in_english(self):
        """The check above is not vacuous: an English page in German is found wanting."""
        html = ('<html lang="de" dir="ltr"><body><h1>Sources</h1><p>Files download as stored: encrypted. '
                'Decrypt them on the Secure Viewing Station.</p><p>Quellen</p></body></html>')
        found = EnglishFinder("de", catalogs.JOURNALIST.locale_dir).findings(html)
        self.assertEqual(len(found), 2, found)
