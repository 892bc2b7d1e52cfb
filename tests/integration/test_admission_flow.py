"""Bounded, fair work on the real stack: real Argon2id (at a low cost), real gpg, real SQLite,
a real listener; circuits arrive as Tor would send them (a PROXY v1 line per connection)."""
from __future__ import annotations

import os
import re
import socket
import sqlite3
import threading
import time
import uuid as uuidlib
from urllib.parse import urlencode

from twisted.internet import reactor
from twisted.internet.defer import DeferredList, inlineCallbacks, succeed
from twisted.internet.task import LoopingCall, deferLater
from twisted.trial import unittest

import deaddrop.crypto.kdf as kdf_module
from deaddrop.newsroom import codenames
from deaddrop.admission.queues import BUSY_MESSAGE
from deaddrop.crypto.gpg import Keyring
from deaddrop.crypto.kdf import CodenameKdf, KdfCost, Peppers
from deaddrop.events import FloodGate
from deaddrop.admission.throttle import FailureThrottle
from deaddrop.transport.circuits import Circuit
from deaddrop.web.source.app import REFUSALS_BEFORE_CLOSING
from deaddrop.web.source.defence import FLOOD_THRESHOLD, FLOOD_WINDOW
from tests._circuits import CircuitBrowser, listen_as_tor, proxy_line
from tests._support import Browser, kill_gpg_agent, multipart_body, security_events, short_tempdir, start_server, wait_until

LOGGED_IN = "Send more and read replies"


def count_argon2id_runs(testcase: unittest.TestCase) -> list:
    runs: list = []
    real = kdf_module.argon2id.kdf

    def counting(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    testcase.patch(kdf_module.argon2id, "kdf", counting)
    return runs


def shrink_login_tags(server, bits: int = 4) -> None:
    """Tags of a few bits, so that a test finds a wrong codename whose tag some source has (a
    collision: what costs an Argon2id run) in a few tries. Before any source is made."""
    server.service.newsroom.kdf.tag_bits = bits


def colliding_codename(server, codename: str) -> str:
    """A codename other than ``codename`` with the same login tag (see shrink_login_tags)."""
    kdf = server.service.newsroom.kdf
    assert kdf.tag_bits <= 8, "shrink_login_tags first"
    tag = kdf.login_tag(codename)
    while True:
        other = codenames.generate_codename(7)
        if other != codename and kdf.login_tag(other) == tag:
            return other


def hold_argon2id(testcase: unittest.TestCase, server) -> tuple[threading.Event, list]:
    """Every Argon2id run waits for the returned gate; ``entered`` lists the codenames of those
    that started, in order."""
    newsroom = server.service.newsroom
    gate, entered, real = threading.Event(), [], newsroom.kdf.derive
    testcase.addCleanup(gate.set)

    def held_derive(codename):
        entered.append(codename)
        gate.wait(30)
        return real(codename)

    testcase.patch(newsroom.kdf, "derive", held_derive)
    return gate, entered


def hold_uploads_open(server, browser: Browser, html: str, count: int, circuit_id: int | None = None,
                      url: str | None = None) -> list[socket.socket]:
    """Start ``count`` uploads with a file part that never finish (a slow Tor upload), over
    Tor circuit ``circuit_id`` if given (to ``url``, a listener from ``listen_as_tor``)."""
    body, content_type = multipart_body([("csrf_token", browser.csrf(html))], [("big.bin", b"x" * 100_000)])
    cookie = "; ".join(f"{c.name}={c.value}" for c in browser.cookies)
    port = int((url or server.source_url).rsplit(":", 1)[1])
    sockets = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)  # never block the reactor
        if circuit_id is not None:
            s.sendall(proxy_line(circuit_id))
        s.sendall((f"POST /submit HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nContent-Type: {content_type}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:50_000])
        sockets.append(s)
    return sockets


class OneArgon2idRunTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_create_and_login_each_cost_one_argon2id_run(self):
        server = yield start_server(self)
        shrink_login_tags(server)
        runs = count_argon2id_runs(self)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        codename = yield browser.create_source()
        self.assertEqual(len(runs), 1)
        again = Browser(server.source_url)
        self.addCleanup(again.close)
        response, html = yield again.login(codename)
        self.assertIn(LOGGED_IN, html)
        self.assertEqual(len(runs), 2)
        # No source of the first scheme is left: a wrong codename whose tag a source has (a
        # collision) costs one run too, never two.
        response, html = yield again.login(colliding_codename(server, codename))
        self.assertEqual(response.code, 403)
        self.assertEqual(len(runs), 3)

    @inlineCallbacks
    def test_a_source_made_by_the_first_scheme_logs_in_reads_its_replies_and_is_migrated(self):
        data_dir = short_tempdir()
        codename = codenames.generate_codename(7)
        source_id = yield _make_first_scheme_source(data_dir, codename)
        server = yield start_server(self, data_dir=data_dir)
        newsroom = server.service.newsroom
        self.assertTrue(newsroom.legacy_sources)
        yield newsroom.replies.add(source_id, "reply to an old source OLD-REPLY-MARKER")
        runs = count_argon2id_runs(self)

        # While a source of the first scheme remains, a codename matching nothing costs two runs.
        stranger = Browser(server.source_url)
        self.addCleanup(stranger.close)
        response, html = yield stranger.login(codenames.generate_codename(7))
        self.assertEqual((response.code, len(runs)), (403, 2))

        del runs[:]
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        response, html = yield browser.login(codename)
        self.assertIn(LOGGED_IN, html)
        self.assertIn("OLD-REPLY-MARKER", html)  # the key still opens with the old passphrase
        self.assertEqual(len(runs), 3)  # new id, old id, old key passphrase: once per source
        db = sqlite3.connect(os.path.join(data_dir, "db.sqlite"))
        self.addCleanup(db.close)
        login_id, key_wrap = db.execute("SELECT login_id, key_wrap FROM sources WHERE id = ?", (source_id,)).fetchone()
        self.assertRegex(login_id, "^[a-z2-7]{52}$")
        self.assertIsNotNone(key_wrap)
        self.assertFalse(newsroom.legacy_sources)

        del runs[:]
        again = Browser(server.source_url)
        self.addCleanup(again.close)
        response, html = yield again.login(codename)
        self.assertIn("OLD-REPLY-MARKER", html)
        self.assertEqual(len(runs), 1)
        # Migration done, and the source got its login tag: a codename whose tag no source has
        # costs no run at all (the tag check; see LoginTagTests).
        response, html = yield stranger.login(codenames.generate_codename(7))
        self.assertEqual((response.code, len(runs)), (403, 1))
        tag = db.execute("SELECT login_tag FROM sources WHERE id = ?", (source_id,)).fetchone()[0]
        self.assertEqual(tag, newsroom.kdf.login_tag(codename))

        # Submissions still land in its folder, and survive a restart.
        response, html = yield again.submit("after migration")
        self.assertEqual(response.code, 200)
        yield server.stop()
        yield server.start()
        third = Browser(server.source_url)
        self.addCleanup(third.close)
        response, html = yield third.login(codename)
        self.assertIn("OLD-REPLY-MARKER", html)


# The sources table as the first release made it (before login_id and key_wrap).
_FIRST_SCHEMA_SOURCES = """
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    filesystem_id TEXT NOT NULL UNIQUE,
    designation TEXT NOT NULL UNIQUE,
    key_fingerprint TEXT,
    public_key TEXT,
    created_at REAL NOT NULL,
    last_updated REAL NOT NULL,
    next_n INTEGER NOT NULL DEFAULT 1,
    is_starred INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 1
)"""


def _make_first_scheme_source(data_dir: str, codename: str):
    """A source record as the first release's code path left it (two Argon2id runs, the key
    pair locked with the second), made off the reactor thread. -> its id."""
    from twisted.internet.threads import deferToThread

    def make() -> int:
        kdf = CodenameKdf(Peppers.load_or_create(data_dir), KdfCost.parse("insecure-fast"))
        fid, passphrase = kdf.legacy_filesystem_id(codename), kdf.legacy_key_passphrase(codename)
        keyring = Keyring(os.path.join(data_dir, "gnupg"))
        try:
            info = keyring.generate_source_key(passphrase)
        finally:
            kill_gpg_agent(os.path.join(data_dir, "gnupg"))
        os.makedirs(os.path.join(data_dir, "store", fid), mode=0o700)
        db = sqlite3.connect(os.path.join(data_dir, "db.sqlite"))
        with db:
            db.execute(_FIRST_SCHEMA_SOURCES)
            cur = db.execute(
                "INSERT INTO sources(uuid, filesystem_id, designation, key_fingerprint, public_key, created_at,"
                " last_updated, pending) VALUES (?,?,?,?,?,?,?,0)",
                (str(uuidlib.uuid4()), fid, "old source", info.fingerprint, info.public_armored, 1.0, 1.0),
            )
        db.close()
        return int(cur.lastrowid)

    return deferToThread(make)


class CircuitThrottleTests(unittest.TestCase):
    """The login throttle counts per circuit: a flood never turns a correct codename away."""

    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self, source_login_failures_per_minute=5)
        self.tor_url = yield listen_as_tor(self, self.server)

    def browser(self, circuit_id: int) -> CircuitBrowser:
        b = CircuitBrowser(self.tor_url, circuit_id)
        self.addCleanup(b.close)
        return b

    def record_closed_circuits(self) -> list:
        """Stand in for Tor's CLOSECIRCUIT: the circuits the server closes, in order."""
        closed: list = []

        class Recorder:
            def close(self, circuit):
                closed.append(circuit)
                return succeed(True)

        self.server.service.source.defence.circuit_closer = Recorder()
        return closed

    @inlineCallbacks
    def test_a_flood_of_wrong_codenames_from_other_circuits_never_turns_away_a_correct_one(self):
        codename = yield self.browser(7).create_source()
        attacker = self.browser(100)
        statuses = []
        for _ in range(8):
            response, _ = yield attacker.login(codenames.generate_codename(7))
            statuses.append(response.code)
        self.assertEqual(statuses, [403] * 5 + [429] * 3)
        # Twenty more circuits flood at once while the source logs in.
        flood = [self.browser(200 + i).login(codenames.generate_codename(7)) for i in range(20) for _ in range(3)]
        response, html = yield self.browser(8).login(codename)
        self.assertIn(LOGGED_IN, html)
        results = yield DeferredList(flood, consumeErrors=True)
        self.assertTrue(all(ok and r[0].code in (403, 429, 503) for ok, r in results))

    @inlineCallbacks
    def test_logins_are_also_counted_per_derived_identity(self):
        """One codename logging in again and again, each time on a new circuit, is refused."""
        self.server.service.newsroom.identity_logins = FailureThrottle(3, 60.0)
        codename = yield self.browser(7).create_source()
        codes = []
        for i in range(4):
            response, html = yield self.browser(400 + i).login(codename)
            codes.append(response.code)
        self.assertEqual(codes, [200, 200, 200, 429])
        # Another source is not affected.
        other = yield self.browser(8).create_source()
        response, html = yield self.browser(500).login(other)
        self.assertIn(LOGGED_IN, html)

    @inlineCallbacks
    def test_a_circuit_that_keeps_flooding_is_closed(self):
        # The server hands the web layer its closer (Tor's, or NoCloser with --tor none).
        self.assertIs(self.server.service.source.defence.circuit_closer, self.server.service.circuit_closer)
        closed = self.record_closed_circuits()
        attacker = self.browser(0x12345)
        for _ in range(5 + 10):
            yield attacker.login(codenames.generate_codename(7))
        self.assertEqual(closed, [Circuit(0x12345)])
        # One circuit, however it floods, writes no line (a source mistyping could be throttled
        # too, and a line would date it): counted for the day. Ten circuits would be a flood.
        self.assertEqual([e["event"] for e in security_events(self.server) if e["event"].startswith("source.")], [])
        self.assertEqual(self.server.service.newsroom.activity.today.defences["circuit_closed"], 1)

    @inlineCallbacks
    def test_a_circuit_asking_for_pages_too_fast_is_refused_then_closed(self):
        closed = self.record_closed_circuits()
        # The flood asks for a page every 10 ms of the source side's clock (ten times the rate
        # a circuit may have), however slowly a loaded machine answers it: the request rate,
        # the refusals that close a circuit and the folded events all read that clock. (On the
        # wall clock a loaded 2-core machine served this client barely 20 pages a second, and
        # one at 10 a second never empties the bucket.)
        now = [0.0]
        source = self.server.service.source
        self.patch(source.request_rate, "_clock", lambda: now[0])
        self.patch(source.defence, "_refusals", FailureThrottle(REFUSALS_BEFORE_CLOSING, 60.0, clock=lambda: now[0]))
        self.patch(source.defence, "_flood_events", FloodGate(FLOOD_THRESHOLD, FLOOD_WINDOW, clock=lambda: now[0]))
        flood = self.browser(0x23456)
        codes = []
        while not closed and len(codes) < 200:
            response, _ = yield flood.get("/login")
            codes.append(response.code)
            now[0] += 0.01
        self.assertEqual(closed, [Circuit(0x23456)])
        self.assertGreaterEqual(codes.count(200), 30)
        self.assertEqual(set(codes[30:]) - {200}, {429})
        # One circuit is no flood the IDS hears of (F5 held down does this): counted for the day.
        self.assertEqual([e for e in security_events(self.server) if e["event"] == "source.flood"], [])
        defences = self.server.service.newsroom.activity.today.defences
        self.assertEqual(defences["circuit_closed"], 1)
        self.assertGreaterEqual(defences["requests"], 10)
        # A source on another circuit is served meanwhile.
        response, html = yield self.browser(9).get("/login")
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_a_circuit_whose_slow_connections_are_cut_repeatedly_is_closed(self):
        """Issue 20: slow bodies cut after a minute and reopened at once kept sources out, and
        none of their circuits was closed, so the attacker never paid Tor's PoW again."""
        import dataclasses

        from twisted.internet.endpoints import serverFromString
        from twisted.protocols.haproxy import proxyEndpoint

        from deaddrop.transport.circuits import from_tor

        closed = self.record_closed_circuits()
        # The Tor-only listener with a short rate window (30 s in production).
        site = self.server.service.source.site(reactor, self.server.service.source_connections)
        site.body_policy = dataclasses.replace(site.body_policy, window_seconds=1.0, slow_after=0.5)
        port = yield proxyEndpoint(serverFromString(reactor, "tcp:0:interface=127.0.0.1")).listen(from_tor(site))
        self.addCleanup(port.stopListening)
        number = port.getHost().port
        circuit = 0x50005
        held = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", number), timeout=10)  # never block the reactor
            s.sendall(proxy_line(circuit) + b"POST /login HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\ncodename=")
            held.append(s)
        self.addCleanup(lambda: [s.close() for s in held])
        yield wait_until(lambda: closed, timeout=10)
        self.assertEqual(closed, [Circuit(circuit)])
        # Cut three times: its standing is that of three wrong codenames, and every connection
        # it still had here is gone with it (Tor tears the circuit down too).
        throttle = self.server.service.source.defence.login_throttle
        self.assertEqual(throttle.recent_failures(Circuit(circuit)), 3)
        self.assertEqual(self.server.service.source_connections.held_by(Circuit(circuit)), 0)
        yield wait_until(lambda: all(_hung_up(s) for s in held))  # closed without an answer
        # Nothing is written the moment it happens: a source on a poor circuit may be cut three
        # times too, and a line would date its visit. The day's report counts it.
        self.assertEqual([e.get("reason") for e in security_events(self.server) if e["event"] == "source.flood"],
                         [])
        self.assertEqual(self.server.service.newsroom.activity.today.defences["circuit_closed"], 1)
        # A source on another circuit is served meanwhile.
        response, html = yield self.browser(9).get("/login")
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_a_replayed_create_form_counts_like_a_wrong_codename(self):
        """A /create form sent again and again (each time an Argon2id run that makes nothing)
        is throttled and lowers its circuit's standing, as wrong codenames do: a flood of it
        must not look clean and push ahead of a source that once mistyped."""
        first = self.browser(0x30001)
        response, generated = yield first.get("/generate")
        codename = re.search(r'id="codename"[^>]*>([^<]+)<', generated).group(1)
        form = {"codename": codename, "csrf_token": first.csrf(generated)}
        anonymous = {c.name: c.value for c in first.cookies}
        codes = []
        for _ in range(8):
            replay = self.browser(0x30001)  # the same circuit, the same anonymous cookie each time
            response, _ = yield replay.post("/create", data=form, cookies=anonymous, follow=False)
            codes.append(response.code)
        self.assertEqual(codes, [303] + [409] * 5 + [429] * 2)
        throttle = self.server.service.source.defence.login_throttle
        self.assertEqual(throttle.recent_failures(Circuit(0x30001)), 5)

    @inlineCallbacks
    def test_logins_that_hang_up_during_the_check_count_as_failures(self):
        """A flood that hangs up before each answer must not stay clean and unthrottled: the
        Argon2id run it started is spent anyway."""
        import time as _time

        from tests._circuits import proxy_line

        newsroom = self.server.service.newsroom
        shrink_login_tags(self.server)
        codename = yield self.browser(7).create_source()
        real = newsroom.kdf.derive
        self.patch(newsroom.kdf, "derive", lambda codename: (_time.sleep(0.3), real(codename))[1])
        circuit = 0x40004
        attacker = self.browser(circuit)
        _, html = yield attacker.get("/login")
        cookie = "; ".join(f"{c.name}={c.value}" for c in attacker.cookies)
        body = urlencode({"codename": colliding_codename(self.server, codename),
                          "csrf_token": attacker.csrf(html)}).encode()
        port = int(self.tor_url.rsplit(":", 1)[1])
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)  # never block the reactor
            s.sendall(proxy_line(circuit) + (
                f"POST /login HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n"
                f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                + body)
            yield deferLater(reactor, 0.1, lambda: None)  # its check has begun
            s.close()  # and the attacker is gone before the answer
            yield deferLater(reactor, 0.3, lambda: None)  # (one at a time: two would fill its places)
        throttle = self.server.service.source.defence.login_throttle
        yield wait_until(lambda: throttle.recent_failures(Circuit(circuit)) == 5)
        response, html = yield self.browser(circuit).login(codenames.generate_codename(7))
        self.assertEqual(response.code, 429)
        # Five in a few seconds could be one source pressing Reload: nothing is written that
        # would date it; they are counted for the day's report (security review F4).
        self.assertNotIn("abandoned", [e.get("reason") for e in security_events(self.server)
                                       if e["event"] == "source.flood"])
        self.assertEqual(newsroom.activity.today.defences["abandoned"], 5)

    @inlineCallbacks
    def test_concurrent_wrong_logins_on_one_circuit_cannot_all_run_argon2id(self):
        # The requests-per-circuit bucket would refuse most of these 240 requests before the
        # login throttle sees them; this is about the throttle.
        rate = self.server.service.source.request_rate
        rate.rate = rate.burst = 10_000
        shrink_login_tags(self.server)
        codename = yield self.browser(7).create_source()
        runs = count_argon2id_runs(self)
        attackers = [self.browser(300) for _ in range(120)]
        forms = yield DeferredList([a.get("/login") for a in attackers])
        # Wrong codenames whose tag a source has: each would cost an Argon2id run.
        posts = [a.post("/login", data={"codename": colliding_codename(self.server, codename), "csrf_token": a.csrf(html)})
                 for a, (ok, (_, html)) in zip(attackers, forms)]
        results = yield DeferredList(posts, consumeErrors=True)
        codes = sorted(r[0].code for ok, r in results)
        self.assertLessEqual(len(runs), 5)
        self.assertEqual(codes.count(403), len(runs))
        # The rest were answered at once (throttled, or busy: this circuit's queue was full).
        self.assertEqual(codes.count(429) + codes.count(503), 120 - len(runs))
        self.assertEqual(len(codes), 120)
        self.assertNotIn(200, codes)


    @inlineCallbacks
    def test_many_failing_circuits_filling_the_argon2id_queue_cannot_turn_away_a_correct_login(self):
        # The flood's codenames collide with the source's tag: each costs an Argon2id run, as
        # a wrong codename did before tags (and still does while untagged sources remain).
        shrink_login_tags(self.server)
        codename = yield self.browser(7).create_source()
        newsroom = self.server.service.newsroom
        queue = newsroom.queues.argon2id
        queue.max_waiting = 64  # the flood fills it (in production its length follows the pace)
        wrong = lambda: colliding_codename(self.server, codename)  # noqa: E731
        # 36 circuits each send one wrong codename: each now has a failure on record.
        attackers = [self.browser(1000 + i) for i in range(36)]
        first = yield DeferredList([a.login(wrong()) for a in attackers])
        self.assertEqual({r[0].code for ok, r in first}, {403})
        # Then every slot is held and every place in the queue taken, by those circuits.
        gate = threading.Event()
        self.addCleanup(gate.set)
        real, derived = newsroom.kdf.derive, []

        def held_derive(name):
            gate.wait(30)
            derived.append(name)
            # A run takes a moment, as a real one does: with runs of microseconds, slots freed
            # faster than a loaded machine starts the threads they were granted to, and the
            # order runs started in was no longer the order they were granted in.
            time.sleep(0.05)
            return real(name)

        self.patch(newsroom.kdf, "derive", held_derive)
        flood = [self.browser(1000 + i).login(wrong()) for i in range(36) for _ in range(2)]
        for _ in range(400):
            if queue.waiting >= queue.max_waiting:
                break
            yield deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(queue.waiting, queue.max_waiting)
        # A circuit with no failure still gets in, and is served before the flood.
        login = self.browser(8).login(codename)
        for _ in range(100):
            if queue.holding(Circuit(8)):
                break
            yield deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(queue.holding(Circuit(8)), 1)
        self.assertEqual(queue.waiting, queue.max_waiting)  # one of the flood gave up its place
        gate.set()
        response, html = yield login
        self.assertIn(LOGGED_IN, html)
        # Served in the first round of slots that freed (those granted with it may start first).
        slots = queue.admission.slots
        self.assertIn(codename, derived[:2 * slots])
        results = yield DeferredList(flood, consumeErrors=True)
        self.assertTrue(all(ok and r[0].code in (403, 429, 503) for ok, r in results))


class BusyTests(unittest.TestCase):
    timeout = 60

    def hold_argon2id(self, server) -> tuple[threading.Event, list]:
        return hold_argon2id(self, server)

    @inlineCallbacks
    def test_a_full_argon2id_queue_answers_503_with_retry_after_at_once(self):
        server = yield start_server(self, source_login_failures_per_minute=1000)
        shrink_login_tags(server)
        maker = Browser(server.source_url)
        self.addCleanup(maker.close)
        codename = yield maker.create_source()
        gate, entered = self.hold_argon2id(server)
        browsers = [Browser(server.source_url) for _ in range(3)]
        for b in browsers:
            self.addCleanup(b.close)
        forms = yield DeferredList([b.get("/login") for b in browsers])

        def post(b, html):
            return b.post("/login", data={"codename": colliding_codename(server, codename), "csrf_token": b.csrf(html)})

        posts = [post(b, html) for b, (ok, (_, html)) in list(zip(browsers, forms))[:2]]
        # The third is sent only once the first two are held in Argon2id (sent together, any of
        # the three could have been the one turned away).
        for _ in range(200):
            if len(entered) >= 2:
                break
            yield deferLater(reactor, 0.05, lambda: None)
        posts.append(post(browsers[2], forms[2][1][1]))
        # Two attempts of this (local) circuit are held; the third is answered at once.
        response, html = yield posts[2]
        self.assertEqual(response.code, 503)
        self.assertEqual(response.headers.getRawHeaders(b"retry-after"), [b"60"])
        self.assertIn(BUSY_MESSAGE, html)
        gate.set()
        results = yield DeferredList(posts[:2])
        self.assertEqual([r[0].code for ok, r in results], [403, 403])


    @inlineCallbacks
    def test_a_busy_create_shows_the_same_codename_again(self):
        server = yield start_server(self, source_login_failures_per_minute=1000)
        gate, entered = self.hold_argon2id(server)
        holders = [Browser(server.source_url) for _ in range(2)]
        source = Browser(server.source_url)
        for b in holders + [source]:
            self.addCleanup(b.close)
        held = []
        for b in holders:  # this (local) bucket's two places in the queue of new codenames, held
            _, page = yield b.get("/generate")
            held.append(b.post("/create", data={"codename": re.search(r'id="codename"[^>]*>([^<]+)<', page).group(1),
                                                "csrf_token": b.csrf(page)}))
        yield wait_until(lambda: len(entered) >= 2)
        _, generated = yield source.get("/generate")
        codename = re.search(r'id="codename"[^>]*>([^<]+)<', generated).group(1)
        response, html = yield source.post("/create", data={"codename": codename, "csrf_token": source.csrf(generated)})
        self.assertEqual(response.code, 503)
        self.assertEqual(response.headers.getRawHeaders(b"retry-after"), [b"60"])
        self.assertIn(BUSY_MESSAGE, html)
        self.assertEqual(re.search(r'id="codename"[^>]*>([^<]+)<', html).group(1), codename)
        gate.set()
        yield DeferredList(held)
        # The form it shows again takes the same codename.
        response, html = yield source.post("/create", data={"codename": codename, "csrf_token": source.csrf(html)})
        self.assertIn(LOGGED_IN, html)


class UploadTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_uploads_are_capped_per_source_not_per_session(self):
        server = yield start_server(self)
        first = Browser(server.source_url)
        self.addCleanup(first.close)
        codename = yield first.create_source()
        response, html = yield first.get("/lookup")
        held = hold_uploads_open(server, first, html, 2)
        self.addCleanup(lambda: [s.close() for s in held])
        yield deferLater(reactor, 0.3, lambda: None)
        # Logging in again gives the same codename no more uploads.
        second = Browser(server.source_url)
        self.addCleanup(second.close)
        yield second.login(codename)
        response, html = yield second.submit("", files=[("doc.txt", b"another file")])
        self.assertEqual(response.code, 429)
        self.assertIn("still being received", html)
        # Another source is not affected.
        other = Browser(server.source_url)
        self.addCleanup(other.close)
        yield other.create_source()
        response, html = yield other.submit("", files=[("doc.txt", b"its file")])
        self.assertEqual(response.code, 200)
        for s in held:
            s.close()
        yield deferLater(reactor, 0.3, lambda: None)
        response, html = yield second.submit("", files=[("doc.txt", b"now it fits")])
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_messages_are_not_held_up_by_slow_uploads_filling_the_pumps(self):
        server = yield start_server(self, stream_threads=2)
        held = []
        for _ in range(2):  # two sources whose slow uploads take every pump thread
            b = Browser(server.source_url)
            self.addCleanup(b.close)
            yield b.create_source()
            response, html = yield b.get("/lookup")
            held += hold_uploads_open(server, b, html, 1)
        self.addCleanup(lambda: [s.close() for s in held])
        yield deferLater(reactor, 0.3, lambda: None)
        writer = Browser(server.source_url)
        self.addCleanup(writer.close)
        yield writer.create_source()
        d = writer.submit("a message while the pumps are busy")
        d.addTimeout(15, reactor)
        response, html = yield d
        self.assertEqual(response.code, 200)
        self.assertIn("We received your message", html)
        # A file, though, finds no pump: told at once to come back, nothing lost.
        response, html = yield writer.submit("", files=[("doc.txt", b"file")])
        self.assertEqual(response.code, 503)
        self.assertIn(BUSY_MESSAGE, html)


    @inlineCallbacks
    def test_slow_uploads_from_many_identities_make_room_for_a_source(self):
        # Issue 9: identities are cheap, so enough of them, each holding its two uploads at the
        # 2 KiB/s floor, took every pump, and a source's file got 503 for as long as it lasted.
        server = yield start_server(self, stream_threads=6)
        newsroom = server.service.newsroom
        pumps = newsroom.queues.uploads
        pumps.grace, pumps.window = 1.0, 2.0  # 30 s and 60 s in production: too long for a test
        held = []
        for _ in range(3):
            b = Browser(server.source_url)
            self.addCleanup(b.close)
            yield b.create_source()
            response, html = yield b.get("/lookup")
            held += hold_uploads_open(server, b, html, 2)
        self.addCleanup(lambda: [s.close() for s in held])
        trickle = LoopingCall(_trickle, held, 512)  # 2 KiB/s each, in steps of 0.25 s
        trickle.start(0.25)
        self.addCleanup(lambda: trickle.running and trickle.stop())
        yield deferLater(reactor, 0.3, lambda: None)
        self.assertEqual(newsroom.queues.uploads.admission.running, 6)  # every pump is held
        yield deferLater(reactor, 2.5, lambda: None)

        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        started = time.monotonic()
        d = source.submit("a message", files=[("report.pdf", os.urandom(5 << 20))])
        d.addTimeout(10, reactor)
        response, html = yield d
        took = time.monotonic() - started
        self.assertEqual(response.code, 200)
        self.assertIn("We received your message and 1 document", html)
        self.assertLess(took, 10.0)

        # One trickle was ended to make room: told calmly, at once, to come back.
        trickle.stop()
        answers = [_answered(s) for s in held]
        ended = [a for a in answers if a]
        self.assertEqual(len(ended), 1)
        self.assertTrue(ended[0].startswith(b"HTTP/1.1 503 "), ended[0][:100])
        self.assertIn(b"\r\nRetry-After: 60\r\n", ended[0])
        self.assertIn(BUSY_MESSAGE.encode(), ended[0])
        # Its ciphertext is gone (the five still arriving remain), and gpg was stopped cleanly.
        tmp = os.path.join(server.data_dir, "tmp")
        yield wait_until(lambda: len(os.listdir(tmp)) == 5)
        self.assertEqual(len(os.listdir(tmp)), 5)
        # Once the other trickles are gone too, so are all their gpg processes, lock files and all.
        for s in held:
            s.close()
        yield wait_until(lambda: not os.listdir(tmp) and newsroom.queues.uploads.admission.running == 0)
        home = newsroom.encryption.homedir
        yield wait_until(lambda: not [n for n in os.listdir(home) if n.startswith(".#lk")])


    @inlineCallbacks
    def test_one_tor_circuit_holds_a_small_share_of_the_pumps(self):
        server = yield start_server(self, stream_threads=64)  # 4 a circuit
        tor_url = yield listen_as_tor(self, server)
        pumps = server.service.newsroom.queues.uploads
        held = []
        for _ in range(3):  # three identities over one circuit, two uploads each
            b = CircuitBrowser(tor_url, 7)
            self.addCleanup(b.close)
            yield b.create_source()
            response, html = yield b.get("/lookup")
            held += hold_uploads_open(server, b, html, 2, circuit_id=7, url=tor_url)
        self.addCleanup(lambda: [s.close() for s in held])
        answers = {s: b"" for s in held}

        def refused() -> int:
            for s in held:
                answers[s] += _answered(s)
            return sum(a.startswith(b"HTTP/1.1 503 ") for a in answers.values())

        yield wait_until(lambda: refused() == 2, timeout=10)
        self.assertEqual(pumps.admission.running, 4)
        # Its fifth and sixth were told it is busy; a source on another circuit is not.
        source = CircuitBrowser(tor_url, 8)
        self.addCleanup(source.close)
        yield source.create_source()
        response, html = yield source.submit("", files=[("doc.txt", b"its file")])
        self.assertEqual(response.code, 200)


def _trickle(sockets: list[socket.socket], size: int) -> None:
    for s in sockets:
        try:
            s.send(b"x" * size, socket.MSG_DONTWAIT)
        except OSError:
            pass  # answered and closed: ended to make room


def _hung_up(s: socket.socket) -> bool:
    """The server closed ``s`` without sending anything (checked without blocking)."""
    s.setblocking(False)
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _answered(s: socket.socket) -> bytes:
    """What the server sent on an upload's socket so far (b"" if nothing)."""
    s.setblocking(False)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (BlockingIOError, ConnectionResetError):
        pass
    return out


class PendingSourceTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_sources_that_never_submit_are_purged_with_their_folder_and_key(self):
        server = yield start_server(self)
        newsroom = server.service.newsroom
        quiet, active = Browser(server.source_url), Browser(server.source_url)
        self.addCleanup(quiet.close)
        self.addCleanup(active.close)
        quiet_codename = yield quiet.create_source()
        yield active.create_source()
        response, html = yield active.submit("something")
        self.assertEqual(response.code, 200)
        db = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        self.addCleanup(db.close)
        rows = db.execute("SELECT id, filesystem_id, pending FROM sources ORDER BY id").fetchall()
        (quiet_id, quiet_fid, _), (active_id, active_fid, _) = rows
        # A pending source of the first release had a key pair from /create: it goes too.
        info = yield newsroom.crypto_pool.run(newsroom.keyring.generate_source_key, "x" * 64)
        with db:
            db.execute("UPDATE sources SET key_fingerprint = ? WHERE id = ?", (info.fingerprint, quiet_id))
        store = os.path.join(server.data_dir, "store")
        # A pending source is a row only: its folder comes with its first submission.
        self.assertFalse(os.path.exists(os.path.join(store, quiet_fid)))
        os.mkdir(os.path.join(store, quiet_fid), 0o700)  # as a source of an earlier release has one

        purged = yield newsroom.purge_pending_sources(3600.0)
        self.assertEqual(purged, 0)  # too young
        with db:  # times are kept to the day: made yesterday is not old enough for 24 h
            db.execute("UPDATE sources SET created_at = created_at - 86400")
        purged = yield newsroom.purge_pending_sources(24 * 3600.0)
        self.assertEqual(purged, 0)
        with db:
            db.execute("UPDATE sources SET created_at = created_at - 86400")
        purged = yield newsroom.purge_pending_sources(24 * 3600.0)
        self.assertEqual(purged, 1)
        self.assertEqual([r[0] for r in db.execute("SELECT id FROM sources")], [active_id])
        self.assertFalse(os.path.exists(os.path.join(store, quiet_fid)))
        self.assertTrue(os.path.isdir(os.path.join(store, active_fid)))
        has_key = yield newsroom.crypto_pool.run(newsroom.keyring.has_secret_key, info.fingerprint)
        self.assertFalse(has_key)
        again = Browser(server.source_url)
        self.addCleanup(again.close)
        response, html = yield again.login(quiet_codename)
        self.assertEqual(response.code, 403)

    @inlineCallbacks
    def test_pending_sources_are_bounded_the_oldest_going_first(self):
        """Issue 20: a /create flood at the PoW rate left ~300,000 pending sources (rows, folders,
        keys) a day. Now a pending source is a row only, and there are at most N of them."""
        server = yield start_server(self)
        newsroom = server.service.newsroom
        self.assertEqual(newsroom.max_pending_sources, 100_000)  # --max-pending-sources
        newsroom.max_pending_sources = 3
        db = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        self.addCleanup(db.close)
        writer = Browser(server.source_url)
        self.addCleanup(writer.close)
        yield writer.create_source()
        response, _ = yield writer.submit("not pending any more")
        self.assertEqual(response.code, 200)
        made = []
        for _ in range(5):
            b = Browser(server.source_url)
            self.addCleanup(b.close)
            made.append((yield b.create_source()))
        pending = lambda: db.execute("SELECT COUNT(*) FROM sources WHERE pending = 1").fetchone()[0]  # noqa: E731
        yield wait_until(lambda: pending() == 3)
        yield deferLater(reactor, 0.3, lambda: None)
        self.assertEqual(pending(), 3)
        self.assertEqual(db.execute("SELECT COUNT(*) FROM sources").fetchone()[0], 4)
        # Only the writer has a folder (and, once made, a key); pending sources are rows.
        self.assertEqual(len(os.listdir(os.path.join(server.data_dir, "store"))), 1)
        # The two oldest pending sources went; the three newest still log in.
        for codename, expected in zip(made, [403, 403, 200, 200, 200]):
            b = Browser(server.source_url)
            self.addCleanup(b.close)
            response, _ = yield b.login(codename)
            self.assertEqual(response.code, expected)
        # Creations arriving while a round of eviction is under way are counted too (six at
        # once, each on a circuit of its own: one circuit may only have two in the queue).
        tor_url = yield listen_as_tor(self, server)
        burst = [CircuitBrowser(tor_url, 0x7000 + i) for i in range(6)]
        for b in burst:
            self.addCleanup(b.close)
        yield DeferredList([b.create_source() for b in burst])
        yield wait_until(lambda: pending() == 3)
        yield deferLater(reactor, 0.3, lambda: None)
        self.assertEqual(pending(), 3)

    @inlineCallbacks
    def test_the_purge_runs_on_its_own_with_the_configured_age(self):
        server = yield start_server(self, pending_source_hours=0.0001)  # 0.36 s (+ a day)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        db = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        self.addCleanup(db.close)
        with db:
            db.execute("UPDATE sources SET created_at = created_at - 86400")
        for _ in range(40):
            yield deferLater(reactor, 0.25, lambda: None)
            if not db.execute("SELECT COUNT(*) FROM sources").fetchone()[0]:
                break
        self.assertEqual(db.execute("SELECT COUNT(*) FROM sources").fetchone()[0], 0)

    def test_pending_source_hours_option(self):
        from deaddrop.tap import Options

        options = Options()
        options.parseOptions(["--submission-key", __file__, "--tor", "none", "--pending-source-hours", "2"])
        self.assertEqual(options.config.pending_source_hours, 2.0)
