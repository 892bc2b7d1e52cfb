"""Requests per Tor circuit: how fast one circuit may ask the source site for anything.

Every request costs the one reactor some CPU, and the journalists share that reactor. A circuit
may pipeline hundreds of requests a second on its 16 streams; a source's Tor Browser sends a few
per page. So each circuit gets a token bucket (``rate`` a second, ``burst`` at once); a request
beyond it is answered at once with a short 429 and its connection closed, and the refusal counts
toward closing the circuit through Tor. Form posts may borrow a burst more before they are
refused (see ``allow``). New circuits are what Tor's proof of work makes dear.

Connections without a circuit id (``--tor none``, loopback) are every direct client at once:
they are not limited here (the connection caps still hold).

Circuit ids are dictionary keys in memory only; never logged or stored.
"""
from __future__ import annotations

import collections
import time
from typing import Callable

from deaddrop.transport.circuits import Circuit

# A page of the source site is one HTML request and a few static ones; a source reading,
# going back and submitting stays far below this.
REQUESTS_PER_SECOND = 10.0
BURST = 30.0
RETRY_AFTER_SECONDS = 10


class CircuitRequestRate:
    def __init__(self, rate: float = REQUESTS_PER_SECOND, burst: float = BURST,
                 clock: Callable[[], float] = time.monotonic, max_circuits: int = 1 << 16) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._max_circuits = max_circuits
        # circuit -> [tokens, when counted]; least recently seen first. Only a full bucket is
        # forgotten (``_forget_full``): forgetting it is then the same as never having seen it.
        self._buckets: collections.OrderedDict[Circuit, list[float]] = collections.OrderedDict()

    def allow(self, circuit: Circuit, form_post: bool = False) -> bool:
        """Take one request's token; False if ``circuit`` has none left.

        A form post (a message, a login) may run the bucket into debt, down to ``-burst``:
        refusing it would lose what a source typed, and posts have budgets of their own
        (login throttles, the work queues); the pages around it pay the debt back."""
        if not circuit.is_tor:
            return True
        now = self._clock()
        bucket = self._buckets.get(circuit)
        if bucket is None:
            bucket = self._buckets[circuit] = [self.burst, now]
            self._forget_full(now)
        else:
            self._buckets.move_to_end(circuit)
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
            bucket[1] = now
        floor = -self.burst if form_post else 0.0
        if bucket[0] - 1.0 < floor:
            return False
        bucket[0] -= 1.0
        return True

    def _forget_full(self, now: float) -> None:
        """Beyond the cap, forget the least recently seen circuits whose buckets have filled up
        again. Forgetting a circuit whatever its bucket held told a flooder who kept the table
        full of circuits with empty buckets when a new circuit came: its oldest one's requests
        were suddenly allowed again (adversary review, "Shared stores" in docs/threat-model.md).
        Circuits whose buckets are not yet full stay, however many: only those seen within the
        last ``2 * burst / rate`` seconds (6 s), so many new circuits so fast is what Tor's proof
        of work prices, and the table still cannot grow past that."""
        while len(self._buckets) > self._max_circuits:
            oldest, (tokens, counted) = next(iter(self._buckets.items()))
            if tokens + (now - counted) * self.rate < self.burst:
                return
            del self._buckets[oldest]

    def tracked(self) -> int:
        return len(self._buckets)
