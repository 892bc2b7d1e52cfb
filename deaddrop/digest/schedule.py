# -*- test-case-name: tests.integration.test_digest -*-
"""The encrypted digest: every interval, one mail to each registered journalist.

Slots are fixed multiples of the interval since 1970-01-01 UTC (the default, 1440 minutes,
means 00:00 UTC every day), the same for every instance and independent of when a source
wrote: a mail goes out at every slot, also when nothing arrived. Each mail counts what arrived
since that journalist's last digest the mail server accepted (kept by database triggers, see
``digest_queries``), so an outage delays the news but never loses it.

A failed send is retried with back-off (1, 2, 4 ... minutes, at most an hour) until the next
slot, which then sends a fresh digest with everything not yet reported. Every failure is a
``digest.send_failed`` security event and shows in ``deaddrop-admin status``. The encryption
(gpg) runs in a thread pool; the sending is our own strict SMTP client over Twisted
(``smtp_client``): the reactor never blocks.

At start-up the mail server is checked once without sending anything (connect, TLS with the
certificate verified, the login if any, QUIT), so that a wrong ``--smtp-*`` setting shows in
the log and in ``deaddrop-admin status`` now rather than at the next slot.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.logger import Logger
from twisted.python.failure import Failure

from deaddrop.digest import mail, smtp
from deaddrop.delayed_calls import cancel
from deaddrop.i18n.speech import ENGLISH, Speech
from deaddrop.store import digest_queries as dq

FIRST_RETRY = 60.0
MAX_RETRY = 3600.0

_log = Logger(namespace="deaddrop.digest")  # the name its log lines carried before the module moved


def slot_of(now: float, interval: float) -> float:
    return math.floor(now / interval) * interval


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class DigestService(Service):
    def __init__(self, *, reactor: Any, clock: Any, db: Any, pool: Any, events: Any, target: smtp.SmtpTarget,
                 interval_minutes: int, gpg_binary: str, homedir: str,
                 send: Callable[..., Deferred] = smtp.send,
                 check: Callable[..., Deferred] = smtp.check,
                 speech: Callable[[str | None], Speech] = lambda code: ENGLISH) -> None:
        """``speech``: a journalist language's words for the mail (the journalist catalogue's)."""
        self.reactor = reactor  # connects
        self.clock = clock  # schedules (a Clock in tests)
        self.db = db
        self.pool = pool
        self.events = events
        self.target = target
        self.interval = interval_minutes * 60.0
        self.gpg_binary = gpg_binary
        self.homedir = homedir
        self._send = send
        self._check = check
        self.speech = speech
        self._checking: Deferred | None = None
        self.smtp_check: dict[str, Any] | None = None  # the start-up check's outcome, once known
        self._next_call: Any = None
        self._jobs: dict[int, _Job] = {}
        self.failing: dict[str, dict[str, Any]] = {}  # username -> reason, since, next retry
        self.last_slot: float | None = None
        os.makedirs(homedir, mode=0o700, exist_ok=True)
        os.chmod(homedir, 0o700)

    # -- schedule ---------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._schedule()
        self.check_server()

    def stopService(self) -> Any:
        super().stopService()
        cancel(self._next_call)
        self._next_call = None
        checking, self._checking = self._checking, None
        if checking is not None:
            checking.cancel()
        for job in list(self._jobs.values()):
            job.stop()
        return None

    def _schedule(self) -> None:
        now = self.clock.seconds()
        next_slot = slot_of(now, self.interval) + self.interval
        self._next_call = self.clock.callLater(next_slot - now, self._fire)

    def _fire(self) -> Deferred:
        slot = slot_of(self.clock.seconds(), self.interval)
        self._schedule()
        d = self.run_slot(slot)
        d.addErrback(lambda f: _log.failure("digest round failed", f))
        return d

    @inlineCallbacks
    def run_slot(self, slot: float):
        """One digest per registered journalist for ``slot``; fires when every one of them was
        sent, gave up until the next slot, or was superseded."""
        self.last_slot = slot
        recipients = yield self.db.run(dq.recipients)
        done = []
        for recipient in recipients:
            old = self._jobs.pop(recipient.journalist_id, None)
            if old is not None:
                old.stop()  # still retrying the last slot: this digest counts all of it
            job = _Job(self, recipient, slot)
            self._jobs[recipient.journalist_id] = job
            done.append(job.done)
            job.attempt()
        yield DeferredList(done, consumeErrors=True)

    # -- the start-up check ----------------------------------------------------------------

    def check_server(self) -> Deferred:
        """Try the mail server without sending mail; the outcome goes to ``smtp_check``."""
        self._checking = d = self._check(self.reactor, self.target)
        d.addCallbacks(self._check_passed, self._check_failed)
        d.addBoth(self._check_done)
        return d

    def _check_passed(self, _: Any) -> None:
        if not self.running:
            return  # stopped meanwhile
        self._record_contact("the mail server accepted the connection" +
                             (", TLS (certificate verified)" if self.target.tls != "none" else "") +
                             (" and the login" if self.target.username else ""))
        _log.info("digest mail: {server} checked: {detail}", server=self.target.describe(),
                  detail=self.smtp_check["detail"] if self.smtp_check else "")

    def _check_failed(self, f: Failure) -> None:
        if not self.running:
            return  # stopped meanwhile (the check was cancelled)
        reason, detail = smtp.failure_reason(f), smtp.failure_detail(f, self.target)
        self.smtp_check = {"ok": False, "reason": reason, "detail": detail, "at": _iso(self.clock.seconds())}
        self.events.emit("digest.check_failed", reason=reason)
        _log.error("digest mail: the check of the mail server {server} FAILED ({reason}): {detail}. Digests will "
                   "fail until the --smtp-* options are fixed and the server restarted",
                   server=self.target.describe(), reason=reason, detail=detail)

    def _check_done(self, _: Any) -> None:
        self._checking = None

    def _record_contact(self, detail: str) -> None:
        self.smtp_check = {"ok": True, "reason": None, "detail": detail, "at": _iso(self.clock.seconds())}

    # -- outcomes ---------------------------------------------------------------------------

    def _finished(self, job: "_Job") -> None:
        if self._jobs.get(job.recipient.journalist_id) is job:
            del self._jobs[job.recipient.journalist_id]

    def describe(self) -> dict[str, Any]:
        """For ``DATA/status.json`` and ``deaddrop-admin status``."""
        return {
            "enabled": True,
            "smtp_server": self.target.describe(),
            "settings": self.target.settings(),  # for deaddrop-admin digest test (no password)
            "smtp_check": dict(self.smtp_check) if self.smtp_check is not None else None,
            "interval_minutes": int(self.interval // 60),
            "last_slot": _iso(self.last_slot) if self.last_slot is not None else None,
            "next_slot": _iso(slot_of(self.clock.seconds(), self.interval) + self.interval),
            "failing": {name: dict(info) for name, info in sorted(self.failing.items())},
        }


class _Job:
    """One journalist's digest for one slot: composed once, sent until accepted or superseded."""

    def __init__(self, service: DigestService, recipient: dq.Recipient, slot: float) -> None:
        self.service = service
        self.recipient = recipient
        self.slot = slot
        self.tries = 0
        self.message: bytes | None = None
        self.done: Deferred = Deferred()
        self._retry: Any = None
        self._sending: Deferred | None = None
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        cancel(self._retry)
        self._retry = None
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.cancel()  # a digest that takes over, or a stopping server: drop the connection
        self._finish()

    def _finish(self) -> None:
        self.service._finished(self)
        if not self.done.called:
            self.done.callback(None)

    def attempt(self) -> None:
        self._retry = None
        d = self._attempt()
        d.addErrback(lambda f: _log.failure("digest attempt failed unexpectedly", f))

    @inlineCallbacks
    def _attempt(self):
        service, r = self.service, self.recipient
        self.tries += 1
        current = yield service.db.run(dq.recipient, r.journalist_id)
        if self._stopped:
            return
        if current is None or (current.email, current.fingerprint) != (r.email, r.fingerprint):
            self._finish()  # turned off or changed meanwhile: the next slot uses the new setting
            return
        if self.message is None:
            try:
                self.message = yield service.pool.run(
                    mail.compose, service.gpg_binary, service.homedir, service.target.from_addr, r.email,
                    r.public_key, self.slot, r.new_submissions, r.new_sources,
                    [(d.name, d.new_submissions, d.new_sources) for d in r.desks], service.speech(r.language))
            except mail.EncryptionFailed:
                self._failed("key_unusable", retry=False)  # the key will not mend itself
                return
        try:
            self._sending = service._send(service.reactor, service.target, r.email, self.message)
            yield self._sending
        except Exception as e:
            self._failed(smtp.failure_reason(Failure(e)), retry=True)
            return
        if self._stopped:
            return
        yield service.db.run(dq.reported, r.journalist_id, r.new_submissions, r.new_sources, r.desks)
        service.failing.pop(r.username, None)
        if service.smtp_check is not None and not service.smtp_check["ok"]:
            service._record_contact("a digest was sent since the start-up check failed")
        service.events.emit("digest.sent", username=r.username, count=self.tries)  # count: attempts it took
        self._finish()

    def _failed(self, reason: str, retry: bool) -> None:
        if self._stopped:
            return
        service = self.service
        now = service.clock.seconds()
        delay = min(FIRST_RETRY * 2 ** (self.tries - 1), MAX_RETRY)
        if retry and now + delay >= self.slot + service.interval:
            retry = False  # the next slot's digest takes over, with everything not yet reported
        info = service.failing.setdefault(self.recipient.username, {"since": _iso(now)})
        info["reason"] = reason
        info["next_retry"] = _iso(now + delay) if retry else None
        service.events.emit("digest.send_failed", username=self.recipient.username, reason=reason,
                            delay=int(delay) if retry else None)
        if retry:
            self._retry = service.clock.callLater(delay, self.attempt)
        else:
            self._finish()
