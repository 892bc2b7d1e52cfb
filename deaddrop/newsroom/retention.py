# -*- test-case-name: tests.integration.test_retention -*-
"""Retention: submissions and replies older than N days are deleted by a daily timer (N: the
instance's setting, or a desk's own, see ``retention_queries``).

Deletion is the one a journalist's manual delete does (rows first, so they are gone for every
reader at once; then the files through the store), and a source left with nothing and no
activity for N days is deleted like a manual "delete source": its folder, its key pair, its
row and any logged-in session. The security log gets counts only. Activity means a submission
or a reply (``sources.last_updated``); logins are not recorded anywhere, by design.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from twisted.application.internet import TimerService
from twisted.internet.defer import inlineCallbacks
from twisted.logger import Logger

from deaddrop.store import retention_queries as rq

DAY = 86400.0
MAX_DAYS = 36500

_log = Logger(namespace="deaddrop.retention")  # the name its log lines carried before the module moved


class Retention:
    def __init__(self, newsroom: Any, settings: Any, events: Any, clock: Callable[[], float] = time.time) -> None:
        self._newsroom = newsroom
        self._settings = settings
        self._events = events
        self._clock = clock
        self._running = False

    @inlineCallbacks
    def run_once(self):
        """One pass with the current setting. -> the counts deleted, or None when off (or busy)."""
        days = self._settings.retention_days or None
        if self._running:
            return None
        newsroom = self._newsroom
        # A desk may keep things for its own number of days (issue 29), with the setting off too.
        if days is None and not (yield newsroom.db.run(rq.any_desk_retention)):
            return None
        self._running = True
        try:
            now = self._clock()
            submissions = yield newsroom.db.run(rq.expire_submissions, now, days)
            replies = yield newsroom.db.run(rq.expire_replies, now, days)
            for fid, name in submissions + replies:
                yield newsroom.crypto_pool.run(newsroom.store.remove, fid, name)
            sources = yield newsroom.db.run(rq.idle_empty_sources, now, days)
            deleted = 0
            for source_id in sources:
                if (yield newsroom.delete_source(source_id)):
                    deleted += 1
            counts = {"submissions": len(submissions), "replies": len(replies), "sources": deleted}
            if any(counts.values()):
                self._events.emit("retention.deleted", count=days or 0, **counts)
            return counts
        finally:
            self._running = False


def retention_timer(reactor: Any, retention: Retention) -> TimerService:
    """Daily, and once at start-up (a server restarted every night still expires things)."""

    def run() -> Any:
        return retention.run_once().addErrback(lambda f: _log.failure("retention pass failed", f))

    timer = TimerService(DAY, run)
    timer.clock = reactor
    return timer
