"""Logging in (passphrase and one-time code, over the journalist's own certificate) and out.
An account with security keys goes on to a key after its passphrase (``key_login``).

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.accounts import LoginFailed, SecurityKeyNeeded
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, key_login, pages
from deaddrop.web.journalist.cert_binding import refuse_mismatch
from deaddrop.web.journalist.interface import JournalistSite


routes = Routes()


@routes.route("/", methods=["GET"])
@inlineCallbacks
def index(self: JournalistSite, request: Any):
    login = yield self.current_login(request)
    return self.redirect(request, "/sources" if login else "/login")


@routes.route("/login", methods=["GET"])
@inlineCallbacks
def login_form(self: JournalistSite, request: Any):
    login = yield self.current_login(request)
    if login is not None:
        return self.redirect(request, "/sources")
    lengths = (round(self.sessions.absolute_timeout / 60), round(self.sessions.idle_timeout / 60))
    return (yield self.html(request, pages.login(self.site_name, self.anonymous_session(request), None,
                                                  session_minutes=lengths)))


@routes.route("/login", methods=["POST"])
@inlineCallbacks
def login(self: JournalistSite, request: Any):
    session = self.cookie.lookup(request)
    if session is None or not session.check_csrf(form_arg(request, "csrf_token")):
        session = self.anonymous_session(request)
        page = pages.login(self.site_name, session, i18n.of(session)._(pages.SESSION_EXPIRED))
        return (yield self.html(request, page, 403))
    say = self.speech(request)
    username = (form_arg(request, "username", 64) or "").strip()
    if refuse_mismatch(request, username, self.events):
        page = pages.login(self.site_name, session, say._(pages.CERTIFICATE_MISMATCH_ERROR), username[:64])
        return (yield self.html(request, page, 403))
    try:
        journalist = yield shield(self.accounts.authenticate(
            username, form_arg(request, "passphrase", 1024), form_arg(request, "one_time_code", 16)))
    except SecurityKeyNeeded as needed:
        key_login.start(session, needed.journalist)
        return self.redirect(request, "/login/key")
    except LoginFailed as failure:
        status, message = (429, pages.THROTTLED_LOGIN_ERROR) if failure.throttled else (403, login_error(failure))
        return (yield self.html(request, pages.login(self.site_name, session, say._(message), username[:64]), status))
    due = yield self.security_keys.enrol_before(journalist)
    if due is not None:  # said in the account's own language: the next page is in it
        said = i18n.speech(journalist.language or say.code)
        session.flash(said._("Your newsroom requires a security key for this account: register one on your "
                             "Account page before {day}.", day=said.day(due)), "warning")
    return key_login.finish(self, request, session, journalist, "code", "/sources")


@routes.route("/logout", methods=["POST"])
def logout(self: JournalistSite, request: Any) -> Any:
    session = self.cookie.lookup(request)
    if session is not None and session.check_csrf(form_arg(request, "csrf_token")):
        self.cookie.end(request, session)
    return self.redirect(request, "/login")


def register(cls: type[Routed]) -> None:
    """Add the login routes to the journalist interface class ``cls``."""
    routes.register(cls)


def login_error(failure: LoginFailed) -> str:
    """The message for a failed login. A reused code, or a YubiKey's code too far ahead, is
    only ever reported after the passphrase was right (``Accounts.authenticate`` checks it
    first), so naming it helps the journalist and tells nothing to someone without the passphrase."""
    if failure.reason == "hotp_next_code":
        return pages.NEXT_CODE_PROMPT
    return pages.REUSED_CODE_ERROR if failure.reason in ("totp_reused", "hotp_reused") else pages.GENERIC_LOGIN_ERROR
