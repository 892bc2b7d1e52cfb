# -*- test-case-name: tests.integration.test_large_uploads -*-
"""``source.upload.no_room``: said on a timer while the disk is down to its reserve.

An upload refused for want of space must not be logged when it is refused: the line would date
the source's attempt. The admin still needs to hear about a full disk, so the state is checked
every ``INTERVAL`` seconds instead, whatever sources do, and the event is written while the
largest upload the disk can take (with no upload in flight) is smaller than the instance's upload
limit; the size it gives is rounded down coarsely, as sources are told it. (The day's
refusals are counted in ``submissions.daily``, as ``not_stored``.)
"""
from __future__ import annotations

from typing import Any

from twisted.application.internet import TimerService

from deaddrop.admission.disk_space import round_down_coarsely

EVENT = "source.upload.no_room"
INTERVAL = 600.0


class DiskWatch(TimerService):
    def __init__(self, reactor: Any, disk: Any, settings: Any, events: Any) -> None:
        super().__init__(INTERVAL, self.check)
        self.clock = reactor
        self._disk = disk
        self._settings = settings
        self._events = events

    def check(self) -> bool:
        """-> whether the disk is short of room (and the event was written)."""
        # As if no upload were in flight, and coarsely: this line is written every few minutes,
        # and exact room would date what other sources are sending (or what was just stored).
        largest = self._disk.largest_upload_alone()
        if largest >= self._settings.max_upload_size:
            return False
        try:
            self._events.emit(EVENT, bytes=round_down_coarsely(largest))
        except OSError:
            pass  # the log's own disk may be the full one; the next check tries again
        return True
