"""The sources: the list and its filters, triage (star, read, unread, delete) of sources and of
their submissions, a source's page, and replies.

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.desk import KeyNotReady, MAX_REPLY_CHARS, SourceFilter, SourceView, valid_uuid
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg, form_args
from deaddrop.web._common.guards import login_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, pages
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.downloads import zip_then_page
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist.interface import JournalistSite


routes = Routes()


@login_route(routes, "/sources", "GET")
def sources(self: JournalistSite, request: Any, login: JournalistLogin):
    only, page = _list_state(request)
    sources, total = yield self.desk.sources(login.journalist.id, page, pages.SOURCES_PER_PAGE, only)
    last = max(1, -(-total // pages.SOURCES_PER_PAGE))
    if page > last:  # a stale link after deletions: show the last page there is
        page = last
        sources, total = yield self.desk.sources(login.journalist.id, page, pages.SOURCES_PER_PAGE, only)
    paging = pages.Paging(page, last, total)
    return (yield self.html(request, pages.source_list(self.site_name, login.session, login.journalist, sources,
                                                        paging, only, form_arg(request, "select") == "all")))


@login_route(routes, "/sources/selected", "POST")
def sources_selected(self: JournalistSite, request: Any, login: JournalistLogin):
    """The source list's actions on the ticked sources; back to the same filtered page."""
    only, page = _list_state(request)
    back = pages.list_url(only, page)
    action = form_arg(request, "action")
    if action not in ("star", "unstar", "read", "unread", "delete", "delete-confirmed"):
        return self.error(request, 400, N_("Nothing done"), N_("Choose an action for the selected sources."))
    chosen = yield self.desk.sources_among(login.journalist.id, form_args(request, "source"))
    session, journalist = login.session, login.journalist
    say = i18n.of(session)
    if not chosen:
        session.flash(say._("Select at least one source first."), "warning")
        return self.redirect(request, back)
    n = len(chosen)
    if action in ("star", "unstar"):
        for source in chosen:
            yield self.desk.set_starred(source, action == "star")
        session.flash(say.n_("Starred {n} source.", "Starred {n} sources.", n) if action == "star"
                      else say.n_("Unstarred {n} source.", "Unstarred {n} sources.", n), "ok")
    elif action in ("read", "unread"):
        yield self.desk.mark_sources(chosen, journalist.id, read=action == "read")
        session.flash(say.n_("Marked every submission of {n} source read.",
                             "Marked every submission of {n} sources read.", n) if action == "read"
                      else say.n_("Marked every submission of {n} source unread.",
                                  "Marked every submission of {n} sources unread.", n), "ok")
    elif action == "delete":
        # Nothing goes before the journalist has seen the list (as for one source).
        page_ = pages.confirm_delete_sources(self.site_name, session, journalist, chosen, only, page)
        return (yield self.html(request, page_))
    else:
        for source in chosen:
            yield shield(self.desk.delete_source(source))
            self.events.emit("journalist.source.deleted", username=journalist.username)
        session.flash(say.n_("Deleted {n} source and everything it sent.",
                             "Deleted {n} sources and everything they sent.", n), "ok")
    return self.redirect(request, back)


@login_route(routes, "/sources/<uuid>", "GET")
def source(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    downloading = None
    fetch, zip_ticket = form_arg(request, "fetch", 64), form_arg(request, "zip", 64)
    if fetch is not None:
        item = yield self.desk.submission(source, fetch)
        if item is not None:
            downloading = (item.filename, f"/sources/{uuid}/submissions/{item.uuid}/download")
    elif zip_ticket is not None and zip_ticket in login.session.data.get("zips", {}):
        count = len(login.session.data["zips"][zip_ticket][1])
        what = i18n.of(login.session).n_("a zip of {n} file", "a zip of {n} files", count)
        downloading = (what, f"/sources/{uuid}/zip/{zip_ticket}")
    return (yield _source_page(self, request, login, source, select_all=form_arg(request, "select") == "all",
                                    downloading=downloading))


@inlineCallbacks
def _source_page(self: JournalistSite, request: Any, login: JournalistLogin, source: SourceView, *,
                 status: int = 200, reply_text: str = "", error: str | None = None, select_all: bool = False,
                 downloading: tuple[str, str] | None = None):
    submissions = yield self.desk.submissions(source)
    replies = yield self.desk.replies(source)
    page = pages.source_page(self.site_name, login.session, login.journalist, source, submissions, replies,
                             reply_text=reply_text, error=error, select_all=select_all, downloading=downloading)
    return (yield self.html(request, page, status))


@login_route(routes, "/sources/<uuid>/selected", "POST")
def selected(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    action = form_arg(request, "action")
    chosen = [u for u in form_args(request, "submission") if valid_uuid(u)]
    source = yield self.find_source(request, login, uuid)
    say = i18n.of(login.session)
    if action == "download":
        return (yield zip_then_page(self, request, login, source, chosen,
                                    say._("Nothing to download: select submissions first.")))
    if action not in ("delete", "delete-confirmed", "read", "unread"):
        return self.error(request, 400, N_("Nothing done"), N_("Choose download, mark read or unread, or delete."))
    if not chosen:
        login.session.flash(say._("Select at least one submission first."), "warning")
        return self.redirect(request, f"/sources/{uuid}")
    if action in ("read", "unread"):
        count = yield self.desk.mark_submissions(source, chosen, login.journalist.id, read=action == "read")
        login.session.flash(say.n_("Marked {n} submission read.", "Marked {n} submissions read.", count)
                            if action == "read" else
                            say.n_("Marked {n} submission unread.", "Marked {n} submissions unread.", count), "ok")
        return self.redirect(request, f"/sources/{uuid}")
    if action == "delete":
        # Nothing goes before the journalist has seen the list (as for deleting a source).
        listed = [s for s in (yield self.desk.submissions(source)) if s.uuid in set(chosen)]
        page = pages.confirm_delete_selected(self.site_name, login.session, login.journalist, source, listed)
        return (yield self.html(request, page))
    count = yield shield(self.desk.delete_submissions(source, chosen))
    login.session.flash(say.n_("Deleted {n} submission.", "Deleted {n} submissions.", count), "ok")
    return self.redirect(request, f"/sources/{uuid}")


@login_route(routes, "/sources/<uuid>/unread", "POST")
def mark_source_unread(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    count = yield self.desk.mark_sources([source], login.journalist.id, read=False)
    login.session.flash(i18n.of(login.session).n_("Marked {n} submission unread.", "Marked {n} submissions unread.",
                                                  count), "ok")
    return self.redirect(request, f"/sources/{uuid}")


@login_route(routes, "/sources/<uuid>/star", "POST")
def star(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    yield self.desk.set_starred(source, form_arg(request, "starred") == "1")
    return self.redirect(request, f"/sources/{uuid}")


@login_route(routes, "/sources/<uuid>/reply", "POST")
def reply(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    text = form_arg(request, "reply", 1 << 20) or ""
    say = i18n.of(login.session)
    if not text.strip():
        return (yield _source_page(self, request, login, source, status=400, error=say._("Write a reply first.")))
    if len(text) > MAX_REPLY_CHARS:
        return (yield _source_page(self, request, login, source, status=413, reply_text=text[:MAX_REPLY_CHARS],
                                   error=say.n_("Replies are limited to {n} character.",
                                                "Replies are limited to {n} characters.", MAX_REPLY_CHARS)))
    try:
        yield shield(self.desk.reply_plaintext(source, text, login.journalist.id))
    except KeyNotReady:
        return (yield _source_page(
            self, request, login, source, status=409, reply_text=text,
            error=say._("This source's encryption key is not ready yet, so the reply was NOT sent. It is made the "
                        "next time the source logs in. Your text is still below: try again later.")))
    login.session.flash(say._("Reply sent. It is stored encrypted; the source will see it the next time they log "
                              "in."), "ok")
    return self.redirect(request, f"/sources/{uuid}")


@login_route(routes, "/sources/<uuid>/delete", "GET")
def delete_source_confirm(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    return (yield self.html(request, pages.confirm_delete_source(self.site_name, login.session, login.journalist, source)))


@login_route(routes, "/sources/<uuid>/delete", "POST")
def delete_source(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    yield shield(self.desk.delete_source(source))
    self.events.emit("journalist.source.deleted", username=login.journalist.username)
    login.session.flash(i18n.of(login.session)._("{designation} and everything they sent were deleted.",
                                                 designation=source.designation), "ok")
    return self.redirect(request, "/sources")


def register(cls: type[Routed]) -> None:
    """Add the source routes to the journalist interface class ``cls``."""
    routes.register(cls)


def _list_state(request: Any) -> tuple[SourceFilter, int]:
    """The source list's filters and page, from the query string or a form's hidden fields."""
    designation = " ".join((form_arg(request, "q", 64) or "").split())[:64]
    only = SourceFilter(designation or None, form_arg(request, "starred") == "1", form_arg(request, "unread") == "1")
    return only, _page_number(form_arg(request, "page", 16))


def _page_number(text: str | None) -> int:
    """``?page=N`` from 1; anything else is the first page."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 7:
        return 1
    return max(1, int(text))
