"""Composition: build the whole DeadDrop service tree from a ``Config``: the data dir, the keys, the
store and the domain, then each side, Tor and the timers.

Blocking set-up (directories, peppers, the submission key import, database migration and
crash recovery) happens here, before the reactor runs; once it runs, every blocking call goes
through a thread pool.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from twisted.logger import Logger
from twisted.python.failure import Failure

from deaddrop.newsroom.codenames import check_designation_space
from deaddrop.config import Config, ConfigError
from deaddrop.crypto.gpg import Keyring
from deaddrop.crypto.kdf import CodenameKdf, Peppers
from deaddrop.crypto.pool import WorkerPool
from deaddrop.crypto.streaming import EncryptionTarget
from deaddrop.newsroom.daily_report import DailyReport, SourceActivity
from deaddrop.events import SecurityEvents
from deaddrop.service.source_side import add_source_interface, source_login_failures
from deaddrop.service.tor_side import add_tor
from deaddrop.service.tree import DeadDropService
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.newsroom.newsroom import Newsroom, SourceQueues
from deaddrop.store import desk_queries, queries
from deaddrop.store.db import SCHEMA_VERSION, Database
from deaddrop.admission.disk_space import DiskReserve, DiskSpace
from deaddrop.store.server_lock import DataDirBusy, lock_data_dir
from deaddrop.store.files import Store
from deaddrop.submission_key import KEY_FILE as SUBMISSION_KEY_FILE, use_submission_key
from deaddrop.transport.connections import ConnectionLimits, budget_for, raise_fd_limit
from deaddrop.service.journalist_side import add_journalist_interface
from deaddrop.i18n import journalist as journalist_i18n

_log = Logger()


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
    top.closers.append(keyring.close)
    keyring.start_agent()  # before the start-up cut of file times (see Keyring.start_agent)
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
    login_throttle = source_login_failures(config)
    queues = SourceQueues.build(crypto_pool, config.crypto_threads, message_pool, config.message_threads,
                                stream_pool, config.stream_threads, config.uploads_per_source,
                                standing=login_throttle.recent_failures)

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
        encryption=EncryptionTarget(config.gpg_binary, keyring.run_home, key_copy),
        submission_fingerprint=fingerprint,
        events=events,
        queues=queues,
        message_pool=message_pool,
        # Uploads are written (encrypted) to the store's temp folder, on the store's file system.
        disk=DiskSpace(store.tmp, DiskReserve.parse(config.disk_reserve)),
        activity=SourceActivity(),
        max_pending_sources=config.max_pending_sources,
    )
    # The instance's submission key is the default desk's (issue 29); every desk's key is
    # written out and imported before the first upload.
    db.run_blocking(desk_queries.set_default_key, fingerprint, submission_armored)
    newsroom.desks.reload_blocking()
    report = newsroom.recover_blocking()
    _log.info(
        "store recovery: {t} temp files removed, {r} rows without file removed, {f} files without row removed",
        t=report.temp_files_removed, r=report.rows_without_file, f=report.files_without_row,
    )
    top.newsroom = newsroom
    top.settings = settings
    top.db = db

    add_source_interface(top, config, reactor, newsroom, submission_armored, login_throttle)
    add_journalist_interface(top, config, reactor)
    add_tor(top, config, reactor)
    _add_retention(top, reactor)
    _add_desk_reload(top, reactor)
    if newsroom.disk is not None:
        from deaddrop.admission.disk_watch import DiskWatch

        top.disk_watch = DiskWatch(reactor, newsroom.disk, settings, events)
        top.disk_watch.setServiceParent(top)
    top.daily_report = DailyReport(reactor, newsroom.activity, events, db,
                                   desks=lambda: [(d.uuid, d.name) for d in newsroom.desks.all()])
    top.daily_report.restore_saved_blocking()
    top.daily_report.setServiceParent(top)
    _add_digest(top, config, reactor)
    _add_status_file(top, config, reactor, io_pool, fingerprint)
    _add_file_times(top, config, reactor, io_pool)
    _add_read_marks(top, reactor)
    return top


def _add_read_marks(top: DeadDropService, reactor: Any) -> None:
    """The replies sources were shown today, written after midnight UTC (see ``read_marks``)."""
    from deaddrop.delayed_calls import AfterEveryMidnight

    marks, db = top.newsroom.replies.read_marks, top.db
    AfterEveryMidnight(reactor, lambda: marks.write(db), "writing the replies read").setServiceParent(top)


def _add_file_times(top: DeadDropService, config: Config, reactor: Any, io_pool: WorkerPool) -> None:
    """Every file and folder of the data dir cut to the day, now and after every midnight UTC."""
    from deaddrop.store.file_times import FileTimeNormaliser

    top.file_times = FileTimeNormaliser(reactor, config.data_dir, io_pool)
    top.file_times.setServiceParent(top)


def _add_desk_reload(top: DeadDropService, reactor: Any) -> None:
    """Desks changed by ``deaddrop-admin desk`` (another process) reach sources within seconds."""
    from twisted.application.internet import TimerService

    from deaddrop.newsroom.desks import RELOAD_SECONDS

    def failed(failure: Failure) -> None:
        # Only the error's type, as other timers log: a message could name a path.
        _log.error("reloading desks failed: {error}", error=type(failure.value).__name__)

    def reload() -> Any:
        return top.newsroom.desks.reload().addErrback(failed)

    timer = TimerService(RELOAD_SECONDS, reload)
    timer.clock = reactor
    timer.setServiceParent(top)


def _add_retention(top: DeadDropService, reactor: Any) -> None:
    from deaddrop.newsroom.retention import Retention, retention_timer

    top.retention = Retention(top.newsroom, top.settings, top.events)
    top.retention_timer = retention_timer(reactor, top.retention)
    top.retention_timer.setServiceParent(top)


def _add_digest(top: DeadDropService, config: Config, reactor: Any) -> None:
    """The encrypted digest mail, when ``--smtp-server`` is given (see ``deaddrop.digest.schedule``)."""
    top.digest = None
    if config.smtp_server is None:
        return
    from deaddrop.digest.smtp import SmtpTarget, parse_server, read_password_file
    from deaddrop.digest.schedule import DigestService

    host, port = parse_server(config.smtp_server)
    assert config.smtp_from is not None  # validated
    password_file = os.path.abspath(config.smtp_password_file) if config.smtp_password_file else None
    target = SmtpTarget(host, port, config.smtp_tls, config.smtp_from,
                        os.path.abspath(config.smtp_tls_ca) if config.smtp_tls_ca else None,
                        username=config.smtp_username, password_file=password_file,
                        password=read_password_file(password_file) if password_file else None)
    top.digest = DigestService(reactor=reactor, clock=reactor, db=top.db, pool=top.newsroom.crypto_pool,
                               events=top.events, target=target, interval_minutes=config.notify_interval_minutes,
                               gpg_binary=config.gpg_binary, homedir=config.path("digest-gnupg"),
                               speech=journalist_i18n.speech)
    top.digest.setServiceParent(top)
    _log.info("digest mail: every {minutes} min via {server}", minutes=config.notify_interval_minutes,
              server=target.describe())


def _add_status_file(top: DeadDropService, config: Config, reactor: Any, io_pool: WorkerPool,
                     fingerprint: str) -> None:
    """``DATA/status.json`` for ``deaddrop-admin status`` (see ``runtime_status``)."""
    from deaddrop.store.runtime_status import StatusFile
    from deaddrop.service.journalist_side import find_ca

    found = find_ca(config)
    cert = config.journalist_tls_cert or (config.path("tls", "server.pem") if found else None)
    paths = {
        "journalist_ca": found[0] if found else None,
        "journalist_crl": found[1] if found else None,
        "journalist_tls_cert": os.path.abspath(cert) if cert else None,
        "journalist_tls_key": os.path.abspath(config.journalist_tls_key) if config.journalist_tls_key else None,
    }

    def describe() -> dict[str, Any]:
        tor = top.tor
        return dict(
            paths,
            tor_mode=config.tor,
            tor_state=tor.state if tor is not None else "none",
            source_onion=tor.onion_address if tor is not None else None,
            submission_key_fingerprint=fingerprint,
            source_session_minutes=config.source_session_minutes,
            journalist_session_minutes=config.journalist_session_minutes,
            demo=config.demo,
            digest=top.digest.describe() if top.digest is not None else {"enabled": False},
            # What status needs to say whether the disk can take the largest upload.
            uploads={"max_upload_size": top.settings.max_upload_size, "allow_uploads": top.settings.allow_uploads,
                     "disk_reserve": config.disk_reserve},
            start_options=list(config.start_options),
        )

    top.status_file = StatusFile(reactor, config.data_dir, describe, io_pool)
    top.status_file.setServiceParent(top)


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
    try:
        return lock_data_dir(data_dir)
    except DataDirBusy as busy:
        raise ConfigError(f"another DeadDrop server (or deaddrop-admin migrate) is already running on {data_dir} "
                          f"(it holds {busy})") from None


