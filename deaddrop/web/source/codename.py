"""A codename: made (/generate, /create), used to log in (/login), and logged out (/logout).

/create and /login both run Argon2id for a visitor: through ``_argon2id``, the one admission
for it (the circuit's place in the login throttle taken before the KDF, the busy and throttled
refusals, a visitor who hangs up), and both end in ``_log_in``. The routes are added to
``SourceInterface`` by ``register``.
"""
from __future__ import annotations

import dataclasses
import hmac
from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred, inlineCallbacks

from deaddrop.newsroom import codenames
from deaddrop.admission.queues import BUSY_MESSAGE, Busy
from deaddrop.newsroom.newsroom import LoginThrottled, NoFreeDesignation, SourceIdentity
from deaddrop.transport.circuits import circuit_of
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.sessions import Session, SessionStore
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._origin import from_our_page
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS, within_limit
from deaddrop.web.source._answers import busy_status
from deaddrop.web.source._received import receipt_thanks
from deaddrop.web.source.submit import carried_submission
from deaddrop.web.source.interface import SourceSite


class _Refused(Exception):
    """Argon2id was not run for this visitor: throttled (429) or busy (503)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


routes = Routes()


@routes.route("/generate", methods=["GET"])
def generate(self: SourceSite, request: Any) -> Any:
    session = self.session_of(request)
    if session is not None and self.identity_of(session):
        session.flash(i18n.negotiate(request).gettext(msgs.ALREADY_LOGGED_IN), "warning")
        return self.to_lookup(request, session)
    # The codename this browser was shown, when it switched languages on this page (a token
    # sealed for this browser only); else a new one.
    codename = (self.forms.open(self.arg(request, "keep"), "create", self.cookie.token(request))
                or codenames.generate_codename(self.codename_words))
    # Sealed into the form's token: /create accepts codenames we generated and nothing else,
    # and nothing is kept here.
    return self.html(request, pages.generate(self.form_ctx(request, "create", codename), codename))


@routes.route("/create", methods=["POST"])
@inlineCallbacks
def create(self: SourceSite, request: Any):
    generated = self.form_secret(request, "create")
    if not generated:
        return self.error(request, 403, msgs.T_TRY_AGAIN, msgs.STALE_CREATE)
    codename = self.arg(request, "codename") or ""
    if not hmac.compare_digest(codename.encode("utf-8"), generated.encode("utf-8")):
        return self.error(request, 400, msgs.T_TRY_AGAIN, msgs.NOT_GENERATED)
    # A /create that makes nothing (its form replayed: "already in use") cost an Argon2id run
    # like a wrong codename, and counts like one for its circuit.
    try:
        identity, passphrase = yield _argon2id(
            self, request, lambda circuit: self.newsroom.create_source(codename, circuit), counted=ValueError)
    except _Refused as refused:
        if refused.status == 429:
            return self.error(request, 429, msgs.T_TRY_AGAIN, msgs.THROTTLED)
        # The same codename again, on a fresh form: the one the source wrote down stays theirs.
        ctx = self.form_ctx(request, "create", codename)
        return self.html(request, pages.generate(ctx, codename, ctx._(BUSY_MESSAGE)), 503)
    except ValueError:
        # Its own form, sent twice (a double click): the first one made the codename. Say it
        # is active and offer to log in, rather than "get a new codename" for one that works.
        # (Its circuit still counts a failure: the same form replayed in a flood costs a run.)
        ctx = self.form_ctx(request, "login")
        return self.html(request, pages.login(ctx, notice=ctx._(msgs.CODENAME_ACTIVE)), 409)
    except NoFreeDesignation:
        # Counted for the day's report (and start-up refuses lists this small): a calm page.
        self.newsroom.activity.failed("no free designation: the designation lists are too small")
        request.setHeader(b"retry-after", b"3600")
        return self.error(request, 503, msgs.T_TRY_AGAIN, msgs.NO_NEW_CODENAMES)
    fresh = _log_in(self, request, self.session_of(request), identity, passphrase, codename)
    fresh.data["first_visit"] = True  # "what happens next" after the first submission
    fresh.flash(i18n.negotiate(request).gettext(msgs.CODENAME_ACTIVE), "ok")
    return self.to_lookup(request, fresh)


@routes.route("/login", methods=["GET"])
def login_form(self: SourceSite, request: Any) -> Any:
    session = self.session_of(request)
    thanks = receipt_thanks(self, request, i18n.negotiate(request))
    if session is not None and self.identity_of(session):
        if thanks:  # logged in again in another tab while the upload arrived
            session.flash(thanks, "ok")
        return self.to_lookup(request, session)
    ctx = self.form_ctx(request, "login")
    notice = ctx._(msgs.INACTIVE, minutes=self.session_minutes) if self.arg(request, "expired") else None
    if thanks:
        ctx = dataclasses.replace(ctx, flashes=[("ok", thanks)])
        notice = ctx._(msgs.RECEIVED_AFTER_LOGOUT, minutes=self.session_minutes)
    return self.html(request, pages.login(ctx, notice=notice))


@routes.route("/login", methods=["POST"])
@inlineCallbacks
def login(self: SourceSite, request: Any):
    # A message typed before the session expired rides along in the form (see /submit).
    carried = within_limit(form_arg(request, "msg", MAX_MESSAGE_CHARS) or "")
    typed = self.arg(request, "codename") or ""
    # Every refusal below shows the form again with what was typed in it, so one mistyped word
    # does not mean typing seven again (docs/threat-model.md, "A mistyped codename"): in this
    # answer only (no-store), never kept, logged or put in an address.
    kept = typed[:codenames.MAX_CODENAME_CHARS]
    carried_form = self.arg(request, pages.FORM_TOKEN_FIELD)  # the form the message was typed in
    if not from_our_page(request):
        # Only our own page may carry a message through, or fill the codename box: another
        # site must not plant text that a source would then send under their codename, or a
        # codename of its own for the source to log in with.
        carried = kept = ""
    session = self.session_of(request)  # logging in again from a logged-in page is fine too
    form_ok = (self.form_secret(request, "login") is not None
               or (session is not None and session.check_csrf(self.arg(request, "csrf_token"))))
    ctx = self.form_ctx(request, "login")  # the form again, for every answer that shows it

    def again(error: str, status: int) -> Deferred:
        return self.html(request, pages.login(ctx, error, carried=carried, codename=kept, form_token=carried_form),
                         status)

    if not form_ok:
        return again(ctx._(msgs.STALE_LOGIN), 403)
    codename = codenames.normalise_codename(typed)
    if codename is None:
        # Malformed codenames cannot match any source: no KDF, and they count nowhere. Words
        # outside the list are named (they are part of no codename).
        unknown = codenames.unknown_words(typed)
        error = ctx._(msgs.NOT_RECOGNIZED)
        if unknown:
            error += ctx.lang.space + ctx._(msgs.NOT_IN_LIST, words=", ".join(unknown), count=len(unknown))
        return again(error, 403)
    try:
        found = yield _argon2id(self, request, lambda circuit: self.newsroom.login(codename, circuit))
    except _Refused as refused:
        said = msgs.THROTTLED if refused.status == 429 else BUSY_MESSAGE
        return again(ctx._(said), refused.status)
    if found is None:
        # The same page for every codename that opens nothing, whoever else exists.
        return again(ctx._(msgs.NOT_RECOGNIZED), 403)
    identity, passphrase = found
    fresh = _log_in(self, request, session, identity, passphrase, codename)
    if carried.strip():
        page = yield carried_submission(self, request, SourceLogin(fresh, identity, passphrase), carried,
                                        carried_form)
        return page
    return self.to_lookup(request, fresh)


@routes.route("/logout", methods=["GET"])
def logout(self: SourceSite, request: Any) -> Deferred:
    self.cookie.end(request, self.session_of(request))
    return self.html(request, pages.logged_out(self.page_ctx(request)))


def register(cls: type[Routed]) -> None:
    """Add the codename routes to the source interface class ``cls``."""
    routes.register(cls)


@inlineCallbacks
def _argon2id(self: SourceSite, request: Any, run: Callable[[Any], Deferred], counted: type[Exception] | None = None):
    """``run(circuit)``'s result: an Argon2id run for this visitor's codename, new or typed.

    Failures count per circuit, never globally; the attempt's place is taken before the KDF,
    so a burst of concurrent attempts cannot all get past the check. A run that finds nothing
    (None) or raises ``counted`` counts as a failure for the circuit: a wrong codename, or a
    /create form replayed, costs a run either way. Raises ``_Refused`` when the circuit is
    throttled (429) or the queue is full (503), with Retry-After set; ``run``'s other errors
    come through, its place given back."""
    circuit = circuit_of(request)
    reservation = self.defence.login_throttle.reserve(circuit)
    if reservation is None:
        self.defence.refused(circuit)
        request.setHeader(b"retry-after", b"60")
        raise _Refused(429)
    try:
        # Not shielded: a visitor who leaves while waiting for Argon2id leaves the queue.
        result = yield run(circuit)
    except LoginThrottled:
        reservation.cancel()
        self.defence.refused(circuit)
        request.setHeader(b"retry-after", b"60")
        raise _Refused(429)
    except Busy:
        reservation.cancel()
        # A circuit that keeps the queue full while refused is flooding: it counts toward
        # being closed like one that keeps being throttled (a refusal costs it nothing else).
        self.defence.refused(circuit, event=False)
        self.defence.flood("busy")
        raise _Refused(busy_status(request))
    except CancelledError:
        self.defence.abandoned(reservation)
        raise
    except BaseException as e:
        if counted is not None and isinstance(e, counted):
            reservation.failed()
        else:
            reservation.cancel()
        raise
    if result is None:
        reservation.failed()
    else:
        reservation.cancel()
    return result


def _log_in(self: SourceSite, request: Any, replacing: Session | None, identity: SourceIdentity, passphrase: str,
            codename: str) -> Session:
    """A fresh session for this source (the one it had, if any, replaced): how /create and /login end."""
    token, fresh = self.cookie.start(request, replacing=replacing)
    fresh.data["source"] = identity
    self.sessions.bind(fresh, identity.source_id)
    SessionStore.seal(fresh, token, "passphrase", passphrase)
    # Only readable with the source's cookie, like the passphrase: the lookup page can show it.
    SessionStore.seal(fresh, token, "codename", codename)
    return fresh
