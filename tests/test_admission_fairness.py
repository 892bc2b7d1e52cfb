"""Logins cannot starve /create (security review F5), on the real SourceQueues and a Clock.

The review's attack: three codenames of the attacker's own, each keeping two logins in flight
(they never fail, and each identity may log in 30 times a minute), kept a queued /create
unserved for 60 s with 2 slots and 0.25 s runs, because logins were always served first.
"""
from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.newsroom.newsroom import CREATE_SHARE, SourceQueues

RUN = 0.25
SLOTS = 2


class ClockPool:
    """A pool whose every job takes ``RUN`` seconds of a Clock, and says what ran when."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.started: list[tuple[float, str]] = []

    def run(self, fn, *args, **kwargs):
        d = Deferred()
        self.started.append((self.clock.seconds(), args[0]))
        self.clock.callLater(RUN, d.callback, args[0])
        return d


def _run(name):
    return name


class CreateShareTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.pool = ClockPool(self.clock)
        self.queues = SourceQueues.build(self.pool, SLOTS, self.pool, 1, self.pool, 4, 2,
                                         clock=self.clock.seconds, timer=self.clock)

    def advance(self, seconds: float) -> None:
        """Run by whole runs (a Clock fires a call late when advanced past it in one step)."""
        for _ in range(round(seconds / RUN)):
            self.clock.advance(RUN)

    def keep_logging_in(self, circuit: str, stop_at: float) -> None:
        """One of the attacker's logins: when it ends, another at once, until ``stop_at``."""

        def again(_):
            if self.clock.seconds() < stop_at:
                self.keep_logging_in(circuit, stop_at)

        self.queues.argon2id.run(circuit, _run, f"login-{circuit}").addCallback(again)

    def test_three_codenames_logging_in_without_end_leave_a_create_served_within_a_second(self):
        for circuit in ("a", "b", "c"):
            for _ in range(2):
                self.keep_logging_in(circuit, stop_at=60.0)
        self.advance(5.0)  # the flood is well under way: logins wait at every moment
        self.assertGreater(self.queues.argon2id.waiting, 0)
        served = []
        asked = self.clock.seconds()
        self.queues.creates.run("new", _run, "create").addCallback(lambda _: served.append(self.clock.seconds()))
        # Bound: at most CREATE_SHARE - 1 logins are granted before it, SLOTS at a time, then
        # its own run: (CREATE_SHARE - 1) / SLOTS runs of waiting rounded up to whole runs (2)
        # plus its run, 3 runs = 0.75 s here. (Before the share: never within the 60 s.)
        bound = ((CREATE_SHARE - 1 + SLOTS - 1) // SLOTS + 1) * RUN
        self.assertEqual(bound, 0.75)
        while not served and self.clock.seconds() < 60.0:
            self.clock.advance(RUN)
        self.assertTrue(served, "the create was never served")
        self.assertLessEqual(served[0] - asked, bound + 1e-9)
        # The logins still had most of the slots meanwhile, and go on after.
        self.assertGreater(self.queues.argon2id.waiting, 0)

    def test_creates_queued_behind_a_login_flood_get_one_slot_in_create_share(self):
        for circuit in ("a", "b", "c", "d"):
            for _ in range(2):
                self.keep_logging_in(circuit, stop_at=60.0)
        self.advance(1.0)
        for i in range(6):
            self.queues.creates.run(f"new{i}", _run, f"create{i}")
        start = len(self.pool.started)
        self.advance(30 * RUN)
        granted = [name for _, name in self.pool.started[start:]]
        creates = [name for name in granted if name.startswith("create")]
        self.assertEqual(creates, [f"create{i}" for i in range(6)])  # in arrival order
        first_six = granted[:granted.index("create5") + 1]
        self.assertEqual(len(first_six), 6 * CREATE_SHARE)  # one in CREATE_SHARE, not more

    def test_a_returning_source_still_goes_before_creates_already_queued(self):
        # New codenames keep both slots busy, and more wait.
        for i in range(8):
            self.queues.creates.run(f"new{i}", _run, f"create{i}")
        self.advance(RUN)  # four creates started so far; four wait
        self.assertEqual(self.queues.creates.waiting, 4)
        self.queues.argon2id.run("source", _run, "login")
        self.advance(2 * RUN)
        # The next slot that freed went to the returning source, not to the creates before it.
        at = {name: t for t, name in self.pool.started}
        self.assertEqual(at["login"], 2 * RUN)
        self.assertLess(at["login"], at["create5"])
        self.assertEqual(at["create4"], at["login"])  # the other slot went to the oldest create

    def test_during_a_login_flood_a_returning_source_waits_at_most_one_grant_more_than_before(self):
        for circuit in ("a", "b", "c"):
            for _ in range(2):
                self.keep_logging_in(circuit, stop_at=60.0)
        self.advance(2.0)
        self.queues.creates.run("new", _run, "create")
        self.advance(RUN)
        self.queues.argon2id.run("source", _run, "login")
        start = self.clock.seconds()
        while "login" not in [n for _, n in self.pool.started]:
            self.clock.advance(RUN)
        # Round-robin among the circuits: one login of each flooding circuit may go first, and
        # the create once, if its share falls due: 4 grants, then its own, 2 at a time (without
        # the share: 3 grants, 2 runs).
        self.assertLessEqual(self.clock.seconds() - start, 3 * RUN)
