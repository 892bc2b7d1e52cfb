"""Anonymous visitors cost no server state: a real server, a flood of anonymous requests, and
form tokens that are forged, expired or lifted from another browser."""
from __future__ import annotations

import base64
import http.client
import os
import re
import time

from twisted.internet.defer import DeferredList, inlineCallbacks
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.trial import unittest

from deaddrop.web._common.form_tokens import FormTokens
from deaddrop.web.source.app import FORM_LIFETIME
from tests._support import Browser, start_server

_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_MESSAGE = "TYPED-BEFORE-THE-FORM-WENT-STALE"
_log = Logger()


def _flood(port: int, requests: int) -> list[float]:
    """Anonymous GET /, /login and /generate over keep-alive connections, no cookies kept (as
    a flooding client would). -> each request's duration."""
    times = []
    paths = ("/generate", "/login", "/", "/login")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for i in range(requests):
            start = time.monotonic()
            conn.request("GET", paths[i % len(paths)])
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
            times.append(time.monotonic() - start)
            if response.getheader("connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    finally:
        conn.close()
    return times


class _AnonymousTest(unittest.TestCase):
    timeout = 300

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self)
        self.service = self.server.service
        self.port = int(self.server.source_url.rsplit(":", 1)[1].rstrip("/"))

    def browser(self) -> Browser:
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        return browser

    def _source_count(self):
        return self.service.newsroom.db.run(lambda conn: conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0])


class AnonymousFloodTests(_AnonymousTest):

    @inlineCallbacks
    def test_an_anonymous_flood_keeps_no_state_and_a_pending_codename_still_works(self):
        sessions = self.service.source.sessions
        newcomer = self.browser()  # in the middle of creating a codename
        response, generated = yield newcomer.get("/generate")
        self.assertEqual(len(sessions), 0)
        largest = [0]
        watch = LoopingCall(lambda: largest.__setitem__(0, max(largest[0], len(sessions))))
        watch.start(0.05)
        try:
            times = yield deferToThread(_flood, self.port, 10_000)
        finally:
            watch.stop()
        self.assertEqual(largest[0], 0, "anonymous requests made sessions")
        self.assertEqual(len(sessions), 0)
        times.sort()
        _log.info("anonymous flood: {n} GETs, median {p50:.1f} ms, p99 {p99:.1f} ms, largest session table {largest}",
                  n=len(times), p50=times[len(times) // 2] * 1000, p99=times[len(times) * 99 // 100] * 1000,
                  largest=largest[0])
        # Before, a full table made every new session scan it: 2.8 s median per request.
        self.assertLess(times[len(times) // 2], 0.25, "anonymous pages got slow during the flood")
        response, html = yield newcomer.post("/create", data={"codename": _CODENAME.search(generated).group(1),
                                                               "csrf_token": _CSRF.search(generated).group(1)})
        self.assertEqual(response.code, 200)
        self.assertIn("Send more and read replies", html)
        self.assertEqual(len(sessions), 1)  # made at login, not before

    @inlineCallbacks
    def test_anonymous_pages_set_no_session(self):
        browser = self.browser()
        for path in ("/", "/login", "/generate", "/safety", "/language/fr", "/login"):
            yield browser.get(path)
        response, html = yield browser.post("/login", data={"codename": "abacus " * 7, "csrf_token": browser.csrf()})
        self.assertEqual(response.code, 403)
        self.assertEqual(len(self.service.source.sessions), 0)
        # What the browser holds is a random binding value, not a session token.
        [cookie] = [c for c in browser.cookies if c.name == "dd_source"]
        self.assertTrue(cookie.value.startswith("a."))

    @inlineCallbacks
    def test_the_pending_codename_is_not_in_the_token(self):
        response, html = yield self.browser().get("/generate")
        codename, token = _CODENAME.search(html).group(1), _CSRF.search(html).group(1)
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        for word in codename.split():
            self.assertNotIn(word.encode(), raw)
        self.assertLess(len(token), 200)


class StaleFormTests(_AnonymousTest):
    """A token that is forged, expired or another browser's is refused on a clear page, and
    what was typed comes back."""

    @inlineCallbacks
    def _post_login(self, browser: Browser, token: str, codename: str = "abacus " * 7):
        response, html = yield browser.post("/login", data={"codename": codename, "csrf_token": token,
                                                            "msg": _MESSAGE})
        self.assertEqual(response.code, 403)
        self.assertIn("This page was out of date. Please enter your codename again.", html)
        self.assertIn(_MESSAGE, html)  # carried on: logging in from this page sends it
        self.assertEqual(len(self.service.source.sessions), 0)
        return html

    @inlineCallbacks
    def test_a_forged_token_is_refused(self):
        browser = self.browser()
        response, html = yield browser.get("/login")
        genuine = browser.csrf(html)
        forged = base64.urlsafe_b64encode(os.urandom(len(genuine) * 3 // 4)).decode().rstrip("=")
        html = yield self._post_login(browser, forged)
        # The page it answers with has a good token: sending it again works.
        codename = yield self.browser().create_source()
        response, html = yield browser.post("/login", data={"codename": codename, "csrf_token": browser.csrf(html),
                                                            "msg": _MESSAGE})
        self.assertEqual(response.code, 200)
        self.assertIn("Send more and read replies", html)

    @inlineCallbacks
    def test_an_expired_token_is_refused(self):
        now = [time.time()]
        self.service.source.forms = FormTokens(FORM_LIFETIME, clock=lambda: now[0])
        browser = self.browser()
        response, html = yield browser.get("/login")
        now[0] += FORM_LIFETIME + 1
        yield self._post_login(browser, browser.csrf(html))

    @inlineCallbacks
    def test_a_token_from_another_browser_is_refused(self):
        a, b = self.browser(), self.browser()
        codename = yield a.create_source()
        yield a.get("/logout")
        response, html = yield b.get("/login")
        stolen = b.csrf(html)
        yield a.get("/login")
        yield self._post_login(a, stolen, codename)

    @inlineCallbacks
    def test_a_login_token_does_not_create_and_create_tokens_are_not_forged(self):
        browser = self.browser()
        response, html = yield browser.get("/login")
        login_token = browser.csrf(html)
        response, generated = yield browser.get("/generate")
        codename = _CODENAME.search(generated).group(1)
        response, html = yield browser.post("/create", data={"codename": codename, "csrf_token": login_token})
        self.assertEqual(response.code, 403)
        self.assertIn("This page was out of date. Nothing was stored. Please get a new codename.", html)
        # Another codename than the one sealed in the token: not ours.
        other = " ".join(reversed(codename.split()))
        response, html = yield browser.post("/create", data={"codename": other, "csrf_token": browser.csrf(generated)})
        self.assertEqual(response.code, 400)
        self.assertIn("That codename was not made for this visit", html)
        count = yield self._source_count()
        self.assertEqual(count, 0)
        self.assertEqual(len(self.service.source.sessions), 0)

    @inlineCallbacks
    def test_a_create_token_from_another_browser_is_refused(self):
        a, b = self.browser(), self.browser()
        response, generated = yield a.get("/generate")
        yield b.get("/login")
        response, html = yield b.post("/create", data={"codename": _CODENAME.search(generated).group(1),
                                                       "csrf_token": _CSRF.search(generated).group(1)})
        self.assertEqual(response.code, 403)
        count = yield self._source_count()
        self.assertEqual(count, 0)


class DoubleSubmitTests(_AnonymousTest):
    @inlineCallbacks
    def test_continue_pressed_twice_says_the_codename_is_active_and_offers_to_log_in(self):
        browser = self.browser()
        response, generated = yield browser.get("/generate")
        codename = _CODENAME.search(generated).group(1)
        form = {"codename": codename, "csrf_token": browser.csrf(generated)}
        anonymous = {c.name: c.value for c in browser.cookies}
        # Both posts leave with the anonymous cookie, as a double click's do.
        first, second = self.browser(), self.browser()
        results = yield DeferredList([b.post("/create", data=form, cookies=anonymous, follow=False)
                                      for b in (first, second)])
        codes = sorted(r[0].code for ok, r in results)
        self.assertEqual(codes, [303, 409])
        page = next(r[1] for ok, r in results if r[0].code == 409)
        self.assertIn("Your codename is active.", page)
        self.assertIn('action="/login"', page)
        self.assertNotIn("get a new codename", page)
        # And that codename logs in (one source, not two).
        response, html = yield self.browser().login(codename)
        self.assertIn("Send more and read replies", html)
        count = yield self._source_count()
        self.assertEqual(count, 1)
