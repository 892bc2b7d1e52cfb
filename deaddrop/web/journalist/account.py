"""A journalist's own account: its page, its language, and a new passphrase.

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from deaddrop.newsroom.accounts import LoginFailed, SecurityKeyNeeded
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import login_required, login_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.newsroom.languages import JOURNALIST_LANGUAGES
from deaddrop.web.journalist import i18n, pages
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.key_login import LOGIN_FACTOR
from deaddrop.web.journalist.keys import account_page
from deaddrop.web.journalist.interface import JournalistSite


routes = Routes()


@routes.route("/account", methods=["GET"])
@login_required
def account(self: JournalistSite, request: Any, login: JournalistLogin):
    return account_page(self, request, login)


@login_route(routes, "/account/new-passphrase", "POST")
def new_passphrase(self: JournalistSite, request: Any, login: JournalistLogin):
    session, journalist = login.session, login.journalist
    _ = i18n.of(session)._
    try:
        yield shield(self.accounts.verify_again(journalist, form_arg(request, "passphrase", 1024),
                                                form_arg(request, "one_time_code", 16)))
    except SecurityKeyNeeded:
        # The passphrase was right; an account with keys is confirmed by a session its key began.
        if session.data.get(LOGIN_FACTOR) != "key":
            message = _("Log out and log in again with your security key first. Nothing was changed.")
            return (yield account_page(self, request, login, error=message, status=403))
    except LoginFailed as failure:
        if failure.throttled:
            message = _(pages.THROTTLED_LOGIN_ERROR)
        elif failure.reason == "hotp_next_code":
            message = _("Your YubiKey is ahead of this server: within 5 minutes, try again with its next code "
                        "(press it once more). Nothing was changed.")
        else:
            message = _("That passphrase or one-time code was wrong. Nothing was changed.")
        return (yield account_page(self, request, login, error=message, status=403))
    creds = yield shield(self.accounts.reset_passphrase(journalist.id))
    self.end_other_sessions(session, creds.journalist)
    self.events.emit("journalist.password.changed", username=journalist.username)
    fresh = JournalistLogin(session, creds.journalist)
    return (yield account_page(self, request, fresh, new_passphrase=creds.passphrase))


@login_route(routes, "/account/language", "POST")
def choose_language(self: JournalistSite, request: Any, login: JournalistLogin):
    """The account's language, kept with the account: these pages and the digest speak it."""
    code = form_arg(request, "language", 16)
    if code not in JOURNALIST_LANGUAGES:
        return self.error(request, 400, N_("Nothing done"), N_("Choose one of the languages listed."))
    yield shield(self.accounts.set_language(login.journalist.id, code))
    login.session.data[i18n.LANGUAGE] = code
    login.session.flash(i18n.speech(code)._("Language saved."), "ok")
    return self.redirect(request, "/account")


def register(cls: type[Routed]) -> None:
    """Add the account routes to the journalist interface class ``cls``."""
    routes.register(cls)
