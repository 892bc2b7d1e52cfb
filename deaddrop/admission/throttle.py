# -*- test-case-name: tests.test_throttle -*-
"""Failure throttles for logins."""
from __future__ import annotations

import collections
import time
from typing import Callable, Hashable


_SWEEP_EVERY = 1024


class FailureThrottle:
    """At most ``limit`` failures per ``window`` seconds per key; then refuse until they age out.

    Keys are never global on the source side: a Tor circuit before the KDF, a derived identity
    after it. ``reserve`` counts an attempt in flight as a failure until it is settled, so a
    burst of concurrent attempts cannot all pass the check before the first one fails.
    """

    def __init__(self, limit: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._failures: dict[Hashable, collections.deque[float]] = {}
        self._reserved: collections.Counter[Hashable] = collections.Counter()
        self._since_sweep = 0

    def _recent(self, key: Hashable) -> collections.deque[float]:
        now = self._clock()
        failures = self._failures.setdefault(key, collections.deque())
        while failures and now - failures[0] > self.window:
            failures.popleft()
        if not failures:
            self._failures.pop(key, None)
        return failures

    def blocked(self, key: Hashable = None) -> bool:
        return len(self._recent(key)) + self._reserved.get(key, 0) >= self.limit

    def recent_failures(self, key: Hashable = None) -> int:
        """Failures of ``key`` within the window (attempts in flight not counted)."""
        return len(self._recent(key))

    def failed(self, key: Hashable = None) -> None:
        self._recent(key)
        self._failures.setdefault(key, collections.deque()).append(self._clock())
        # Keys that are never seen again (a circuit gone, a codename tried once) must not pile
        # up: now and then drop every key whose failures have all aged out.
        self._since_sweep += 1
        if self._since_sweep >= _SWEEP_EVERY:
            self._since_sweep = 0
            self.sweep()

    def sweep(self) -> None:
        cutoff = self._clock() - self.window
        for key in [k for k, failures in self._failures.items() if failures[-1] < cutoff]:
            del self._failures[key]

    def tracked_keys(self) -> int:
        """Keys with failures still remembered (aged-out ones go at the next sweep)."""
        return len(self._failures)

    def reset(self, key: Hashable = None) -> None:
        self._failures.pop(key, None)

    def reserve(self, key: Hashable = None) -> "Reservation | None":
        """Take one attempt's place before the expensive check; None if ``key`` is blocked."""
        if self.blocked(key):
            return None
        self._reserved[key] += 1
        return Reservation(self, key)

    def _settle(self, key: Hashable, failed: bool) -> None:
        self._reserved[key] -= 1
        if self._reserved[key] <= 0:
            del self._reserved[key]
        if failed:
            self.failed(key)


class Reservation:
    """One attempt in flight. Settle it once: ``failed()``, or ``cancel()`` if it did not fail."""

    def __init__(self, throttle: FailureThrottle, key: Hashable) -> None:
        self._throttle = throttle
        self._key = key
        self._settled = False

    def _settle(self, failed: bool) -> None:
        if not self._settled:
            self._settled = True
            self._throttle._settle(self._key, failed)

    def failed(self) -> None:
        self._settle(True)

    def cancel(self) -> None:
        self._settle(False)
