"""Issue 31 item 3 in a real Chromium: the journalist pages in German (left to right) and Arabic
(right to left) pass axe-core at WCAG 2.1 A and AA, are marked with their language and
direction, fit their window, and are saved as screenshots
(tests/screenshots/journalist-<code>-<page>-desktop.png).

The browser asks for the language (Chromium's ``intl.accept_languages``), so the login page is
already in it; after logging in, the language is chosen on the account page, as a journalist
would. The client certificate and the CA come from a private NSS database, as in
``test_journalist_browser``; axe is injected by WebDriver (scripts on in the browser, none on the
pages: their CSP allows none).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.web.journalist import i18n
from tests._support import Browser, TotpDevice, add_journalist, issue_client_cert, start_journalist_server
from tests.browser import test_journalist_browser as jb
from tests.browser import test_source_browser as sb
from tests.browser._chromium import DESKTOP, follow, horizontal_overflow, quit_driver, require_chromium, screenshot, \
    start_driver

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
except ImportError:  # require_chromium() skips with the reason
    pass

# One language of each direction (issue 31 item 3).
CODES = ("de", "ar")


class JournalistLanguagesBrowserTests(unittest.TestCase):
    timeout = 300

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        jb.require_nss_tools()
        self.server = yield start_journalist_server(self)
        self.url = self.server.journalist_url
        issue_client_cert(self.server, "alice")
        self.p12 = os.path.join(self.server.data_dir, "clients", "alice.p12")
        self.admin = yield add_journalist(self.server, "alice", admin=True)
        self.other = yield add_journalist(self.server, "bob")
        self.device = TotpDevice(self.server, self.admin.totp_secret)
        self.tempdir = tempfile.mkdtemp(prefix="dd-jlang-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("a message from a source", [("notes.txt", b"a document")])

    @inlineCallbacks
    def _driver(self, code: str):
        home = jb.make_nss_home(self.tempdir, self.server.server_cert, self.p12)
        rule = {"pattern": self.url, "filter": {"ISSUER": {"CN": jb.ca_common_name(
            os.path.join(self.server.ca_dir, "ca.pem"))}}}
        prefs = {jb.AUTO_SELECT_PREF: [json.dumps(rule)], "intl.accept_languages": i18n.speech(code).tag}
        driver = yield deferToThread(start_driver, DESKTOP, javascript=True, extra_prefs=prefs,
                                     env=dict(os.environ, HOME=home), page_load_timeout=20)
        self.addCleanup(deferToThread, quit_driver, driver)
        return driver

    def _visit(self, driver, code: str, found: dict[str, list[str]]) -> None:
        """Blocking: log in, choose ``code``, and audit every page."""
        speech = i18n.speech(code)

        def audit(name: str) -> None:
            shot = screenshot(driver, f"journalist-{code}-{name}")
            html = driver.find_element(By.CSS_SELECTOR, "html")
            self.assertEqual((html.get_attribute("lang"), html.get_attribute("dir")), (speech.tag, speech.direction),
                             name)
            self.assertEqual(horizontal_overflow(driver), 0, f"{code}/{name}: wider than the window; see {shot}")
            found[f"{code}/{name}"] = [f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}"
                                       for v in sb._axe_violations(driver)]

        driver.get(self.url + "/login")
        audit("login")
        driver.find_element(By.ID, "username").send_keys("alice")
        driver.find_element(By.ID, "passphrase").send_keys("not the passphrase")
        follow(driver, "form[action='/login'] button[type=submit]")
        audit("login-failed")
        driver.find_element(By.ID, "passphrase").send_keys(self.admin.passphrase)
        driver.find_element(By.ID, "one_time_code").send_keys(self.device.code())
        follow(driver, "form[action='/login'] button[type=submit]")
        driver.get(self.url + "/account")
        Select(driver.find_element(By.ID, "language-choice")).select_by_value(code)
        follow(driver, "#language button[type=submit]")
        audit("account")
        driver.get(self.url + "/sources")
        audit("sources")
        source = driver.find_element(By.CSS_SELECTOR, "main a.designation").get_attribute("href")
        driver.get(source)
        audit("source")
        driver.get(source + "/delete")
        audit("source-delete")
        driver.get(self.url + "/admin/users")
        audit("users")
        driver.get(f"{self.url}/admin/users/{self.other.uuid}/reset-2fa")
        audit("users-reset-2fa")
        driver.get(self.url + "/admin/settings")
        audit("settings")
        driver.get(self.url + "/admin/source-texts")
        audit("source-texts")
        driver.get(self.url + "/admin/desks")
        audit("desks")
        driver.get(driver.find_element(By.CSS_SELECTOR, "main a[href^='/admin/desks/']").get_attribute("href"))
        audit("desk")
        driver.get(self.url + "/account/keys/new")
        audit("key-enrol")
        driver.get(self.url + "/no/such/page")
        audit("not-found")

    @inlineCallbacks
    def test_journalist_pages_pass_axe_left_to_right_and_right_to_left(self):
        found: dict[str, list[str]] = {}
        for code in CODES:
            driver = yield self._driver(code)
            yield deferToThread(self._visit, driver, code, found)
        self.assertEqual(len(found), 14 * len(CODES))
        self.assertEqual({page: v for page, v in found.items() if v}, {})
