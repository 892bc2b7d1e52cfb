"""Replies: every one, a source's, sending one (encrypted on the workstation), and one reply
(to read, delete or download).

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

import uuid as uuidlib
from typing import Any

from deaddrop.newsroom.desk import DuplicateReply, KeyNotReady, NotEncryptedToSource, ReplyView
from deaddrop.newsroom.accounts import Journalist
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist.api._items import Items, add_item_routes, item_json
from deaddrop.web.journalist.api._shared import ApiError, token_route
from deaddrop.web.journalist.api.interface import ApiSite

routes = Routes()


def reply_json(r: ReplyView) -> dict[str, Any]:
    fields = item_json(r, "replies", "reply")
    return {**fields, "journalist_uuid": r.journalist_uuid or "deleted",
            "journalist_username": r.journalist_username or "deleted", "journalist_first_name": "",
            "journalist_last_name": "", "is_deleted_by_source": r.deleted_by_source,
            "download_url": None if r.deleted_by_source else fields["download_url"]}


@token_route(routes, "/sources/<uuid>/replies", "POST")
def post_reply(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
    source = yield self.find_source(journalist, uuid)
    body = self.json_body(request)
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
    return self.json_response(request, {"message": "Your reply has been stored", "uuid": row["uuid"],
                                "filename": row["filename"]}, 201)


add_item_routes(routes, Items(
    "replies", "reply", reply_json,
    every=lambda desk, reader: desk.all_replies(reader), of_source=lambda desk, source: desk.replies(source),
    find=lambda desk, source, uuid: desk.reply(source, uuid),
    delete=lambda desk, source, item: desk.delete_reply(source, item.uuid),
    open=lambda desk, source, item, journalist_id: desk.open_reply(source, item, journalist_id),
    missing="No such reply.", gone="This reply was deleted by the source.", deleted="Reply deleted"))


def register(cls: type[Routed]) -> None:
    """Add the reply routes to the API class ``cls``."""
    routes.register(cls)
