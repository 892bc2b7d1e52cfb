"""Issue 21: large submissions over slow Tor.

An upload that started under a live session is received whatever happens to the session while
its body arrives; a source deleted meanwhile gets the calm "closed" page and nothing is kept;
the disk is never filled: an upload that would eat into ``--disk-reserve`` is refused at once
with the size that fits now, and nothing acknowledged is lost.

Uploads are sent at a throttled rate, as over a Tor circuit, by a client on the test's reactor.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import stat
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import ClientFactory, Protocol
from twisted.internet.task import deferLater
from twisted.trial import unittest

from deaddrop.admission.disk_space import TEXT_ROOM
from tests._support import Browser, multipart_body, security_events, start_server, test_svs, wait_until
from tests.integration.test_disk_full import fill, free_bytes, tmpfs
from tests.integration.test_source_flow import gunzip_with_name, stored_files

RECEIVED_ANYWAY = "Your session ended while your submission was arriving"
CLOSED = "The newsroom has closed the conversation for this codename"
MB = 1_000_000


class _Upload(Protocol):
    def __init__(self, request: bytes, body: bytes, chunk: int, every: float) -> None:
        self.request, self.body, self.chunk, self.every = request, body, chunk, every
        self.sent = 0
        self.answer = b""
        self.done: Deferred = Deferred()
        self._call: Any = None

    def connectionMade(self) -> None:
        self.transport.write(self.request)
        self._send()

    def _send(self) -> None:
        self._call = None
        if self.answer or self.sent >= len(self.body):
            return  # answered already: a browser stops sending too
        piece = self.body[self.sent:self.sent + self.chunk]
        self.transport.write(piece)
        self.sent += len(piece)
        self._call = reactor.callLater(self.every, self._send)

    def dataReceived(self, data: bytes) -> None:
        self.answer += data

    def connectionLost(self, reason: Any) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self.done.callback(self)


def throttled_upload(browser: Browser, lookup_html: str | None, message: str, files: list[tuple[str, bytes]],
                     rate: int, every: float = 0.05, announce: int | None = None,
                     protocols: list[_Upload] | None = None) -> Deferred:
    """POST /submit as the browser would, at about ``rate`` bytes a second. Fires with the
    protocol: ``.answer`` (the raw response), ``.sent`` (body bytes sent before the answer).
    ``announce``: the Content-Length to claim (a body larger than the one sent). ``lookup_html``
    None: no CSRF field (a visitor who never logged in). ``protocols``: gets the protocol."""
    csrf = [("csrf_token", browser.csrf(lookup_html))] if lookup_html is not None else []
    body, content_type = multipart_body(csrf + [("msg", message)], files)
    cookie = "; ".join(f"{c.name}={c.value}" for c in browser.cookies)
    head = (f"POST /submit HTTP/1.1\r\nHost: x\r\n" + (f"Cookie: {cookie}\r\n" if cookie else "")
            + f"Content-Type: {content_type}\r\n"
            f"Content-Length: {announce or len(body)}\r\nConnection: close\r\n\r\n").encode()
    protocol = _Upload(head, body, max(1, int(rate * every)), every)
    if protocols is not None:
        protocols.append(protocol)
    factory = ClientFactory.forProtocol(lambda: protocol)
    port = int(browser.base_url.rsplit(":", 1)[1])
    reactor.connectTCP("127.0.0.1", port, factory)
    return protocol.done


def status_and_html(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode("utf-8", "replace")


def location_of(answer: bytes) -> str:
    """The Location of a raw 303 answer."""
    head = answer.partition(b"\r\n\r\n")[0].decode("latin-1")
    return next(line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("location:"))


def source_id(data_dir: str) -> int:
    db = sqlite3.connect(os.path.join(data_dir, "db.sqlite"))
    try:
        return db.execute("SELECT id FROM sources").fetchone()[0]
    finally:
        db.close()


def decrypt_documents(data_dir: str) -> list[tuple[str, bytes]]:
    svs = test_svs()
    out = []
    for path in stored_files(data_dir):
        if not path.endswith("-msg.gpg"):
            with open(path, "rb") as f:
                out.append(gunzip_with_name(svs.decrypt(f.read())))
    return out


@inlineCallbacks
def new_sources(testcase: unittest.TestCase, url: str, count: int):
    """-> ``count`` new sources, each as (its browser, its /lookup page)."""
    sources = []
    for _ in range(count):
        browser = Browser(url)
        testcase.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.get("/lookup")
        sources.append((browser, html))
    return sources


class SessionDuringUploadTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_an_upload_started_under_a_live_session_outlives_its_expiry(self):
        # A session idle for 2 s expires (120 minutes in production); the upload takes ~5 s.
        server = yield start_server(self, source_session_idle=2.0)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.get("/lookup")
        payload = os.urandom(1_500_000)
        d = throttled_upload(browser, html, "sent across the expiry", [("evidence.pdf", payload)], rate=300_000)
        yield deferLater(reactor, 3.0, lambda: None)
        # The session really is over: another tab is sent to log in again.
        response, page = yield browser.get("/lookup")
        self.assertIn("you were logged out", page)
        upload = yield d
        status, page = status_and_html(upload.answer)
        # Post/redirect/get, like the received page of a live session: a reload asks again for
        # the page, it never sends the form again.
        self.assertEqual(status, 303, page[:600])
        received_page = location_of(upload.answer)
        self.assertRegex(received_page, r"^/login\?received=[A-Za-z0-9_-]+$")
        for _reload in range(2):
            response, page = yield browser.get(received_page)
            self.assertEqual(response.code, 200)
            self.assertIn("Thank you. We received your message and 1 document.", page)
            self.assertIn(RECEIVED_ANYWAY, page)
            self.assertIn('action="/login"', page)  # and it can log in again from there
        self.assertEqual(decrypt_documents(server.data_dir), [("evidence.pdf", payload)])
        self.assertEqual(os.listdir(os.path.join(server.data_dir, "tmp")), [])
        # A receipt is sealed: an edited or made-up one says nothing was received.
        response, page = yield browser.get(received_page[:-3] + "AAA")
        self.assertNotIn("Thank you", page)
        self.assertNotIn(RECEIVED_ANYWAY, page)

    @inlineCallbacks
    def test_an_upload_outlives_a_logout_in_another_tab_and_a_fresh_login_gets_the_notice(self):
        server = yield start_server(self)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        codename = yield browser.create_source()
        response, html = yield browser.get("/lookup")
        payload = os.urandom(600_000)
        d = throttled_upload(browser, html, "", [("memo.txt", payload)], rate=400_000)
        yield deferLater(reactor, 0.5, lambda: None)
        yield browser.get("/logout")
        upload = yield d
        status, page = status_and_html(upload.answer)
        self.assertEqual(status, 303, page[:600])
        response, page = yield browser.get(location_of(upload.answer))
        self.assertIn("Thank you. We received 1 document.", page)
        self.assertIn(RECEIVED_ANYWAY, page)
        self.assertEqual(decrypt_documents(server.data_dir), [("memo.txt", payload)])
        # Logged in again: the source's page works as before.
        response, page = yield browser.login(codename)
        self.assertIn("Send more and read replies", page)
        # The received page again (Back, a reload) while logged in: its thanks, on the source's
        # page; and the same form sent again under the new login stores nothing twice.
        response, page = yield browser.get(location_of(upload.answer))
        self.assertIn("Thank you. We received 1 document.", page)
        self.assertIn("Send more and read replies", page)
        replay = yield throttled_upload(browser, html, "", [("memo.txt", payload)], rate=4_000_000)
        self.assertNotIn(b"Thank you", replay.answer)
        self.assertEqual(decrypt_documents(server.data_dir), [("memo.txt", payload)])

    @inlineCallbacks
    def test_a_source_deleted_during_its_upload_gets_the_calm_page_and_nothing_is_kept(self):
        server = yield start_server(self)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.get("/lookup")
        body_size = 2_000_000
        d = throttled_upload(browser, html, "TYPED-BEFORE-DELETION", [("leak.zip", os.urandom(body_size))],
                             rate=400_000)
        tmp = os.path.join(server.data_dir, "tmp")
        yield wait_until(lambda: os.listdir(tmp))  # its ciphertext is being written
        yield server.service.newsroom.delete_source(source_id(server.data_dir))
        upload = yield d
        status, page = status_and_html(upload.answer)
        self.assertEqual(status, 403, page[:600])
        self.assertIn(CLOSED, page)
        self.assertIn("TYPED-BEFORE-DELETION", page)  # they can copy what they typed
        self.assertNotIn("you were logged out", page)
        self.assertLess(upload.sent, body_size, "the answer came only after the whole body")
        yield wait_until(lambda: not os.listdir(tmp))
        self.assertEqual(stored_files(server.data_dir), [])
        db = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        self.addCleanup(db.close)
        self.assertEqual(db.execute("SELECT COUNT(*) FROM submissions").fetchone()[0], 0)


class DiskAdmissionTests(unittest.TestCase):
    """A small tmpfs holds the data dir; ``--disk-reserve 8MB`` is kept free, and TEXT_ROOM
    above it is kept for text-only messages."""

    timeout = 120
    RESERVE = 8 * MB

    @inlineCallbacks
    def setUp(self):
        self.mnt = tmpfs(self, "128m", "dd-room-")
        self.server = yield start_server(self, data_dir=os.path.join(self.mnt, "data"), disk_reserve="8MB")
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)
        yield self.browser.create_source()
        self.sent: list[tuple[str, bytes]] = []
        yield self.submit_ok("first", [("first.bin", os.urandom(200_000))])
        # Leave about 14 MB for files above the reserve and the room kept for text.
        fill(os.path.join(self.mnt, "filler"), leave=self.RESERVE + TEXT_ROOM + 14 * MB)

    @inlineCallbacks
    def submit_ok(self, message: str, files: list[tuple[str, bytes]]):
        response, html = yield self.browser.submit(message, files)
        self.assertEqual(response.code, 200, html[:600])
        self.assertIn("Thank you. We received", html)
        self.sent += files

    def largest_named(self, html: str) -> float:
        match = re.search(r"it can take at most ([\d.,]+) MB at the moment", html)
        self.assertIsNotNone(match, html[:1500])
        return float(match.group(1).replace(",", ""))

    def new_sources(self, count: int) -> Deferred:
        return new_sources(self, self.server.source_url, count)

    def trickles(self, sources: list) -> tuple[list["_Upload"], list[Deferred]]:
        """An upload from each source announcing 5.5 MB (6.5 MB held) and sending 2.6 KB/s."""
        protocols: list[_Upload] = []
        trickles = [throttled_upload(browser, html, "", [("trickle.bin", os.urandom(100_000))], rate=2600,
                                     every=0.5, announce=int(5.5 * MB), protocols=protocols)
                    for browser, html in sources]
        return protocols, trickles

    @inlineCallbacks
    def end_trickles(self, protocols: list["_Upload"], trickles: list[Deferred]):
        for protocol in protocols:
            protocol.transport.abortConnection()
        for d in trickles:
            yield d
        yield wait_until(lambda: not os.listdir(os.path.join(self.server.data_dir, "tmp")))

    @inlineCallbacks
    def test_an_upload_that_would_eat_into_the_reserve_is_refused_at_once(self):
        response, html = yield self.browser.get("/lookup")
        body_size = 30 * MB
        upload = yield throttled_upload(self.browser, html, "KEPT-WHEN-REFUSED", [("big.iso", os.urandom(body_size))],
                                        rate=4 * MB)
        status, page = status_and_html(upload.answer)
        self.assertEqual(status, 507, page[:600])
        self.assertIn("Nothing was stored", page)
        self.assertIn("KEPT-WHEN-REFUSED", page)
        self.assertLess(upload.sent, 2 * MB, "refused only after the body was read")
        largest = self.largest_named(page)
        self.assertTrue(10 <= largest <= 14, largest)
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "tmp")), [])

        # What the page names does fit; the disk keeps its reserve; everything acknowledged decrypts.
        yield self.submit_ok("", [("fits.bin", os.urandom(int(largest * MB) - 100_000))])
        self.assertGreaterEqual(free_bytes(self.mnt), self.RESERVE)
        self.assertEqual(sorted(decrypt_documents(self.server.data_dir)), sorted(self.sent))
        # Not logged when the source was refused (that would date it), but counted for the day,
        # and said by the timer that watches the disk (here, already at start-up).
        events = [e for e in security_events(self.server) if e["event"] == "source.upload.no_room"]
        self.assertEqual(len(events), 1)
        self.assertEqual(self.server.service.newsroom.activity.today.failures["not stored: no_room"], 1)
        self.assertTrue(self.server.service.disk_watch.check())
        events = [e for e in security_events(self.server) if e["event"] == "source.upload.no_room"]
        self.assertEqual(len(events), 2)

    @inlineCallbacks
    def test_uploads_in_flight_count_against_the_space_they_will_need(self):
        response, html = yield self.browser.get("/lookup")
        first = os.urandom(9 * MB)
        # 9 MB of the ~14 MB, arriving slowly: held while it arrives.
        d = throttled_upload(self.browser, html, "", [("slow.bin", first)], rate=2 * MB)
        tmp = os.path.join(self.server.data_dir, "tmp")
        yield wait_until(lambda: os.listdir(tmp))
        # 9 MB more would fit the free space as it is now, but not with the first one's rest.
        other = Browser(self.server.source_url)
        self.addCleanup(other.close)
        yield other.create_source()
        response, page = yield other.submit("second", [("second.bin", os.urandom(9 * MB))])
        self.assertEqual(response.code, 507, page[:600])
        # Not how much the other upload holds (that would tell when other sources upload): no
        # room for files at the moment.
        self.assertIn("The drop box has no room for files at the moment", page)
        self.assertNotIn("it can take at most", page)
        upload = yield d
        status, page = status_and_html(upload.answer)
        self.assertIn(status, (200, 303), page[:600])
        self.sent.append(("slow.bin", first))
        self.assertGreaterEqual(free_bytes(self.mnt), self.RESERVE)
        self.assertEqual(sorted(decrypt_documents(self.server.data_dir)), sorted(self.sent))
        self.assertEqual(os.listdir(tmp), [])

    @inlineCallbacks
    def test_the_size_a_refusal_names_does_not_follow_another_sources_upload(self):
        """Adversary review: the size a refusal named was the room less what uploads in flight
        held, so a prober sending bodies too large saw it drop (404 -> 373 MB) within 0.1 s of
        another source starting a 30 MB upload, MB by MB. Now it is what fits with no upload in
        flight, rounded down coarsely: the prober sees the same page before and during it."""
        prober = Browser(self.server.source_url)
        self.addCleanup(prober.close)
        yield prober.create_source()

        @inlineCallbacks
        def probe():
            response, html = yield prober.get("/lookup")
            upload = yield throttled_upload(prober, html, "probe", [("big.iso", os.urandom(30 * MB))], rate=4 * MB)
            status, page = status_and_html(upload.answer)
            self.assertEqual(status, 507, page[:600])
            return self.largest_named(page)
        before = yield probe()
        response, html = yield self.browser.get("/lookup")
        victim = throttled_upload(self.browser, html, "", [("slow.bin", os.urandom(9 * MB))], rate=1 * MB)
        tmp = os.path.join(self.server.data_dir, "tmp")
        yield wait_until(lambda: os.listdir(tmp))  # admitted, holding 9 MB, writing 1 MB a second
        seen = []
        for _ in range(3):
            seen.append((yield probe()))
        self.assertEqual(seen, [before] * 3)
        upload = yield victim
        self.assertIn(status_and_html(upload.answer)[0], (200, 303))

    @inlineCallbacks
    def test_a_message_is_refused_like_a_file_when_the_disk_is_at_its_reserve_and_keeps_its_text(self):
        # Found in review: text-only messages skipped the check, so messages could fill the
        # disk past its reserve (~54 MB in 20 s from two sessions).
        filler = os.path.join(self.mnt, "filler2")
        fill(filler, leave=self.RESERVE + 500_000)
        typed = "words " * 16_666  # ~100,000 characters: its ciphertext could take more than is left
        response, page = yield self.browser.submit(typed, [])
        self.assertEqual(response.code, 507, page[:600])
        self.assertIn("Nothing was stored", page)
        self.assertIn(typed.strip(), page)  # the typed message is kept, as for files
        self.assertGreaterEqual(free_bytes(self.mnt), self.RESERVE)
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "tmp")), [])
        self.assertEqual(sorted(decrypt_documents(self.server.data_dir)), sorted(self.sent))
        self.assertEqual(len([p for p in stored_files(self.server.data_dir) if p.endswith("-msg.gpg")]), 1)
        self.assertEqual(self.server.service.newsroom.activity.today.failures["not stored: no_room"], 1)
        # Room again: the same message is taken.
        os.remove(filler)
        yield self.submit_ok(typed, [])
        self.assertEqual(len([p for p in stored_files(self.server.data_dir) if p.endswith("-msg.gpg")]), 2)

    @inlineCallbacks
    def test_uploads_holding_all_the_room_they_can_leave_room_for_a_text_message(self):
        # Found in review: trickles announcing huge bodies held the room down to the reserve,
        # and a text-only message (which ends no upload to make room) got 507 every time.
        sources = yield self.new_sources(2)
        protocols, trickles = self.trickles(sources)
        tmp = os.path.join(self.server.data_dir, "tmp")
        yield wait_until(lambda: len(os.listdir(tmp)) == 2)  # both admitted: ~13 of the ~14 MB for files held
        disk = self.server.service.newsroom.disk
        self.assertLess(disk.room(), 1 * MB)  # a message's own allowance (1 MiB) would not fit there
        typed = "words " * 16_666  # ~100,000 characters, the most a message may have
        yield self.submit_ok(typed, [])
        self.assertEqual(len([p for p in stored_files(self.server.data_dir) if p.endswith("-msg.gpg")]), 2)
        self.assertEqual([p for p in protocols if p.answer], [])  # no upload was ended for it
        yield self.end_trickles(protocols, trickles)
        self.assertGreaterEqual(free_bytes(self.mnt), self.RESERVE)

    @inlineCallbacks
    def test_a_message_sent_with_files_is_counted_with_them(self):
        # The body's Content-Length counted the message: a file of the size the page names,
        # sent with a message, is not refused at the end for the message's own allowance.
        response, html = yield self.browser.get("/lookup")
        upload = yield throttled_upload(self.browser, html, "", [("big.iso", os.urandom(30 * MB))], rate=4 * MB)
        largest = self.largest_named(status_and_html(upload.answer)[1])
        yield self.submit_ok("with words " * 5000, [("fits.bin", os.urandom(int(largest * MB) - 100_000))])
        self.assertGreaterEqual(free_bytes(self.mnt), self.RESERVE)

    @inlineCallbacks
    def test_trickles_holding_disk_space_are_ended_for_a_source_that_needs_it(self):
        # Found in review: two sources announcing huge bodies and sending them at 2.6 KB/s (above
        # the connection floor) held their whole Content-Length for hours, and a third source's
        # upload was refused for room. Scaled to this disk: ~14 MB above the reserve.
        sources = yield self.new_sources(3)
        protocols, trickles = self.trickles(sources[:2])
        tmp = os.path.join(self.server.data_dir, "tmp")
        yield wait_until(lambda: len(os.listdir(tmp)) == 2)  # both admitted, both holding 6.5 MB
        yield deferLater(reactor, 4.0, lambda: None)  # long enough to be judged (upload_slots.EARLY)
        browser, html = sources[2]
        payload = os.urandom(5 * MB)
        upload = yield throttled_upload(browser, html, "the third", [("needed.bin", payload)], rate=4 * MB)
        status, page = status_and_html(upload.answer)
        self.assertIn(status, (200, 303), page[:600])
        self.sent.append(("needed.bin", payload))
        # One trickle was ended, with the calm busy page; the other still holds its space.
        ended = [p for p in protocols if p.answer]
        self.assertEqual(len(ended), 1)
        status, page = status_and_html(ended[0].answer)
        self.assertEqual(status, 503, page[:600])
        self.assertIn("The drop box is busy", page)
        yield self.end_trickles(protocols, trickles)
        self.assertGreaterEqual(free_bytes(self.mnt), self.RESERVE)
        self.assertEqual(sorted(decrypt_documents(self.server.data_dir)), sorted(self.sent))


class TrickleRoomTests(unittest.TestCase):
    """Issue 26, item 5, over real sockets: the data dir on a 1,200 MB tmpfs, ``--disk-reserve
    100MB``. Ten uploads claim 100 MB each and send ~20 KiB/s (above the fair rate, so no rule
    about slow uploads ends them); what they hold follows their pace once it is known."""

    timeout = 240

    @inlineCallbacks
    def test_ten_trickles_claiming_100_mb_leave_a_real_200_mb_upload_accepted(self):
        mnt = tmpfs(self, "1200m", "dd-trickle-")
        server = yield start_server(self, data_dir=os.path.join(mnt, "data"), disk_reserve="100MB")
        sources = yield new_sources(self, server.source_url, 11)
        protocols: list[_Upload] = []
        trickles = [throttled_upload(browser, html, "", [("trickle.bin", os.urandom(1 * MB))], rate=20 * 1024,
                                     every=0.25, announce=100 * MB, protocols=protocols)
                    for browser, html in sources[:10]]
        tmp = os.path.join(server.data_dir, "tmp")
        yield wait_until(lambda: len(os.listdir(tmp)) == 10)  # all admitted, each holding 100 MB for now
        disk = server.service.newsroom.disk
        self.assertLess(disk.largest_upload(), 200 * MB)
        yield deferLater(reactor, 12.0, lambda: None)  # past their grace: their pace is known
        self.assertGreater(disk.largest_upload(), 600 * MB)
        browser, html = sources[10]
        payload = os.urandom(200 * MB)
        upload = yield throttled_upload(browser, html, "the real one", [("real.bin", payload)], rate=40 * MB)
        status, page = status_and_html(upload.answer)
        self.assertIn(status, (200, 303), page[:600])
        self.assertEqual([p for p in protocols if p.answer], [])  # no trickle was ended for it
        self.assertGreaterEqual(free_bytes(mnt), 100 * MB)
        self.assertEqual(decrypt_documents(server.data_dir), [("real.bin", payload)])
        for protocol in protocols:
            protocol.transport.abortConnection()
        for d in trickles:
            yield d
        yield wait_until(lambda: not os.listdir(tmp))


class UploadHygieneTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_a_visitor_who_is_not_logged_in_gets_a_forms_deadline_for_a_multipart_post(self):
        server = yield start_server(self)
        site = server.service.source_listener._factory
        site.body_policy = dataclasses.replace(site.body_policy, form_body_deadline=3.0)
        anonymous = Browser(server.source_url)
        self.addCleanup(anonymous.close)
        # Text fields only (a file part would be answered at its first byte), at 4 KB/s: above
        # the connection floor, and the body would take 25 s.
        d = throttled_upload(anonymous, None, "x" * 100_000, [], rate=4000, every=0.25)
        # A logged-in source's upload at the same pace keeps the uploads' deadline.
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        response, html = yield source.get("/lookup")
        payload = os.urandom(20_000)
        kept = yield throttled_upload(source, html, "", [("slow.bin", payload)], rate=4000, every=0.25)
        self.assertIn(status_and_html(kept.answer)[0], (200, 303), kept.answer[:600])
        self.assertEqual(decrypt_documents(server.data_dir), [("slow.bin", payload)])
        cut = yield d
        self.assertLess(cut.sent, 50_000, "the anonymous body ran on past the form deadline")

    @inlineCallbacks
    def test_part_files_are_private_to_the_server_from_their_first_byte(self):
        old = os.umask(0o022)  # as outside systemd
        self.addCleanup(os.umask, old)
        server = yield start_server(self)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.get("/lookup")
        d = throttled_upload(browser, html, "", [("file.bin", os.urandom(1_000_000))], rate=500_000)
        tmp = os.path.join(server.data_dir, "tmp")
        yield wait_until(lambda: os.listdir(tmp))
        for name in os.listdir(tmp):
            self.assertTrue(name.endswith(".gpg.part"), name)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(tmp, name)).st_mode), 0o600)
        upload = yield d
        self.assertIn(status_and_html(upload.answer)[0], (200, 303))


class LimitTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_a_five_gigabyte_limit_is_stated_and_a_larger_upload_is_refused_at_once_with_the_message_kept(self):
        server = yield start_server(self, max_upload_size=5 * 10**9)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.get("/lookup")
        self.assertIn("files of up to 5,000 MB in total", html)
        upload = yield throttled_upload(browser, html, "KEPT-OVER-THE-LIMIT", [("huge.img", os.urandom(2 * MB))],
                                        rate=4 * MB, announce=6 * 10**9)
        status, page = status_and_html(upload.answer)
        self.assertEqual(status, 413, page[:600])
        self.assertIn("at most 5,000 MB in total", page)
        self.assertIn("KEPT-OVER-THE-LIMIT", page)
        self.assertLess(upload.sent, MB)
        self.assertEqual(os.listdir(os.path.join(server.data_dir, "tmp")), [])
