"""When /login and /create answers leave, on the real server (issue 26, item 1): one delay after
the request came, or a whole number of delays, whatever other requests' runs took. The third
security review dated a victim's logins to the second from the times of wrong codenames' answers,
each a copy of a recent run's time."""
from __future__ import annotations

import os
import random
import re
import sqlite3
import time

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock, deferLater
from twisted.trial import unittest

from deaddrop.newsroom import codenames
from deaddrop.web.source.app import NOT_RECOGNIZED
from tests._support import Browser, start_server, wait_until
from tests.integration.test_admission_flow import LOGGED_IN, count_argon2id_runs, hold_argon2id

_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')


class AnswerTimeTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self)
        self.newsroom = self.server.service.newsroom
        self.answers = self.newsroom.queues.answers

    def browser(self) -> Browser:
        b = Browser(self.server.source_url)
        self.addCleanup(b.close)
        return b

    @inlineCallbacks
    def create_form(self):
        """A browser on /generate. -> (browser, the POST /create it would send)."""
        b = self.browser()
        _, page = yield b.get("/generate")
        fields = {"codename": _CODENAME.search(page).group(1), "csrf_token": b.csrf(page)}
        return b, lambda: b.post("/create", data=fields, follow=False)

    @inlineCallbacks
    def login_form(self, codename: str):
        b = self.browser()
        _, page = yield b.get("/login")
        fields = {"codename": codename, "csrf_token": b.csrf(page)}
        return lambda: b.post("/login", data=fields, follow=False)

    @inlineCallbacks
    def on_clock(self, clock: Clock, send) -> tuple:
        """Send, then move ``clock`` to each of its calls in turn, but only while one is due:
        otherwise real work (a thread's Argon2id run, a database read) is under way, and time
        on the clock stands still. -> (response, page, clock seconds from sending to answer)."""
        start = clock.seconds()
        answered: list = []
        answer = send().addBoth(lambda result: (answered.append(clock.seconds()), result)[1])
        while not answered:
            calls = clock.getDelayedCalls()
            if calls:
                clock.advance(min(c.getTime() for c in calls) - clock.seconds())
            yield deferLater(reactor, 0.01, lambda: None)
        response, page = yield answer
        return response, page, round(answered[0] - start, 9)

    @inlineCallbacks
    def test_hit_miss_untagged_and_create_answers_leave_one_delay_after_they_came(self):
        codename = yield self.browser().create_source()
        queues = self.newsroom.queues
        clock = Clock()
        self.patch(queues.argon2id.admission, "_timer", clock)
        self.patch(self.answers, "_timer", clock)
        self.patch(self.answers, "jitter", 0)  # (it only adds up to 50 ms, drawn at random)
        for _ in range(8):  # runs lately took 0.7 s: nothing follows them any more
            queues.argon2id.pace.record(0.7, queues.argon2id.admission.clock())
        delay = self.answers.delay
        runs = count_argon2id_runs(self)
        miss = yield self.login_form(codenames.generate_codename(7))
        hit = yield self.login_form(codename)
        _, create = yield self.create_form()
        response, page, took = yield self.on_clock(clock, miss)
        self.assertEqual((response.code, took, len(runs)), (403, delay, 0))
        self.assertIn(NOT_RECOGNIZED, page)
        response, page, took = yield self.on_clock(clock, hit)
        self.assertEqual((response.code, took, len(runs)), (303, delay, 1))
        response, page, took = yield self.on_clock(clock, create)
        self.assertEqual((response.code, took, len(runs)), (303, delay, 2))
        # A source made before tags remains: a wrong codename is checked with a run, and is
        # answered at the same time still.
        with sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite")) as db:
            db.execute("UPDATE sources SET login_tag = NULL WHERE id = (SELECT MIN(id) FROM sources)")
        untagged = yield self.login_form(codenames.generate_codename(7))
        response, page, took = yield self.on_clock(clock, untagged)
        self.assertEqual((response.code, took, len(runs)), (403, delay, 3))

    @inlineCallbacks
    def test_a_run_slower_than_the_delay_answers_at_the_next_step(self):
        codename = yield self.browser().create_source()
        clock = Clock()
        self.patch(self.answers, "_timer", clock)
        self.patch(self.answers, "jitter", 0)
        gate, entered = hold_argon2id(self, self.server)
        delay = self.answers.delay
        hit = yield self.login_form(codename)
        answer = hit()
        yield wait_until(lambda: entered)
        clock.advance(delay * 1.3)  # the run is still going 1.3 delays after the request came
        gate.set()
        response, page, _ = yield self.on_clock(clock, lambda: answer)
        self.assertEqual(response.code, 303)
        self.assertAlmostEqual(clock.seconds(), 2 * delay)

    @inlineCallbacks
    def test_over_the_wire_no_answer_takes_a_run_s_time(self):
        """Runs of 0.05-0.3 s; a 0.6 s delay. Every answer comes on the grid (a whole number of
        delays after its request, plus the jitter and what the client and the page add), a
        miss at the first step, and none after a time a run took."""
        delay = 0.6
        self.patch(self.answers, "delay", delay)
        self.patch(self.answers, "run_seconds", 0.1)
        codename = yield self.browser().create_source()
        real, durations = self.newsroom.kdf.derive, []
        rng = random.Random(26)

        def varied(text):
            took = rng.uniform(0.05, 0.3)
            durations.append(took)
            time.sleep(took)
            return real(text)

        self.patch(self.newsroom.kdf, "derive", varied)
        timed: dict[str, list[float]] = {"miss": [], "hit": [], "create": []}
        for round_ in range(3):
            sends = [("hit", (yield self.login_form(codename)))]
            for _ in range(2):
                sends.append(("miss", (yield self.login_form(codenames.generate_codename(7)))))
            sends.append(("create", (yield self.create_form())[1]))
            for kind, send in sends:
                started = time.monotonic()
                response, _ = yield send()
                timed[kind].append(time.monotonic() - started)
                self.assertEqual(response.code, 403 if kind == "miss" else 303)
        self.assertEqual(len(durations), 6)  # the runs: hits and creates, no miss
        for kind, times in timed.items():
            for took in times:
                self.assertGreaterEqual(took, delay, kind)
                # Past its step: the jitter (50 ms) and the client and the page, on a machine
                # others share. (A run made slow by that sharing may take a later step.)
                self.assertLess(took % delay, 0.3, (kind, took))
        for took in timed["miss"]:
            self.assertLess(took, 2 * delay)
            self.assertTrue(all(abs(took - run) > 0.01 for run in durations), (took, durations))

    @inlineCallbacks
    def test_start_up_times_three_runs_and_derives_the_delay_from_the_fastest(self):
        from deaddrop.admission.answer_grid import answer_delay

        runs = count_argon2id_runs(self)
        real, took = self.newsroom.kdf.derive, iter([0.3, 0.1, 0.2])

        def timed(text):
            time.sleep(next(took))
            return real(text)

        self.patch(self.newsroom.kdf, "derive", timed)
        run_seconds = yield self.newsroom.calibrate()
        self.assertEqual(len(runs), 3)
        self.assertLess(abs(run_seconds - 0.1), 0.05)
        self.assertEqual(self.answers.run_seconds, run_seconds)
        parallel = min(self.server.config.crypto_threads, os.cpu_count() or 1)
        self.assertEqual(self.answers.delay, answer_delay(run_seconds, parallel))
