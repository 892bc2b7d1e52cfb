"""Connection budgets: how many sockets each listener, each Tor circuit and the process may hold.

File descriptors are the one resource a slow, idle attacker can exhaust without sending much.
Each listener has a ``ConnectionLimits``: a cap of its own, a share of a process-wide
``ConnectionBudget`` that keeps a reserve for the other listener (the journalist one), and a
cap per Tor circuit. When a listener is full, a new connection takes the place of the oldest
one that is only waiting for a request (between requests, or still sending headers). If every
connection is busy with a request, a connection from Tor takes the place of one of the circuit
holding the most connections (if it holds at least two): slots are shared fairly across
circuits, and no circuit holds more than its share while others wait. Otherwise the new one is
closed at once. So an idle flood recycles its own sockets, a slow one cannot hold every slot
from a few circuits, and neither locks out a client that sends its request promptly.

Circuit ids are dictionary keys in memory only; they are never logged or stored.
"""
from __future__ import annotations

import collections
import resource
from dataclasses import dataclass, field
from typing import Protocol

from twisted.logger import Logger

from deaddrop.transport.circuits import LOCAL, Circuit

_log = Logger()


class Evictable(Protocol):
    def evict(self) -> None:
        """Make room for another connection (it may count against its circuit if slow)."""

    def drop(self) -> None:
        """Close: its circuit is being closed (counts nothing more)."""


@dataclass
class ConnectionBudget:
    """The connections the whole process may hold, across listeners."""

    total: int
    open: int = 0


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit; returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def budget_for(fd_limit: int) -> ConnectionBudget:
    """Sockets we may hold out of ``fd_limit`` descriptors: the rest stays free for SQLite,
    logs, gpg pipes, temp files and the journalist's downloads."""
    other = max(96, fd_limit // 8)
    return ConnectionBudget(total=max(16, fd_limit - other))


@dataclass
class ConnectionLimits:
    """The budget of one listener."""

    budget: ConnectionBudget
    max_connections: int
    # Left free in the process-wide budget for the other listeners: the source listener keeps
    # this many sockets available to journalists.
    reserve_for_others: int = 0
    # Per Tor circuit (connections without a circuit id share the listener's cap only).
    max_per_circuit: int = 16
    open: int = 0
    _waiting: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # oldest first
    _per_circuit: dict[Circuit, int] = field(default_factory=dict)
    _members: dict = field(default_factory=dict)  # connection -> the circuit it is counted for, or None
    _by_circuit: dict[Circuit, dict] = field(default_factory=dict)  # circuit -> its connections, oldest first

    def _full(self) -> bool:
        return (self.open >= self.max_connections
                or self.budget.open >= self.budget.total - self.reserve_for_others)

    def admit(self, connection: Evictable, from_tor: bool = False) -> bool:
        """Count a new connection in; False if it must be closed at once. ``from_tor``: it came
        over a Tor circuit (its id is known from its first bytes), so it may take the place of a
        busy connection of the circuit holding the most."""
        # Who makes room, in order: connections waiting for a request that have had time to
        # send one (oldest first); one of the circuit holding the most, if it holds at least
        # two (connections from Tor only); a connection just opened, still on its way to its
        # first request (oldest first): under a flood of reconnections, a source's new
        # connection must not be the first to go.
        while self._full() and self._evict_waiting(fresh_too=False):
            pass
        if self._full() and from_tor:
            self._make_room_fairly()
        while self._full() and self._evict_waiting(fresh_too=True):
            pass
        if self._full():
            return False
        self.open += 1
        self.budget.open += 1
        self._members[connection] = None
        self._waiting[connection] = None
        return True

    def _evict_waiting(self, fresh_too: bool) -> bool:
        """Close the oldest connection waiting for a request (skipping those just opened unless
        ``fresh_too``). False if there is none."""
        for connection in self._waiting:
            if fresh_too or not getattr(connection, "is_fresh", lambda: False)():
                break
        else:
            return False
        del self._waiting[connection]
        # Its place is free now: the socket closes on the reactor's next turn.
        self._release(connection)
        connection.evict()
        return True

    def waiting(self, connection: Evictable) -> None:
        """The connection waits for a request: it may make room for a newer one."""
        if connection not in self._members:
            return
        self._waiting[connection] = None
        self._waiting.move_to_end(connection)

    def busy(self, connection: Evictable) -> None:
        """A request is being received or answered: leave it alone."""
        self._waiting.pop(connection, None)

    def on_circuit(self, connection: Evictable, circuit: Circuit) -> bool:
        """Count a connection in for its circuit; False if the circuit already holds its cap."""
        if circuit == LOCAL or connection not in self._members:
            return True
        held = self._per_circuit.get(circuit, 0)
        if held >= self.max_per_circuit:
            return False
        self._per_circuit[circuit] = held + 1
        self._members[connection] = circuit
        self._by_circuit.setdefault(circuit, {})[connection] = None
        return True

    def held_by(self, circuit: Circuit) -> int:
        return self._per_circuit.get(circuit, 0)

    def drop_circuit(self, circuit: Circuit) -> int:
        """Close every connection of ``circuit`` (it is being closed through Tor). -> how many."""
        connections = list(self._by_circuit.get(circuit, ()))
        for connection in connections:
            self._release(connection)
            connection.drop()
        return len(connections)

    def _make_room_fairly(self) -> None:
        """Every connection is busy: close one of the Tor circuit holding the most, if it holds
        at least two (a newcomer's circuit is taken to hold none yet; if it is that same circuit,
        it only swaps one of its own). Its slowest is chosen: one holding its place without
        sending counts against the circuit (see the channel's ``evict``)."""
        if not self._per_circuit:
            return
        circuit = max(self._per_circuit, key=self._per_circuit.__getitem__)
        if self._per_circuit[circuit] < 2:
            return
        connections = list(self._by_circuit.get(circuit, ()))
        slow = [c for c in connections if getattr(c, "is_slow", lambda: False)()]
        victim = (slow or connections)[0]
        self._release(victim)
        victim.evict()

    def closed(self, connection: Evictable) -> None:
        self._release(connection)

    def _release(self, connection: Evictable) -> None:
        if connection not in self._members:
            return  # evicted earlier: already released
        circuit = self._members.pop(connection)
        self._waiting.pop(connection, None)
        self.open -= 1
        self.budget.open -= 1
        if circuit is not None:
            held = self._per_circuit.get(circuit, 0) - 1
            if held > 0:
                self._per_circuit[circuit] = held
            else:
                self._per_circuit.pop(circuit, None)
            members = self._by_circuit.get(circuit)
            if members is not None:
                members.pop(connection, None)
                if not members:
                    del self._by_circuit[circuit]


def unlimited() -> ConnectionLimits:
    """For sites built without a budget (tests of other things)."""
    return ConnectionLimits(ConnectionBudget(total=1 << 30), max_connections=1 << 30, max_per_circuit=1 << 30)
