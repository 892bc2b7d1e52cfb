"""The HTTP layer both interfaces share: request bodies, timeouts, headers, quiet logging.

Twisted's stock ``Request`` spools bodies over 100 kB to an unlinked temp file (plaintext on
disk) and parses multipart bodies whole in memory. ``DeadDropRequest`` takes the body over
where it arrives instead: small form bodies go to a capped in-memory buffer, multipart bodies
to a ``MultipartUpload`` that streams file parts into encryption.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes
from typing import Any, Callable, Sequence

from twisted.internet import reactor as _global_reactor
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server

from deaddrop.transport.circuits import Circuit, circuit_of, transport_from_tor
from deaddrop.transport.connections import ConnectionLimits, unlimited
from deaddrop.web._common.headers import apply_security_headers, raw_header_block
from deaddrop.web._common.request_rate import RETRY_AFTER_SECONDS, CircuitRequestRate
from deaddrop.web._common.upload import MultipartUpload

_log = Logger(namespace="deaddrop.web")


@dataclass(frozen=True)
class BodyPolicy:
    max_form_bytes: int = 1 << 20  # urlencoded / JSON bodies
    # Slow-loris defence: a request in progress must send at least this many bytes per window
    # (2 KiB/s: any working Tor circuit does far better; 1,100 bytes per 20 s does not).
    min_bytes_per_window: int = 60 * 1024
    window_seconds: float = 30.0
    # A request's line and headers must all arrive within this time of the connection opening
    # (or of the previous response): a client waiting longer is only holding a socket.
    header_timeout: float = 20.0
    # No request body may take longer than this, however steadily it arrives; an upload that
    # announces more bytes than this allows at ``upload_floor_rate`` gets that much longer (5 GB
    # over a Tor circuit takes hours; the slot sharing in upload_slots ends trickles sooner).
    body_deadline: float = 2 * 3600.0
    upload_floor_rate: float = 32 * 1024
    # Form and JSON bodies are at most ``max_form_bytes``: a minute is plenty even over Tor,
    # and a connection dribbling one must not hold a socket for the uploads' deadline.
    form_body_deadline: float = 60.0
    # A request under way this long that has averaged under the floor (min_bytes_per_window
    # per window) holds its connection without sending: if it is ended to make room for
    # another, that counts against its circuit like a cut.
    slow_after: float = 2.0
    # A new connection that has not sent its first request yet is left alone this long when
    # others must make room (over Tor, its request may follow the connection by a moment).
    first_request_grace: float = 2.0


# An evicted connection between requests may still be sending its last answer (see
# DeadDropChannel.evict): it is cut off if that takes longer than this (a peer not reading).
EVICTED_FLUSH_SECONDS = 5.0

StartUpload = Callable[["DeadDropRequest", bytes, "int | None"], MultipartUpload]


class _CappedBuffer(io.BytesIO):
    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap


def _boundary_of(content_type: bytes) -> bytes | None:
    main, _, params = content_type.partition(b";")
    if main.strip().lower() != b"multipart/form-data":
        return None
    for param in params.split(b";"):
        key, _, value = param.strip().partition(b"=")
        if key.strip().lower() == b"boundary":
            return value.strip().strip(b'"') or b""
    return b""


# A large upload is read in 256 KiB gulps instead of Twisted's 64 KiB: each read is one reactor
# round (dispatch, HTTP decoder, multipart parser, queue hand-off), and the bigger reads took
# the server's CPU per uploaded byte down by about a third (bench/upload.py). Only while a
# multipart body is arriving; a slow sender still yields small reads, the size only bounds one
# recv(). (1 MiB saved a little more but let a body race far ahead of the encryptor's
# back-pressure.)
UPLOAD_READ_BYTES = 256 << 10
_DEFAULT_READ_BYTES = 1 << 16


def _set_read_size(transport: Any, size: int) -> None:
    # Wrapping protocols (PROXY header, TLS) pass reads up from the socket's own transport.
    for _ in range(4):
        if transport is None:
            return
        if hasattr(transport, "socket") and hasattr(transport, "bufferSize"):
            transport.bufferSize = size
            return
        transport = getattr(transport, "transport", None)


class DeadDropRequest(server.Request):
    channel: DeadDropChannel
    # The body: a BytesIO, capped (``_CappedBuffer``) for a form; an upload streams elsewhere.
    content: Any
    upload: MultipartUpload | None = None
    # Who the interface found logged in when the upload started (its one session check).
    upload_login: Any = None
    # Answered while its body is still arriving (the interface's refusal of an upload).
    answering_early = False
    _refused = False
    _body_bytes = 0

    # -- body intake -----------------------------------------------------------------------

    def gotLength(self, length: int | None) -> None:
        site: DeadDropSite = self.channel.site
        policy = site.body_policy
        content_type = (self.requestHeaders.getRawHeaders(b"content-type") or [b""])[0]
        boundary = _boundary_of(content_type)
        self.content = io.BytesIO()
        circuit = self.channel.circuit
        form_post = getattr(self.channel, "_command", b"") == b"POST"
        if (site.request_rate is not None and circuit is not None
                and not site.request_rate.allow(circuit, form_post=form_post)):
            site.on_rate_limited(circuit)
            self.setHeader(b"retry-after", b"%d" % RETRY_AFTER_SECONDS)
            return self._refuse_early(429, "Too many requests",
                                      "Too many requests over this connection at once. Wait a few seconds, "
                                      "then reload the page.")
        refusal = site.refuse_request(self.requestHeaders) if site.refuse_request is not None else None
        if refusal is not None:  # all headers are in: refuse before any of the body
            return self._refuse_early(*refusal)
        if boundary is not None:
            # HTTPChannel has parsed the request line (its _command/_path) before gotLength.
            method, target = getattr(self.channel, "_command", b""), getattr(self.channel, "_path", b"")
            if site.start_upload is None or not site.takes_upload(method, target):
                # Elsewhere an upload would be encrypted into a temp file no route ever claims.
                return self._refuse_early(415, "Unsupported upload", "This address does not accept uploads.")
            self._multipart_limit = site.multipart_limit()
            # A client that waits for "100 Continue" has sent nothing yet: refuse it at once.
            expects_continue = (self.requestHeaders.getRawHeaders(b"expect") or [b""])[0].lower() == b"100-continue"
            early = site.refuse_large_uploads_early or expects_continue
            if early and length is not None and length > self._multipart_limit:
                return self._refuse_early(413, "Too large", site.too_large_message)
            self.upload = site.start_upload(self, boundary, length)
            _set_read_size(self.channel.transport, UPLOAD_READ_BYTES)
            return
        if length is not None and length > policy.max_form_bytes:
            return self._refuse_early(413, "Too large", "That request is too large.")
        self.content = _CappedBuffer(policy.max_form_bytes)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(data)
        site: DeadDropSite = self.channel.site
        if self.upload is not None:
            if self._body_bytes > self._multipart_limit:
                self.upload.abort()
                return self._refuse_early(413, "Too large", site.too_large_message)
            self.upload.feed(data)
            return
        if self._body_bytes > self.content.cap:
            return self._refuse_early(413, "Too large", "That request is too large.")
        self.content.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._refused:
            return
        if self.upload is not None:
            _set_read_size(self.channel.transport, _DEFAULT_READ_BYTES)
            self.upload.end()
        super().requestReceived(command, path, version)

    def connectionLost(self, reason: Any) -> None:
        if self.upload is not None:
            self.upload.abort()
        super().connectionLost(reason)

    def _refuse_early(self, status: int, title: str, message: str) -> None:
        """Answer before the body is read, then hang up: never buffer what we will refuse."""
        self.answer_early(status, self.channel.site.render_error_page(status, title, message, self.requestHeaders))

    def answer_early(self, status: int, body: bytes) -> None:
        """Answer with ``body`` while the request body is still arriving, then hang up.

        Cookies the interface set on this request (``addCookie``) and a Retry-After go out with it."""
        self._refused = True
        if self.upload is not None:
            self.upload.abort()
        headers = [(b"Set-Cookie", c) for c in self.cookies]
        headers += [(b"Retry-After", v) for v in self.responseHeaders.getRawHeaders(b"retry-after", [])]
        self.channel.answer(status, body, headers)

    # -- transport back-pressure (used by uploads) -------------------------------------------

    def pause_body(self) -> None:
        self.channel.body_paused = True
        self.channel.transport.pauseProducing()

    def resume_body(self) -> None:
        if self.channel.body_paused:
            self.channel.body_paused = False
            self.channel.body_grace = True
            self.channel.transport.resumeProducing()

    # -- responses ---------------------------------------------------------------------------

    def process(self) -> None:
        apply_security_headers(self)
        if not _url_is_text(self.path, self.getHeader(b"host")):
            # Klein answers a non-UTF-8 path itself, but logs a traceback (and the peer address)
            # first; a Host werkzeug cannot IDNA-encode ends in a 500.
            body = self.channel.site.render_error_page(400, "Bad address", "That address could not be read.",
                                                       self.requestHeaders)
            self.setResponseCode(400)
            self.setHeader(b"content-type", b"text/html; charset=utf-8")
            self.setHeader(b"content-length", b"%d" % len(body))
            self.write(body)
            self.finish()
            return
        super().process()

    def write(self, data: bytes) -> None:
        if not self.startedWriting:
            # No server banner: an onion service must not advertise what it runs.
            self.responseHeaders.removeHeader(b"server")
        super().write(data)

    def processingFailed(self, reason: Any) -> None:
        if self.channel is not None:
            self.channel.site.report_failure(reason)
        else:
            log_failure_safely(reason)
        if self.finished or self.channel is None:
            return
        body = self.channel.site.render_error_page(500, "Something went wrong", "The server could not handle that request. Nothing you sent was stored unless you saw a confirmation.", self.requestHeaders)
        self.setResponseCode(500)
        self.setHeader(b"content-type", b"text/html; charset=utf-8")
        self.setHeader(b"content-length", b"%d" % len(body))
        self.write(body)
        self.finish()


def _url_is_text(path: bytes, host: bytes | None) -> bool:
    """Whether the router can read the path and Host (werkzeug IDNA-encodes the host name)."""
    try:
        unquote_to_bytes(path.split(b"?", 1)[0]).decode("utf-8")
        hostname = (host or b"").decode("utf-8").lower().partition(":")[0]
        hostname.encode("idna")
    except UnicodeError:  # also UnicodeDecodeError; IDNA: empty or over-long labels
        return False
    return True


def describe_failure(reason: Any) -> str:
    """Where a request failed, never the exception's text: it may quote request data."""
    frames = [f"{filename.rsplit('/', 1)[-1]}:{line}" for _name, filename, line, *_ in reason.frames[-4:]]
    return f"{reason.type.__name__} at {' < '.join(reversed(frames))}"


def log_failure_safely(reason: Any) -> None:
    """Log where a request failed (see ``describe_failure``)."""
    _log.error("request failed: {failure}", failure=describe_failure(reason))


class _FirstBytes:
    """A connection seen as ``circuit_of`` sees a request (its channel and peer), so the
    circuit is trusted exactly where it is for requests: on the Tor-only listener."""

    def __init__(self, channel: "DeadDropChannel") -> None:
        self.channel = channel

    def getClientAddress(self) -> Any:
        return self.channel.transport.getPeer()


class DeadDropChannel(http.HTTPChannel):
    """Drops clients that dribble bytes or hold sockets idle, without logging who they were.

    Deadlines: the request line and headers within ``header_timeout`` of the connection opening
    (or of the previous response), a body at ``min_bytes_per_window`` at least and done within
    ``body_deadline``, and no silence longer than the site's idle timeout. The site's
    ``ConnectionLimits`` count the connection in per listener and per Tor circuit. A connection
    cut mid-request for being slow (or ended, while slow, to make room) is reported to the
    site's ``on_cut`` with its circuit: holding a slot without sending costs the circuit.
    """

    site: DeadDropSite  # set by the site that builds it
    # A TCP, unix-socket or TLS transport: besides writing, it pauses, resumes and aborts.
    transport: Any
    body_paused = False
    body_grace = False
    circuit: Circuit | None = None
    _header_deadline: Any = None
    _body_deadline: Any = None
    _flush_deadline: Any = None  # an evicted connection's last answer is being sent (see evict)
    _watchdog: Any = None
    _pipelined: Any = None
    _replaying = False
    _counted = False
    _request_began: float | None = None  # when the first byte of the request under way arrived
    _request_bytes = 0
    _opened_at = 0.0
    _served = False  # a request was received whole on this connection

    def connectionMade(self) -> None:
        super().connectionMade()
        self._window_bytes = 0
        limits: ConnectionLimits = self.site.connection_limits
        if not limits.admit(self, from_tor=transport_from_tor(self.transport)):
            # Full of busy connections: close at once (the socket is freed, nothing is read).
            self.transport.abortConnection()
            return
        self._counted = True
        self._opened_at = self.site.reactor.seconds()
        self._watchdog = self.callLater(self.site.body_policy.window_seconds, self._check_progress)
        self._await_request()

    def _await_request(self) -> None:
        self._cancel("_header_deadline")
        self._header_deadline = self.callLater(self.site.body_policy.header_timeout, self._too_slow)

    def _cancel(self, name: str) -> None:
        call = getattr(self, name)
        if call is not None and call.active():
            call.cancel()
        setattr(self, name, None)

    def _too_slow(self) -> None:
        self._cut(mid_request_only=True)

    def _cut(self, mid_request_only: bool = False) -> None:
        """Abort, reporting the circuit if a request was under way (an idle keep-alive
        connection timing out is a browser's habit, not a fault)."""
        if self._request_began is not None or not mid_request_only:
            self._request_began = None
            if self.circuit is not None:
                self.site.on_cut(self.circuit)
        self._abort()

    def _abort(self) -> None:
        # Nothing more is judged on this connection while it closes (a timer due in the same
        # reactor turn must not count it twice).
        for name in ("_watchdog", "_header_deadline", "_body_deadline"):
            self._cancel(name)
        self.transport.abortConnection()

    def is_fresh(self) -> bool:
        """Just opened, its first request not begun yet (see ``first_request_grace``)."""
        return (not self._served and self._request_began is None
                and self.site.reactor.seconds() - self._opened_at < self.site.body_policy.first_request_grace)

    def is_slow(self) -> bool:
        """A request under way for ``slow_after`` seconds that has averaged under the floor
        (not while its body is paused by us: then the encryptor is the slow one)."""
        if self._request_began is None or self.body_paused:
            return False
        policy = self.site.body_policy
        elapsed = self.site.reactor.seconds() - self._request_began
        floor = policy.min_bytes_per_window / policy.window_seconds
        return elapsed >= policy.slow_after and self._request_bytes < floor * elapsed

    def evict(self) -> None:
        """Make room for a newer connection (called by ConnectionLimits): an idle one, or a
        busy one of the circuit holding the most. Counted as a cut if it was slow.

        One between requests may still hold its last answer, written but not yet sent (the
        reactor sends on its next turn; a ``Connection: close`` answer waits there to be sent
        before the close): it is closed once that is sent, not over it, or the visitor whose
        answer it is gets none (seen over the real onion under reconnecting slow bodies: pages
        lost to the newcomer that took their place). A peer that does not take it is cut off
        after ``EVICTED_FLUSH_SECONDS``."""
        if self.is_slow():
            self._cut()
        elif self._request_began is None and self._served:
            for name in ("_watchdog", "_header_deadline", "_body_deadline"):
                self._cancel(name)
            self._flush_deadline = self.callLater(EVICTED_FLUSH_SECONDS, self.transport.abortConnection)
            self.transport.loseConnection()
        else:
            self._abort()

    def drop(self) -> None:
        """Its circuit is being closed (called by ConnectionLimits): nothing more to count."""
        self._request_began = None
        self._abort()

    def dataReceived(self, data: bytes) -> None:
        if self.circuit is None and self._counted:
            # Behind a PROXY-header endpoint the peer is the Tor circuit, known from the first
            # bytes on (not yet in connectionMade).
            self.circuit = circuit_of(_FirstBytes(self))
            if not self.site.connection_limits.on_circuit(self, self.circuit):
                self.transport.abortConnection()
                return
        if not self._replaying:  # bytes read from the socket, once (not again when replayed)
            self._window_bytes += len(data)
            if self._request_began is None and data and not self._handlingRequest:
                self._request_began, self._request_bytes = self.site.reactor.seconds(), 0
            if self._request_began is not None:
                self._request_bytes += len(data)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        self._cancel("_header_deadline")
        self.site.connection_limits.busy(self)
        self.body_grace = True
        if self.length != 0:
            policy = self.site.body_policy
            deadline = policy.body_deadline
            if not self._is_multipart():
                deadline = min(deadline, policy.form_body_deadline)
            elif self.length is not None and self.length > 0:
                deadline = max(deadline, self.length / policy.upload_floor_rate)
            self._body_deadline = self.callLater(deadline, self._too_slow)
        super().allHeadersReceived()  # the request's gotLength: its upload starts (or not) here
        request = self.requests[-1] if self.requests else None
        upload = getattr(request, "upload", None)
        if upload is not None and not upload.takes_files and self._body_deadline is not None \
                and self._body_deadline.active():
            # Nobody logged in (or files refused at once): only its text fields are read, as
            # from a form, so it gets a form's deadline, not the uploads' hours.
            # (Set a moment ago, to at least that.)
            self._body_deadline.reset(self.site.body_policy.form_body_deadline)

    def _is_multipart(self) -> bool:
        request = self.requests[-1] if self.requests else None
        if request is None:
            return False
        content_type = (request.requestHeaders.getRawHeaders(b"content-type") or [b""])[0]
        return _boundary_of(content_type) is not None

    def allContentReceived(self) -> None:
        self._cancel("_body_deadline")
        self._request_began = None  # received whole: from here on the server is the one working
        self._served = True
        super().allContentReceived()

    def requestDone(self, request: Any) -> None:
        # Before the stock method: it may parse a pipelined request at once (whose headers
        # then cancel this deadline again).
        if self._counted:
            self._await_request()
            self.site.connection_limits.waiting(self)
        if not (self.persistent and (self._dataBuffer or self._buffer)):
            super().requestDone(request)
            return
        # Requests pipelined behind this one wait for the reactor's next turn. The stock
        # method parses them at once, in this call: one connection with fifty GETs in a
        # packet would hold the reactor for all fifty while every other connection (a
        # journalist's download among them) waits. Until then the channel stays "handling a
        # request" (in raw mode since allContentReceived), so the rest of this packet and
        # whatever else arrives is buffered behind them, in order.
        if request is not self.requests[0]:
            raise TypeError("requests finished out of order")
        del self.requests[0]
        if self._savedTimeOut:
            self.setTimeout(self._savedTimeOut)
        self._pipelined = self.callLater(0, self._next_pipelined)

    def _next_pipelined(self) -> None:
        self._pipelined = None
        self._handlingRequest = False
        if not self._waitingForTransport:
            self._networkProducer.resumeProducing()
        data = b"".join(self._dataBuffer)
        self._dataBuffer = []
        self._replaying = True
        try:
            self.setLineMode(data)
        finally:
            self._replaying = False

    def refuse(self, status: int, title: str, message: str) -> None:
        """Answer with an error page straight on the transport and hang up (nothing is read).
        The page speaks the language of the headers received so far, if any."""
        headers = self.requests[-1].requestHeaders.copy() if self.requests else None
        pending = getattr(self, "_HTTPChannel__header", b"")  # the last header line, not filed yet
        if headers is not None and b":" in pending:
            name, _, value = pending.partition(b":")
            headers.addRawHeader(name.strip().lower(), value.strip())
        self.answer(status, self.site.render_error_page(status, title, message, headers))

    def answer(self, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """Write a whole HTML response straight on the transport and hang up."""
        reason = http.RESPONSES.get(status, b"Error")
        head = (
            b"HTTP/1.1 %d %s\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n" % (status, reason, len(body))
        )
        extra = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        self.transport.write(head + raw_header_block() + extra + b"\r\n" + body)
        self.transport.loseConnection()

    def lineLengthExceeded(self, line: bytes) -> None:
        # The stock LineReceiver hangs up without a word on a request or header line > 16 KiB.
        self.refuse(431, "Request refused", "The request's headers are too large.")

    def _check_progress(self) -> None:
        policy = self.site.body_policy
        # A request is under way once its first byte arrived: a request line dribbled in byte
        # by byte (no Request object exists yet) is as much a slow-loris as slow headers.
        started = bool(self.requests) or (self.line_mode and bool(self._buffer))
        mid_request = started and not self._handlingRequest
        if self.body_grace:
            # A body that began (or resumed after back-pressure) within this window is judged
            # on the next full one: a short form body straddling the tick is not a slow-loris.
            self.body_grace = False
        elif mid_request and not self.body_paused and self._window_bytes < policy.min_bytes_per_window:
            self._cut()
            return
        self._window_bytes = 0
        self._watchdog = self.callLater(policy.window_seconds, self._check_progress)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        for name in ("_watchdog", "_header_deadline", "_body_deadline", "_pipelined", "_flush_deadline"):
            self._cancel(name)
        if self._counted:
            self._counted = False
            self.site.connection_limits.closed(self)
        super().connectionLost(reason)

    def timeoutConnection(self) -> None:
        # The stock method logs the peer address; we never log addresses.
        self.transport.abortConnection()


class DeadDropSite(server.Site):
    requestFactory = DeadDropRequest
    # An HTTP/1.1 channel of our own, where Twisted's factory would build its HTTP/2-capable wrapper.
    protocol = DeadDropChannel  # type: ignore[assignment]
    noisy = False
    displayTracebacks = False

    def __init__(
        self,
        resource: Any,
        *,
        body_policy: BodyPolicy,
        render_error_page: Callable[[int, str, str, Any], bytes],  # status, title, message, headers
        start_upload: StartUpload | None = None,
        multipart_limit: Callable[[], int] = lambda: 0,
        too_large_message: str = "That upload is too large.",
        upload_targets: frozenset[bytes] | None = None,
        refuse_request: Callable[[Any], tuple[int, str, str] | None] | None = None,
        idle_timeout: float = 60.0,
        connection_limits: ConnectionLimits | None = None,
        reactor: Any = None,
        refuse_large_uploads_early: bool = True,
        request_rate: CircuitRequestRate | None = None,
        on_rate_limited: Callable[[Circuit], Any] = lambda circuit: None,
        report_failure: Callable[[Any], None] = log_failure_safely,
        on_cut: Callable[[Circuit], Any] = lambda circuit: None,
    ) -> None:
        """``refuse_large_uploads_early=False``: an upload whose Content-Length is over the
        limit still goes to ``start_upload`` (with that length), which may read its text
        fields and answer at its first file byte; the limit is still enforced as it arrives."""
        super().__init__(resource, logPath=None, timeout=idle_timeout, reactor=reactor or _global_reactor)
        self.body_policy = body_policy
        self.render_error_page = render_error_page
        self.start_upload = start_upload
        self.multipart_limit = multipart_limit
        self.too_large_message = too_large_message
        self.upload_targets = upload_targets
        # Headers -> (status, title, message) to refuse the request with, before its body.
        self.refuse_request = refuse_request
        self.refuse_large_uploads_early = refuse_large_uploads_early
        self.connection_limits = connection_limits or unlimited()
        # Requests per Tor circuit (None: not limited); a refusal is reported to on_rate_limited.
        self.request_rate = request_rate
        self.on_rate_limited = on_rate_limited
        # A request that failed inside the server: logged now (journalists), or counted for
        # the day's report (sources: a log line now would date what the source did).
        self.report_failure = report_failure
        # A connection of this circuit was cut mid-request for being slow (see the channel).
        self.on_cut = on_cut

    def takes_upload(self, method: bytes, target: bytes) -> bool:
        """Multipart bodies only for POST to ``upload_targets`` (any request if it is None)."""
        if self.upload_targets is None:
            return True
        return method == b"POST" and target.split(b"?", 1)[0] in self.upload_targets

    def log(self, request: Any) -> None:
        """No access log: no addresses, no user agents, no paths."""
