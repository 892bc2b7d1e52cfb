"""The day's counts of what sources did: reported once, after midnight UTC, never at the moment."""
from __future__ import annotations

import calendar
import json
import os
import sqlite3

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.newsroom.daily_report import DailyReport, DayCounts, SourceActivity
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

    def lines(self, event: str = "submissions.daily") -> list[dict]:
        with open(self.path) as f:
            return [record for record in map(json.loads, f) if record["event"] == event]

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

    def test_counts_per_desk_survive_a_clean_shutdown_and_each_desk_has_its_line(self):
        """Issue 29: per desk (by uuid), kept across a restart like the rest, reported by name."""
        report = DailyReport(self.clock, self.activity, self.events, db=None,
                             desks=lambda: [("u-default", "Newsroom"), ("u-a", "Investigations")])
        self.activity.stored("msg", ["u-a"])
        self.activity.stored("doc", ["u-a", "u-gone"])
        saved = DayCounts.from_json(self.activity.today.as_json())
        self.assertEqual(saved, self.activity.today)
        self.activity.today = DayCounts(saved.day)
        self.activity.restore(saved)
        self.activity.stored("msg", ["u-default"])
        self.clock.advance(61)
        report.report_ended_days()
        self.assertEqual([(e["desk"], e["messages"], e["files"]) for e in self.lines("submissions.daily.desk")],
                         [("Newsroom", 1, 0), ("Investigations", 1, 1), ("u-gone", 0, 1)])


    def test_tors_lines_are_counted_by_kind_and_reported_with_the_day(self):
        """What the launched Tor prints once bootstrapped may be about a visitor (issue 17 §5):
        nothing when it happens; at midnight tor.log.daily counts the warnings and twistd's log
        gets each kind with its count."""
        from deaddrop.tor._process import TorProcessProtocol
        from tests._support import LogCapture

        logs = LogCapture().start()
        self.addCleanup(logs.stop)
        self.report.startService()
        tor = TorProcessProtocol(lambda: None, lambda reason, summary: None, count_line=self.activity.tor_line)
        onion = "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrstuvwx"
        relay = "$0123456789ABCDEF0123456789ABCDEF01234567~relay1"
        tor.outReceived(b"May 01 23:58:00.000 [notice] Bootstrapped 95% (circuit_create): Establishing a Tor circuit\n"
                        b"May 01 23:58:00.000 [warn] Problem bootstrapping. Stuck at 95%\n"
                        b"May 01 23:58:01.000 [notice] Bootstrapped 100% (done): Done\n")
        self.assertIn("Problem bootstrapping", logs.text())  # Tor's start-up: written as it comes
        visitor_lines = [  # Tor 0.4.9's own words for a source's introduction, rendezvous and streams
            f"[warn] Giving up on launching a rendezvous circuit to {relay} for v3 service {onion}",
            f"[warn] Maximum streams per circuit limit reached on rendezvous circuit 2871 for service {onion}. "
            "Circuit has 16 out of 16 streams. Closing circuit.",
            f"[warn] Giving up on launching a rendezvous circuit to $89ABCDEF0123456789ABCDEF0123456701234567 for "
            f"v3 service {onion}",
            "[notice] Heartbeat: Our onion service received 1 v3 INTRODUCE2 cells and attempted to launch 1 "
            "rendezvous circuits.",
        ]
        before = logs.text()
        tor.outReceived(b"".join(f"May 01 23:59:30.000 {line}\n".encode() for line in visitor_lines))
        self.assertEqual(logs.text(), before)  # not a word of it when it happens
        self.assertEqual(self.lines("tor.log.daily"), [])
        self.assertEqual([m for _level, m in tor.lines][-1], visitor_lines[-1][9:])  # kept in memory only
        tor.outReceived(b"May 01 23:59:31.000 [err] Reading config failed\n")
        self.assertIn("Reading config failed", logs.text())  # Tor about to stop: said at once
        self.clock.advance(61)
        [daily] = self.lines("tor.log.daily")
        self.assertEqual((daily["day"], daily["count"], daily["timestamp"]), ("2026-05-01", 3, "2026-05-02T00:00:01Z"))
        report = logs.text()[len(before):]
        self.assertIn("Tor's log on 2026-05-01: 2 x [warn] Giving up on launching a rendezvous circuit to <relay> "
                      "for v# service <onion>", report)
        self.assertIn("Tor's log on 2026-05-01: 1 x [warn] Maximum streams per circuit limit reached on rendezvous "
                      "circuit # for service <onion>. Circuit has # out of # streams. Closing circuit.", report)
        self.assertIn("1 x [notice] Heartbeat: Our onion service received # v# INTRODUCE# cells", report)
        for varying in (onion, "2871", "0123456789ABCDEF", "23:59"):
            self.assertNotIn(varying, report)
        # Every day, zeros too.
        self.clock.advance(86400)
        self.assertEqual([(e["day"], e["count"]) for e in self.lines("tor.log.daily")],
                         [("2026-05-01", 3), ("2026-05-02", 0)])
        counts = DayCounts("2026-04-30", tor_warnings=2)
        counts.tor_lines["[warn] x"] = 2
        self.assertEqual(DayCounts.from_json(counts.as_json()), counts)


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
