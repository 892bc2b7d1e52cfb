"""Issue 27 item 7 ("Sources, smaller") in a real Chromium with JavaScript off, in every language:
a mistyped codename stays in the box; a refusal at ``POST /submit`` keeps the message in its own
answer, and sending it again from the history stores nothing twice; Back after a send never
shows the sent message as unsent; deleting the last reply says so.
"""
from __future__ import annotations

import os
from urllib.parse import urlparse

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from deaddrop.newsroom import codenames
from deaddrop.admission.queues import Busy
from deaddrop.web.source import i18n, pages
from tests.browser._chromium import DESKTOP, follow, quit_driver, screenshot, start_driver
from tests.browser.test_source_browser import KEPT, _BrowserServerTest, _asks_to_resubmit, _css, _text
from tests.integration.test_source_flow import stored_messages

try:
    from selenium.webdriver.common.by import By
except ImportError:  # require_chromium() skips with the reason
    pass

NO_REPLIES_YET = "There are no replies yet. Journalists may take days to answer: please check back later."


def _box(driver, selector: str = "#msg") -> str | None:
    """What a text box on the page holds (line breaks as typed), or None if there is none."""
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return found[0].get_attribute("value").replace("\r\n", "\n") if found else None


class SourcesSmallerBrowserTests(_BrowserServerTest):
    timeout = 240
    server_options = dict(max_upload_size=64 * 1024, source_session_idle=3600.0)

    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.driver = yield deferToThread(start_driver, DESKTOP)
        self.addCleanup(deferToThread, quit_driver, self.driver)

    def _new_source(self) -> str:
        self.driver.get(self.url + "/generate")
        codename = _text(self.driver, "#codename")
        follow(self.driver, "form[action='/create'] button[type=submit]")
        return codename

    def _send(self, message: str = "", file: str | None = None) -> None:
        if message:
            _css(self.driver, "#msg").send_keys(message)
        if file:
            _css(self.driver, "#fh").send_keys(file)
        follow(self.driver, "form[action='/submit'] button[type=submit]")

    # -- a mistyped codename stays in the box ------------------------------------------------

    @inlineCallbacks
    def test_a_mistyped_codename_stays_in_the_box_in_every_language(self):
        driver = self.driver

        def run() -> None:
            codename = self._new_source()
            driver.get(self.url + "/logout")
            words = codename.split()
            typo = next(t for t in (words[2][:-1] + c for c in "qzxj") if t not in codenames.codename_words())
            typed = ", ".join(words[:2]).upper() + " " + " ".join([typo] + words[3:])
            for code in i18n.LANGUAGES:
                driver.get(self.url + f"/language/{code}?next=/login")
                _css(driver, "#codename").send_keys(typed)
                follow(driver, "form[action='/login'] button[type=submit]")
                self.assertEqual(_css(driver, "html").get_attribute("lang"), i18n.bcp47(code))
                self.assertEqual(_box(driver, "#codename"), typed, code)  # all seven words, as typed
                self.assertIn(typo, _text(driver, ".flash-error"), code)  # the word to fix, named
                self.assertEqual(urlparse(driver.current_url).path, "/login")  # answered, not redirected
                for word in words:
                    self.assertNotIn(word, driver.current_url)
                if code == "fa":
                    screenshot(driver, "source-fa-login-kept")
            # Fix the one word in the box and log in.
            box = _css(driver, "#codename")
            box.clear()
            box.send_keys(typed.replace(typo, words[2]))
            follow(driver, "form[action='/login'] button[type=submit]")
            self.assertEqual(urlparse(driver.current_url).path, "/lookup")
        yield deferToThread(run)

    # -- refusals at POST /submit: answered by the POST, sent again harmlessly -----------------

    def _back_through_history(self, steps: int) -> int:
        """Back ``steps`` times; a page that asks to send its form again is sent again, and must
        then say what arrived (never the sent message in a box). -> how many asked."""
        driver, asked = self.driver, 0
        for _ in range(steps):
            driver.back()
            if _asks_to_resubmit(driver):
                asked += 1
                driver.refresh()  # "send again", as a source pressing Reload there does
                self.assertIn("We received your message", _text(driver))
            self.assertNotEqual(_box(driver), KEPT, driver.current_url)
        return asked

    @inlineCallbacks
    def test_refusals_with_a_message_answer_the_post_and_sending_one_again_stores_once(self):
        """Another upload in flight (429) and a busy server (503), refused once the body had
        arrived: the POST's own answer is the form with the message in it, which is kept nowhere
        on the server (a store of drafts shared by all sources was a clock of their activity:
        docs/threat-model.md, "Shared stores"). The price: Back or Forward to such a refusal asks
        to send the form again; sent again, logged in or after logging in anew, it is stored once
        and answered with what arrived."""
        driver = self.driver
        newsroom = self.server.service.newsroom
        in_flight = [True]
        self.patch(newsroom.submissions, "may_upload", lambda source_id: not in_flight[0])
        encrypt, busy = newsroom.submissions.encrypt_message, [True]

        def encrypt_once_busy(*args, **kwargs):
            if busy[0]:
                busy[0] = False
                raise Busy()
            return encrypt(*args, **kwargs)
        self.patch(newsroom.submissions, "encrypt_message", encrypt_once_busy)

        def run() -> None:
            codename = self._new_source()
            self._send(KEPT)
            self.assertIn("Another submission from you is still being received", _text(driver))
            self.assertEqual(_box(driver), KEPT)
            self.assertEqual(urlparse(driver.current_url).path, "/submit")  # the POST's own answer
            in_flight[0] = False
            self._send()  # the message is still in the box: now the server is busy
            self.assertIn("The drop box is busy", _text(driver))
            self.assertEqual(_box(driver), KEPT)
            self._send()
            self.assertIn("We received your message", _text(driver))
            # Logged out, the busy refusal sent again from the history leads to the login page
            # with the message; logging in from there says what arrived and stores nothing.
            driver.get(self.url + "/logout")
            driver.back()  # what arrived (a GET): now the login page
            self.assertFalse(_asks_to_resubmit(driver), driver.current_url)
            driver.back()
            self.assertTrue(_asks_to_resubmit(driver), driver.current_url)
            driver.refresh()
            self.assertEqual(_box(driver), KEPT)
            _css(driver, "#codename").send_keys(codename)
            follow(driver, "form[action='/login'] button[type=submit]")
            self.assertIn("We received your message", _text(driver))
            self.assertIsNone(_box(driver))
            # Logged in anew, each refusal sent again from the history says what arrived.
            self.assertEqual(self._back_through_history(3), 2)
        yield deferToThread(run)
        self.assertEqual([m.replace(b"\r\n", b"\n") for m in stored_messages(self.server.data_dir)], [KEPT.encode()])

    @inlineCallbacks
    def test_an_ended_session_answers_with_the_login_page_and_the_message_in_it(self):
        driver = self.driver

        def run() -> None:
            codename = self._new_source()
            _css(driver, "#msg").send_keys(KEPT)
            self.server.service.source.sessions.destroy_where(lambda s: True)  # what the session's minutes do
            follow(driver, "form[action='/submit'] button[type=submit]")
            self.assertIn("your message is kept below", _text(driver))
            self.assertEqual(_box(driver), KEPT)
            _css(driver, "#codename").send_keys(codename)
            follow(driver, "form[action='/login'] button[type=submit]")
            self.assertIn("We received your message", _text(driver))
            self.assertEqual(self._back_through_history(3), 1)  # the refusal, sent again: stored once
        yield deferToThread(run)
        self.assertEqual(len(stored_messages(self.server.data_dir)), 1)

    # -- Back after a successful send ----------------------------------------------------------

    @inlineCallbacks
    def test_back_after_a_send_never_shows_the_sent_message_as_a_draft(self):
        """A refusal that comes while a file is still arriving is answered at once (a browser
        still sending does not follow a redirect); sent again from the browser's history after
        the message went through, it shows what arrived, not the message back in a box."""
        driver = self.driver
        big = os.path.join(self.tempdir, "too big.bin")
        with open(big, "wb") as f:
            f.write(os.urandom(3 * 1024 * 1024))  # 3 MiB against a 64 KiB limit

        def run() -> None:
            self._new_source()
            self._send(KEPT, big)
            self.assertIn("Your files are too large", _text(driver))
            self.assertEqual(_box(driver), KEPT)
            self._send()  # the file is not chosen again: the message alone goes
            self.assertIn("We received your message", _text(driver))
            driver.back()  # the refusal was the answer to the POST: Chromium offers to send it again
            driver.refresh()  # and sends it again, as a source pressing Reload there does
            self.assertIn("We received your message", _text(driver))
            self.assertIsNone(_box(driver))
            for _ in range(2):
                driver.back()
                self.assertNotEqual(_box(driver), KEPT)
        yield deferToThread(run)
        self.assertEqual(len(stored_messages(self.server.data_dir)), 1)

    # -- deleting the last reply ---------------------------------------------------------------

    @inlineCallbacks
    def test_deleting_the_last_reply_says_the_replies_were_deleted_in_every_language(self):
        driver = self.driver
        yield deferToThread(self._new_source)
        yield deferToThread(self._send, "first")  # the source's key pair comes with it
        source_id = yield self.server.service.newsroom.db.run(
            lambda conn: conn.execute("SELECT id FROM sources ORDER BY id DESC LIMIT 1").fetchone()[0])
        for code in i18n.LANGUAGES:
            yield self.server.service.newsroom.replies.add(source_id, f"REPLY-IN-{code}")

            def delete_it() -> str:
                driver.get(self.url + f"/language/{code}?next=/lookup")
                self.assertEqual(_text(driver, ".reply"), f"REPLY-IN-{code}")
                if code == "fa":
                    screenshot(driver, "source-fa-reply")
                follow(driver, "form[action='/delete'] button[type=submit]")
                return _text(driver)
            text = yield deferToThread(delete_it)
            lang = i18n.language(code)
            self.assertIn(lang.gettext(pages.REPLIES_GONE), text, code)
            self.assertNotIn(lang.gettext(NO_REPLIES_YET), text, code)
        # "Delete all replies" too, and the page says it again on every later visit of this login.
        yield self.server.service.newsroom.replies.add(source_id, "ONE")
        yield self.server.service.newsroom.replies.add(source_id, "TWO")

        def delete_all() -> None:
            driver.get(self.url + "/language/en?next=/lookup")
            follow(driver, "form[action='/delete-all'] button[type=submit]")
            self.assertIn(pages.REPLIES_GONE, _text(driver))
            driver.get(self.url + "/lookup")
            self.assertIn(pages.REPLIES_GONE, _text(driver))
        yield deferToThread(delete_all)
