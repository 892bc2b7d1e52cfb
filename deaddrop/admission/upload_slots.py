# -*- test-case-name: tests.test_upload_slots -*-
"""Upload pump slots, fairly shared: the slowest upload makes room for a newcomer.

Each upload body being received holds a pump slot (a worker thread feeding gpg) for as long as it
takes to arrive, which a client can stretch to hours at the connection's 2 KiB/s floor. A body's
files arrive one after another and are pumped in turn by its one slot (a file's gpg finishing
while the next file starts may briefly take a second thread, which the pool queues if it has none). Identities
are cheap (one Argon2id run each), so a cap per identity alone lets a few hundred of them hold
every slot with a trickle each. ``UploadSlots`` shares the slots so that cannot last:

* per source identity at most ``per_key`` uploads, as before (``KeyBusy``);
* per Tor circuit at most ``per_circuit`` (``Busy``). Connections without a circuit id (``--tor
  none``, loopback) are not capped together: they are every direct client at once, and a cap on
  them would let one such client lock out all the others. They are shared by the next rule;
* when every slot is taken, a newcomer ends the slowest upload still receiving (lowest average
  rate over the last ``window`` seconds) instead of being refused, if that upload has had
  ``grace`` seconds to get going (or, within it, is ``EARLY`` seconds old and has averaged under
  a quarter of ``fair_rate``) and is below ``fair_rate``. An upload at a fair rate is never
  ended: when all are, the newcomer gets ``Busy`` as before;
* an identity or circuit whose upload was ended, or that dropped one mid-body itself, gets no
  grace for ``penalty`` seconds, so a
  client that keeps every slot younger than the grace (opening new trickles as old ones are
  ended) only ends its own uploads, and a newcomer can still end one of them.

The disk is shared by the same rule (``make_room``): an upload that would be refused for want of
disk space ends the slowest uploads below ``fair_rate`` whose reservations make the room it needs.
What an upload holds on the disk follows its measured pace (``UploadProgress.expected``, see
``admission.disk_space``), so a trickle announcing a huge Content-Length holds little; when the disk
cannot keep what uploads in flight were promised, those that send least are ended first
(``end_for_room``).

The evicted upload is told through its ``evict`` callback (the web layer answers it with the
calm "busy" page and discards its ciphertext); its slot is free before the newcomer's is taken.
Every decision looks at each upload in flight once: O(slots).

Keys and circuits are only held in memory as dictionary keys; nothing here logs them.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Hashable, Optional

from deaddrop.admission.queues import Admission, AdmissionQueue, Busy, KeyBusy, Ticket

# A slot pumping less than this is wasted when someone else is waiting for it. Tor uploads to
# an onion run at 50 KB/s and more; the attack trickles at the 2 KiB/s connection floor. Holding
# every slot above this costs an attacker 4 MiB/s of Tor bandwidth for the default 256 slots.
FAIR_RATE = 16 * 1024  # bytes a second
GRACE = 10.0  # seconds an upload gets before it can be ended (a Tor circuit's first round trips are slow)
WINDOW = 60.0  # the rate is averaged over this much recent time
PENALTY = 600.0  # seconds an identity or circuit whose upload was ended gets no grace
# Within its grace an upload can still be ended once it is this old, if it has averaged under
# a quarter of the fair rate since it began: a trickle is plain after a few round trips, and
# a newcomer need not wait out the grace of hundreds of trickles opened at once.
EARLY = 3.0


class UploadProgress:
    """Body bytes of one upload (fed from the reactor) and their rate over a recent window."""

    def __init__(self, clock: Callable[[], float], window: float, settle: float = GRACE) -> None:
        self._clock = clock
        self._window = window
        # Seconds before its pace is taken as known (``expected``): a Tor circuit's first round
        # trips are slow. 0 for an upload of an identity or circuit that lost its grace.
        self.settle = settle
        self.started = clock()
        self.total = 0
        self.receiving = True
        self.interrupted = False  # the client went away mid-body
        self._watch: Optional[Callable[[], Any]] = None
        self._watch_every = 0
        self._watch_at = 0
        # (time, total) marks about a quarter window apart; the rate is measured from the newest
        # mark at least a window old, so it covers a window or a little more.
        self._marks: collections.deque[tuple[float, int]] = collections.deque([(self.started, 0)])
        self._last = self.started  # when the latest byte arrived

    def received(self, n: int) -> None:
        self.total += n
        now = self._last = self._clock()
        if now - self._marks[-1][0] >= self._window / 4:
            self._marks.append((now, self.total))
        if self._watch is not None and self.total >= self._watch_at:
            self._watch_at = self.total + self._watch_every
            self._watch()

    def every(self, n_bytes: int, call: Callable[[], Any]) -> None:
        """Call ``call`` each time another ``n_bytes`` of the body have arrived."""
        self._watch, self._watch_every, self._watch_at = call, n_bytes, self.total + n_bytes

    def expected(self, seconds: float) -> Optional[float]:
        """Body bytes expected over the next ``seconds`` at the recent rate; None while that is
        not known yet (within ``settle``) or no longer matters (the body is complete)."""
        now = self._clock()
        if not self.receiving or now - self.started < self.settle:
            return None
        return self.rate(now) * seconds

    def ended(self) -> None:
        """The body is complete (or abandoned): the upload no longer holds its slot to receive."""
        self.receiving = False

    def rate(self, now: float) -> float:
        if self._last <= now - self._window:
            return 0.0  # nothing for a whole window (a burst at the start, then silence)
        marks = self._marks
        while len(marks) > 1 and marks[1][0] <= now - self._window:
            marks.popleft()
        since, total = marks[0]
        return (self.total - total) / max(now - since, 1.0)


class UploadTicket(Ticket):
    _queue: "UploadSlots"

    def __init__(self, queue: "UploadSlots", key: Hashable, circuit: Optional[Hashable],
                 progress: UploadProgress, evict: Callable[[], Any], no_grace: bool) -> None:
        super().__init__(queue, key)
        self.circuit = circuit
        self.progress = progress
        self.evict = evict
        self.no_grace = no_grace

    def release(self) -> None:
        if not self.released:
            self._queue._forget(self)
        super().release()


class UploadSlots(AdmissionQueue):
    """The upload queue: no waiting (an upload cannot wait), fair across identities and circuits."""

    def __init__(self, admission: Admission, *, per_key: int, per_circuit: int, fair_rate: float = FAIR_RATE,
                 grace: float = GRACE, window: float = WINDOW, penalty: float = PENALTY) -> None:
        super().__init__(admission, "uploads", priority=0, per_key=per_key, max_waiting=0)
        self.per_circuit = per_circuit
        self.fair_rate = fair_rate
        self.grace = grace
        self.window = window
        self.penalty = penalty
        self._in_flight: dict[UploadTicket, None] = {}
        self._per_circuit: collections.Counter[Hashable] = collections.Counter()
        # key or circuit -> until when it gets no grace; oldest first, bounded (see _penalise).
        self._penalised: collections.OrderedDict[Hashable, float] = collections.OrderedDict()

    def progress(self) -> UploadProgress:
        """A progress counter for one request's body, to pass to ``try_acquire``."""
        return UploadProgress(self.admission.clock, self.window, settle=self.grace)

    def try_acquire(self, key: Hashable, circuit: Optional[Hashable] = None,
                    progress: Optional[UploadProgress] = None,
                    evict: Callable[[], Any] = lambda: None) -> Ticket:
        """A slot now, by ending the slowest upload if need be, or ``KeyBusy``/``Busy``.

        ``circuit`` None: a connection without a circuit id (not capped per circuit).
        ``evict`` is called if this upload is later ended to make room for another."""
        if self._held[key] >= self.per_key:
            raise KeyBusy(self.name)
        if circuit is not None and self._per_circuit[circuit] >= self.per_circuit:
            raise Busy(self.name)
        progress = progress or self.progress()
        if not self.admission._has_free_slot() and not self._evict_slowest():
            raise Busy(self.name)
        now = self.admission.clock()
        ticket = UploadTicket(self, key, circuit, progress, evict,
                              no_grace=self._is_penalised(key, now) or self._is_penalised(circuit, now))
        if ticket.no_grace:
            progress.settle = 0.0  # no benefit of the doubt on the disk either
        self._held[key] += 1
        self.admission.running += 1
        if circuit is not None:
            self._per_circuit[circuit] += 1
        self._in_flight[ticket] = None
        return ticket

    def acquire(self, key: Hashable) -> Any:
        raise NotImplementedError("uploads take a slot with try_acquire (they cannot wait)")

    def make_room(self, needed: int, holds: Callable[[UploadProgress], int]) -> bool:
        """The disk's turn of the same rule: end the slowest uploads below the fair rate until
        what they still hold (``holds``: disk space an upload may yet write) adds up to
        ``needed``, slowest first. Ends none (-> False) unless that much can be freed: an upload
        is never ended for a newcomer it would not let in. O(slots log slots)."""
        if needed <= 0:
            return True
        now = self.admission.clock()
        ranked = []
        for ticket in self._in_flight:
            rate = self._unfair_rate(ticket, now)
            held = holds(ticket.progress) if rate is not None else 0
            if held > 0:
                ranked.append((rate, -held, id(ticket), ticket, held))
        ranked.sort(key=lambda r: r[:3])
        victims, freed = [], 0
        for *_order, ticket, held in ranked:
            victims.append(ticket)
            freed += held
            if freed >= needed:
                break
        else:
            return False
        for ticket in victims:
            self._end(ticket, now)
        return True

    def end_for_room(self, needed: int, holds: Callable[[UploadProgress], int]) -> int:
        """The disk cannot keep what uploads in flight were promised: end those holding room
        (``holds``: the room each may still be short of) that send least, whatever their rate,
        until ``needed`` is freed or none is left. An upload that stopped sending goes first.
        -> how many were ended. O(slots log slots)."""
        now = self.admission.clock()
        ranked = []
        for ticket in self._in_flight:
            held = holds(ticket.progress) if ticket.progress.receiving else 0
            if held > 0:
                ranked.append((ticket.progress.rate(now), id(ticket), ticket, held))
        ranked.sort(key=lambda r: r[:2])
        freed = ended = 0
        for _rate, _id, ticket, held in ranked:
            if freed >= needed:
                break
            self._end(ticket, now)
            freed += held
            ended += 1
        return ended

    # -- internals

    def _evict_slowest(self) -> bool:
        now = self.admission.clock()
        victim, slowest = None, self.fair_rate
        for ticket in self._in_flight:
            rate = self._unfair_rate(ticket, now)
            if rate is not None and rate < slowest:
                victim, slowest = ticket, rate
        if victim is None:
            return False
        self._end(victim, now)
        return True

    def _unfair_rate(self, ticket: UploadTicket, now: float) -> Optional[float]:
        """The upload's rate if it may be ended to make room (below the fair rate), else None."""
        progress = ticket.progress
        if not progress.receiving:
            return None  # complete: gpg is finishing it, and its source is about to be thanked
        age = now - progress.started
        if age < self.grace and not ticket.no_grace:
            if age < EARLY or progress.total / age >= self.fair_rate / 4:
                return None
            rate = progress.total / age
        else:
            rate = progress.rate(now)
        return rate if rate < self.fair_rate else None

    def _end(self, victim: UploadTicket, now: float) -> None:
        victim.progress.ended()
        self._penalise(victim.key, now)
        self._penalise(victim.circuit, now)
        victim.release()
        victim.evict()

    def _is_penalised(self, key: Optional[Hashable], now: float) -> bool:
        until = self._penalised.get(key) if key is not None else None
        return until is not None and until > now

    def _penalise(self, key: Optional[Hashable], now: float) -> None:
        if key is None:
            return
        self._penalised.pop(key, None)
        self._penalised[key] = now + self.penalty
        # Bounded: evictions happen at most once per upload started, and the oldest entries are
        # the first to expire; beyond a few per slot the oldest are dropped.
        while len(self._penalised) > 8 * self.admission.slots:
            self._penalised.popitem(last=False)

    def _forget(self, ticket: UploadTicket) -> None:
        if ticket.progress.interrupted and ticket in self._in_flight:
            # Dropped by its own client mid-body: one who keeps every slot younger than the
            # grace by opening trickles and dropping them loses the grace, like one whose
            # upload we ended, and its uploads are the first a newcomer may end.
            now = self.admission.clock()
            self._penalise(ticket.key, now)
            self._penalise(ticket.circuit, now)
        self._in_flight.pop(ticket, None)
        if ticket.circuit is not None:
            self._per_circuit[ticket.circuit] -= 1
            if self._per_circuit[ticket.circuit] <= 0:
                del self._per_circuit[ticket.circuit]


__all__ = ["UploadSlots", "UploadProgress", "UploadTicket", "FAIR_RATE", "GRACE", "EARLY", "WINDOW", "PENALTY"]
