"""The source interface: a Klein app served only on the source listener (behind the onion).

Every page speaks the source's language (``i18n.negotiate``). Nothing a source typed is ever
lost to an error: every problem after a submit answers with the form again, the message in it,
and what went wrong in numbers (see ``_refused_upload_page``).
"""
from __future__ import annotations

import dataclasses
import hmac
import json
import re
from urllib.parse import quote
from dataclasses import dataclass, field
from typing import Any, Callable

from klein import Klein
from twisted.internet.defer import CancelledError, Deferred, inlineCallbacks
from twisted.logger import Logger

from deaddrop import __version__, codenames
from deaddrop.crypto.admission import BUSY_MESSAGE, BUSY_TITLE, Busy, KeyBusy
from deaddrop.crypto.streaming import EncryptionFailed
from deaddrop.events import EventGate, SecurityEvents
from deaddrop.settings import InstanceSettings
from deaddrop.source_texts import SourceTexts
from deaddrop.store.disk_space import NoRoom
from deaddrop.sources import (
    EncryptedPart, LoginThrottled, Newsroom, NoFreeDesignation, SourceIdentity, SourceNotFound, StorageFailed, is_disk_full,
)
from deaddrop.transport.circuits import CircuitCloser, NoCloser, circuit_of
from deaddrop.transport.connections import ConnectionLimits
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.form_tokens import FormTokens
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import login_required
from deaddrop.web._common.pages import render_sync, set_html
from deaddrop.web._common.responses import HtmlResponses
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web.sessions import Session, SessionStore
from deaddrop.web._common.site import BodyPolicy, DeadDropRequest, DeadDropSite, describe_failure
from deaddrop.web._common.static import serve_static
from deaddrop.web._common.request_rate import CircuitRequestRate
from deaddrop.throttle import FailureThrottle
from deaddrop.web._common.upload import (
    REASON_BAD_FORM, REASON_FILES_TOO_LARGE, REASON_STALE_FORM, MultipartUpload, UploadError, UploadLimits,
    UploadResult,
)
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._browser import is_tor_browser
from deaddrop.web.source._carried import CarriedTexts
from deaddrop.web.source._submission_forms import (
    OPEN, RECEIVED, SENDING, DraftBudget, Receipt, SubmissionForm, SubmissionForms,
)
from deaddrop.web.source._proxies import refuse_proxied
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS, CustomTexts, PageContext, ShownReply

_log = Logger()

COOKIE = "dd_source"
# English texts, kept importable for tests that read pages in English.
NOT_RECOGNIZED = msgs.NOT_RECOGNIZED
THROTTLED = msgs.THROTTLED
# How long an anonymous form (log in, create) stays good, e.g. while a codename is written down.
FORM_LIFETIME = 3600.0
# The codename can be pasted with stray spaces; anything longer cannot be one.
_MAX_CODENAME_CHARS = 1024
# Why an upload was refused before its files were read (UploadError.reason).
_EXPIRED = "expired"
_CLOSED = "closed"  # the newsroom deleted the source while its upload was arriving
_NO_ROOM = "no-room"  # the disk cannot take the upload and keep its reserve
# A refusal for want of space names the largest file that fits: the body's other parts (the
# message, the form's fields and boundaries) are allowed this much.
_FORM_ALLOWANCE = MAX_MESSAGE_CHARS * 4 + (64 << 10)
_IN_FLIGHT = "in-flight"
_BUSY = "busy"
_STILL_RECEIVING = "Another submission from you is still being received. Please wait for it to finish."
# A circuit refused this many times a minute by the login throttle is flooding: close it.
REFUSALS_BEFORE_CLOSING = 10
# A circuit whose connections were cut this often in 10 minutes for holding a slot without
# sending is closed: its owner must solve Tor's proof of work again for a new one.
CUTS_BEFORE_CLOSING = 3
# Refusals of a passing state (busy, another upload in flight, no room on the disk) answered with the form at once,
# with their status; every other refused form is a redirect to its page (see _form_again).
_ANSWERED_AT_ONCE = frozenset({429, 503, 507})
# The purpose (and binding) of the sealed receipt of a submission received after its session ended.
_RECEIPT = "received"
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")  # what SessionStore hands out (32 random bytes)

__all__ = ["SourceInterface", "SourceLogin", "shield", "MAX_MESSAGE_CHARS"]


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
    texts: SourceTexts = field(default_factory=SourceTexts)
    # Anonymous forms (log in, create) carry their state in a sealed token, not a session.
    forms: FormTokens = field(default_factory=lambda: FormTokens(FORM_LIFETIME))
    _refusals: FailureThrottle = field(default_factory=lambda: FailureThrottle(REFUSALS_BEFORE_CLOSING, 60.0))
    _cuts: FailureThrottle = field(default_factory=lambda: FailureThrottle(CUTS_BEFORE_CLOSING, 600.0))
    # The source listeners' connections (set by ``site``): a circuit being closed loses them at once.
    _connections: ConnectionLimits | None = None
    # At most one "throttled" event every 10 s, instance-wide (it carries nothing about who):
    # a flood of refused logins costs no log line each.
    _throttled_events: EventGate = field(default_factory=lambda: EventGate(10.0))
    # "source.flood", per reason, at most once every 10 s (see _flood).
    _flood_events: EventGate = field(default_factory=lambda: EventGate(10.0))
    # Requests per Tor circuit, shared by every listener of this site.
    request_rate: CircuitRequestRate = field(default_factory=CircuitRequestRate)
    # Uploads still arriving, per source id: a source the newsroom deletes has them ended.
    _uploads: dict[int, set[MultipartUpload]] = field(default_factory=dict)
    # Typed messages kept for refused forms, across all sessions (see _submission_forms).
    drafts: DraftBudget = field(default_factory=DraftBudget)
    # What visitors without a session typed on the login page, across a language switch.
    carried: CarriedTexts = field(default_factory=CarriedTexts)

    cookie: SessionCookie = field(init=False)

    app = Klein()

    def __post_init__(self) -> None:
        self.cookie = SessionCookie(self.sessions, COOKIE)
        self.newsroom.on_source_deleted(self._source_deleted)
        # A circuit that has sent wrong codenames lately waits behind those that have not, and
        # gives up its place to them when the Argon2id queue is full.
        self.newsroom.queues.argon2id.standing = self.login_throttle.recent_failures
        self.newsroom.queues.untagged.standing = self.login_throttle.recent_failures

    # -- plumbing --------------------------------------------------------------------------

    def _session(self, request: Any) -> Session | None:
        return self.cookie.lookup(request)

    def _binding(self, request: Any) -> str:
        """What this visitor's anonymous form tokens are bound to (the source cookie's value,
        set if missing). A closed conversation's session ends here: the visitor starts afresh."""
        session = self._session(request)
        if session is not None and session.data.get("closed"):
            self.sessions.destroy(session)
            return self.cookie.binding(request, renew=True)
        return self.cookie.binding(request)

    def _form_ctx(self, request: Any, purpose: str, secret: str = "") -> PageContext:
        """An anonymous form page's frame: a sealed form token instead of a session."""
        token = self.forms.issue(purpose, self._binding(request), secret)
        return dataclasses.replace(self._ctx(request), csrf_token=token)

    def _form_secret(self, request: Any, purpose: str) -> str | None:
        """The secret sealed in the posted form's token ("" if none); None if the token is not
        one we issued for ``purpose`` to this browser, or has expired."""
        return self.forms.open(self._arg(request, "csrf_token"), purpose, self.cookie.token(request))

    @staticmethod
    def _identity(session: Session | None) -> SourceIdentity | None:
        return session.data.get("source") if session else None

    @staticmethod
    def _arg(request: Any, name: str) -> str | None:
        return form_arg(request, name, _MAX_CODENAME_CHARS)

    def _current_login(self, request: Any) -> SourceLogin | None:
        session = self._session(request)
        identity = self._identity(session)
        if identity is None:
            return None
        passphrase = SessionStore.unseal(session, self.cookie.token(request), "passphrase")
        if passphrase is None:
            return None
        return SourceLogin(session, identity, passphrase)

    def _source_deleted(self, source_id: int) -> None:
        """The newsroom deleted a source: its sessions forget everything but that, so the next
        page can say so calmly instead of "session expired"."""
        for session in self.sessions.owned_by(source_id):
            session.sealed.clear()
            session.data.clear()
            session.data["closed"] = True
            self.sessions.bind(session, None)
        # Uploads it started under a live session stop here: their ciphertext is discarded and
        # the page that answers says the conversation was closed (the typed message kept).
        for upload in list(self._uploads.get(source_id, ())):
            upload.cancel(UploadError(403, "The conversation was closed.", _CLOSED))

    def _refuse_anonymous(self, request: Any, post: bool) -> Any:
        session = self._session(request)
        if session is not None and session.data.get("closed"):
            # Said once, calmly, and logged out: the next visit starts afresh (as SecureDrop does).
            self.cookie.end(request, session)
            return self._error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED)
        # A cookie that no longer opens a session: logged out for inactivity (or a restart).
        expired = bool(_TOKEN_SHAPE.fullmatch(self.cookie.token(request) or ""))
        return self._redirect(request, "/login?expired=1" if expired else "/login")

    def _refuse_stale_form(self, request: Any) -> bytes:
        return self._error(request, 403, msgs.T_TRY_AGAIN, msgs.STALE_DELETE)

    def _refuse_non_admin(self, request: Any) -> bytes:  # no admins on the source side
        return self._refuse_anonymous(request, False)

    @property
    def session_minutes(self) -> int:
        """How long a source stays logged in (--source-session-minutes; tests may shorten it)."""
        return max(1, round(min(self.sessions.idle_timeout, self.sessions.absolute_timeout) / 60))

    def _ctx(self, request: Any, session: Session | None = None, *, logged_in: bool = False) -> PageContext:
        """What every page's frame needs; pops the session's flashes (they are shown once)."""
        lang = i18n.negotiate(request)
        path = (request.path or b"/").split(b"?", 1)[0].decode("utf-8", "replace")  # None mid-body
        return PageContext(
            lang=lang, site_name=self._name, path=path,
            csrf_token=session.csrf_token if session else None,
            flashes=session.pop_flashes() if session else (),
            logged_in=logged_in, demo=self.demo,
            tor_browser=is_tor_browser(request.getHeader(b"user-agent")),
            session_minutes=self.session_minutes,
            max_upload_size=self.settings.max_upload_size, allow_uploads=self.settings.allow_uploads,
            custom=CustomTexts(self.texts.text("welcome", lang.code), self.texts.text("instructions", lang.code),
                               self.texts.logo_url(lang.code)),
        )

    def _error(self, request: Any, status: int, title: str, message: str, kept: str = "", **values: Any) -> bytes:
        """A translated error page in the source frame (language menu, Log out, safety link)."""
        login = self._current_login(request)
        ctx = self._ctx(request, login.session if login else None, logged_in=login is not None)
        set_html(request, status)
        return render_sync(pages.error(ctx, ctx._(title), ctx._(message, **values), kept=kept[:MAX_MESSAGE_CHARS]))

    # -- public pages ----------------------------------------------------------------------

    @app.route("/", methods=["GET"])
    def index(self, request: Any) -> Deferred:
        login = self._current_login(request)
        ctx = self._ctx(request, login.session if login else None, logged_in=login is not None)
        return self._html(request, pages.index(ctx))

    @app.route("/safety", methods=["GET"])
    def safety(self, request: Any) -> Deferred:
        login = self._current_login(request)
        ctx = self._ctx(request, login.session if login else None, logged_in=login is not None)
        # The admin's retention setting (None: kept until journalists delete them).
        return self._html(request, pages.safety(ctx, self.settings.retention_days))

    @app.route("/language/<code>", methods=["GET"])
    def choose_language(self, request: Any, code: str) -> bytes:
        if code in i18n.LANGUAGES:
            i18n.remember(request, code)
        back = self._arg(request, "next")
        keep = self._arg(request, "keep")
        if back == "/generate" and keep:  # the same codename, in the new language
            return self._redirect(request, f"/generate?keep={quote(keep, safe='')}")
        return self._redirect(request, back if back in pages.RETURN_PATHS else "/")

    @app.route("/language/<code>", methods=["POST"])
    def carry_language(self, request: Any, code: str) -> bytes:
        """The language menu of a page with a form, which it posts (``pages._language_buttons``):
        what was typed comes back on the page, in the new language, after a redirect. The
        message of the submission form is kept like a refused form's (sealed with the session
        cookie, in memory, within the drafts' budget); the login page's codename (and a message
        carried there) like a codename (``_carried``). Chosen files cannot come along: a
        urlencoded body has only their names, and a multipart one is refused here before it is
        read (only /submit takes one)."""
        if code in i18n.LANGUAGES:
            i18n.remember(request, code)
        lang = i18n.language(code)
        back = self._arg(request, "next")
        if not _same_origin(request) or back not in (pages.LOGIN_FORM[1], pages.SUBMISSION_FORM[1]):
            # Another site's form: the language changes, nothing it sent is shown back.
            return self._redirect(request, back if back in pages.RETURN_PATHS else "/")
        message = (form_arg(request, "msg", MAX_MESSAGE_CHARS) or "")[:MAX_MESSAGE_CHARS]
        login = self._current_login(request) if back == pages.SUBMISSION_FORM[1] else None
        if login is not None:
            forms = self._forms(login.session)
            form = forms.adopt(self._arg(request, pages.FORM_TOKEN_FIELD))
            if form.state != OPEN:  # being sent, or sent: the text goes on a new form
                form = forms.issue()
            self._keep_draft(request, login.session, form, message)
            if any(request.args.get(b"fh", ())):  # a file was chosen: its name came, not its bytes
                login.session.flash(lang.gettext(msgs.FILES_NOT_CARRIED), "warning")
            return self._to_lookup(request, login.session, form)
        # The login page; or the submission form of a session that ended meanwhile, whose
        # message then waits on the login page, as after an expired submit.
        codename = (self._arg(request, "codename") or "")[:codenames.MAX_CODENAME_CHARS]
        self.carried.keep(self._binding(request), codename, message)
        return self._redirect(request, "/login")

    @app.route("/logo/<name>", methods=["GET"])
    def logo(self, request: Any, name: str) -> bytes:
        png = self.texts.logo_named(name)
        if png is None:
            return self._error(request, 404, msgs.T_NOT_FOUND, msgs.NOT_FOUND)
        request.setHeader(b"content-type", b"image/png")
        # Named by its hash: a new logo gets a new name, so this one may be cached.
        request.setHeader(b"cache-control", b"public, max-age=31536000, immutable")
        request.responseHeaders.removeHeader(b"pragma")
        return png

    @app.route("/generate", methods=["GET"])
    def generate(self, request: Any) -> Any:
        session = self._session(request)
        if self._identity(session):
            session.flash(i18n.negotiate(request).gettext(msgs.ALREADY_LOGGED_IN), "warning")
            return self._to_lookup(request, session)
        # The codename this browser was shown, when it switched languages on this page (a token
        # sealed for this browser only); else a new one.
        codename = (self.forms.open(self._arg(request, "keep"), "create", self.cookie.token(request))
                    or codenames.generate_codename(self.codename_words))
        # Sealed into the form's token: /create accepts codenames we generated and nothing else,
        # and nothing is kept here.
        return self._html(request, pages.generate(self._form_ctx(request, "create", codename), codename))

    @app.route("/create", methods=["POST"])
    @inlineCallbacks
    def create(self, request: Any):
        generated = self._form_secret(request, "create")
        if not generated:
            return self._error(request, 403, msgs.T_TRY_AGAIN, msgs.STALE_CREATE)
        codename = self._arg(request, "codename") or ""
        if not hmac.compare_digest(codename.encode("utf-8"), generated.encode("utf-8")):
            return self._error(request, 400, msgs.T_TRY_AGAIN, msgs.NOT_GENERATED)
        # A /create that makes nothing (its form replayed: "already in use") cost an Argon2id run
        # like a wrong codename, and counts like one for its circuit: the same reserved place
        # before the KDF, the same throttle, the same standing in the Argon2id queue.
        circuit = circuit_of(request)
        reservation = self.login_throttle.reserve(circuit)
        if reservation is None:
            self._refused(circuit)
            request.setHeader(b"retry-after", b"60")
            return self._error(request, 429, msgs.T_TRY_AGAIN, THROTTLED)
        try:
            # Not shielded: a visitor who leaves while waiting for Argon2id leaves the queue.
            identity, passphrase = yield self.newsroom.create_source(codename, circuit)
        except ValueError:
            # Its own form, sent twice (a double click): the first one made the codename. Say it
            # is active and offer to log in, rather than "get a new codename" for one that works.
            # (Its circuit still counts a failure: the same form replayed in a flood costs a run.)
            reservation.failed()
            ctx = self._form_ctx(request, "login")
            return self._html(request, pages.login(ctx, notice=ctx._(msgs.CODENAME_ACTIVE)), 409)
        except Busy:
            reservation.cancel()
            self._refused(circuit, event=False)
            self._flood("busy")
            # The same codename again, on a fresh form: the one the source wrote down stays theirs.
            request.setHeader(b"retry-after", b"60")
            ctx = self._form_ctx(request, "create", codename)
            return self._html(request, pages.generate(ctx, codename, ctx._(BUSY_MESSAGE)), 503)
        except NoFreeDesignation:
            reservation.cancel()
            # Counted for the day's report (and start-up refuses lists this small): a calm page.
            self.newsroom.activity.failed("no free designation: the designation lists are too small")
            request.setHeader(b"retry-after", b"3600")
            return self._error(request, 503, msgs.T_TRY_AGAIN, msgs.NO_NEW_CODENAMES)
        except CancelledError:
            self._abandoned(reservation)
            raise
        except BaseException:
            reservation.cancel()
            raise
        reservation.cancel()
        token, fresh = self.cookie.start(request, replacing=self._session(request))
        self._log_in(fresh, token, identity, passphrase, codename)
        fresh.data["first_visit"] = True  # "what happens next" after the first submission
        fresh.flash(i18n.negotiate(request).gettext(msgs.CODENAME_ACTIVE), "ok")
        return self._to_lookup(request, fresh)

    def _log_in(self, session: Session, token: str, identity: SourceIdentity, passphrase: str, codename: str) -> None:
        session.data["source"] = identity
        self.sessions.bind(session, identity.source_id)
        SessionStore.seal(session, token, "passphrase", passphrase)
        # Only readable with the source's cookie, like the passphrase: the lookup page can show it.
        SessionStore.seal(session, token, "codename", codename)

    @app.route("/login", methods=["GET"])
    def login_form(self, request: Any) -> Any:
        session = self._session(request)
        thanks = self._receipt_thanks(request, i18n.negotiate(request))
        if self._identity(session):
            if thanks:  # logged in again in another tab while the upload arrived
                session.flash(thanks, "ok")
            return self._to_lookup(request, session)
        ctx = self._form_ctx(request, "login")
        notice = ctx._(msgs.INACTIVE, minutes=self.session_minutes) if self._arg(request, "expired") else None
        if thanks:
            ctx = dataclasses.replace(ctx, flashes=[("ok", thanks)])
            notice = ctx._(msgs.RECEIVED_AFTER_LOGOUT, minutes=self.session_minutes)
        # What was typed here before the language menu was used (once, then forgotten).
        codename, carried = self.carried.take(self.cookie.token(request)) or ("", "")
        if carried:
            notice = ctx._(msgs.EXPIRED_SUBMIT, minutes=self.session_minutes)
        return self._html(request, pages.login(ctx, notice=notice, carried=carried, codename=codename))

    @app.route("/login", methods=["POST"])
    @inlineCallbacks
    def login(self, request: Any):
        # A message typed before the session expired rides along in the form (see /submit).
        carried = (form_arg(request, "msg", MAX_MESSAGE_CHARS) or "")[:MAX_MESSAGE_CHARS]
        if not _same_origin(request):
            # Only our own page may carry a message through: another site must not plant text
            # that a source would then send under their codename.
            carried = ""
        session = self._session(request)  # logging in again from a logged-in page is fine too
        self.carried.take(self.cookie.token(request))  # a codename carried to this page is used now
        form_ok = (self._form_secret(request, "login") is not None
                   or (session is not None and session.check_csrf(self._arg(request, "csrf_token"))))
        ctx = self._form_ctx(request, "login")  # the form again, for every answer that shows it
        if not form_ok:
            return self._html(request, pages.login(ctx, ctx._(msgs.STALE_LOGIN), carried=carried), 403)
        typed = self._arg(request, "codename") or ""
        codename = codenames.normalise_codename(typed)
        if codename is None:
            # Malformed codenames cannot match any source: no KDF, and they count nowhere. Words
            # outside the list are named (they are part of no codename); the box is left empty
            # (docs/threat-model.md, "A mistyped codename").
            unknown = codenames.unknown_words(typed)
            error = ctx._(NOT_RECOGNIZED)
            if unknown:
                error += " " + ctx._(msgs.NOT_IN_LIST, words=", ".join(unknown), count=len(unknown))
            return self._html(request, pages.login(ctx, error, carried=carried), 403)
        # Failures count per circuit, never globally; the attempt's place is taken before the
        # KDF, so a burst of concurrent attempts cannot all get past the check.
        circuit = circuit_of(request)
        reservation = self.login_throttle.reserve(circuit)
        if reservation is None:
            self._refused(circuit)
            request.setHeader(b"retry-after", b"60")
            return self._html(request, pages.login(ctx, ctx._(THROTTLED), carried=carried), 429)
        try:
            # Not shielded: a visitor who leaves while waiting for Argon2id leaves the queue.
            found = yield self.newsroom.login(codename, circuit)
        except LoginThrottled:
            reservation.cancel()
            self._refused(circuit)
            request.setHeader(b"retry-after", b"60")
            return self._html(request, pages.login(ctx, ctx._(THROTTLED), carried=carried), 429)
        except Busy:
            reservation.cancel()
            # A circuit that keeps the queue full while refused is flooding: it counts toward
            # being closed like one that keeps being throttled (a refusal costs it nothing else).
            self._refused(circuit, event=False)
            self._flood("busy")
            request.setHeader(b"retry-after", b"60")
            return self._html(request, pages.login(ctx, ctx._(BUSY_MESSAGE), carried=carried), 503)
        except CancelledError:
            self._abandoned(reservation)
            raise
        except BaseException:
            reservation.cancel()
            raise
        if found is None:
            reservation.failed()
            return self._html(request, pages.login(ctx, ctx._(NOT_RECOGNIZED), carried=carried), 403)
        reservation.cancel()
        identity, passphrase = found
        token, fresh = self.cookie.start(request, replacing=session)
        self._log_in(fresh, token, identity, passphrase, codename)
        if carried.strip():
            login = SourceLogin(fresh, identity, passphrase)
            page = yield self._store_submission(request, login, carried, UploadResult({"msg": carried}, []),
                                                self._forms(fresh).issue())
            return page
        return self._to_lookup(request, fresh)

    def _refused(self, circuit: Any, event: bool = True) -> None:
        if event:
            folded = self._throttled_events.admit()
            if folded is not None:
                self.events.emit("source.login.throttled", repeated=folded or None)
        self._refusals.failed(circuit)
        if circuit.is_tor and self._refusals.blocked(circuit):
            # It keeps trying while refused: a flood, not a source. Tor closes the circuit (the
            # circuit id stays in memory; nothing about it is logged).
            self._refusals.reset(circuit)
            self._close_circuit(circuit)

    def _cut(self, circuit: Any) -> None:
        """A connection of ``circuit`` was cut for holding its slot without sending (slow
        headers or body). It counts against the circuit's standing like a wrong codename, and a
        circuit cut ``CUTS_BEFORE_CLOSING`` times in 10 minutes is closed through Tor, with every
        connection it still has here."""
        if not circuit.is_tor:
            return
        self.login_throttle.failed(circuit)
        self._cuts.failed(circuit)
        # No event for one cut (a source on a poor circuit may be cut once, and a line now
        # would date its visit); a circuit closed for it is a flood, and says so.
        if self._cuts.blocked(circuit):
            self._cuts.reset(circuit)
            self._close_circuit(circuit)

    def _close_circuit(self, circuit: Any) -> None:
        self._flood("circuit_closed")
        self.circuit_closer.close(circuit).addErrback(lambda f: None)
        if self._connections is not None:
            self._connections.drop_circuit(circuit)

    def _abandoned(self, reservation: Any) -> None:
        """The visitor hung up while its codename was being checked (or waited to be): it
        counts as a failure for its circuit. The Argon2id run, once started, is spent anyway,
        and a flood that hangs up before each answer must not stay clean, unthrottled, open."""
        reservation.failed()
        self._flood("abandoned")

    def _rate_limited(self, circuit: Any) -> None:
        self._flood("requests")
        self._refused(circuit, event=False)

    def _flood(self, reason: str) -> None:
        """Tell the IDS the source side is being flooded: a queue full (``busy``), a circuit over
        its request rate (``requests``), a circuit closed (``circuit_closed``), an upload ended
        to make room (``upload_ended``), a login or creation abandoned mid-check
        (``abandoned``). Folded: one line per reason every 10 s, never who."""
        folded = self._flood_events.admit(reason)
        if folded is not None:
            self.events.emit("source.flood", reason=reason, repeated=folded or None)

    def _busy(self, request: Any) -> bytes:
        self._flood("busy")
        request.setHeader(b"retry-after", b"60")
        return self._error(request, 503, BUSY_TITLE, BUSY_MESSAGE)

    @app.route("/logout", methods=["GET"])
    def logout(self, request: Any) -> Deferred:
        self.cookie.end(request, self._session(request))
        return self._html(request, pages.logged_out(self._ctx(request)))

    # -- logged-in pages -------------------------------------------------------------------

    # -- one-time submission forms (see _submission_forms) ------------------------------------

    @staticmethod
    def _forms(session: Session) -> SubmissionForms:
        return session.data.setdefault("forms", SubmissionForms())

    def _to_lookup(self, request: Any, session: Session, form: SubmissionForm | None = None,
                   refused: bool = False) -> bytes:
        """Redirect to the logged-in page, at the address of a form of its own. A refused form's
        address ends in ``#send`` (its error, by the form), so a client can tell it from a stored one."""
        form = form or self._forms(session).issue()
        if form.state == RECEIVED:
            # Not the form page's own address: a browser could take a redirect to the page it
            # is on as a reload and replace it, and Back would then skip what was sent.
            # And Back must not bring the form back from the back/forward cache, the sent
            # message still in it: that cache lets go of a site's pages when it sets a cookie.
            self.cookie.touch(request)
            return self._redirect(request, f"/lookup?form={form.token}&received=1")
        return self._redirect(request, f"/lookup?form={form.token}" + ("#send" if refused else ""))

    def _keep_draft(self, request: Any, session: Session, form: SubmissionForm, message: str) -> None:
        """The typed message of a refused form, sealed with the cookie, within the shared budget."""
        name = f"draft:{form.token}"
        self._drop_draft(session, name)
        if not message or not self.drafts.keep(session, name, len(message.encode("utf-8")), self._drop_draft):
            return
        SessionStore.seal(session, self.cookie.token(request), name, message)
        form.has_draft = True

    def _drop_draft(self, session: Session, name: str) -> None:
        session.sealed.pop(name, None)
        self.drafts.release(session, name)
        form = self._forms(session).get(name.removeprefix("draft:"))
        if form is not None:
            form.has_draft = False

    @app.route("/lookup", methods=["GET"])
    @login_required
    def lookup(self, request: Any, login: SourceLogin) -> Any:
        forms = self._forms(login.session)
        token = self._arg(request, "form")
        form = forms.get(token)
        if token and form is None:  # an address from an ended session, or forgotten: a fresh form
            return self._to_lookup(request, login.session)
        if form is not None and form.state == RECEIVED:
            # Back after sending, a reload, a replayed form: what arrived, never the form again.
            return self._received_page(request, login, form)
        if form is None:  # /lookup itself (links, typed address)
            form = forms.issue()
        status, error, message = 200, None, ""
        if form.error is not None:
            ctx = self._ctx(request, None)
            status, error = form.error[0], form.error[1](ctx)
        if form.has_draft:  # a refused form's message, or one carried across a language switch
            message = SessionStore.unseal(login.session, self.cookie.token(request), f"draft:{form.token}") or ""
        return self._lookup_page(request, login, status=status, message=message, error=error, form=form)

    def _received_page(self, request: Any, login: SourceLogin, form: SubmissionForm) -> Deferred:
        ctx = self._ctx(request, login.session, logged_in=True)
        receipt = form.receipt
        assert receipt is not None
        text = msgs.received(ctx.lang, receipt.message, receipt.documents)
        return self._html(request, pages.received(ctx, text, receipt.first, self._forms(login.session).issue().token))

    @inlineCallbacks
    def _lookup_page(self, request: Any, login: SourceLogin, *, status: int = 200, message: str = "",
                     error: str | None = None, form: SubmissionForm | None = None):
        self.newsroom.ensure_key(login.identity, login.passphrase)  # heals a key lost to a crash after a first submission
        replies = yield self.newsroom.replies_for(login.identity, login.passphrase)
        ctx = self._ctx(request, login.session, logged_in=True)
        codename = SessionStore.unseal(login.session, self.cookie.token(request), "codename")
        # Newest first: the store lists them in the order they were sent.
        shown = [ShownReply(r.number, r.text, r.created_at, r.new) for r in reversed(replies)]
        form = form or self._forms(login.session).issue()
        page = pages.lookup(ctx, shown, message=message, error=error, codename=codename, form_token=form.token)
        html = yield self._html(request, page, status)
        if any(r.new for r in replies):
            yield self.newsroom.mark_replies_read(login.identity, replies)
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
            return self._error(request, 400, msgs.T_NOTHING_RECEIVED, msgs.NOTHING_RECEIVED)
        try:
            result: UploadResult = yield upload.result
        except UploadError as e:
            return self._refused_upload_page(request, e, upload.fields_so_far())
        except EncryptionFailed as e:
            fields = upload.fields_so_far()
            return self._storage_failed(request, e, fields.get("msg", ""), fields.get(pages.FORM_TOKEN_FIELD))
        # The login checked once, when the upload started: a session that ended while the body
        # was arriving (expiry, a logout in another tab) does not lose what was sent.
        login: SourceLogin | None = request.upload_login
        if login is None:  # not reached: a body without a login fails at its first file byte or end
            _discard(self.newsroom, result)
            return self._refused_upload_page(request, UploadError(403, "expired", _EXPIRED), result.fields)
        message = result.fields.get("msg", "")
        token = result.fields.get(pages.FORM_TOKEN_FIELD)
        problem: tuple[int, str, dict[str, Any]] | None = None
        if not login.session.check_csrf(result.fields.get("csrf_token")):
            problem = (403, msgs.STALE_SUBMIT, {})
        elif result.fields.get(pages.HONEYPOT_FIELD):
            problem = (403, msgs.HONEYPOT, {})  # as SecureDrop: a bot
        elif len(message) > MAX_MESSAGE_CHARS:
            problem = (413, msgs.TOO_LONG, dict(count=len(message), limit=MAX_MESSAGE_CHARS))
        elif not message.strip() and not result.files:
            problem = (400, msgs.EMPTY, {})
        elif result.files and not self.settings.allow_uploads:
            problem = (400, msgs.NO_FILES, {})
        if problem is not None:
            _discard(self.newsroom, result)
            live = self._still_logged_in(request, login)
            if live is None:  # nothing stored: the login page, the message carried in it
                return self._refused_upload_page(request, UploadError(problem[0], "expired", _EXPIRED), result.fields)
            return self._form_again(request, problem[0], message, problem[1], token=token, **problem[2])
        form = self._forms(login.session).adopt(token)
        while form.state == SENDING:  # the same form, sent twice at once (a double click)
            yield form.settled()
        if form.state == RECEIVED:  # already stored: answered with what arrived, stored once
            _discard(self.newsroom, result)
            live = self._still_logged_in(request, login)
            if live is None:
                return self._received_after_logout(request, form)
            return self._to_lookup(request, live.session, self._received_in(live.session, form))
        page = yield self._store_submission(request, login, message, result, form)
        return page

    @inlineCallbacks
    def _store_submission(self, request: Any, login: SourceLogin, message: str, result: UploadResult,
                          form: SubmissionForm):
        """Encrypt the message, commit it with the (already encrypted) files, show what arrived."""
        parts = []
        SubmissionForms.sending(form)
        try:
            page = yield self._encrypt_and_commit(request, login, message, result, form, parts)
        except BaseException:
            if form.state == SENDING:  # cancelled or failed unexpectedly: the form can be sent again
                SubmissionForms.refused(form, 500, lambda ctx: ctx._(msgs.NOT_STORED))
            raise
        if form.state == SENDING:  # not stored, and nothing to keep (e.g. the source was deleted)
            SubmissionForms.reopened(form)
        return page

    @inlineCallbacks
    def _encrypt_and_commit(self, request: Any, login: SourceLogin, message: str, result: UploadResult,
                            form: SubmissionForm, parts: list[EncryptedPart]):
        try:
            if message.strip():
                part = yield shield(self.newsroom.encrypt_message(login.identity, message))
                parts.append(part)
            parts += [EncryptedPart("doc", f.temp_path, f.ciphertext_size) for f in result.files]
            # The first submission also makes the source's key pair (a pending source has none).
            yield shield(self.newsroom.commit_submission(login.identity, parts, login.passphrase))
        except (EncryptionFailed, StorageFailed) as e:
            _discard(self.newsroom, result, parts)
            return self._storage_failed(request, e, message, form.token)
        except Busy:
            _discard(self.newsroom, result, parts)
            self._flood("busy")
            request.setHeader(b"retry-after", b"60")
            return self._form_again(request, 503, message, msgs.BUSY, token=form.token)  # the message stays
        except SourceNotFound:  # deleted by the newsroom while this was on its way: nothing kept
            _discard(self.newsroom, result, parts)
            return self._error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED,
                               kept=message if _same_origin(request) else "")
        first = bool(login.session.data.pop("first_visit", False))
        SubmissionForms.received(form, Receipt(bool(message.strip()), len(result.files), first=first))
        self._drop_draft(login.session, f"draft:{form.token}")
        live = self._still_logged_in(request, login)
        if live is None:
            return self._received_after_logout(request, form)
        return self._to_lookup(request, live.session, self._received_in(live.session, form))

    def _received_in(self, session: Session, form: SubmissionForm) -> SubmissionForm:
        """``form`` as known to ``session``: a source that logged in again while its submission
        was arriving sees what arrived in its new session too."""
        mine = self._forms(session).adopt(form.token)
        if mine is not form and mine.state != RECEIVED and form.receipt is not None:
            first = form.receipt.first or bool(session.data.pop("first_visit", False))
            SubmissionForms.received(mine, dataclasses.replace(form.receipt, first=first))
        return mine

    def _still_logged_in(self, request: Any, login: SourceLogin) -> SourceLogin | None:
        """``login``'s session if it is still live, else this browser's current login to the same
        source (logged in again meanwhile), else None (expired, logged out, or closed)."""
        if self.sessions.is_live(login.session) and self._identity(login.session) == login.identity:
            return login
        current = self._current_login(request)
        if current is not None and current.identity == login.identity:
            return current
        return None

    def _received_after_logout(self, request: Any, form: SubmissionForm) -> bytes:
        """Stored, but the session ended while the body was arriving: a redirect (post/redirect/get)
        to the login page, which says both; reloading it sends nothing again. What arrived rides
        in a sealed receipt token: nobody can forge one. It is not bound to the cookie, which
        may have changed meanwhile (a logout or a new login in another tab), and it says only
        what arrived, never what it said."""
        receipt = form.receipt
        assert receipt is not None
        token = self.forms.issue(_RECEIPT, _RECEIPT, f"{int(receipt.message)}:{receipt.documents}")
        return self._redirect(request, f"/login?received={token}")

    def _receipt_thanks(self, request: Any, lang: i18n.Language) -> str | None:
        """The thanks of a receipt token in the query (``_received_after_logout``), else None."""
        opened = self.forms.open(self._arg(request, "received"), _RECEIPT, _RECEIPT) or ""
        message, _, documents = opened.partition(":")
        if message not in ("0", "1") or not documents.isdigit() or len(documents) > 6:
            return None
        return msgs.received(lang, message == "1", int(documents))

    def _storage_failed(self, request: Any, e: EncryptionFailed | StorageFailed, message: str = "",
                        token: str | None = None) -> Any:
        # Counted for the day's report (daily_report), never logged now: it would date the source.
        self.newsroom.activity.not_stored("disk_full" if e.disk_full else "storage_failed")
        error = msgs.OUT_OF_SPACE if e.disk_full else msgs.NOT_STORED
        return self._form_again(request, 507 if e.disk_full else 500, message, error, token=token)

    def _form_again(self, request: Any, status: int, message: str, error: str, token: str | None = None,
                    **values: Any) -> bytes:
        """The submission form again, at a GET-able address: a redirect to the form's page, which
        shows ``error`` (with ``status``) and ``message`` (kept sealed in the session). Numbers in
        ``values`` are formatted in the page's language (``size``: a size in bytes). Nothing is
        read or decrypted here, so this answers at once, even while the body is still arriving."""
        login = self._current_login(request)
        if login is None:
            ctx = self._ctx(request, None)
            return self._error(request, status, msgs.T_NOT_STORED, error, **_formatted(ctx, values))
        forms = self._forms(login.session)
        form = forms.adopt(token)
        if form.state == RECEIVED:  # that form was stored already: the error goes on a new one
            form = forms.issue()
        render_error = (lambda ctx: ctx._(error, **_formatted(ctx, values)))
        if status in _ANSWERED_AT_ONCE or getattr(request, "answering_early", False):
            # Busy, another upload in flight, a full disk: a passing state, told with its status
            # (and Retry-After) on the form itself. And a refusal sent while the file is still
            # arriving: a browser still sending does not follow a redirect, it shows this page.
            SubmissionForms.reopened(form)
            ctx = self._ctx(request, login.session, logged_in=True)
            set_html(request, status)
            return render_sync(pages.lookup(ctx, None, message=message[:MAX_MESSAGE_CHARS], error=render_error(ctx),
                                            form_token=form.token))
        SubmissionForms.refused(form, status, render_error)
        self._keep_draft(request, login.session, form, message[:MAX_MESSAGE_CHARS])
        return self._to_lookup(request, login.session, form, refused=True)

    def _refused_upload_page(self, request: Any, error: UploadError, fields: dict[str, str]) -> bytes:
        """What a source sees when a submission is refused: always the typed message back."""
        message = fields.get("msg", "") if _same_origin(request) else ""
        have_message = "msg" in fields
        session = self._session(request)
        if error.reason == _CLOSED:
            return self._error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED, kept=message)
        if error.reason == _NO_ROOM:
            return self._no_room_page(request, message, have_message, fields.get(pages.FORM_TOKEN_FIELD))
        if error.reason == _EXPIRED or self._current_login(request) is None:
            if session is not None and session.data.get("closed"):
                self.cookie.end(request, session)  # said once, and logged out
                return self._error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED, kept=message)
            ctx = self._form_ctx(request, "login")
            set_html(request, 403)
            notice = ctx._(msgs.EXPIRED_SUBMIT, minutes=self.session_minutes)
            return render_sync(pages.login(ctx, notice=notice, carried=message[:MAX_MESSAGE_CHARS]))
        token = fields.get(pages.FORM_TOKEN_FIELD)
        if error.reason == REASON_FILES_TOO_LARGE:
            # "Your message is still below" only when there is one (a form sent with an empty box has none).
            said = (msgs.TOO_LARGE if message.strip() else msgs.TOO_LARGE_NOTHING_TYPED) if have_message \
                else msgs.TOO_LARGE_LOST
            return self._form_again(request, 413, message, said,
                                    token=token, size=self.settings.max_upload_size)
        if error.reason == REASON_STALE_FORM:
            return self._form_again(request, 403, message, msgs.STALE_SUBMIT, token=token)
        if error.reason == _IN_FLIGHT:
            return self._form_again(request, 429, message, msgs.IN_FLIGHT, token=token)
        if error.reason == _BUSY or error.status == 503:
            request.setHeader(b"retry-after", b"60")
            return self._form_again(request, 503, message, msgs.BUSY, token=token)
        return self._form_again(request, error.status, message, msgs.BAD_FORM if have_message else msgs.BAD_FORM_LOST,
                                token=token)

    def _no_room_page(self, request: Any, message: str, have_message: bool, token: str | None = None) -> bytes:
        """The disk cannot take these files and keep its reserve: say what size fits now."""
        disk = self.newsroom.disk
        largest = min(self.settings.max_upload_size, disk.largest_upload() - _FORM_ALLOWANCE if disk else 0)
        if largest < 100_000:
            return self._form_again(request, 507, message, msgs.NO_ROOM_AT_ALL, token=token)
        # Rounded down to what the page shows (tenths of a MB below 10 MB, whole MB above): a
        # file of the size named must fit.
        step = 100_000 if largest < 10_000_000 else 1_000_000
        largest -= largest % step
        return self._form_again(request, 507, message, msgs.NO_ROOM if have_message else msgs.NO_ROOM_LOST,
                                token=token, size=largest)

    def _disk_refused(self) -> None:
        # Counted for the day's report; the admin hears of the full disk from a timer
        # (disk_watch), never at the moment a source was refused.
        self.newsroom.activity.not_stored("no_room")

    @app.route("/delete", methods=["POST"])
    @login_required
    @inlineCallbacks
    def delete(self, request: Any, login: SourceLogin):
        number = self._arg(request, "reply") or ""
        deleted = False
        # Digits only, and few: anything else names no reply (and never reaches the database).
        if number.isascii() and number.isdigit() and len(number) <= 9:
            deleted = yield shield(self.newsroom.delete_reply(login.identity, int(number)))
        lang = i18n.negotiate(request)
        if deleted:
            login.session.flash(lang.gettext(msgs.REPLY_DELETED), "ok")
            return self._to_lookup(request, login.session)
        page = yield self._lookup_page(request, login, status=404, error=lang.gettext(msgs.REPLY_NOT_FOUND))
        return page

    @app.route("/delete-all", methods=["POST"])
    @login_required
    @inlineCallbacks
    def delete_all(self, request: Any, login: SourceLogin):
        count = yield shield(self.newsroom.delete_all_replies(login.identity))
        ctx = self._ctx(request, None)
        login.session.flash(ctx._(msgs.REPLIES_DELETED, count=count), "ok")
        return self._to_lookup(request, login.session)

    # -- machine-readable ------------------------------------------------------------------

    @app.route("/favicon.ico", methods=["GET"])
    def favicon(self, request: Any) -> bytes:
        # Browsers ask for it on every visit: no icon, and no error page either.
        request.setResponseCode(204)
        return b""

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
        from werkzeug.exceptions import HTTPException

        if failure.check(HTTPException):
            code = failure.value.code or 500
            if code == 404:
                return self._error(request, 404, msgs.T_NOT_FOUND, msgs.NOT_FOUND)
            if code == 405:
                return self._error(request, 405, msgs.T_NOT_ALLOWED, msgs.NOT_ALLOWED)
            return self._error(request, code, msgs.T_REFUSED, msgs.REFUSED)
        if failure.check(Busy):  # e.g. the reply decryption queue of /lookup
            return self._busy(request)
        if is_disk_full(failure.value):  # e.g. /create when SQLite cannot grow its WAL
            self.newsroom.activity.failed("the disk is full")
            return self._error(request, 507, msgs.T_OUT_OF_SPACE, msgs.OUT_OF_SPACE)
        self._report_failure(failure)
        return self._error(request, 500, msgs.T_SOMETHING_WRONG, msgs.SOMETHING_WRONG)

    # -- streaming uploads -------------------------------------------------------------------

    def start_upload(self, request: DeadDropRequest, boundary: bytes, length: int | None) -> MultipartUpload:
        """Called when /submit's headers arrive, before any body byte is read.

        When the submission cannot be taken (session expired, another upload in flight, a
        Content-Length over the limit) the text fields are still read, so the answer can give
        the message back, and the answer goes out at the first file byte: no file byte is
        read past that point."""
        limits = UploadLimits(
            max_file_bytes=self.settings.max_upload_size,
            text_fields={"csrf_token": 256, pages.FORM_TOKEN_FIELD: 64, "msg": MAX_MESSAGE_CHARS * 4,
                         pages.HONEYPOT_FIELD: 1024},
            file_fields=frozenset({"fh"}),
        )
        files_refused = None
        # The one session check of an upload, before its first byte: whatever happens to the
        # session later (expiry, a logout in another tab), what this login started is received.
        login = request.upload_login = self._current_login(request)
        session = login.session if login else None
        pumps = self.newsroom.queues.uploads
        if login is None:
            files_refused = UploadError(403, "Your session expired; please log in again.", _EXPIRED)
        elif pumps.holding(login.identity.source_id) >= pumps.per_key:
            files_refused = UploadError(429, _STILL_RECEIVING, _IN_FLIGHT)
        elif length is not None and length > self._multipart_limit():
            files_refused = UploadError(413, "That upload is too large.", REASON_FILES_TOO_LARGE)
        tickets: list[Any] = []  # the pump slot and the disk space held for this body
        circuit = circuit_of(request)
        progress = pumps.progress()
        disk = self.newsroom.disk

        def open_sink(filename: str, pause: Callable[[], None], resume: Callable[[], None]) -> Any:
            # Each file being received holds a pump thread. Counted per source identity, not per
            # session (logging in again gives a codename no more), per Tor circuit, and in total;
            # when all are taken the slowest upload may be ended to make room. Text-only
            # messages take none: they are encrypted on a pool of their own.
            if disk is not None and not tickets:
                # Before the first file byte: the whole body's space (its Content-Length, or the
                # limit if it has none), less what it writes as it goes.
                try:
                    tickets.append(disk.admit(self._multipart_limit() if length is None else length, progress))
                except NoRoom:
                    self._disk_refused()
                    raise UploadError(507, "Not enough free disk space.", _NO_ROOM)
            try:
                tickets.append(pumps.try_acquire(
                    login.identity.source_id, circuit if circuit.is_tor else None, progress,
                    evict=lambda: (self._flood("upload_ended"), upload.cancel(UploadError(503, BUSY_MESSAGE, _BUSY)))))
            except KeyBusy:
                raise UploadError(429, _STILL_RECEIVING, _IN_FLIGHT)
            except Busy:
                self._flood("busy")
                raise UploadError(503, BUSY_MESSAGE, _BUSY)
            return self.newsroom.encrypt_stream(gzip_name=filename, compress=False, on_pause=pause, on_resume=resume)

        def answer_now(error: UploadError) -> None:
            # Not a word more is read: the page goes out now, with what was typed.
            fields = upload.fields_so_far()
            request.answering_early = True  # the form itself, at once (see _form_again)
            request.answer_early(error.status, self._refused_upload_page(request, error, fields))

        upload = MultipartUpload(boundary, limits, open_sink, request.pause_body, request.resume_body,
                                 csrf_token=session.csrf_token if session else None,
                                 files_refused=files_refused, on_fail=answer_now, progress=progress)

        in_flight = self._uploads.setdefault(login.identity.source_id, set()) if login else set()
        in_flight.add(upload)

        def done(result: Any) -> Any:
            for ticket in tickets:
                ticket.release()
            in_flight.discard(upload)
            if login is not None and not in_flight and self._uploads.get(login.identity.source_id) is in_flight:
                del self._uploads[login.identity.source_id]
            return result

        upload.result.addBoth(done)
        return upload

    def _multipart_limit(self) -> int:
        # Read per request: admins can change the limit while the server runs.
        return self.settings.max_upload_size + MAX_MESSAGE_CHARS * 4 + (1 << 20)

    def _early_page(self, status: int, title: str, message: str, headers: Any = None) -> bytes:
        """A refusal answered before a route runs (too many requests, too large, headers too
        large, tor2web...): the source frame, in the language the headers ask for."""
        ctx = PageContext(lang=i18n.from_headers(headers), site_name=self._name, session_minutes=self.session_minutes,
                          max_upload_size=self.settings.max_upload_size, allow_uploads=self.settings.allow_uploads)
        return render_sync(pages.error(ctx, ctx._(title), ctx._(message)))

    def _report_failure(self, failure: Any) -> None:
        """A source request failed: described (code positions only) in the day's report, not now."""
        self.newsroom.activity.failed(describe_failure(failure))

    def site(self, reactor: Any = None, connection_limits: ConnectionLimits | None = None) -> DeadDropSite:
        if connection_limits is not None:
            self._connections = connection_limits
        return DeadDropSite(
            self.app.resource(),
            # A message carried through the login form: 100,000 characters of up to 4 bytes,
            # percent-encoded (3 bytes each), plus the other fields.
            body_policy=BodyPolicy(max_form_bytes=MAX_MESSAGE_CHARS * 12 + (64 << 10)),
            multipart_limit=self._multipart_limit,
            render_error_page=self._early_page,
            start_upload=self.start_upload,
            too_large_message="That upload is larger than this instance accepts. Nothing was stored.",
            upload_targets=frozenset({b"/submit"}),
            refuse_request=refuse_proxied,
            connection_limits=connection_limits,
            reactor=reactor,
            refuse_large_uploads_early=False,
            request_rate=self.request_rate,
            # A circuit that keeps asking faster than that is flooding: closed like one that
            # keeps being throttled.
            on_rate_limited=self._rate_limited,
            report_failure=self._report_failure,
            on_cut=self._cut,
        )


def _same_origin(request: Any) -> bool:
    """Whether a form post came from this site's own page (Fetch Metadata and Origin, when the
    browser sends them): only then is a typed message shown back, so another site cannot post
    a message that a source would then send under their codename."""
    site = request.getHeader(b"sec-fetch-site")
    if site is not None:
        return site in (b"same-origin", b"none")
    # Our pages say Referrer-Policy: no-referrer, so a browser sends "Origin: null" for them.
    origin = request.getHeader(b"origin")
    if origin is None or origin == b"null":
        return True
    return origin.split(b"://", 1)[-1] == (request.getHeader(b"host") or b"")


def _formatted(ctx: PageContext, values: dict[str, Any]) -> dict[str, Any]:
    """Values of an error message in the page's language: sizes in MB (``ctx._`` writes the other
    numbers, and says counts in their plural forms)."""
    return {k: ctx.size(v) if k == "size" else v for k, v in values.items()}


def _discard(newsroom: Newsroom, result: UploadResult, parts: list[EncryptedPart] = ()) -> None:
    for f in result.files:
        newsroom.store.discard_temp(f.temp_path)
    for p in parts:
        newsroom.store.discard_temp(p.temp_path)
