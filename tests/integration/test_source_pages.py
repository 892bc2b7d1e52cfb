"""The source pages over real HTTP: languages, guidance, limits, weight, caching, errors.

Page weights are measured here (the bytes a source downloads per page) and logged to
trial's test.log; every page must stay under 20 KB, load nothing from elsewhere and run no script.
"""
from __future__ import annotations

import html as htmllib
import re
import time

from twisted.internet.defer import inlineCallbacks
from twisted.logger import Logger
from twisted.trial import unittest

from deaddrop.newsroom import png
from tests._support import Browser, multipart_body, start_server
from tests.integration.test_source_flow import stored_messages

_log = Logger()

MAX_PAGE_BYTES = 20_000
_URL_ATTR = re.compile(r'\s(?:href|src|action|formaction|srcset|poster|data)="([^"]*)"')
TOR_BROWSER_UA = "Mozilla/5.0 (Windows NT 10.0; rv:128.0) Gecko/20100101 Firefox/128.0"
CHROME_UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"


def headers(language: str | None = None, ua: str = TOR_BROWSER_UA) -> dict:
    out = {"User-Agent": ua}
    if language:
        out["Accept-Language"] = language
    return out


class _SourceServerTest(unittest.TestCase):
    """A real server and one browser on its source interface."""

    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self)
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)


class SourcePagesTests(_SourceServerTest):

    @inlineCallbacks
    def _every_page(self, browser: Browser, language: str = "en"):
        """-> {name: (response, html)} for every page a source can reach, in one language
        (chosen in the menu: the cookie then goes with every request)."""
        yield browser.get(f"/language/{language}")
        pages = {}
        pages["index"] = yield browser.get("/")
        pages["safety"] = yield browser.get("/safety")
        pages["generate"] = yield browser.get("/generate")
        codename = re.search(r'id="codename"[^>]*>([^<]+)<', pages["generate"][1]).group(1)
        csrf = browser.csrf(pages["generate"][1])
        pages["lookup-first"] = yield browser.post("/create", data={"codename": codename, "csrf_token": csrf})
        pages["lookup-error"] = yield browser.submit(" ")
        pages["lookup-submitted"] = yield browser.submit("hello")
        pages["logged-out"] = yield browser.get("/logout")
        pages["login"] = yield browser.get("/login")
        pages["login-error"] = yield browser.post("/login", data={"codename": "not a codename at all",
                                                                  "csrf_token": browser.csrf()})
        pages["not-found"] = yield browser.get("/no/such/page")
        return pages, codename

    @inlineCallbacks
    def test_page_weights_scripts_and_origins(self):
        weights = {}
        for language in ("en", "ar"):
            browser = Browser(self.server.source_url)
            self.addCleanup(browser.close)
            pages, _ = yield self._every_page(browser, language)
            for name, (response, html) in pages.items():
                size = len(html.encode("utf-8"))
                weights[f"{language}/{name}"] = size
                self.assertLess(size, MAX_PAGE_BYTES, f"{language}/{name}")
                self.assertNotIn("<script", html.lower(), name)
                self.assertNotRegex(html, r"\son[a-z]+=", name)  # no inline event handlers
                for url in _URL_ATTR.findall(html):
                    # Only this origin: a path, a fragment or a same-origin query.
                    self.assertRegex(url, r"^(/|#|\?)", f"{name}: {url}")
                self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"no-store"], name)
        css_url = re.search(r'<link rel="stylesheet" href="([^"]+)"', html).group(1)
        self.assertRegex(css_url, r"^/static/style\.[0-9a-f]{16}\.css$")
        response, css = yield self.browser.get(css_url)
        self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"public, max-age=31536000, immutable"])
        self.assertEqual(response.headers.getRawHeaders(b"pragma"), None)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"text/css; charset=utf-8"])
        css_bytes = len(css.encode("utf-8"))
        self.assertLess(max(weights.values()) + css_bytes, 2 * MAX_PAGE_BYTES)
        _log.info("source page weights (HTML bytes; stylesheet {css} bytes, cached): {w}", css=css_bytes,
                  w=", ".join(f"{k} {v}" for k, v in sorted(weights.items())))
        self.weights = weights
        # A wrong hash is not served from the cache-forever name.
        response, _ = yield self.browser.get("/static/style.0000000000000000.css")
        self.assertEqual(response.code, 404)

    @inlineCallbacks
    def test_accept_language_and_the_menu_cookie(self):
        response, html = yield self.browser.get("/", headers=headers("es-MX,es;q=0.9,en;q=0.5"))
        self.assertIn('<html lang="es" dir="ltr">', html)
        self.assertIn("Comparta información con", html)
        # The menu: a link per language; choosing one sets a cookie holding only the code.
        self.assertIn('href="/language/ar?next=/"', html)
        response, _ = yield self.browser.get("/language/ar?next=/safety", follow=False, headers=headers("es"))
        self.assertEqual(response.code, 303)
        self.assertEqual(response.headers.getRawHeaders(b"location"), [b"/safety"])
        [cookie] = response.headers.getRawHeaders(b"set-cookie")
        self.assertTrue(cookie.startswith(b"dd_lang=ar;"), cookie)
        self.assertNotIn(b"expires", cookie.lower())  # forgotten when the browser closes
        response, html = yield self.browser.get("/safety", headers=headers("es"))
        self.assertIn('<html lang="ar" dir="rtl">', html)
        self.assertIn("كيف تحمي نفسك", html)
        self.assertIn('<a href="/language/ar?next=/safety" lang="ar" hreflang="ar" aria-current="true">', html)
        # Nowhere else to go back to than our own pages.
        response, _ = yield self.browser.get("/language/fr?next=https://evil.example/", follow=False)
        self.assertEqual(response.headers.getRawHeaders(b"location"), [b"/"])
        response, _ = yield self.browser.get("/language/xx", follow=False)
        self.assertIsNone(response.headers.getRawHeaders(b"set-cookie"))

    @inlineCallbacks
    def test_guidance_limits_and_the_tor_browser_banner(self):
        response, html = yield self.browser.get("/", headers=headers("en", CHROME_UA))
        self.assertIn('id="tor-browser-warning"', html)
        self.assertIn("You do not seem to be using Tor Browser", html)
        response, html = yield self.browser.get("/", headers=headers("en", TOR_BROWSER_UA))
        self.assertNotIn('id="tor-browser-warning"', html)
        for words in ("Use Tor Browser, with its security level set to Safest", "belongs to your work",
                      "metadata", 'href="/safety"', "up to 100,000 characters", "up to 524 MB in total",
                      f"you are logged out {self.server.service.source.session_minutes} minutes after logging in"):
            self.assertIn(words, html)
        response, html = yield self.browser.get("/safety")
        for words in ("Use Tor Browser, set to Safest", "Do not use a work device or network",
                      "Remove hidden information from documents", "What happens to what you send",
                      "never connected to the internet", "Who reads it and how long it is kept", "Why a codename",
                      "The codename words are English words"):
            self.assertIn(words, html)
        # Every page links to the guidance, the error pages too.
        response, html = yield self.browser.get("/nothing-here")
        self.assertEqual(response.code, 404)
        self.assertIn('href="/safety"', html)

    @inlineCallbacks
    def test_replies_dated_newest_first_with_a_new_count_and_the_codename_behind_details(self):
        codename = yield self.browser.create_source()
        yield self.browser.submit("a first message makes the source's key pair")
        source_id = yield self._source_id()
        for text in ("FIRST-REPLY", "SECOND-REPLY"):
            yield self.server.service.newsroom.replies.add(source_id, text)
            yield _tick()
        response, html = yield self.browser.get("/lookup", headers=headers("en"))
        self.assertIn("2 new replies", html)
        self.assertLess(html.index("SECOND-REPLY"), html.index("FIRST-REPLY"))
        today = time.strftime("%Y-%m-%d", time.gmtime())
        self.assertEqual(html.count(f'<time datetime="{today}">'), 2)
        self.assertIn("<details", html)
        self.assertRegex(html, r"<details[^>]*><summary>Show my codename</summary>")
        self.assertIn(codename, html)
        response, html = yield self.browser.get("/lookup", headers=headers("ru"))
        self.assertNotIn("new-replies", html)  # shown once: now read
        yield self.server.service.newsroom.replies.add(source_id, "THIRD-REPLY")
        response, html = yield self.browser.get("/lookup", headers=headers("ru"))
        self.assertIn("1 новый ответ", html)
        self.assertIn(f'<time datetime="{today}">', html)

    @inlineCallbacks
    def test_what_happens_next_after_the_first_submission_only(self):
        yield self.browser.create_source()
        response, html = yield self.browser.submit("first")
        self.assertIn("What happens next", html)
        response, html = yield self.browser.submit("second")
        self.assertNotIn("What happens next", html)

    @inlineCallbacks
    def test_codename_with_hyphens_commas_dots_and_capitals(self):
        codename = yield self.browser.create_source()
        yield self.browser.get("/logout")
        response, html = yield self.browser.get("/login")
        self.assertRegex(html, r'<textarea name="codename" id="codename"[^>]* autocomplete="off" spellcheck="false"')
        words = codename.split()
        typed = words[0].upper() + ", " + "-".join(words[1:3]) + ".\n" + " , ".join(words[3:])
        response, html = yield self.browser.post("/login", data={"codename": typed, "csrf_token": self.browser.csrf(html)})
        self.assertEqual(response.code, 200)
        self.assertIn("Send more and read replies", html)

    @inlineCallbacks
    def test_a_deleted_source_is_told_calmly(self):
        yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        csrf = self.browser.csrf(html)
        source_id = yield self._source_id()
        yield self.server.service.newsroom.delete_source(source_id)
        body, content_type = multipart_body([("csrf_token", csrf), ("msg", "KEPT-AFTER-DELETE")], [("", b"")])
        response, html = yield self.browser.post("/submit", data=body, headers={"Content-Type": content_type})
        self.assertEqual(response.code, 403)
        self.assertIn("closed the conversation", html)
        self.assertIn("KEPT-AFTER-DELETE", html)  # what they typed is not lost: they can copy it
        self.assertNotIn("minutes after logging in", html)
        # Said once, and logged out: the cookie is gone, and the next visit is a fresh one.
        self.assertEqual([c for c in self.browser.cookies if c.name == "dd_source" and c.value], [])
        response, html = yield self.browser.get("/lookup")
        self.assertEqual(response.code, 200)
        self.assertIn("Log in with your codename", html)
        self.assertNotIn("closed the conversation", html)

    @inlineCallbacks
    def test_a_returning_source_is_told_about_inactivity(self):
        yield self.browser.create_source()
        self.server.service.source.sessions.destroy_where(lambda s: True)  # as if the session had run out
        response, html = yield self.browser.get("/lookup")
        minutes = self.server.service.source.session_minutes
        self.assertIn(f"For your safety, you were logged out {minutes} minutes after logging in", html)
        fresh = Browser(self.server.source_url)
        self.addCleanup(fresh.close)
        response, html = yield fresh.get("/lookup")
        self.assertNotIn("you were logged out", html)  # a first visit is not an expiry

    @inlineCallbacks
    def test_logo_upload_is_checked_and_served_from_the_same_origin(self):
        texts = self.server.service.source.texts
        logo = png.clean_png(png.tiny_png(40, 20))
        texts.apply_logo("en", logo)
        texts.apply_text("welcome", "fr", "Bienvenue chez nous.\n\nDeuxième paragraphe <b>sans HTML</b>.")
        response, html = yield self.browser.get("/", headers=headers("fr"))
        self.assertIn("Bienvenue chez nous.", html)
        self.assertIn("&lt;b&gt;sans HTML&lt;/b&gt;", html)
        url = re.search(r'<img src="(/logo/[0-9a-f]{20}\.png)"', html).group(1)
        response, body = yield self.browser.get(url)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"image/png"])
        response, html = yield self.browser.get("/", headers=headers("de"))
        self.assertIn(url, html)  # English's logo is the fallback
        self.assertNotIn("Bienvenue", html)
        response, _ = yield self.browser.get("/logo/0123456789abcdef0123.png")
        self.assertEqual(response.code, 404)

    def _source_id(self):
        def query(conn):
            return conn.execute("SELECT id FROM sources ORDER BY id DESC LIMIT 1").fetchone()[0]
        return self.server.service.newsroom.db.run(query)


def _textarea(html: str, name: str) -> str:
    found = re.search(rf'<textarea name="{name}"[^>]*>([^<]*)</textarea>', html)
    return htmllib.unescape(found.group(1)) if found else ""


def _tick():
    from twisted.internet import reactor
    from twisted.internet.task import deferLater
    return deferLater(reactor, 0.01, lambda: None)


class CarriedMessageOriginTests(_SourceServerTest):
    """A message carried through the login form is shown back only to our own pages' posts."""

    def _browser(self) -> Browser:
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        return browser

    @inlineCallbacks
    def _post_login(self, fetch_site: str | None, origin: str | None = None):
        yield self.browser.get("/login")
        headers = {"User-Agent": Browser.USER_AGENT}
        if fetch_site is not None:
            headers["Sec-Fetch-Site"] = fetch_site
        if origin is not None:
            headers["Origin"] = origin
        response, html = yield self.browser.post(
            "/login", data={"codename": "x", "csrf_token": "stale", "msg": "PLANTED-BY-ANOTHER-SITE"},
            headers=headers)
        return response, html

    @inlineCallbacks
    def test_another_site_cannot_plant_a_message(self):
        response, html = yield self._post_login("cross-site")
        self.assertEqual(response.code, 403)
        self.assertNotIn("PLANTED-BY-ANOTHER-SITE", html)

    @inlineCallbacks
    def test_our_own_page_gets_its_message_back(self):
        response, html = yield self._post_login("same-origin")
        self.assertEqual(response.code, 403)
        self.assertIn("PLANTED-BY-ANOTHER-SITE", html)

    @inlineCallbacks
    def test_our_own_page_gets_its_message_back_without_fetch_metadata(self):
        # A browser without Fetch Metadata says "Origin: null" for our no-referrer pages' posts,
        # which carry our SameSite=Strict cookie.
        response, html = yield self._post_login(None, origin="null")
        self.assertEqual(response.code, 403)
        self.assertIn("PLANTED-BY-ANOTHER-SITE", html)

    @inlineCallbacks
    def test_another_sites_no_referrer_page_cannot_plant_a_message_without_fetch_metadata(self):
        """Another site's page that says Referrer-Policy: no-referrer posts with "Origin: null"
        too, from a browser that sends no Fetch Metadata (none to a plain-HTTP onion but Tor
        Browser's): without our cookie, which SameSite=Strict keeps from its posts, nothing it
        sent is shown back, at any of the four addresses that give a message back, and a source
        logging in from that answer sends nothing."""
        browser = self._browser()
        codename = yield browser.create_source()
        yield browser.get("/logout")
        null = {"User-Agent": Browser.USER_AGENT, "Origin": "null"}
        body, content_type = multipart_body([("csrf_token", "x"), ("msg", "PLANTED-BY-ANOTHER-SITE")], [("", b"")])
        for path, data, headers in [
                ("/login", {"codename": codename, "msg": "PLANTED-BY-ANOTHER-SITE"}, null),
                ("/language/en?next=/login", {"codename": codename, "msg": "PLANTED-BY-ANOTHER-SITE"}, null),
                ("/language/en?next=/lookup", {"msg": "PLANTED-BY-ANOTHER-SITE"}, null),
                ("/submit", body, dict(null, **{"Content-Type": content_type}))]:
            attacker = self._browser()  # the source's browser, as another site's post leaves it: no cookie of ours
            response, html = yield attacker.post(path, data=data, headers=headers)
            self.assertNotIn("PLANTED-BY-ANOTHER-SITE", html, path)
            self.assertNotIn(codename, html, path)
            # The source logs in from that answer (our page now, with the cookie it set).
            response, html = yield attacker.post("/login", headers=null, data={
                "codename": codename, "csrf_token": attacker.csrf(html), "msg": _textarea(html, "msg")})
            self.assertIn("Send more and read replies", html, path)
        self.assertEqual(stored_messages(self.server.data_dir), [])
