"""The logged-in page (/lookup): the journalists' replies, read and deleted, above the
submission form; and what arrived, once a form was sent.

The routes are added to ``SourceInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.admission.queues import Busy
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.guards import login_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.sessions import SessionStore
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._answers import busy_status
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._received import received_page
from deaddrop.web.source._submission_forms import RECEIVED, SubmissionForm
from deaddrop.web.source.desk_choice import current_desks, needs_choice
from deaddrop.web.source.pages import ShownReply
from deaddrop.web.source.interface import SourceSite


# Set in a session once its source deleted a reply: its page then says the replies were deleted,
# not "no replies yet". Only this session knows it: a later login (perhaps by whoever learns the
# codename) is not told that replies ever existed.
_REPLIES_DELETED = "replies_deleted"

routes = Routes()


@login_route(routes, "/lookup", "GET")
def lookup(self: SourceSite, request: Any, login: SourceLogin):
    if needs_choice(self, login):  # several desks, none chosen yet (as far as this session knows)
        login = yield current_desks(self, login)
        if needs_choice(self, login):
            return self.redirect(request, "/desks")
    return (yield _lookup(self, request, login))


def _lookup(self: SourceSite, request: Any, login: SourceLogin) -> Any:
    forms = self.submission_forms(login.session)
    token = self.arg(request, "form")
    form = forms.get(token)
    if token and form is None:  # an address from an ended session, or forgotten: a fresh form
        return self.to_lookup(request, login.session)
    if form is not None and form.state == RECEIVED:
        # Back after sending, a reload, a replayed form: what arrived, never the form again.
        return self.html(request, received_page(self, request, login, form))
    if form is None:  # /lookup itself (links, typed address)
        form = forms.issue()
    status, error = 200, None
    if form.error is not None:
        ctx = self.page_ctx(request, None)
        status, error = form.error[0], form.error[1](ctx)
        if status == 503:  # busy: as the refusal this page stands for said
            busy_status(request)
    return lookup_page(self, request, login, status=status, error=error, form=form)


@login_route(routes, "/delete", "POST")
def delete(self: SourceSite, request: Any, login: SourceLogin):
    number = self.arg(request, "reply") or ""
    deleted = False
    # Digits only, and few: anything else names no reply (and never reaches the database).
    if number.isascii() and number.isdigit() and len(number) <= 9:
        deleted = yield shield(self.newsroom.replies.delete(login.identity, int(number)))
    lang = i18n.negotiate(request)
    if deleted:
        login.session.data[_REPLIES_DELETED] = True
        login.session.flash(lang.gettext(msgs.REPLY_DELETED), "ok")
        return self.to_lookup(request, login.session)
    page = yield lookup_page(self, request, login, status=404, error=lang.gettext(msgs.REPLY_NOT_FOUND))
    return page


@login_route(routes, "/delete-all", "POST")
def delete_all(self: SourceSite, request: Any, login: SourceLogin):
    count = yield shield(self.newsroom.replies.delete_all(login.identity))
    if count:
        login.session.data[_REPLIES_DELETED] = True
    ctx = self.page_ctx(request, None)
    login.session.flash(ctx._(msgs.REPLIES_DELETED, count=count), "ok")
    return self.to_lookup(request, login.session)


def register(cls: type[Routed]) -> None:
    """Add the logged-in page and the reply routes to the source interface class ``cls``."""
    routes.register(cls)


@inlineCallbacks
def lookup_page(self: SourceSite, request: Any, login: SourceLogin, *, status: int = 200, message: str = "",
                error: str | None = None, form: SubmissionForm | None = None):
    """The logged-in page, its form (``form``, else a new one) holding ``message``, ``error`` by it."""
    self.newsroom.replies.ensure_key(login.identity, login.passphrase)  # heals a key lost to a crash after a first submission
    try:
        replies = yield self.newsroom.replies.for_source(login.identity, login.passphrase)
    except Busy:
        if error is None and not message:
            raise
        # A refused form's page (e.g. after "busy"), or a message brought across a language
        # switch: the form and its message matter more now than the replies, read next visit.
        replies = []
        shown: list[ShownReply] | None = None
    else:
        # Newest first: the store lists them in the order they were sent.
        shown = [ShownReply(r.number, r.text, r.created_at, r.new) for r in reversed(replies)]
    ctx = self.page_ctx(request, login.session, logged_in=True)
    codename = SessionStore.unseal(login.session, self.cookie.token(request), "codename")
    form = form or self.submission_forms(login.session).issue()
    page = pages.lookup(ctx, shown, message=message, error=error, codename=codename, form_token=form.token,
                        replies_deleted=bool(login.session.data.get(_REPLIES_DELETED)))
    html = yield self.html(request, page, status)
    self.newsroom.replies.mark_read(login.identity, replies)
    return html
