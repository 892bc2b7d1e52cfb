"""The source interface: a Klein app served only on the source listener (behind the onion)."""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

from klein import Klein
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.logger import Logger

from deaddrop import __version__, codenames
from deaddrop.crypto.admission import BUSY_MESSAGE, BUSY_TITLE, Busy, KeyBusy
from deaddrop.crypto.streaming import EncryptionFailed
from deaddrop.events import SecurityEvents
from deaddrop.settings import InstanceSettings
from deaddrop.sources import EncryptedPart, LoginThrottled, Newsroom, SourceIdentity, StorageFailed, is_disk_full
from deaddrop.web._common.circuits import CircuitCloser, NoCloser, circuit_of
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import login_required
from deaddrop.web._common.responses import HtmlResponses
from deaddrop.web._common.pages import error_page_bytes, http_error_page_text
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web._common.sessions import Session, SessionStore
from deaddrop.web._common.site import BodyPolicy, DeadDropRequest, DeadDropSite, log_failure_safely
from deaddrop.web._common.static import serve_static
from deaddrop.web._common.throttle import FailureThrottle
from deaddrop.web._common.upload import MultipartUpload, UploadError, UploadLimits, UploadResult
from deaddrop.web.source import pages
from deaddrop.web.source._proxies import refuse_proxied

_log = Logger()

COOKIE = "dd_source"
NOT_RECOGNIZED = "Sorry, that is not a recognized codename."
THROTTLED = "Too many attempts to log in. Please wait a minute and try again."
MAX_MESSAGE_CHARS = 100_000
_MAX_PENDING_CODENAMES = 10
_STILL_RECEIVING = "Another submission from you is still being received. Please wait for it to finish."
# A circuit refused this many times a minute by the login throttle is flooding: close it.
REFUSALS_BEFORE_CLOSING = 10
# The codename can be pasted with stray spaces; anything longer cannot be one.
_MAX_CODENAME_CHARS = 1024

__all__ = ["SourceInterface", "SourceLogin", "shield"]  # shield: moved to web/_common/deferreds


@dataclass(frozen=True)
class SourceLogin:
    """A logged-in source, as the route guards hand it to a route."""

    session: Session
    identity: SourceIdentity
    passphrase: str
    is_admin = False


@dataclass
class SourceInterface(HtmlResponses):
    newsroom: Newsroom
    sessions: SessionStore
    settings: InstanceSettings
    events: SecurityEvents
    submission_key_armored: str
    codename_words: int
    login_throttle: FailureThrottle  # failures per Tor circuit (``LOCAL`` for connections without one)
    demo: bool = False
    # Closes a Tor circuit that keeps flooding (CLOSECIRCUIT); NoCloser with --tor none.
    circuit_closer: CircuitCloser = field(default_factory=NoCloser)
    _refusals: FailureThrottle = field(default_factory=lambda: FailureThrottle(REFUSALS_BEFORE_CLOSING, 60.0))

    cookie: SessionCookie = field(init=False)

    app = Klein()

    def __post_init__(self) -> None:
        self.cookie = SessionCookie(self.sessions, COOKIE)

    # -- plumbing --------------------------------------------------------------------------

    def _session(self, request: Any) -> Session | None:
        return self.cookie.lookup(request)

    def _session_or_new(self, request: Any) -> Session:
        return self._session(request) or self.cookie.start(request)[1]

    @staticmethod
    def _identity(session: Session | None) -> SourceIdentity | None:
        return session.data.get("source") if session else None

    @staticmethod
    def _arg(request: Any, name: str) -> str | None:
        return form_arg(request, name, _MAX_CODENAME_CHARS)

    def _csrf_ok(self, session: Session | None, request: Any) -> bool:
        return session is not None and session.check_csrf(self._arg(request, "csrf_token"))

    def _current_login(self, request: Any) -> SourceLogin | None:
        session = self._session(request)
        identity = self._identity(session)
        if identity is None:
            return None
        passphrase = SessionStore.unseal(session, self.cookie.token(request), "passphrase")
        if passphrase is None:
            return None
        return SourceLogin(session, identity, passphrase)

    def _refuse_anonymous(self, request: Any, post: bool) -> bytes:
        return self._redirect(request, "/login")

    def _refuse_stale_form(self, request: Any) -> bytes:
        return self._error(request, 403, "Please try again", "The form was stale. Nothing was deleted.")

    def _refuse_non_admin(self, request: Any) -> bytes:  # no admins on the source side
        return self._refuse_anonymous(request, False)

    # -- public pages ----------------------------------------------------------------------

    @app.route("/", methods=["GET"])
    def index(self, request: Any) -> Deferred:
        return self._html(request, pages.index(self._name, self._session(request), self.demo))

    @app.route("/generate", methods=["GET"])
    def generate(self, request: Any) -> Any:
        session = self._session_or_new(request)
        if self._identity(session):
            session.flash("You are already logged in. To make a new codename, log out first.", "warning")
            return self._redirect(request, "/lookup")
        codename = codenames.generate_codename(self.codename_words)
        # Keep only a keyed hash, so /create accepts codenames we generated and nothing else.
        pending = session.data.setdefault("pending_codenames", [])
        pending.append(self._codename_mac(session, codename))
        del pending[:-_MAX_PENDING_CODENAMES]
        return self._html(request, pages.generate(self._name, session, codename, self.demo))

    def _codename_mac(self, session: Session, codename: str) -> bytes:
        key = session.data.setdefault("generate_key", secrets.token_bytes(32))
        return hmac.new(key, codename.encode("utf-8"), hashlib.sha256).digest()

    @app.route("/create", methods=["POST"])
    @inlineCallbacks
    def create(self, request: Any):
        session = self._session(request)
        if not self._csrf_ok(session, request):
            return self._error(request, 403, "Please try again", "Your session expired or the form was stale. Nothing was stored.")
        codename = self._arg(request, "codename") or ""
        mac = self._codename_mac(session, codename)
        if not any(hmac.compare_digest(mac, known) for known in session.data.get("pending_codenames", [])):
            return self._error(request, 400, "Please try again", "That codename was not generated for this session. Get a new one.")
        try:
            # Not shielded: a visitor who leaves while waiting for Argon2id leaves the queue.
            identity, passphrase = yield self.newsroom.create_source(codename, circuit_of(request))
        except ValueError:
            return self._error(request, 409, "Please try again", "Please generate a new codename.")
        except Busy:
            return self._busy(request)  # the codename stays valid for this session: try again
        session.data.pop("pending_codenames", None)
        token, fresh = self.cookie.start(request, replacing=session)
        self._log_in(fresh, token, identity, passphrase)
        fresh.flash("Your codename is active. Remember it: it is the only way back to your replies.", "ok")
        return self._redirect(request, "/lookup")

    def _log_in(self, session: Session, token: str, identity: SourceIdentity, passphrase: str) -> None:
        session.data["source"] = identity
        SessionStore.seal(session, token, "passphrase", passphrase)

    @app.route("/login", methods=["GET"])
    def login_form(self, request: Any) -> Any:
        session = self._session_or_new(request)
        if self._identity(session):
            return self._redirect(request, "/lookup")
        return self._html(request, pages.login(self._name, session, None, self.demo))

    @app.route("/login", methods=["POST"])
    @inlineCallbacks
    def login(self, request: Any):
        session = self._session(request)
        if not self._csrf_ok(session, request):
            session = self._session_or_new(request)
            return self._html(request, pages.login(self._name, session, "Your session expired. Please enter your codename again.", self.demo), 403)
        codename = codenames.normalise_codename(self._arg(request, "codename") or "")
        if codename is None:
            # Malformed codenames cannot match any source: no KDF, and they count nowhere.
            return self._html(request, pages.login(self._name, session, NOT_RECOGNIZED, self.demo), 403)
        # Failures count per circuit, never globally; the attempt's place is taken before the
        # KDF, so a burst of concurrent attempts cannot all get past the check.
        circuit = circuit_of(request)
        reservation = self.login_throttle.reserve(circuit)
        if reservation is None:
            self._refused(circuit)
            return self._html(request, pages.login(self._name, session, THROTTLED, self.demo), 429)
        try:
            # Not shielded: a visitor who leaves while waiting for Argon2id leaves the queue.
            found = yield self.newsroom.login(codename, circuit)
        except LoginThrottled:
            reservation.cancel()
            self.events.emit("source.login.throttled")
            return self._html(request, pages.login(self._name, session, THROTTLED, self.demo), 429)
        except Busy:
            reservation.cancel()
            return self._busy(request)
        except BaseException:
            reservation.cancel()
            raise
        if found is None:
            reservation.failed()
            return self._html(request, pages.login(self._name, session, NOT_RECOGNIZED, self.demo), 403)
        reservation.cancel()
        identity, passphrase = found
        token, fresh = self.cookie.start(request, replacing=session)
        self._log_in(fresh, token, identity, passphrase)
        return self._redirect(request, "/lookup")

    def _refused(self, circuit: Any) -> None:
        self.events.emit("source.login.throttled")
        self._refusals.failed(circuit)
        if circuit.is_tor and self._refusals.blocked(circuit):
            # It keeps trying while refused: a flood, not a source. Tor closes the circuit (the
            # circuit id stays in memory; nothing about it is logged).
            self._refusals.reset(circuit)
            self.circuit_closer.close(circuit).addErrback(lambda f: None)

    def _busy(self, request: Any) -> bytes:
        request.setHeader(b"retry-after", b"60")
        return self._error(request, 503, BUSY_TITLE, BUSY_MESSAGE)

    @app.route("/logout", methods=["GET"])
    def logout(self, request: Any) -> Deferred:
        self.cookie.end(request, self._session(request))
        return self._html(request, pages.logged_out(self._name))

    # -- logged-in pages -------------------------------------------------------------------

    @app.route("/lookup", methods=["GET"])
    @login_required
    def lookup(self, request: Any, login: SourceLogin) -> Deferred:
        return self._lookup_page(request, login)

    @inlineCallbacks
    def _lookup_page(self, request: Any, login: SourceLogin, *, status: int = 200, message: str = "",
                     error: str | None = None):
        self.newsroom.ensure_key(login.identity, login.passphrase)  # heals a key lost to a crash after a first submission
        replies = yield self.newsroom.replies_for(login.identity, login.passphrase)
        page = pages.lookup(self._name, login.session, replies, allow_uploads=self.settings.allow_uploads,
                            max_upload_size=self.settings.max_upload_size, message=message, error=error,
                            demo=self.demo)
        html = yield self._html(request, page, status)
        return html

    @app.route("/submit", methods=["POST"])
    def submit(self, request: DeadDropRequest) -> Deferred:
        # Klein cancels a route's Deferred when the connection drops. A body that arrived whole
        # must still be committed or its ciphertext discarded: cancelled half-way (waiting for
        # the encryptors, or the message's encryption) its temp files were left in DATA/tmp.
        return shield(self._submit(request))

    @inlineCallbacks
    def _submit(self, request: DeadDropRequest):
        upload: MultipartUpload | None = getattr(request, "upload", None)
        if upload is None:
            return self._error(request, 400, "Nothing received", "Submissions must be sent with the form on your page.")
        login = self._current_login(request)
        try:
            result: UploadResult = yield upload.result
        except UploadError as e:
            if e.status == 503:
                return self._busy(request)
            if login is None or e.status == 403:
                return self._error(request, e.status, "Not stored", e.message + " Nothing was stored.")
            page = yield self._lookup_page(request, login, status=e.status, error=e.message + " Nothing was stored.")
            return page
        except EncryptionFailed as e:
            return self._storage_failed(request, e)
        if login is None:
            _discard(self.newsroom, result)
            return self._error(request, 403, "Please log in again", "Your session expired. Nothing was stored.")
        session, identity = login.session, login.identity
        message = result.fields.get("msg", "")
        problem = None
        if not session.check_csrf(result.fields.get("csrf_token")):
            problem = (403, "The form was stale. Please submit again.")
        elif result.fields.get(pages.HONEYPOT_FIELD):
            problem = (403, "Your submission could not be accepted.")  # as SecureDrop: a bot
        elif len(message) > MAX_MESSAGE_CHARS:
            problem = (413, f"Messages are limited to {MAX_MESSAGE_CHARS:,} characters.")
        elif not message.strip() and not result.files:
            problem = (400, "You must enter a message or choose a file to submit.")
        elif result.files and not self.settings.allow_uploads:
            problem = (400, "This instance does not accept files at the moment. Send a message instead.")
        if problem is not None:
            _discard(self.newsroom, result)
            page = yield self._lookup_page(request, login, status=problem[0],
                                           message=message[:MAX_MESSAGE_CHARS], error=problem[1] + " Nothing was stored.")
            return page
        parts = []
        try:
            if message.strip():
                part = yield shield(self.newsroom.encrypt_message(identity, message))
                parts.append(part)
            parts += [EncryptedPart("doc", f.temp_path, f.ciphertext_size) for f in result.files]
            # The first submission also makes the source's key pair (a pending source has none).
            yield shield(self.newsroom.commit_submission(identity, parts, login.passphrase))
        except (EncryptionFailed, StorageFailed) as e:
            _discard(self.newsroom, result, parts)
            return self._storage_failed(request, e)
        except Busy:
            _discard(self.newsroom, result, parts)
            return self._busy(request)
        what = _what_was_sent(bool(message.strip()), len(result.files))
        session.flash(f"Thank you. We received your {what}. You can come back with your codename to check for replies.", "ok")
        return self._redirect(request, "/lookup")

    def _storage_failed(self, request: Any, e: EncryptionFailed | StorageFailed) -> bytes:
        _log.error("a submission could not be stored (disk full: {full})", full=e.disk_full)
        if e.disk_full:
            return self._error(request, 507, "Not stored: the server is out of space",
                               "The server has run out of space. Nothing was stored. Please try again later.")
        return self._error(request, 500, "Not stored", "The server could not store your submission. Nothing was stored. Please try again later.")

    @app.route("/delete", methods=["POST"])
    @login_required
    @inlineCallbacks
    def delete(self, request: Any, login: SourceLogin):
        filename = self._arg(request, "reply_filename") or ""
        deleted = False
        try:
            deleted = yield shield(self.newsroom.delete_reply(login.identity, filename))
        except ValueError:
            deleted = False
        if deleted:
            login.session.flash("Reply deleted.", "ok")
            return self._redirect(request, "/lookup")
        page = yield self._lookup_page(request, login, status=404,
                                       error="That reply was not found. Nothing was deleted.")
        return page

    @app.route("/delete-all", methods=["POST"])
    @login_required
    @inlineCallbacks
    def delete_all(self, request: Any, login: SourceLogin):
        count = yield shield(self.newsroom.delete_all_replies(login.identity))
        login.session.flash(f"All replies deleted ({count}).", "ok")
        return self._redirect(request, "/lookup")

    # -- machine-readable ------------------------------------------------------------------

    @app.route("/robots.txt", methods=["GET"])
    def robots(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"User-agent: *\nDisallow: /\n"

    @app.route("/metadata", methods=["GET"])
    def metadata(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({
            "organization_name": self.settings.organisation_name,
            "submission_key_fingerprint": self.newsroom.submission_fingerprint,
            "gpg_fpr": self.newsroom.submission_fingerprint,
            "allow_document_uploads": self.settings.allow_uploads,
            "version": __version__,
        }, sort_keys=True).encode()

    @app.route("/public-key", methods=["GET"])
    def public_key(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"application/pgp-keys")
        request.setHeader(b"content-disposition", b'attachment; filename="submission-key.asc"')
        return self.submission_key_armored.encode("ascii")

    @app.route("/static/<path:name>", methods=["GET"])
    def static(self, request: Any, name: str) -> bytes:
        return serve_static(request, name)

    @app.handle_errors(Exception)
    def _errors(self, request: Any, failure: Any) -> bytes:
        routing = http_error_page_text(failure)
        if routing is not None:
            return self._error(request, *routing)
        if failure.check(Busy):  # e.g. the reply decryption queue of /lookup
            return self._busy(request)
        if is_disk_full(failure.value):  # e.g. /create when SQLite cannot grow its WAL
            _log.error("the disk is full: a request could not be completed")
            return self._error(request, 507, "The server is out of space",
                               "The server has run out of space. Nothing was stored. Please try again later.")
        log_failure_safely(failure)
        return self._error(request, 500, "Something went wrong",
                           "The server could not handle that request. Nothing was stored unless you saw a confirmation.")

    # -- streaming uploads -------------------------------------------------------------------

    def start_upload(self, request: DeadDropRequest, boundary: bytes, length: int | None) -> MultipartUpload:
        """Called when /submit's headers arrive, before any body byte is read."""
        limits = UploadLimits(
            max_file_bytes=self.settings.max_upload_size,
            text_fields={"csrf_token": 256, "msg": MAX_MESSAGE_CHARS * 4, pages.HONEYPOT_FIELD: 1024},
            file_fields=frozenset({"fh"}),
        )
        refused = None
        login = self._current_login(request)
        session = login.session if login else None
        pumps = self.newsroom.queues.uploads
        if login is None:
            refused = UploadError(403, "Your session expired; please log in again.")
        elif pumps.holding(login.identity.source_id) >= pumps.per_key:
            refused = UploadError(429, _STILL_RECEIVING)
        tickets: list[Any] = []

        def open_sink(filename: str, pause: Callable[[], None], resume: Callable[[], None]) -> Any:
            # Each file being received holds a pump thread. Counted per source identity, not per
            # session (logging in again gives a codename no more), and in total. Text-only
            # messages take none: they are encrypted on a pool of their own.
            try:
                tickets.append(pumps.try_acquire(login.identity.source_id))
            except KeyBusy:
                raise UploadError(429, _STILL_RECEIVING)
            except Busy:
                raise UploadError(503, BUSY_MESSAGE)
            return self.newsroom.encrypt_stream(gzip_name=filename, compress=False, on_pause=pause, on_resume=resume)

        upload = MultipartUpload(boundary, limits, open_sink, request.pause_body, request.resume_body, refused=refused,
                                 csrf_token=session.csrf_token if session else None)

        def done(result: Any) -> Any:
            for ticket in tickets:
                ticket.release()
            return result

        upload.result.addBoth(done)
        return upload

    def site(self, reactor: Any = None) -> DeadDropSite:
        settings = self.settings
        return DeadDropSite(
            self.app.resource(),
            body_policy=BodyPolicy(max_form_bytes=1 << 20),
            # Read per request: admins can change the limit while the server runs.
            multipart_limit=lambda: settings.max_upload_size + MAX_MESSAGE_CHARS * 4 + (1 << 20),
            render_error_page=lambda status, title, message: error_page_bytes(self._name, status, title, message),
            start_upload=self.start_upload,
            too_large_message="That upload is larger than this instance accepts. Nothing was stored.",
            upload_targets=frozenset({b"/submit"}),
            refuse_request=refuse_proxied,
            reactor=reactor,
        )


def _what_was_sent(message: bool, files: int) -> str:
    docs = "document" if files == 1 else "documents"
    if message and files:
        return f"message and {docs}"
    return "message" if message else docs


def _discard(newsroom: Newsroom, result: UploadResult, parts: list[EncryptedPart] = ()) -> None:
    for f in result.files:
        newsroom.store.discard_temp(f.temp_path)
    for p in parts:
        newsroom.store.discard_temp(p.temp_path)
