"""The admission layer's rules, on a controllable pool (pure logic: no threads, no reactor)."""
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.admission.queues import Admission, Busy, KeyBusy


class ManualPool:
    """Stands in for a WorkerPool: each job finishes when the test says so."""

    def __init__(self):
        self.jobs: list[tuple[str, Deferred]] = []

    def run(self, fn, *args, **kwargs):
        d = Deferred()
        self.jobs.append((args[0] if args else fn.__name__, d))
        return d

    def finish(self, index=0, result="done"):
        name, d = self.jobs.pop(index)
        d.callback(result)
        return name


def label(name):
    return name


class AdmissionTests(unittest.TestCase):
    def setUp(self):
        self.pool = ManualPool()
        self.admission = Admission(self.pool, slots=1)
        self.argon = self.admission.queue("argon2id", priority=2, per_key=3, max_waiting=4)
        self.decrypt = self.admission.queue("decrypt", priority=0, per_key=2, max_waiting=4)

    def started(self):
        return [name for name, _ in self.pool.jobs]

    def test_free_slot_runs_at_once_then_requests_wait(self):
        first = self.argon.run("a", label, "a1")
        second = self.argon.run("b", label, "b1")
        self.assertEqual(self.started(), ["a1"])
        self.assertEqual(self.argon.waiting, 1)
        self.pool.finish()
        self.assertEqual(self.successResultOf(first), "done")
        self.assertEqual(self.started(), ["b1"])
        self.pool.finish()
        self.assertEqual(self.successResultOf(second), "done")
        self.assertEqual(self.admission.running, 0)
        self.assertEqual(self.argon.holding("a") + self.argon.holding("b"), 0)

    def test_keys_are_served_round_robin_not_first_come(self):
        self.argon.run("flood", label, "f0")  # running
        for i in range(1, 3):
            self.argon.run("flood", label, f"f{i}")
        self.argon.run("source", label, "s1")
        order = []
        while self.pool.jobs:
            order.append(self.pool.finish())
        # The source, which came last, runs right after the flood's first queued request.
        self.assertEqual(order, ["f0", "f1", "s1", "f2"])

    def test_a_key_may_hold_only_per_key_requests(self):
        for i in range(3):
            self.argon.run("flood", label, f"f{i}")
        refused = self.argon.run("flood", label, "f3")
        self.failureResultOf(refused, KeyBusy)
        self.assertEqual(self.argon.holding("flood"), 3)

    def test_a_full_queue_refuses_at_once_but_never_a_key_with_nothing_waiting(self):
        self.argon.run("x", label, "running")
        queued = [self.argon.run(key, label, key) for key in ("a", "a", "b", "c")]
        self.assertEqual(self.argon.waiting, 4)
        # "a" holds two waiting requests: a newcomer takes the place of a's newest.
        a_second = queued[1]
        newcomer = self.argon.run("d", label, "d")
        self.failureResultOf(a_second, Busy)
        self.assertNoResult(newcomer)
        self.assertEqual(self.argon.waiting, 4)
        # Now every waiting key holds one request: the queue is really full.
        self.failureResultOf(self.argon.run("e", label, "e"), Busy)
        self.assertEqual(self.argon.waiting, 4)
        # Still bounded after everything drains.
        while self.pool.jobs:
            self.pool.finish()
        self.assertEqual((self.admission.running, self.argon.waiting), (0, 0))
        self.assertEqual(dict(self.argon._held), {})

    def test_higher_priority_work_is_served_first_when_a_slot_frees(self):
        self.argon.run("c1", label, "argon-running")
        self.argon.run("c2", label, "argon-waiting")
        self.decrypt.run(17, label, "decrypt")
        self.pool.finish()
        self.assertEqual(self.started(), ["decrypt"])
        self.pool.finish()
        self.assertEqual(self.started(), ["argon-waiting"])

    def test_cancelling_a_waiting_request_removes_it(self):
        self.argon.run("a", label, "a1")
        waiting = self.argon.run("gone", label, "g1")
        waiting.cancel()
        self.failureResultOf(waiting, CancelledError)
        self.assertEqual((self.argon.waiting, self.argon.holding("gone")), (0, 0))
        self.pool.finish()
        self.assertEqual(self.started(), [])  # the cancelled one never ran
        self.assertEqual(self.admission.running, 0)

    def test_cancelling_running_work_keeps_the_slot_until_the_thread_ends(self):
        running = self.argon.run("a", label, "a1")
        after = self.argon.run("b", label, "b1")
        running.cancel()
        self.failureResultOf(running, CancelledError)
        self.assertEqual(self.admission.running, 1)  # the thread still works
        self.assertEqual(self.started(), ["a1"])
        self.pool.finish()
        self.assertEqual(self.started(), ["b1"])
        self.pool.finish()
        self.successResultOf(after)

    def test_tickets_hold_a_slot_across_several_steps(self):
        ticket = self.successResultOf(self.argon.acquire("a"))
        other = self.argon.acquire("b")
        self.assertNoResult(other)
        ticket.release()
        ticket.release()  # idempotent
        self.assertEqual(self.admission.running, 1)
        self.successResultOf(other).release()
        self.assertEqual(self.admission.running, 0)

    def test_no_queue_means_refused_at_once_when_all_slots_are_taken(self):
        uploads = Admission(ManualPool(), slots=2).queue("upload", priority=0, per_key=1, max_waiting=0)
        one = self.successResultOf(uploads.acquire("s1"))
        self.failureResultOf(uploads.acquire("s1"), KeyBusy)
        self.successResultOf(uploads.acquire("s2"))
        self.failureResultOf(uploads.acquire("s3"), Busy)
        one.release()
        self.successResultOf(uploads.acquire("s3"))

    def test_a_failing_job_releases_its_slot(self):
        d = self.argon.run("a", label, "a1")
        _, job = self.pool.jobs.pop()
        job.errback(RuntimeError("boom"))
        self.failureResultOf(d, RuntimeError)
        self.assertEqual(self.admission.running, 0)


class WaitBoundTests(unittest.TestCase):
    def test_the_queue_shrinks_when_work_runs_slowly(self):
        clock = Clock()
        pool = ManualPool()
        q = Admission(pool, slots=1, clock=clock.seconds).queue(
            "argon2id", priority=0, per_key=2, max_waiting=100, max_wait=4.0)
        q.run("a", label, "first")
        clock.advance(2.0)  # a run now takes 2 s (a loaded machine)
        pool.finish()
        q.run("b", label, "running")
        waiting = [q.run(k, label, k) for k in ("c", "d")]  # 2 x 2 s = 4 s: still fits
        self.assertEqual(q.waiting, 2)
        refused = q.run("e", label, "e")  # would wait 6 s
        self.failureResultOf(refused, Busy)
        for d in waiting:
            self.assertNoResult(d)


class StandingTests(unittest.TestCase):
    """Keys (circuits) that have failed lately yield to those that have not."""

    def setUp(self):
        self.pool = ManualPool()
        self.admission = Admission(self.pool, slots=1)
        self.failures = {}
        self.argon = self.admission.queue("argon2id", priority=2, per_key=2, max_waiting=4,
                                          standing=lambda key: self.failures.get(key, 0))

    def fill_with_failing_circuits(self):
        """One running and four waiting requests, from circuits that each failed lately."""
        self.argon.run("f0", label, "f0-running")
        queued = {f"f{i}": self.argon.run(f"f{i}", label, f"f{i}") for i in range(1, 5)}
        for key in ("f0", *queued):
            self.failures[key] = 3
        self.assertEqual(self.argon.waiting, 4)
        return queued

    def test_a_clean_circuit_is_served_before_failing_ones_that_came_earlier(self):
        self.fill_with_failing_circuits()
        self.pool.finish()  # f0 done; f1 runs, f2-f4 wait
        source = self.argon.run("source", label, "source")  # arrives last
        self.pool.finish()  # f1 done: the slot goes to the source, not to f2
        self.assertEqual(self.pool.jobs[0][0], "source")
        self.pool.finish()
        self.assertEqual(self.successResultOf(source), "done")

    def test_a_full_queue_of_failing_circuits_makes_room_for_a_clean_one(self):
        queued = self.fill_with_failing_circuits()
        self.failures["f4"] = 9  # the worst standing gives up its place
        source = self.argon.run("source", label, "source")
        self.failureResultOf(queued["f4"], Busy)
        self.assertNoResult(source)
        self.assertEqual(self.argon.waiting, 4)
        # And it runs next, ahead of the three failing circuits that were already waiting.
        self.pool.finish()
        self.assertEqual(self.pool.jobs[0][0], "source")

    def test_without_better_standing_a_full_queue_still_refuses(self):
        self.fill_with_failing_circuits()
        self.failures["late"] = 3  # as bad as those waiting: no place is taken from them
        self.failureResultOf(self.argon.run("late", label, "late"), Busy)
        self.assertEqual(self.argon.waiting, 4)

    def test_clean_circuits_among_themselves_are_served_round_robin(self):
        self.argon.run("a", label, "a0")
        self.argon.run("a", label, "a1")
        self.argon.run("b", label, "b1")
        self.argon.run("c", label, "c1")
        order = []
        while self.pool.jobs:
            order.append(self.pool.finish())
        self.assertEqual(order, ["a0", "a1", "b1", "c1"])

    def test_standing_is_read_when_a_slot_frees_not_when_queued(self):
        self.argon.run("x", label, "x0")  # running
        self.argon.run("x", label, "x1")  # queued while x was clean
        self.argon.run("y", label, "y1")
        self.failures["x"] = 1  # x0 turned out to be a wrong codename
        self.pool.finish()
        self.assertEqual(self.pool.jobs[0][0], "y1")


class WorkerPriorityTests(unittest.TestCase):
    """The crypto pool's threads run below the reactor's CPU priority."""

    def test_a_niced_pool_runs_its_work_at_a_lower_priority(self):
        import os
        import threading

        from twisted.internet import reactor

        from deaddrop.crypto.pool import WorkerPool

        def own_nice():
            return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        niced = WorkerPool(reactor, "test-niced", max_threads=1, niceness=10)
        plain = WorkerPool(reactor, "test-plain", max_threads=1)
        self.addCleanup(niced.stop)
        self.addCleanup(plain.stop)
        mine = own_nice()

        def compare(values):
            (_, low), (_, normal) = values
            self.assertEqual(normal, mine)
            self.assertEqual(low, min(19, mine + 10))

        from twisted.internet.defer import gatherResults
        d = gatherResults([niced.run(own_nice), plain.run(own_nice)])
        return d.addCallback(lambda values: compare(list(enumerate(values))))


class StandingFadesTests(unittest.TestCase):
    def test_a_request_in_bad_standing_is_not_starved_by_a_stream_of_clean_ones(self):
        clock = Clock()
        pool = ManualPool()
        admission = Admission(pool, slots=1, clock=clock.seconds)
        argon = admission.queue("argon2id", priority=2, per_key=2, max_waiting=8,
                                standing=lambda key: 1 if key == "typo" else 0)
        argon.run("first", label, "first")  # running
        argon.run("typo", label, "typo")  # a source that mistyped once, waiting
        started = []
        for i in range(5):  # a clean newcomer arrives every second, as each run ends
            argon.run(f"clean{i}", label, f"clean{i}")
            clock.advance(1.0)
            pool.finish()
            started.append(pool.jobs[0][0])
        # Clean newcomers go first for a while; after 4 s of waiting the source is served.
        self.assertEqual(started[:4], ["clean0", "clean1", "clean2", "typo"])


class ClockPool:
    """A pool whose every job takes ``seconds`` on a Clock."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, seconds

    def run(self, fn, *args, **kwargs):
        d = Deferred()
        self.clock.callLater(self.seconds, d.callback, fn(*args, **kwargs))
        return d


class DecoyTests(unittest.TestCase):
    """A codename no source's tag matches stands in for a check: refused where one would be,
    served in its place, holding its circuit's place as long as the run time it is given."""

    RUN = 1.0  # the run time a decoy is given (in the service: timed at start-up)

    def setUp(self):
        from deaddrop.admission.queues import Pace

        self.clock = Clock()
        self.admission = Admission(ClockPool(self.clock, 1.0), slots=1, clock=self.clock.seconds, timer=self.clock)
        pace = Pace()
        self.logins = self.admission.queue("logins", priority=2, per_key=2, max_waiting=8, max_wait=20.0, pace=pace)
        self.creates = self.admission.queue("creates", priority=3, per_key=2, max_waiting=8, max_wait=20.0,
                                            fifo=True, pace=pace)
        self.logins.run("warm-up", label, "x")
        self.clock.advance(1.0)  # the pace is measured: a run takes 1 s

    def decoy(self, key):
        return self.logins.decoy(key, self.RUN)

    def test_a_decoy_ends_exactly_when_a_real_check_admitted_with_it_does(self):
        running = self.logins.run("a", label, "a")
        decoy = self.decoy("c")  # waits for its turn, after a
        real = self.logins.run("d", label, "d")  # waits behind the decoy, as it would behind a check
        self.assertEqual(self.admission.running, 1)  # the decoy took no slot
        self.assertEqual(self.logins.waiting, 1)  # nor room in the queue
        self.clock.advance(1.0)  # (a Clock runs what a call schedules from the time it advanced to)
        self.successResultOf(running)
        # Its turn came with the slot a freed; that slot went to d, the decoy waits a run's time.
        self.assertEqual(self.admission.running, 1)
        self.clock.advance(0.99)
        self.assertNoResult(real)
        self.assertNoResult(decoy)
        self.clock.advance(0.01)
        self.successResultOf(real)
        self.assertIsNone(self.successResultOf(decoy))
        self.assertEqual(self.logins.holding("c"), 0)

    def test_a_decoy_waits_for_its_turn_as_a_real_check_in_its_place_would(self):
        self.logins.run("a", label, "a")  # runs 0-1
        self.logins.run("b", label, "b")  # waits; runs 1-2
        decoy = self.decoy("c")  # a real c would run 2-3
        self.clock.advance(1.0)
        self.clock.advance(1.0)
        self.assertNoResult(decoy)
        self.clock.advance(0.99)
        self.assertNoResult(decoy)
        self.clock.advance(0.01)
        self.assertIsNone(self.successResultOf(decoy))

    def test_cancelling_a_queued_decoy_leaves_the_queue(self):
        self.logins.run("a", label, "a")
        decoy = self.decoy("c")
        decoy.cancel()
        self.failureResultOf(decoy, CancelledError)
        self.assertEqual((self.logins.holding("c"), dict(self.logins._waiting)), (0, {}))
        self.clock.advance(1.0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_decoy_is_refused_where_a_real_request_would_be(self):
        first, second = self.decoy("k"), self.decoy("k")
        self.failureResultOf(self.decoy("k"), KeyBusy)  # the key's places are held
        self.clock.advance(1.0)
        self.successResultOf(first), self.successResultOf(second)
        self.logins.max_waiting = 1
        self.logins.run("a", label, "a")
        self.logins.run("b", label, "b")  # the queue is full now
        self.failureResultOf(self.decoy("c"), Busy)

    def test_cancelling_a_decoy_frees_its_place(self):
        decoy = self.decoy("k")
        decoy.cancel()
        self.failureResultOf(decoy, CancelledError)
        self.assertEqual(self.logins.holding("k"), 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_decoy_holds_its_place_for_the_run_time_it_is_given_never_a_recent_run_s(self):
        """Third security review: a decoy waited the time of one of the last 8 runs, so a
        prober saw the set of its answer times change whenever a source logged in. Its time
        is now the fixed figure it is given, whatever runs took lately, and no decoy has a
        calibration run made (nothing follows the recent runs any more)."""
        pool = self.admission.pool
        for seconds in [0.3] * 7 + [2.0]:
            pool.seconds = seconds
            self.logins.run("k", label, "x")
            self.clock.advance(seconds)
        self.assertAlmostEqual(self.logins.pace.mean, (0.3 * 7 + 2.0) / 8)  # the queues still size by it
        self.clock.advance(120.0)  # long idle: once, a decoy would have had a run timed now
        for _ in range(20):
            self.decoy("c")
            self.assertEqual(self.admission.running, 0)
            [call] = self.clock.getDelayedCalls()
            self.assertEqual(call.getTime() - self.clock.seconds(), self.RUN)
            self.clock.advance(2.0)

    def test_creates_wait_behind_logins_and_are_served_in_arrival_order(self):
        self.logins.run("x", label, "running")
        # c1 sends two before c2 sends one: round-robin by key would serve c1, c2, c1.
        order = [self.creates.run(key, label, key) for key in ("c1", "c1", "c2")]
        self.logins.run("login", label, "login")
        done = []
        for d, name in zip(order, ("c1", "c1-again", "c2")):
            d.addCallback(lambda _, name=name: done.append(name))
        self.clock.advance(1.0)
        self.assertEqual(self.creates.waiting, 3)  # the login went first
        for _ in range(4):
            self.clock.advance(1.0)
        self.assertEqual(done, ["c1", "c1-again", "c2"])  # FIFO, not round-robin by key
        # The work a create waits behind counts the logins queued before it.
        self.logins.run("y", label, "running")
        self.logins.run("l1", label, "l1")
        self.logins.run("l2", label, "l2")
        self.creates.run("c3", label, "c3")
        self.assertEqual(self.creates._work_ahead(), 3.0)
        self.assertEqual(self.logins._work_ahead(), 2.0)
