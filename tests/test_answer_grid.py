"""When /login and /create answers leave (third security review, issue 26 item 1): on a grid
from each request's own arrival, never at a time taken from other requests' runs. Pure logic,
on a Clock."""
from __future__ import annotations

import random

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.admission.queues import Busy, KeyBusy
from deaddrop.admission.answer_grid import MIN_DELAY, AnswerGrid, answer_delay
from deaddrop.newsroom.newsroom import SourceQueues


def run_until(clock: Clock, when: float) -> None:
    """Advance ``clock`` to ``when`` call by call, each at its own time (one big step would run
    every call due on the way at the step's end)."""
    while True:
        due = [c.getTime() for c in clock.getDelayedCalls() if c.getTime() <= when]
        if not due:
            break
        clock.advance(max(0.0, min(due) - clock.seconds()))
    clock.advance(max(0.0, when - clock.seconds()))


class DelayTests(unittest.TestCase):
    def test_the_delay_fits_one_s_own_run_behind_a_normal_queue_twice_over(self):
        # Room for one's own run behind 3 others, run `parallel` at a time, twice over.
        self.assertEqual(answer_delay(0.25, 2), 1.0)
        self.assertEqual(answer_delay(0.25, 1), 2.0)
        self.assertEqual(answer_delay(0.25, 4), 0.5)
        self.assertEqual(answer_delay(0.25, 8), 0.5)
        self.assertEqual(answer_delay(0.333, 2), 1.34)  # whole hundredths, rounded up
        self.assertEqual(answer_delay(0.001, 4), MIN_DELAY)  # a cheap KDF (tests, the demo)

    def test_calibrating_sets_the_run_time_and_the_delay(self):
        grid = AnswerGrid(0.25, 2, Clock())
        self.assertEqual((grid.run_seconds, grid.delay), (0.25, 1.0))
        grid.calibrate(0.4)
        self.assertEqual((grid.run_seconds, grid.delay), (0.4, 1.6))


class GridTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.grid = AnswerGrid(0.25, 2, self.clock, jitter=0)  # delay 1.0, no jitter

    def at(self, arrival: float, done: float, result="found"):
        """An answer whose work arrives at ``arrival`` and ends at ``done``. -> its Deferred."""
        run_until(self.clock, arrival)
        work = Deferred()
        self.clock.callLater(done - arrival, work.callback, result)
        return self.grid.answer(lambda: work)

    def left_at(self, d: Deferred) -> float:
        times = []
        d.addBoth(lambda r: times.append(self.clock.seconds()) or r)
        while not times and self.clock.getDelayedCalls():
            run_until(self.clock, min(c.getTime() for c in self.clock.getDelayedCalls()))
        self.assertEqual(len(times), 1, "never answered")
        return times[0]

    def test_answers_leave_at_arrival_plus_the_delay_whatever_the_work_took(self):
        for took in (0.0, 0.05, 0.31, 0.7, 0.999, 1.0):
            arrival = self.clock.seconds() + 3.0
            d = self.at(arrival, arrival + took)
            self.assertAlmostEqual(self.left_at(d) - arrival, 1.0, places=6)
            self.assertEqual(self.successResultOf(d), "found")

    def test_work_slower_than_the_delay_answers_at_the_next_step(self):
        for took, step in ((1.001, 2.0), (1.5, 2.0), (2.0, 2.0), (2.3, 3.0)):
            arrival = self.clock.seconds() + 5.0
            d = self.at(arrival, arrival + took)
            self.assertAlmostEqual(self.left_at(d) - arrival, step, places=6)

    def test_each_answer_leaves_at_a_random_moment_in_the_first_50_ms_of_its_step(self):
        grid = AnswerGrid(0.25, 2, self.clock)  # the real jitter, from the system's randomness
        left = []
        for _ in range(20):
            arrival = self.clock.seconds() + 3.0
            run_until(self.clock, arrival)
            d = grid.answer(lambda: succeed("found"))
            left.append(self.left_at(d) - arrival)
        self.assertTrue(all(1.0 <= t < 1.05 for t in left), left)
        self.assertGreater(len({round(t, 6) for t in left}), 15)  # drawn afresh each time

    def test_failures_are_held_too_but_busy_is_answered_at_once(self):
        d = self.grid.answer(lambda: fail(ValueError("already in use")))
        self.assertNoResult(d)
        self.clock.advance(0.999)
        self.assertNoResult(d)
        self.clock.advance(0.001)
        self.failureResultOf(d, ValueError)
        for refusal in (Busy("argon2id"), KeyBusy("argon2id")):
            self.failureResultOf(self.grid.answer(lambda: fail(refusal)), Busy)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancelling_stops_the_work_or_the_wait_and_leaves_no_timer(self):
        cancelled = []
        work = Deferred(cancelled.append)
        d = self.grid.answer(lambda: work)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(cancelled, [work])  # the work was cancelled (it leaves its queue)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        d = self.grid.answer(lambda: succeed("found"))
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class ClockPool:
    """Each job takes the next of ``durations`` seconds of a Clock; ``ran`` lists them."""

    def __init__(self, clock: Clock, durations) -> None:
        self.clock, self.durations, self.ran = clock, iter(durations), []

    def run(self, fn, *args, **kwargs):
        d = Deferred()
        took = next(self.durations)
        self.ran.append(took)
        self.clock.callLater(took, d.callback, fn(*args, **kwargs))
        return d


def _found(name):
    return name


class ProberTests(unittest.TestCase):
    """The review's attack on the real queues: a prober sends codenames whose tag no source has
    (decoys) on fresh circuits while a victim logs in (real runs) now and then."""

    SLOTS = 2

    def probe_times(self, victim_logins: int, seed: int) -> tuple[list[float], list[float]]:
        """-> (each probe's answer time after its arrival, the victim's runs' durations)."""
        rng = random.Random(seed)
        clock = Clock()
        pool = ClockPool(clock, (rng.uniform(0.15, 0.6) for _ in range(10_000)))
        queues = SourceQueues.build(pool, self.SLOTS, pool, 1, pool, 4, 2, clock=clock.seconds, timer=clock)
        queues.answers.calibrate(0.25)  # as timed at start-up: a 1.0 s delay
        queues.answers.jitter = 0  # (the exact times: the jitter only adds to them)
        logins, answers = queues.argon2id, queues.answers
        events = []  # (time, what)
        for i in range(200):
            events.append((i * 0.5 + rng.uniform(0, 0.1), f"probe-{i}"))
        for i in range(victim_logins):
            events.append((rng.uniform(0, 100), f"victim-{i}"))
        times: list[float] = []
        for at, what in sorted(events):
            run_until(clock, at)
            arrival = clock.seconds()
            if what.startswith("probe"):
                d = answers.answer(lambda: logins.decoy(what, answers.run_seconds))
                d.addCallback(lambda _, arrival=arrival: times.append(clock.seconds() - arrival))
            else:
                answers.answer(lambda: logins.run(what, _found, what))
        run_until(clock, clock.seconds() + 10.0)
        self.assertEqual(len(times), 200)
        return times, pool.ran

    def test_probe_times_are_the_delay_whatever_a_victim_does_and_never_a_run_s_duration(self):
        quiet, _ = self.probe_times(victim_logins=0, seed=26)
        busy, runs = self.probe_times(victim_logins=5, seed=26)
        self.assertEqual(len(runs), 5)
        self.assertEqual({round(t, 9) for t in quiet}, {1.0})
        self.assertEqual({round(t, 9) for t in busy}, {1.0})
        for took in runs:
            self.assertNotIn(round(took, 9), {round(t, 9) for t in busy})

    def test_a_saturated_queue_answers_busy_at_once_through_the_grid(self):
        clock = Clock()
        pool = ClockPool(clock, [5.0] * 100)
        queues = SourceQueues.build(pool, self.SLOTS, pool, 1, pool, 4, 2, clock=clock.seconds, timer=clock)
        logins, answers = queues.argon2id, queues.answers
        answers.jitter = 0
        logins.max_waiting = 1
        held = [answers.answer(lambda c=c: logins.run(c, _found, c)) for c in ("a", "b", "c")]
        for d in held:
            self.assertNoResult(d)
        # Both slots run, one waits: the queue is full; a check and a decoy are refused now.
        self.failureResultOf(answers.answer(lambda: logins.run("d", _found, "d")), Busy)
        self.failureResultOf(answers.answer(lambda: logins.decoy("e", answers.run_seconds)), Busy)
        run_until(clock, 4.999)
        self.assertNoResult(held[0])
        run_until(clock, 5.0)  # done at 5.0: the grid's 5th step
        self.assertEqual(self.successResultOf(held[0]), "a")
