"""A test client that arrives over a given Tor circuit, as Tor's onion service would deliver it.

Tor (``HiddenServiceExportCircuitID haproxy``) starts each connection with a PROXY v1 line whose
source address carries the circuit id. This client writes that line itself, so a server whose
source listener is ``haproxy:tcp:...`` sees a real circuit id, without a Tor network.
"""
from __future__ import annotations

from typing import Any

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Factory
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.web.client import Agent
from zope.interface import implementer
from twisted.web.iweb import IAgentEndpointFactory

from tests._support import Browser


def proxy_line(circuit_id: int, virtual_port: int = 80) -> bytes:
    host = f"fc00:dead:beef:4dad::{circuit_id >> 16:x}:{circuit_id & 0xFFFF:x}"
    return f"PROXY TCP6 {host} ::1 {circuit_id & 0xFFFF} {virtual_port}\r\n".encode("ascii")


class _HeaderFirst(ProtocolWrapper):
    def makeConnection(self, transport: Any) -> None:
        transport.write(self.factory.header)
        super().makeConnection(transport)


class _HeaderFactory(WrappingFactory):
    protocol = _HeaderFirst

    def __init__(self, wrapped: Factory, header: bytes) -> None:
        super().__init__(wrapped)
        self.header = header


class _CircuitEndpoint:
    def __init__(self, host: str, port: int, header: bytes) -> None:
        self._inner = TCP4ClientEndpoint(reactor, host, port)
        self._header = header

    def connect(self, factory: Factory):
        return self._inner.connect(_HeaderFactory(factory, self._header)).addCallback(lambda p: p.wrappedProtocol)


@implementer(IAgentEndpointFactory)
class _Endpoints:
    def __init__(self, header: bytes) -> None:
        self._header = header

    def endpointForURI(self, uri: Any) -> _CircuitEndpoint:
        return _CircuitEndpoint(uri.host.decode(), uri.port, self._header)


class CircuitBrowser(Browser):
    """A ``Browser`` whose every connection comes over Tor circuit ``circuit_id``."""

    def __init__(self, base_url: str, circuit_id: int) -> None:
        super().__init__(base_url)
        agent = Agent.usingEndpointFactory(reactor, _Endpoints(proxy_line(circuit_id)), pool=self.pool)
        self.client = HTTPClient(agent, cookiejar=self.cookies)


def listen_as_tor(testcase: Any, server: Any):
    """A second source listener like the one only the launched Tor reaches (PROXY header
    required and trusted), for ``CircuitBrowser``. -> Deferred firing with its base URL."""
    from twisted.internet.endpoints import serverFromString
    from twisted.protocols.haproxy import proxyEndpoint

    from deaddrop.transport.circuits import from_tor

    endpoint = proxyEndpoint(serverFromString(reactor, "tcp:0:interface=127.0.0.1"))
    d = endpoint.listen(from_tor(server.service.source.site(reactor)))

    def listening(port: Any) -> str:
        testcase.addCleanup(port.stopListening)
        return f"http://127.0.0.1:{port.getHost().port}"

    return d.addCallback(listening)
