# -*- test-case-name: tests.test_source_uploads -*-
"""What an upload holds while its body arrives, and the ciphertext of one that will not be stored.

An upload body is admitted before its first file byte is read: room on the disk for the whole
body (its Content-Length, or the largest body accepted if it has none, less what it writes as
it goes) and one pump slot, however many files it carries (``UploadSlots``: per source identity,
not per session, since logging in again gives a codename no more; per Tor circuit; and in total,
where the slowest upload may be ended to make room, for a slot or for disk space). A body's files
arrive one after another, so one slot pumps them in turn: a slot per file made the third file of
one submission look like a third submission in flight (issue 27). Text-only messages
take no slot: they are encrypted on a pool of their own, after their own disk admission
(``Submissions.encrypt_message``). ``Submissions.admit_upload`` hands one ``UploadHold`` per body;
``release`` gives everything back once the body was received or refused.

The room an upload holds follows its pace once that is known (``admission.disk_space``): what the
disk promised uploads in flight can then outgrow it as slow uploads keep writing. So each body,
every ``CHECK_EVERY`` bytes it brings, checks that the promises still fit beside the reserve, and
if not, uploads promised room only in part are ended, those sending least (or nothing) first.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

from deaddrop.admission.upload_slots import UploadSlots
from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.admission.disk_space import DiskSpace, NoRoom, Reservation
from deaddrop.store.files import Store

# Bytes of a body between two checks that what uploads in flight hold still fits. Room is only
# used up by bytes written; a check is one statvfs and a pass over the uploads in flight.
CHECK_EVERY = 4 << 20


class HasTempPath(Protocol):
    temp_path: str


class UploadHold:
    """The disk space and pump slots one upload body holds (see the module's text)."""

    def __init__(self, slots: UploadSlots, disk: DiskSpace | None, activity: SourceActivity,
                 source_id: int | None, circuit: Any, evict: Callable[[], Any]) -> None:
        self._slots = slots
        self._disk = disk
        self._activity = activity
        self._source_id = source_id
        # Connections without a Tor circuit are not capped together (see upload_slots).
        self._circuit = circuit if circuit is not None and circuit.is_tor else None
        self._evict = evict
        self.progress = slots.progress()  # the body's bytes, as they are fed to encryption
        self._tickets: list[Any] = []
        self._admitted = False

    def admit(self, body_bytes: int) -> None:
        """Before the body's first file byte: its disk space and its pump slot. Its later files
        take nothing more (called again, this does nothing). Raises ``NoRoom`` (counted for the
        day's report: the admin hears of a full disk from a timer, never at the moment a source
        was refused), ``KeyBusy`` (this identity's other submissions are all still arriving) or
        ``Busy``."""
        if self._admitted:
            return
        if self._disk is not None:
            try:
                self._tickets.append(self._hold_room(body_bytes))
            except NoRoom:
                self._activity.not_stored("no_room")
                raise
        self._tickets.append(self._slots.try_acquire(self._source_id, self._circuit, self.progress,
                                                     evict=self._evict))
        self._admitted = True
        if self._disk is not None:
            self.progress.every(CHECK_EVERY, self.keep_reserve)

    def keep_reserve(self) -> int:
        """When what uploads in flight hold no longer fits beside the reserve (and the room kept
        for text), end uploads promised room only in part, those sending least first, until it
        fits (this one included). -> how many were ended."""
        assert self._disk is not None
        short = -self._disk.room()
        if short <= 0:
            return 0
        holds = self._disk.holds(promised_in_part=True)
        return self._slots.end_for_room(short, lambda p: holds.get(p, 0))

    def _hold_room(self, body_bytes: int) -> Reservation:
        """The body's disk space. When the disk is short, uploads below the fair rate whose
        reservations make the room are ended, slowest first (``UploadSlots.make_room``, the pump
        slots' rule): a trickle announcing a huge body cannot keep others out for hours. Their
        ``evict`` answers them at once, which releases their hold before the second try."""
        assert self._disk is not None
        try:
            return self._disk.admit(body_bytes, self.progress)
        except NoRoom:
            short = self._disk.needed_for(body_bytes) - self._disk.room()
            holds = self._disk.holds()
            if not self._slots.make_room(short, lambda p: holds.get(p, 0)):
                raise
        return self._disk.admit(body_bytes, self.progress)

    def release(self) -> None:
        for ticket in self._tickets:
            ticket.release()


def discard(store: Store, received: Iterable[HasTempPath]) -> None:
    """The ciphertext of parts that will not be stored, removed from the store's temp folder."""
    for part in received:
        store.discard_temp(part.temp_path)
