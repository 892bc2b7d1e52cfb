"""Bench clients over the real onion path: a private Tor network, the server's own Tor
(``twistd deaddrop --tor launch``), and client Tors whose SOCKS ports the source-side clients go
through: the legitimate source's client Tor (the network's own client), and the attackers' own
client Tors (``OnionNetwork(attacker_tors=N)``), as real sources and attackers do not share a
Tor. A circuit's username decides which attacker Tor carries it.

Each bench "circuit" is a SOCKS username: a client Tor keeps the streams of one username on
one circuit of their own (``IsolateSOCKSAuth``, on by default), so the server sees one Tor
circuit id per username, through its Tor-only socket. A ``CircuitWatcher`` on each client Tor's
control port learns which usernames' rendezvous circuits were closed (the server's
CLOSECIRCUIT, or anything else), so an attacker moves to a fresh circuit only when its old one
is really gone, and no faster than the onion's PoW queue admits introductions.
"""
from __future__ import annotations

import os
import re
import socket
import struct
import sys
import threading
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(1, os.path.dirname(HERE))

from tests.integration import tornet  # noqa: E402  (the private Tor network the tests use)


def username(circuit: int) -> str:
    return f"c{circuit:x}"


class OnionTarget:
    """Where the bench's source-side clients connect in onion mode: ``address``.onion through a
    client Tor's SOCKS port (of ``socks_ports``, the same one for a circuit every time), one
    circuit per bench circuit id."""

    per_circuit = True
    port = 0  # (SourceBrowser wants one; every connection goes through ``connect``)

    def __init__(self, socks_ports: list[int], address: str, virtual_port: int = 80) -> None:
        self.socks_ports, self.address, self.virtual_port = list(socks_ports), address, virtual_port

    def socks_port(self, circuit: int) -> int:
        return self.socks_ports[circuit % len(self.socks_ports)]

    def one_circuit_per_tor(self) -> list[int]:
        """A fresh circuit on each of the client Tors (e.g. to have each fetch the descriptor)."""
        from _tor_client import fresh_circuit

        chosen: dict[int, int] = {}
        while len(chosen) < len(self.socks_ports):
            circuit = fresh_circuit()
            chosen.setdefault(circuit % len(self.socks_ports), circuit)
        return list(chosen.values())

    def connect(self, circuit: int | None, timeout: float) -> socket.socket:
        from _tor_client import fresh_circuit

        circuit = circuit if circuit is not None else fresh_circuit()
        name = username(circuit).encode()
        s = socket.create_connection(("127.0.0.1", self.socks_port(circuit)), timeout=timeout)
        try:
            s.sendall(b"\x05\x01\x02")  # SOCKS5, one method: username/password
            if _read(s, 2) != b"\x05\x02":
                raise OSError("SOCKS: the client Tor refused username authentication")
            s.sendall(b"\x01" + bytes([len(name)]) + name + b"\x01x")
            if _read(s, 2)[1] != 0:
                raise OSError("SOCKS: authentication failed")
            host = self.address.encode()
            s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", self.virtual_port))
            reply = _read(s, 4)
            if reply[1] != 0:
                raise OSError(f"SOCKS: the onion connection failed (reply {reply[1]:#x})")
            kind = reply[3]
            _read(s, 4 + 2 if kind == 1 else 16 + 2 if kind == 4 else _read(s, 1)[0] + 2)
        except BaseException:
            s.close()
            raise
        return s


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("SOCKS: the client Tor closed the connection")
        out += chunk
    return out


class CircuitWatcher(threading.Thread):
    """Follows the client Tor's CIRC events: calls ``on_closed(circuit)`` when the rendezvous
    circuit of a bench circuit (SOCKS username) is closed, and counts them."""

    _EVENT = re.compile(r'^650 CIRC \d+ (CLOSED|FAILED) .*PURPOSE=HS_CLIENT_REND.*SOCKS_USERNAME="c([0-9a-f]+)"')
    # Any circuit of this Tor that becomes a rendezvous circuit (launched as one, or a spare
    # circuit turned into one): one per introduction the onion service is sent.
    _REND = re.compile(r'^650 CIRC(?:_MINOR)? (\d+) .*PURPOSE=HS_CLIENT_REND')
    _REASON = re.compile(r' (REMOTE_REASON|REASON)=(\w+)')

    def __init__(self, control_port: int, cookie_path: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", control_port), timeout=10)
        with open(cookie_path, "rb") as f:
            cookie = f.read().hex()
        self._file = self.sock.makefile("rwb")
        self._command(f"AUTHENTICATE {cookie}")
        self._command("SETEVENTS CIRC CIRC_MINOR")
        self.sock.settimeout(None)
        self.listeners: list[Callable[[int], Any]] = []
        self.closed = 0
        self.reasons: dict[int, str] = {}  # circuit -> why it closed (REASON, and REMOTE_REASON if any)
        self._rendezvous: set[str] = set()  # Tor's ids of its rendezvous circuits
        self._lock = threading.Lock()

    def _command(self, line: str) -> None:
        self._file.write(line.encode() + b"\r\n")
        self._file.flush()
        answer = self._file.readline().decode(errors="replace")
        if not answer.startswith("250"):
            raise OSError(f"client Tor control port: {line.split()[0]}: {answer.strip()}")

    def run(self) -> None:
        try:
            for raw in self._file:
                line = raw.decode(errors="replace")
                rend = self._REND.match(line)
                if rend:
                    with self._lock:
                        self._rendezvous.add(rend.group(1))
                match = self._EVENT.match(line)
                if match:
                    circuit = int(match.group(2), 16)
                    why = "+".join(f"{k.lower()}={v}" for k, v in self._REASON.findall(line)) or match.group(1)
                    with self._lock:
                        self.closed += 1
                        self.reasons[circuit] = why
                        listeners = list(self.listeners)
                    for listener in listeners:
                        listener(circuit)
        except (OSError, ValueError):
            pass

    @property
    def rendezvous(self) -> int:
        """Rendezvous circuits this Tor has had so far: the introductions it sent."""
        with self._lock:
            return len(self._rendezvous)

    def stop(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class OnionNetwork:
    """The private Tor network (tests/integration/tornet.py): its client Tor is the legitimate
    source's; ``attacker_tors`` more client Tors carry the attackers' circuits."""

    def __init__(self, attacker_tors: int = 2) -> None:
        reason = tornet.TorNetwork.available()
        if reason:
            raise SystemExit(f"onion mode needs Tor: {reason}")
        self.net = tornet.TorNetwork().start()
        try:
            self.attackers = [self.net.add_client(f"attacker{i}") for i in range(attacker_tors)]
            self.source_watcher = CircuitWatcher(self.net.client_control_port, self.net.client_cookie)
            self.attacker_watchers = [CircuitWatcher(n.control_port, n.cookie) for n in self.attackers]
        except BaseException:
            self.net.stop()
            raise
        for watcher in [self.source_watcher, *self.attacker_watchers]:
            watcher.start()

    def server_args(self) -> list[str]:
        args = ["--tor", "launch", "--tor-binary", self.net.wrapper]
        for key, value in self.net.tor_options:
            args += ["--tor-option", f"{key}={value}"]
        return args

    def target(self, address: str) -> OnionTarget:
        """The legitimate source's way in: the network's own client Tor, which no attacker uses."""
        return OnionTarget([self.net.client_socks_port], address)

    def attacker_target(self, address: str) -> OnionTarget:
        return OnionTarget([n.socks_port for n in self.attackers], address)

    def watch_attackers(self, listener: Callable[[int], Any]) -> Callable[[], None]:
        """``listener(circuit)`` for each attacker circuit closed; returns what undoes it."""
        for watcher in self.attacker_watchers:
            with watcher._lock:
                watcher.listeners.append(listener)

        def undo() -> None:
            for watcher in self.attacker_watchers:
                with watcher._lock:
                    if listener in watcher.listeners:
                        watcher.listeners.remove(listener)
        return undo

    @property
    def attacker_closed(self) -> int:
        return sum(w.closed for w in self.attacker_watchers)

    @property
    def attacker_rendezvous(self) -> int:
        """Introductions the attackers' Tors sent so far (one rendezvous circuit each)."""
        return sum(w.rendezvous for w in self.attacker_watchers)

    def stop(self) -> None:
        for watcher in [self.source_watcher, *self.attacker_watchers]:
            watcher.stop()
        self.net.stop()


def wait_published(security_log: str, proc: Any, timeout: float) -> str:
    """The source onion address, once the server's Tor uploaded its descriptor."""
    import json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited before its onion was published")
        try:
            with open(security_log, encoding="utf-8") as f:
                for line in f:
                    event = json.loads(line)
                    if event.get("event") == "tor.onion.published" and event.get("detail") == "source":
                        return event["onion"]
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise SystemExit("the source onion was not published in time")
