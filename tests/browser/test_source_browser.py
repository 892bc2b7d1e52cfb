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

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.trial import unittest

from deaddrop.web.source.app import NOT_RECOGNIZED
from tests._support import start_server, test_svs
from tests.browser._chromium import (
    follow,
    DESKTOP, PHONE, WindowSize, horizontal_overflow, javascript_runs, overflowing_elements, quit_driver, require_chromium,
    screenshot, start_driver,
)
from tests.integration.test_source_flow import gunzip_with_name, stored_files

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


class SourceBrowserTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        self.server = yield start_server(self)
        self.url = self.server.source_url
        self.shots: list[str] = []
        self.tempdir = tempfile.mkdtemp(prefix="dd-browser-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)

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
        self.assertTrue(driver.current_url.endswith("/lookup"), driver.current_url)
        text = self._page(driver, "lookup-empty")
        self.assertIn("Your codename is active", text)
        self.assertIn("There are no replies yet", text)
        return codename

    def _submit(self, driver, attachment: str) -> None:
        _css(driver, "#msg").send_keys(MESSAGE)
        _css(driver, "#fh").send_keys(attachment)  # the file chooser, without a dialog
        follow(driver, "form[action='/submit'] button[type=submit]")
        self.assertTrue(driver.current_url.endswith("/lookup"), driver.current_url)
        text = self._page(driver, "lookup-submitted")
        self.assertIn("We received your message and 1 document", text)
        self.assertEqual(_css(driver, "#msg").get_attribute("value"), "")

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
        _css(driver, "#codename").send_keys(f"  {codename}  ")
        follow(driver, "form[action='/login'] button[type=submit]")
        self.assertTrue(driver.current_url.endswith("/lookup"), driver.current_url)
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
        self.assertIn("There are no replies yet", text)

    def _not_found(self, driver) -> None:
        driver.get(self.url + "/no/such/page")
        text = self._page(driver, "not-found")
        self.assertIn("There is nothing at this address", text)
        self.assertIn("Not found", driver.title)

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
        reply = yield self.server.service.newsroom.add_reply(self._source_id(), REPLY)
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
