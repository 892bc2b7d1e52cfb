"""Thread pools for blocking work, and the guard that keeps it off the reactor thread.

Argon2id, GnuPG and SQLite block for milliseconds to seconds. They must never run on the
reactor thread, or every connection stalls. Blocking helpers call ``forbid_reactor_thread()``
first; it raises if called from the reactor thread, so a mistake fails loudly in tests instead
of quietly adding latency in production.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.python import threadable
from twisted.python.threadpool import ThreadPool

T = TypeVar("T")


class BlockingCallOnReactorThread(AssertionError):
    """A KDF, GnuPG or SQLite call was made on the reactor thread."""


def forbid_reactor_thread(what: str) -> None:
    """Raise if called on the reactor thread while the reactor runs (start-up is allowed)."""
    from twisted.internet import reactor

    if threadable.isInIOThread() and reactor.running:
        raise BlockingCallOnReactorThread(f"{what} must run in a thread pool, not on the reactor thread")


_thread_state = threading.local()


def _lower_this_threads_priority(niceness: int) -> None:
    """Once per thread: raise its nice value by ``niceness`` (Linux schedules threads apart)."""
    if getattr(_thread_state, "niced", False):
        return
    _thread_state.niced = True
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except (AttributeError, OSError):
        pass  # not Linux, or not allowed: the work still runs, at normal priority


class WorkerPool:
    """A named thread pool bound to a reactor, started and stopped with it.

    ``niceness`` > 0 runs its threads at a lower CPU priority than the reactor thread: Argon2id
    on every core must not starve the one thread that answers every request (on a 2-core
    server, four busy KDF threads would leave the reactor 40% of a core).
    """

    def __init__(self, reactor: Any, name: str, max_threads: int, min_threads: int = 0, niceness: int = 0) -> None:
        self._reactor = reactor
        self._pool = ThreadPool(minthreads=min_threads, maxthreads=max_threads, name=name)
        self._started = False
        self.niceness = niceness

    def start(self) -> None:
        if not self._started:
            self._pool.start()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._started = False
            self._pool.stop()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Deferred[T]":
        if not self._started:
            self.start()
        if self.niceness:
            return deferToThreadPool(self._reactor, self._pool, self._niced, fn, *args, **kwargs)
        return deferToThreadPool(self._reactor, self._pool, fn, *args, **kwargs)

    def _niced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        _lower_this_threads_priority(self.niceness)
        return fn(*args, **kwargs)

    def call_in_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Fire-and-forget: for long-lived pumps that report back with callFromThread."""
        if not self._started:
            self.start()
        self._pool.callInThread(fn, *args, **kwargs)
