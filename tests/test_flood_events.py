"""source.flood: what one visitor can set off by itself is never written when it happens; a flood
of it is, folded; every one is counted for the day's report (security review F4)."""
from __future__ import annotations

import calendar
import json
import os

from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.newsroom.daily_report import DailyReport, SourceActivity
from deaddrop.events import FloodGate, SecurityEvents
from deaddrop.admission.throttle import FailureThrottle
from deaddrop.transport.circuits import Circuit, NoCloser
from deaddrop.web.source.defence import FLOOD_THRESHOLD, FLOOD_WINDOW, FloodDefence
from tests._support import LogCapture, short_tempdir

# 2026-05-01 12:00:00 UTC
NOON = calendar.timegm((2026, 5, 1, 12, 0, 0, 0, 0, 0))


class FloodGateTests(unittest.TestCase):
    def test_below_the_threshold_nothing_is_written_however_long_it_goes_on(self):
        clock = Clock()
        gate = FloodGate(10, 10.0, clock=clock.seconds)
        # One a second and a bit: never ten within ten seconds.
        for _ in range(200):
            self.assertIsNone(gate.admit("busy"))
            clock.advance(1.2)

    def test_a_flood_is_one_line_standing_for_the_rest(self):
        clock = Clock()
        gate = FloodGate(10, 10.0, clock=clock.seconds)
        answers = []
        for _ in range(100):  # ten a second for ten seconds
            answers.append(gate.admit("busy"))
            clock.advance(0.1)
        lines = [a for a in answers if a is not None]
        # The tenth opens the flood, and stands for the nine before it; 10 s later the next
        # line stands for everything since.
        self.assertEqual(answers.index(9), 9)
        self.assertEqual(lines, [9])
        clock.advance(1.0)  # 10 s after the first line
        self.assertEqual(gate.admit("busy"), 90)
        # Keys are apart.
        self.assertIsNone(gate.admit("abandoned"))

    def test_what_came_before_a_quiet_spell_is_not_part_of_the_next_flood(self):
        clock = Clock()
        gate = FloodGate(3, 10.0, clock=clock.seconds)
        for _ in range(2):
            self.assertIsNone(gate.admit())
        clock.advance(60)
        self.assertIsNone(gate.admit())
        self.assertIsNone(gate.admit())
        self.assertEqual(gate.admit(), 2)


class FloodDefenceTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.clock.advance(NOON)
        self.path = os.path.join(short_tempdir(), "logs", "security.jsonl")
        self.events = SecurityEvents(self.path, clock=self.clock.seconds)
        self.addCleanup(self.events.close)
        self.activity = SourceActivity(clock=self.clock.seconds)
        self.throttle = FailureThrottle(10, 60.0, clock=self.clock.seconds)
        self.defence = FloodDefence(self.events, self.throttle,
                                    NoCloser(), activity=self.activity,
                                    _throttled_events=FloodGate(FLOOD_THRESHOLD, FLOOD_WINDOW, every=10.0,
                                                                clock=self.clock.seconds),
                                    _flood_events=FloodGate(FLOOD_THRESHOLD, FLOOD_WINDOW, every=10.0,
                                                                     clock=self.clock.seconds))

    def written(self) -> list[dict]:
        with open(self.path) as f:
            return [json.loads(line) for line in f]

    def test_one_visitor_s_abandoned_login_busy_page_or_ended_upload_writes_nothing(self):
        circuit = Circuit(0x1234)
        self.defence.abandoned(self.throttle.reserve(circuit))  # pressed Reload during the check
        self.clock.advance(3)
        self.defence.flood("busy")
        self.clock.advance(3)
        self.defence.flood("upload_ended")
        self.clock.advance(3)
        self.defence.abandoned(self.throttle.reserve(circuit))  # and again: a person does that
        self.assertEqual(self.written(), [])
        self.assertEqual(self.throttle.recent_failures(circuit), 2)  # its circuit still pays for it
        # Counted for the day's report, which goes to twistd's log after midnight, undated.
        self.assertEqual(dict(self.activity.today.defences), {"abandoned": 2, "busy": 1, "upload_ended": 1})
        logs = LogCapture().start()
        self.addCleanup(logs.stop)
        report = DailyReport(self.clock, self.activity, self.events, db=None)
        report.startService()
        self.assertNotIn("defences", logs.text())
        self.clock.advance(12 * 3600 + 1)
        self.assertIn("source side defences on 2026-05-01: 2 x abandoned", logs.text())
        self.assertIn("source side defences on 2026-05-01: 1 x busy", logs.text())
        self.assertEqual([e["event"] for e in self.written()], ["submissions.daily", "tor.log.daily"])

    def test_a_flood_of_them_writes_one_folded_event_per_reason(self):
        for _ in range(30):  # thirty busy pages in three seconds
            self.defence.flood("busy")
            self.clock.advance(0.1)
        floods = [e for e in self.written() if e["event"] == "source.flood"]
        self.assertEqual([(e["reason"], e["repeated"]) for e in floods], [("busy", FLOOD_THRESHOLD - 1)])
        self.assertTrue(all(set(e) <= {"event", "reason", "repeated", "timestamp", "program"} for e in floods))
        self.assertEqual(self.activity.today.defences["busy"], 30)
        # Still going 10 s later: the next line stands for the rest.
        self.clock.advance(8.0)
        self.defence.flood("busy")
        floods = [e for e in self.written() if e["event"] == "source.flood"]
        self.assertEqual([e["repeated"] for e in floods], [FLOOD_THRESHOLD - 1, 30 - FLOOD_THRESHOLD])

    def test_a_circuit_closed_for_its_slow_connections_writes_nothing_unless_many_are(self):
        # Three cuts in ten minutes close a circuit: a source on a poor circuit can get there.
        circuit = Circuit(0x5678)
        for _ in range(3):
            self.defence.cut(circuit)
            self.clock.advance(60)
        self.assertEqual(self.written(), [])
        self.assertEqual(self.activity.today.defences["circuit_closed"], 1)
        # Many circuits closed so, in a flood of them: one folded line.
        for n in range(3 * FLOOD_THRESHOLD):
            self.defence.cut(Circuit(0x9000 + n % FLOOD_THRESHOLD))
            self.clock.advance(0.1)
        self.assertEqual([e.get("reason") for e in self.written()], ["circuit_closed"])

    def test_one_circuit_throttled_over_its_rate_and_closed_writes_nothing(self):
        """Second security review: a source holding F5 down goes over its request rate and,
        ten refusals on, has its circuit closed; ten mistyped codenames a minute get it
        throttled. Each wrote a line at once, dating that source."""
        circuit = Circuit(0x4321)
        for _ in range(10):
            self.defence.refused(circuit)  # throttled: its first refusal of the minute counts
            self.clock.advance(0.1)
        other = Circuit(0x4322)
        for _ in range(30):
            self.defence.rate_limited(other)
            self.clock.advance(0.1)
        self.assertEqual(self.written(), [])
        self.assertEqual((self.activity.today.defences["circuit_closed"], self.activity.today.defences["requests"]),
                         (4, 30))  # one close of the first, three of the other (it came back twice)

    def test_ten_circuits_refused_or_closed_within_ten_seconds_are_a_flood_and_written_once(self):
        for n in range(FLOOD_THRESHOLD):
            circuit = Circuit(0x7000 + n)
            for _ in range(10):
                self.defence.rate_limited(circuit)  # closed at the tenth
            for _ in range(10):
                self.defence.refused(circuit)  # and throttled, and closed again
            self.clock.advance(0.5)
        written = [(e["event"], e.get("reason")) for e in self.written()]
        self.assertEqual(sorted(written), [("source.flood", "circuit_closed"), ("source.flood", "requests"),
                                           ("source.login.throttled", None)])
