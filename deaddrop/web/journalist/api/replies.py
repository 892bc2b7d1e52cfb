"""Replies: every one, a source's, sending one (encrypted on the workstation), and one reply
(to read, delete or download).

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

import uuid as uuidlib
from typing import Any

from deaddrop.journalist_desk import DuplicateReply, KeyNotReady, NotEncryptedToSource, ReplyView
from deaddrop.journalists import Journalist
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.routes import Routes
from deaddrop.web.journalist.api._shared import PREFIX, ApiError, token_route

routes = Routes()


def reply_json(r: ReplyView) -> dict[str, Any]:
    url = f"{PREFIX}/sources/{r.source_uuid}/replies/{r.uuid}"
    return {
        "uuid": r.uuid,
        "filename": r.filename,
        "size": r.size,
        "journalist_uuid": r.journalist_uuid or "deleted",
        "journalist_username": r.journalist_username or "deleted",
        "journalist_first_name": "",
        "journalist_last_name": "",
        "is_deleted_by_source": r.deleted_by_source,
        "seen_by": list(r.seen_by),
        "source_uuid": r.source_uuid,
        "source_url": f"{PREFIX}/sources/{r.source_uuid}",
        "reply_url": url,
        "download_url": None if r.deleted_by_source else f"{url}/download",
    }


@token_route(routes, "/replies", "GET")
def all_replies(self: Any, request: Any, journalist: Journalist):
    items = yield self.desk.all_replies()
    return self._json(request, {"replies": [reply_json(r) for r in items]})


@token_route(routes, "/sources/<uuid>/replies", "GET")
def replies(self: Any, request: Any, journalist: Journalist, uuid: str):
    source = yield self._source(uuid)
    items = yield self.desk.replies(source)
    return self._json(request, {"replies": [reply_json(r) for r in items]})


@token_route(routes, "/sources/<uuid>/replies", "POST")
def post_reply(self: Any, request: Any, journalist: Journalist, uuid: str):
    source = yield self._source(uuid)
    body = self._body(request)
    reply_uuid = body.get("uuid")
    if reply_uuid is not None:
        try:
            reply_uuid = str(uuidlib.UUID(reply_uuid))
        except (TypeError, ValueError, AttributeError):
            raise ApiError(400, "Bad Request", "'uuid' must be a UUID.") from None
    if "reply" not in body:
        raise ApiError(400, "Bad Request", "'reply' not found in the request body.")
    try:
        row = yield shield(self.desk.reply_encrypted(source, body["reply"], reply_uuid, journalist.id))
    except NotEncryptedToSource as e:
        raise ApiError(400, "Bad Request", f"{e}: you must encrypt replies client side.") from None
    except DuplicateReply:
        raise ApiError(409, "Conflict", "A reply with this uuid already exists.") from None
    except KeyNotReady:
        raise ApiError(409, "Conflict", "The source has no key yet; try again after they log in.") from None
    return self._json(request, {"message": "Your reply has been stored", "uuid": row["uuid"],
                                "filename": row["filename"]}, 201)


def _reply(self: Any, uuid: str, item: str):
    return self._source_item(uuid, item, self.desk.reply, "No such reply.")


@token_route(routes, "/sources/<uuid>/replies/<item>", "GET")
def reply(self: Any, request: Any, journalist: Journalist, uuid: str, item: str):
    _, reply = yield _reply(self, uuid, item)
    return self._json(request, reply_json(reply))


@token_route(routes, "/sources/<uuid>/replies/<item>", "DELETE")
def delete_reply(self: Any, request: Any, journalist: Journalist, uuid: str, item: str):
    source, reply = yield _reply(self, uuid, item)
    yield shield(self.desk.delete_reply(source, reply.uuid))
    return self._json(request, {"message": "Reply deleted"})


@token_route(routes, "/sources/<uuid>/replies/<item>/download", "GET")
def download_reply(self: Any, request: Any, journalist: Journalist, uuid: str, item: str):
    source, reply = yield _reply(self, uuid, item)
    return (yield self._download(request, self.desk.open_reply(source, reply, journalist.id),
                                 "This reply was deleted by the source."))


def register(cls: Any) -> None:
    """Add the reply routes to the API class ``cls``."""
    routes.register(cls)
