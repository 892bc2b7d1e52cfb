"""Sending one mail with Twisted's ESMTP client, STARTTLS required unless told otherwise.

With ``starttls`` the server's certificate is verified against the host name given (the
system's trust store, or ``--smtp-tls-ca``); a server that does not offer STARTTLS, or whose
certificate does not verify, gets nothing. ``none`` (plain SMTP) is only allowed to a loopback
address, e.g. a local MTA that relays onwards. The client greets with the sender address's
domain, never this machine's host name.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from twisted.internet import error as net_error
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint
from twisted.python.failure import Failure

TLS_MODES = ("starttls", "none")
_ADDRESS_RE = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def valid_address(text: str) -> bool:
    """A plain ``local@domain`` address (no display name, no spaces or line breaks)."""
    return _ADDRESS_RE.fullmatch(text) is not None and ".." not in text


def parse_server(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> (host, port); ValueError with a clear message."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([A-Za-z0-9.-]+):(\d{1,5})", text.strip())
    if m is None:
        raise ValueError(f"--smtp-server {text!r}: expected HOST:PORT (e.g. mail.example.org:587, [::1]:25)")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 1 <= port <= 65535:
        raise ValueError(f"--smtp-server {text!r}: port must be 1-65535")
    return host, port


def is_loopback(host: str) -> bool:
    """Only literal loopback addresses and ``localhost``: a name is never resolved to decide."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class SmtpTarget:
    host: str
    port: int
    tls: str  # "starttls" | "none"
    from_addr: str
    ca_file: str | None = None  # PEM CA(s) to verify the server with, instead of the system's
    timeout: float = 60.0

    @property
    def helo_domain(self) -> str:
        return self.from_addr.rsplit("@", 1)[-1]

    def describe(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port} ({self.tls})"


def _tls_options(target: SmtpTarget) -> Any:
    from twisted.internet.ssl import Certificate, optionsForClientTLS

    trust = None
    if target.ca_file is not None:
        with open(target.ca_file, "rb") as f:
            trust = Certificate.loadPEM(f.read())
    return optionsForClientTLS(target.host, trustRoot=trust)


def _sender_factory_class() -> Any:
    from twisted.mail.smtp import ESMTPSenderFactory

    class SenderFactory(ESMTPSenderFactory):
        """Reports a connection lost mid-conversation (a refused certificate, a server that hung
        up): the stock factory learns of it from ``clientConnectionLost``, which a connection
        made through an endpoint never calls, and would wait for ever."""

        def buildProtocol(self, addr: Any) -> Any:
            protocol = super().buildProtocol(addr)
            lost = protocol.connectionLost

            def connection_lost(reason: Failure) -> None:
                lost(reason)
                if getattr(self, "result", None) is not None and not self.result.called:
                    self._processConnectionError(None, reason)

            protocol.connectionLost = connection_lost
            return protocol

    return SenderFactory


def send(reactor: Any, target: SmtpTarget, to_addr: str, message: bytes) -> "Deferred[None]":
    """Deliver ``message`` to ``to_addr`` through ``target``; fires None once the server took it."""
    result: Deferred = Deferred()
    starttls = target.tls == "starttls"
    factory = _sender_factory_class()(
        None, None, target.from_addr, to_addr, BytesIO(message), result,
        retries=0,  # our own back-off decides when to try again
        timeout=target.timeout,
        contextFactory=_tls_options(target) if starttls else None,
        requireAuthentication=False,
        requireTransportSecurity=starttls,
    )
    factory.domain = target.helo_domain.encode("ascii")  # EHLO names the sender domain, not this host
    endpoint = HostnameEndpoint(reactor, target.host, target.port, timeout=target.timeout)
    connecting = endpoint.connect(factory)

    def failed_to_connect(f: Failure) -> None:
        if not result.called:
            result.errback(f)

    connecting.addErrback(failed_to_connect)
    return result.addCallback(lambda _: None)


def failure_reason(f: Failure) -> str:
    """A short, fixed reason for the security log (never the server's own text)."""
    from twisted.mail import smtp

    e = f.value
    if isinstance(e, net_error.ConnectionRefusedError):
        return "connection_refused"
    if isinstance(e, net_error.DNSLookupError):
        return "dns"
    if isinstance(e, (net_error.TimeoutError, smtp.SMTPTimeoutError)):
        return "timeout"
    if isinstance(e, smtp.TLSRequiredError):
        return "no_starttls"
    if _is_tls_error(e):
        return "tls"
    if isinstance(e, smtp.SMTPDeliveryError) or (isinstance(e, smtp.SMTPClientError) and e.code and e.code >= 400):
        return "rejected"
    if isinstance(e, (smtp.SMTPConnectError, net_error.ConnectError, net_error.ConnectionLost,
                      net_error.ConnectionDone)):
        return "connection_failed"
    return "error"


def _is_tls_error(e: BaseException) -> bool:
    from OpenSSL import SSL

    # A refused certificate arrives as the connection's loss, wrapped in SMTPConnectError.
    return isinstance(e, SSL.Error) or isinstance(e.__cause__, SSL.Error)
