"""No log line dates a source (issue 17 §1), on the real server with real gpg and SQLite.

A source creates a codename, submits a message and a file (which makes its key pair), logs out
and in, reads a journalist's reply and deletes it. Each action runs within known seconds; the
journalist's reply is sent in a second of its own. Afterwards none of those seconds may appear,
in any form a time can be written in (``tests/_time_traces.py``), in any file of the data dir
(database, WAL, keyring, store, ``logs/security.jsonl``), in the process's log as twistd writes
it, or in the raw output of ``twistd -n`` (what journald receives); and nothing at all may have
been logged while a source's request was being handled, since the journal stamps every line
it receives. The day's counts are reported once, after the day ends (``submissions.daily``).
"""
from __future__ import annotations

import calendar
import json
import os
import shutil
import time
from typing import Any

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.logger import formatEventAsClassicLogText, globalLogPublisher
from twisted.trial import unittest

from deaddrop.newsroom.daily_report import day_of
from tests._process import RawClient, ServerProcess
from tests._support import Browser, short_tempdir, start_server
from tests._time_traces import find_in_bytes, find_in_tree, second_needles, wait_for_next_second
from tests.integration.test_journalist_api import db_rows

DOCUMENT = ("notes.txt", b"a document from the source\n" * 40)


class TimedLog:
    """Every log event of this process, with its time, formatted as twistd writes its log."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []

    # The test's own HTTP client (treq) says when it opens a connection; the server is not it.
    CLIENT_NAMESPACES = ("twisted.web.client",)

    def __call__(self, event: dict) -> None:
        if str(event.get("log_namespace", "")).startswith(self.CLIENT_NAMESPACES):
            return
        self.events.append((event.get("log_time", time.time()), formatEventAsClassicLogText(event) or ""))

    def during(self, spans: list[tuple[float, float]]) -> list[str]:
        return [text for when, text in self.events if any(start <= when <= end for start, end in spans)]

    def text(self) -> str:
        return "".join(text for _when, text in self.events)


class Spans:
    """The moments during which a source's request was being handled."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    @inlineCallbacks
    def timed(self, action: Any):
        start = time.time()
        result = yield action()
        self.spans.append((start, time.time()))
        return result

    def seconds(self) -> list[int]:
        return sorted({s for start, end in self.spans for s in range(int(start), int(end) + 1)})


class NoLogLineDatesASourceTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_a_full_source_flow_leaves_its_seconds_nowhere(self):
        log = TimedLog()
        globalLogPublisher.addObserver(log)
        self.addCleanup(globalLogPublisher.removeObserver, log)
        server = yield start_server(self)
        newsroom = server.service.newsroom
        security_log = os.path.join(server.data_dir, "logs", "security.jsonl")
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        spans = Spans()
        yield deferToThread(wait_for_next_second)
        events_before = _read(security_log)

        codename = yield spans.timed(source.create_source)
        response, html = yield spans.timed(lambda: source.submit("a first message", [DOCUMENT]))
        self.assertIn("We received your message and 1 document", html)
        [(source_id,)] = db_rows(server, "SELECT id FROM sources")
        # The key pair is made just after the first submission: part of the same moment.
        yield spans.timed(lambda: newsroom.replies.key_ready(source_id))
        yield spans.timed(lambda: source.get("/logout"))
        response, html = yield spans.timed(lambda: source.login(codename))
        self.assertIn("Send more and read replies", html)

        # A journalist replies, in a second of its own.
        yield deferToThread(wait_for_next_second)
        yield newsroom.replies.add(source_id, "REPLY-7c1e")
        yield deferToThread(wait_for_next_second)

        response, html = yield spans.timed(lambda: source.get("/lookup"))
        self.assertIn("REPLY-7c1e", html)
        response, html = yield spans.timed(lambda: source.post(
            "/delete", data={"csrf_token": source.csrf(html), "reply": _reply_number(server)}))
        self.assertIn("Reply deleted.", html)
        yield spans.timed(lambda: source.get("/logout"))

        self.assertEqual(log.during(spans.spans), [], "logged while a source acted")
        self.assertEqual(_read(security_log), events_before)

        # The day's count, once the day has ended (what the midnight timer runs).
        yield deferToThread(wait_for_next_second)
        activity = newsroom.activity
        today = activity.today.day
        self.patch(activity, "_clock", lambda: time.time() + 86400)
        [reported] = server.service.daily_report.report_ended_days()
        daily = [json.loads(line) for line in _read(security_log).splitlines()
                 if json.loads(line)["event"] == "submissions.daily"]
        self.assertEqual([(e["day"], e["messages"], e["files"], e["not_stored"], e["errors"]) for e in daily],
                         [(today, 1, 1, 0, 0)])
        yield server.stop()  # a clean stop keeps the (new) day's counts in the database

        needles = second_needles(spans.seconds())
        self.assertGreaterEqual(len(spans.seconds()), 2)
        self.assertEqual(find_in_tree(server.data_dir, needles), [])
        self.assertEqual(find_in_bytes(log.text().encode(), needles, "the log"), [])
        # The searches do find a second where one is written: the daily line's own timestamp.
        stamped = second_needles([calendar.timegm(time.strptime(daily[0]["timestamp"], "%Y-%m-%dT%H:%M:%SZ"))])
        self.assertTrue(find_in_tree(os.path.join(server.data_dir, "logs"), stamped))
        self.assertTrue(find_in_bytes(log.text().encode(), stamped, "the log"))

    def test_twistd_output_holds_no_second_of_a_source_flow(self):
        """The real ``twistd -n deaddrop``: what it writes to stdout is what journald stamps."""
        work = short_tempdir("dd-traces-")
        self.addCleanup(shutil.rmtree, work, True)
        server = ServerProcess(os.path.join(work, "data"))
        self.addCleanup(server.cleanup)
        server.start()
        client = RawClient(server.port)
        wait_for_next_second()
        output_before = os.path.getsize(server.log_path)
        start = time.time()
        codename = client.create_source()
        self.assertEqual(client.submit("from a real twistd", [DOCUMENT]).status, 303)
        client.get("/logout")
        self.assertEqual(client.login(codename).status, 303)
        self.assertEqual(client.get("/lookup").status, 200)
        end = time.time()
        wait_for_next_second()
        self.assertEqual(os.path.getsize(server.log_path), output_before, server.log_since_start()[-2000:])
        server.stop()
        with open(server.log_path, "rb") as f:
            output = f.read()
        self.assertIn(b"Main loop terminated", output)  # the output is there, and ends cleanly
        needles = second_needles(range(int(start), int(end) + 1))
        self.assertEqual(find_in_bytes(output, needles, "twistd's output"), [])
        self.assertEqual(find_in_tree(server.data_dir, needles), [])
        # The day's counts were kept for the next start's report, with nothing finer than the day.
        [(kept,)] = _sqlite(server.data_dir, "SELECT value FROM settings WHERE key = 'daily_counts'")
        self.assertEqual((json.loads(kept)["day"], json.loads(kept)["messages"]), (day_of(end), 1))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _reply_number(server: Any) -> str:
    [(n,)] = db_rows(server, "SELECT n FROM replies")
    return str(n)


def _sqlite(data_dir: str, query: str) -> list:
    import sqlite3

    db = sqlite3.connect(os.path.join(data_dir, "db.sqlite"))
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()
