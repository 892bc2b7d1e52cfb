"""A reply shown to its source is no longer new, but that is written only after midnight UTC
(``deaddrop/newsroom/read_marks.py``): written at once, it would date the reading on disk."""
from __future__ import annotations

from twisted.application.service import MultiService
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.delayed_calls import DAY, AfterEveryMidnight
from tests._support import Browser, initialised_data_dir, start_server
from tests.integration.test_journalist_api import db_rows

MARKS = "SELECT COUNT(*) FROM reply_read_by_source"


class ReadMarksTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def test_a_reply_read_is_not_new_again_but_written_only_at_midnight(self):
        data = yield initialised_data_dir(self)
        server = yield start_server(self, data_dir=data)
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        codename = yield source.create_source()
        yield source.submit("a message")
        [(source_id,)] = db_rows(server, "SELECT id FROM sources WHERE pending = 0")
        replies = server.service.newsroom.replies
        yield replies.add(source_id, "REPLY-ONE")
        response, html = yield source.get("/lookup")
        self.assertIn("1 new reply", html)
        self.assertEqual(db_rows(server, MARKS), [(0,)])  # nothing written when it was read
        response, html = yield source.get("/lookup")
        self.assertIn("REPLY-ONE", html)
        self.assertNotIn("new reply", html)  # but no longer new
        self.assertEqual(len(replies.read_marks), 1)

        # A stop writes nothing (it would date the reading to between midnight and the stop):
        # after a restart the reply is new once more.
        yield server.stop()
        self.assertEqual(db_rows(server, MARKS), [(0,)])
        server = yield start_server(self, data_dir=data)
        again = Browser(server.source_url)
        self.addCleanup(again.close)
        response, html = yield again.login(codename)
        self.assertIn("1 new reply", html)

        # What the midnight timer runs: written, and gone from memory.
        marks = server.service.newsroom.replies.read_marks
        yield marks.write(server.service.db)
        self.assertEqual(db_rows(server, MARKS), [(1,)])
        self.assertEqual(len(marks), 0)
        response, html = yield again.get("/lookup")
        self.assertNotIn("new reply", html)

    def test_the_timer_runs_a_second_after_every_midnight_utc(self):
        clock = Clock()
        clock.advance(20 * DAY + 3600)
        runs: list[float] = []
        parent = MultiService()
        AfterEveryMidnight(clock, lambda: runs.append(clock.seconds()), "the test").setServiceParent(parent)
        parent.startService()
        clock.advance(DAY - 3600)
        self.assertEqual(runs, [])
        clock.advance(1)
        self.assertEqual(runs, [21 * DAY + 1])
        clock.advance(DAY)
        self.assertEqual(runs, [21 * DAY + 1, 22 * DAY + 1])
        parent.stopService()
        clock.advance(2 * DAY)
        self.assertEqual(len(runs), 2)
