# -*- test-case-name: tests.test_answer_grid,tests.integration.test_answer_times -*-
"""When a /login or /create answer leaves: on a grid measured from the request's own arrival.

Every answer whose work went through Argon2id (a login whose tag some source has, a codename
turned away by its tag, a source made before tags, a retired one, a new codename) leaves at
``arrival + delay``, or, when its work was not done by then, at ``arrival + k * delay`` for the
first whole ``k`` by which it was, each time plus a random ``jitter`` of up to 50 ms. Its time
thus says how many delays the request's own work took, and nothing finer: not how long another
request's Argon2id run took, nor when another source logged in or was made (third security
review: a miss that waited a copy of a recent run's time let a prober date a victim's logins
to the second). The jitter is drawn afresh for each answer: it covers the few milliseconds a
reactor or a CPU busy with someone else's work adds to when a timer fires.

``delay`` is set once, at start-up, from timed Argon2id runs and the number of runs that can
go at once (``answer_delay``): long enough for one's own run behind a normal queue, with room
to spare, so the grid's first step is where nearly every answer leaves. A refusal for want of
room (``Busy``) is not held: the calm busy page comes at once, as before.

Nothing here reads a clock but the given reactor's; it keeps no record of requests.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from deaddrop.admission.queues import is_busy, timer_or_reactor

# Requests ahead of one's own that a normal moment may have (a few sources at once), run
# ``parallel`` at a time; and the room given on top for runs slower than the one timed (a
# machine busier than at start-up, a database read after the run).
NORMAL_AHEAD = 3
ANSWER_MARGIN = 2.0
# Never under this: with a cheap KDF (tests, the demo) a reactor turn or a database read would
# otherwise be a sizeable share of the delay.
MIN_DELAY = 0.1
# Delays are whole hundredths of a second.
DELAY_STEP = 0.01
# Each answer leaves at a random moment within this much after its step: what a busy reactor
# or CPU adds to a timer (measured: medians 4-12 ms later while an Argon2id run held one of two
# loaded cores) is lost in it. It is drawn, never derived from anything that happened.
JITTER = 0.05


def answer_delay(run_seconds: float, parallel: int) -> float:
    """The grid's step for Argon2id runs of ``run_seconds`` done ``parallel`` at a time: room
    for one's own run behind ``NORMAL_AHEAD`` others, times ``ANSWER_MARGIN``, rounded up to a
    hundredth, at least ``MIN_DELAY``. (Two runs at once of 0.25 s: 1.0 s.)"""
    rounds = math.ceil((NORMAL_AHEAD + 1) / max(1, parallel))
    wanted = ANSWER_MARGIN * run_seconds * rounds
    return max(MIN_DELAY, math.ceil(round(wanted / DELAY_STEP, 6)) * DELAY_STEP)


class AnswerGrid:
    """Holds each answer until its step of the grid. ``run_seconds`` is one Argon2id run as
    timed at start-up: what a codename turned away by its tag is taken to need (it runs
    nothing, but holds its circuit's place as long as a run would); ``parallel`` is how many
    runs go at once (slots, at most one per core)."""

    def __init__(self, run_seconds: float, parallel: int, timer: Any = None, jitter: float = JITTER,
                 draw: Callable[[float, float], float] = random.SystemRandom().uniform) -> None:
        self._timer = timer  # an IReactorTime (None: the global reactor; tests give a Clock)
        self.parallel = max(1, parallel)
        self.jitter = jitter
        self._draw = draw
        self.calibrate(run_seconds)

    @property
    def timer(self) -> Any:
        return timer_or_reactor(self._timer)

    def calibrate(self, run_seconds: float) -> None:
        """Set the run time (timed at start-up) and the delay it gives."""
        self.run_seconds = run_seconds
        self.delay = answer_delay(run_seconds, self.parallel)

    def release_at(self, arrival: float, done: float) -> float:
        """The first step of the grid from ``arrival`` at or after ``done``."""
        steps = max(1, math.ceil(round((done - arrival) / self.delay, 9)))
        return arrival + steps * self.delay

    def answer(self, work: Callable[[], Deferred]) -> Deferred:
        """Start ``work`` now (its arrival) and fire with its result, or its failure, at the
        grid step after it ended (plus the jitter); a ``Busy`` failure at once. Cancelling stops
        waiting for ``work`` (cancelling it too) or for the step."""
        arrival = self.timer.seconds()
        state: dict[str, Any] = {"call": None, "cancelled": False}
        running = work()

        def cancel(_: Deferred) -> None:
            state["cancelled"] = True
            if state["call"] is not None:
                if state["call"].active():
                    state["call"].cancel()
            else:
                running.cancel()

        out: Deferred = Deferred(cancel)

        def deliver(result: Any) -> None:
            if out.called:
                return
            if isinstance(result, Failure):
                out.errback(result)
            else:
                out.callback(result)

        def done(result: Any) -> None:
            if state["cancelled"]:
                return None  # nobody waits for it (a failure included)
            if isinstance(result, Failure) and is_busy(result):
                deliver(result)
                return None
            release = self.release_at(arrival, self.timer.seconds()) + self._draw(0.0, self.jitter)
            wait = max(0.0, release - self.timer.seconds())
            state["call"] = self.timer.callLater(wait, deliver, result)
            return None

        running.addBoth(done)
        return out


__all__ = ["AnswerGrid", "answer_delay", "ANSWER_MARGIN", "JITTER", "MIN_DELAY", "NORMAL_AHEAD"]
