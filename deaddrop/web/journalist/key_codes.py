"""Codes for an account with security keys (issue 30, items 4 and 5): a one-time code for the
API, printed recovery codes, and logging in with one of those in place of a key. Codes are
made only in a session that began with a key, and shown once.

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.accounts import LoginFailed
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import login_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, key_login, key_pages, pages
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.keys import account_page
from deaddrop.web.journalist.interface import JournalistSite

routes = Routes()

RECOVERY_ERROR = N_("That recovery code was wrong, or already used.")


@inlineCallbacks
def _after_a_key_login(self: JournalistSite, request: Any, login: JournalistLogin):
    """None when this session began with a key; else the account page saying so."""
    keys = yield self.security_keys.keys(login.journalist.id)
    if keys and login.session.data.get(key_login.LOGIN_FACTOR) == "key":
        return None
    _ = i18n.of(login.session)._
    message = (_("Log out and log in again with your security key first.") if keys
               else _("Register a security key first."))
    return (yield account_page(self, request, login, error=message, status=403))


@login_route(routes, "/account/api-code", "POST")
def api_code(self: JournalistSite, request: Any, login: JournalistLogin):
    refused = yield _after_a_key_login(self, request, login)
    if refused is not None:
        return refused
    code, expires = yield shield(self.security_keys.issue_api_code(login.journalist))
    say = i18n.of(login.session)
    page = key_pages.codes_shown(self.site_name, login.session, login.journalist, say._("Your one-time API code"),
                                 [code], [say._(
        "Type it where deaddrop-journalist or another API client asks for the one-time code, with your "
        "passphrase. It works once, until {time} UTC; asking for another one ends this one.",
        time=say.clock(expires))])
    return (yield self.html(request, page))


@login_route(routes, "/account/recovery-codes", "POST")
def recovery_codes(self: JournalistSite, request: Any, login: JournalistLogin):
    refused = yield _after_a_key_login(self, request, login)
    if refused is not None:
        return refused
    codes = yield shield(self.security_keys.make_recovery_codes(login.journalist))
    _ = i18n.of(login.session)._
    page = key_pages.codes_shown(self.site_name, login.session, login.journalist, _("Your recovery codes"), codes, [
        _("Print them, or write them down, and keep them apart from your keys: they are shown only now. Each "
          "logs you in once in place of a key, if you lose your keys. Your earlier recovery codes no longer work.")])
    return (yield self.html(request, page))


@routes.route("/login/recovery", methods=["POST"])
@inlineCallbacks
def login_recovery(self: JournalistSite, request: Any):
    """At the key step: a recovery code in place of the key."""
    session = self.cookie.lookup(request)
    if session is None or not session.check_csrf(form_arg(request, "csrf_token")):
        return self.redirect(request, "/login")
    waiting = key_login.pending(session)
    journalist = (yield self.accounts.get(waiting["journalist_id"])) if waiting is not None else None
    if journalist is None or waiting is None:
        return self.redirect(request, "/login")
    try:
        journalist = yield shield(self.security_keys.recover(journalist, form_arg(request, "recovery_code", 64)))
    except LoginFailed as failure:
        message = pages.THROTTLED_LOGIN_ERROR if failure.throttled else RECOVERY_ERROR
        return (yield key_login.key_page(self, request, session, waiting, i18n.of(session)._(message),
                                         429 if failure.throttled else 403))
    left = yield self.security_keys.recovery_codes_left(journalist.id)
    said = i18n.speech(journalist.language or i18n.of(session).code)  # the next page is in the account's language
    session.flash(said.n_("You logged in with a recovery code ({n} left). Register a new security key now, and "
                          "remove the one you lost.",
                          "You logged in with a recovery code ({n} left). Register a new security key now, and "
                          "remove the one you lost.", left), "warning")
    return key_login.finish(self, request, session, journalist, "recovery", "/account/keys/new")


def register(cls: type[Routed]) -> None:
    """Add the API code and recovery code routes to the journalist interface class ``cls``."""
    routes.register(cls)
