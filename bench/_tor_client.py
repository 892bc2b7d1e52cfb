"""Bench clients that arrive over Tor circuits, as the launched Tor delivers them to the server.

Tor (``HiddenServiceExportCircuitID haproxy``) starts each connection to the Tor-only listener
with a PROXY v1 line whose source address carries the circuit id; ``Target.connect`` writes that
line itself. Tor also allows ``HiddenServiceMaxStreams 16`` streams at once per circuit (and
closes a circuit that opens more): ``CircuitSet`` never has more than 16 open on one.
"""
from __future__ import annotations

import contextlib
import http.client
import random
import socket
import threading
import time
from typing import Iterator

MAX_STREAMS = 16  # HiddenServiceMaxStreams, as deaddrop/tor/defences.py sets it
CLOSED_STATUS = 599  # bench/_tor_like.py's answer on a circuit the server had closed

_used: set[int] = set()
_used_lock = threading.Lock()


def fresh_circuit() -> int:
    """A circuit id no bench client has used yet in this process (Tor's are 32-bit)."""
    with _used_lock:
        while True:
            circuit = random.getrandbits(32)
            if circuit and circuit not in _used:
                _used.add(circuit)
                return circuit


def proxy_line(circuit: int, virtual_port: int = 80) -> bytes:
    host = f"fc00:dead:beef:4dad::{circuit >> 16:x}:{circuit & 0xFFFF:x}"
    return f"PROXY TCP6 {host} ::1 {circuit & 0xFFFF} {virtual_port}\r\n".encode("ascii")


class Target:
    """Where the bench's source-side clients connect: the Tor-only unix socket (each connection
    names its circuit), or, in shared mode, the plain TCP listener (no circuit: one budget)."""

    def __init__(self, port: int, socket_path: str | None) -> None:
        self.port, self.socket_path = port, socket_path

    @property
    def per_circuit(self) -> bool:
        return self.socket_path is not None

    def connect(self, circuit: int | None, timeout: float) -> socket.socket:
        if self.socket_path is None:
            return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(self.socket_path)
            s.sendall(proxy_line(circuit if circuit is not None else fresh_circuit()))
        except BlockingIOError:
            # connect() on a unix socket does not wait for room: a full accept backlog fails at
            # once, and Tor (which connects without blocking) fails the stream the same way.
            s.close()
            raise OSError("the Tor-only listener's accept backlog is full (EAGAIN: Tor fails this stream)") from None
        except OSError:
            s.close()
            raise
        return s

    def open_nonblocking(self, circuit: int | None) -> socket.socket | None:
        """A socket being connected without waiting (None if refused at once)."""
        if self.socket_path is None:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            return s
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        # A unix socket connects at once, or fails at once when the backlog is full.
        if s.connect_ex(self.socket_path) != 0:
            s.close()
            return None
        try:
            s.send(proxy_line(circuit if circuit is not None else fresh_circuit()))
        except OSError:
            s.close()
            return None
        return s


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends on ``s`` until it closes (requests say Connection: close)."""
    chunks = []
    while True:
        data = s.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


class IntroductionQueue:
    """The onion service's PoW queue, as far as an attacker's new circuits are concerned.

    Every new circuit to an onion service starts with an introduction, and with PoW on
    (deaddrop/tor/defences.py) the service takes introductions from its queue at
    ``POW_QUEUE_RATE`` a second, with a burst of ``POW_QUEUE_BURST``: measured on a private
    Tor network (bench/pow_flood.py), rendezvous launches stayed at or under that rate
    whatever the flood. So an attacker gets a fresh circuit no faster than that. The
    legitimate source is not held here: under a flood it solves the suggested effort, which
    puts its introduction at the head of the queue (bench/pow_flood.py: 13/13 visits).
    """

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def ready_at(self) -> float:
        """When a circuit asked for now is built (its introduction taken from the queue)."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= 1
            if self._tokens >= 0:
                return now
            return now + (-self._tokens) / self.rate


def _pow_queue() -> IntroductionQueue:
    try:
        from deaddrop.tor.defences import POW_QUEUE_BURST, POW_QUEUE_RATE
    except ImportError:  # an older checkout (--code): Tor's settings as this project sets them
        POW_QUEUE_RATE, POW_QUEUE_BURST = 5, 50
    return IntroductionQueue(POW_QUEUE_RATE, POW_QUEUE_BURST)


# One queue for every attacker in this process: they all reach the same onion service.
INTRODUCTIONS = _pow_queue()


class Stream:
    """One stream slot taken on a circuit: ``circuit`` is the id to name in the PROXY line."""

    def __init__(self, owner: "CircuitSet", slot: int, circuit: int) -> None:
        self.owner, self.slot, self.circuit = owner, slot, circuit

    def closed(self) -> None:
        """The server closed this circuit: build a fresh one, as a Tor client would."""
        self.owner.replace(self.slot, self.circuit)


class CircuitSet:
    """``count`` circuits of one client, each carrying at most ``MAX_STREAMS`` streams at once."""

    def __init__(self, count: int, max_streams: int = MAX_STREAMS,
                 introductions: IntroductionQueue | None = INTRODUCTIONS) -> None:
        self.count, self.max_streams = count, max_streams
        self._introductions = introductions
        self._ids = [fresh_circuit() for _ in range(count)]
        self._ready_at = [self._built_at() for _ in range(count)]
        self._busy = [0] * count
        self._cond = threading.Condition()
        self.replaced = 0

    @contextlib.contextmanager
    def stream(self, slot: int | None = None) -> Iterator[Stream]:
        """Take a stream on circuit ``slot``, or on the least busy one; waits while it is full."""
        with self._cond:
            while True:
                now = time.monotonic()
                # A circuit still being built (its introduction waits in the service's queue)
                # carries nothing yet.
                candidates = range(self.count) if slot is None else [slot % self.count]
                usable = [c for c in candidates if self._ready_at[c] <= now and self._busy[c] < self.max_streams]
                if usable:
                    chosen = min(usable, key=self._busy.__getitem__)
                    break
                building = [self._ready_at[c] - now for c in candidates if self._ready_at[c] > now]
                self._cond.wait(timeout=min(building) if building else None)
            self._busy[chosen] += 1
            taken = Stream(self, chosen, self._ids[chosen])
        try:
            yield taken
        finally:
            with self._cond:
                self._busy[chosen] -= 1
                self._cond.notify_all()

    def current(self, slot: int) -> int:
        with self._cond:
            return self._ids[slot % self.count]

    def wait_ready(self, slot: int, stop: threading.Event | None = None) -> int:
        """The circuit of ``slot`` once it is built (its introduction taken from the queue)."""
        with self._cond:
            slot %= self.count
            while True:
                wait = self._ready_at[slot] - time.monotonic()
                if wait <= 0 or (stop is not None and stop.is_set()):
                    return self._ids[slot]
                self._cond.wait(timeout=min(wait, 1.0))

    def closed_circuit(self, circuit: int) -> None:
        """Circuit ``circuit`` was closed (the client Tor said so): its slot gets a fresh one."""
        with self._cond:
            slots = [slot for slot, current in enumerate(self._ids) if current == circuit]
        for slot in slots:
            self.replace(slot, circuit)

    def replace(self, slot: int, circuit: int) -> None:
        """Circuit ``circuit`` of ``slot`` was closed: a fresh one takes its place (once)."""
        with self._cond:
            slot %= self.count
            if self._ids[slot] == circuit:
                self._ids[slot] = fresh_circuit()
                self._ready_at[slot] = self._built_at()
                self.replaced += 1

    def _built_at(self) -> float:
        return self._introductions.ready_at() if self._introductions is not None else 0.0


class CircuitHTTPConnection(http.client.HTTPConnection):
    """``http.client`` over ``target``, on circuit ``circuit``."""

    def __init__(self, target: Target, circuit: int | None, timeout: float) -> None:
        super().__init__("127.0.0.1", target.port, timeout=timeout)
        self._target, self._circuit = target, circuit

    def connect(self) -> None:
        self.sock = self._target.connect(self._circuit, self.timeout)
