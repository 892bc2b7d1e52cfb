"""Composition: build the whole DeadDrop service tree from a ``Config``.

Blocking set-up (directories, peppers, the submission key import, database migration and
crash recovery) happens here, before the reactor runs; once it runs, every blocking call goes
through a thread pool.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from twisted.application.internet import TimerService
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger

from deaddrop.codenames import check_designation_space
from deaddrop.config import Config, ConfigError
from deaddrop.crypto.gpg import Keyring
from deaddrop.crypto.kdf import CodenameKdf, Peppers
from deaddrop.crypto.pool import WorkerPool
from deaddrop.crypto.streaming import EncryptionTarget
from deaddrop.daily_report import DailyReport, SourceActivity
from deaddrop.events import SecurityEvents
from deaddrop.settings import InstanceSettings
from deaddrop.source_texts import SourceTexts
from deaddrop.sources import Newsroom, SourceQueues
from deaddrop.store import queries
from deaddrop.store.db import SCHEMA_VERSION, Database
from deaddrop.store.disk_space import DiskReserve, DiskSpace
from deaddrop.store.files import Store
from deaddrop.submission_key import KEY_FILE as SUBMISSION_KEY_FILE, use_submission_key
from deaddrop.throttle import FailureThrottle
from deaddrop.transport.connections import ConnectionLimits, budget_for, raise_fd_limit
from deaddrop.transport.listeners import ListenerService
from deaddrop.web.journalist.wiring import add_journalist_interface
from deaddrop.web.sessions import SessionStore
from deaddrop.web.source.app import SourceInterface

_log = Logger()


class DeadDropService(MultiService):
    def __init__(self, config: Config, reactor: Any) -> None:
        super().__init__()
        self.config = config
        self.reactor = reactor
        self.pools: list[WorkerPool] = []
        self.closers: list[Callable[[], None]] = []

    def startService(self) -> None:
        for pool in self.pools:
            pool.start()
        super().startService()
        newsroom = getattr(self, "newsroom", None)
        if newsroom is not None:
            # One timed Argon2id run, so that codenames turned away by their tag are answered
            # as late as a check would answer them from the first one on.
            self.calibrated = newsroom.calibrate().addErrback(
                lambda f: _log.error("Argon2id calibration failed: {e}", e=f.type.__name__))

    def stopService(self) -> Any:
        d = super().stopService()
        newsroom = getattr(self, "newsroom", None)
        if newsroom is not None:
            newsroom.abort_streams()
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

    exit_status = 0


def build_service(config: Config, reactor: Any = None) -> DeadDropService:
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    config = config.validated()
    top = DeadDropService(config, reactor)
    _budget_connections(top)
    os.makedirs(config.data_dir, mode=0o700, exist_ok=True)
    os.chmod(config.data_dir, 0o700)
    # One server per data dir: a second one would run crash recovery on live uploads.
    top.closers.append(_lock_data_dir(config.data_dir))

    events = SecurityEvents(config.path("logs", "security.jsonl"))
    top.events = events
    top.closers.append(events.close)

    keyring = Keyring(config.path("gnupg"), config.gpg_binary)
    top.closers.append(keyring.stop_agent)
    try:
        submission_armored, fingerprint, replaced = use_submission_key(config, keyring, events)
    except BaseException:
        # A refused key ends the start here: let go of the data dir (a caller may try again).
        for close in reversed(top.closers):
            close()
        raise
    key_copy = config.path(SUBMISSION_KEY_FILE)
    _log.info("submission key fingerprint {fingerprint}", fingerprint=fingerprint)
    if replaced is not None:
        _log.warn("*** the submission key was REPLACED (--replace-submission-key): {previous} -> {fingerprint} ***",
                  previous=replaced, fingerprint=fingerprint)
    if config.demo:
        _log.warn("*** DEMO INSTANCE: the submission key is a throwaway demo key. Never use this for real sources. ***")

    db = Database(reactor, config.path("db.sqlite"))
    schema_backup = db.open()
    top.closers.append(db.close)
    if schema_backup is not None:
        _log.info("database upgraded to schema version {v}; the previous one is kept in {path}",
                  v=SCHEMA_VERSION, path=schema_backup)
    # The designation lists against this instance: a new source must find a free one.
    check_designation_space(db.run_blocking(queries.count_sources))
    settings = InstanceSettings(config.organisation_name, config.max_upload_size,
                                retention_days=config.retention_days).apply_stored(
        db.run_blocking(queries.get_settings)
    )

    # Source work is admitted to crypto_threads slots; the one extra thread keeps journalist
    # work (passphrase checks, replies) from waiting behind a full queue of source Argon2id.
    # Below the reactor's priority: a flood of Argon2id work slows Argon2id, not every page.
    crypto_pool = WorkerPool(reactor, "deaddrop-crypto", max_threads=config.crypto_threads + 1, niceness=10)
    stream_pool = WorkerPool(reactor, "deaddrop-stream", max_threads=config.stream_threads)
    message_pool = WorkerPool(reactor, "deaddrop-messages", max_threads=config.message_threads)
    io_pool = WorkerPool(reactor, "deaddrop-io", max_threads=8)
    top.pools += [crypto_pool, stream_pool, message_pool, io_pool]
    queues = SourceQueues.build(crypto_pool, config.crypto_threads, message_pool, config.message_threads,
                                stream_pool, config.stream_threads, config.uploads_per_source)

    store = Store(config.data_dir)
    newsroom = Newsroom(
        reactor=reactor,
        db=db,
        store=store,
        keyring=keyring,
        kdf=CodenameKdf(Peppers.load_or_create(config.data_dir), config.kdf_cost),
        crypto_pool=crypto_pool,
        stream_pool=stream_pool,
        io_pool=io_pool,
        encryption=EncryptionTarget(config.gpg_binary, keyring.homedir, key_copy),
        submission_fingerprint=fingerprint,
        events=events,
        queues=queues,
        message_pool=message_pool,
        # Uploads are written (encrypted) to the store's temp folder, on the store's file system.
        disk=DiskSpace(store.tmp, DiskReserve.parse(config.disk_reserve)),
        activity=SourceActivity(),
        max_pending_sources=config.max_pending_sources,
    )
    report = newsroom.recover_blocking()
    _log.info(
        "store recovery: {t} temp files removed, {r} rows without file removed, {f} files without row removed",
        t=report.temp_files_removed, r=report.rows_without_file, f=report.files_without_row,
    )
    top.newsroom = newsroom
    top.settings = settings
    top.db = db

    top.source_texts = SourceTexts.from_stored(db.run_blocking(queries.get_settings))
    # A deleted source's sessions are emptied by the source interface itself (it says why).
    source_sessions = SessionStore("dd_source", config.source_session_idle, config.source_session_lifetime)
    top.circuit_closer = _circuit_closer(top, config)
    source = SourceInterface(
        newsroom=newsroom,
        sessions=source_sessions,
        settings=settings,
        events=events,
        submission_key_armored=submission_armored,
        codename_words=config.codename_words,
        login_throttle=FailureThrottle(config.source_login_failures_per_minute, 60.0),
        demo=config.demo,
        circuit_closer=top.circuit_closer,
        texts=top.source_texts,
    )
    top.source = source
    top.source_listener = ListenerService(reactor, config.source_listen, source.site(reactor, top.source_connections), top.fatal)
    top.source_listener.setServiceParent(top)
    sweeper = TimerService(60.0, source_sessions.sweep)
    sweeper.clock = reactor
    sweeper.setServiceParent(top)
    pending_max_age = config.pending_source_hours * 3600.0
    purger = TimerService(min(600.0, pending_max_age / 4), _purge_quietly, newsroom, pending_max_age)
    purger.clock = reactor
    purger.setServiceParent(top)
    add_journalist_interface(top, config, reactor)
    _add_tor(top, config, reactor)
    _add_retention(top, reactor)
    if newsroom.disk is not None:
        from deaddrop.disk_watch import DiskWatch

        top.disk_watch = DiskWatch(reactor, newsroom.disk, settings, events)
        top.disk_watch.setServiceParent(top)
    top.daily_report = DailyReport(reactor, newsroom.activity, events, db)
    top.daily_report.restore_saved_blocking()
    top.daily_report.setServiceParent(top)
    _add_digest(top, config, reactor)
    _add_status_file(top, config, reactor, io_pool, fingerprint)
    _add_file_times(top, config, reactor, io_pool)
    return top


def _add_file_times(top: DeadDropService, config: Config, reactor: Any, io_pool: WorkerPool) -> None:
    """Every file and folder of the data dir cut to the day, now and after every midnight UTC."""
    from deaddrop.file_times import FileTimeNormaliser

    top.file_times = FileTimeNormaliser(reactor, config.data_dir, io_pool)
    top.file_times.setServiceParent(top)


def _add_retention(top: DeadDropService, reactor: Any) -> None:
    from deaddrop.retention import Retention, retention_timer

    top.retention = Retention(top.newsroom, top.settings, top.events)
    top.retention_timer = retention_timer(reactor, top.retention)
    top.retention_timer.setServiceParent(top)


def _add_digest(top: DeadDropService, config: Config, reactor: Any) -> None:
    """The encrypted digest mail, when ``--smtp-server`` is given (see ``deaddrop.digest``)."""
    top.digest = None
    if config.smtp_server is None:
        return
    from deaddrop._smtp import SmtpTarget, parse_server
    from deaddrop.digest import DigestService

    host, port = parse_server(config.smtp_server)
    assert config.smtp_from is not None  # validated
    target = SmtpTarget(host, port, config.smtp_tls, config.smtp_from,
                        os.path.abspath(config.smtp_tls_ca) if config.smtp_tls_ca else None)
    top.digest = DigestService(reactor=reactor, clock=reactor, db=top.db, pool=top.newsroom.crypto_pool,
                               events=top.events, target=target, interval_minutes=config.notify_interval_minutes,
                               gpg_binary=config.gpg_binary, homedir=config.path("digest-gnupg"))
    top.digest.setServiceParent(top)
    _log.info("digest mail: every {minutes} min via {server}", minutes=config.notify_interval_minutes,
              server=target.describe())


def _add_status_file(top: DeadDropService, config: Config, reactor: Any, io_pool: WorkerPool,
                     fingerprint: str) -> None:
    """``DATA/status.json`` for ``deaddrop-admin status`` (see ``runtime_status``)."""
    from deaddrop.runtime_status import StatusFile
    from deaddrop.web.journalist.wiring import find_ca

    found = find_ca(config)
    cert = config.journalist_tls_cert or (config.path("tls", "server.pem") if found else None)
    paths = {
        "journalist_ca": found[0] if found else None,
        "journalist_crl": found[1] if found else None,
        "journalist_tls_cert": os.path.abspath(cert) if cert else None,
        "journalist_tls_key": os.path.abspath(config.journalist_tls_key) if config.journalist_tls_key else None,
    }

    def describe() -> dict[str, Any]:
        tor = getattr(top, "tor", None)
        return dict(
            paths,
            tor_mode=config.tor,
            tor_state=tor.state if tor is not None else "none",
            source_onion=getattr(tor, "onion_address", None) if tor is not None else None,
            submission_key_fingerprint=fingerprint,
            source_session_minutes=config.source_session_minutes,
            journalist_session_minutes=config.journalist_session_minutes,
            demo=config.demo,
            digest=top.digest.describe() if top.digest is not None else {"enabled": False},
            start_options=list(config.start_options),
        )

    top.status_file = StatusFile(reactor, config.data_dir, describe, io_pool)
    top.status_file.setServiceParent(top)


def _purge_quietly(newsroom: Newsroom, max_age: float) -> Deferred:
    """One round of the pending-source purge; a failure is logged and the next round retries."""
    d = newsroom.purge_pending_sources(max_age)
    # Only the error's type: a message could carry a store path, which names a source.
    d.addErrback(lambda f: _log.error("pending-source purge failed: {error}", error=f.type.__name__))
    return d


def _budget_connections(top: DeadDropService) -> None:
    """Raise RLIMIT_NOFILE to its hard limit and split the sockets it allows: the source
    listeners (plain and Tor-only, one budget) may never take the journalist's reserve."""
    fd_limit = raise_fd_limit()
    budget = budget_for(fd_limit)
    reserve = max(32, budget.total // 10)
    top.connection_budget = budget
    top.source_connections = ConnectionLimits(budget, max_connections=budget.total - reserve,
                                              reserve_for_others=reserve)
    _log.info("connections: at most {total} ({source} for sources) of {fds} file descriptors",
              total=budget.total, source=budget.total - reserve, fds=fd_limit)


def _lock_data_dir(data_dir: str) -> Callable[[], None]:
    """Hold an exclusive lock on ``DATA/server.lock`` for the server's lifetime."""
    import fcntl

    path = os.path.join(data_dir, "server.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(f"another DeadDrop server is already running on {data_dir} (it holds {path})")
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())

    def release() -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return release


def _add_tor(top: DeadDropService, config: Config, reactor: Any) -> None:
    """Publish the source interface (and optionally the journalist one) as onion services."""
    if config.tor == "none":
        _log.warn("--tor none: the source interface is NOT published as an onion service (development only)")
        return
    from deaddrop.tor import make_tor_service, target_of

    journalist_listener = getattr(top, "journalist_listener", None)
    journalist_target = None
    if config.journalist_onion:
        if journalist_listener is None:
            raise ConfigError("--journalist-onion needs the journalist interface (give --journalist-ca)")
        journalist_target = lambda: target_of(journalist_listener.port)  # noqa: E731
    source_proxy_target = None
    if config.tor == "launch":
        source_proxy_target = add_tor_only_listener(top, config, reactor)
    else:
        _log.warn(
            "attached to a running Tor: its onion connections carry no circuit id, so all onion "
            "visitors share one budget (per-circuit budgets need --tor launch)"
        )
    top.tor = make_tor_service(
        reactor,
        data_dir=config.data_dir,
        mode=config.tor,
        tor_binary=config.tor_binary,
        tor_options=list(config.tor_options),
        source_target=lambda: target_of(top.source_listener.port),
        source_proxy_target=source_proxy_target,
        pow=config.tor_pow,
        journalist_target=journalist_target,
        # The journalist listener speaks TLS: publish it on the onion's port 443.
        journalist_onion_port=443,
        events=top.events,
        on_fatal=top.fatal,
        # A production instance that never reaches the Tor network stops, for its supervisor to
        # restart; a demo keeps serving on 127.0.0.1 and keeps trying (a newcomer offline).
        bootstrap_timeout=None if config.demo else 180.0,
        # Progress and the published address, for the admin watching the console (twistd -n).
        report=lambda line: _log.info("{line}", line=line),
        # What Tor prints once the onion is up may be about a visitor: counted for the day.
        count_line=top.newsroom.activity.tor_line,
    )
    top.tor.setServiceParent(top)


def _circuit_closer(top: DeadDropService, config: Config) -> Any:
    """For the web layer: closes a circuit that keeps flooding (CLOSECIRCUIT on our Tor, made
    later by ``_add_tor``). Only a launched Tor exports circuit ids; otherwise nothing to close."""
    from deaddrop.transport.circuits import NoCloser

    if config.tor != "launch":
        return NoCloser()
    from deaddrop.tor import TorCircuitCloser

    return TorCircuitCloser(lambda: getattr(top, "tor", None))


TOR_LISTENER_BACKLOG = 4096


def add_tor_only_listener(top: DeadDropService, config: Config, reactor: Any,
                          wrap: Callable[[Any], Any] = lambda factory: factory) -> Any:
    """The source site again, on a listener only the launched Tor connects to: a unix socket in
    ``DATA/tor/`` (0700), where each connection starts with Tor's PROXY header naming its
    circuit. ``--source-listen`` stays header-free for direct loopback use (one shared bucket).

    ``wrap`` is applied to the listener's factory, inside the PROXY parsing: bench/_tor_like.py
    adds Tor's own stream handling there, to run this listener without a Tor.

    Returns the onion target for the torrc (``unix:PATH`` or a callable giving 127.0.0.1:PORT).
    """
    from twisted.internet.endpoints import quoteStringArgument
    from twisted.protocols.haproxy import proxyEndpoint

    from deaddrop.tor import keys, target_of
    from deaddrop.transport.circuits import from_tor

    tor_dir = keys.tor_dir(config.data_dir)
    keys.ensure_private_dir(tor_dir)
    path = os.path.join(tor_dir, "source.sock")
    # A connect to a unix socket whose accept queue is full fails at once (EAGAIN) instead of
    # waiting as a TCP SYN would, and Tor then fails the stream: under a flood the reactor
    # may accept late, so the queue is as deep as the kernel allows (net.core.somaxconn).
    if len(path.encode()) <= 100:  # sockaddr_un holds 108 bytes
        inner = f"unix:{quoteStringArgument(path)}:mode=600:backlog={TOR_LISTENER_BACKLOG}"
        target: Any = f"unix:{path}"
    else:
        # Too long for a socket: loopback TCP on a port the kernel picks. Local processes
        # could then send a PROXY header too; a short --data-dir avoids that.
        _log.warn("the data directory path is too long for a unix socket: Tor reaches the source site over loopback TCP")
        inner = f"tcp:0:interface=127.0.0.1:backlog={TOR_LISTENER_BACKLOG}"
        target = lambda: target_of(top.source_tor_listener.port)  # noqa: E731
    endpoint = proxyEndpoint(serverFromString(reactor, inner))
    top.source_tor_listener = ListenerService(
        reactor, f"haproxy:{inner}", wrap(from_tor(top.source.site(reactor, top.source_connections))), top.fatal,
        endpoint=endpoint,
    )
    top.source_tor_listener.setServiceParent(top)
    return target
