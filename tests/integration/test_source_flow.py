"""The source side end to end: real listener, real gpg, real SQLite, driven with treq."""
from __future__ import annotations

import html as htmllib
import os
import re
import sqlite3
import zlib

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.web.source.app import NOT_RECOGNIZED
from tests._support import Browser, LogCapture, multipart_body, start_server, test_svs


def stored_files(data_dir: str) -> list[str]:
    found = []
    for root, _dirs, names in os.walk(os.path.join(data_dir, "store")):
        found += [os.path.join(root, n) for n in names]
    return sorted(found)


def stored_messages(data_dir: str) -> list[bytes]:
    """Every stored message, decrypted by the test SVS."""
    found = []
    for path in stored_files(data_dir):
        if path.endswith("-msg.gpg"):
            with open(path, "rb") as f:
                found.append(test_svs().decrypt(f.read()))
    return found


def gunzip_with_name(blob: bytes) -> tuple[str, bytes]:
    assert blob[:3] == b"\x1f\x8b\x08" and blob[3] & 0x08, "not a gzip stream with FNAME"
    end = blob.index(b"\x00", 10)
    name = blob[10:end].decode("utf-8")
    return name, zlib.decompress(blob[end + 1:], -zlib.MAX_WBITS)



def _form_token(html: str) -> str:
    """The one-time token of the page's submission form."""
    found = re.search(r'name="form_token" value="([^"]+)"', html)
    assert found, "no submission form"
    return found.group(1)


def _codename_box(html: str) -> str:
    """What the login page's codename box holds."""
    found = re.search(r'<textarea name="codename"[^>]*>([^<]*)</textarea>', html)
    assert found, "no codename box"
    return htmllib.unescape(found.group(1))


def files_holding(root: str, needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    found = []
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
            except OSError:
                pass
    return found

class SourceFlowTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.logs = LogCapture().start()
        self.addCleanup(self.logs.stop)
        self.server = yield start_server(self)
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)

    @inlineCallbacks
    def test_full_flow_stores_only_ciphertext_that_decrypts_to_what_was_sent(self):
        marker = "PLAINTEXT-MARKER-7f3a9c"
        file_bytes = (b"FILE-MARKER-0c1d " * 4000) + os.urandom(50_000)
        codename = yield self.browser.create_source()
        response, html = yield self.browser.submit(f"hello {marker}", [("report.pdf", file_bytes)])
        self.assertEqual(response.code, 200)
        self.assertIn("We received your message and 1 document", html)

        files = stored_files(self.server.data_dir)
        self.assertEqual(len(files), 2, files)
        msg = [f for f in files if f.endswith("-msg.gpg")][0]
        doc = [f for f in files if f.endswith("-doc.gz.gpg")][0]
        self.assertRegex(os.path.basename(msg), r"^1-[a-z]+_[a-z]+_[a-z]+-msg\.gpg$")
        self.assertRegex(os.path.basename(doc), r"^2-[a-z]+_[a-z]+_[a-z]+-doc\.gz\.gpg$")
        svs = test_svs()
        with open(msg, "rb") as f:
            self.assertEqual(svs.decrypt(f.read()).decode(), f"hello {marker}")
        with open(doc, "rb") as f:
            name, content = gunzip_with_name(svs.decrypt(f.read()))
        self.assertEqual((name, content), ("report.pdf", file_bytes))

        # Log out, log back in, and the account is still there.
        response, html = yield self.browser.get("/logout")
        self.assertEqual(response.code, 200)
        self.assertIn("You are logged out", html)
        self.assertEqual([c.value for c in self.browser.cookies], [])
        response, html = yield self.browser.get("/lookup")
        self.assertIn("Log in with your codename", html)
        response, html = yield self.browser.login(f"  {codename.upper()}  ")
        self.assertIn("Send more and read replies", html)

        yield self.server.stop()
        self._assert_secrets_absent(codename, [marker.encode(), b"FILE-MARKER-0c1d", file_bytes[-64:]])

    def _assert_secrets_absent(self, codename: str, plaintexts: list[bytes]) -> None:
        forbidden = [codename.encode()] + plaintexts
        for root, _dirs, names in os.walk(self.server.data_dir):
            for name in names:
                path = os.path.join(root, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    content = f.read()
                for secret in forbidden:
                    self.assertNotIn(secret, content, f"{secret[:30]!r} found in {path}")
        log_text = self.logs.text()
        self.assertIn("store recovery", log_text)  # the capture works
        self.assertNotIn("request failed", log_text)
        # Source-side failures are counted for the day's report instead of logged: none here.
        self.assertEqual(self.server.service.newsroom.activity.today.failures, {})
        # No access log on the source listener: no paths, no user agents.
        self.assertNotIn("UA-MARKER-5e1f", log_text)
        self.assertNotIn('"GET /', log_text)
        self.assertNotIn('"POST /', log_text)
        for secret in forbidden:
            self.assertNotIn(secret.decode("latin-1"), log_text)
        self.assertNotIn(codename, open(os.path.join(self.server.data_dir, "logs", "security.jsonl")).read())

    @inlineCallbacks
    def test_codename_logs_in_after_a_restart_of_the_service(self):
        codename = yield self.browser.create_source()
        yield self.browser.submit("before restart")
        yield self.server.stop()
        yield self.server.start()
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        response, html = yield browser.login(codename)
        self.assertIn("Send more and read replies", html)
        response, html = yield browser.submit("after restart")
        self.assertIn("We received your message", html)
        names = [os.path.basename(p) for p in stored_files(self.server.data_dir)]
        self.assertEqual(sorted(n.split("-")[0] for n in names), ["1", "2"])

    @inlineCallbacks
    def test_wrong_overlong_and_invalid_codenames_are_refused_without_a_session(self):
        codename = yield self.browser.create_source()
        yield self.browser.get("/logout")
        words = codename.split()
        wrong = " ".join(reversed(words)) if words != list(reversed(words)) else "abacus " * 7
        for attempt in [wrong, "x" * 10_000, "", "not a codename at all", "abacus\x00abdomen abacus abacus",
                        "ÅÄÖ ÅÄÖ ÅÄÖ ÅÄÖ", " ".join(words[:3])]:
            browser = Browser(self.server.source_url)
            self.addCleanup(browser.close)
            response, html = yield browser.login(attempt)
            self.assertEqual(response.code, 403, attempt[:40])
            self.assertTrue(NOT_RECOGNIZED in html or "are not in the codename word list" in html, attempt[:40])
            response, html = yield browser.get("/lookup")
            self.assertIn("Log in with your codename", html)  # no session was granted

    @inlineCallbacks
    def test_a_mistyped_codename_stays_in_the_box_and_names_the_words_outside_the_list(self):
        """Issue 27 item 7: a refused login shows what was typed again, so one slip does not mean
        typing seven words again; in that answer only (no-store, no redirect), never on disk or in
        a log, and the same page whichever codename it nearly was."""
        codename = yield self.browser.create_source()
        yield self.browser.get("/logout")
        words = codename.split()
        from deaddrop.newsroom import codenames

        typo = next(t for t in (words[2][:-1] + c for c in "qzxj") if t not in codenames.codename_words())
        typed = " ".join(words[:2] + [typo] + words[3:]).upper()
        response, html = yield self.browser.login(typed)
        self.assertEqual(response.code, 403)
        self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"no-store"])
        self.assertIsNone(response.headers.getRawHeaders(b"location"))
        self.assertIn(f"This word is not in the codename word list, so it is part of no codename: {typo}.", html)
        self.assertEqual(_codename_box(html), typed)
        # One word from a real codename, or far from every one: the same page but for the box.
        near = " ".join(words[:-1] + [next(w for w in sorted(codenames.codename_words()) if w != words[-1])])
        far = codenames.generate_codename(len(words))
        pages = []
        for attempt in (near, far):
            response, page = yield self.browser.login(attempt)
            self.assertEqual((response.code, _codename_box(page)), (403, attempt))
            pages.append(re.sub(r'(value|href|formaction)="[^"]*"', "", page.replace(attempt, "")))
        self.assertEqual(pages[0], pages[1])
        # Another site's form fills nothing in.
        response, page = yield self.browser.get("/login")
        response, page = yield self.browser.post("/login", headers={"Sec-Fetch-Site": "cross-site"}, data={
            "codename": near, "csrf_token": self.browser.csrf(page)})
        self.assertEqual(_codename_box(page), "")
        response, html = yield self.browser.login(" ".join(words))
        self.assertIn("Send more and read replies", html)
        yield self.server.stop()
        for secret in (typed, typed.lower(), typo, near, far):
            self.assertNotIn(secret, self.logs.text())
            self.assertEqual(files_holding(self.server.data_dir, secret.encode()), [], secret)

    @inlineCallbacks
    def test_a_busy_refusal_answers_with_the_form_and_its_message_and_a_resend_stores_once(self):
        """Refused once the body has arrived, a busy server answers the POST itself: 503 with
        Retry-After, the form and the message (even while the replies cannot be read), and
        nothing of the message kept on the server (a shared store of drafts was a clock of other
        sources: docs/threat-model.md, "Shared stores"). The same POST sent again (Back, then
        "resend") is harmless: stored once, then answered with what arrived."""
        from deaddrop.admission.queues import Busy

        yield self.browser.create_source()
        newsroom = self.server.service.newsroom
        encrypt, for_source = newsroom.submissions.encrypt_message, newsroom.replies.for_source

        def busy(*args, **kwargs):
            raise Busy()
        response, html = yield self.browser.get("/lookup")
        self.patch(newsroom.submissions, "encrypt_message", busy)
        self.patch(newsroom.replies, "for_source", busy)  # the reply queue is full too
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)),
                                             ("form_token", _form_token(html)), ("msg", "BUSY-MARKER-2e7d")],
                                            [("", b"")])
        headers = {"User-Agent": Browser.USER_AGENT, "Content-Type": content_type}
        response, html = yield self.browser.post("/submit", data=body, follow=False, headers=headers)
        self.assertEqual(response.code, 503)
        self.assertEqual(response.headers.getRawHeaders(b"retry-after"), [b"60"])
        self.assertIn("The drop box is busy", html)
        self.assertIn("BUSY-MARKER-2e7d</textarea>", html)
        self.assertEqual(stored_files(self.server.data_dir), [])
        sessions = self.server.service.source.sessions.where(lambda s: True)
        self.assertEqual(sorted(name for s in sessions for name in s.sealed), ["codename", "passphrase"])
        self.patch(newsroom.submissions, "encrypt_message", encrypt)
        self.patch(newsroom.replies, "for_source", for_source)
        for _resent in range(2):
            response, html = yield self.browser.post("/submit", data=body, headers=headers)
            self.assertIn("We received your message", html)
        self.assertEqual(stored_messages(self.server.data_dir), [b"BUSY-MARKER-2e7d"])

    @inlineCallbacks
    def test_a_stored_form_sent_again_from_history_after_logging_out_is_stored_once(self):
        """A refusal is the answer to the POST itself, so the browser's history can send that
        form again long after it went through, in a later session: it is known as stored."""
        codename = yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        token = _form_token(html)
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)),
                                             ("form_token", token), ("msg", "ONCE-MARKER-77c1")],
                                            [("", b"")])
        headers = {"User-Agent": Browser.USER_AGENT, "Content-Type": content_type}
        response, html = yield self.browser.post("/submit", data=body, headers=headers)
        self.assertIn("We received your message", html)
        yield self.browser.get("/logout")
        # Sent again logged out: the login page, the message and its form's token in it...
        response, html = yield self.browser.post("/submit", data=body, headers=headers)
        self.assertEqual(response.code, 403)
        self.assertIn("ONCE-MARKER-77c1</textarea>", html)
        self.assertEqual(_form_token(html), token)
        # ...and logging in from it says what arrived, without storing it again.
        response, page = yield self.browser.post("/login", data={
            "csrf_token": self.browser.csrf(html), "codename": codename, "msg": "ONCE-MARKER-77c1",
            "form_token": token})
        self.assertIn("We received your message", page)
        # Sent again once more, in this new session (its old token is stale): the same.
        response, page = yield self.browser.post("/submit", data=body, headers=headers)
        self.assertIn("We received your message", page)
        self.assertEqual(stored_messages(self.server.data_dir), [b"ONCE-MARKER-77c1"])

    @inlineCallbacks
    def test_empty_submission_is_refused_and_stores_nothing(self):
        yield self.browser.create_source()
        response, html = yield self.browser.submit("   ")
        self.assertEqual(response.code, 400)
        self.assertIn("Please write a message or choose a file", html)
        self.assertEqual(stored_files(self.server.data_dir), [])

    @inlineCallbacks
    def test_oversize_upload_gets_a_413_page_and_leaves_nothing_behind(self):
        yield self.server.stop()
        server = yield start_server(self, max_upload_size=64 * 1024)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.submit("", [("big.bin", os.urandom(3 * 1024 * 1024))])
        self.assertEqual(response.code, 413)
        self.assertIn("Your files are too large: this drop box accepts at most 0.0655 MB in total", html)
        self.assertIn("Please choose smaller files.", html)  # nothing was typed: no "your message is below"
        self.assertNotIn("Your message is still below", html)
        self.assertEqual(stored_files(server.data_dir), [])
        self.assertEqual(os.listdir(os.path.join(server.data_dir, "tmp")), [])
        # A message that fits still goes through afterwards.
        response, html = yield browser.submit("small")
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_honeypot_refuses_bots(self):
        yield self.browser.create_source()
        response, html = yield self.browser.submit("buy pills", extra=[("website", "http://spam.example")])
        self.assertEqual(response.code, 403)  # as SecureDrop (issue 10)
        self.assertEqual(stored_files(self.server.data_dir), [])

    @inlineCallbacks
    def test_hostile_filename_is_sanitised_inside_the_envelope(self):
        yield self.browser.create_source()
        response, html = yield self.browser.submit("", [("../../bin/gpg", b"#!/bin/sh\n")])
        self.assertEqual(response.code, 200)
        [doc] = stored_files(self.server.data_dir)
        self.assertNotIn("gpg-", os.path.basename(doc).replace(".gpg", ""))
        with open(doc, "rb") as f:
            name, content = gunzip_with_name(test_svs().decrypt(f.read()))
        self.assertEqual((name, content), ("gpg", b"#!/bin/sh\n"))

    @inlineCallbacks
    def test_missing_or_wrong_csrf_token_is_refused(self):
        yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        for token in ["", "forged-token"]:
            response, html = yield self.browser.post(
                "/submit", data=[("csrf_token", token), ("msg", "forged")],
                files=[("fh", ("", "application/octet-stream", __import__("io").BytesIO(b"")))],
            )
            self.assertEqual(response.code, 403)
        response, html = yield self.browser.post("/delete-all", data={})
        self.assertEqual(response.code, 403)
        self.assertEqual(stored_files(self.server.data_dir), [])

    @inlineCallbacks
    def test_session_expires_after_idle_timeout(self):
        yield self.server.stop()
        server = yield start_server(self, source_session_idle=0.5)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.get("/lookup")
        self.assertIn("Send more and read replies", html)
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        yield deferLater(reactor, 0.8, lambda: None)
        response, html = yield browser.get("/lookup")
        self.assertIn("Log in with your codename", html)

    @inlineCallbacks
    def test_replies_are_shown_decrypted_and_a_source_cannot_delete_anothers(self):
        alice = self.browser
        yield alice.create_source()
        yield alice.submit("from alice")
        bob = Browser(self.server.source_url)
        self.addCleanup(bob.close)
        yield bob.create_source()
        yield bob.submit("from bob")
        newsroom = self.server.service.newsroom
        db = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        (alice_id,), (bob_id,) = db.execute("SELECT id FROM sources ORDER BY id").fetchall()
        yield newsroom.replies.add(alice_id, "reply for alice: REPLY-MARKER-a")
        bob_reply = yield newsroom.replies.add(bob_id, "reply for bob")

        response, html = yield alice.get("/lookup")
        self.assertIn("REPLY-MARKER-a", html)
        self.assertNotIn("reply for bob", html)
        # The page names her reply by its number among her own, never by its file name, which
        # carries the newsroom's designation for her.
        [(filename,)] = db.execute("SELECT filename FROM replies WHERE source_id = ?", (alice_id,)).fetchall()
        designation = filename.split("-")[1]
        for form in (designation, designation.replace("_", " "), filename):
            self.assertNotIn(form, html)
        number = re.search(r'name="reply" value="([^"]+)"', html).group(1)
        self.assertEqual(number, str(bob_reply["n"]))  # the same number as Bob's own reply
        # A number she has no reply under: refused, nothing deleted.
        for bad in ("99", "-1", "1e3", "２", "0" * 10 + "2", filename):
            response, _ = yield alice.post("/delete", data={"reply": bad, "csrf_token": alice.csrf()})
            self.assertEqual(response.code, 404, bad)
        # Alice deletes hers; Bob's reply of the same number stays.
        response, html = yield alice.post("/delete", data={"reply": number, "csrf_token": alice.csrf()})
        self.assertIn("Reply deleted", html)
        self.assertNotIn("REPLY-MARKER-a", html)
        self.assertFalse(any(p.endswith(filename) for p in stored_files(self.server.data_dir)))
        response, html = yield bob.get("/lookup")
        self.assertIn("reply for bob", html)
        # Replies are also encrypted to the submission key, so the SVS can read them.
        [bob_file] = [p for p in stored_files(self.server.data_dir) if p.endswith(bob_reply["filename"])]
        with open(bob_file, "rb") as f:
            self.assertEqual(test_svs().decrypt(f.read()), b"reply for bob")

    @inlineCallbacks
    def test_a_reply_sent_while_the_key_is_being_made_is_not_lost(self):
        """The key pair is made at the first submission; a reply in that window waits for it."""
        newsroom = self.server.service.newsroom
        from deaddrop.newsroom import codenames

        codename = codenames.generate_codename(7)
        identity, passphrase = yield newsroom.create_source(codename)
        self.assertNotIn(identity.source_id, newsroom.replies._keygen)  # nothing submitted: no key
        part = yield newsroom.submissions.encrypt_message(identity, "first message")
        committing = newsroom.submissions.commit(identity, [part], passphrase)
        # Registered before the submission is visible to journalists...
        self.assertIn(identity.source_id, newsroom.replies._keygen)
        yield committing
        self.assertIn(identity.source_id, newsroom.replies._keygen)  # ...and still in flight after it
        yield newsroom.replies.add(identity.source_id, "early REPLY-MARKER-early")
        response, html = yield self.browser.login(codename)
        self.assertIn("REPLY-MARKER-early", html)

    @inlineCallbacks
    def test_a_source_gets_its_key_pair_at_its_first_submission_not_at_create(self):
        codename = yield self.browser.create_source()
        db = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        self.addCleanup(db.close)
        self.assertEqual(db.execute("SELECT key_fingerprint, pending FROM sources").fetchall(), [(None, 1)])
        response, html = yield self.browser.get("/lookup")  # pages of a pending source make no key
        again = Browser(self.server.source_url)
        self.addCleanup(again.close)
        yield again.login(codename)
        self.assertEqual(db.execute("SELECT key_fingerprint FROM sources").fetchall(), [(None,)])
        response, html = yield self.browser.submit("first")
        self.assertEqual(response.code, 200)
        yield self.server.service.newsroom.replies._keygen.get(1)
        [(fingerprint, pending)] = db.execute("SELECT key_fingerprint, pending FROM sources").fetchall()
        self.assertRegex(fingerprint, "^[0-9A-F]{40}$")
        self.assertEqual(pending, 0)

    @inlineCallbacks
    def test_codename_is_never_in_a_cookie(self):
        codename = yield self.browser.create_source()
        yield self.browser.login(codename)
        values = [c.value for c in self.browser.cookies]
        self.assertTrue(values)
        for value in values:
            for form in (codename, codename.replace(" ", ""), codename.replace(" ", "+"), codename.replace(" ", "%20")):
                self.assertNotIn(form, value.lower())

    @inlineCallbacks
    def test_public_routes(self):
        response, body = yield self.browser.get("/robots.txt")
        self.assertEqual(body, "User-agent: *\nDisallow: /\n")
        response, body = yield self.browser.get("/metadata")
        meta = __import__("json").loads(body)
        self.assertEqual(meta["submission_key_fingerprint"], test_svs().fingerprint)
        self.assertIn("organization_name", meta)
        response, body = yield self.browser.get("/public-key")
        self.assertIn("BEGIN PGP PUBLIC KEY BLOCK", body)
        response, body = yield self.browser.get("/")
        for header, value in [(b"content-security-policy", b"default-src 'none'"), (b"cache-control", b"no-store"),
                              (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"),
                              (b"x-content-type-options", b"nosniff")]:
            self.assertIn(value, response.headers.getRawHeaders(header)[0])
        self.assertIsNone(response.headers.getRawHeaders(b"server"))
        self.assertNotIn("<script", body)


class DataDirLockTests(unittest.TestCase):
    @inlineCallbacks
    def test_a_second_server_on_the_same_data_dir_is_refused(self):
        from twisted.internet import reactor
        from twisted.internet.threads import deferToThread

        from deaddrop.config import ConfigError
        from deaddrop.service import build_service

        server = yield start_server(self)
        with self.assertRaises(ConfigError) as e:
            yield deferToThread(build_service, server.config, reactor)
        self.assertIn("already running", str(e.exception))
        yield server.stop()
        second = yield deferToThread(build_service, server.config, reactor)  # lock released at stop
        second.startService()
        yield second.stopService()


class AbuseLimitTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self, source_login_failures_per_minute=5)
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)

    @inlineCallbacks
    def test_malformed_codenames_cannot_lock_real_sources_out(self):
        codename = yield self.browser.create_source()
        for _ in range(20):
            attacker = Browser(self.server.source_url)
            self.addCleanup(attacker.close)
            response, html = yield attacker.login("not a codename")
            self.assertEqual(response.code, 403)
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        response, html = yield source.login(codename)
        self.assertIn("Send more and read replies", html)

    @inlineCallbacks
    def test_well_formed_wrong_codenames_are_throttled(self):
        from deaddrop.newsroom import codenames

        statuses = []
        for _ in range(7):
            attacker = Browser(self.server.source_url)
            self.addCleanup(attacker.close)
            response, html = yield attacker.login(codenames.generate_codename(7))
            statuses.append(response.code)
        self.assertEqual(statuses[:5], [403] * 5)
        self.assertEqual(statuses[5:], [429, 429])

    @inlineCallbacks
    def test_one_session_cannot_hold_more_than_two_uploads_open(self):
        """Each upload in flight holds a pump thread; one account must not take them all."""
        import socket

        from tests._support import multipart_body

        yield self.browser.create_source()
        response, html = yield self.browser.get("/lookup")
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html))], [("big.bin", b"x" * 100_000)])
        cookie = "; ".join(f"{c.name}={c.value}" for c in self.browser.cookies)
        port = int(self.server.source_url.rsplit(":", 1)[1])
        open_uploads = []
        for _ in range(2):  # two uploads that never finish
            s = socket.create_connection(("127.0.0.1", port), timeout=10)  # never block the reactor
            s.sendall((f"POST /submit HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nContent-Type: {content_type}\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:50_000])
            open_uploads.append(s)
        self.addCleanup(lambda: [s.close() for s in open_uploads])
        from twisted.internet import reactor
        from twisted.internet.task import deferLater

        yield deferLater(reactor, 0.3, lambda: None)
        response, html = yield self.browser.submit("third at once")
        self.assertEqual(response.code, 429)
        self.assertIn("still being received", html)
        for s in open_uploads:
            s.close()
        yield deferLater(reactor, 0.3, lambda: None)
        response, html = yield self.browser.submit("after the others ended")
        self.assertEqual(response.code, 200)
