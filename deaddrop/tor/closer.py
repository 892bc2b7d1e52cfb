"""``CircuitCloser`` (see :mod:`deaddrop.transport.circuits`) backed by our Tor's control port.

The web layer calls ``close(circuit)`` when a circuit keeps flooding after its budgets said no;
Tor then tears the rendezvous circuit down (``CLOSECIRCUIT``), with every stream on it. The
client must build a new circuit, which costs it a fresh introduction and, under attack, a fresh
proof of work. Only a launched Tor exports circuit ids, so only it has anything to close.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed


class TorCircuitCloser:
    """Closes circuits through a :class:`deaddrop.tor.TorOnionService` (or a zero-argument
    callable returning it, or None while there is none yet). Never logs an id."""

    def __init__(self, tor: Any) -> None:
        self._tor = tor
        self.closed = 0  # how many Tor confirmed: a count, for monitoring and tests

    def close(self, circuit: Any) -> "Deferred[bool]":
        # A transport.circuits.Circuit (duck-typed: tor/ does not import the web layer).
        circuit_id = getattr(circuit, "id", None)
        if not isinstance(circuit_id, int):
            return succeed(False)

        def count(done: bool) -> bool:
            if done:
                self.closed += 1
            return done

        tor = self._tor() if callable(self._tor) and not hasattr(self._tor, "close_circuit") else self._tor
        if tor is None:
            return succeed(False)
        return tor.close_circuit(circuit_id).addCallback(count)
