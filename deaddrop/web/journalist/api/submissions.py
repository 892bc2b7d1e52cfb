"""Submissions: every one, a source's, one (to read, delete or download), and marking
submissions and replies seen.

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from deaddrop.newsroom.desk import NotFound, SubmissionView
from deaddrop.newsroom.accounts import Journalist
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist.api._items import Items, add_item_routes, item_json
from deaddrop.web.journalist.api._shared import ApiError, token_route
from deaddrop.web.journalist.api.interface import ApiSite

routes = Routes()


def submission_json(x: SubmissionView) -> dict[str, Any]:
    return {**item_json(x, "submissions", "submission"),
            "is_file": not x.is_message, "is_message": x.is_message, "is_read": x.is_read}


add_item_routes(routes, Items(
    "submissions", "submission", submission_json,
    every=lambda desk, reader: desk.all_submissions(reader), of_source=lambda desk, source: desk.submissions(source),
    find=lambda desk, source, uuid: desk.submission(source, uuid),
    delete=lambda desk, source, item: desk.delete_submissions(source, [item.uuid]),
    open=lambda desk, source, item, journalist_id: desk.open_submission(source, item, journalist_id),
    missing="No such submission.", gone="The file is gone.", deleted="Submission deleted"))


@token_route(routes, "/seen", "POST")
def seen(self: ApiSite, request: Any, journalist: Journalist):
    body = self.json_body(request)
    lists = {}
    for key in ("files", "messages", "replies"):
        value = body.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > 10_000:
            raise ApiError(400, "Bad Request", f"'{key}' must be a list of uuids.")
        lists[key] = value
    if not any(lists.values()):
        raise ApiError(400, "Bad Request", "Give at least one of 'files', 'messages' or 'replies'.")
    try:
        yield self.desk.mark_seen(journalist.id, lists["files"] + lists["messages"], lists["replies"])
    except NotFound:
        raise ApiError(404, "Not Found", "At least one of those uuids is not a submission or reply.") from None
    return self.json_response(request, {"message": "resources marked seen"})


def register(cls: type[Routed]) -> None:
    """Add the submission routes to the API class ``cls``."""
    routes.register(cls)
