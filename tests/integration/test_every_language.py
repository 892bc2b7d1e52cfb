"""Issue 31 item 5: no English sentence on any page a source can reach, in any shipped language.

One server; a crawler (tests/_source_states.py) walks every source state over plain HTTP, as a
browser with JavaScript off, in every language at once; tests/_english.py reads each page's
text for English left in it. The crawl's time is logged to trial's test.log.
"""
from __future__ import annotations

from twisted.internet.defer import inlineCallbacks
from twisted.logger import Logger
from twisted.trial import unittest

from deaddrop.web.source import i18n
from tests._english import EnglishFinder, text_chunks
from tests._source_states import crawl

_log = Logger()

# What each state says in English: the crawl reached the state it is named for.
REACHED = {
    "index": "Share information with",
    "safety": "Submissions are kept only as long as our journalists need them",
    "index-not-tor-browser": "You do not seem to be using Tor Browser",
    "not-found": "There is nothing at this address",
    "not-allowed": "That action is not available this way",
    "bad-address": "That address could not be read",
    "tor2web": "You reached this page through a proxy service (tor2web)",
    "upload-elsewhere": "This address does not accept uploads",
    "login-expired": "you were logged out 60 minutes after logging in. Please log in again.",
    "login": "Type the words of your codename",
    "login-error": "These words are not in the codename word list",
    "login-stale": "This page was out of date. Please enter your codename again.",
    "create-stale": "This page was out of date. Nothing was stored. Please get a new codename.",
    "create-not-generated": "That codename was not made for this visit",
    "generate": "This is your codename",
    "lookup-first": "Your codename is active",
    "generate-logged-in": "You are already logged in",
    "refused-empty": "Please write a message or choose a file",
    "refused-too-long": "Your message is too long: it has 100,001 characters",
    "refused-bot": "Your submission could not be accepted",
    "refused-stale-form": "This form was out of date",
    "refused-too-large": "Your files are too large: this drop box accepts at most 0.0655 MB in total",
    "refused-too-many-files": "This drop box takes at most 2 files in one submission",
    "received-first": "What happens next",
    "received-message-and-documents": "We received your message and 2 documents",
    "received-one-document": "We received 1 document",
    "nothing-received": "Submissions must be sent with the form on your page",
    "lookup-replies": "2 new replies",
    "reply-deleted": "Reply deleted.",
    "reply-not-found": "That reply was not found",
    "delete-stale": "This page was out of date. Nothing was deleted.",
    "replies-all-deleted": "1 reply deleted.",
    "language-switch-files": "Files cannot be carried over to another language: please choose them again",
    "lookup-codename": "Show my codename",
    "logged-out": "You are logged out",
    "lookup-returning": "Send more and read replies",
    "closed": "The newsroom has closed the conversation",
    "expired-new-source": "Your codename is active",
    "login-message-kept": "Nothing was stored yet: your message is kept below",
    "safety-retention": "at the latest 30 days after they arrive",
    "demo-new-source": "DEMO INSTANCE",
    "lookup-no-files": "This drop box does not accept files at the moment.",
    "refused-no-files": "you can send it without the files",
}


class EveryLanguageTests(unittest.TestCase):
    timeout = 600

    @inlineCallbacks
    def test_no_english_on_any_source_page_in_any_language(self):
        codes = list(i18n.LANGUAGES)
        seen, seconds = yield crawl(self, codes)
        english = seen["en"]
        self.assertEqual(set(english), set(REACHED))
        for state, said in REACHED.items():
            self.assertIn(said, " ".join(text_chunks(english[state].html)[1]), state)
        problems = []
        for code in codes:
            lang = i18n.language(code)
            finder = EnglishFinder(code) if code != "en" and lang.complete else None
            for state, page in seen[code].items():
                if page.status != english[state].status:
                    problems.append(f"{code}/{state}: status {page.status}, in English {english[state].status}")
                if f'<html lang="{lang.tag}" dir="{lang.direction}">' not in page.html:
                    problems.append(f"{code}/{state}: not a page in {code}")
                problems += [f"{code}/{state}: {said}" for said in (finder.findings(page.html) if finder else ())]
        pages = sum(len(states) for states in seen.values())
        _log.info("issue 31 crawler: {pages} pages ({states} states x {languages} languages) in {s:.1f}s",
                  pages=pages, states=len(english), languages=len(codes), s=seconds)
        self.assertEqual(problems, [], "\n".join(problems))
        # The finder is real: it finds English on every English page.
        finder = EnglishFinder("de")
        self.assertEqual([s for s, page in english.items() if not finder.findings(page.html)], [])
