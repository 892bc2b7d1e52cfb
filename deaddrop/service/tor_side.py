"""Tor: the source interface (and, with ``--journalist-onion``, the journalist one) published as
onion services by a Tor the server launches or attaches to."""
from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from deaddrop.config import Config, ConfigError
from deaddrop.service.source_side import add_tor_only_listener
from deaddrop.service.tree import DeadDropService

_log = Logger()


def add_tor(top: DeadDropService, config: Config, reactor: Any) -> None:
    """Publish the source interface (and optionally the journalist one) as onion services."""
    if config.tor == "none":
        _log.warn("--tor none: the source interface is NOT published as an onion service (development only)")
        return
    from deaddrop.tor import make_tor_service, target_of

    journalist_listener = top.journalist_listener
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
        # No report: the Tor service logs each progress line itself (bootstrap %, the stall
        # explanation, the published address), and twistd's log is the console; a report
        # logged here too printed every such line twice.
        # What Tor prints once the onion is up may be about a visitor: counted for the day.
        count_line=top.newsroom.activity.tor_line,
    )
    top.tor.setServiceParent(top)
