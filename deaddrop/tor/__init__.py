"""Tor for DeadDrop: the source interface exists only as an onion service we publish ourselves.

Wiring (``deaddrop/config.py`` and ``deaddrop/service/tor_side.py``)::

    # Config.validated(): every ValueError message is one line for the operator
    tor = parse_tor_mode(self.tor)                          # "launch" | "none" | "control:..."
    for key, value in self.tor_options: check_tor_option(key, value)
    if tor != "none" and not is_loopback_endpoint(self.source_listen): raise ConfigError(...)

    # add_tor(top, config, reactor), after the listeners were added to ``top``
    top.tor = make_tor_service(
        reactor, data_dir=config.data_dir, mode=config.tor, tor_binary=config.tor_binary,
        tor_options=list(config.tor_options), pow=config.tor_pow,
        source_target=lambda: target_of(top.source_listener.port),
        source_proxy_target=add_tor_only_listener(top, config, reactor),  # --tor launch only
        journalist_target=(lambda: target_of(journalist_listener.port)) if config.journalist_onion else None,
        journalist_onion_port=443, events=top.events, on_fatal=top.fatal,
        bootstrap_timeout=None if config.demo else 180.0,  # a demo keeps trying
        report=lambda line: _log.info("{line}", line=line), count_line=top.newsroom.activity.tor_line)
    top.tor.setServiceParent(top)

``source_target``/``journalist_target`` are ``"127.0.0.1:PORT"`` strings or zero-argument
callables returning one, called at every (re)publish (so an ephemeral port chosen at listen time
works). :mod:`deaddrop.tor._service` describes the supervision and its parts; :mod:`deaddrop.tor.keys` the
files under ``DATA/tor/``.

Revoking a journalist client (``deaddrop-admin onion-client remove NAME``) deletes its
``authorized_clients/NAME.auth``; the running server re-reads that directory every 10 seconds and
republishes the journalist onion without the client (new descriptor, new introduction points).
No signal is needed; a restart has the same effect.
"""
from __future__ import annotations

from typing import Callable

from deaddrop.tor._config import (
    ControlEndpoint,
    check_tor_option,
    check_tor_options,
    is_loopback_endpoint,
    normalise_target,
    parse_control_endpoint,
    parse_tor_mode,
    parse_tor_option,
)
from deaddrop.tor._attempt import Tuning
from deaddrop.tor._service import TorOnionService
from deaddrop.tor.closer import TorCircuitCloser
from deaddrop.tor.defences import Defences, parse_pow_switch

__all__ = [
    "make_tor_service",
    "target_of",
    "is_loopback_endpoint",
    "parse_tor_mode",
    "parse_tor_option",
    "check_tor_option",
    "TorOnionService",
    "Tuning",
    "Defences",
    "parse_pow_switch",
    "TorCircuitCloser",
]


def target_of(listening_port) -> str:
    """The onion target for a Twisted ``IListeningPort``: ``127.0.0.1:PORT`` or ``unix:/path``.

    For ``source_target=lambda: target_of(source_listener.port)``.
    """
    host = listening_port.getHost()
    if getattr(host, "type", None) in ("TCP", "TCP6"):
        return normalise_target(f"[{host.host}]:{host.port}" if ":" in host.host else f"{host.host}:{host.port}")
    name = getattr(host, "name", None)
    if isinstance(name, bytes):
        name = name.decode()
    if isinstance(name, str) and name.startswith("/"):
        return normalise_target(f"unix:{name}")
    raise ValueError(f"cannot map an onion service to {host!r}")


def make_tor_service(
    reactor,
    *,
    data_dir: str,
    mode: str,
    tor_binary: str | None,
    tor_options: list[tuple[str, str]],
    source_target: str | Callable[[], str],
    journalist_target: str | Callable[[], str] | None,
    events,
    bootstrap_timeout: float | None = 180.0,
    on_fatal: Callable[[str], None],
    report: Callable[[str], None] | None = None,
    journalist_onion_port: int = 80,
    tuning: Tuning | None = None,
    source_proxy_target: str | Callable[[], str] | None = None,
    pow: bool = True,
    defences: Defences | None = None,
    count_line: Callable[[str, str], None] | None = None,
    _connect=None,
) -> TorOnionService:
    """An ``IService`` that runs (``launch``) or attaches to (``control:ENDPOINT``) Tor and
    publishes the source onion (port 80 -> ``source_target``) and, if ``journalist_target`` is
    set, the journalist onion with v3 client authorisation.

    ``on_fatal(message)`` is called once, with one line, if Tor cannot be started at all; the
    caller prints it and stops with a non-zero exit. Later failures are survived: security
    events, then relaunch/reconnect with back-off and the same onion keys.
    ``journalist_onion_port`` is the journalist onion's virtual port (80; 443 if the target is a
    TLS listener). ``report(line)``, if given, receives the human progress lines (bootstrap %, the address) for
    the console; they also go to the Twisted log and, as events, to the security log.
    Raises ValueError at once for a bad mode, option or target string.

    ``launch`` writes the source onion into the torrc as a ``HiddenServiceDir`` service (key in
    ``DATA/tor/onion-services/source/``) with Tor's defences on (:mod:`deaddrop.tor.defences`:
    PoW unless ``pow=False``, intro-point DoS limits, streams per circuit) and, if
    ``source_proxy_target`` is given, ``HiddenServiceExportCircuitID haproxy``: Tor then connects
    to that target (a listener wrapped with ``haproxy:``) instead of ``source_target``, and each
    connection's PROXY header names its circuit. ``control:`` uses ``ADD_ONION`` to
    ``source_target`` with the same defences but no circuit ids. ``defences`` overrides the
    numbers (tests, benches). ``count_line(level, kind)`` hears of each line a launched Tor prints
    once bootstrapped (``_process.line_kind``: its words, nothing that varies), which is not
    logged then: such a line may be about a source's visit (see ``daily_report``).
    """
    normalised = parse_tor_mode(mode)
    if normalised == "none":
        raise ValueError("--tor none: there is no Tor service to make")
    endpoint: ControlEndpoint | None = None
    if normalised.startswith("control:"):
        endpoint = parse_control_endpoint(normalised[len("control:") :])
    options = check_tor_options(tor_options)
    for target in (source_target, journalist_target):
        if isinstance(target, str):
            normalise_target(target)
    if source_target is None:
        raise ValueError("source_target is required")
    if isinstance(source_proxy_target, str):
        normalise_target(source_proxy_target)
    if defences is None:
        defences = Defences(pow=pow)
    if not isinstance(journalist_onion_port, int) or not 0 < journalist_onion_port < 65536:
        raise ValueError(f"journalist_onion_port {journalist_onion_port!r} is not a port number")
    return TorOnionService(
        reactor,
        data_dir=data_dir,
        mode="launch" if endpoint is None else "control",
        control_endpoint=endpoint,
        tor_binary=tor_binary,
        tor_options=options,
        source_target=source_target,
        journalist_target=journalist_target,
        events=events,
        on_fatal=on_fatal,
        bootstrap_timeout=bootstrap_timeout,
        report=report,
        journalist_onion_port=journalist_onion_port,
        tuning=tuning or Tuning(),
        connect=_connect,
        source_proxy_target=source_proxy_target,
        defences=defences,
        count_line=count_line,
    )
