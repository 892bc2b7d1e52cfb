"""Administrators manage users: add one, reset a passphrase or a two-factor secret, delete one;
each action confirmed on a page of its own first.

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.desk import valid_uuid
from deaddrop.newsroom.accounts import AccountError, DuplicateUsername, Journalist
from deaddrop.store import factor_queries as fq
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import Refused, admin_required, admin_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, pages
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist.interface import JournalistSite


routes = Routes()

CANNOT_DELETE_ONESELF = N_("You cannot delete your own account.")


@routes.route("/admin/users", methods=["GET"])
@admin_required
def users(self: JournalistSite, request: Any, login: JournalistLogin):
    return _users_page(self, request, login)


@inlineCallbacks
def _users_page(self: JournalistSite, request: Any, login: JournalistLogin, status: int = 200, error: str | None = None):
    accounts = yield self.accounts.list()
    certificates = (yield self.certificate_status()) if self.certificate_status is not None else None
    factors = yield self.accounts.db.run(fq.second_factors)
    page = pages.users(self.site_name, login.session, login.journalist, accounts, error, certificates, factors=factors)
    return (yield self.html(request, page, status))


@admin_route(routes, "/admin/users/<uuid>/<any(delete, 'reset-password', 'reset-2fa'):action>", "GET")
def confirm_account_action(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, action: str):
    """What the users page's buttons lead to: the action explained, and one button to do it."""
    target = yield _target(self, request, uuid)
    if action == "delete" and target.id == login.journalist.id:
        return (yield _users_page(self, request, login, 400, i18n.of(login.session)._(CANNOT_DELETE_ONESELF)))
    return (yield self.html(request, pages.confirm_account_action(self.site_name, login.session, login.journalist,
                                                                   target, action)))


def _confirmed(self: JournalistSite, request: Any, login: JournalistLogin, target: Journalist, action: str) -> Any:
    """None when the form says it was confirmed; else the confirmation page (nothing done)."""
    if form_arg(request, "confirm") == "yes":
        return None
    return self.html(request, pages.confirm_account_action(self.site_name, login.session, login.journalist,
                                                            target, action))


@admin_route(routes, "/admin/users", "POST")
def add_user(self: JournalistSite, request: Any, login: JournalistLogin):
    username = (form_arg(request, "username", 64) or "").strip()
    _ = i18n.of(login.session)._
    try:
        creds = yield shield(self.accounts.create(username, is_admin=form_arg(request, "is_admin") == "1"))
    except DuplicateUsername:
        return (yield _users_page(self, request, login, 400, _("A journalist named {name} already exists.",
                                                               name=username)))
    except AccountError:  # the one other refusal of a new account made here: its name
        return (yield _users_page(self, request, login, 400, _(
            "That username cannot be used: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit.")))
    self.events.emit("admin.journalist.added", username=login.journalist.username, target=creds.journalist.username)
    page = pages.credentials(self.site_name, login.session, login.journalist, creds.journalist.username,
                             passphrase=creds.passphrase, totp_secret=creds.totp_secret, totp_uri=creds.totp_uri,
                             heading=_("Added {name}", name=creds.journalist.username),
                             cert_command=self.cert_issue_command.format(name=creds.journalist.username))
    return (yield self.html(request, page))


@inlineCallbacks
def _target(self: JournalistSite, request: Any, uuid: str):
    target = yield self.accounts.by_uuid(uuid) if valid_uuid(uuid) else None
    if target is None:
        raise Refused(self.error(request, 404, N_("Not found"), N_("There is no such user.")))
    return target


@admin_route(routes, "/admin/users/<uuid>/<any('reset-password', 'reset-2fa'):action>", "POST")
def reset_credentials(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, action: str):
    """A new passphrase (reset-password) or a new two-factor secret (reset-2fa) for a user: its
    other sessions end, and the page shows the new credential once."""
    session, admin = login.session, login.journalist
    target = yield _target(self, request, uuid)
    unconfirmed = _confirmed(self, request, login, target, action)
    if unconfirmed is not None:
        return (yield unconfirmed)
    passphrase = action == "reset-password"
    reset = self.accounts.reset_passphrase if passphrase else self.accounts.reset_totp
    had_keys = not passphrase and (yield self.accounts.db.run(fq.key_count, target.id))
    creds = yield shield(reset(target.id))
    self.end_other_sessions(session if target.id == admin.id else None, creds.journalist)
    self.events.emit("admin.journalist.password_reset" if passphrase else "admin.journalist.2fa_reset",
                     username=admin.username, target=target.username)
    if had_keys:  # the journalist lost their key: its reset is an event of its own
        self.events.emit("admin.journalist.keys_reset", username=admin.username, target=target.username)
    _ = i18n.of(session)._
    page = pages.credentials(self.site_name, session, admin, target.username,
                             passphrase=creds.passphrase if passphrase else None,
                             totp_secret=None if passphrase else creds.totp_secret,
                             totp_uri=None if passphrase else creds.totp_uri,
                             heading=_("New passphrase for {name}", name=target.username) if passphrase
                             else _("New two-factor secret for {name}", name=target.username))
    return (yield self.html(request, page))


@admin_route(routes, "/admin/users/<uuid>/delete", "POST")
def delete_user(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    session, admin = login.session, login.journalist
    target = yield _target(self, request, uuid)
    if target.id == admin.id:
        return (yield _users_page(self, request, login, 400, i18n.of(session)._(CANNOT_DELETE_ONESELF)))
    unconfirmed = _confirmed(self, request, login, target, "delete")
    if unconfirmed is not None:
        return (yield unconfirmed)
    yield shield(self.accounts.delete(target.id))
    self.sessions.destroy_owner(target.id)
    self.events.emit("admin.journalist.deleted", username=admin.username, target=target.username)
    session.flash(i18n.of(session)._("Deleted {name}.", name=target.username), "ok")
    return self.redirect(request, "/admin/users")


def register(cls: type[Routed]) -> None:
    """Add the user administration routes to the journalist interface class ``cls``."""
    routes.register(cls)
