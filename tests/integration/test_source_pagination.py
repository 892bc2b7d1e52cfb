"""The journalist source list and ``/api/v1/sources`` come in pages (issue 12, Scale).

Sources are seeded straight into the real server's database (hundreds of real submissions
would take minutes); everything else is the real stack: mutual TLS, the API, the HTML pages and
the workstation client.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import sqlite3
import ssl
import time
import uuid as uuidlib

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.web.journalist.api import sources as api_module

from deaddrop.workstation import cli as ws_cli
from deaddrop.workstation.api import JournalistApi
from deaddrop.workstation.tls import NewsroomTLSPolicy, load_client_certificate, load_trust_root
from tests._support import (
    ApiClient, JournalistBrowser, LogCapture, TotpDevice, add_journalist, issue_client_cert, start_journalist_server,
)


def seed_sources(server, count: int, *, starred_every: int = 0, same_time_every: int = 0, pending: int = 0,
                 start: float = 1_700_000_000.0) -> list[str]:
    """Visible sources (``pending = 0``) with distinct designations -> their uuids."""
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"), timeout=30)
    uuids = []
    with conn:
        base = conn.execute("SELECT COALESCE(MAX(id), 0) FROM sources").fetchone()[0]
        for i in range(count + pending):
            n = base + i
            uuid = str(uuidlib.uuid4())
            # Some sources share a last-activity time: the uuid must still order them.
            when = start + (n - n % same_time_every if same_time_every else n)
            conn.execute(
                "INSERT INTO sources (uuid, filesystem_id, designation, created_at, last_updated, next_n,"
                " is_starred, pending) VALUES (?, ?, ?, ?, ?, 1, ?, ?)",
                (uuid, f"seeded-{uuid}", f"seeded source {n:06d}", when, when,
                 1 if starred_every and n % starred_every == 0 else 0, 1 if i >= count else 0))
            if i < count:
                uuids.append(uuid)
        # On the default desk, as every source of an instance with one desk is.
        conn.execute("INSERT INTO source_desks(source_id, desk_id) SELECT s.id, d.id FROM sources s, desks d"
                     " WHERE s.id > ? AND d.is_default = 1", (base,))
    conn.close()
    return uuids


def listing_order(server) -> list[str]:
    """What the journalist must see, in order: starred first, newest activity, then uuid."""
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
    rows = conn.execute("SELECT uuid, is_starred, last_updated FROM sources WHERE pending = 0").fetchall()
    conn.close()
    return [r[0] for r in sorted(rows, key=lambda r: (r[1], r[2], r[0]), reverse=True)]


class SlowReader:
    """A blocking HTTPS client with a small receive buffer that asks for the whole source list,
    reads the headers, and then reads nothing more until told to."""

    def __init__(self, server, cert: tuple[str, str], token: str) -> None:
        self.host, self.port = "127.0.0.1", int(server.journalist_url.rsplit(":", 1)[1])
        key_pem, cert_pem = cert
        self.context = ssl.create_default_context(cafile=server.server_cert)
        self.context.load_cert_chain(cert_pem, key_pem)
        self.token = token
        self.response = None

    def send(self) -> None:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connect: no autotuning
        raw.connect((self.host, self.port))
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=60)
        conn.sock = self.context.wrap_socket(raw, server_hostname=self.host)
        conn.request("GET", "/api/v1/sources", headers={"Authorization": f"Token {self.token}", "Connection": "close"})
        self.conn = conn
        self.response = conn.getresponse()  # the status line and headers only
        assert self.response.status == 200, self.response.status

    def read_all(self) -> bytes:
        try:
            return self.response.read()
        finally:
            self.conn.close()


@inlineCallbacks
def settled(measure, quiet: float = 1.0, limit: float = 20.0):
    """Poll ``measure()`` until it has not changed for ``quiet`` seconds. -> its value then."""
    value, since, started = measure(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() - started < limit:
        yield deferLater(reactor, 0.05, lambda: None)
        if measure() != value:
            value, since = measure(), time.monotonic()
    return value


class SourcePaginationTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.cert = issue_client_cert(self.server, "alice")
        self.account = yield add_journalist(self.server, "alice")
        self.device = TotpDevice(self.server, self.account.totp_secret)
        self.api = ApiClient(self.server, self.cert)
        self.addCleanup(self.api.close)
        yield self.api.log_in(self.account, self.device)

    @inlineCallbacks
    def follow_pages(self, first: str):
        seen, path, pages = [], first, 0
        while path:
            response, data = yield self.api.json("GET", path)
            self.assertEqual(response, 200, data)
            pages += 1
            seen += [s["uuid"] for s in data["sources"]]
            if data["next"]:
                self.assertEqual(data["next_cursor"], data["next"].rsplit("after=", 1)[1])
            path = data["next"]
        return seen, pages, data

    @inlineCallbacks
    def test_api_pages_cover_every_visible_source_once_in_listing_order(self):
        seed_sources(self.server, 23, starred_every=5, same_time_every=4, pending=6)
        seen, pages, last = yield self.follow_pages("/api/v1/sources?per_page=7")
        self.assertEqual(pages, 4)
        self.assertEqual(seen, listing_order(self.server))
        self.assertEqual(len(seen), 23)  # pending sources never appear
        self.assertEqual((last["total"], last["per_page"], last["next"]), (23, 7, None))

    @inlineCallbacks
    def test_api_without_per_page_streams_every_source(self):
        """SecureDrop's clients ask for ``/sources`` and expect everyone (issue 22)."""
        seed_sources(self.server, 130, starred_every=7)
        response, body = yield self.api.request("GET", "/api/v1/sources")
        self.assertEqual(response.code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"content-type"), [b"application/json"])
        self.assertIsNone(response.headers.getRawHeaders(b"content-length"))  # written as it is read
        self.assertIsNone(response.headers.getRawHeaders(b"link"))
        data = json.loads(body)
        self.assertEqual(set(data), {"sources"})
        self.assertEqual(sorted(s["uuid"] for s in data["sources"]), sorted(listing_order(self.server)))
        self.assertIn("journalist_designation", data["sources"][0])
        # The same sources, field for field, as the pages give them.
        seen, _, _ = yield self.follow_pages("/api/v1/sources?per_page=1000")
        status, page = yield self.api.json("GET", "/api/v1/sources?per_page=1000")
        self.assertEqual(sorted(data["sources"], key=lambda s: s["uuid"]),
                         sorted(page["sources"], key=lambda s: s["uuid"]))

    @inlineCallbacks
    def test_api_pages_are_bounded_and_say_where_the_next_one_is(self):
        seed_sources(self.server, 130)
        response, _ = yield self.api.request("GET", "/api/v1/sources?per_page=100")
        self.assertEqual(response.code, 200)
        status, data = yield self.api.json("GET", "/api/v1/sources?per_page=100")
        self.assertEqual((len(data["sources"]), data["per_page"], data["total"]), (100, 100, 130))
        self.assertEqual(response.headers.getRawHeaders(b"link"), [f'<{data["next"]}>; rel="next"'.encode()])
        # SecureDrop's shape is kept: a page is still {"sources": [...]} with the same fields.
        self.assertIn("journalist_designation", data["sources"][0])
        seen, _, _ = yield self.follow_pages(data["next"])
        self.assertEqual([s["uuid"] for s in data["sources"]] + seen, listing_order(self.server))
        # ``after`` alone is a page too (of the default size), as before.
        status, data = yield self.api.json("GET", f"/api/v1/sources?after={data['next_cursor']}")
        self.assertEqual((data["per_page"], len(data["sources"])), (100, 30))

    @inlineCallbacks
    def test_the_streamed_list_waits_for_a_slow_reader(self):
        """The server reads the next batch of sources only as the client takes the last one:
        a client that stops reading holds the server to a transport buffer, not the whole list."""
        seed_sources(self.server, 12_000)
        conn = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        with conn:  # about a public key's size each: some 30 MB of JSON in all
            conn.execute("UPDATE sources SET public_key = ?", ("K" * 2400,))
        conn.close()
        desk = self.server.service.desk
        batches = []
        real = desk.sources_by_id

        def counted(reader, after, limit):
            batches.append(after)
            return real(reader, after, limit)

        self.patch(desk, "sources_by_id", counted)
        reader = SlowReader(self.server, self.cert, self.api.token)
        yield deferToThread(reader.send)
        stalled = yield settled(lambda: len(batches))
        total_batches = -(-12_000 // api_module.STREAM_BATCH)
        # Socket buffers on both sides hold a few MB: a handful of batches, not all 48.
        self.assertLess(stalled, total_batches // 3, f"{stalled} of {total_batches} batches read while paused")
        body = yield deferToThread(reader.read_all)
        data = json.loads(body)
        self.assertEqual(len(data["sources"]), 12_000)
        self.assertEqual(len(batches), total_batches + 1)  # the last read finds none left

        # A client that hangs up halfway: the server stops reading, and that is no error.
        logs = LogCapture().start()
        self.addCleanup(logs.stop)
        del batches[:]
        quitter = SlowReader(self.server, self.cert, self.api.token)
        yield deferToThread(quitter.send)
        yield settled(lambda: len(batches))
        yield deferToThread(quitter.conn.close)
        stopped = yield settled(lambda: len(batches))
        self.assertLess(stopped, total_batches // 3)
        self.assertNotIn("request failed", logs.text())
        status, data = yield self.api.json("GET", "/api/v1/sources?per_page=1")  # and it serves on
        self.assertEqual((status, data["total"]), (200, 12_000))

    @inlineCallbacks
    def test_a_cursor_neither_skips_nor_repeats_when_sources_come_and_go(self):
        seed_sources(self.server, 12)
        before = listing_order(self.server)
        status, first = yield self.api.json("GET", "/api/v1/sources?per_page=4")
        self.assertEqual([s["uuid"] for s in first["sources"]], before[:4])
        # Meanwhile one source on the first page is deleted and a newer one arrives.
        conn = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        with conn:
            conn.execute("DELETE FROM sources WHERE uuid = ?", (before[1],))
        conn.close()
        seed_sources(self.server, 1, start=1_800_000_000.0)
        seen, _, _ = yield self.follow_pages(first["next"])
        self.assertEqual(seen, before[4:])

    @inlineCallbacks
    def test_bad_page_parameters_are_refused(self):
        seed_sources(self.server, 3)
        for query in ("per_page=0", "per_page=1001", "per_page=abc", "per_page=%C2%B2", "per_page=" + "9" * 5000,
                      "after=nonsense", "after=1_nan_" + str(uuidlib.uuid4()), "after=2_1.0_" + str(uuidlib.uuid4()),
                      "after=%FF"):
            status, data = yield self.api.json("GET", f"/api/v1/sources?{query}")
            self.assertEqual(status, 400, query)
            self.assertEqual(data["error"], "Bad Request")

    @inlineCallbacks
    def test_html_source_list_pages(self):
        seed_sources(self.server, 120, starred_every=7)
        order = listing_order(self.server)
        designations = {}
        conn = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        for uuid, designation in conn.execute("SELECT uuid, designation FROM sources"):
            designations[uuid] = designation
        conn.close()
        browser = JournalistBrowser(self.server, self.cert)
        self.addCleanup(browser.close)
        yield browser.log_in(self.account, self.device)

        def shown(html):
            return re.findall(r'href="/sources/([0-9a-f-]{36})"', html)

        response, page1 = yield browser.get("/sources")
        self.assertEqual(shown(page1), order[:50])
        self.assertIn("Sources 1–50 of 120", page1)
        self.assertIn('href="/sources?page=2"', page1)
        self.assertNotIn("page=0", page1)
        response, page3 = yield browser.get("/sources?page=3")
        self.assertEqual(shown(page3), order[100:])
        self.assertIn('href="/sources?page=2"', page3)
        self.assertNotIn('href="/sources?page=4"', page3)
        response, beyond = yield browser.get("/sources?page=99")  # a stale link: the last page
        self.assertEqual(shown(beyond), order[100:])
        response, junk = yield browser.get("/sources?page=%C2%B2")
        self.assertEqual(shown(junk), order[:50])

    @inlineCallbacks
    def test_workstation_client_follows_every_page(self):
        uuids = seed_sources(self.server, 230)
        key_pem, cert_pem = self.cert
        policy = NewsroomTLSPolicy(load_trust_root(self.server.server_cert), load_client_certificate(cert_pem, key_pem))
        api = JournalistApi(reactor, self.server.journalist_url, policy)
        self.addCleanup(api.close)
        yield api.log_in(lambda: ws_cli.Credentials("alice", self.account.passphrase, self.device.code))
        sources = yield api.all_sources()
        self.assertEqual(sorted(s["uuid"] for s in sources), sorted(uuids))
        self.assertEqual([s["uuid"] for s in sources], listing_order(self.server))
