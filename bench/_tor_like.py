"""Bench only: the DeadDrop server reachable as a launched Tor would reach it, without a Tor.

``twistd -n -y bench/_tor_like.tac`` builds the service exactly as ``twistd deaddrop`` does from
the arguments in ``$DEADDROP_BENCH_ARGV`` (a JSON list, ``--tor none`` among them), then adds
the production Tor-only source listener (``server.add_tor_only_listener``): ``haproxy:unix:
DATA/tor/source.sock:mode=600``, trusted through ``from_tor``. Each bench client writes Tor's
PROXY v1 line itself, naming its own circuit.

The one thing Tor does that is missing without Tor is closing a circuit. ``TorLike`` stands in:
it is the server's ``circuit_closer``; closing a circuit aborts every connection on it and
refuses later ones with ``CIRCUIT_CLOSED`` (what the client's Tor would learn from the DESTROY
cell), so the bench client moves to a fresh circuit. Only a count is logged, never an id.
"""
from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory

# The answer on a connection over a closed circuit: an HTTP-shaped line so that every bench
# client reads it as a status (599), the way a Tor client learns that its circuit is gone.
CIRCUIT_CLOSED = b"HTTP/1.1 599 Tor circuit closed (bench)\r\nContent-Length: 0\r\n\r\n"
CLOSED_LOG = "tor-like: circuits closed so far:"

_log = Logger()


class _Stream(ProtocolWrapper):
    """A connection on the Tor-only listener; its circuit is known once the PROXY line is parsed,
    that is when the first request bytes arrive."""

    circuit: Any = None

    def dataReceived(self, data: bytes) -> None:
        if self.circuit is None:
            self.circuit = self.factory.owner.circuit_of(self.transport.getPeer())
            if not self.factory.owner.admit(self):
                return
        super().dataReceived(data)

    def connectionLost(self, reason: Any) -> None:
        self.factory.owner.gone(self)
        super().connectionLost(reason)


class _StreamFactory(WrappingFactory):
    protocol = _Stream

    def __init__(self, wrapped: Any, owner: "TorLike") -> None:
        super().__init__(wrapped)
        self.owner = owner


class TorLike:
    """The server's circuit closer, and the record of which connection rides which circuit."""

    def __init__(self, circuit_of_address: Any) -> None:
        self.circuit_of = circuit_of_address
        self.closed = 0
        self._dead: set[int] = set()
        self._streams: dict[int, set[_Stream]] = {}

    def wrap(self, factory: Any) -> Any:
        return _StreamFactory(factory, self)

    def admit(self, stream: _Stream) -> bool:
        circuit_id = getattr(stream.circuit, "id", None)
        if circuit_id in self._dead:
            stream.transport.write(CIRCUIT_CLOSED)
            stream.transport.loseConnection()
            return False
        if circuit_id is not None:
            self._streams.setdefault(circuit_id, set()).add(stream)
        return True

    def gone(self, stream: _Stream) -> None:
        circuit_id = getattr(stream.circuit, "id", None)
        streams = self._streams.get(circuit_id)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._streams[circuit_id]

    def close(self, circuit: Any) -> "Deferred[bool]":
        circuit_id = getattr(circuit, "id", None)
        if not isinstance(circuit_id, int) or circuit_id in self._dead:
            return succeed(False)
        self._dead.add(circuit_id)
        self.closed += 1
        for stream in list(self._streams.pop(circuit_id, ())):
            stream.transport.abortConnection()
        _log.info("{prefix} {count}", prefix=CLOSED_LOG, count=self.closed)
        return succeed(True)


def _add_listener(top: Any, reactor: Any, tor_like: TorLike) -> None:
    try:
        from deaddrop.service import source_side as server
    except ImportError:  # an older checkout (--code): deaddrop/server.py
        from deaddrop import server  # type: ignore[no-redef]

    if hasattr(server, "add_tor_only_listener"):
        server.add_tor_only_listener(top, top.config, reactor, wrap=tor_like.wrap)
        return
    # An older checkout (--code): the same listener, wrapped after the fact.
    server._add_tor_only_listener(top, top.config, reactor)
    listener = top.source_tor_listener
    listener._factory = tor_like.wrap(listener._factory)


def build(argv: list[str]) -> Any:
    """The service of ``twistd deaddrop ARGV`` plus the Tor-only listener and ``TorLike``."""
    from twisted.internet import reactor

    from deaddrop.tap import Options, makeService
    try:
        from deaddrop.transport.circuits import circuit_of_address
    except ImportError:  # an older checkout (--code)
        from deaddrop.web._common.circuits import circuit_of_address  # type: ignore[no-redef]

    options = Options()
    options.parseOptions(argv)
    top = makeService(options)
    tor_like = TorLike(circuit_of_address)
    _add_listener(top, reactor, tor_like)
    # The closer is read when a circuit floods, long after start-up: replacing it now is enough.
    top.circuit_closer = tor_like
    top.source.defence.circuit_closer = tor_like
    if os.environ.get(RUN_LOG_ENV):
        log_run_times(top.newsroom.kdf, os.environ[RUN_LOG_ENV])
    return top


# Bench only (bench/login_timing.py): when set, every Argon2id derivation's start (monotonic,
# the same clock as the bench's) and duration are appended to this file. Times only.
RUN_LOG_ENV = "DEADDROP_BENCH_RUN_LOG"


def log_run_times(kdf: Any, path: str) -> None:
    import threading
    import time

    real, lock = kdf.derive, threading.Lock()

    def timed(codename: str) -> Any:
        started = time.monotonic()
        try:
            return real(codename)
        finally:
            took = time.monotonic() - started
            with lock, open(path, "a") as out:
                out.write(f"{started:.6f} {took:.6f}\n")

    kdf.derive = timed


def argv_from_environment() -> list[str]:
    return list(json.loads(os.environ["DEADDROP_BENCH_ARGV"]))
