# -*- test-case-name: tests.integration.test_digest_smtp -*-
"""Where and how the digest is sent: the mail server, its TLS mode, the login, and the outcome.

With ``starttls`` (TLS after the greeting) or ``tls`` (TLS from the first byte, port 465) the
server's certificate is verified against the host name given (the system's trust store, or
``--smtp-tls-ca``); a server that does not offer STARTTLS, or whose certificate does not
verify, gets nothing. ``none`` (plain SMTP) is only allowed to a loopback address, e.g. a local
MTA that relays onwards, and never with a login. The client greets with the sender address's
domain, never this machine's host name. The conversation itself is ``smtp_client``'s.
"""
from __future__ import annotations

import ipaddress
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import error as net_error
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from deaddrop.digest import smtp_client
from deaddrop.digest.smtp_client import SmtpFailure

TLS_MODES = ("starttls", "tls", "none")
MAX_PASSWORD_BYTES = 1024
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


def read_password_file(path: str) -> str:
    """The SMTP password, the file's one line; ValueError with a clear message if the file is
    missing, readable or writable by group or others, empty, or not one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the start
    except OSError as e:
        raise ValueError(f"--smtp-password-file {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"--smtp-password-file {path}: not a regular file")
        if st.st_mode & 0o077:
            raise ValueError(f"--smtp-password-file {path} can be read or written by group or others (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}): run chmod 600 {path}")
        data = f.read(MAX_PASSWORD_BYTES + 1)
    text = data.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
    if len(data) > MAX_PASSWORD_BYTES or not text or any(c in text for c in "\0\r\n"):
        raise ValueError(f"--smtp-password-file {path}: must hold the password on one line (and nothing else)")
    return text


@dataclass(frozen=True)
class SmtpTarget:
    host: str
    port: int
    tls: str  # "starttls" | "tls" | "none"
    from_addr: str
    ca_file: str | None = None  # PEM CA(s) to verify the server with, instead of the system's
    timeout: float = 60.0
    username: str | None = None  # with a password: AUTH PLAIN or LOGIN, inside TLS only
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None  # where the password was read (for ``settings``)

    @property
    def helo_domain(self) -> str:
        return self.from_addr.rsplit("@", 1)[-1]

    def describe(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        login = f", login {self.username}" if self.username else ""
        return f"{host}:{self.port} ({self.tls}{login})"

    def settings(self) -> dict[str, Any]:
        """Everything but the password, for ``DATA/status.json`` (``deaddrop-admin digest test``)."""
        return {"host": self.host, "port": self.port, "tls": self.tls, "from": self.from_addr,
                "ca_file": self.ca_file, "username": self.username, "password_file": self.password_file}

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "SmtpTarget":
        """The target ``settings()`` described, its password read again; ValueError if unreadable."""
        password_file = settings.get("password_file")
        return cls(str(settings["host"]), int(settings["port"]), str(settings["tls"]), str(settings["from"]),
                   settings.get("ca_file"), username=settings.get("username"),
                   password=read_password_file(password_file) if password_file else None,
                   password_file=password_file)


def _tls_options(target: SmtpTarget) -> Any:
    from twisted.internet.ssl import Certificate, optionsForClientTLS

    trust = None
    if target.ca_file is not None:
        with open(target.ca_file, "rb") as f:
            trust = Certificate.loadPEM(f.read())
    return optionsForClientTLS(target.host, trustRoot=trust)


def _session(target: SmtpTarget, to_addr: str = "", message: bytes | None = None) -> smtp_client.Session:
    return smtp_client.Session(
        target.host, target.port, target.tls, _tls_options(target) if target.tls != "none" else None,
        target.helo_domain, target.timeout, username=target.username, password=target.password,
        mail_from=target.from_addr, rcpt_to=to_addr, message=message)


def send(reactor: Any, target: SmtpTarget, to_addr: str, message: bytes) -> "Deferred[None]":
    """Deliver ``message`` to ``to_addr`` through ``target``; fires None once the server took it."""
    return smtp_client.run(reactor, _session(target, to_addr, message))


def check(reactor: Any, target: SmtpTarget) -> "Deferred[None]":
    """Connect, TLS as configured (certificate verified), log in if configured, QUIT: no mail."""
    return smtp_client.run(reactor, _session(target))


def failure_reason(f: Failure) -> str:
    """A short, fixed reason for the security log (never the server's own text)."""
    e = f.value
    if isinstance(e, SmtpFailure):
        return e.reason
    if isinstance(e, net_error.ConnectionRefusedError):
        return "connection_refused"
    if isinstance(e, net_error.DNSLookupError):
        return "dns"
    if isinstance(e, net_error.TimeoutError):
        return "timeout"
    if isinstance(e, (net_error.ConnectError, net_error.ConnectionLost, net_error.ConnectionDone)):
        return "connection_failed"
    return "error"


def failure_detail(f: Failure, target: SmtpTarget) -> str:
    """One sentence for the admin (``deaddrop-admin digest test``, ``status``)."""
    e = f.value
    where = target.describe()
    reason = failure_reason(f)
    if isinstance(e, SmtpFailure):
        return e.detail
    if reason == "connection_refused":
        return f"nothing accepts connections at {where}"
    if reason == "dns":
        return f"the name {target.host} does not resolve"
    if reason == "timeout":
        return f"no connection to {where} within {target.timeout:g} s"
    if reason == "connection_failed":
        return f"could not connect to {where}"
    return f"unexpected {type(e).__name__}"
