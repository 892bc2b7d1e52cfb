"""deaddrop.transport.circuits against real listeners on 127.0.0.1: the Tor-only listener
(``haproxy:`` endpoint + ``from_tor``) turns Tor's PROXY header into a Circuit; anywhere else
the same bytes are just a bad request and the peer is the shared LOCAL bucket."""
from __future__ import annotations

import socket

from twisted.internet import reactor
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.endpoints import serverFromString
from twisted.internet.threads import deferToThread
from twisted.protocols.haproxy import proxyEndpoint
from twisted.trial import unittest
from twisted.web.resource import Resource
from twisted.web.server import Site

from deaddrop.transport.circuits import LOCAL, Circuit, circuit_of, circuit_of_address, from_tor


class Recorder(Resource):
    isLeaf = True

    def __init__(self):
        super().__init__()
        self.seen = []

    def render_GET(self, request):
        self.seen.append(circuit_of(request))
        return b"ok"


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


GET = b"GET / HTTP/1.1\r\nHost: x.onion\r\nConnection: close\r\n\r\n"
# What Tor sends (HiddenServiceExportCircuitID haproxy): HI:LO in hex, then id & 0xffff.
TOR_HEADER = b"PROXY TCP6 fc00:dead:beef:4dad::1:2 ::1 2 80\r\n"


class CircuitTests(unittest.TestCase):
    def listen(self, description: str, factory, proxied: bool) -> int:
        endpoint = serverFromString(reactor, description)
        if proxied:
            endpoint = proxyEndpoint(endpoint)
        port = self.successResultOf(endpoint.listen(factory))
        self.addCleanup(port.stopListening)
        return port.getHost().port

    async def test_tor_listener_reads_the_circuit_from_the_header(self):
        page = Recorder()
        port = self.listen("tcp:0:interface=127.0.0.1", from_tor(Site(page)), proxied=True)
        self.assertIn(b"200 OK", await deferToThread(exchange, port, TOR_HEADER + GET))
        self.assertEqual(page.seen, [Circuit((1 << 16) | 2)])
        other = b"PROXY TCP6 fc00:dead:beef:4dad::0:9b ::1 155 80\r\n"
        await deferToThread(exchange, port, other + GET)
        self.assertEqual(page.seen[-1], Circuit(0x9B))
        # No header on the Tor-only listener: the connection is dropped, nothing served.
        self.assertEqual(await deferToThread(exchange, port, GET), b"")
        self.assertEqual(len(page.seen), 2)

    async def test_header_not_trusted_anywhere_else(self):
        page = Recorder()
        plain = self.listen("tcp:0:interface=127.0.0.1", Site(page), proxied=False)
        self.assertNotIn(b"200 OK", await deferToThread(exchange, plain, TOR_HEADER + GET))
        reply = await deferToThread(exchange, plain, GET)
        self.assertIn(b"200 OK", reply)
        self.assertEqual(page.seen, [LOCAL])
        # A PROXY-wrapped listener that is not marked from_tor (a misconfiguration) still
        # yields LOCAL: only the marker makes the header's address count.
        unmarked = self.listen("tcp:0:interface=127.0.0.1", Site(page), proxied=True)
        await deferToThread(exchange, unmarked, TOR_HEADER + GET)
        self.assertEqual(page.seen[-1], LOCAL)

    def test_address_parsing(self):
        self.assertEqual(circuit_of_address(IPv6Address("TCP", "fc00:dead:beef:4dad::0:9b", 155)), Circuit(155))
        self.assertEqual(circuit_of_address(IPv6Address("TCP", "fc00:dead:beef:4dad::1:2", 2)), Circuit(65538))
        self.assertEqual(circuit_of_address(IPv6Address("TCP", "fc00:dead:beef:4dad::9b", 155)), Circuit(155))
        self.assertEqual(circuit_of_address(IPv6Address("TCP", "FC00:DEAD:BEEF:4DAD::0:9B", 155)), Circuit(155))
        self.assertEqual(circuit_of_address(IPv6Address("TCP", "::1", 80)), LOCAL)
        self.assertEqual(circuit_of_address(IPv4Address("TCP", "127.0.0.1", 80)), LOCAL)
        self.assertEqual(repr(Circuit(155)), "Circuit(tor)")  # no id in any repr


class ServerWiringTests(unittest.TestCase):
    """deaddrop.service hands the web layer its closer, and gives Tor its own PROXY listener."""

    async def built(self, **overrides):
        from twisted.internet.threads import deferToThread

        from deaddrop.service import build_service
        from tests._support import RunningServer

        server = RunningServer(self, **overrides)
        self.addCleanup(server.cleanup)
        top = await deferToThread(build_service, server.config, reactor)

        def close():
            for closer in reversed(top.closers):
                closer()

        self.addCleanup(close)
        return top, server.data_dir

    async def test_launch_mode(self):
        import os

        from deaddrop.tor import TorCircuitCloser

        top, data_dir = await self.built(tor="launch", tor_binary="/bin/false")
        self.assertIsInstance(top.circuit_closer, TorCircuitCloser)
        self.assertIs(top.source.defence.circuit_closer, top.circuit_closer)
        # Tor connects to a unix socket in DATA/tor/, wrapped for the PROXY header.
        sock = os.path.join(os.path.abspath(data_dir), "tor", "source.sock")
        self.assertEqual(top.source_tor_listener.description, f"haproxy:unix:{sock}:mode=600:backlog=4096")
        self.assertEqual(top.tor._source_proxy_target, f"unix:{sock}")
        self.assertIs(top.tor._defences.pow, True)
        # Before Tor runs there is nothing to close.
        self.assertIs(await top.circuit_closer.close(Circuit(5)), False)

    async def test_the_tor_only_socket_queues_a_burst_of_connections_the_reactor_has_not_accepted(self):
        """Tor's connect to a unix socket fails at once when its accept queue is full (no wait
        as with TCP): a burst while the reactor is busy must not cost sources their streams."""
        import os
        import socket

        top, data_dir = await self.built(tor="launch", tor_binary="/bin/false")
        listener = top.source_tor_listener
        listener.startService()
        self.addCleanup(listener.stopService)
        await listener.when_listening()
        sock = os.path.join(os.path.abspath(data_dir), "tor", "source.sock")
        clients = []
        try:
            # The reactor accepts nothing while this loop runs (it runs on the reactor thread).
            for _ in range(300):
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.setblocking(False)
                clients.append(client)
                client.connect(sock)  # BlockingIOError (EAGAIN) once the queue is full
        finally:
            for client in clients:
                client.close()
        self.assertEqual(len(clients), 300)

    async def test_pow_off_and_no_tor(self):
        from deaddrop.transport.circuits import NoCloser

        top, _ = await self.built(tor="launch", tor_binary="/bin/false", tor_pow=False)
        self.assertIs(top.tor._defences.pow, False)
        top, _ = await self.built(tor="none")
        self.assertIsInstance(top.source.defence.circuit_closer, NoCloser)
        # Argon2id and gpg work runs below the reactor thread's CPU priority.
        self.assertEqual(top.newsroom.crypto_pool.niceness, 10)
        self.assertIsNone(top.source_tor_listener)  # a typed part: None when off
