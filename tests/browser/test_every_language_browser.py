"""Issue 31 items 2 and 5 in a real Chromium: every source state, as the crawler got it
(tests/_source_states.py, over plain HTTP: JavaScript off), laid out and audited.

* No page is wider than a 320 px phone with the longest translations: per state, the language
  whose text is longest, the one with the longest word, the longest right-to-left one, and the
  scripts that wrap without spaces (Chinese, Burmese).
* axe-core (WCAG 2.1 A and AA) finds nothing on any state in English, Chinese (Simplified),
  Hindi, Hebrew and Urdu: the Latin, Han, Devanagari, Hebrew and Arabic scripts, two of them right
  to left.
* Screenshots of each script's pages, for a person to look at: tests/screenshots/source-lang-*.

Each page is the HTML the server sent, given to Chromium whole (DevTools' setDocumentContent)
with the stylesheet inline: the pages carry no script, so it is the document a browser with
JavaScript off shows, and one Chromium renders them all without driving every form again.
The axe audit needs scripts on in the browser (axe is injected by WebDriver); the documents
are the same.
"""
from __future__ import annotations

import os
import re
import time
from typing import Iterable

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.trial import unittest

from deaddrop.web.source import i18n
from tests._english import text_chunks
from tests._source_states import Page, crawl
from tests.browser._chromium import (
    DESKTOP, WindowSize, horizontal_overflow, overflowing_elements, quit_driver, require_chromium, screenshot,
    start_driver,
)
from tests.browser.test_source_browser import AXE_SCRIPT, AXE_TAGS, AXE_VERSION

_log = Logger()

NARROW = WindowSize("320px", 320, 640, mobile=True)
AXE_LANGUAGES = ("en", "zh_Hans", "hi", "he", "ur")
# Scripts that break lines between letters or syllables, not at spaces.
_WITHOUT_SPACES = ("zh_Hans", "zh_Hant", "my")
# Per script, the pages looked at in the screenshots (a language of each script other than Latin).
SCREENSHOT_STATES = ("index", "lookup-replies", "safety")
_STYLESHEET = os.path.join(os.path.dirname(__file__), "..", "..", "deaddrop", "web", "static", "style.css")

_crawled: dict[str, dict[str, Page]] = {}


@inlineCallbacks
def _every_state(testcase: unittest.TestCase, codes: Iterable[str]):
    """Every state in each language of ``codes`` (each language crawled once per test process)."""
    missing = [c for c in codes if c not in _crawled]
    if missing:
        seen, seconds = yield crawl(testcase, missing)
        _log.info("issue 31 browser checks: crawled {n} pages in {s:.1f}s", n=sum(map(len, seen.values())), s=seconds)
        _crawled.update(seen)
    return {c: _crawled[c] for c in codes}


def _standalone(html: str) -> str:
    """The page with its stylesheet inline (it loads nothing else)."""
    with open(_STYLESHEET, encoding="utf-8") as f:
        css = f.read()
    return re.sub(r'<link rel="stylesheet" href="[^"]*" />', lambda _m: f"<style>{css}</style>", html, count=1)


def _show(driver, html: str) -> None:
    frame = driver.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["id"]
    driver.execute_cdp_cmd("Page.setDocumentContent", {"frameId": frame, "html": _standalone(html)})


def _text_length(html: str) -> int:
    return sum(len(chunk) for chunk in text_chunks(html)[1])


def _longest_word(html: str) -> int:
    return max((len(word) for chunk in text_chunks(html)[1] for word in chunk.split()), default=0)


def widest_candidates(seen: dict[str, dict[str, Page]], state: str) -> set[str]:
    """The languages most likely to widen ``state``'s page."""
    codes = [c for c in seen if state in seen[c]]
    rtl = [c for c in codes if i18n.LANGUAGES[c][1] == "rtl"]
    spaced = [c for c in codes if c not in _WITHOUT_SPACES]
    chosen = {max(codes, key=lambda c: _text_length(seen[c][state].html)),
              max(spaced, key=lambda c: _longest_word(seen[c][state].html))}
    chosen |= {max(rtl, key=lambda c: _text_length(seen[c][state].html))} if rtl else set()
    return chosen | {c for c in _WITHOUT_SPACES if c in codes}


def _open_codename_panel(html: str) -> str:
    """The page as it is once the source opens "Show my codename" (a <details>)."""
    return html.replace('<details class="card reveal">', '<details class="card reveal" open="">')


class EveryLanguageBrowserTests(unittest.TestCase):
    timeout = 600

    def setUp(self):
        require_chromium()

    @inlineCallbacks
    def _driver(self, size: WindowSize, javascript: bool = False):
        driver = yield deferToThread(start_driver, size, javascript=javascript)
        self.addCleanup(deferToThread, quit_driver, driver)
        yield deferToThread(driver.get, "about:blank")
        return driver

    @inlineCallbacks
    def test_no_page_is_wider_than_a_320px_phone_in_the_longest_translations(self):
        seen = yield _every_state(self, i18n.LANGUAGES)
        driver = yield self._driver(NARROW)
        desktop = yield self._driver(DESKTOP)
        states = sorted(seen["en"])

        def run() -> tuple[list[str], int, list[str]]:
            problems, checked, shots = [], 0, []
            for state in states:
                for code in sorted(widest_candidates(seen, state)):
                    _show(driver, seen[code][state].html)
                    checked += 1
                    overflow = horizontal_overflow(driver)
                    if overflow:
                        path = screenshot(driver, f"source-overflow-{code}-{state}")
                        problems.append(f"{code}/{state}: {overflow}px too wide: {overflowing_elements(driver)}; "
                                        f"see {path}")
            for code in (c for c in seen if c != "en" and not _latin(c)):
                for state in SCREENSHOT_STATES:
                    _show(driver, seen[code][state].html)
                    shots.append(screenshot(driver, f"source-lang-{code}-{state}"))
                _show(desktop, seen[code]["index"].html)
                shots.append(screenshot(desktop, f"source-lang-{code}-index"))
            return problems, checked, shots

        started = time.monotonic()
        problems, checked, shots = yield deferToThread(run)
        _log.info("issue 31: {n} pages at 320px ({states} states), {shots} screenshots in {s:.1f}s", n=checked,
                  states=len(states), shots=len(shots), s=time.monotonic() - started)
        self.assertEqual(problems, [], "\n".join(problems))
        self.assertGreaterEqual(checked, 2 * len(states))

    @inlineCallbacks
    def test_every_state_passes_axe_in_english_chinese_hindi_hebrew_and_urdu(self):
        codes = [c for c in AXE_LANGUAGES if c in i18n.LANGUAGES]
        seen = yield _every_state(self, codes)
        driver = yield self._driver(DESKTOP, javascript=True)

        def run() -> dict[str, list[str]]:
            with open(AXE_SCRIPT, encoding="utf-8") as f:
                driver.execute_script(f.read())  # once: the window, and axe in it, outlive each document
            found = {}
            for code in codes:
                for state, page in seen[code].items():
                    variants = {state: page.html}
                    if '<details class="card reveal">' in page.html:
                        variants[f"{state}+codename-shown"] = _open_codename_panel(page.html)
                    for name, html in variants.items():
                        _show(driver, html)
                        found[f"{code}/{name}"] = _axe(driver, i18n.bcp47(code))
            return found

        started = time.monotonic()
        found = yield deferToThread(run)
        _log.info("issue 31: axe-core {v} WCAG 2.1 AA on {n} pages ({codes}) in {s:.1f}s, violations: {bad}",
                  v=AXE_VERSION, n=len(found), codes=", ".join(codes), s=time.monotonic() - started,
                  bad={k: v for k, v in found.items() if v} or "none")
        self.assertEqual({k: v for k, v in found.items() if v}, {})
        self.assertGreaterEqual(len(found), len(codes) * len(seen["en"]))


def _latin(code: str) -> bool:
    """Whether ``code`` is written in the Latin script (CLDR's likely script for it)."""
    from babel.core import get_global

    likely = get_global("likely_subtags").get(code) or code
    return "_Latn" in likely


def _axe(driver, tag: str) -> list[str]:
    """axe on the document shown: its violations, "rule (impact): [targets]"."""
    outcome = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "if (document.documentElement.lang !== arguments[2]) { done({error: 'not the page: ' + document.documentElement.lang}); return; }"
        "if (typeof axe === 'undefined' || axe.version !== arguments[1]) { done({error: 'axe-core is missing'}); return; }"
        "axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}},"
        "        (error, results) => done(error ? {error: String(error)} : {violations: results.violations}));",
        AXE_TAGS, AXE_VERSION, tag)
    if "error" in outcome:
        raise AssertionError(f"axe-core could not run: {outcome['error']}")
    return [f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}" for v in outcome["violations"]]
