"""/desks: a source chooses who reads its messages, on an instance with several desks (issue 29).

A new source sees the desks before its first submission: /lookup leads a source that has none
here, and so does a submission refused because none was chosen (``lead_to_choice``: the typed
message rides in the choice page's form, never kept on the server, and is back in its own form
once a desk is chosen). Later a source may add a desk, never remove one: what was sent
stays where it was sent. Plain forms, no JavaScript. With one desk there is nothing to choose:
these addresses lead back to /lookup, and no page changes. The routes are added to
``SourceInterface`` by ``register``.
"""
from __future__ import annotations

import re
from typing import Any

from twisted.internet.defer import inlineCallbacks
from twisted.web.template import Tag

from deaddrop.newsroom.desks import NoSuchDesk
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import login_route
from deaddrop.web._common.pages import render_sync, set_html
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.source import messages as msgs, pages
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._origin import from_our_page
from deaddrop.web.source._submission_forms import OPEN, RECEIVED, SubmissionForm, SubmissionForms
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS, within_limit
from deaddrop.web.source.interface import SourceSite

# The session's form whose message waits for the choice (``lead_to_choice``).
_WAITING_FORM = "desk_form"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

routes = Routes()


@login_route(routes, "/desks", "GET")
def choose(self: SourceSite, request: Any, login: SourceLogin):
    if not self.newsroom.desks.several:
        return self.to_lookup(request, login.session)
    login = yield current_desks(self, login)
    return (yield _page(self, request, login))


@login_route(routes, "/desks", "POST")
def chosen(self: SourceSite, request: Any, login: SourceLogin):
    picked = _picked(request, len(self.newsroom.desks.all()))
    login = yield current_desks(self, login)
    # Nothing ticked and nothing to choose (its desks stay as they were, or one desk is offered
    # now): back to its form, with the message this page carried. With one desk offered, a desk
    # ticked on a page shown while there were several is a choice all the same: one that can no
    # longer be made is answered below (the desks as they are now, the message back), never
    # dropped for the desk that is left, which would then read what its source meant for another.
    if not picked and (login.identity.desks or not self.newsroom.desks.several):
        return _back_to_its_form(self, request, login, None)
    if not picked:
        return (yield _page(self, request, login, msgs.CHOOSE_A_DESK, 400, *_carried(self, request, login)))
    try:
        identity = yield shield(self.newsroom.add_desks(login.identity, picked))
    except NoSuchDesk:  # removed a moment ago (or not a desk at all): the list as it is now
        return (yield _page(self, request, login, msgs.CHOOSE_A_DESK, 400, *_carried(self, request, login)))
    login.session.data["source"] = identity
    login.session.data.pop(_WAITING_FORM, None)
    return _back_to_its_form(self, request, login, msgs.CHOICE_SAVED)


def _back_to_its_form(self: SourceSite, request: Any, login: SourceLogin, said: str | None) -> Any:
    """The submission form, saying ``said``: with the message the choice page carried, this
    answer (nothing kept); else a redirect to it."""
    ctx = self.page_ctx(request, None)
    message, form = _carried(self, request, login)
    if message:  # its form again, the message in it
        login.session.flash((ctx._(said) + ctx.lang.space if said else "") + ctx._(msgs.SEND_IT_NOW), "ok")
        ctx = self.page_ctx(request, login.session, logged_in=True)
        return render_sync(pages.lookup(ctx, None, message=message, form_token=form.token))
    if said:
        login.session.flash(ctx._(said), "ok")
    return self.to_lookup(request, login.session)


def needs_choice(self: SourceSite, login: SourceLogin) -> bool:
    """Whether this source must choose its desks before it may send (several desks, none chosen)."""
    return self.newsroom.desks.several and not login.identity.desks


def lead_to_choice(self: SourceSite, request: Any, login: SourceLogin, form: SubmissionForm, message: str,
                   early: bool = False) -> bytes:
    """A submission refused because the source has chosen no desk: the choice page, which says
    so, answered now (409), the typed message in its form (with its submission form's token),
    to come back in that form once a desk is chosen. It is kept nowhere on the server, not even
    for a redirect (docs/threat-model.md, "Shared stores"); with nothing typed, and the body in
    (``early``: files still arriving, a browser still sending does not follow a redirect), a
    redirect to the choice (post/redirect/get). Files cannot be kept: none was read (the
    refusal comes before a file's first byte)."""
    SubmissionForms.reopened(form)
    login.session.data[_WAITING_FORM] = form.token  # (the notice: "first choose who reads it")
    if not message.strip() and not early:
        return self.redirect(request, "/desks")
    set_html(request, 409)
    return render_sync(_choice(self, request, login, carried=message, form_token=form.token))


def choice_again(self: SourceSite, request: Any, login: SourceLogin) -> Any:
    """The choice page again, with the message its form carries (its language menu, posted)."""
    return _page(self, request, login, None, 200, *_carried(self, request, login))


def _carried(self: SourceSite, request: Any, login: SourceLogin) -> tuple[str, SubmissionForm]:
    """The message the choice page's form carries (from this site's own page only), and its form."""
    message = within_limit(form_arg(request, "msg", MAX_MESSAGE_CHARS) or "") if from_our_page(request) else ""
    form = self.form_for(login, form_arg(request, pages.FORM_TOKEN_FIELD, 64))
    if form.state == RECEIVED:  # sent meanwhile (another tab): never offered again as unsent
        message = ""
    if form.state != OPEN:
        form = self.submission_forms(login.session).issue()
    return message, form


@inlineCallbacks
def current_desks(self: SourceSite, login: SourceLogin):
    """``login`` with its source's desks as the database has them now (another session of the
    same source may have chosen meanwhile), kept in the session."""
    identity = yield self.newsroom.desks.of_source(login.identity)
    if identity != login.identity:
        login.session.data["source"] = identity
        login = SourceLogin(login.session, identity, login.passphrase)
    return login


def _picked(request: Any, at_most: int) -> list[str]:
    """The desks ticked: uuids only, each once, no more than there are desks."""
    values = (request.args or {}).get(b"desk", [])[:at_most]
    found = []
    for raw in values:
        text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
        if _UUID.fullmatch(text) and text not in found:
            found.append(text)
    return found


def _page(self: SourceSite, request: Any, login: SourceLogin, error: str | None = None, status: int = 200,
          carried: str = "", form: SubmissionForm | None = None):
    return self.html(request, _choice(self, request, login, error, carried, form.token if form else None), status)


def _choice(self: SourceSite, request: Any, login: SourceLogin, error: str | None = None, carried: str = "",
            form_token: str | None = None) -> Tag:
    ctx = self.page_ctx(request, login.session, logged_in=True)
    options = [pages.DeskOption(d.uuid, d.text(ctx.lang.code, "name"), d.text(ctx.lang.code, "description"),
                                d.members, d.member_names, d.id in login.identity.desks)
               for d in self.newsroom.desks.offered()]
    waiting = login.session.data.get(_WAITING_FORM)
    notice = ctx._(msgs.DESK_FIRST) if waiting and not login.identity.desks else None
    return pages.desk_choice(ctx, options, ctx._(error) if error else None, notice, carried=carried,
                             form_token=form_token)


def register(cls: type[Routed]) -> None:
    """Add /desks to the source interface class ``cls``."""
    routes.register(cls)
