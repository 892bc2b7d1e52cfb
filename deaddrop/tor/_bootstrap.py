"""Watching Tor bootstrap: progress lines, the stall explanation, and Tor's repeats folded.

Progress comes from ``status/bootstrap-phase`` and ``STATUS_CLIENT`` events on the attempt's
control connection. With no progress for ``Tuning.stall_warning`` the watch says once, plainly,
that the source onion is not reachable yet and why (``tor.bootstrap.stalled``). From then on a
[warn] of Tor's that repeats one already logged is counted instead of logged, so that it does
not scroll the explanation away; every ``Tuning.stall_reminder`` the explanation is given again
with that count.
"""
from __future__ import annotations

from typing import Callable

from twisted.logger import Logger

from deaddrop.tor import _control
from deaddrop.tor._attempt import Attempt, Tuning, cancel, one_line
from deaddrop.tor._process import line_kind

_log = Logger(namespace="deaddrop.tor")


class BootstrapWatch:
    """Bootstrap progress of the current attempt, for the log, the console and the events."""

    def __init__(
        self,
        reactor,
        *,
        events,
        tuning: Tuning,
        say: Callable[[str], None],
        bootstrap_timeout: float | None,
        ever_ready: Callable[[], bool],
        current: Callable[[], Attempt | None],
    ) -> None:
        self._reactor = reactor
        self._events = events
        self._tuning = tuning
        self._say = say
        self._bootstrap_timeout = bootstrap_timeout
        self._ever_ready = ever_ready
        self._current = current
        self._stall_reported = False
        # After the stall explanation, Tor's repeated bootstrap warnings (every few seconds
        # offline: "Problem bootstrapping. Stuck at 14%", "1 connections have failed") are
        # counted, not logged: they would scroll the explanation away. A new kind is still
        # logged once; the count comes with the explanation again every stall_reminder.
        self._warning_kinds: set[str] = set()
        self._folded = 0
        self._folded_last: str | None = None
        self._reminder = None
        # The latest bootstrap state of any attempt, for the startup timeout's message.
        self.last_progress: tuple[int | None, str | None, str | None] = (None, None, None)

    # -- progress ---------------------------------------------------------------------------

    def status_client(self, attempt: Attempt, text: str) -> None:
        """A ``STATUS_CLIENT`` event's text."""
        self.progress(attempt, _control.parse_bootstrap(text))

    def progress(self, attempt: Attempt, info: dict | None) -> None:
        if info is None or not attempt.alive:
            return
        if info["warning"]:
            attempt.warning = one_line(info["warning"])
        progress, summary = info["progress"], info["summary"]
        self.last_progress = (progress, summary, attempt.warning)
        if progress != attempt.progress:
            attempt.progress, attempt.summary = progress, summary
            self.arm_stall_timer(attempt)
            self._events.emit("tor.bootstrap", progress=progress, summary=summary)
            _log.info("Tor bootstrap {progress}%: {summary}", progress=progress, summary=summary)
            self._say(f"Tor bootstrap {progress}%: {summary}")
        if progress >= 100 and not attempt.bootstrapped.called:
            attempt.bootstrapped.callback(None)

    def bootstrapped(self, attempt: Attempt) -> None:
        """The attempt reached 100%: no stall to report, nothing left to fold."""
        cancel(attempt.stall_timer)
        self._stall_reported = False  # a later relaunch that stalls is worth saying again
        self.end_folding()

    # -- the stall explanation ----------------------------------------------------------------

    def arm_stall_timer(self, attempt: Attempt) -> None:
        cancel(attempt.stall_timer)
        if self._stall_reported or attempt.bootstrapped.called:
            return
        attempt.stall_timer = self._reactor.callLater(self._tuning.stall_warning, self._stalled, attempt)
        attempt.timers.append(attempt.stall_timer)

    def _stalled(self, attempt: Attempt) -> None:
        """No bootstrap progress for a minute: say once, plainly, what it means."""
        if not attempt.alive or attempt.bootstrapped.called or self._stall_reported:
            return
        self._stall_reported = True
        self._events.emit(
            "tor.bootstrap.stalled", progress=attempt.progress, summary=attempt.summary, detail=attempt.warning
        )
        message = self._stall_message(attempt)
        _log.warn("{text}", text=message)
        self._say(message)
        self._reminder = self._reactor.callLater(self._tuning.stall_reminder, self._remind)

    def _stall_message(self, attempt: Attempt) -> str:
        minutes = self._tuning.stall_warning / 60
        where = f"stuck at {attempt.progress}% ({attempt.summary})" if attempt.progress is not None else "not started"
        # Tor sometimes puts only a bare reason code here ("DONE"), which tells an admin nothing.
        readable = attempt.warning and not attempt.warning.isupper()
        why = f"; Tor says: {attempt.warning}" if readable else ""
        message = (
            f"The source onion is not reachable yet: Tor has made no bootstrap progress for "
            f"{minutes:g} minute{'s' if minutes != 1 else ''} ({where}{why}). Tor needs to reach the "
            "Tor network over the Internet to publish the onion; check this machine's Internet "
            "access and firewall. On a machine without Internet access, start with --tor none "
            "(no onion; the source interface is then only on --source-listen, for development)."
        )
        if not self._ever_ready() and self._bootstrap_timeout is None:
            message += (" Meanwhile DeadDrop keeps serving (the source interface on 127.0.0.1) and Tor keeps "
                        "trying; the onion is published as soon as Tor connects.")
        elif not self._ever_ready():
            message += (
                f" If Tor has still not connected {self._bootstrap_timeout:g} s after it started, "
                "DeadDrop stops, so that its supervisor can start it again."
            )
        return message

    def fold(self, message: str) -> bool:
        """A [warn] of Tor's before bootstrap: True if it is only counted (see _warning_kinds)."""
        kind = line_kind(message)
        if not self._stall_reported or kind not in self._warning_kinds:
            if len(self._warning_kinds) < 200:
                self._warning_kinds.add(kind)
            return False
        self._folded += 1
        self._folded_last = message
        return True

    def _remind(self) -> None:
        """Every stall_reminder while Tor is stuck: the explanation again, with how many of
        Tor's warnings were folded meanwhile (none folded: Tor is quiet, so is this)."""
        self._reminder = None
        attempt = self._current()
        if not self._stall_reported:
            return
        if self._folded and attempt is not None:
            minutes = self._tuning.stall_reminder / 60
            message = (
                f"{self._stall_message(attempt)} Tor repeated its warnings {self._folded} "
                f"time{'s' if self._folded != 1 else ''} in the last {minutes:g} minute{'s' if minutes != 1 else ''} "
                f"(not shown; the last: {one_line(self._folded_last or '')})."
            )
            self._folded, self._folded_last = 0, None
            _log.warn("{text}", text=message)
            self._say(message)
        self._reminder = self._reactor.callLater(self._tuning.stall_reminder, self._remind)

    def end_folding(self) -> None:
        cancel(self._reminder)
        self._reminder = None
        self._folded, self._folded_last = 0, None

    # -- timeouts -----------------------------------------------------------------------------

    def startup_timeout_message(self, failures: int, last_exit: str | None) -> str:
        """No attempt bootstrapped within the timeout of the service's start."""
        limit = f"{self._bootstrap_timeout:g}"
        progress, summary, warning = self.last_progress
        if progress is None:
            message = f"Tor did not become ready within {limit} s (no working control connection)"
        else:
            message = f"Tor did not finish bootstrapping within {limit} s (stuck at {progress}%: {summary})"
            if warning:
                message += f"; last problem: {warning}"
        if last_exit is not None:
            message += f"; Tor ended {failures} time{'s' if failures != 1 else ''} before it was ready (last: {last_exit})"
        return message

    def relaunch_timeout_message(self, attempt: Attempt) -> str:
        """A relaunch of a Tor that was ready before did not bootstrap in time."""
        limit = f"{self._bootstrap_timeout:g}"
        if attempt.progress is None:
            return f"Tor did not become ready within {limit} s (no working control connection)"
        message = f"Tor did not finish bootstrapping within {limit} s (stuck at {attempt.progress}%: {attempt.summary})"
        if attempt.warning:
            message += f"; last problem: {attempt.warning}"
        return message
