"""The running server: a Twisted service tree with every part a typed attribute."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

from twisted.application.internet import TimerService
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from deaddrop.config import Config
from deaddrop.crypto.pool import WorkerPool
from deaddrop.newsroom.daily_report import DailyReport
from deaddrop.events import SecurityEvents
from deaddrop.newsroom.desk import Desk
from deaddrop.newsroom.accounts import Accounts
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.newsroom.source_texts import SourceTexts
from deaddrop.newsroom.newsroom import Newsroom
from deaddrop.store.db import Database
from deaddrop.transport.circuits import CircuitCloser
from deaddrop.transport.connections import ConnectionBudget, ConnectionLimits
from deaddrop.transport.listeners import ListenerService
from deaddrop.web.sessions import SessionStore

if TYPE_CHECKING:  # imported where they are built, and only when they are on
    from deaddrop.digest.schedule import DigestService
    from deaddrop.admission.disk_watch import DiskWatch
    from deaddrop.store.file_times import FileTimeNormaliser
    from deaddrop.newsroom.retention import Retention
    from deaddrop.store.runtime_status import StatusFile
    from deaddrop.tor import TorOnionService
    from deaddrop.web.journalist.app import JournalistInterface
    from deaddrop.transport.tls import JournalistTLS
    from deaddrop.web.source.app import SourceInterface

_log = Logger()


class DeadDropService(MultiService):
    """The whole server: a service tree whose parts ``build_service`` sets once. A part that may be
    off is ``None`` until then (and stays so when off)."""

    config: Config
    reactor: Any
    pools: list[WorkerPool]  # started and stopped with the tree
    closers: list[Callable[[], None]]  # called in reverse once it has stopped
    exit_status: int = 0  # 1 after ``fatal``
    # Always there once built.
    events: SecurityEvents
    db: Database
    settings: InstanceSettings
    source_texts: SourceTexts
    connection_budget: ConnectionBudget
    source_connections: ConnectionLimits
    circuit_closer: CircuitCloser
    source: SourceInterface
    source_listener: ListenerService
    accounts: Accounts
    desk: Desk
    retention: Retention
    retention_timer: TimerService
    daily_report: DailyReport
    status_file: StatusFile
    file_times: FileTimeNormaliser
    calibrated: Deferred
    newsroom: Newsroom
    # Off in some configurations.
    source_tor_listener: ListenerService | None = None  # --tor launch
    journalist: JournalistInterface | None = None  # no CA: no journalist interface
    journalist_sessions: SessionStore | None = None
    journalist_listener: ListenerService | None = None
    journalist_tls: JournalistTLS | None = None
    tor: TorOnionService | None = None  # --tor none
    digest: DigestService | None = None  # no --smtp-server
    disk_watch: DiskWatch | None = None

    def __init__(self, config: Config, reactor: Any) -> None:
        super().__init__()
        self.config = config
        self.reactor = reactor
        self.pools = []
        self.closers = []

    def startService(self) -> None:
        for pool in self.pools:
            pool.start()
        super().startService()
        # Timed Argon2id runs: they set when login and create answers leave (AnswerGrid).
        self.calibrated = self.newsroom.calibrate().addCallbacks(
            self._calibrated, lambda f: _log.error("Argon2id calibration failed: {e}", e=f.type.__name__))

    def _calibrated(self, run: float) -> None:
        answers = self.newsroom.queues.answers
        # Logins cannot make more sessions in a lifetime than this: none is ever pushed out.
        cap = self.source.sessions.make_room_for_logins(run, answers.parallel)
        _log.info("Argon2id run at start-up: {run:.3f} s; login and create answers leave {delay:.2f} s after "
                  "their request; room for {cap} source sessions", run=run, delay=answers.delay, cap=cap)

    def stopService(self) -> Any:
        d = super().stopService()
        newsroom = self.newsroom
        newsroom.submissions.abort_streams()
        _log.info("source logins since start: {runs} Argon2id checks, {decoys} codenames turned away by their tag",
                  runs=newsroom.login_runs, decoys=newsroom.login_decoys)

        def cleanup(result: Any) -> Any:
            for pool in self.pools:
                pool.stop()
            for close in reversed(self.closers):
                close()
            return result

        if isinstance(d, Deferred):
            return d.addBoth(cleanup)
        return cleanup(d)

    def fatal(self, message: str) -> None:
        """A start-up failure after the reactor began: one line, then stop with status 1."""
        sys.stderr.write(f"deaddrop: error: {message}\n")
        _log.critical("fatal: {text}", text=message)
        self.exit_status = 1
        if self.reactor.running:
            self.reactor.stop()
        else:  # failed while starting up, before the reactor counts as running
            self.reactor.callWhenRunning(self.reactor.stop)

