# -*- test-case-name: tests.test_admission,tests.test_admission_fairness -*-
"""Bounded, fair admission to expensive work (Argon2id, key generation, reply decryption, uploads).

A pool has a fixed number of *slots* (one per worker thread the work may occupy). Work asks a
``AdmissionQueue`` for a slot under a *key* (a Tor circuit, a source identity) and either gets
one at once, waits in a bounded queue, or is refused at once with ``Busy``:

* each key has its own FIFO, and keys are served round-robin, so one circuit with a hundred
  requests waits behind its own requests, not in front of everyone else's;
* each key may hold at most ``per_key`` requests (waiting plus running), and a queue at most
  ``max_waiting`` waiting requests, and no more than would wait ``max_wait`` seconds at the
  pace work has been finishing lately (a loaded machine runs Argon2id slower: the queue shrinks
  rather than keeping visitors waiting minutes): nothing is ever queued without limit;
* when a queue is full, a newcomer takes the place of the newest request of the key with the
  most waiting, if that key holds at least two more than the newcomer's (the evicted request
  gets ``Busy``): a flood from a few keys cannot turn away a key that has nothing queued;
* a queue may be given each key's *standing* (e.g. the wrong codenames its circuit sent in the
  last minute; 0 is clean). Keys in better standing are served first, and a newcomer finding the
  queue full takes the place of the newest request of the key in worst standing below its own:
  many circuits that keep failing cannot turn away, nor delay past one run, a circuit that has
  not failed. Standing is read when it matters (a circuit's first guess is clean, its second,
  already queued, is not once the first has failed), and fades while a request waits (a point
  every ``STANDING_FADES_AFTER`` seconds), so no key in bad standing is starved;
* queues sharing an ``Admission`` are served by priority when a slot frees (a logged-in
  source's reply decryption before fresh Argon2id work, a returning source's login before any
  new source's creation), and a queue's wait counts the queues served before it;
* a queue given a ``share`` N is owed one slot in N while it has someone waiting: once N - 1
  slots in a row went to queues served before it while it waited, the next is its own. Without
  it, work that is always there ahead of it (an attacker's own codenames logging in, two at a
  time, again and again: they never fail) would keep it waiting for ever;
* a ``fifo`` queue serves its keys in arrival order (new sources among themselves) rather than
  round-robin by standing;
* a waiting request whose client went away is cancelled and leaves the queue;
* ``decoy`` stands in for a real request, holding no slot and using no CPU: what a codename
  that cannot match any source gets. It is refused where a real request would be, takes its
  place in the queue's order like one (so it waits exactly as long for its turn), and at its
  turn, instead of a slot, holds its key's place for the given run time (a fixed figure timed
  at start-up, never one taken from other requests' runs), then fires. When its answer leaves
  is the caller's to say (``answer_grid``: on a grid from the request's arrival, alike for
  both).

Keys are only held in memory as dictionary keys; nothing here logs them.
"""
from __future__ import annotations

import collections
import itertools
import time
from typing import Any, Callable, Hashable, Optional, TypeVar

from twisted.internet.defer import CancelledError, Deferred, fail, maybeDeferred, succeed
from twisted.python.failure import Failure

T = TypeVar("T")

RETRY_AFTER_SECONDS = 60
# The pace is the mean of at most this many of the latest runs, none more than PACE_WINDOW
# seconds older than the latest: a busy spell's slow runs are forgotten once runs are quick again.
# (It sizes the queues, never an answer's time.)
PACE_RUNS = 8
PACE_WINDOW = 60.0
STANDING_FADES_AFTER = 2.0  # seconds of waiting that make up for one point of standing
BUSY_TITLE = "The drop box is busy"
BUSY_MESSAGE = "The drop box is busy. Nothing was lost; please try again in a minute."


class Busy(Exception):
    """No room for this request now: answer 503 with ``Retry-After`` at once."""

    def __init__(self, queue: str = "") -> None:
        super().__init__(f"admission queue {queue!r} is full")
        self.queue = queue
        self.retry_after = RETRY_AFTER_SECONDS


class KeyBusy(Busy):
    """This key (circuit or identity) already holds all the requests it may hold."""


class Ticket:
    """A granted slot. Release it exactly once (``release`` is idempotent)."""

    def __init__(self, queue: "AdmissionQueue", key: Hashable) -> None:
        self._queue = queue
        self.key = key
        self.released = False
        self._granted_at = queue.admission.clock()

    def release(self) -> None:
        if not self.released:
            self.released = True
            now = self._queue.admission.clock()
            self._queue._finished(self.key, now - self._granted_at, now)

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Deferred[T]":
        """Run blocking ``fn`` on the admission's pool while holding this slot."""
        return self._queue.admission.pool.run(fn, *args, **kwargs)


class _Waiter:
    __slots__ = ("key", "deferred", "since", "arrival", "decoy")

    def __init__(self, key: Hashable, deferred: Deferred, since: float, arrival: int,
                 decoy: Callable[[], None] | None = None) -> None:
        self.key = key
        self.deferred = deferred
        self.since = since
        self.arrival = arrival  # its place in the order of arrival (clock readings may tie)
        self.decoy = decoy  # a decoy: called at its turn instead of granting a slot


class Pace:
    """How long a granted slot has been held lately: the mean of the last ``PACE_RUNS`` runs,
    leaving out those more than ``PACE_WINDOW`` seconds older than the latest. It says how much
    work a queue may hold (``max_wait``); no answer waits for it. Several queues doing the same
    work (Argon2id for logins and for creations) may share one."""

    def __init__(self, guess: float | None = None) -> None:
        self.mean = guess  # the guess stands until the first run is timed
        self._runs: collections.deque[tuple[float, float]] = collections.deque(maxlen=PACE_RUNS)

    def record(self, held_for: float, at: float = 0.0) -> None:
        self._runs.append((at, held_for))
        while self._runs[0][0] < at - PACE_WINDOW:
            self._runs.popleft()
        self.mean = sum(held for _, held in self._runs) / len(self._runs)


class Admission:
    """The slots of one worker pool, shared by queues served in priority order."""

    def __init__(self, pool: Any, slots: int, clock: Callable[[], float] = time.monotonic,
                 timer: Any = None) -> None:
        if slots < 1:
            raise ValueError("an admission needs at least one slot")
        self.clock = clock
        self.pool = pool
        self.slots = slots
        self.running = 0
        self._queues: list[AdmissionQueue] = []
        # Whose callLater times decoys (None: the global reactor; tests give a Clock).
        self._timer = timer

    @property
    def timer(self) -> Any:
        return timer_or_reactor(self._timer)

    def queue(self, name: str, *, priority: int, per_key: int, max_waiting: int,
              max_wait: float | None = None, fifo: bool = False, pace: Pace | None = None,
              share: int | None = None, standing: Callable[[Hashable], int] | None = None) -> "AdmissionQueue":
        q = AdmissionQueue(self, name, priority, per_key, max_waiting, max_wait, fifo=fifo, pace=pace,
                           share=share, standing=standing)
        self._queues.append(q)
        self._queues.sort(key=lambda x: x.priority)
        return q

    def _has_free_slot(self) -> bool:
        return self.running < self.slots

    def _dispatch(self) -> None:
        # Grant freed slots to the highest-priority queue that has someone waiting, unless a
        # queue is owed its share.
        while self._has_free_slot():
            served = self._next()
            if served is None:
                return
            q, waiter = served
            self.running += 1
            waiter.deferred.callback(Ticket(q, waiter.key))

    def _next(self) -> "tuple[AdmissionQueue, _Waiter] | None":
        for q in self._queues:
            if q.share is not None and q.waiting and q.passed_over >= q.share - 1:
                waiter = q._next_waiter()
                if waiter is not None:
                    q.passed_over = 0
                    return q, waiter
        for q in self._queues:
            waiter = q._next_waiter()
            if waiter is not None:
                q.passed_over = 0
                for later in self._queues:
                    if later.priority > q.priority and later.share is not None and later.waiting:
                        later.passed_over += 1
                return q, waiter
        return None


class AdmissionQueue:
    def __init__(self, admission: Admission, name: str, priority: int, per_key: int, max_waiting: int,
                 max_wait: float | None = None, *, fifo: bool = False, pace: Pace | None = None,
                 share: int | None = None, standing: Callable[[Hashable], int] | None = None) -> None:
        if share is not None and share < 1:
            raise ValueError("a share is one slot in N, N >= 1")
        self.admission = admission
        self.name = name
        self.priority = priority
        self.per_key = per_key
        self.max_waiting = max_waiting
        self.max_wait = max_wait
        self.fifo = fifo
        self.share = share
        # Slots granted in a row to queues served before this one while it had someone waiting.
        self.passed_over = 0
        self.pace = pace if pace is not None else Pace()  # how long a granted slot is held lately
        self._waiting: dict[Hashable, collections.deque[_Waiter]] = {}
        self._turns: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        self._arrivals = itertools.count()  # numbers waiters in arrival order (``fifo``)
        self._held: collections.Counter[Hashable] = collections.Counter()  # waiting + running, per key
        self.waiting = 0
        # The key's standing, 0 = clean and higher = worse; None serves every key alike.
        self.standing = standing
        # Waiting this long makes up for one point of standing: a source that mistyped once
        # is served after clean newcomers for a moment, never starved by a stream of them.
        self.standing_fades_after = STANDING_FADES_AFTER

    # -- public

    def holding(self, key: Hashable) -> int:
        """Requests of ``key`` waiting or running in this queue."""
        return self._held.get(key, 0)

    def decoy(self, key: Hashable, run_seconds: float) -> "Deferred[None]":
        """Stand in for a real request of ``key``: ``KeyBusy`` or ``Busy`` at once where it would
        be refused, else None once its turn in this queue came and ``run_seconds`` passed after
        it (what a run is taken to take: a fixed figure, not the pace of other requests). It
        holds one of the key's places meanwhile (so a key's concurrent requests are refused
        alike) and a place in the queue's order, but no slot and no room in the queue (it adds
        no work: those behind it do not wait for it), and uses no CPU."""
        if self._held[key] >= self.per_key:
            if not self._held[key]:
                del self._held[key]
            return fail(KeyBusy(self.name))
        if not self.admission._has_free_slot() and self._full() and self._room_victim(key) is None:
            if not self._held[key]:
                del self._held[key]
            return fail(Busy(self.name))
        self._held[key] += 1
        state: dict[str, Any] = {"call": None, "waiter": None, "done": False}

        def answer() -> None:
            if not state["done"]:
                state["done"] = True
                self._release_key(key)
                d.callback(None)

        def turn() -> None:
            # Its turn: it holds its key's place for as long as its run would.
            state["waiter"] = None
            state["call"] = self.admission.timer.callLater(run_seconds, answer)

        def cancel(_: Deferred) -> None:
            state["done"] = True
            if state["waiter"] is not None:
                self._forget_waiter(state["waiter"])
            else:
                self._release_key(key)
            if state["call"] is not None and state["call"].active():
                state["call"].cancel()

        d: Deferred = Deferred(cancel)
        if self.admission._has_free_slot():
            turn()  # nobody waits anywhere: its turn is now
            return d
        waiter = _Waiter(key, d, self.admission.clock(), next(self._arrivals), decoy=turn)
        state["waiter"] = waiter
        self._waiting.setdefault(key, collections.deque()).append(waiter)
        self._turns.setdefault(key, None)
        return d

    def try_acquire(self, key: Hashable) -> Ticket:
        """A slot now or never: raises ``KeyBusy`` or ``Busy`` instead of waiting."""
        if self._held[key] >= self.per_key:
            if not self._held[key]:
                del self._held[key]
            raise KeyBusy(self.name)
        if not self.admission._has_free_slot():
            if not self._held[key]:
                del self._held[key]
            raise Busy(self.name)
        self._held[key] += 1
        self.admission.running += 1
        return Ticket(self, key)

    def acquire(self, key: Hashable) -> "Deferred[Ticket]":
        """A slot for ``key``: fires with a ``Ticket``, or fails with ``Busy`` at once.

        Cancelling the Deferred while it waits removes the request from the queue.
        """
        # A free slot means nobody waits anywhere (slots are granted as soon as they free).
        if self._held[key] >= self.per_key or self.admission._has_free_slot():
            try:
                return succeed(self.try_acquire(key))
            except Busy as e:
                return fail(e)
        if self._full() and not self._make_room_for(key):
            if not self._held[key]:
                del self._held[key]
            return fail(Busy(self.name))
        d: Deferred = Deferred(lambda d: self._cancel(waiter))
        waiter = _Waiter(key, d, self.admission.clock(), next(self._arrivals))
        self._held[key] += 1
        self._waiting.setdefault(key, collections.deque()).append(waiter)
        self._turns.setdefault(key, None)
        self.waiting += 1
        self.admission._dispatch()
        return d

    def run(self, key: Hashable, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "Deferred[T]":
        """``acquire``, run blocking ``fn`` on the pool, release. Cancellable while it waits."""
        return self.admit(key, lambda ticket: ticket.run(fn, *args, **kwargs))

    def admit(self, key: Hashable, work: Callable[[Ticket], Any]) -> Deferred:
        """Run ``work(ticket)`` (which may return a Deferred) once admitted; release after it.

        Cancelling while waiting leaves the queue. Once admitted, the work is not cancelled (a
        thread cannot be stopped, and the slot stays taken until it ends); the caller just
        stops waiting for its result.
        """
        acquiring = self.acquire(key)
        started: list[bool] = []

        def cancel(_: Deferred) -> None:
            if not started:
                acquiring.cancel()

        out: Deferred = Deferred(cancel)

        def granted(ticket: Ticket) -> None:
            started.append(True)
            work_d = maybeDeferred(work, ticket)

            def finished(result: Any) -> None:
                ticket.release()
                if out.called:
                    return  # cancelled meanwhile: nobody wants the result
                if isinstance(result, Failure):
                    out.errback(result)
                else:
                    out.callback(result)

            work_d.addBoth(finished)

        def refused(f: Failure) -> None:
            if not out.called:
                out.errback(f)

        acquiring.addCallbacks(granted, refused)
        return out

    # -- internals

    def _next_waiter(self) -> Optional[_Waiter]:
        """The next request to grant a slot to. Decoys whose turn comes first are answered on
        the way (their turn, without a slot), in the order real requests would have been."""
        while self._turns:
            key = self._next_key()
            del self._turns[key]
            fifo = self._waiting[key]
            waiter = fifo.popleft()
            if fifo:
                self._turns[key] = None  # back of the round
            else:
                del self._waiting[key]
            if waiter.decoy is not None:
                waiter.decoy()
                continue
            self.waiting -= 1
            return waiter
        return None

    def _next_key(self) -> Hashable:
        """The key to serve: best standing, less a point for each ``standing_fades_after``
        seconds its oldest request has waited (so none is starved), then the cleaner record
        (a clean newcomer goes before a flooder whose standing has merely faded), then
        round-robin order."""
        if self.fifo:
            return min(self._turns, key=lambda k: self._waiting[k][0].arrival)
        if self.standing is None:
            return next(iter(self._turns))
        now = self.admission.clock()
        best, best_rank = None, None
        for key in self._turns:  # at most ``max_waiting`` keys
            standing = self.standing(key)
            faded = standing - int((now - self._waiting[key][0].since) / self.standing_fades_after)
            rank = (faded, standing)
            if best_rank is None or rank < best_rank:
                best, best_rank = key, rank
        return best

    def _room_victim(self, key: Hashable) -> Optional[Hashable]:
        """Full: the key whose newest request would make room for ``key``'s: one in worse
        standing than ``key``, else the key with most waiting, if that is fairer; or None.
        (Only real requests count: decoys take no room.)"""
        if not self.waiting:
            return None
        victim = self._worse_standing_than(key)
        if victim is None:
            mine = self._real_waiting(key)
            busiest = max(self._waiting, key=self._real_waiting)
            # Only a key that would still be ahead after losing one: keys swapping places with
            # each other would not be fairer, just slower.
            if self._real_waiting(busiest) <= mine + 1:
                return None
            victim = busiest
        return victim

    def _real_waiting(self, key: Hashable) -> int:
        return sum(1 for w in self._waiting.get(key, ()) if w.decoy is None)

    def _make_room_for(self, key: Hashable) -> bool:
        """Full: evict the newest request of ``_room_victim(key)``. False if nobody should."""
        victim = self._room_victim(key)
        if victim is None:
            return False
        waiter = [w for w in self._waiting[victim] if w.decoy is None][-1]
        self._forget_waiter(waiter)
        waiter.deferred.errback(Busy(self.name))
        return True

    def _worse_standing_than(self, key: Hashable) -> Optional[Hashable]:
        """The waiting key in worst standing, if worse than ``key``'s (ties: most waiting)."""
        if self.standing is None:
            return None
        mine = self.standing(key)
        worst, worst_rank = None, None
        for other in self._waiting:
            rank = (self.standing(other), self._real_waiting(other))
            if rank[0] > mine and rank[1] and (worst_rank is None or rank > worst_rank):
                worst, worst_rank = other, rank
        return worst

    def _forget_waiter(self, waiter: _Waiter) -> None:
        fifo = self._waiting.get(waiter.key)
        if fifo is not None and waiter in fifo:
            fifo.remove(waiter)
        if fifo is not None and not fifo:
            del self._waiting[waiter.key]
            self._turns.pop(waiter.key, None)
        if waiter.decoy is None:
            self.waiting -= 1
        self._release_key(waiter.key)

    def _cancel(self, waiter: _Waiter) -> None:
        fifo = self._waiting.get(waiter.key)
        if fifo is not None and waiter in fifo:
            self._forget_waiter(waiter)
        # Deferred.cancel then fails the request with CancelledError.

    def _release_key(self, key: Hashable) -> None:
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]

    def _work_ahead(self) -> float:
        """Seconds of work queued that a newcomer here would wait behind (before slots share
        it): this queue's, and that of the queues served before it (with a ``share``, at most
        share - 1 of theirs before each of its own)."""
        own = self.pace.mean or 0.0
        mine = self.waiting * own
        before = sum(q.waiting * (q.pace.mean or own) for q in self.admission._queues
                     if q is not self and q.priority <= self.priority)
        if self.share is not None:
            before = min(before, (self.share - 1) * (self.waiting + 1) * own)
        return mine + before

    def _full(self) -> bool:
        if self.waiting >= self.max_waiting:
            return True
        if self.max_wait is None or self.pace.mean is None:
            return False
        # A newcomer waits for everyone ahead, served ``slots`` at a time.
        expected = (self._work_ahead() + self.pace.mean) / self.admission.slots
        return expected > self.max_wait

    def _finished(self, key: Hashable, held_for: float, now: float) -> None:
        self.pace.record(held_for, now)
        self._release_key(key)
        self.admission.running -= 1
        self.admission._dispatch()


def timer_or_reactor(timer: Any) -> Any:
    """``timer`` (an IReactorTime; tests give a Clock), or the global reactor when None."""
    if timer is None:
        from twisted.internet import reactor

        return reactor
    return timer


def is_busy(failure_or_error: Any) -> bool:
    value = failure_or_error.value if isinstance(failure_or_error, Failure) else failure_or_error
    return isinstance(value, Busy)


__all__ = ["Admission", "AdmissionQueue", "Busy", "KeyBusy", "Pace", "Ticket", "CancelledError", "BUSY_MESSAGE",
           "BUSY_TITLE", "RETRY_AFTER_SECONDS", "is_busy", "timer_or_reactor"]
