"""Listening sockets as services: one per interface, from an endpoint string."""
from __future__ import annotations

from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import serverFromString

from deaddrop.transport.quiet_ports import hide_peer_addresses


class ListenerService(Service):
    """Listens on an endpoint string; ``when_listening()`` gives the port (tests use port 0)."""

    def __init__(
        self, reactor: Any, description: str, factory: Any, on_fatal: Callable[[str], None], endpoint: Any = None
    ) -> None:
        self._reactor = reactor
        self.description = description
        self._endpoint = endpoint  # instead of parsing ``description`` (then only a label)
        self._factory = factory
        self._on_fatal = on_fatal
        self.port: Any = None
        self._waiting: list[Deferred] = []

    def startService(self) -> None:
        super().startService()
        endpoint = self._endpoint or serverFromString(self._reactor, self.description)
        d = endpoint.listen(self._factory)
        d.addCallbacks(self._listening, self._failed)

    def _listening(self, port: Any) -> None:
        self.port = hide_peer_addresses(port)
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(port)

    def _failed(self, failure: Any) -> None:
        self._on_fatal(f"cannot listen on {self.description}: {failure.getErrorMessage()}")

    def when_listening(self) -> Deferred:
        if self.port is not None:
            return succeed(self.port)
        d: Deferred = Deferred()
        self._waiting.append(d)
        return d

    def stopService(self) -> Any:
        super().stopService()
        if self.port is not None:
            port, self.port = self.port, None
            return port.stopListening()
        return None
