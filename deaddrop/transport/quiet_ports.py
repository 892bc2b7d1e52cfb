"""Listening ports whose log messages never carry a peer address.

Twisted writes the peer's address into twistd's log in two places our own code cannot reach:
``tcp.Server`` puts it into every connection's log prefix (the ``[HTTPChannel,5,10.8.0.2]``
system field of anything logged while that connection is handled), and the accept loop's
out-of-file-descriptors recovery logs "Closed socket from (host, port)" for each connection
it drops. ``hide_peer_addresses(port)`` changes both for one listening port, leaving the
addresses themselves intact for code that needs them (``getPeer()``).
"""
from __future__ import annotations

from typing import Any

from twisted.internet import tcp
from twisted.internet.interfaces import IAddress
from twisted.logger import ILogObserver, Logger, globalLogPublisher
from zope.interface import implementer

HIDDEN = "[address hidden]"


class _QuietServer(tcp.Server):
    """A server-side TCP connection whose log prefix has no peer address."""

    def __init__(self, sock: Any, protocol: Any, client: Any, server: Any, sessionno: int, reactor: Any) -> None:
        super().__init__(sock, protocol, client, server, sessionno, reactor)
        self.hostname = HIDDEN
        self.logstr = f"{self._getLogPrefix(self.protocol)},{sessionno}"


@implementer(ILogObserver)
class _ScrubbingObserver:
    """Passes events on with every address-like value replaced (tuples and ``IAddress``)."""

    def __init__(self, observer: Any) -> None:
        self._observer = observer

    def __call__(self, event: dict[str, Any]) -> None:
        clean = {}
        for key, value in event.items():
            if not key.startswith("log_") and (isinstance(value, tuple) or IAddress.providedBy(value)):
                value = HIDDEN
            clean[key] = value
        self._observer(clean)


def hide_peer_addresses(port: Any) -> Any:
    """Make a listening TCP ``port`` (e.g. from ``serverFromString(...).listen``) log no peer address."""
    if isinstance(port, tcp.Port) and port.transport is tcp.Server:
        port.transport = _QuietServer
    if isinstance(port, tcp.Port):
        # Class attribute in Twisted: an instance attribute overrides it for this port only.
        logger = type(port)._logger
        port._logger = Logger(namespace=logger.namespace, observer=_ScrubbingObserver(globalLogPublisher))
    return port
