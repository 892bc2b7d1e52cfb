"""One attempt at running Tor, and the timings every part of the Tor service shares.

An *attempt* is one Tor process (``launch``) or one control connection (``control:``) from
start to end. Everything an attempt holds (its timers, its control connection, the onions
published on it) dies with it; the supervisor (:mod:`deaddrop.tor._service`) then starts a new
one. The parts of the service (launcher, bootstrap watch, publisher) each act on the attempt
they are handed and check ``attempt.alive`` after every wait.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, DeferredLock

from deaddrop.tor import keys
from deaddrop.tor._process import TorFiles, TorProcessProtocol


@dataclass(frozen=True)
class Tuning:
    """Timings; the defaults are for production, tests shrink them."""

    retry_initial: float = 1.0  # first relaunch delay, doubled per consecutive failure...
    retry_max: float = 60.0  # ...up to this
    stable_after: float = 60.0  # up this long after being ready: the back-off starts again
    check_interval: float = 60.0  # descriptor check period
    publish_grace: float = 120.0  # no UPLOADED this long after ADD_ONION: republish
    stale_after: float = 3 * 3600.0  # no UPLOADED for this long (Tor re-uploads <= 2 h): republish
    clients_interval: float = 10.0  # how often the journalist clients directory is re-read
    control_grace: float = 2.0  # control lost: wait this long for the exit status
    stop_timeout: float = 10.0  # SIGTERM, then SIGKILL after this
    connect_retry: float = 0.2  # launched Tor: control connection retry period...
    connect_tries: int = 50  # ...and count
    stall_warning: float = 60.0  # no bootstrap progress this long: say once why the onion is not up
    stall_reminder: float = 300.0  # meanwhile Tor's repeated warnings are folded: their count this often


class Aborted(Exception):
    """The attempt ended while something was waiting on it."""


@dataclass
class Onion:
    """One onion service as published on one attempt's Tor."""

    which: str
    key: keys.OnionKey
    clients: dict[str, str] = field(default_factory=dict)
    added_at: float = 0.0
    uploaded_at: float | None = None
    published: bool = False
    failure_reported: bool = False


class Attempt:
    def __init__(self, number: int) -> None:
        self.number = number
        self.alive = True
        self.process: TorProcessProtocol | None = None
        self.files: TorFiles | None = None
        self.control: Any = None  # txtorcon's TorControlProtocol, once connected
        self.connected: Deferred = Deferred()
        self.bootstrapped: Deferred = Deferred()
        self.timers: list = []
        self.deadline = None
        self.progress: int | None = None
        self.summary: str | None = None
        self.warning: str | None = None
        self.ready = False
        self.ready_at: float | None = None
        self.onions: dict[str, Onion] = {}
        self.lock = DeferredLock()
        self.connect_tries = 0
        # journalist onion: None (not yet looked at), "published", "no_clients" or an error
        self.journalist_status: str | None = None
        self.stall_timer = None

    def cancel_timers(self) -> None:
        for call in self.timers:
            if call.active():
                call.cancel()
        self.timers = []


def cancel(call) -> None:
    """Cancel a ``callLater`` if it is still pending (None is fine)."""
    if call is not None and call.active():
        call.cancel()


def one_line(text: object) -> str:
    return " ".join(str(text).split())
