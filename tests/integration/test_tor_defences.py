"""Tor's abuse defences on the source onion, against real tor on the private network (issue 9 §1).

One launched onion service (``make_tor_service`` as in production, with a ``haproxy:``
listener marked ``from_tor`` as deaddrop.service builds it) serves a page that records the circuit each
request came over. Through the fixture's client tor, with raw SOCKS5 (a username per "visitor",
which Tor isolates onto its own circuit) it checks: the options and metrics show PoW and the
intro-point defence; requests carry circuits, distinct per visitor; MaxStreams closes a
flooding circuit; CLOSECIRCUIT through the closer works; an existing key (the ADD_ONION era
layout) keeps its address; ``pow=False`` turns PoW off.
"""
from __future__ import annotations

import os
import socket
import struct
import time
import urllib.request

from twisted.internet import reactor
from twisted.internet.defer import ensureDeferred
from twisted.internet.endpoints import TCP4ClientEndpoint, serverFromString
from twisted.internet.threads import deferToThread
from twisted.protocols.haproxy import proxyEndpoint
from twisted.trial import unittest
from twisted.web.resource import Resource
from twisted.web.server import Site

import txtorcon

from deaddrop.durable import write_atomically
from deaddrop.tor import TorCircuitCloser, keys, target_of
from deaddrop.tor.defences import MAX_STREAMS
from deaddrop.transport.circuits import LOCAL, circuit_of, from_tor
from tests.integration import tornet
from tests.integration.test_tor_network import _NAMES, TIMINGS, _Base, sleep, with_timeout


class CircuitPage(Resource):
    """Answers with an opaque label per circuit (the test never prints a real id)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.circuits: list = []

    def render_GET(self, request):
        circuit = circuit_of(request)
        self.circuits.append(circuit)
        request.setHeader(b"content-type", b"text/plain")
        return b"tor" if circuit.is_tor else b"local"


# -- a minimal blocking SOCKS5 client (run in a thread): username isolation, raw streams ------


def socks_connect(socks_port: int, host: str, port: int, username: str, timeout: float = 30.0) -> socket.socket:
    """A stream to ``host:port`` through Tor; raises OSError with the SOCKS reply code."""
    s = socket.create_connection(("127.0.0.1", socks_port), timeout=timeout)
    try:
        s.sendall(b"\x05\x01\x02")  # username/password auth: Tor isolates streams by it
        if _recv(s, 2) != b"\x05\x02":
            raise OSError("SOCKS auth method refused")
        user = username.encode()
        s.sendall(b"\x01" + bytes([len(user)]) + user + b"\x01x")
        if _recv(s, 2)[1] != 0:
            raise OSError("SOCKS auth failed")
        name = host.encode()
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", port))
        reply = _recv(s, 4)
        if reply[1] != 0:
            raise OSError(f"SOCKS error {reply[1]:#x}")
        _recv(s, {1: 4, 4: 16}.get(reply[3], 0) + 2 if reply[3] != 3 else _recv(s, 1)[0] + 2)
        return s
    except BaseException:
        s.close()
        raise


def _recv(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def http_get(socks_port: int, address: str, username: str, timeout: float = 30.0) -> bytes:
    s = socks_connect(socks_port, address, 80, username, timeout)
    try:
        s.sendall(f"GET / HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n\r\n", 1)[-1]
    finally:
        s.close()


def is_closed(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


class TorDefenceTests(_Base):
    timeout = tornet.BRING_UP_SECONDS + 240

    def setUp(self):
        super().setUp()
        self.metrics_port = tornet._free_ports(1)[0]

    def serve(self, data_dir: str) -> CircuitPage:
        """The production shape: a unix socket in DATA/tor/, PROXY-header endpoint, from_tor."""
        page = CircuitPage()
        tor_dir = keys.tor_dir(data_dir)
        keys.ensure_private_dir(tor_dir)
        path = os.path.join(tor_dir, "source.sock")
        self.assertLess(len(path), 100)
        d = proxyEndpoint(serverFromString(reactor, f"unix:{path}:mode=600")).listen(from_tor(Site(page)))
        port = self.successResultOf(d)
        self.addCleanup(port.stopListening)
        self.proxy_target = target_of(port)
        return page

    def launch(self, data_dir: str, **kw):
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        self.net.seed_data_dir(os.path.join(data_dir, "tor"))
        from deaddrop.events import SecurityEvents
        from deaddrop.tor import make_tor_service

        events = SecurityEvents(os.path.join(data_dir, "logs", "security.jsonl"))
        self.addCleanup(events.close)
        self.fatal: list[str] = []
        plain = self.listen(b"plain listener")
        svc = make_tor_service(
            reactor,
            data_dir=data_dir,
            mode="launch",
            tor_binary=self.net.wrapper,
            tor_options=self.net.tor_options
            + [("MetricsPort", f"127.0.0.1:{self.metrics_port}"), ("MetricsPortPolicy", "accept 127.0.0.1")],
            source_target=f"127.0.0.1:{plain}",
            source_proxy_target=self.proxy_target,
            journalist_target=None,
            events=events,
            bootstrap_timeout=60.0,
            on_fatal=self.fatal.append,
            **kw,
        )
        svc.startService()
        self.addCleanup(lambda: ensureDeferred(self.stop(svc)))
        return svc

    async def get(self, address: str, username: str, timeout: float = 45.0) -> bytes:
        """GET / as visitor ``username``, retrying while the descriptor spreads."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                return await deferToThread(http_get, self.net.client_socks_port, address, username)
            except OSError as e:
                last = e
                await sleep(0.5)
        raise AssertionError(f"cannot fetch {address} as {username}: {last}")

    async def old_key_address(self, data_dir: str) -> str:
        """Lay out an instance of the ADD_ONION era: its key file, and the address Tor's
        ADD_ONION gave that key (asked of the fixture's client tor)."""
        key, _ = keys.load_or_create_onion_key(keys.service_dir(data_dir, keys.SOURCE))
        tor = await txtorcon.connect(reactor, TCP4ClientEndpoint(reactor, "127.0.0.1", self.net.client_control_port))
        try:
            reply = await tor.protocol.queue_command(f"ADD_ONION {key.control_blob()} Flags=DiscardPK Port=80,127.0.0.1:9")
            service_id = reply.split("ServiceID=", 1)[1].split()[0]
            await tor.protocol.queue_command(f"DEL_ONION {service_id}")
        finally:
            tor.protocol.transport.loseConnection()
        write_atomically(keys.source_onion_file(data_dir), f"{service_id}.onion\n".encode(), 0o644)
        return f"{service_id}.onion"

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def test_defences_circuits_max_streams_closecircuit_and_old_key(self):
        return ensureDeferred(self._defences())

    async def _defences(self):
        data_dir = self.short_dir()
        os.makedirs(data_dir, mode=0o700)
        old_address = await self.old_key_address(data_dir)
        page = self.serve(data_dir)
        t0 = time.monotonic()
        svc = self.launch(data_dir)
        address = await with_timeout(svc.when_onion_ready(), 90, "publication")
        TIMINGS.setdefault("defended onion ready", time.monotonic() - t0)
        self.assertEqual(self.fatal, [])

        # The ADD_ONION-era key, used as a HiddenServiceDir: the same address, Tor agrees.
        self.assertEqual(address, old_address)
        with open(os.path.join(keys.service_dir(data_dir, keys.SOURCE), "hostname")) as f:
            self.assertEqual(f.read().strip(), old_address)

        # What Tor runs with: every defence on, and nothing was SETCONF'd (PoW state intact).
        control = svc._attempt.control
        options = await control.queue_command("GETCONF HiddenServiceOptions")
        for line in (
            "HiddenServiceExportCircuitID=haproxy",
            "HiddenServicePoWDefensesEnabled=1",
            "HiddenServicePoWQueueRate=5",
            "HiddenServiceEnableIntroDoSDefense=1",
            f"HiddenServiceMaxStreams={MAX_STREAMS}",
            "HiddenServiceMaxStreamsCloseCircuit=1",
        ):
            self.assertIn(line, options)
        host = address[: -len(".onion")]
        self.assertIn(f'tor_hs_pow_suggested_effort{{onion="{host}"}} 0', self.metrics())

        # Each visitor's requests carry its circuit; two visitors, two circuits; none LOCAL.
        t1 = time.monotonic()
        self.assertEqual(await self.get(address, "alice"), b"tor")
        TIMINGS.setdefault("first fetch (defended)", time.monotonic() - t1)
        self.assertEqual(await self.get(address, "alice"), b"tor")
        self.assertEqual(await self.get(address, "bob"), b"tor")
        alice, alice_again, bob = page.circuits[-3:]
        self.assertNotIn(LOCAL, page.circuits)
        self.assertEqual(alice, alice_again)
        self.assertNotEqual(alice, bob)

        # CLOSECIRCUIT through the closer: alice's next request comes over a new circuit.
        closer = TorCircuitCloser(svc)
        self.assertIs(await closer.close(alice), True)
        self.assertIs(await closer.close(alice), False)  # already gone
        self.assertEqual(await self.get(address, "alice"), b"tor")
        self.assertNotEqual(page.circuits[-1], alice)

        # MaxStreams: a circuit opening more simultaneous streams is closed, with all of them.
        streams = []
        try:
            for _ in range(MAX_STREAMS):
                streams.append(await deferToThread(socks_connect, self.net.client_socks_port, address, 80, "flood"))
            with self.assertRaises(OSError):
                extra = await deferToThread(socks_connect, self.net.client_socks_port, address, 80, "flood")
                extra.close()
            # One deadline for all: under a loaded CI machine the close took over 25 s to arrive.
            deadline = time.monotonic() + 90
            closed = await deferToThread(
                lambda: [is_closed(s, max(0.1, deadline - time.monotonic())) for s in streams]
            )
            self.assertEqual(closed, [True] * MAX_STREAMS)
        finally:
            for s in streams:
                s.close()
        self.assertEqual(await self.get(address, "bob"), b"tor")  # others unaffected
        await svc.stopService()

    def test_tor_pow_off(self):
        return ensureDeferred(self._pow_off())

    async def _pow_off(self):
        data_dir = self.short_dir()
        page = self.serve(data_dir)
        svc = self.launch(data_dir, pow=False)
        address = await with_timeout(svc.when_onion_ready(), 90, "publication")
        options = await svc._attempt.control.queue_command("GETCONF HiddenServiceOptions")
        self.assertNotIn("HiddenServicePoWDefensesEnabled=1", options)
        self.assertIn("HiddenServiceEnableIntroDoSDefense=1", options)
        self.assertEqual(await self.get(address, "carol"), b"tor")
        self.assertTrue(page.circuits[-1].is_tor)
        await svc.stopService()


_NAMES.update(
    f"{TorDefenceTests.__module__}.{TorDefenceTests.__name__}.{name}"
    for name in dir(TorDefenceTests)
    if name.startswith("test_")
)
