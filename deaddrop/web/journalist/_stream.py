"""A long JSON list written to a client batch by batch, never held whole.

``stream_json_list`` writes ``{"KEY": [``, then the items batch by batch, then ``]}``. It is
the request's streaming producer: when the transport's buffer fills (a slow client), Twisted
pauses it, and the next batch is fetched only once the client has read enough. So the server
holds one batch and one transport buffer, whatever the length of the list, and each batch is
its own short database transaction: other requests are served in between.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

from twisted.internet.defer import CancelledError, Deferred, inlineCallbacks, succeed
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from deaddrop.web._common.site import log_failure_safely

T = TypeVar("T")


@implementer(IPushProducer)
class _Throttle:
    """Told by the transport when to pause and resume; ``ready()`` waits while paused."""

    def __init__(self) -> None:
        self.paused = False
        self.stopped = False
        self._waiting: Deferred | None = None

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self._release()

    def stopProducing(self) -> None:
        self.stopped = True
        self._release()

    def ready(self) -> Deferred:
        if not self.paused or self.stopped:
            return succeed(None)
        self._waiting = Deferred()
        return self._waiting

    def _release(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.callback(None)


@inlineCallbacks
def stream_json_list(request: Any, key: str, fetch: Callable[[Any, int], "Deferred[Sequence[T]]"],
                     encode: Callable[[T], bytes], position: Callable[[T], Any], first: Any, batch: int):
    """Write ``{"key": [...]}`` with every item ``fetch(after, batch)`` yields, from ``first`` on.

    ``fetch`` returns up to ``batch`` items after the position ``after``; ``position(item)`` is
    where the next batch starts. A failure once the response has begun cannot become an error
    body any more: the connection is cut, so the client sees a broken transfer, never a short
    list that looks whole. -> b"" (the body is already written).
    """
    throttle = _Throttle()
    request.notifyFinish().addErrback(lambda _: throttle.stopProducing())
    request.registerProducer(throttle, True)
    try:
        request.write(b'{"' + key.encode("ascii") + b'": [')
        after, separator = first, b""
        while not throttle.stopped:
            items = yield fetch(after, batch)
            if items:
                request.write(separator + b", ".join(encode(item) for item in items))
                separator = b", "
            if len(items) < batch:
                break
            after = position(items[-1])
            yield throttle.ready()
        if not throttle.stopped:
            request.write(b"]}")
    except CancelledError:
        raise  # the client went away (Klein cancels the route): nothing to report, nothing to cut
    except Exception:
        if not request.startedWriting:
            raise
        log_failure_safely(Failure())
        if request.transport is not None:
            request.transport.abortConnection()
    finally:
        if request.channel is not None:
            request.unregisterProducer()
    return b""
