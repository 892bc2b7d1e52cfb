# -*- test-case-name: tests.test_smtp_client -*-
"""A small, strict SMTP client over Twisted: one command, then exactly one reply, nothing else.

Twisted's ESMTP client reads every line it has buffered, also lines that arrived in plaintext
before a STARTTLS handshake: a man in the middle could answer ``STARTTLS`` with ``220`` followed
by fake ``250``/``354``/``250`` replies and the mail counted as delivered (the STARTTLS
command-injection class). Here a reply must be the last byte received when it completes, so
anything sent ahead of a command ends the session; before TLS, when TLS is required, that is a
``tls`` failure. TLS starts only on an empty buffer, and nothing is written until the handshake,
with the certificate verified, has finished. AUTH (PLAIN or LOGIN) is only ever sent over TLS.

Every way a session ends without the server accepting raises :class:`SmtpFailure`, whose
``reason`` is one fixed word (for the security log and the status) and ``detail`` one sentence
for the admin (it may quote the server's reply, cleaned and cut short).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Generator

from twisted.internet.defer import CancelledError, Deferred, inlineCallbacks
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

MAX_LINE = 2048  # RFC 5321 asks for 512 per reply line; real servers stay well below this
MAX_REPLY_LINES = 100
CLOSE_GRACE = 5.0  # seconds a polite close may take before the connection is cut


class SmtpFailure(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Reply:
    code: int
    lines: tuple[str, ...]

    def quoted(self) -> str:
        """The reply as one short printable line, for the admin."""
        text = " ".join(line for line in self.lines if line)
        text = "".join(c if " " <= c <= "~" else "?" for c in text)
        text = f"{self.code} {text}".strip()
        return text if len(text) <= 160 else text[:157] + "..."


@dataclass(frozen=True)
class Session:
    """What one session needs: where, how, as whom, and the mail (None: connect, log in, QUIT)."""

    host: str
    port: int
    tls: str  # "starttls" | "tls" | "none"
    tls_options: Any  # an IOpenSSLClientConnectionCreator (None with "none")
    helo_domain: str
    timeout: float
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    mail_from: str = ""
    rcpt_to: str = ""
    message: bytes | None = None


@implementer(IHandshakeListener)
class _Wire(Protocol):
    """Bytes in, replies out, one at a time; ends the connection at the first thing out of order."""

    # A TCP connection that can start TLS (ITLSTransport) and be cut (abortConnection).
    transport: Any

    def __init__(self, reactor: Any, tls_required: bool) -> None:
        self._reactor = reactor
        self._tls_required = tls_required
        self._buffer = b""
        self._lines: list[str] = []
        self._code: int | None = None
        self._continues = False
        self._waiting: Deferred | None = None  # the reply, or the TLS handshake, awaited
        self._handshaking = False
        self._error: SmtpFailure | None = None
        self.secure = False
        self.replies = 0  # complete replies taken (0: not even the greeting)
        self.lost: Deferred = Deferred()

    # -- what the conversation calls -------------------------------------------------------------

    def reply(self, line: bytes | None = None) -> Deferred:
        """Send ``line`` (None: nothing, e.g. for the greeting) and wait for one whole reply."""
        waiting = self._await()
        if line is not None and self._error is None:
            self.transport.write(line + b"\r\n")
        return waiting

    def start_tls(self, options: Any) -> Deferred:
        """TLS from here on; fires once the handshake (certificate verified) has finished."""
        waiting = self._await()
        if self._error is None:
            if self._buffer or self._lines:  # cannot happen: a reply with bytes after it ends the session
                self._fail(SmtpFailure("tls", "plaintext was waiting when TLS was to start"))
            else:
                self._handshaking = True
                self.transport.startTLS(options)
        return waiting

    def handshakeCompleted(self) -> None:
        self._handshaking = False
        self.secure = True
        self._answer(None)

    def close(self) -> Deferred:
        """End the connection; fires once it is gone (cut after ``CLOSE_GRACE`` seconds)."""
        if not self.lost.called:
            self.transport.loseConnection()
            cut = self._reactor.callLater(CLOSE_GRACE, self.transport.abortConnection)
            self.lost.addBoth(lambda result: cut.cancel() if cut.active() else None)
        return self.lost

    def give_up(self, failure: SmtpFailure) -> None:
        self._fail(failure)

    # -- bytes from the server -------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._error is not None:
            return
        self._buffer += data
        while b"\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n", 1)
            if not self._line(raw.removesuffix(b"\r")):
                return
            if self._lines and self._continues:
                continue
            assert self._code is not None  # (``_line`` took one)
            reply = Reply(self._code, tuple(self._lines))
            self._lines, self._code = [], None
            if self._buffer or self._waiting is None:
                self._stray()
                return
            self._answer(reply)
            return
        if len(self._buffer) > MAX_LINE:
            self._fail(SmtpFailure("protocol", f"the mail server sent a line longer than {MAX_LINE} bytes"))

    def _line(self, raw: bytes) -> bool:
        """Take one reply line; False (and the session ended) if it is not one."""
        text = raw.decode("ascii", "replace")
        separator = text[3:4]
        if (len(raw) > MAX_LINE or len(text) < 3 or not text[:3].isdigit() or separator not in ("", " ", "-")
                or (self._code is not None and int(text[:3]) != self._code)
                or len(self._lines) >= MAX_REPLY_LINES):
            self._fail(SmtpFailure("protocol", "the mail server sent something that is not an SMTP reply"))
            return False
        self._code = int(text[:3])
        self._lines.append(text[4:])
        self._continues = separator == "-"
        return True

    def _stray(self) -> None:
        if self._tls_required and not self.secure:
            self._fail(SmtpFailure("tls", "the mail server sent more than one reply before TLS: plaintext "
                                          "was injected (someone in between?), so nothing was sent"))
        else:
            self._fail(SmtpFailure("protocol", "the mail server sent replies nobody asked for"))

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        if self._error is None:
            if self._handshaking:
                self._error = SmtpFailure("tls", f"the TLS handshake failed: {_tls_problem(reason)}")
            else:
                self._error = SmtpFailure("connection_failed", "the mail server closed the connection")
        self._handshaking = False
        self._answer(None)
        self.lost.callback(None)

    # -- plumbing --------------------------------------------------------------------------------

    def _await(self) -> Deferred:
        assert self._waiting is None, "one request at a time"
        waiting: Deferred[Reply | None] = Deferred(lambda d: self._cancelled())
        self._waiting = waiting
        if self._error is not None:
            self._answer(None)  # the session has ended already: fails at once
        return waiting

    def _cancelled(self) -> None:
        self._waiting = None
        self._fail(SmtpFailure("error", "cancelled"))

    def _answer(self, reply: Reply | None) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is None:
            return
        if self._error is not None:
            waiting.errback(self._error)
        else:
            self.replies += reply is not None
            waiting.callback(reply)

    def _fail(self, failure: SmtpFailure) -> None:
        if self._error is None:
            self._error = failure
        if self.transport is not None and not self.lost.called:
            self.transport.abortConnection()
        self._answer(None)


def _tls_problem(reason: Failure | None) -> str:
    from OpenSSL import SSL

    e = reason.value if reason is not None else None
    if isinstance(e, SSL.Error) and e.args and isinstance(e.args[0], list):
        parts = [str(item[-1]) for item in e.args[0] if isinstance(item, tuple) and item and item[-1]]
        if parts:
            return "; ".join(parts)
    if e is not None and type(e).__name__ == "VerificationError":  # service_identity: the name did not match
        return "the certificate is not for this host name"
    return str(e) if e is not None and str(e) else "the connection ended during the handshake"


def _expect(reply: Reply, codes: tuple[int, ...], reason: str, what: str) -> None:
    if reply.code in codes:
        return
    if reply.code == 530:  # "authentication required"
        raise SmtpFailure("auth", f"the mail server wants a login (--smtp-username, --smtp-password-file): "
                                  f"{reply.quoted()}")
    raise SmtpFailure(reason, f"{what}: {reply.quoted()}")


def data_block(message: bytes) -> bytes:
    """``message`` (LF or CRLF lines) as DATA's payload: CRLF, dot-stuffed, ended by ``.``."""
    lines = message.replace(b"\r\n", b"\n").removesuffix(b"\n").split(b"\n")
    return b"\r\n".join(b"." + line if line.startswith(b".") else line for line in lines) + b"\r\n."


def _extensions(reply: Reply) -> dict[str, str]:
    found = {}
    for line in reply.lines[1:]:
        keyword, _, params = line.strip().partition(" ")
        found[keyword.upper()] = params.upper()
    return found


@inlineCallbacks
def _ehlo(wire: _Wire, s: Session) -> Generator[Deferred, Any, dict[str, str]]:
    reply = yield wire.reply(b"EHLO " + s.helo_domain.encode("ascii"))
    _expect(reply, (250,), "rejected", "the mail server refused EHLO")
    return _extensions(reply)


@inlineCallbacks
def _authenticate(wire: _Wire, s: Session, extensions: dict[str, str]) -> Generator[Deferred, Any, None]:
    if not wire.secure:  # the configuration refuses this; never send a password in the clear
        raise SmtpFailure("tls", "refusing to log in without TLS")
    user, password = (s.username or "").encode("utf-8"), (s.password or "").encode("utf-8")
    offered = extensions.get("AUTH", "").split()
    b64 = lambda data: base64.b64encode(data)  # noqa: E731
    if "PLAIN" in offered:
        reply = yield wire.reply(b"AUTH PLAIN " + b64(b"\0" + user + b"\0" + password))
    elif "LOGIN" in offered:
        reply = yield wire.reply(b"AUTH LOGIN")
        for answer in (user, password):
            if reply.code != 334:
                break
            reply = yield wire.reply(b64(answer))
    else:
        raise SmtpFailure("auth", "the mail server offers no AUTH PLAIN or LOGIN over TLS"
                                  + (f" (it offers {' '.join(offered)})" if offered else ""))
    if reply.code != 235:
        raise SmtpFailure("auth", f"the mail server refused the login as {s.username!r}: {reply.quoted()}")


@inlineCallbacks
def _converse(wire: _Wire, s: Session) -> Generator[Deferred, Any, None]:
    if s.tls == "tls":
        yield wire.start_tls(s.tls_options)  # implicit TLS: before the first byte either way
    _expect((yield wire.reply()), (220,), "rejected", "the mail server refused the connection")
    extensions = yield _ehlo(wire, s)
    if s.tls == "starttls":
        if "STARTTLS" not in extensions:
            raise SmtpFailure("no_starttls", "the mail server does not offer STARTTLS (wrong port, or "
                                             "someone in between removed it)")
        _expect((yield wire.reply(b"STARTTLS")), (220,), "tls", "the mail server did not start TLS")
        yield wire.start_tls(s.tls_options)
        extensions = yield _ehlo(wire, s)  # what was said before TLS counts for nothing
    if s.username is not None:
        yield _authenticate(wire, s, extensions)
    if s.message is not None:
        _expect((yield wire.reply(b"MAIL FROM:<%s>" % s.mail_from.encode("ascii"))), (250,), "rejected",
                "the mail server refused the sender")
        _expect((yield wire.reply(b"RCPT TO:<%s>" % s.rcpt_to.encode("ascii"))), (250, 251), "rejected",
                "the mail server refused the recipient")
        _expect((yield wire.reply(b"DATA")), (354,), "rejected", "the mail server refused DATA")
        _expect((yield wire.reply(data_block(s.message))), (250,), "rejected", "the mail server refused the message")
    try:
        yield wire.reply(b"QUIT")
    except SmtpFailure:
        pass  # the mail (if any) was accepted already; a rude goodbye changes nothing


def _timed_out(wire: _Wire, s: Session) -> SmtpFailure:
    hint = ""
    if wire.replies == 0 and s.tls != "tls":  # an implicit-TLS port waits for a TLS hello, silent
        hint = " (not even a greeting: a port 465 server wants --smtp-tls tls)"
    return SmtpFailure("timeout", f"the mail server did not answer within {s.timeout:g} s{hint}")


@inlineCallbacks
def run(reactor: Any, s: Session) -> Generator[Deferred, Any, None]:
    """One session; fires None when the server took the mail (or the check passed), else fails
    with :class:`SmtpFailure` or the connection error. Fires only once the connection is gone."""
    endpoint = HostnameEndpoint(reactor, s.host, s.port, timeout=s.timeout)
    wire = yield endpoint.connect(Factory.forProtocol(lambda: _Wire(reactor, s.tls != "none")))
    timer = reactor.callLater(s.timeout, lambda: wire.give_up(_timed_out(wire, s)))
    try:
        yield _converse(wire, s)
    except CancelledError:
        raise SmtpFailure("error", "cancelled") from None
    finally:
        if timer.active():
            timer.cancel()
        yield wire.close()
