"""Issue 17 §2: nothing typed is lost to the language menu, without JavaScript.

On a page with a form (the login page, the submission form) each entry of the language menu is
a submit button of that form, posting it urlencoded to ``POST /language/<code>``, whose answer is
the page in the new language with the typed text in it: nothing typed is kept on the server.
Browser behaviour (Chromium sends a file input's name only) is held by
tests/browser/test_source_browser.py.
"""
from __future__ import annotations

import html as htmllib
import os
import re

from twisted.internet.defer import inlineCallbacks

from tests._support import Browser, LogCapture, multipart_body
from tests.integration.test_source_flow import stored_messages
from tests.integration.test_source_pages import _SourceServerTest

MESSAGE = "Typed before switching: SWITCH-MARKER-3f9d\nزبان ✓ <b>not markup</b>"
FILES_NOTICE_AR = "احتفظنا برسالتك. لا يمكن الاحتفاظ بالملفات عند تغيير اللغة"
_FORM_TOKEN = re.compile(r'name="form_token" value="([^"]+)"')


def _textarea(html: str, name: str) -> str | None:
    found = re.search(rf'<textarea name="{name}"[^>]*>([^<]*)</textarea>', html)
    return htmllib.unescape(found.group(1)) if found else None


class LanguageSwitchTests(_SourceServerTest):
    def setUp(self):
        self.logs = LogCapture().start()
        self.addCleanup(self.logs.stop)
        return super().setUp()

    def _browser(self) -> Browser:
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        return browser

    def _messages(self) -> list[bytes]:
        return stored_messages(self.server.data_dir)

    @inlineCallbacks
    def test_the_menu_of_a_page_with_a_form_posts_that_form_and_other_pages_keep_links(self):
        response, login = yield self.browser.get("/login")
        self.assertIn('<form method="post" action="/login" class="card" id="login-form">', login)
        self.assertIn('<button type="submit" form="login-form" formaction="/language/ar?next=/login" '
                      'formmethod="post" formenctype="application/x-www-form-urlencoded" formnovalidate="" lang="ar" '
                      'class="link">العربية</button>', login)
        self.assertNotIn('href="/language/', login)
        yield self.browser.create_source()
        response, lookup = yield self.browser.get("/lookup")
        self.assertIn('id="send-form"', lookup)
        self.assertIn('form="send-form" formaction="/language/es?next=/lookup" formmethod="post" '
                      'formenctype="application/x-www-form-urlencoded"', lookup)
        for path in ("/", "/safety"):
            response, page = yield self.browser.get(path)
            self.assertIn(f'href="/language/es?next={path}"', page)
            self.assertNotIn("formaction", page)

    @inlineCallbacks
    def test_a_typed_message_comes_back_in_the_new_language_and_is_stored_once(self):
        yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        token = _FORM_TOKEN.search(html).group(1)
        switch = {"csrf_token": self.browser.csrf(html), "form_token": token, "website": "", "msg": MESSAGE,
                  "fh": "leaked-plan.pdf"}
        for _resent in range(2):  # the answer itself; sent again (a reload), the same page
            response, html = yield self.browser.post("/language/ar?next=/lookup", follow=False, data=switch)
            self.assertEqual(response.code, 200)
            self.assertIn('<html lang="ar" dir="rtl">', html)
            self.assertEqual(_textarea(html, "msg").replace("\r\n", "\n"), MESSAGE)
            self.assertEqual(_FORM_TOKEN.search(html).group(1), token)  # the same one-time form
            self.assertEqual(html.count(FILES_NOTICE_AR), 1)
        self.assertEqual(self._messages(), [])
        # Nothing of it stays on the server: the form's own address shows an empty box.
        response, html = yield self.browser.get(f"/lookup?form={token}")
        self.assertEqual(_textarea(html, "msg"), "")
        sessions = self.server.service.source.sessions.where(lambda s: True)
        self.assertEqual(sorted(name for s in sessions for name in s.sealed), ["codename", "passphrase"])
        # Sent from that page: stored once; the switch sent again afterwards says what arrived.
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)), ("form_token", token),
                                             ("msg", MESSAGE)], [("", b"")])
        response, html = yield self.browser.post("/submit", data=body, headers={"Content-Type": content_type})
        self.assertIn("شكرًا لك. وصلتنا رسالتك.", html)
        response, html = yield self.browser.post("/language/ar?next=/lookup", data=switch)
        self.assertIn("شكرًا لك. وصلتنا رسالتك.", html)
        self.assertNotIn("SWITCH-MARKER-3f9d", html)  # never offered again as if it were unsent
        self.assertEqual(self._messages(), [MESSAGE.encode()])

    @inlineCallbacks
    def test_chosen_files_are_named_calmly_and_an_emptied_box_stays_empty(self):
        yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        token = _FORM_TOKEN.search(html).group(1)
        response, html = yield self.browser.post("/language/ar?next=/lookup", data={
            "csrf_token": self.browser.csrf(html), "form_token": token, "msg": MESSAGE, "fh": "leaked-plan.pdf"})
        self.assertIn(FILES_NOTICE_AR, html)
        response, html = yield self.browser.post("/language/es?next=/lookup", data={
            "csrf_token": self.browser.csrf(html), "form_token": token, "msg": "", "fh": ""})
        self.assertEqual(_textarea(html, "msg"), "")
        self.assertNotIn("Los archivos no se pueden conservar al cambiar de idioma: vuelva a elegirlos", html)

    @inlineCallbacks
    def test_a_multipart_body_is_refused_before_it_is_read(self):
        yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)), ("msg", MESSAGE)],
                                            [("secret.pdf", b"FILE-BYTES " * 10_000)])
        response, page = yield self.browser.post("/language/es?next=/lookup", data=body,
                                                 headers={"Content-Type": content_type})
        self.assertEqual(response.code, 415)
        self.assertIn("This address does not accept uploads.", page)
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "tmp")), [])

    @inlineCallbacks
    def test_a_typed_codename_comes_back_in_the_answer_only_and_is_never_kept_or_logged(self):
        codename = yield self.browser.create_source()
        yield self.browser.get("/logout")
        response, html = yield self.browser.get("/login")
        response, html = yield self.browser.post("/language/fr?next=/login", follow=False, data={
            "csrf_token": self.browser.csrf(html), "codename": codename})
        self.assertEqual(response.code, 200)
        self.assertIsNone(response.headers.getRawHeaders(b"location"))
        self.assertIn('<html lang="fr" dir="ltr">', html)
        self.assertEqual(_textarea(html, "codename"), codename)
        # Nothing of it is kept: neither this browser's next page nor another's holds it.
        for browser in (self.browser, self._browser()):
            response, again = yield browser.get("/login")
            self.assertEqual(_textarea(again, "codename"), "")
        response, html = yield self.browser.post("/login", data={"csrf_token": self.browser.csrf(html),
                                                                 "codename": codename})
        self.assertIn("Envoyer autre chose et lire les réponses", html)
        for word in codename.split():
            self.assertNotIn(word, self.logs.text())

    @inlineCallbacks
    def test_another_sites_form_changes_the_language_and_carries_nothing(self):
        response, html = yield self.browser.get("/login")
        headers = {"User-Agent": Browser.USER_AGENT, "Sec-Fetch-Site": "cross-site"}
        response, html = yield self.browser.post("/language/es?next=/login", headers=headers, data={
            "csrf_token": self.browser.csrf(html), "codename": "planted words here"})
        self.assertIn('<html lang="es" dir="ltr">', html)
        self.assertEqual(_textarea(html, "codename"), "")

    @inlineCallbacks
    def test_a_message_whose_session_ended_waits_on_the_login_page(self):
        codename = yield self.browser.create_source()
        response, lookup = yield self.browser.get("/lookup")
        yield self.browser.get("/logout")  # e.g. in another tab; this page is still open
        response, html = yield self.browser.post("/language/de?next=/lookup", data={
            "csrf_token": self.browser.csrf(lookup), "form_token": _FORM_TOKEN.search(lookup).group(1),
            "msg": MESSAGE})
        self.assertIn('<html lang="de" dir="ltr">', html)
        self.assertIn("Ihre Nachricht ist unten aufbewahrt", html)
        self.assertEqual(_textarea(html, "msg").replace("\r\n", "\n"), MESSAGE)
        token = _FORM_TOKEN.search(lookup).group(1)
        self.assertEqual(_FORM_TOKEN.search(html).group(1), token)  # the form it was typed in rides along
        response, html = yield self.browser.post("/login", data={
            "csrf_token": self.browser.csrf(html), "codename": codename, "msg": _textarea(html, "msg"),
            "form_token": token})
        self.assertIn("Danke. Wir haben Ihre Nachricht erhalten.", html)
        # That form sent again from the browser's history (now logged in anew): stored once.
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(lookup)), ("form_token", token),
                                             ("msg", MESSAGE)], [("", b"")])
        response, html = yield self.browser.post("/submit", data=body, headers={"Content-Type": content_type})
        self.assertIn("Danke. Wir haben Ihre Nachricht erhalten.", html)
        self.assertEqual(self._messages(), [MESSAGE.encode()])
