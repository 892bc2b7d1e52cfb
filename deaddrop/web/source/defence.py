"""How the source side answers a flood: circuits that keep being refused, or keep holding a
connection without sending, are closed through Tor; the IDS hears of floods, folded, never who.

Built by the composition (``deaddrop.service.source_side``) and handed to ``SourceInterface``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.events import FloodGate, SecurityEvents
from deaddrop.transport.circuits import CircuitCloser
from deaddrop.transport.connections import ConnectionLimits
from deaddrop.admission.throttle import FailureThrottle

# A circuit refused this many times a minute by the login throttle is flooding: close it.
REFUSALS_BEFORE_CLOSING = 10
# A circuit whose connections were cut this often in 10 minutes for holding a slot without
# sending is closed: its owner must solve Tor's proof of work again for a new one.
CUTS_BEFORE_CLOSING = 3
# Every defence here can be set off by one visitor: a busy page, a login abandoned mid-check
# (Reload), an upload ended to make room, a circuit throttled after ten mistyped codenames,
# over its request rate (F5 held down) or closed for either or for slow connections. A line
# the moment it happens would date that visitor, so a line (``source.flood``,
# ``source.login.throttled``) is written only when at least FLOOD_THRESHOLD come within
# FLOOD_WINDOW seconds: for busy, abandoned and upload_ended one a second for ten seconds,
# which no person does; for the throttled, ``requests`` and ``circuit_closed`` reasons each
# circuit counts once a minute, so ten circuits must be at it. Below that they are only
# counted, in the day's report (daily_report).
FLOOD_THRESHOLD = 10
FLOOD_WINDOW = 10.0


@dataclass
class FloodDefence:
    events: SecurityEvents
    login_throttle: FailureThrottle  # failures per Tor circuit (``LOCAL`` for connections without one)
    # Closes a Tor circuit that keeps flooding (CLOSECIRCUIT); NoCloser with --tor none.
    circuit_closer: CircuitCloser
    # The source listeners' connections: a circuit being closed loses them at once.
    connections: ConnectionLimits | None = None
    # Counts every defence for the day's report (the newsroom's; None: not counted).
    activity: SourceActivity | None = None
    _refusals: FailureThrottle = field(default_factory=lambda: FailureThrottle(REFUSALS_BEFORE_CLOSING, 60.0))
    _cuts: FailureThrottle = field(default_factory=lambda: FailureThrottle(CUTS_BEFORE_CLOSING, 600.0))
    # "source.login.throttled" and "source.flood" (per reason): written only in a flood (see
    # FLOOD_THRESHOLD), then at most once every 10 s, carrying nothing about who.
    _throttled_events: FloodGate = field(
        default_factory=lambda: FloodGate(FLOOD_THRESHOLD, FLOOD_WINDOW, every=10.0))
    _flood_events: FloodGate = field(
        default_factory=lambda: FloodGate(FLOOD_THRESHOLD, FLOOD_WINDOW, every=10.0))

    def refused(self, circuit: Any, event: bool = True) -> None:
        """``circuit`` was refused (throttled, or the queue was full while it kept asking)."""
        if event and self._refusals.recent_failures(circuit) == 0:  # a circuit counts once a minute
            folded = self._throttled_events.admit()
            if folded is not None:
                self.events.emit("source.login.throttled", repeated=folded or None)
        self._refusals.failed(circuit)
        if circuit.is_tor and self._refusals.blocked(circuit):
            # It keeps trying while refused: a flood, not a source. Tor closes the circuit (the
            # circuit id stays in memory; nothing about it is logged).
            self._refusals.reset(circuit)
            self._close(circuit)

    def cut(self, circuit: Any) -> None:
        """A connection of ``circuit`` was cut for holding its slot without sending (slow
        headers or body). It counts against the circuit's standing like a wrong codename, and a
        circuit cut ``CUTS_BEFORE_CLOSING`` times in 10 minutes is closed through Tor, with every
        connection it still has here."""
        if not circuit.is_tor:
            return
        self.login_throttle.failed(circuit)
        self._cuts.failed(circuit)
        # No event for a cut, nor for a circuit closed for its cuts, unless many are: a source
        # on a poor circuit may be cut three times, and a line then would date its visit.
        if self._cuts.blocked(circuit):
            self._cuts.reset(circuit)
            self._close(circuit)

    def abandoned(self, reservation: Any) -> None:
        """The visitor hung up while its codename was being checked (or waited to be): it
        counts as a failure for its circuit. The Argon2id run, once started, is spent anyway,
        and a flood that hangs up before each answer must not stay clean, unthrottled, open."""
        reservation.failed()
        self.flood("abandoned")

    def rate_limited(self, circuit: Any) -> None:
        """``circuit`` asked faster than its request rate: closed like one that keeps being throttled."""
        self.flood("requests", counts=self._refusals.recent_failures(circuit) == 0)
        self.refused(circuit, event=False)

    def flood(self, reason: str, counts: bool = True) -> None:
        """Tell the IDS the source side is being flooded: a queue full (``busy``), a circuit over
        its request rate (``requests``), a circuit closed (``circuit_closed``), an upload ended
        to make room (``upload_ended``), a login or creation abandoned mid-check
        (``abandoned``). Written only in a flood of them (``FLOOD_THRESHOLD``; ``counts``
        False: this one is not counted towards it, its circuit already was), then folded: one
        line per reason every 10 s, never who. Every one is counted for the day's report."""
        if self.activity is not None:
            self.activity.defended(reason)
        if not counts:
            return
        folded = self._flood_events.admit(reason)
        if folded is not None:
            self.events.emit("source.flood", reason=reason, repeated=folded or None)

    def _close(self, circuit: Any) -> None:
        self.flood("circuit_closed")
        self.circuit_closer.close(circuit).addErrback(lambda f: None)
        if self.connections is not None:
            self.connections.drop_circuit(circuit)
