"""The security event log: one JSON object per line, for an IDS (OSSEC/Wazuh) to watch.

Events name what happened to the *system* (a journalist login, a refused certificate, Tor
state); they never carry anything about a source: no codename, filesystem id, designation,
uuid, filename or IP address. ``SecurityEvents.emit`` refuses field names outside an allow-list
so that a careless caller cannot leak one by accident.
"""
from __future__ import annotations

import collections
import json
import os
import threading
import time
from typing import Any, Callable, Optional

from twisted.logger import Logger

# Fields an event may carry. Anything else is a programming error.
ALLOWED_FIELDS = frozenset(
    {
        "username",  # a journalist's account name
        "reason",  # short machine-readable cause, e.g. "bad_totp", "revoked"
        "subject",  # a client certificate's subject CN (journalists only)
        "serial",  # a client certificate's serial number
        "count",  # counters such as revoked certificates in a CRL
        "repeated",  # events of this kind folded into this one since the last (see EventGate)
        "progress",  # Tor bootstrap percent
        "summary",  # Tor's own bootstrap summary text
        "onion",  # the instance's own onion address (public by design)
        "kind",  # sub-kind of an event
        "delay",  # seconds, e.g. a restart back-off
        "target",  # the account (or desk) acted upon by an admin action
        "fingerprint",  # the submission key fingerprint (public)
        "detail",  # a fixed, non-source-derived explanation
        "expires",  # when a CRL or certificate expires (ISO 8601, UTC)
        "days_left",  # whole days until it does
        "bytes",  # a size, e.g. of a backup
        "submissions",  # counts only, e.g. deleted by retention
        "replies",
        "sources",
        "day",  # the UTC day a daily count is for (YYYY-MM-DD)
        "messages",  # counts of one day (submissions.daily)
        "files",
        "not_stored",
        "errors",
        "desk",  # a desk's name (an admin's words, never a source's): per-desk daily counts
    }
)

_log = Logger(namespace="deaddrop.security")

# Called with every record emitted in this process, after it is written (the test suite checks
# each against docs/monitoring.md).
_observers: list[Callable[[dict[str, Any]], None]] = []


def add_observer(observer: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """Have ``observer(record)`` called with every event this process emits; -> its remover."""
    _observers.append(observer)
    return lambda: _observers.remove(observer)


class EventGate:
    """At most one event per key every ``every`` seconds; the next one says how many it stands
    for. A flood of refused attempts (hundreds a second) must not cost a log line each, nor
    drown the log an IDS reads; its rules count events per minutes, which this keeps meaningful.

    Keys are whatever the caller groups by (a journalist's account name, or None); only the
    ``max_keys`` most recent are remembered.
    """

    def __init__(self, every: float, clock: Callable[[], float] = time.monotonic, max_keys: int = 1024) -> None:
        self.every = every
        self._clock = clock
        self._max_keys = max_keys
        self._seen: collections.OrderedDict[Any, list] = collections.OrderedDict()  # key -> [last, folded]

    def admit(self, key: Any = None) -> Optional[int]:
        """None: fold this one in, emit nothing. Else emit now, with this many folded into it."""
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.every:
            seen[1] += 1
            return None
        folded = seen[1] if seen is not None else 0
        self._seen[key] = [now, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > self._max_keys:
            self._seen.popitem(last=False)
        return folded


class FloodGate:
    """Events that one visitor can cause once (a busy page, a login abandoned mid-check): written
    only while they come in a flood, at least ``threshold`` of a key within ``window`` seconds,
    and then folded like ``EventGate`` (one line per key every ``every`` seconds, saying how many
    more it stands for: those since the previous line, back to the last quiet gap longer than
    ``window``). Below the threshold nothing is written: a line the second a source pressed
    Reload would date that source (the daily report counts them, see ``FloodDefence``).

    Memory: the last ``threshold`` times of each of the ``max_keys`` most recent keys.
    """

    def __init__(self, threshold: int, window: float, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 64) -> None:
        if threshold < 1:
            raise ValueError("a flood needs at least one event")
        self.threshold = threshold
        self.window = window
        self.every = window if every is None else every
        self._clock = clock
        self._max_keys = max_keys
        # key -> [recent times (at most ``threshold``), time of the last line or None, not written since]
        self._seen: collections.OrderedDict[Any, list] = collections.OrderedDict()

    def admit(self, key: Any = None) -> Optional[int]:
        """None: write nothing. Else write a line now, standing for this many more."""
        now = self._clock()
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen[key] = [collections.deque(maxlen=self.threshold), None, 0]
        self._seen.move_to_end(key)
        while len(self._seen) > self._max_keys:
            self._seen.popitem(last=False)
        times, last_line, _ = seen
        if times and now - times[-1] > self.window:
            seen[2] = 0  # a quiet gap: what came before it is not part of this flood
        times.append(now)
        seen[2] += 1
        flooding = len(times) >= self.threshold and now - times[0] <= self.window
        if not flooding or (last_line is not None and now - last_line < self.every):
            return None
        folded = seen[2] - 1
        seen[1], seen[2] = now, 0
        return folded


class SecurityEvents:
    """Appends events to ``DATA/logs/security.jsonl`` and mirrors them to twistd's log."""

    def __init__(self, path: str | None, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        if path is not None:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            # O_APPEND keeps lines whole even if the admin CLI appends at the same time.
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        unknown = set(fields) - ALLOWED_FIELDS
        if unknown:
            raise ValueError(f"security event fields not allowed: {sorted(unknown)}")
        record: dict[str, Any] = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock())),
            "event": event,
            "program": "deaddrop",
        }
        record.update({k: v for k, v in fields.items() if v is not None})
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        if self._fd is not None:
            # One write() of a short line under O_APPEND is atomic; small enough to run on
            # the reactor thread (no fsync: losing the last event in a power cut is acceptable).
            with self._lock:
                os.write(self._fd, line.encode("utf-8") + b"\n")
        _log.info("security event {event}: {line}", event=event, line=line)
        for observer in list(_observers):
            observer(record)
        return record

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
