"""The login failure throttle: per key, with reservations taken before the expensive check."""
from twisted.internet.task import Clock
from twisted.trial import unittest

from deaddrop.admission.throttle import FailureThrottle


class FailureThrottleTests(unittest.TestCase):
    def setUp(self):
        self.clock = Clock()
        self.throttle = FailureThrottle(3, 60.0, clock=self.clock.seconds)

    def test_concurrent_attempts_cannot_all_pass_the_check(self):
        # 120 attempts arrive before any has failed: only the limit gets through.
        reservations = [self.throttle.reserve("circuit") for _ in range(120)]
        self.assertEqual(sum(r is not None for r in reservations), 3)

    def test_settled_reservations_count_as_failures_or_not(self):
        a, b, c = (self.throttle.reserve("k") for _ in range(3))
        a.failed()
        b.cancel()
        c.cancel()
        c.failed()  # settled once only
        self.assertFalse(self.throttle.blocked("k"))
        self.throttle.reserve("k").failed()
        self.throttle.reserve("k").failed()
        self.assertTrue(self.throttle.blocked("k"))
        self.assertIsNone(self.throttle.reserve("k"))
        self.clock.advance(61)
        self.assertIsNotNone(self.throttle.reserve("k"))

    def test_keys_are_independent(self):
        for _ in range(3):
            self.throttle.reserve("flood").failed()
        self.assertIsNone(self.throttle.reserve("flood"))
        self.assertIsNotNone(self.throttle.reserve("source"))

    def test_keys_seen_once_do_not_pile_up(self):
        for i in range(5000):
            self.throttle.failed(("circuit", i))
            self.clock.advance(0.1)  # 500 s in all: most have aged out of the 60 s window
        self.assertLess(self.throttle.tracked_keys(), 2 * 1024)
