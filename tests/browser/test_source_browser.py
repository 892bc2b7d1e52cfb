"""The source flow in a real Chromium with JavaScript off (Tor Browser's "Safest" level).

A real server (real gpg, SQLite) runs in this process on the reactor; selenium is blocking, so
every browser step runs in a thread (``deferToThread``) while the reactor keeps serving.
Every page is saved to tests/screenshots/source-<page>-<desktop|phone>.png.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from urllib.parse import urlparse

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.trial import unittest

from deaddrop.web.source.app import NOT_RECOGNIZED
from tests._support import start_server, test_svs
from tests.browser._chromium import WindowSize
from tests.browser._chromium import (
    follow,
    DESKTOP, PHONE, WindowSize, horizontal_overflow, javascript_runs, overflowing_elements, quit_driver, require_chromium,
    screenshot, start_driver,
)
from tests.integration.test_large_uploads import decrypt_documents
from tests.integration.test_source_flow import gunzip_with_name, stored_files, stored_messages

try:
    from selenium.webdriver.common.by import By
except ImportError:  # require_chromium() skips with the reason
    pass

_log = Logger()

MESSAGE = "Hello from the browser test.\nSecond line: MSG-MARKER-4b7e, with ümlauts and ✓."
REPLY = ("Thank you, we read your documents. REPLY-MARKER-91c2\n"
         "Please check back next week. Our other address is "
         "deaddropexampleonionaddressxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.onion")


def _css(driver, selector: str):
    return driver.find_element(By.CSS_SELECTOR, selector)


def _text(driver, selector: str = "main") -> str:
    return _css(driver, selector).text


class _BrowserServerTest(unittest.TestCase):
    """A real server, and a temporary folder for the files a browser sends."""

    # A flow takes ~11 s on a quiet machine and took up to 28 s on a loaded 2-core one (the
    # journalist's flow, alike, 57 s).
    timeout = 180
    server_options: dict = {}  # start_server's overrides for this class's server

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        self.server = yield start_server(self, **self.server_options)
        self.url = self.server.source_url
        self.shots: list[str] = []
        self.tempdir = tempfile.mkdtemp(prefix="dd-browser-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)


class SourceBrowserTests(_BrowserServerTest):

    @inlineCallbacks
    def _start(self, size: WindowSize, **kw):
        started = time.monotonic()
        driver = yield deferToThread(start_driver, size, **kw)
        self.addCleanup(deferToThread, quit_driver, driver)
        self.startup_seconds = time.monotonic() - started
        return driver

    # -- blocking helpers (run in a thread) ------------------------------------------------

    def _page(self, driver, name: str) -> str:
        """Check the page as laid out, save a screenshot; -> the main text."""
        self.assertEqual(_css(driver, "body").value_of_css_property("margin-top"), "0px",
                         f"{name}: /static/style.css was not applied")
        self.shots.append(screenshot(driver, f"source-{name}"))
        overflow = horizontal_overflow(driver)
        if overflow:
            self.fail(f"{name}: the page is {overflow}px wider than the {driver.deaddrop_size.name} window: "
                      f"{overflowing_elements(driver)}; see {self.shots[-1]}")
        return _text(driver)

    def _first_visit(self, driver) -> str:
        driver.get(self.url + "/")
        self.assertIn("Share information with", self._page(driver, "index"))
        follow(driver, "a[href='/generate']")
        self.assertTrue(driver.current_url.endswith("/generate"), driver.current_url)
        codename = _text(driver, "#codename")
        self._page(driver, "generate")
        self.assertEqual(len(codename.split()), 7, codename)
        follow(driver, "form[action='/create'] button[type=submit]")
        self.assertTrue(urlparse(driver.current_url).path == "/lookup", driver.current_url)
        text = self._page(driver, "lookup-empty")
        self.assertIn("Your codename is active", text)
        self.assertIn("There are no replies yet", text)
        return codename

    def _submit(self, driver, attachment: str) -> None:
        _css(driver, "#msg").send_keys(MESSAGE)
        _css(driver, "#fh").send_keys(attachment)  # the file chooser, without a dialog
        follow(driver, "form[action='/submit'] button[type=submit]")
        self.assertTrue(urlparse(driver.current_url).path == "/lookup", driver.current_url)
        text = self._page(driver, "lookup-submitted")
        self.assertIn("We received your message and 1 document", text)
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#msg"), [])  # what arrived, no form

    def _log_out_and_back_in(self, driver, codename: str) -> None:
        follow(driver, "header a[href='/logout']")
        self.assertIn("You are logged out", self._page(driver, "logged-out"))
        self.assertEqual(driver.get_cookies(), [])
        driver.get(self.url + "/lookup")  # the session is really gone
        self.assertTrue(driver.current_url.endswith("/login"), driver.current_url)
        driver.get(self.url + "/")
        follow(driver, "a[href='/login']")
        self.assertIn("Log in with your codename", self._page(driver, "login"))
        words = codename.split()
        _css(driver, "#codename").send_keys(" ".join(reversed(words)))
        follow(driver, "form[action='/login'] button[type=submit]")
        self.assertIn(NOT_RECOGNIZED, self._page(driver, "login-error"))
        box = _css(driver, "#codename")
        self.assertEqual(box.get_attribute("value"), " ".join(reversed(words)))  # kept, to correct
        box.clear()
        box.send_keys(f"  {codename}  ")
        follow(driver, "form[action='/login'] button[type=submit]")
        self.assertTrue(urlparse(driver.current_url).path == "/lookup", driver.current_url)
        self.assertIn("Send more and read replies", _text(driver))

    def _read_and_delete_reply(self, driver) -> None:
        driver.get(self.url + "/lookup")
        [reply] = driver.find_elements(By.CSS_SELECTOR, ".reply")
        self.assertEqual(reply.text, REPLY)
        self._page(driver, "lookup-reply")
        follow(driver, "form[action='/delete'] button[type=submit]")
        text = self._page(driver, "lookup-reply-deleted")
        self.assertIn("Reply deleted.", text)
        self.assertNotIn("REPLY-MARKER-91c2", driver.page_source)
        self.assertIn("You have deleted the replies you received", text)  # not "no replies yet"

    def _not_found(self, driver) -> None:
        driver.get(self.url + "/no/such/page")
        text = self._page(driver, "not-found")
        self.assertIn("There is nothing at this address", text)
        self.assertIn("Page not found", driver.title)

    # -- the flow --------------------------------------------------------------------------

    @inlineCallbacks
    def _flow(self, size: WindowSize):
        started = time.monotonic()
        driver = yield self._start(size)
        attachment = os.path.join(self.tempdir, "meeting notes 2024.txt")
        content = b"ATTACHMENT-MARKER-d3a0\n" * 500 + os.urandom(4096)
        with open(attachment, "wb") as f:
            f.write(content)

        codename = yield deferToThread(self._first_visit, driver)
        yield deferToThread(self._submit, driver, attachment)
        self._assert_stored(content, os.path.basename(attachment))

        yield deferToThread(self._log_out_and_back_in, driver, codename)
        reply = yield self.server.service.newsroom.replies.add(self._source_id(), REPLY)
        self.assertTrue(self._reply_stored(reply["filename"]))
        yield deferToThread(self._read_and_delete_reply, driver)
        self.assertFalse(self._reply_stored(reply["filename"]))

        yield deferToThread(self._not_found, driver)
        self.assertEqual(len(self.shots), 10)
        # In trial's test.log: how long a browser run takes, and where to look.
        _log.info("browser flow ({size}): Chromium start {start:.1f}s, whole flow {total:.1f}s; screenshots in {where}",
                  size=size.name, start=self.startup_seconds, total=time.monotonic() - started,
                  where=os.path.dirname(self.shots[0]))

    def _assert_stored(self, content: bytes, filename: str) -> None:
        files = stored_files(self.server.data_dir)
        [msg] = [f for f in files if f.endswith("-msg.gpg")]
        [doc] = [f for f in files if f.endswith("-doc.gz.gpg")]
        self.assertEqual(len(files), 2, files)
        svs = test_svs()
        with open(msg, "rb") as f:
            # A browser submits a textarea's line breaks as CRLF (HTML's form-data encoding).
            self.assertEqual(svs.decrypt(f.read()).decode("utf-8"), MESSAGE.replace("\n", "\r\n"))
        with open(doc, "rb") as f:
            self.assertEqual(gunzip_with_name(svs.decrypt(f.read())), (filename, content))
        self.filesystem_id = os.path.basename(os.path.dirname(msg))

    def _source_id(self) -> int:
        db = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        try:
            [(source_id,)] = db.execute("SELECT id FROM sources WHERE filesystem_id = ?",
                                        (self.filesystem_id,)).fetchall()
        finally:
            db.close()
        return source_id

    def _reply_stored(self, filename: str) -> bool:
        return any(p.endswith(os.sep + filename) for p in stored_files(self.server.data_dir))

    def test_source_flow_on_a_desktop_without_javascript(self):
        return self._flow(DESKTOP)

    def test_source_flow_on_a_phone_without_javascript(self):
        return self._flow(PHONE)

    @inlineCallbacks
    def test_the_javascript_probe_sees_scripts_when_they_are_allowed(self):
        """start_driver's check that JavaScript is off would notice if it were on."""
        driver = yield self._start(DESKTOP, javascript=True)
        ran = yield deferToThread(javascript_runs, driver)
        self.assertTrue(ran)


# -- issue 11: languages, guidance, never losing what was typed, accessibility -------------------

TOR_BROWSER_UA = "Mozilla/5.0 (Windows NT 10.0; rv:128.0) Gecko/20100101 Firefox/128.0"
# WCAG 2.0 and 2.1, levels A and AA, with a current axe-core (scripts/fetch-axe; the copy inside
# axe-selenium-python is 3.1, which has no WCAG 2.1 tags).
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_VERSION = "4.14.1"
AXE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".axe", f"axe-core-{AXE_VERSION}.min.js")
KEPT = "Typed before the problem: KEPT-MARKER-77aa\nsecond line, ünïcødé ✓"


def _shot(testcase, driver, name: str) -> None:
    """Screenshot, after checking that nothing sticks out of the window (right to left too)."""
    path = screenshot(driver, name)
    overflow = horizontal_overflow(driver)
    if overflow:
        testcase.fail(f"{name}: {overflow}px wider than the window: {overflowing_elements(driver)}; see {path}")


def _set_user_agent(driver, ua: str) -> None:
    driver.execute_cdp_cmd("Network.setUserAgentOverride", {"userAgent": ua})


def _axe_violations(driver) -> list[dict]:
    """axe-core at WCAG 2.1 AA on the current page, injected by WebDriver (not by the page: CSP)."""
    if not os.path.exists(AXE_SCRIPT):
        raise AssertionError(f"{AXE_SCRIPT} is missing: run scripts/fetch-axe (.ci/run and DEMO_TESTS=1 scripts/demo do)")
    with open(AXE_SCRIPT, encoding="utf-8") as f:
        driver.execute_script(f.read())
    outcome = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "if (axe.version !== arguments[1]) { done({error: 'axe-core ' + axe.version}); return; }"
        "axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}},"
        "        (error, results) => done(error ? {error: String(error)} : {violations: results.violations}));",
        AXE_TAGS, AXE_VERSION)
    if "error" in outcome:
        raise AssertionError(f"axe-core could not run: {outcome['error']}")
    return outcome["violations"]


def _other_origin_requests(driver, origin: str) -> list[str]:
    """Every resource the page loaded that is not from ``origin`` (DevTools' resource timing)."""
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [u for u in urls + [driver.current_url] if not u.startswith(origin)]


class SourceLanguagesBrowserTests(unittest.TestCase):
    """Issue 11 in a real Chromium with JavaScript off."""

    timeout = 180

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        self.server = yield start_server(self, max_upload_size=64 * 1024, source_session_idle=3600.0)
        self.url = self.server.source_url
        self.tempdir = tempfile.mkdtemp(prefix="dd-browser-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)

    @inlineCallbacks
    def _driver(self, size: WindowSize = DESKTOP, language: str | None = None, javascript: bool = False):
        prefs = {"intl.accept_languages": language} if language else None
        driver = yield deferToThread(start_driver, size, extra_prefs=prefs, javascript=javascript)
        self.addCleanup(deferToThread, quit_driver, driver)
        return driver

    # -- the whole flow in Spanish (Accept-Language) and Arabic (the menu) ---------------------

    def _flow_in(self, driver, code: str, choose_in_menu: bool) -> dict:
        """Landing page to reply, in one language, a screenshot of each page. -> what was seen."""
        seen = {}
        driver.get(self.url + "/")
        if choose_in_menu:
            follow(driver, f"nav.languages a[hreflang='{code}']")
        html = _css(driver, "html")
        self.assertEqual(html.get_attribute("lang"), code)
        seen["dir"] = html.get_attribute("dir")
        _shot(self, driver, f"source-{code}-index")
        follow(driver, "a[href='/safety']")
        seen["safety"] = _text(driver)
        _shot(self, driver, f"source-{code}-safety")
        driver.get(self.url + "/")
        follow(driver, "a[href='/generate']")
        codename = _text(driver, "#codename")
        _shot(self, driver, f"source-{code}-generate")
        follow(driver, "form[action='/create'] button[type=submit]")
        seen["lookup"] = _text(driver)
        _shot(self, driver, f"source-{code}-lookup")
        _css(driver, "#msg").send_keys(KEPT)
        follow(driver, "form[action='/submit'] button[type=submit]")
        seen["submitted"] = _text(driver)
        _shot(self, driver, f"source-{code}-submitted")
        follow(driver, "header a[href='/logout']")
        seen["logged_out"] = _text(driver)
        driver.get(self.url + "/login")
        # Typed as someone copying from paper might: commas and hyphens, some capitals.
        words = codename.split()
        _css(driver, "#codename").send_keys(", ".join(words[:3]).upper() + "-" + "-".join(words[3:]))
        _shot(self, driver, f"source-{code}-login")
        follow(driver, "form[action='/login'] button[type=submit]")
        self.assertTrue(urlparse(driver.current_url).path == "/lookup", driver.current_url)
        seen["codename"] = codename
        return seen

    @inlineCallbacks
    def test_the_whole_flow_in_spanish_from_the_browser_language(self):
        driver = yield self._driver(language="es-ES,es")
        seen = yield deferToThread(self._flow_in, driver, "es", False)
        self.assertEqual(seen["dir"], "ltr")
        self.assertIn("Cómo protegerse", seen["safety"])
        self.assertIn("Las palabras del nombre en clave son palabras en inglés", seen["safety"])
        self.assertIn("Su nombre en clave está activo", seen["lookup"])
        self.assertIn("Gracias. Hemos recibido su mensaje.", seen["submitted"])
        self.assertIn("Qué pasa ahora", seen["submitted"])
        self.assertIn("Ha cerrado la sesión", seen["logged_out"])
        yield self._reply_is_shown(driver, "es", "1 respuesta nueva")

    @inlineCallbacks
    def test_the_whole_flow_in_arabic_from_the_language_menu(self):
        driver = yield self._driver(language="en-US,en")
        seen = yield deferToThread(self._flow_in, driver, "ar", True)
        self.assertEqual(seen["dir"], "rtl")
        self.assertIn("كيف تحمي نفسك", seen["safety"])
        self.assertIn("اسمك الرمزي مفعّل الآن", seen["lookup"])
        self.assertIn("شكرًا لك. وصلتنا رسالتك.", seen["submitted"])
        yield self._reply_is_shown(driver, "ar", "رد جديد واحد")

    @inlineCallbacks
    def _reply_is_shown(self, driver, code: str, notice: str):
        def source_id(conn):
            return conn.execute("SELECT id FROM sources ORDER BY id DESC LIMIT 1").fetchone()[0]
        sid = yield self.server.service.newsroom.db.run(source_id)
        yield self.server.service.newsroom.replies.add(sid, "REPLY-IN-" + code)

        def look() -> None:
            driver.get(self.url + "/lookup")
            self.assertIn(notice, _text(driver, "#new-replies"))
            self.assertEqual(_css(driver, ".reply").text, "REPLY-IN-" + code)
            self.assertTrue(_css(driver, ".reply-date time").get_attribute("datetime"))
            screenshot(driver, f"source-{code}-reply")
        yield deferToThread(look)

    # -- Tor Browser banner --------------------------------------------------------------------

    @inlineCallbacks
    def test_the_tor_browser_banner_shows_for_chrome_and_not_for_tor_browser(self):
        driver = yield self._driver()

        def check() -> None:
            driver.get(self.url + "/")
            banner = driver.find_elements(By.ID, "tor-browser-warning")
            self.assertEqual(len(banner), 1)
            self.assertTrue(banner[0].is_displayed())
            self.assertIn("You do not seem to be using Tor Browser", banner[0].text)
            screenshot(driver, "source-banner-chrome")
            _set_user_agent(driver, TOR_BROWSER_UA)
            driver.get(self.url + "/")
            self.assertEqual(driver.find_elements(By.ID, "tor-browser-warning"), [])
        yield deferToThread(check)

    # -- the typed message survives every error --------------------------------------------------

    def _new_source(self, driver) -> str:
        driver.get(self.url + "/generate")
        codename = _text(driver, "#codename")
        follow(driver, "form[action='/create'] button[type=submit]")
        return codename

    @inlineCallbacks
    def test_message_kept_after_a_file_that_is_too_large(self):
        driver = yield self._driver()
        big = os.path.join(self.tempdir, "too big.bin")
        with open(big, "wb") as f:
            f.write(os.urandom(3 * 1024 * 1024))  # 3 MiB against a 64 KiB limit

        def run() -> None:
            self._new_source(driver)
            _css(driver, "#msg").send_keys(KEPT)
            _css(driver, "#fh").send_keys(big)
            started = time.monotonic()
            follow(driver, "form[action='/submit'] button[type=submit]")
            self.elapsed = time.monotonic() - started
            text = _text(driver)
            self.assertIn("Your files are too large: this drop box accepts at most 0.0655 MB in total", text)
            self.assertIn("Nothing was stored", text)
            self.assertEqual(_css(driver, "#msg").get_attribute("value").replace("\r\n", "\n"), KEPT)
            screenshot(driver, "source-too-large")
        yield deferToThread(run)
        self.assertEqual(stored_files(self.server.data_dir), [])

    @inlineCallbacks
    def test_message_kept_through_an_expired_session_and_sent_after_the_codename(self):
        driver = yield self._driver()

        def run() -> None:
            codename = self._new_source(driver)
            _css(driver, "#msg").send_keys(KEPT)
            self.server.service.source.sessions.destroy_where(lambda s: True)  # what 30 idle minutes do
            follow(driver, "form[action='/submit'] button[type=submit]")
            text = _text(driver)
            self.assertIn("For your safety, you were logged out 60 minutes after logging in", text)
            self.assertEqual(_css(driver, "#msg").get_attribute("value").replace("\r\n", "\n"), KEPT)
            screenshot(driver, "source-expired-login")
            _css(driver, "#codename").send_keys(codename.replace(" ", ","))
            follow(driver, "form[action='/login'] button[type=submit]")
            self.assertTrue(urlparse(driver.current_url).path == "/lookup", driver.current_url)
            self.assertIn("Thank you. We received your message.", _text(driver))
        yield deferToThread(run)
        [msg] = stored_files(self.server.data_dir)
        with open(msg, "rb") as f:
            self.assertIn(b"KEPT-MARKER-77aa", test_svs().decrypt(f.read()))

    @inlineCallbacks
    def test_message_kept_after_a_stale_form(self):
        driver = yield self._driver()

        def run() -> None:
            codename = self._new_source(driver)
            _css(driver, "#msg").send_keys(KEPT)
            first = driver.current_window_handle
            driver.switch_to.new_window("tab")  # logs out and in again: the first tab's form is stale
            driver.get(self.url + "/logout")
            driver.get(self.url + "/login")
            _css(driver, "#codename").send_keys(codename)
            follow(driver, "form[action='/login'] button[type=submit]")
            driver.close()
            driver.switch_to.window(first)
            follow(driver, "form[action='/submit'] button[type=submit]")
            text = _text(driver)
            self.assertIn("This form was out of date", text)
            self.assertEqual(_css(driver, "#msg").get_attribute("value").replace("\r\n", "\n"), KEPT)
            screenshot(driver, "source-stale-form")
            follow(driver, "form[action='/submit'] button[type=submit]")  # the same form, now fresh
            self.assertIn("Thank you. We received your message.", _text(driver))
        yield deferToThread(run)
        self.assertEqual(len(stored_files(self.server.data_dir)), 1)

    # -- accessibility -----------------------------------------------------------------------

    def _audit_every_page(self, driver, code: str) -> dict[str, list]:
        """axe on every page a source can reach, in one language. -> {page: violations}."""
        results: dict[str, list] = {}

        def audit(name: str) -> None:
            results[name] = [f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}"
                             for v in _axe_violations(driver)]
            self.assertEqual(_other_origin_requests(driver, self.url), [], name)

        driver.get(self.url + f"/language/{code}")
        audit("index")
        driver.get(self.url + "/safety")
        audit("safety")
        driver.get(self.url + "/login?expired=1")
        audit("login-expired")
        codename = self._new_source(driver)
        audit("lookup-first")
        _css(driver, "#msg").send_keys("x" * 10)
        follow(driver, "form[action='/submit'] button[type=submit]")
        audit("received-next")
        follow(driver, "a[href^='/lookup?form=']")
        driver.find_element(By.CSS_SELECTOR, "details.reveal summary").click()
        audit("lookup-codename-shown")
        follow(driver, "form[action='/submit'] button[type=submit]")  # empty: an error
        audit("lookup-error")
        driver.get(self.url + "/generate")
        audit("generate")
        driver.get(self.url + "/nothing/here")
        audit("not-found")
        follow(driver, "header a[href='/logout']")
        audit("logged-out")
        driver.get(self.url + "/login")
        _css(driver, "#codename").send_keys("wrong words here")
        follow(driver, "form[action='/login'] button[type=submit]")
        audit("login-error")
        _css(driver, "#codename").send_keys(codename)
        follow(driver, "form[action='/login'] button[type=submit]")
        audit("lookup-returning")
        return results

    @inlineCallbacks
    def test_a_real_visit_passes_axe_and_loads_nothing_from_elsewhere(self):
        """One visit through the pages, driven as a source does (the codename panel opened by a
        click), in English; every state in more languages is audited by
        tests/browser/test_every_language_browser.py."""
        # axe-core needs timers and promises, which a JavaScript-off page does not run. The
        # pages carry no script at all (test_source_pages checks it), so they are the same
        # documents with JavaScript on; axe is injected by WebDriver, not by the page (CSP).
        driver = yield self._driver(javascript=True)
        found = yield deferToThread(self._audit_every_page, driver, "en")
        _log.info("axe-core WCAG 2.1 AA: {n} source pages audited in a visit, violations: {v}",
                  n=len(found), v={k: v for k, v in found.items() if v} or "none")
        self.assertEqual({k: v for k, v in found.items() if v}, {})
        self.assertGreaterEqual(len(found), 12)

    @inlineCallbacks
    def test_axe_does_find_violations(self):
        """The audit is real: a page with a known violation (an unlabelled field) fails it."""
        driver = yield self._driver(javascript=True)

        def run() -> list:
            driver.get("data:text/html;charset=utf-8,<!DOCTYPE html><html lang=en><title>t</title>"
                       "<main><form><input type=text name=x></form></main></html>")
            return _axe_violations(driver)
        violations = yield deferToThread(run)
        self.assertIn("label", [v["id"] for v in violations])

        def run_21() -> list:  # a WCAG 2.1 rule (1.3.5): only a current axe-core with wcag21 tags has it
            driver.get("data:text/html;charset=utf-8,<!DOCTYPE html><html lang=en><title>t</title><main><form>"
                       "<label for=x>Name</label><input id=x type=text autocomplete=nonsense></form></main></html>")
            return _axe_violations(driver)
        violations = yield deferToThread(run_21)
        self.assertIn("autocomplete-valid", [v["id"] for v in violations])


class ManyFilesBrowserTests(_BrowserServerTest):
    """Issue 27: several files chosen at once in the form's one file field (it has ``multiple``)."""

    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.driver = yield deferToThread(start_driver, DESKTOP)
        self.addCleanup(deferToThread, quit_driver, self.driver)

    def _files(self, count: int) -> list[tuple[str, bytes]]:
        """``count`` files on disk for the file chooser (two tiny ones, as in the issue). -> (path, content)."""
        made = []
        for i in range(count):
            path = os.path.join(self.tempdir, f"set{count}", f"document {i}.txt")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            content = b"%d\n" % i if i < 2 else b"FILE-%d-of-%d " % (i, count) * 500 + os.urandom(2000)
            with open(path, "wb") as f:
                f.write(content)
            made.append((path, content))
        return made

    def _send(self, message: str, files: list[tuple[str, bytes]]) -> str:
        driver = self.driver
        driver.get(self.url + "/lookup")
        field = _css(driver, "#fh")
        self.assertTrue(field.get_attribute("multiple"))
        _css(driver, "#msg").send_keys(message)
        # Several paths in one send_keys, a line each: chromedriver chooses them together, as a
        # source picking several files in the one dialog.
        field.send_keys("\n".join(path for path, _ in files))
        self.assertEqual(driver.execute_script("return arguments[0].files.length", field), len(files))
        follow(driver, "form[action='/submit'] button[type=submit]")
        return _text(driver)

    @inlineCallbacks
    def test_one_three_and_ten_files_chosen_at_once_are_all_stored_and_decrypt(self):
        driver = self.driver
        yield deferToThread(lambda: (driver.get(self.url + "/generate"),
                                     follow(driver, "form[action='/create'] button[type=submit]")))
        sent = []
        for count in (1, 3, 10):
            files = self._files(count)
            text = yield deferToThread(self._send, f"with {count}", files)
            said = "1 document" if count == 1 else f"{count} documents"
            self.assertIn(f"We received your message and {said}", text)
            self.assertEqual(urlparse(driver.current_url).path, "/lookup", driver.current_url)
            sent += [(os.path.basename(path), content) for path, content in files]
        self.assertEqual(sorted(decrypt_documents(self.server.data_dir)), sorted(sent))
        self.assertEqual(sorted(stored_messages(self.server.data_dir)), [b"with 1", b"with 10", b"with 3"])


# -- issue 17: each submission stored once, Back never resubmits, nothing typed lost ------------

def _back(driver) -> str:
    """Browser Back, as a source presses it. -> the page's text (Chromium's own error page if
    it had to ask to resend a form)."""
    driver.back()
    return driver.find_element(By.TAG_NAME, "body").text


def _asks_to_resubmit(driver) -> bool:
    # Chromium, asked to show a page that was the answer to a POST, shows this error page.
    return "ERR_CACHE_MISS" in driver.page_source or "Confirm Form Resubmission" in driver.page_source


class ResubmitBrowserTests(unittest.TestCase):
    """Post/redirect/get and one-time forms in a real Chromium with JavaScript off."""

    timeout = 120

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        self.server = yield start_server(self, max_upload_size=64 * 1024, source_session_idle=3600.0)
        self.url = self.server.source_url
        self.driver = yield deferToThread(start_driver, DESKTOP)
        self.addCleanup(deferToThread, quit_driver, self.driver)

    def _new_source(self) -> str:
        driver = self.driver
        driver.get(self.url + "/generate")
        codename = _text(driver, "#codename")
        follow(driver, "form[action='/create'] button[type=submit]")
        return codename

    def _messages(self) -> list[bytes]:
        return stored_messages(self.server.data_dir)

    @inlineCallbacks
    def test_back_after_sending_shows_what_arrived_not_the_message_again(self):
        driver = self.driver

        def run() -> None:
            self._new_source()
            form_page = driver.current_url
            self.assertIn("/lookup?form=", form_page)
            self.assertEqual(_css(driver, "#msg").get_attribute("autocomplete"), "off")
            _css(driver, "#msg").send_keys(KEPT)
            follow(driver, "form[action='/submit'] button[type=submit]")
            self.assertIn("We received your message", _text(driver))
            screenshot(driver, "source-received")
            text = _back(driver)
            self.assertEqual(driver.current_url, form_page)
            self.assertFalse(_asks_to_resubmit(driver))
            self.assertIn("We received your message", text)  # what arrived, not the form again
            self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#msg"), [])
            driver.forward()
            self.assertIn("We received your message", _text(driver))
            driver.refresh()  # a reload of the received page: a GET, nothing is sent again
            self.assertIn("We received your message", _text(driver))
            follow(driver, "a[href^='/lookup?form=']")  # "Send more and read replies": a fresh form
            self.assertEqual(_css(driver, "#msg").get_attribute("value"), "")
        yield deferToThread(run)
        self.assertEqual(len(self._messages()), 1)

    @inlineCallbacks
    def test_a_double_clicked_send_stores_one_message(self):
        driver = self.driver

        def run() -> None:
            from selenium.webdriver.common.action_chains import ActionChains

            self._new_source()
            _css(driver, "#msg").send_keys("DOUBLE-CLICKED-5d1e")
            button = _css(driver, "form[action='/submit'] button[type=submit]")
            before = driver.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["loaderId"]
            ActionChains(driver).double_click(button).perform()
            from selenium.webdriver.support.ui import WebDriverWait
            WebDriverWait(driver, 20).until(
                lambda d: d.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["loaderId"] != before
                and d.execute_script("return document.readyState") == "complete")
            self.assertIn("We received your message", _text(driver))
        yield deferToThread(run)
        self.assertEqual(self._messages(), [b"DOUBLE-CLICKED-5d1e"])

    @inlineCallbacks
    def test_back_after_logout_asks_to_resubmit_only_a_refusal_that_kept_a_message(self):
        driver = self.driver
        big = os.path.join(self.server.data_dir, "..", "too-big.bin")
        with open(big, "wb") as f:
            f.write(os.urandom(20 * 1024))
        self.addCleanup(os.remove, big)

        def run() -> None:
            self._new_source()
            follow(driver, "form[action='/submit'] button[type=submit]")  # empty: refused
            self.assertIn("Please write a message or choose a file", _text(driver))
            self.assertIn("/lookup?form=", driver.current_url)  # at a GET-able address
            _css(driver, "#msg").send_keys(KEPT)
            _css(driver, "#fh").send_keys(os.path.abspath(big))
            self.server.service.settings.allow_uploads = False  # the admin stops taking files
            follow(driver, "form[action='/submit'] button[type=submit]")  # refused after the body
            self.assertIn("This drop box does not accept files at the moment", _text(driver))
            self.assertEqual(_css(driver, "#msg").get_attribute("value").replace("\r\n", "\n"), KEPT)
            # The message is in this answer only, nowhere on the server (docs/threat-model.md,
            # "Shared stores"): the answer to the POST itself.
            self.assertEqual(urlparse(driver.current_url).path, "/submit")
            follow(driver, "form[action='/submit'] button[type=submit]")  # without the file now
            self.assertIn("We received your message", _text(driver))
            follow(driver, "header a[href='/logout']")
            asked = []
            for _ in range(4):  # back through everything this visit showed
                _back(driver)
                asked.append(_asks_to_resubmit(driver))
            self.assertEqual(asked, [False, True, False, False])  # only the refusal that kept a message
        yield deferToThread(run)
        self.assertEqual(len(self._messages()), 1)


class LanguageSwitchBrowserTests(unittest.TestCase):
    """Issue 17 §2 in Chromium with JavaScript off: the language menu on the codename page."""

    timeout = 90

    @inlineCallbacks
    def test_switching_language_on_the_codename_page_keeps_the_same_codename(self):
        server = yield start_server(self)
        driver = yield deferToThread(start_driver, DESKTOP)
        self.addCleanup(deferToThread, quit_driver, driver)

        def run() -> None:
            driver.get(server.source_url + "/generate")
            codename = _text(driver, "#codename")
            follow(driver, "nav.languages a[hreflang='es']")
            self.assertEqual(_css(driver, "html").get_attribute("lang"), "es")
            self.assertEqual(_text(driver, "#codename"), codename)  # the one the source wrote down
            follow(driver, "nav.languages a[hreflang='ar']")
            self.assertEqual(_text(driver, "#codename"), codename)
            follow(driver, "form[action='/create'] button[type=submit]")  # and it is the one that works
            self.assertEqual(urlparse(driver.current_url).path, "/lookup")
            driver.get(server.source_url + "/logout")
            driver.get(server.source_url + "/login")
            _css(driver, "#codename").send_keys(codename)
            follow(driver, "form[action='/login'] button[type=submit]")
            self.assertEqual(urlparse(driver.current_url).path, "/lookup")
            driver.get(server.source_url + "/generate")
            self.assertEqual(urlparse(driver.current_url).path, "/lookup")  # logged in: no new codename
        yield deferToThread(run)

    @inlineCallbacks
    def test_switching_language_keeps_a_typed_message_and_a_typed_codename(self):
        """§2: the menu of a page with a form posts that form. The message box and the codename
        box keep what was typed; a chosen file sends only its name (never its bytes), and the
        page says calmly that files must be chosen again."""
        from deaddrop.web._common.site import DeadDropRequest

        server = yield start_server(self, source_session_idle=3600.0)
        driver = yield deferToThread(start_driver, DESKTOP)
        self.addCleanup(deferToThread, quit_driver, driver)
        bodies: list[bytes] = []  # what the language route received, byte for byte
        original = DeadDropRequest.handleContentChunk

        def recording(request, data):
            if (getattr(request.channel, "_path", b"") or b"").startswith(b"/language/"):
                bodies.append(data)
            return original(request, data)
        self.patch(DeadDropRequest, "handleContentChunk", recording)
        attachment = os.path.join(server.data_dir, "..", "chosen-file-7c3a.txt")
        with open(attachment, "wb") as f:
            f.write(b"FILE-BYTES-MARKER-e41b " * 100)
        self.addCleanup(os.remove, attachment)
        typed_codename = "Correct horse, battery"

        def run() -> None:
            driver.get(server.source_url + "/generate")
            codename = _text(driver, "#codename")
            follow(driver, "form[action='/create'] button[type=submit]")
            _css(driver, "#msg").send_keys(KEPT)
            _css(driver, "#fh").send_keys(os.path.abspath(attachment))
            follow(driver, "nav.languages button[lang='es']")
            self.assertEqual(_css(driver, "html").get_attribute("lang"), "es")
            self.assertEqual(urlparse(driver.current_url).path, "/language/es")  # the switch's own answer
            self.assertEqual(_css(driver, "#msg").get_attribute("value").replace("\r\n", "\n"), KEPT)
            self.assertIn("Los archivos no se pueden conservar al cambiar de idioma", _text(driver))
            screenshot(driver, "source-language-switch-kept")
            follow(driver, "nav.languages button[lang='ar']")
            self.assertEqual(_css(driver, "html").get_attribute("dir"), "rtl")
            self.assertEqual(_css(driver, "#msg").get_attribute("value").replace("\r\n", "\n"), KEPT)
            follow(driver, "form[action='/submit'] button[type=submit]")
            self.assertIn("شكرًا لك. وصلتنا رسالتك.", _text(driver))
            driver.get(server.source_url + "/logout")
            driver.get(server.source_url + "/login")
            _css(driver, "#codename").send_keys(typed_codename)
            follow(driver, "nav.languages button[lang='fr']")
            self.assertEqual(_css(driver, "html").get_attribute("lang"), "fr")
            self.assertEqual(urlparse(driver.current_url).path, "/language/fr")
            self.assertEqual(_css(driver, "#codename").get_attribute("value"), typed_codename)
            _css(driver, "#codename").clear()
            _css(driver, "#codename").send_keys(codename)
            follow(driver, "nav.languages button[lang='de']")  # the box kept its latest words
            self.assertEqual(_css(driver, "#codename").get_attribute("value"), codename)
            follow(driver, "form[action='/login'] button[type=submit]")
            self.assertEqual(urlparse(driver.current_url).path, "/lookup")
            self.assertEqual(_css(driver, "html").get_attribute("lang"), "de")
        yield deferToThread(run)
        self.assertEqual([m.replace(b"\r\n", b"\n") for m in stored_messages(server.data_dir)], [KEPT.encode()])
        sent = b"".join(bodies)
        self.assertIn(b"chosen-file-7c3a.txt", sent)  # the file input sent its name...
        self.assertNotIn(b"FILE-BYTES-MARKER", sent)  # ...never its bytes
        self.assertNotIn(b"multipart", sent)
