"""The sources: the list (streamed whole, or in pages), one source, deleting a source or its
conversation, stars, and the flag SecureDrop 2.x still accepts.

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.desk import SourceView
from deaddrop.newsroom.accounts import Journalist
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist._stream import stream_json_list
from deaddrop.web.journalist.api._shared import PREFIX, ApiError, iso, query_int, query_text, token_route
from deaddrop.web.journalist.api.interface import ApiSite

SOURCES_PER_PAGE = 100
MAX_SOURCES_PER_PAGE = 1000
# Sources per database read while the whole list streams (a few hundred KiB of JSON).
STREAM_BATCH = 250

routes = Routes()


def source_json(s: SourceView) -> dict[str, Any]:
    url = f"{PREFIX}/sources/{s.uuid}"
    return {
        "uuid": s.uuid,
        "url": url,
        "journalist_designation": s.designation,
        "is_flagged": False,
        "is_starred": s.is_starred,
        "last_updated": iso(s.last_updated),
        "interaction_count": s.interaction_count,
        "number_of_documents": s.documents,
        "number_of_messages": s.messages,
        "public_key": s.public_key,
        "key": {"type": "PGP", "public": s.public_key, "fingerprint": s.key_fingerprint},
        "submissions_url": f"{url}/submissions",
        "replies_url": f"{url}/replies",
        "add_star_url": f"{url}/add_star",
        "remove_star_url": f"{url}/remove_star",
    }


@token_route(routes, "/sources", "GET")
def sources(self: ApiSite, request: Any, journalist: Journalist):
    """Every source, streamed, as SecureDrop answers; or, asked for pages, one page.

    Without ``per_page`` or ``after``: ``{"sources": [...]}`` with every source, in the
    order they first wrote, written as the client reads it (see ``_stream``), so the whole
    list costs the server one batch of memory however many sources there are.

    ``?per_page=N`` (1..1000, default 100) and ``?after=CURSOR`` (the ``next_cursor`` of the
    previous page): one page in listing order (starred first, then the most recently active)
    plus ``total``, ``per_page``, ``next_cursor`` and ``next``, the next page's URL or null
    on the last page; the same URL is in the ``Link`` header (rel="next").
    """
    if b"per_page" not in request.args and b"after" not in request.args:
        request.setHeader(b"content-type", b"application/json")
        return (yield stream_json_list(
            request, "sources", lambda after, limit: self.desk.sources_by_id(journalist.id, after, limit),
            lambda s: json.dumps(source_json(s), sort_keys=True).encode("utf-8"),
            lambda s: s.id, 0, STREAM_BATCH))
    per_page = query_int(request, b"per_page", SOURCES_PER_PAGE, 1, MAX_SOURCES_PER_PAGE)
    after = query_text(request, b"after")
    try:
        sources, total, cursor = yield self.desk.sources_after(journalist.id, after, per_page)
    except ValueError:
        raise ApiError(400, "Bad Request", "'after' must be the next_cursor of a previous page.") from None
    next_url = f"{PREFIX}/sources?per_page={per_page}&after={cursor}" if cursor else None
    if next_url:
        request.setHeader(b"link", f'<{next_url}>; rel="next"'.encode("ascii"))
    return self.json_response(request, {"sources": [source_json(s) for s in sources], "total": total,
                                "per_page": per_page, "next_cursor": cursor, "next": next_url})


@token_route(routes, "/sources/<uuid>", "GET")
def source(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    source = yield self.find_source(journalist, uuid)
    return self.json_response(request, source_json(source))


@token_route(routes, "/sources/<uuid>/reply_keys", "GET")
def reply_keys(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    """What a workstation encrypts a reply to: the source's key and the keys of the source's
    desks this journalist is on (issue 29). ``/instance``'s submission key is the default desk's
    only: a reply encrypted to it alone could not be read on the SVS of the desk that lists it."""
    source = yield self.find_source(journalist, uuid)
    desks = yield self.desk.reply_keys(source)
    return self.json_response(request, {
        "source_key": {"type": "PGP", "public": source.public_key, "fingerprint": source.key_fingerprint},
        "desk_keys": [{"type": "PGP", "desk": d.name, "fingerprint": d.fingerprint, "public": d.public_key}
                      for d in desks]})


@token_route(routes, "/sources/<uuid>", "DELETE")
def delete_source(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    return (yield _delete(self, request, journalist, uuid, self.desk.delete_source, "journalist.source.deleted",
                          "Source and submissions deleted"))


@token_route(routes, "/sources/<uuid>/conversation", "DELETE")
def delete_conversation(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    """Every submission and reply of the source goes; the source, its key and designation stay."""
    return (yield _delete(self, request, journalist, uuid, self.desk.delete_conversation,
                          "journalist.conversation.deleted", "Source data deleted"))


@inlineCallbacks
def _delete(self: ApiSite, request: Any, journalist: Journalist, uuid: str, delete: Any, event: str, message: str):
    """The source ``uuid`` found, ``delete(source)`` done even if the client goes, ``event`` recorded."""
    source = yield self.find_source(journalist, uuid)
    yield shield(delete(source))
    self.events.emit(event, username=journalist.username)
    return self.json_response(request, {"message": message})


@token_route(routes, "/sources/<uuid>/flag", "POST")
def flag(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    """Accepted and ignored, as in SecureDrop 2.x: sources here get a key as soon as they
    first write, so there is nothing to flag them for."""
    yield self.find_source(journalist, uuid)
    return self.json_response(request, {"message": "Source flagged for reply"})


@token_route(routes, "/sources/<uuid>/add_star", "POST")
def add_star(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    source = yield self.find_source(journalist, uuid)
    yield self.desk.set_starred(source, True)
    return self.json_response(request, {"message": "Star added"}, 201)


@token_route(routes, "/sources/<uuid>/remove_star", "DELETE")
def remove_star(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    source = yield self.find_source(journalist, uuid)
    yield self.desk.set_starred(source, False)
    return self.json_response(request, {"message": "Star removed"})


def register(cls: type[Routed]) -> None:
    """Add the source routes to the API class ``cls``."""
    routes.register(cls)
