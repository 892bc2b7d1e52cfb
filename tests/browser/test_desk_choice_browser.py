"""The desk choice (issue 29) in a real Chromium with JavaScript off, in Spanish (left to right)
and Hebrew (right to left): a new source ticks a desk and sends, its page says where its messages
go in a closed panel, and it adds a desk later. Each page as the browser got it is then audited
by axe-core (WCAG 2.1 A and AA), the desks panel opened too, and none may be wider than its
window (a phone for Hebrew).
"""
from __future__ import annotations

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from deaddrop.web.source import i18n
from tests.browser._chromium import (
    DESKTOP, PHONE, assert_javascript_off, follow, horizontal_overflow, quit_driver, require_chromium, screenshot,
    start_driver,
)
from tests.browser.test_every_language_browser import _axe, _show
from tests.browser.test_source_browser import AXE_SCRIPT, AXE_VERSION
from tests.integration.test_admin_cli import run_cli as run_admin
from tests.integration.test_desks import TwoDesks

try:
    from selenium.webdriver.common.by import By
except ImportError:  # require_chromium() skips with the reason
    pass

_log = Logger()
# (language, window): one left to right on a desktop, one right to left on a phone.
VISITS = (("es", DESKTOP), ("he", PHONE))


class DeskChoiceBrowserTests(TwoDesks):
    timeout = 300

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        yield super().setUp()
        data = ("--data-dir", self.server.data_dir)
        for argv in (("rename", "A", "Investigations"), ("rename", "B", "Local news"),
                     ("describe", "Investigations", "--lang", "es", "--title", "Investigación",
                      "--description", "El dinero público y quién lo gasta."),
                     ("describe", "Investigations", "--lang", "he", "--title", "תחקירים",
                      "--description", "כסף ציבורי ומי שמוציא אותו."),
                     ("set", "Local news", "--show-members", "on")):
            code, _, err = yield deferToThread(run_admin, "desk", *argv, *data)
            self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()
        self.url = self.server.source_url

    @inlineCallbacks
    def _driver(self, size, javascript: bool = False):
        driver = yield deferToThread(start_driver, size, javascript=javascript)
        self.addCleanup(deferToThread, quit_driver, driver)
        return driver

    def _visit(self, driver, code: str) -> dict[str, str]:
        """A new source's visit without JavaScript. -> each page's HTML as the browser got it."""
        pages: dict[str, str] = {}

        def keep(name: str) -> None:
            self.assertLessEqual(horizontal_overflow(driver), 0, f"{code}/{name}")
            screenshot(driver, f"source-desks-{code}-{name}")
            pages[name] = driver.page_source

        driver.get(self.url + f"/language/{code}")
        driver.get(self.url + "/generate")
        follow(driver, "form[action='/create'] button[type=submit]")
        self.assertEqual(driver.find_element(By.CSS_SELECTOR, "html").get_attribute("dir"), i18n.language(code).direction)
        self.assertTrue(driver.current_url.endswith("/desks"), driver.current_url)
        keep("choice")
        follow(driver, "#desk-form button[type=submit]")  # nothing ticked
        self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "main .flash-error")), 1)
        keep("choice-error")
        labels = driver.find_elements(By.CSS_SELECTOR, ".desk label")
        [investigations] = [label for label in labels if label.text in ("Investigación", "תחקירים")]
        investigations.click()  # the label ticks its box
        follow(driver, "#desk-form button[type=submit]")
        panel = driver.find_element(By.CSS_SELECTOR, "details#desks")
        self.assertIsNone(panel.get_attribute("open"))  # closed until the source opens it
        keep("lookup")
        driver.find_element(By.CSS_SELECTOR, "#msg").send_keys("para investigación")
        follow(driver, "form[action='/submit'] button[type=submit]")
        driver.find_element(By.CSS_SELECTOR, "details#desks summary").click()
        self.assertEqual(driver.find_element(By.CSS_SELECTOR, "details#desks").get_attribute("open"), "true")
        keep("received-desks-shown")
        follow(driver, "details#desks a[href='/desks']")
        keep("choice-later")
        assert_javascript_off(driver)  # (start_driver checked it too; this leaves the probe page)
        return pages

    @inlineCallbacks
    def test_the_choice_works_without_javascript_and_passes_axe_left_to_right_and_right_to_left(self):
        seen: dict[str, str] = {}
        for code, size in VISITS:
            driver = yield self._driver(size)
            pages = yield deferToThread(self._visit, driver, code)
            seen.update({f"{code}/{name}": html for name, html in pages.items()})
        self.assertEqual(len(self.server.service.newsroom.activity.today.desks), 1)  # both sent to one desk
        auditor = yield self._driver(DESKTOP, javascript=True)

        def audit() -> dict[str, list[str]]:
            with open(AXE_SCRIPT, encoding="utf-8") as f:
                auditor.execute_script(f.read())
            found = {}
            for name, html in seen.items():
                _show(auditor, html)
                found[name] = _axe(auditor, i18n.bcp47(name.split("/")[0]))
            return found

        found = yield deferToThread(audit)
        _log.info("issue 29: axe-core {v} WCAG 2.1 AA on {n} desk pages, violations: {bad}", v=AXE_VERSION,
                  n=len(found), bad={k: v for k, v in found.items() if v} or "none")
        self.assertEqual({k: v for k, v in found.items() if v}, {})
        self.assertEqual(len(found), 2 * 5)
