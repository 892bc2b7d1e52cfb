"""The journalist side: accounts, desk, web interface, API and the mTLS listener.

Called once from ``build_service`` (before Tor). The listener needs a CA to verify client
certificates: ``--journalist-ca`` (plus ``--journalist-crl``), or else the demo CA that
``deaddrop-admin ca init`` makes in ``DATA/ca``. Without either, the journalist listener does
not start (the source side still does) and one warning line says how to enable it.
"""
from __future__ import annotations

import datetime
import os
import re
import threading
from typing import Any, Callable

from twisted.application.internet import TimerService
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from deaddrop.transport.certificates import (
    SERVER_CERT_WARNING, STATE_FILE, certificate_statuses, expires_within, read_issued_list,
)
from deaddrop.config import Config
from deaddrop.newsroom.desk import Desk
from deaddrop.newsroom.accounts import Accounts
from deaddrop.newsroom.key_login import SecurityKeys
from deaddrop.service.tree import DeadDropService
from deaddrop.newsroom.newsroom import Newsroom
from deaddrop.transport.connections import ConnectionLimits
from deaddrop.transport.listeners import ListenerService
from deaddrop.web.journalist.api import JournalistAPI
from deaddrop.web.journalist.app import COOKIE, JournalistInterface
from deaddrop.web.journalist.gate import CertificateGate
from deaddrop.transport.tls import JournalistTLS, ensure_server_certificate, signed_by
from deaddrop.web.sessions import SessionStore

_log = Logger()

DISABLED_HELP = (
    "journalist interface NOT started: no client-certificate CA. Enable it with "
    "--journalist-ca CA.pem --journalist-crl CRL.pem (CA kept offline), or for a demo run "
    "`deaddrop-admin ca init --data-dir {data_dir}` and restart"
)


NOT_FROM_CA_HELP = (
    "journalist interface: {cert} is not signed by the journalists' CA, so browsers will warn. "
    "On the CA machine run `deaddrop-admin cert server --host ADDRESS` and start with "
    "--journalist-tls-cert/--journalist-tls-key"
)


def _server_certificate(config: Config, ca_path: str) -> tuple[str, str]:
    """``DATA/tls/server.{key,pem}``; when the CA itself lives in ``DATA/ca`` (the demo layout),
    a missing certificate is issued by that CA, so journalists who trust it see no warning, and
    one within its last ``SERVER_CERT_WARNING`` is issued again."""
    tls_dir = config.path("tls")
    key_path, cert_path = os.path.join(tls_dir, "server.key"), os.path.join(tls_dir, "server.pem")
    demo_ca = config.path("ca")
    ca_here = (os.path.isfile(os.path.join(demo_ca, "ca.key"))
               and os.path.realpath(ca_path) == os.path.realpath(os.path.join(demo_ca, "ca.pem")))
    missing = not os.path.exists(cert_path) and not os.path.exists(key_path)
    renew = (ca_here and os.path.isfile(cert_path) and signed_by(cert_path, ca_path)
             and expires_within(cert_path, SERVER_CERT_WARNING))
    if ca_here and (missing or renew):
        from deaddrop.transport import ca

        os.makedirs(tls_dir, mode=0o700, exist_ok=True)
        # Issued beside the pair in use, then renamed over it: never a moment without one.
        fresh_cert, fresh_key = os.path.join(tls_dir, "renewing.pem"), os.path.join(tls_dir, "renewing.key")
        for leftover in (fresh_cert, fresh_key):
            if os.path.exists(leftover):
                os.remove(leftover)
        ca.issue_server_cert(demo_ca, [*_listen_hosts(config.journalist_listen), "localhost", "127.0.0.1"],
                             fresh_cert)
        os.replace(fresh_key, key_path)
        os.replace(fresh_cert, cert_path)
        return key_path, cert_path
    return ensure_server_certificate(config.data_dir)


def _cert_issue_command(config: Config, ca_path: str) -> str:
    """The `cert issue` line an admin runs for a new user, for the CA this server trusts."""
    if os.path.realpath(ca_path) == os.path.realpath(config.path("ca", "ca.pem")):
        return f"deaddrop-admin cert issue {{name}} --data-dir {config.data_dir} --out {{name}}.p12"
    return "deaddrop-admin cert issue {name} --ca-dir CA_DIR --out {name}.p12"


def _listen_hosts(endpoint: str) -> list[str]:
    """The interface of a ``tcp:PORT:interface=ADDR`` endpoint, if it names one."""
    match = re.search(r"(?:^|:)interface=((?:\\:|[^:])+)", endpoint)
    host = match.group(1).replace("\\:", ":") if match else ""
    return [] if host in ("", "0.0.0.0", "::") else [host]


def find_ca(config: Config) -> tuple[str, str | None] | None:
    """(CA certificate, CRL or None) to verify journalists against, or None if there is none."""
    if config.journalist_ca:
        return os.path.abspath(config.journalist_ca), (
            os.path.abspath(config.journalist_crl) if config.journalist_crl else None)
    demo_ca = config.path("ca", "ca.pem")
    if os.path.isfile(demo_ca):
        crl = config.journalist_crl or config.path("ca", "crl.pem")
        return demo_ca, os.path.abspath(crl)
    return None


class _SighupService(Service):
    """Reload the CRL on SIGHUP while running (only where signals can be installed)."""

    def __init__(self, tls: JournalistTLS) -> None:
        self._tls = tls
        self._uninstall: Any = None

    def startService(self) -> None:
        super().startService()
        if threading.current_thread() is threading.main_thread():
            self._uninstall = self._tls.install_sighup()

    def stopService(self) -> Any:
        super().stopService()
        if self._uninstall is not None:
            self._uninstall()
            self._uninstall = None


def add_journalist_interface(top: DeadDropService, config: Config, reactor: Any) -> None:
    newsroom = top.newsroom
    accounts = Accounts(
        db=top.db, crypto_pool=newsroom.crypto_pool, events=top.events, cost=config.kdf_cost,
        issuer=lambda: top.settings.organisation_name, reactor=reactor,
    )
    desk = Desk(newsroom)
    top.accounts = accounts
    top.desk = desk
    top.journalist = None
    top.journalist_listener = None
    top.journalist_tls = None

    found = find_ca(config)
    if found is None:
        _log.warn(DISABLED_HELP.format(data_dir=config.data_dir))
        return
    ca_path, crl_path = found
    if crl_path is None:
        _log.warn("journalist interface: no --journalist-crl, so revoked client certificates are still accepted")
    if bool(config.journalist_tls_key) != bool(config.journalist_tls_cert):
        raise ValueError("give both --journalist-tls-cert and --journalist-tls-key, or neither")
    if config.journalist_tls_key and config.journalist_tls_cert:
        key_path, cert_path = config.journalist_tls_key, config.journalist_tls_cert
    else:
        key_path, cert_path = _server_certificate(config, ca_path)
    tls = JournalistTLS(key_path, cert_path, ca_path, crl_path, top.events, reactor,
                        max_connection_age=config.journalist_connection_max_age,
                        explain_missing_certificate=config.journalist_explain_missing_cert)
    if not signed_by(cert_path, ca_path):
        _log.warn(NOT_FROM_CA_HELP.format(cert=cert_path))
    tls.service.setServiceParent(top)
    _SighupService(tls).setServiceParent(top)
    top.journalist_tls = tls

    sessions = SessionStore(COOKIE, config.journalist_session_idle, config.journalist_session_lifetime)
    api = JournalistAPI(accounts=accounts, desk=desk, events=top.events,
                        submission_key_armored=top.source.submission_key_armored)
    interface = JournalistInterface(accounts=accounts, desk=desk, sessions=sessions, settings=top.settings,
                                    events=top.events, api=api, source_texts=top.source_texts,
                                    cert_issue_command=_cert_issue_command(config, ca_path),
                                    certificate_status=_certificate_status(newsroom, tls, ca_path, reactor),
                                    security_keys=SecurityKeys(accounts, top.events,
                                                               lambda: top.settings.organisation_name),
                                    key_hosts=tls.server_names)
    top.journalist = interface
    top.journalist_sessions = sessions
    # Its own share of the process's connections: the source listener leaves it a reserve
    # and can never evict one of its connections.
    site = interface.site(reactor, connection_limits=ConnectionLimits(
        top.connection_budget, max_connections=top.connection_budget.total))
    site.resource = CertificateGate(site.resource)
    listener = ListenerService(reactor, config.journalist_listen, tls.wrap_factory(site), top.fatal)
    listener.setServiceParent(top)
    top.journalist_listener = listener

    sweeper = TimerService(60.0, sessions.sweep)
    sweeper.clock = reactor
    sweeper.setServiceParent(top)
    purger = TimerService(600.0, _purge_quietly, accounts)
    purger.clock = reactor
    purger.setServiceParent(top)
    _log.info("journalist interface on {endpoint} (client certificates from {ca}, CRL {crl})",
              endpoint=config.journalist_listen, ca=ca_path, crl=crl_path or "none")


def _certificate_status(newsroom: Newsroom, tls: JournalistTLS, ca_path: str,
                        reactor: Any) -> Callable[[], Deferred]:
    """For the users page: the CA's issued list, if the server has a copy (``state.json`` beside
    the CA certificate, as in the demo layout ``DATA/ca``), read afresh each time (the CA may
    have issued since), judged against the CRL in force."""
    issued_list = os.path.join(os.path.dirname(ca_path), STATE_FILE)

    def statuses() -> Deferred:
        now = datetime.datetime.fromtimestamp(reactor.seconds(), datetime.timezone.utc)
        d = newsroom.io_pool.run(read_issued_list, issued_list)
        return d.addCallback(lambda issued: certificate_statuses(issued, tls.revoked_serials(), now))

    return statuses


def _purge_quietly(accounts: Accounts) -> None:
    accounts.purge_tokens().addErrback(lambda f: _log.failure("purging API tokens", f))
