"""The source side: the source interface, its listeners (loopback, and Tor's own with circuit ids)
and its timers."""
from __future__ import annotations

import os
from typing import Any, Callable

from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger
from twisted.python.failure import Failure

from deaddrop.config import Config
from deaddrop.service.tree import DeadDropService
from deaddrop.newsroom.source_texts import SourceTexts
from deaddrop.newsroom.newsroom import Newsroom
from deaddrop.store import queries
from deaddrop.admission.throttle import FailureThrottle
from deaddrop.transport.circuits import CircuitCloser
from deaddrop.transport.listeners import ListenerService
from deaddrop.web.sessions import SWEEP_EVERY, SessionStore
from deaddrop.web.source.app import SourceInterface
from deaddrop.web.source.defence import FloodDefence

_log = Logger()


def source_login_failures(config: Config) -> FailureThrottle:
    """Wrong codenames per Tor circuit (``LOCAL`` for connections without one): the flood
    defence counts them, and the login queues serve circuits that sent none first."""
    return FailureThrottle(config.source_login_failures_per_minute, 60.0)


def add_source_interface(top: DeadDropService, config: Config, reactor: Any, newsroom: Newsroom,
                         submission_key_armored: str, login_throttle: FailureThrottle) -> None:
    """The source interface on ``--source-listen``, its session sweeper and the pending-source purge.
    ``login_throttle``: the one the newsroom's login queues were built with (``source_login_failures``)."""
    top.source_texts = SourceTexts.from_stored(top.db.run_blocking(queries.get_settings))
    # A deleted source's sessions are emptied by the source interface itself (it says why).
    source_sessions = SessionStore("dd_source", config.source_session_idle_seconds, config.source_session_lifetime)
    top.circuit_closer = circuit_closer(top, config)
    defence = FloodDefence(top.events, login_throttle, top.circuit_closer, connections=top.source_connections,
                           activity=newsroom.activity)
    source = SourceInterface(
        newsroom=newsroom,
        sessions=source_sessions,
        settings=top.settings,
        events=top.events,
        submission_key_armored=submission_key_armored,
        codename_words=config.codename_words,
        defence=defence,
        demo=config.demo,
        texts=top.source_texts,
    )
    newsroom.on_source_deleted(source.source_deleted)
    top.source = source
    top.source_listener = ListenerService(reactor, config.source_listen, source.site(reactor, top.source_connections), top.fatal)
    top.source_listener.setServiceParent(top)
    for sweep in (source_sessions.sweep, source.received.sweep):
        sweeper = TimerService(SWEEP_EVERY, sweep)
        sweeper.clock = reactor
        sweeper.setServiceParent(top)
    pending_max_age = config.pending_source_hours * 3600.0
    purger = TimerService(min(600.0, pending_max_age / 4), _purge_quietly, newsroom, pending_max_age)
    purger.clock = reactor
    purger.setServiceParent(top)


def _purge_quietly(newsroom: Newsroom, max_age: float) -> Deferred:
    """One round of the pending-source purge; a failure is logged and the next round retries."""
    def failed(failure: Failure) -> None:
        # Only the error's type: a message could carry a store path, which names a source.
        _log.error("pending-source purge failed: {error}", error=type(failure.value).__name__)

    return newsroom.purge_pending_sources(max_age).addErrback(failed)


def circuit_closer(top: DeadDropService, config: Config) -> CircuitCloser:
    """For the web layer: closes a circuit that keeps flooding (CLOSECIRCUIT on our Tor, made
    later by ``tor_side.add_tor``). Only a launched Tor exports circuit ids; otherwise nothing to close."""
    from deaddrop.transport.circuits import NoCloser

    if config.tor != "launch":
        return NoCloser()
    from deaddrop.tor import TorCircuitCloser

    return TorCircuitCloser(lambda: top.tor)


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
    on_unix_socket = len(path.encode()) <= 100  # sockaddr_un holds 108 bytes
    if on_unix_socket:
        inner = f"unix:{quoteStringArgument(path)}:mode=600:backlog={TOR_LISTENER_BACKLOG}"
    else:
        # Too long for a socket: loopback TCP on a port the kernel picks. Local processes
        # could then send a PROXY header too; a short --data-dir avoids that.
        _log.warn("the data directory path is too long for a unix socket: Tor reaches the source site over loopback TCP")
        inner = f"tcp:0:interface=127.0.0.1:backlog={TOR_LISTENER_BACKLOG}"
    endpoint = proxyEndpoint(serverFromString(reactor, inner))
    listener = ListenerService(
        reactor, f"haproxy:{inner}", wrap(from_tor(top.source.site(reactor, top.source_connections))), top.fatal,
        endpoint=endpoint,
    )
    top.source_tor_listener = listener
    listener.setServiceParent(top)
    return f"unix:{path}" if on_unix_socket else (lambda: target_of(listener.port))  # (once it listens)
