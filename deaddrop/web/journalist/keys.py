"""A journalist's own security keys (issue 30): registering one, removing one. The registration
page is one of the two journalist pages with a script (``_webauthn``).

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.key_login import KeyRemovalRefused
from deaddrop.second_factor.security_keys import MAX_NAME_CHARS, KeyRefused
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import Refused, login_required, login_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, key_pages, pages
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist._webauthn import allow_script, browser_answer, relying_party
from deaddrop.web.journalist.interface import JournalistSite

routes = Routes()

ENROLMENT = "key_enrolment"  # the registration ceremony's state, in the session
_REFUSALS = {
    "wrong_origin": N_("The key answered for another address: register it on this page, opened by the interface's "
                       "name."),
    "duplicate": N_("That key is already registered."),
    "too_many": N_("An account can have at most 10 keys: remove one first."),
    "expired": N_("That took too long. Try again."),
}


@inlineCallbacks
def _enrol_page(self: JournalistSite, request: Any, login: JournalistLogin, error: str | None = None, status: int = 200,
                name: str = ""):
    rp = relying_party(request, self.key_hosts())
    if rp is None:
        page = key_pages.key_enrol(self.site_name, login.session, login.journalist, None, None,
                                   problem=key_pages.no_key_address(i18n.of(login.session), list(self.key_hosts())))
        return (yield self.html(request, page, 400))
    options, login.session.data[ENROLMENT] = yield self.security_keys.begin_enrolment(login.journalist, rp)
    page = key_pages.key_enrol(self.site_name, login.session, login.journalist, options, allow_script(request),
                               error, name=name)
    return (yield self.html(request, page, status))


@routes.route("/account/keys/new", methods=["GET"])
@login_required
def enrol_form(self: JournalistSite, request: Any, login: JournalistLogin):
    return _enrol_page(self, request, login)


@login_route(routes, "/account/keys/new", "POST")
def enrol(self: JournalistSite, request: Any, login: JournalistLogin):
    name = form_arg(request, "name", 256) or ""
    _ = i18n.of(login.session)._
    rp = relying_party(request, self.key_hosts())
    state = login.session.data.pop(ENROLMENT, None)
    try:
        if rp is None:
            raise KeyRefused("wrong_origin")
        yield shield(self.security_keys.finish_enrolment(login.journalist, rp, state, browser_answer(request), name))
    except KeyRefused as refused:
        message = _(_REFUSALS.get(refused.reason, N_("The key's answer could not be used. Try again.")))
        return (yield _enrol_page(self, request, login, message, 400, name))
    except ValueError:  # the name (the one other refusal: security_keys.MAX_NAME_CHARS)
        return (yield _enrol_page(self, request, login, _(
            "Give the key a name of 1 to {most} characters, such as \"blue YubiKey\".", most=MAX_NAME_CHARS),
            400, name))
    login.session.flash(_("Registered {name}. From now on you log in with your passphrase and a security key.",
                          name=name.strip()), "ok")
    return self.redirect(request, "/account")


@login_route(routes, "/account/keys/<int:key_id>/remove", "POST")
def remove(self: JournalistSite, request: Any, login: JournalistLogin, key_id: int):
    """A confirmation page first; the key goes when it is confirmed."""
    keys = yield self.security_keys.keys(login.journalist.id)
    key = next((k for k in keys if k.id == key_id), None)
    if key is None:
        raise Refused(self.error(request, 404, N_("Not found"), N_("You have no such key.")))
    if form_arg(request, "confirm") != "yes":
        page = key_pages.confirm_remove_key(self.site_name, login.session, login.journalist, key, len(keys) == 1)
        return (yield self.html(request, page))
    try:
        yield shield(self.security_keys.remove(login.journalist, key_id))
    except KeyRemovalRefused:
        return (yield account_page(self, request, login, status=400, error=i18n.of(login.session)._(
            "This is your account's last security key, and your newsroom requires one: register another key "
            "before removing this one.")))
    # A key removed may be a key lost: whatever logged in elsewhere (with it, say) is logged out.
    self.end_other_sessions(login.session, login.journalist)
    login.session.flash(i18n.of(login.session)._("Removed {name}. Your other sessions have ended.", name=key.name),
                        "ok")
    return self.redirect(request, "/account")


@inlineCallbacks
def account_page(self: JournalistSite, request: Any, login: JournalistLogin, error: str | None = None, status: int = 200,
                 new_passphrase: str | None = None):
    """The account page: who one is, a new passphrase, and one's security keys."""
    keys = yield self.security_keys.keys(login.journalist.id)
    due = yield self.security_keys.enrol_before(login.journalist)
    left = (yield self.security_keys.recovery_codes_left(login.journalist.id)) if keys else 0
    page = pages.account(self.site_name, login.session, login.journalist, error=error, new_passphrase=new_passphrase,
                         code_field=not keys, extra=[key_pages.keys_section(login.session, keys, due, left)])
    return (yield self.html(request, page, status))


def register(cls: type[Routed]) -> None:
    """Add the security key routes to the journalist interface class ``cls``."""
    routes.register(cls)
