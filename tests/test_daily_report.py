"""The day's counts of what sources did: reported once, after midnight UTC, never at the moment."""
from __future__ import annotations

import calendar
import json
import os
import sqlite3

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.daily_report import DailyReport, DayCounts, SourceActivity
from deaddrop.events import SecurityEvents
from tests._support import RunningServer, short_tempdir

# 2026-05-01 23:59:00 UTC
LATE = calendar.timegm((2026, 5, 1, 23, 59, 0, 0, 0, 0))


class DailyReportTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.clock.advance(LATE)
        self.path = os.path.join(short_tempdir(), "logs", "security.jsonl")
        self.events = SecurityEvents(self.path, clock=self.clock.seconds)
        self.addCleanup(self.events.close)
        self.activity = SourceActivity(clock=self.clock.seconds)
        self.report = DailyReport(self.clock, self.activity, self.events, db=None)

    def lines(self) -> list[dict]:
        with open(self.path) as f:
            return [json.loads(line) for line in f]

    def test_counts_are_reported_after_midnight_for_the_day_that_ended(self):
        self.report.startService()
        self.activity.stored("msg")
        self.activity.stored("doc")
        self.activity.stored("doc")
        self.activity.not_stored("disk_full")
        self.assertEqual(self.lines(), [])  # nothing when sources act
        self.clock.advance(59)  # 23:59:59
        self.activity.stored("msg")
        self.assertEqual(self.lines(), [])
        self.clock.advance(2)  # 00:00:01
        [line] = self.lines()
        self.assertEqual({k: v for k, v in line.items() if k not in ("program",)}, {
            "event": "submissions.daily", "timestamp": "2026-05-02T00:00:01Z", "day": "2026-05-01",
            "messages": 2, "files": 2, "not_stored": 1, "errors": 0})
        # Every day, zeros too: the line's presence says nothing.
        self.clock.advance(86400)
        self.assertEqual([(e["day"], e["messages"], e["files"]) for e in self.lines()],
                         [("2026-05-01", 2, 2), ("2026-05-02", 0, 0)])
        self.assertEqual(self.lines()[-1]["timestamp"], "2026-05-03T00:00:01Z")

    def test_an_act_after_midnight_counts_for_the_new_day_even_before_the_report_ran(self):
        self.report.startService()
        self.activity.stored("msg")
        self.clock.rightNow = LATE + 60.5  # past midnight; the timer has not fired yet
        self.activity.stored("doc")
        self.clock.advance(0.6)
        self.assertEqual([(e["day"], e["messages"], e["files"]) for e in self.lines()], [("2026-05-01", 1, 0)])
        self.assertEqual((self.activity.today.day, self.activity.today.files), ("2026-05-02", 1))

    def test_failures_are_described_once_a_day_in_twistds_log_and_bounded(self):
        from tests._support import LogCapture

        logs = LogCapture().start()
        self.addCleanup(logs.stop)
        self.report.startService()
        for _ in range(3):
            self.activity.failed("KeyError at app.py:10 < site.py:20")
        for n in range(100):
            self.activity.failed(f"ValueError at x.py:{n}")
        self.assertNotIn("KeyError", logs.text())
        self.clock.advance(61)
        self.assertIn("source requests on 2026-05-01: 3 x KeyError at app.py:10 < site.py:20", logs.text())
        self.assertEqual(logs.text().count("source requests on"), 32)
        self.assertEqual(self.lines()[0]["errors"], 103)

    def test_saved_counts_round_trip_and_bad_ones_are_ignored(self):
        counts = DayCounts("2026-04-30", 3, 4, 1, 2)
        counts.failures["x"] = 2
        self.assertEqual(DayCounts.from_json(counts.as_json()), counts)
        for bad in ["", "{}", "[]", '{"day": "yesterday", "messages": 1, "files": 1}', "{"]:
            self.assertIsNone(DayCounts.from_json(bad), bad)
        self.activity.restore(counts)  # an ended day: reported at the next start
        self.activity.restore(DayCounts("2026-05-01", 1, 1))  # today: added to
        self.activity.stored("msg")
        self.assertEqual(self.activity.today.messages, 2)
        self.report.startService()
        self.assertEqual([(e["day"], e["messages"], e["errors"]) for e in self.lines()], [("2026-04-30", 3, 2)])


class RestartTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_a_day_that_ended_while_the_server_was_down_is_reported_at_the_next_start(self):
        server = RunningServer(self)
        self.addCleanup(server.cleanup)
        yield server.start()
        server.service.newsroom.activity.stored("msg")
        yield server.stop()
        db = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        [(kept,)] = db.execute("SELECT value FROM settings WHERE key = 'daily_counts'").fetchall()
        saved = json.loads(kept)
        self.assertEqual(saved["messages"], 1)
        saved["day"] = "2026-01-15"  # as if the server had been down since that day
        with db:
            db.execute("UPDATE settings SET value = ? WHERE key = 'daily_counts'", (json.dumps(saved),))
        db.close()
        again = RunningServer(self, data_dir=server.data_dir)
        yield again.start()
        yield again.stop()
        with open(os.path.join(server.data_dir, "logs", "security.jsonl")) as f:
            daily = [json.loads(line) for line in f if '"submissions.daily"' in line]
        self.assertEqual([(e["day"], e["messages"]) for e in daily], [("2026-01-15", 1)])
