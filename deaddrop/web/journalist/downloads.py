"""Downloads: a submission or a reply (each marked read as it is fetched), and zips of several
(a ticket in the session names what the zip holds).

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

import secrets
from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.desk import NotFound, SourceView
from deaddrop.web._common.guards import Refused, login_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n
from deaddrop.web.journalist._files import FileResponse
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.interface import JournalistSite

MAX_ZIP_TICKETS = 8  # zip downloads a session remembers (see zip_then_page)


routes = Routes()


NO_SUCH_SUBMISSION = N_("There is no such submission (it may have been deleted).")


@inlineCallbacks
def _submission(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, item: str):
    """The source ``uuid`` and its submission ``item``; else the page saying there is none."""
    source = yield self.find_source(request, login, uuid)
    submission = yield self.desk.submission(source, item)
    if submission is None:
        raise Refused(self.error(request, 404, N_("Not found"), NO_SUCH_SUBMISSION))
    return source, submission


@login_route(routes, "/sources/<uuid>/submissions/<item>/fetch", "GET")
def fetch_submission(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, item: str):
    """A file link on the source page: mark it read, then show the page again (with the new
    counts), which sends the browser on to the download itself."""
    source, submission = yield _submission(self, request, login, uuid, item)
    yield self.desk.mark_submissions(source, [submission.uuid], login.journalist.id, read=True)
    return self.redirect(request, f"/sources/{uuid}?fetch={submission.uuid}")


@login_route(routes, "/sources/<uuid>/submissions/<item>/download", "GET")
def download_submission(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, item: str):
    source, submission = yield _submission(self, request, login, uuid, item)
    try:
        download = yield self.desk.open_submission(source, submission, login.journalist.id)
    except NotFound:  # its file is gone, or is not a regular file inside the store
        return self.error(request, 404, N_("Not found"), NO_SUCH_SUBMISSION)
    return FileResponse(download, etag=True)


@login_route(routes, "/sources/<uuid>/replies/<item>/download", "GET")
def download_reply(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, item: str):
    source = yield self.find_source(request, login, uuid)
    reply = yield self.desk.reply(source, item)
    if reply is None or reply.deleted_by_source:
        return self.error(request, 404, N_("Not found"), N_("There is no such reply."))
    try:
        download = yield self.desk.open_reply(source, reply, login.journalist.id)
    except NotFound:
        return self.error(request, 404, N_("Not found"), N_("There is no such reply."))
    return FileResponse(download, etag=True)


@login_route(routes, "/sources/<uuid>/download-unread", "POST")
def download_unread(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str):
    source = yield self.find_source(request, login, uuid)
    unread = [i.uuid for i in (yield self.desk.submissions(source)) if not i.is_read]
    return (yield zip_then_page(self, request, login, source, unread,
                                i18n.of(login.session)._("There are no unread submissions.")))


@inlineCallbacks
def zip_then_page(self: JournalistSite, request: Any, login: JournalistLogin, source: SourceView, chosen: list[str],
                  nothing: str):
    """Mark the chosen submissions read and show the source page again, which sends the
    browser on to ``/sources/<uuid>/zip/<ticket>`` for the zip: the page's counts are new.
    ``nothing``: what to say (already in the session's language) when none is left."""
    wanted = set(chosen)
    present = [i.uuid for i in (yield self.desk.submissions(source)) if i.uuid in wanted]
    if not present:
        login.session.flash(nothing, category="warning")
        return self.redirect(request, f"/sources/{source.uuid}")
    yield self.desk.mark_submissions(source, present, login.journalist.id, read=True)
    zips = login.session.data.setdefault("zips", {})
    while len(zips) >= MAX_ZIP_TICKETS:  # the oldest goes: a session holds a few, never many
        del zips[next(iter(zips))]
    ticket = secrets.token_urlsafe(12)
    zips[ticket] = (source.uuid, present)
    return self.redirect(request, f"/sources/{source.uuid}?zip={ticket}")


@login_route(routes, "/sources/<uuid>/zip/<ticket>", "GET")
def download_zip(self: JournalistSite, request: Any, login: JournalistLogin, uuid: str, ticket: str):
    """The zip a download button asked for (its ticket lives in this session only)."""
    source = yield self.find_source(request, login, uuid)
    owner, chosen = login.session.data.get("zips", {}).get(ticket, (None, []))
    if owner != source.uuid:
        return self.error(request, 404, N_("Not found"), N_("This download has expired. Ask for it again."))
    try:
        download = yield self.desk.zip_submissions(source, chosen, login.journalist.id)
    except NotFound:
        return self.error(request, 404, N_("Not found"), N_("A selected submission's file is missing."))
    if download is None:
        return self.error(request, 404, N_("Not found"), N_("These submissions were deleted in the meantime."))
    return FileResponse(download)


def register(cls: type[Routed]) -> None:
    """Add the download routes to the journalist interface class ``cls``."""
    routes.register(cls)

