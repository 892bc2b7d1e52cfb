"""Helpers for the services that keep a timer (``reactor.callLater``) between runs."""
from __future__ import annotations

from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet.defer import maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

DAY = 86400

_log = Logger(namespace="deaddrop.delayed_calls")


def cancel(call: Any) -> None:
    """Cancel ``call`` (an ``IDelayedCall`` or None) unless it has run or was cancelled already."""
    if call is not None and call.active():
        call.cancel()


class AfterEveryMidnight(Service):
    """Calls ``run`` (which may return a Deferred) a second after every midnight UTC while
    running: by then the clock has certainly moved into the new day. A failure is logged by
    its type only (a message could name a path or a source) and the next midnight comes all the
    same."""

    def __init__(self, reactor: Any, run: Callable[[], Any], what: str) -> None:
        self._reactor = reactor
        self._run = run
        self._what = what
        self._call: Any = None

    def startService(self) -> None:
        super().startService()
        self._schedule()

    def stopService(self) -> Any:
        super().stopService()
        cancel(self._call)
        self._call = None

    def _schedule(self) -> None:
        now = self._reactor.seconds()
        self._call = self._reactor.callLater((int(now) // DAY + 1) * DAY - now + 1, self._fire)

    def _fire(self) -> None:
        self._call = None
        maybeDeferred(self._run).addErrback(self._failed)
        self._schedule()

    def _failed(self, failure: Failure) -> None:
        _log.error("{what} failed: {error}", what=self._what, error=type(failure.value).__name__)
