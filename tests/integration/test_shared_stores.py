"""No store shared by all visitors may be a clock of other sources' activity (adversary review).

Each test is the attack as it was measured, at the sizes the server used: an attacker fills a
bounded, oldest-out store with texts of its own (anonymous visitors, or a few codenames of its
own), a victim acts once, and the attacker looks at its own oldest text. A text that was there
before the victim acted and gone after it dated the victim's act to the attacker's probe
interval (9 of 9 language switches within 70 ms; 8 of 8 refused submissions). Nothing typed is
kept on the server now, so the attacker's view is the same whatever the victim does.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from tests._support import Browser, multipart_body, start_server

MiB = 1 << 20
# The budgets the stores had: 16 MiB of texts carried to the login page, 64 MiB of drafts.
CARRIED_BUDGET = 16 * MiB
DRAFTS_BUDGET = 64 * MiB
# What one carried text cost beyond its message: '["", "..."]', the sealing (nonce and MAC) and
# the store's own overhead per entry.
CARRIED_OVERHEAD = 8 + 40 + 256
EMOJI = "\U0001F600"  # 4 bytes in UTF-8: a message of 100,000 characters is 400,000 bytes


class SharedStoreOracleTests(unittest.TestCase):
    timeout = 600

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self, source_session_idle=3600.0)

    def browser(self) -> Browser:
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        return browser

    @inlineCallbacks
    def test_texts_typed_on_the_login_page_by_others_cannot_be_seen_to_come(self):
        """Finding 2: the login page's language menu kept what was typed for the page after the
        redirect, in 16 MiB shared by every visitor, the oldest out first."""

        @inlineCallbacks
        def keep(visitor: Browser, message: str):
            response, _ = yield visitor.post("/language/en?next=/login", follow=False,
                                             data={"codename": "", "msg": message})
            self.assertIn(response.code, (200, 303))

        @inlineCallbacks
        def still_there(visitor: Browser):
            response, html = yield visitor.get("/login")
            return "x" * 200 in html

        size = 100_000
        count = (CARRIED_BUDGET - 100) // (size + CARRIED_OVERHEAD)
        attackers = []
        for _ in range(count):  # anonymous visitors, one cookie each: 100 bytes short of full
            attackers.append(self.browser())
            yield keep(attackers[-1], "x" * size)
        attackers.append(self.browser())
        yield keep(attackers[-1], "x" * (CARRIED_BUDGET - 100 - count * (size + CARRIED_OVERHEAD) - CARRIED_OVERHEAD))

        before = yield still_there(attackers[0])  # its oldest text (looking keeps it: it waits there)
        victim = self.browser()  # someone switches the login page's language, a codename typed
        response, html = yield victim.post("/language/fr?next=/login", data={"codename": "seven words typed here"})
        self.assertIn('<html lang="fr" dir="ltr">', html)
        self.assertIn("seven words typed here", html)  # what the victim typed, still in its box
        after = yield still_there(attackers[1])  # the oldest now
        self.assertEqual(after, before)

    @inlineCallbacks
    def test_drafts_of_refused_forms_of_other_sources_cannot_be_seen_to_come(self):
        """Finding 3: a refused submission's message (and one carried across a language switch)
        was kept for the form's page after the redirect, in 64 MiB shared by every source, the
        oldest out first; two codenames of the attacker's own, 8 sessions each, filled it."""
        attacker = []
        for _codename in range(2):
            first = self.browser()
            codename = yield first.create_source()
            attacker.append(first)
            for _session in range(7):
                again = self.browser()
                response, _ = yield again.login(codename)
                attacker.append(again)
        pages = {}
        for browser in attacker:
            response, pages[browser] = yield browser.get("/lookup")

        @inlineCallbacks
        def refused(browser: Browser, token: str, message: str):
            # A form a bot would send (the hidden field filled): refused once the body is in.
            body, content_type = multipart_body([("csrf_token", browser.csrf(pages[browser])), ("form_token", token),
                                                 ("msg", message), ("website", "filled")], [("", b"")])
            response, html = yield browser.post("/submit", data=body, follow=False,
                                                headers={"User-Agent": Browser.USER_AGENT, "Content-Type": content_type})
            self.assertIn(response.code, (303, 403))

        sizes = [400_000] * ((DRAFTS_BUDGET - 100) // 400_000)
        sizes.append(DRAFTS_BUDGET - 100 - sum(sizes))
        held: list[tuple[Browser, str]] = []
        for n, size in enumerate(sizes):  # 100 bytes short of full, a few forms per session
            browser = attacker[n % len(attacker)]
            token = f"attacker-form-{n}"
            yield refused(browser, token, EMOJI * (size // 4) + "x" * (size % 4))
            held.append((browser, token))

        @inlineCallbacks
        def still_there(browser: Browser, token: str) -> Any:
            response, html = yield browser.get(f"/lookup?form={token}")
            return EMOJI * 50 in html or "x" * 50 in html

        before = yield still_there(*held[0])
        victim = self.browser()
        yield victim.create_source()
        response, pages[victim] = yield victim.get("/lookup")
        yield refused(victim, "victim-form", "v" * 2000)
        after = yield still_there(*held[0])
        self.assertEqual(after, before)

    @inlineCallbacks
    def test_the_session_table_is_sized_at_start_up_from_the_timed_argon2id_run(self):
        """Source sessions: a full table pushed out its least recently seen session, which told
        an attacker who kept all its other sessions seen that someone had logged in. Sized from
        the Argon2id run timed at start-up, the table holds more than logins can make in a
        session's lifetime (tests.test_sessions fills it at that pace)."""
        service = self.server.service
        yield service.calibrated
        answers, sessions = service.newsroom.queues.answers, service.source.sessions
        within_reach = (sessions.absolute_timeout + 60.0) * answers.parallel / max(answers.run_seconds, 1e-3)
        self.assertGreaterEqual(sessions._max, 2 * within_reach)
