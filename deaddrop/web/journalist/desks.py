"""Administrators manage desks (issue 29): list and add them, and on a desk's own page rename it,
choose its members, write what sources read of it in each language, set whether sources see
its members and how long it keeps things, set or replace its key (a replacement confirmed on a
page of its own, both fingerprints shown) and remove it.

The rules, and the security events, are ``newsroom.desk_admin``'s, as for
``deaddrop-admin desk``; here the events carry the admin's name. The server's snapshot of the
desks is read again after each change, so sources see it at once. The routes are added to
``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

import time
from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom import desk_admin
from deaddrop.newsroom.desk import valid_uuid
from deaddrop.newsroom.desk_admin import MAX_DESCRIPTION, MAX_KEY_CHARS, MAX_NAME, Change, DeskRefused
from deaddrop.store import desk_queries as dq
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import Refused, admin_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n
from deaddrop.web.journalist.desk_pages import DeskView, confirm_key, confirm_remove, desk_page, desks_page
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.interface import JournalistSite

# What each refusal says on these pages (the command line says it with its flags).
_SAID = {
    "name_taken": N_("There is already a desk with that name."),
    "bad_name": N_("A desk name must be 1 to {limit} printable characters."),
    "key_in_use": N_("That key is already the key of desk {desk}: each desk needs a key of its own (its own SVS), "
                     "or the two desks read each other's sources."),
    "not_a_key": N_("That is not a usable public key: {problem}."),
    "default_key": N_("This is the default desk: its key is the instance's submission key."),
    "has_sources": N_("{desk} cannot be removed: sources have chosen it, and what was sent to it stays where it was "
                      "sent. Delete those sources first."),
    "is_default": N_("The default desk cannot be removed: its key is the instance's submission key."),
    "no_such_journalist": N_("There is no user named {username}."),
    "too_long": N_("That text is too long: at most {limit} characters."),
    "bad_retention": N_("The number of days must be from 1 to {limit}, or empty."),
    "bad_language": N_("Unknown language."),
    "not_compared": N_("Tick the box once you have compared the fingerprints. Nothing was changed."),
}
# The pages say a desk's fingerprint whole; these values are never shown in a refusal.
_UNSHOWN = ("detail",)

routes = Routes()


@admin_route(routes, "/admin/desks", "GET")
def desks(self: JournalistSite, request: Any, login: JournalistLogin):
    return (yield _list_page(self, request, login))


@admin_route(routes, "/admin/desks", "POST")
def add_desk(self: JournalistSite, request: Any, login: JournalistLogin):
    name = form_arg(request, "name", MAX_NAME * 4) or ""
    armored = form_arg(request, "key", MAX_KEY_CHARS + 1) or ""
    description = form_arg(request, "description", MAX_DESCRIPTION + 1) or ""
    try:
        desk_admin.desk_name(name)
        fingerprint = yield self.desk.newsroom.crypto_pool.run(desk_admin.check_key, armored)
        change = yield shield(self.accounts.db.run(desk_admin.add, name, armored, fingerprint, description, time.time()))
    except DeskRefused as e:
        return (yield _list_page(self, request, login, 400, _said(self, request, e)))
    yield _changed(self, login, change)
    row = yield self.accounts.db.run(dq.desk_by_name, change.fields["target"])
    login.session.flash(self.speech(request)._("Desk {name} added, key {fingerprint}. Compare it with the fingerprint "
                                               "its SVS printed, then choose its members.",
                                               name=change.fields["target"], fingerprint=fingerprint), "ok")
    return self.redirect(request, f"/admin/desks/{row['uuid']}")


@admin_route(routes, "/admin/desks/<uuid>", "GET")
def desk(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    view = yield _desk(self, request, uuid)
    return (yield _desk_page(self, request, login, view))


@admin_route(routes, "/admin/desks/<uuid>/<any(rename, members, settings, texts):what>", "POST")
def change_desk(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, what: str):
    view = yield _desk(self, request, uuid)
    try:
        changes = yield shield(self.accounts.db.run(_CHANGES[what], uuid, request))
    except DeskRefused as e:
        return (yield _desk_page(self, request, login, view, 400, _said(self, request, e)))
    for change in changes:
        yield _changed(self, login, change)
    login.session.flash(self.speech(request)._("Saved."), "ok")
    return self.redirect(request, f"/admin/desks/{uuid}")


@admin_route(routes, "/admin/desks/<uuid>/key", "POST")
def set_desk_key(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    """A key for a desk without one is set at once; a different key replaces the desk's only on the
    confirmation page's form (``confirm`` and ``compared``), which shows both fingerprints."""
    view = yield _desk(self, request, uuid)
    armored = form_arg(request, "key", MAX_KEY_CHARS + 1) or ""
    confirmed = form_arg(request, "confirm") == "yes"
    try:
        fingerprint = yield self.desk.newsroom.crypto_pool.run(desk_admin.check_key, armored)
        if confirmed and form_arg(request, "compared") != "yes":
            raise DeskRefused("not_compared")
        change = yield shield(self.accounts.db.run(_set_key, uuid, armored, fingerprint, confirmed))
    except DeskRefused as e:
        if e.reason == "key_differs":
            return (yield self.html(request, confirm_key(self.site_name, login.session, login.journalist, view,
                                                         armored, e.values["fingerprint"])))
        return (yield _desk_page(self, request, login, view, 400, _said(self, request, e)))
    say = self.speech(request)
    if change is None:
        login.session.flash(say._("The desk already has that key."), "ok")
    else:
        if change.event == "admin.desk.key_replaced":
            change.fields["detail"] += " (confirmed on the admin pages)"
        yield _changed(self, login, change)
        login.session.flash(say._("The desk's submissions are now encrypted to key {fingerprint}.",
                                  fingerprint=fingerprint), "ok")
    return self.redirect(request, f"/admin/desks/{uuid}")


@admin_route(routes, "/admin/desks/<uuid>/remove", "GET")
def confirm_removal(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    view = yield _desk(self, request, uuid)
    return (yield self.html(request, confirm_remove(self.site_name, login.session, login.journalist, view)))


@admin_route(routes, "/admin/desks/<uuid>/remove", "POST")
def remove_desk(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    view = yield _desk(self, request, uuid)
    if form_arg(request, "confirm") != "yes":
        return (yield self.html(request, confirm_remove(self.site_name, login.session, login.journalist, view)))
    try:
        change = yield shield(self.accounts.db.run(lambda conn: desk_admin.remove(conn, desk_admin.desk(conn, uuid=uuid))))
    except DeskRefused as e:
        return (yield _desk_page(self, request, login, view, 400, _said(self, request, e)))
    yield _changed(self, login, change)
    login.session.flash(self.speech(request)._("Desk {name} removed.", name=view.name), "ok")
    return self.redirect(request, "/admin/desks")


def register(cls: type[Routed]) -> None:
    """Add the desk pages to the journalist interface class ``cls``."""
    routes.register(cls)


# -- the changes, each in one transaction (a pool thread) ----------------------------------------

def _rename(conn: Any, uuid: str, request: Any) -> list[Change]:
    return [desk_admin.rename(conn, desk_admin.desk(conn, uuid=uuid), form_arg(request, "name", MAX_NAME * 4) or "")]


def _members(conn: Any, uuid: str, request: Any) -> list[Change | None]:
    """Only the accounts the form showed change: ticked ones join, the others leave."""
    row = desk_admin.desk(conn, uuid=uuid)
    shown = [v.decode("utf-8", "replace") for v in request.args.get(b"shown", [])][:10_000]
    ticked = {v.decode("utf-8", "replace") for v in request.args.get(b"member", [])}
    return [desk_admin.member(conn, row, name, name in ticked) for name in shown]


def _settings(conn: Any, uuid: str, request: Any) -> list[Change]:
    row = desk_admin.desk(conn, uuid=uuid)
    days = desk_admin.retention_days(form_arg(request, "retention_days", 16) or "")
    return [desk_admin.configure(conn, row, form_arg(request, "show_members") == "1", days)]


def _texts(conn: Any, uuid: str, request: Any) -> list[Change]:
    row = desk_admin.desk(conn, uuid=uuid)
    change, _texts = desk_admin.describe(conn, row, form_arg(request, "language", 16) or "",
                                         form_arg(request, "title", MAX_NAME * 4) or "",
                                         form_arg(request, "description", MAX_DESCRIPTION * 4) or "")
    return [change]


_CHANGES = {"rename": _rename, "members": _members, "settings": _settings, "texts": _texts}


def _set_key(conn: Any, uuid: str, armored: str, fingerprint: str, replace: bool) -> Change | None:
    return desk_admin.key(conn, desk_admin.desk(conn, uuid=uuid), armored, fingerprint, replace)


# -- helpers ------------------------------------------------------------------------------------

@inlineCallbacks
def _changed(self: JournalistSite, login: JournalistLogin, change: Change | None):
    """The change's event, with the admin's name; the desks re-read, so sources see it now."""
    if change is None:
        return
    self.events.emit(change.event, username=login.journalist.username, **change.fields)
    yield self.desk.newsroom.desks.reload()


def _said(self: JournalistSite, request: Any, e: DeskRefused) -> str:
    values = {k: v for k, v in e.values.items() if k not in _UNSHOWN}
    return self.speech(request)._(_SAID.get(e.reason, N_("That change was not made.")), **values)


def _views(conn: Any) -> list[DeskView]:
    return [DeskView(r["uuid"], r["name"], bool(r["is_default"]), r["key_fingerprint"],
                     tuple(dq.member_names(conn, r["id"])), r["sources"], bool(r["show_members"]), r["retention_days"],
                     dq.texts_of(r)) for r in dq.all_desks(conn)]


@inlineCallbacks
def _desk(self: JournalistSite, request: Any, uuid: str):
    """The desk ``uuid``, else a 404 page."""
    views = (yield self.accounts.db.run(_views)) if valid_uuid(uuid) else []
    found = next((v for v in views if v.uuid == uuid), None)
    if found is None:
        raise Refused(self.error(request, 404, N_("Not found"), N_("There is no such desk.")))
    return found


@inlineCallbacks
def _list_page(self: JournalistSite, request: Any, login: JournalistLogin, status: int = 200,
               error: str | None = None):
    views = yield self.accounts.db.run(_views)
    return (yield self.html(request, desks_page(self.site_name, login.session, login.journalist, views, error), status))


@inlineCallbacks
def _desk_page(self: JournalistSite, request: Any, login: JournalistLogin, view: DeskView, status: int = 200,
               error: str | None = None):
    accounts = yield self.accounts.list()
    return (yield self.html(request, desk_page(self.site_name, login.session, login.journalist, view, accounts, error),
                            status))
