# -*- test-case-name: tests.test_daily_report -*-
"""What sources did, counted per day and reported once, after the day ended (``submissions.daily``).

A log line written when a source acts dates that act to the second, on the server, in the
journal and in every backup of the log; with few sources it points at one person. So nothing
is logged at the moment of a source's action (create, log in, submit, read or delete a reply):
the source side only bumps counters here, and one event a day, at midnight UTC, says how many
messages and files arrived that day, how many submissions could not be stored and how many
source requests failed. The defences one visitor can set off (a busy page, a check it
abandoned, its upload ended to make room) are counted here too, by reason, and go to twistd's
log with the day's counts; ``source.flood`` writes them at once only in a flood. The line is written every day, also when every count is zero, so its
presence says nothing either. The failures' descriptions (exception type and code position,
never request data) go to twistd's log at the same time, for whoever debugs a 500.

What the launched Tor prints once the onion is up is counted here too (``tor_line``): a failed
rendezvous, a circuit over its stream limit or the heartbeat's count of introductions would date
a visit if written when it happens. ``tor.log.daily`` says how many warnings Tor gave that day,
and each kind of line Tor printed (its words, without circuits, relays or numbers) goes to
twistd's log with its count at the same time.

The day's counts live in memory. A clean shutdown keeps them in the database's settings
table, and the next start reports a day that ended while the server was down; a crash loses
that day's counts (never anything a source sent).
"""
from __future__ import annotations

import collections
import datetime
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from twisted.application.service import Service
from twisted.logger import Logger

from deaddrop.delayed_calls import cancel
from deaddrop.store import queries

DAY = 86400
EVENT = "submissions.daily"
# With several desks (issue 29), one more line per desk, after EVENT: what that desk was sent.
DESK_EVENT = "submissions.daily.desk"
TOR_EVENT = "tor.log.daily"
# The settings key under which a clean shutdown keeps the day's counts.
SETTINGS_KEY = "daily_counts"
# Distinct failure descriptions, and kinds of Tor lines, kept per day (each with its count);
# beyond that only counted.
MAX_FAILURE_KINDS = 32
MAX_TOR_KINDS = 64
MAX_DEFENCE_KINDS = 16

_log = Logger(namespace="deaddrop.daily_report")  # the name its log lines carried before the module moved


def day_of(timestamp: float) -> str:
    """The UTC day of a time, as YYYY-MM-DD."""
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).date().isoformat()


@dataclass
class DayCounts:
    day: str
    messages: int = 0
    files: int = 0
    not_stored: int = 0  # submissions the server could not store (disk full, storage errors)
    errors: int = 0  # source requests that failed inside the server (500s)
    failures: collections.Counter = field(default_factory=collections.Counter)
    tor_warnings: int = 0  # [warn] lines of the launched Tor, once bootstrapped
    tor_lines: collections.Counter = field(default_factory=collections.Counter)  # "[level] kind" -> count
    # The source side's defences that one visitor can set off (a busy page, a check abandoned,
    # an upload ended to make room), by reason: counted here, written at once only in a flood.
    defences: collections.Counter = field(default_factory=collections.Counter)
    # Per desk (its uuid: a name may change during the day): {"messages": n, "files": n}. A
    # submission sent to two desks counts for each.
    desks: dict[str, collections.Counter] = field(default_factory=dict)

    def as_json(self) -> str:
        return json.dumps({"day": self.day, "messages": self.messages, "files": self.files,
                           "not_stored": self.not_stored, "errors": self.errors,
                           "failures": dict(self.failures), "tor_warnings": self.tor_warnings,
                           "tor_lines": dict(self.tor_lines), "defences": dict(self.defences),
                           "desks": {k: dict(v) for k, v in self.desks.items()}}, sort_keys=True)

    def add_desks(self, desks: dict[str, collections.Counter]) -> None:
        for uuid, counts in desks.items():
            self.desks.setdefault(uuid, collections.Counter()).update(counts)

    @classmethod
    def from_json(cls, text: str) -> "DayCounts | None":
        try:
            data = json.loads(text)
            counts = cls(str(data["day"]), int(data["messages"]), int(data["files"]),
                         int(data.get("not_stored", 0)), int(data.get("errors", 0)),
                         collections.Counter({str(k): int(v) for k, v in data.get("failures", {}).items()}),
                         int(data.get("tor_warnings", 0)),
                         collections.Counter({str(k): int(v) for k, v in data.get("tor_lines", {}).items()}),
                         collections.Counter({str(k): int(v) for k, v in data.get("defences", {}).items()}),
                         {str(d): collections.Counter({str(k): int(v) for k, v in c.items()})
                          for d, c in data.get("desks", {}).items()})
            datetime.date.fromisoformat(counts.day)
            return counts
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class SourceActivity:
    """The counters the source side bumps. Never logs, never touches the disk."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.today = DayCounts(day_of(clock()))
        self._ended: list[DayCounts] = []

    def _current(self) -> DayCounts:
        day = day_of(self._clock())
        if day != self.today.day:
            # The midnight report has not run yet (the reactor was busy): keep the ended day apart.
            self._ended.append(self.today)
            self.today = DayCounts(day)
        return self.today

    def stored(self, kind: str, desks: Iterable[str] = ()) -> None:
        """A message (``msg``) or a file (``doc``) was stored, for ``desks`` (their uuids)."""
        counts = self._current()
        what = "messages" if kind == "msg" else "files"
        if kind == "msg":
            counts.messages += 1
        else:
            counts.files += 1
        for desk in desks:
            counts.desks.setdefault(desk, collections.Counter())[what] += 1

    def not_stored(self, reason: str) -> None:
        """A submission could not be stored (``reason``: a fixed word, e.g. ``disk_full``)."""
        counts = self._current()
        counts.not_stored += 1
        self._describe(counts, f"not stored: {reason}")

    def failed(self, description: str) -> None:
        """A source request failed inside the server; ``description`` names only code, never data."""
        counts = self._current()
        counts.errors += 1
        self._describe(counts, description)

    def defended(self, reason: str) -> None:
        """The source side defended itself (``reason``: a fixed word, e.g. ``busy``)."""
        counts = self._current()
        if reason in counts.defences or len(counts.defences) < MAX_DEFENCE_KINDS:
            counts.defences[reason] += 1

    def tor_line(self, level: str, kind: str) -> None:
        """A line the launched Tor printed once bootstrapped (``level``, and its ``kind``: Tor's
        words without circuits, relays, addresses or numbers)."""
        counts = self._current()
        if level == "warn":
            counts.tor_warnings += 1
        key = f"[{level}] {kind}"
        if key in counts.tor_lines or len(counts.tor_lines) < MAX_TOR_KINDS:
            counts.tor_lines[key] += 1

    @staticmethod
    def _describe(counts: DayCounts, description: str) -> None:
        if description in counts.failures or len(counts.failures) < MAX_FAILURE_KINDS:
            counts.failures[description] += 1

    def take_ended(self) -> list[DayCounts]:
        """The days that have ended, oldest first; they are forgotten here."""
        self._current()
        ended, self._ended = self._ended, []
        return ended

    def restore(self, saved: DayCounts) -> None:
        """Counts a clean shutdown kept: today's are added to, an ended day waits for its report."""
        if saved.day == self.today.day:
            today = self.today
            today.messages += saved.messages
            today.files += saved.files
            today.not_stored += saved.not_stored
            today.errors += saved.errors
            today.failures.update(saved.failures)
            today.tor_warnings += saved.tor_warnings
            today.tor_lines.update(saved.tor_lines)
            today.defences.update(saved.defences)
            today.add_desks(saved.desks)
        elif saved.day < self.today.day:
            self._ended.insert(0, saved)


class DailyReport(Service):
    """Emits ``submissions.daily`` for each ended day, just after midnight UTC."""

    name = "daily-report"  # type: ignore[assignment]  # (Twisted types Service.name as None)

    def __init__(self, reactor: Any, activity: SourceActivity, events: Any, db: Any,
                 desks: Callable[[], Iterable[tuple[str, str]]] = tuple) -> None:
        """``desks``: the instance's desks now, as (uuid, name), the default first."""
        self._reactor = reactor
        self.activity = activity
        self._events = events
        self._db = db
        self._desks = desks
        self._call: Any = None

    def restore_saved_blocking(self) -> None:
        """At start-up, before the reactor runs: take back what the last clean shutdown kept."""
        stored = self._db.run_blocking(queries.get_settings).get(SETTINGS_KEY)
        if stored is None:
            return
        saved = DayCounts.from_json(stored)
        if saved is not None:
            self.activity.restore(saved)
        self._db.run_blocking(queries.delete_setting, SETTINGS_KEY)

    def startService(self) -> None:
        super().startService()
        self.report_ended_days()
        self._schedule()

    def stopService(self) -> Any:
        super().stopService()
        cancel(self._call)
        self._call = None
        ended = self.activity.take_ended()
        if ended:  # the midnight report was still to run: report it next time
            self.activity.restore(ended[0])
        today = self.activity.today
        # The database is still open here (it closes after the services stop).
        return self._db.run(queries.set_setting, SETTINGS_KEY, today.as_json())

    def _schedule(self) -> None:
        now = self._reactor.seconds()
        next_midnight = (int(now) // DAY + 1) * DAY
        # A second past midnight: the clock has certainly moved into the new day.
        self._call = self._reactor.callLater(next_midnight - now + 1, self._at_midnight)

    def _at_midnight(self) -> None:
        self._call = None
        self.report_ended_days()
        self._schedule()

    def report_ended_days(self) -> list[DayCounts]:
        """One ``submissions.daily`` line per ended day (what the midnight timer runs). -> them."""
        ended = self.activity.take_ended()
        for counts in ended:
            try:
                self._events.emit(EVENT, day=counts.day, messages=counts.messages, files=counts.files,
                                  not_stored=counts.not_stored, errors=counts.errors)
            except OSError as e:
                _log.error("security event {event} not written: {error}", event=EVENT, error=e.strerror)
            self._report_desks(counts)
            for description, n in sorted(counts.failures.items()):
                _log.error("source requests on {day}: {n} x {description}", day=counts.day, n=n,
                           description=description)
            for reason, n in sorted(counts.defences.items()):
                _log.info("source side defences on {day}: {n} x {reason}", day=counts.day, n=n, reason=reason)
            try:
                self._events.emit(TOR_EVENT, day=counts.day, count=counts.tor_warnings)
            except OSError as e:
                _log.error("security event {event} not written: {error}", event=TOR_EVENT, error=e.strerror)
            for line, n in sorted(counts.tor_lines.items()):
                say = _log.warn if line.startswith("[warn]") else _log.info
                say("Tor's log on {day}: {n} x {line}", day=counts.day, n=n, line=line)
        return ended

    def _report_desks(self, counts: DayCounts) -> None:
        """With several desks, one ``submissions.daily.desk`` line for each, zeros too (as the
        day's line, its presence says nothing); a desk removed since is named by its uuid."""
        desks = list(self._desks())
        known = {uuid for uuid, _ in desks}
        desks += [(uuid, uuid) for uuid in sorted(counts.desks) if uuid not in known]
        if len(desks) < 2:
            return
        for uuid, name in desks:
            sent = counts.desks.get(uuid, collections.Counter())
            try:
                self._events.emit(DESK_EVENT, day=counts.day, desk=name, messages=sent["messages"], files=sent["files"])
            except OSError as e:
                _log.error("security event {event} not written: {error}", event=DESK_EVENT, error=e.strerror)
