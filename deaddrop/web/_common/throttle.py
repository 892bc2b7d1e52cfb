"""Failure throttles for logins."""
from __future__ import annotations

import collections
import time
from typing import Callable, Hashable


class FailureThrottle:
    """At most ``limit`` failures per ``window`` seconds per key; then refuse until they age out.

    The source side uses one global key: behind Tor there are no client addresses, so the
    whole instance shares one budget. A real source waits at most ``window`` seconds.
    """

    def __init__(self, limit: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._failures: dict[Hashable, collections.deque[float]] = {}

    def _recent(self, key: Hashable) -> collections.deque[float]:
        now = self._clock()
        failures = self._failures.setdefault(key, collections.deque())
        while failures and now - failures[0] > self.window:
            failures.popleft()
        if not failures:
            self._failures.pop(key, None)
        return failures

    def blocked(self, key: Hashable = None) -> bool:
        return len(self._recent(key)) >= self.limit

    def failed(self, key: Hashable = None) -> None:
        self._recent(key)
        self._failures.setdefault(key, collections.deque()).append(self._clock())

    def reset(self, key: Hashable = None) -> None:
        self._failures.pop(key, None)
