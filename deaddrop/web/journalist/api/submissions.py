"""Submissions: every one, a source's, one (to read, delete or download), and marking
submissions and replies seen.

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from deaddrop.journalist_desk import NotFound, SubmissionView
from deaddrop.journalists import Journalist
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.routes import Routes
from deaddrop.web.journalist.api._shared import PREFIX, ApiError, token_route

routes = Routes()


def submission_json(x: SubmissionView) -> dict[str, Any]:
    url = f"{PREFIX}/sources/{x.source_uuid}/submissions/{x.uuid}"
    return {
        "uuid": x.uuid,
        "filename": x.filename,
        "size": x.size,
        "is_file": not x.is_message,
        "is_message": x.is_message,
        "is_read": x.is_read,
        "seen_by": list(x.seen_by),
        "source_uuid": x.source_uuid,
        "source_url": f"{PREFIX}/sources/{x.source_uuid}",
        "submission_url": url,
        "download_url": f"{url}/download",
    }


@token_route(routes, "/submissions", "GET")
def all_submissions(self: Any, request: Any, journalist: Journalist):
    items = yield self.desk.all_submissions()
    return self._json(request, {"submissions": [submission_json(x) for x in items]})


@token_route(routes, "/sources/<uuid>/submissions", "GET")
def submissions(self: Any, request: Any, journalist: Journalist, uuid: str):
    source = yield self._source(uuid)
    items = yield self.desk.submissions(source)
    return self._json(request, {"submissions": [submission_json(x) for x in items]})


def _submission(self: Any, uuid: str, item: str):
    return self._source_item(uuid, item, self.desk.submission, "No such submission.")


@token_route(routes, "/sources/<uuid>/submissions/<item>", "GET")
def submission(self: Any, request: Any, journalist: Journalist, uuid: str, item: str):
    _, submission = yield _submission(self, uuid, item)
    return self._json(request, submission_json(submission))


@token_route(routes, "/sources/<uuid>/submissions/<item>", "DELETE")
def delete_submission(self: Any, request: Any, journalist: Journalist, uuid: str, item: str):
    source, submission = yield _submission(self, uuid, item)
    yield shield(self.desk.delete_submissions(source, [submission.uuid]))
    return self._json(request, {"message": "Submission deleted"})


@token_route(routes, "/sources/<uuid>/submissions/<item>/download", "GET")
def download_submission(self: Any, request: Any, journalist: Journalist, uuid: str, item: str):
    source, submission = yield _submission(self, uuid, item)
    return (yield self._download(request, self.desk.open_submission(source, submission, journalist.id),
                                 "The file is gone."))


@token_route(routes, "/seen", "POST")
def seen(self: Any, request: Any, journalist: Journalist):
    body = self._body(request)
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
    return self._json(request, {"message": "resources marked seen"})


def register(cls: Any) -> None:
    """Add the submission routes to the API class ``cls``."""
    routes.register(cls)
