"""The key step of logging in (issue 30): after a right passphrase, an account with security keys
touches one. The page is one of the two journalist pages with a script (``_webauthn``).

``auth.login`` starts the step (``start``) in the anonymous session the login form used; this
module finishes it. The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

import time
from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.accounts import Journalist, LoginFailed
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, key_pages, pages
from deaddrop.web.journalist._webauthn import allow_script, browser_answer, relying_party
from deaddrop.web.sessions import Session
from deaddrop.web.journalist.interface import JournalistSite

routes = Routes()

PENDING = "pending_key_login"
PENDING_SECONDS = 300.0  # from the right passphrase to the touch of a key
LOGIN_FACTOR = "login_factor"  # how a session's login was made: "code", "key" or "recovery"


def start(session: Session, journalist: Journalist) -> None:
    """The passphrase was right: the login goes on at /login/key, for a few minutes."""
    session.data[PENDING] = {"journalist_id": journalist.id, "until": time.time() + PENDING_SECONDS}


def pending(session: Session | None) -> dict[str, Any] | None:
    found = session.data.get(PENDING) if session is not None else None
    if found is None or found["until"] < time.time():
        return None
    return found


@inlineCallbacks
def key_page(self: JournalistSite, request: Any, session: Session, waiting: dict[str, Any], error: str | None = None,
             status: int = 200):
    """The key step's page with a fresh challenge (kept in ``waiting``), or why there is none."""
    say = i18n.of(session)
    rp = relying_party(request, self.key_hosts())
    problem = key_pages.no_key_address(say, list(self.key_hosts())) if rp is None else None
    begun = (yield self.security_keys.begin_login(waiting["journalist_id"], rp)) if rp is not None else None
    if rp is not None and begun is None:
        problem = say._("None of your keys was registered on this address: open the interface by the name you "
                        "registered them on.")
    if begun is None:
        page = key_pages.key_login(self.site_name, session, None, None, error, problem)
        return (yield self.html(request, page, 400 if status == 200 else status))
    options, waiting["state"] = begun
    page = key_pages.key_login(self.site_name, session, options, allow_script(request), error)
    return (yield self.html(request, page, status))


@routes.route("/login/key", methods=["GET"])
@inlineCallbacks
def login_key_form(self: JournalistSite, request: Any):
    session = self.cookie.lookup(request)
    waiting = pending(session)
    if session is None or waiting is None:
        return self.redirect(request, "/login")
    return (yield key_page(self, request, session, waiting))


@routes.route("/login/key", methods=["POST"])
@inlineCallbacks
def login_key(self: JournalistSite, request: Any):
    session = self.cookie.lookup(request)
    if session is None or not session.check_csrf(form_arg(request, "csrf_token")):
        session = self.anonymous_session(request)
        page = pages.login(self.site_name, session, i18n.of(session)._(pages.SESSION_EXPIRED))
        return (yield self.html(request, page, 403))
    waiting = pending(session)
    journalist = (yield self.accounts.get(waiting["journalist_id"])) if waiting is not None else None
    rp = relying_party(request, self.key_hosts())
    if journalist is None or rp is None or waiting is None:
        session.data.pop(PENDING, None)
        return self.redirect(request, "/login")
    try:
        journalist = yield shield(self.security_keys.finish_login(journalist, rp, waiting.pop("state", None),
                                                                  browser_answer(request)))
    except LoginFailed as failure:
        status, message = (429, pages.THROTTLED_LOGIN_ERROR) if failure.throttled else (403, key_pages.KEY_LOGIN_ERROR)
        return (yield key_page(self, request, session, waiting, i18n.of(session)._(message), status))
    return finish(self, request, session, journalist, "key", "/sources")


def finish(self: JournalistSite, request: Any, session: Session, journalist: Journalist, factor: str, then: str) -> bytes:
    """Both factors were right: a fresh session (never the anonymous one's cookie) for the account."""
    session.data.pop(PENDING, None)
    _, fresh = self.cookie.start(request, replacing=session)
    self.bind_session(fresh, journalist)
    fresh.data[LOGIN_FACTOR] = factor
    for category, message in session.pop_flashes():  # what the login had to say goes along
        fresh.flash(message, category)
    return self.redirect(request, then)


def register(cls: type[Routed]) -> None:
    """Add the key step of logging in to the journalist interface class ``cls``."""
    routes.register(cls)
