"""Which Tor circuit a request came over: the key every anonymous budget is counted by.

Tor's ``HiddenServiceExportCircuitID haproxy`` prefixes each onion connection with a PROXY v1
header whose source address is ``fc00:dead:beef:4dad::HI:LO`` (the circuit id in hex). Behind
``haproxy:`` endpoint wrapping, Twisted reports that as the peer. Connections without one
(``--tor none``, direct loopback) all share a single bucket, ``LOCAL``.

A circuit id is only ever held in memory, as a dictionary key: never logged, never stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol

from twisted.internet.address import IPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocolFactory
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory

_TOR_PREFIX = "fc00:dead:beef:4dad::"


@dataclass(frozen=True)
class Circuit:
    """An opaque budget key. ``id`` is None for the shared local bucket."""

    id: Optional[int]

    def __repr__(self) -> str:  # keep ids out of any accidental repr in a log line
        return "Circuit(local)" if self.id is None else "Circuit(tor)"

    @property
    def is_tor(self) -> bool:
        return self.id is not None


LOCAL = Circuit(None)


def circuit_of_address(address: Any) -> Circuit:
    if isinstance(address, IPv6Address) and address.host.lower().startswith(_TOR_PREFIX):
        tail = address.host[len(_TOR_PREFIX):]
        high, _, low = tail.rpartition(":")
        try:
            return Circuit((int(high or "0", 16) << 16) | int(low, 16))
        except ValueError:
            return LOCAL
    return LOCAL


class _FromTor(ProtocolWrapper):
    """Marks a connection accepted on the listener only Tor connects to (see ``from_tor``)."""


class _FromTorFactory(WrappingFactory):
    protocol = _FromTor


def from_tor(factory: IProtocolFactory) -> IProtocolFactory:
    """Wrap the factory of the Tor-only listener, whose endpoint is ``haproxy:``-wrapped::

        proxyEndpoint(serverFromString(reactor, "unix:DATA/tor/source.sock")).listen(from_tor(site))

    Only connections through this wrapper have their PROXY-header address trusted.
    """
    return _FromTorFactory(factory)


def _came_from_tor(request: Any) -> bool:
    """True if the request's connection was accepted by the Tor-only listener. Anywhere else
    the peer address is the socket's own, which a client whose address falls under Tor's
    prefix (an IPv6 ULA with ``--tor none``) could choose."""
    return transport_from_tor(getattr(getattr(request, "channel", None), "transport", None))


def transport_from_tor(transport: Any) -> bool:
    """True if a connection with this transport was accepted by the Tor-only listener."""
    for _ in range(8):  # the wrapper chain (limits, TLS...) is never deep
        if transport is None:
            return False
        if isinstance(transport, _FromTor):
            return True
        transport = getattr(transport, "transport", None)
    return False


def circuit_of(request: Any) -> Circuit:
    """The circuit of a twisted.web request (read per request: the PROXY header is parsed
    on the connection's first bytes, after ``connectionMade``)."""
    try:
        if not _came_from_tor(request):
            return LOCAL
        return circuit_of_address(request.getClientAddress())
    except Exception:
        return LOCAL


class CircuitCloser(Protocol):
    """Closes a flooding circuit through Tor's control port (``CLOSECIRCUIT``)."""

    def close(self, circuit: Circuit) -> "Deferred[bool]":
        ...


class NoCloser:
    """Used when there is no Tor we control (``--tor none``): nothing to close."""

    def close(self, circuit: Circuit) -> "Deferred[bool]":
        from twisted.internet.defer import succeed
        return succeed(False)
