"""The journalist JSON API, ``/api/v1``, in SecureDrop's shape (for workstation clients).

``POST /api/v1/token`` exchanges username, passphrase and one-time code for a token sent
back as ``Authorization: Token <token>``. Tokens live server-side (hashed) and expire; logout
revokes one, and a credential change revokes them all. The API never sets a cookie and never
reads one. Every error is ``{"error": ..., "message": ...}``.

A journalist client never receives a codename, a filesystem id or anything derived from
them: a source is its random ``uuid``, its designation and its public key.
"""
from __future__ import annotations

import datetime
import json
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from klein import Klein
from twisted.internet.defer import inlineCallbacks
from twisted.web.http_headers import Headers

from deaddrop.events import SecurityEvents
from deaddrop.journalist_desk import (
    Desk, DuplicateReply, KeyNotReady, NotEncryptedToSource, NotFound, ReplyView, SourceView, SubmissionView,
)
from deaddrop.journalists import Accounts, Journalist, LoginFailed
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.guards import token_required
from deaddrop.web._common.site import log_failure_safely
from deaddrop.web.journalist._files import FileResponse
from deaddrop.web.journalist._stream import stream_json_list
from deaddrop.web.journalist.cert_binding import issued_for, refuse_mismatch

PREFIX = "/api/v1"


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


SOURCES_PER_PAGE = 100
MAX_SOURCES_PER_PAGE = 1000
# Sources per database read while the whole list streams (a few hundred KiB of JSON).
STREAM_BATCH = 250


class _SecureDropSpelling(Headers):
    """Response headers with the names spelled as SecureDrop's server spells them.

    Header names are case-insensitive, but SecureDrop's client library looks the download's
    checksum up as ``headers["Etag"]`` in a plain dict, and Twisted writes the name as ``ETag``.
    Only the spelling on the wire changes; everything else about the headers is Twisted's own.
    """

    _SPELLING = {b"ETag": b"Etag"}

    def getAllRawHeaders(self):
        for name, values in super().getAllRawHeaders():
            yield self._SPELLING.get(name, name), values


def _spell_as_securedrop(request: Any) -> None:
    request.responseHeaders = _SecureDropSpelling(dict(request.responseHeaders.getAllRawHeaders()))


def _query_text(request: Any, name: bytes) -> str | None:
    values = request.args.get(name)
    if not values:
        return None
    try:
        return values[0].decode("ascii")
    except UnicodeDecodeError:
        raise ApiError(400, "Bad Request", f"'{name.decode()}' must be ASCII.") from None


def _query_int(request: Any, name: bytes, default: int, low: int, high: int) -> int:
    text = _query_text(request, name)
    if text is None:
        return default
    if not (text.isdigit() and len(text) <= 7) or not low <= int(text) <= high:
        raise ApiError(400, "Bad Request", f"'{name.decode()}' must be a whole number from {low} to {high}.")
    return int(text)


@dataclass
class JournalistAPI:
    accounts: Accounts
    desk: Desk
    events: SecurityEvents
    submission_key_armored: str = ""

    app = Klein()

    def resource(self) -> Any:
        return self.app.resource()

    # -- plumbing --------------------------------------------------------------------------

    @staticmethod
    def _json(request: Any, data: Any, status: int = 200) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(data, sort_keys=True).encode("utf-8")

    def _body(self, request: Any) -> dict[str, Any]:
        request.content.seek(0)
        raw = request.content.read()
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ApiError(400, "Bad Request", "The request body must be a JSON object.") from None
        if not isinstance(data, dict):
            raise ApiError(400, "Bad Request", "The request body must be a JSON object.")
        return data

    @staticmethod
    def _bearer(request: Any) -> str | None:
        header = request.getHeader(b"authorization")
        if not header:
            return None
        scheme, _, value = header.partition(b" ")
        if scheme.lower() != b"token" or not value.strip():
            return None
        try:
            return value.strip().decode("ascii")
        except UnicodeDecodeError:
            return None

    def _current_login(self, request: Any) -> Any:
        """The journalist the request's token belongs to (a Deferred), or None (for ``token_required``).

        A token counts only over its journalist's own certificate, like the login that made it."""
        d = self.accounts.journalist_for_token(self._bearer(request))
        return d.addCallback(lambda j: j if j is not None and issued_for(request, j.username) else None)

    def _refuse_anonymous(self, request: Any, post: bool) -> bytes:
        raise ApiError(403, "Forbidden", "Token authentication failed: missing, expired or revoked token.")

    @inlineCallbacks
    def _source(self, uuid: str):
        source = yield self.desk.source(uuid)
        if source is None:
            raise ApiError(404, "Not Found", "No such source.")
        return source

    # -- serialisation ---------------------------------------------------------------------

    @staticmethod
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

    @staticmethod
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

    @staticmethod
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

    @staticmethod
    def user_json(j: Journalist) -> dict[str, Any]:
        return {"uuid": j.uuid, "username": j.username, "is_admin": j.is_admin,
                "first_name": None, "last_name": None, "last_login": iso(j.last_login_at)}

    # -- endpoints -------------------------------------------------------------------------

    @app.route("/", methods=["GET"])
    def root(self, request: Any) -> bytes:
        return self._json(request, {
            "token_url": f"{PREFIX}/token", "sources_url": f"{PREFIX}/sources",
            "submissions_url": f"{PREFIX}/submissions", "replies_url": f"{PREFIX}/replies",
            "seen_url": f"{PREFIX}/seen", "user_url": f"{PREFIX}/user", "current_user_url": f"{PREFIX}/user",
            "all_users_url": f"{PREFIX}/users", "logout_url": f"{PREFIX}/logout",
        })

    @app.route("/instance", methods=["GET"])
    @token_required
    def instance(self, request: Any, journalist: Journalist) -> bytes:
        """The submission public key, so workstations encrypt replies to it as well."""
        return self._json(request, {"submission_key": {
            "type": "PGP", "fingerprint": self.desk.newsroom.submission_fingerprint,
            "public": self.submission_key_armored}})

    @app.route("/token", methods=["POST"])
    @inlineCallbacks
    def token(self, request: Any):
        body = self._body(request)
        for field in ("username", "passphrase", "one_time_code"):
            if body.get(field) is None:  # absent: a malformed request, not a failed login
                raise ApiError(400, "Bad Request", f"'{field}' is missing from the request body.")
        if refuse_mismatch(request, body.get("username"), self.events):
            raise ApiError(403, "Forbidden", "Token authentication failed: this client certificate was issued "
                                             "for another user.")
        try:
            journalist = yield shield(self.accounts.authenticate(
                body.get("username"), body.get("passphrase"), body.get("one_time_code")))
        except LoginFailed as failure:
            if failure.throttled:
                raise ApiError(429, "Too Many Requests", "Too many failed attempts for this account; wait a minute.")
            raise ApiError(403, "Forbidden", "Token authentication failed.") from None
        token, expires = yield self.accounts.issue_token(journalist)
        return self._json(request, {"token": token, "expiration": iso(expires), "journalist_uuid": journalist.uuid,
                                    "journalist_first_name": None, "journalist_last_name": None})

    @app.route("/logout", methods=["POST"])
    @token_required
    @inlineCallbacks
    def logout(self, request: Any, journalist: Journalist):
        yield self.accounts.revoke_token(self._bearer(request))
        return self._json(request, {"message": "Your token has been revoked."})

    @app.route("/user", methods=["GET"])
    @token_required
    def user(self, request: Any, journalist: Journalist) -> bytes:
        return self._json(request, self.user_json(journalist))

    @app.route("/users", methods=["GET"])
    @token_required
    @inlineCallbacks
    def users(self, request: Any, journalist: Journalist):
        everyone = yield self.accounts.list()
        return self._json(request, {"users": [{"uuid": j.uuid, "username": j.username, "first_name": None,
                                               "last_name": None} for j in everyone]})

    @app.route("/sources", methods=["GET"])
    @token_required
    @inlineCallbacks
    def sources(self, request: Any, journalist: Journalist):
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
                request, "sources", self.desk.sources_by_id,
                lambda s: json.dumps(self.source_json(s), sort_keys=True).encode("utf-8"),
                lambda s: s.id, 0, STREAM_BATCH))
        per_page = _query_int(request, b"per_page", SOURCES_PER_PAGE, 1, MAX_SOURCES_PER_PAGE)
        after = _query_text(request, b"after")
        try:
            sources, total, cursor = yield self.desk.sources_after(after, per_page)
        except ValueError:
            raise ApiError(400, "Bad Request", "'after' must be the next_cursor of a previous page.") from None
        next_url = f"{PREFIX}/sources?per_page={per_page}&after={cursor}" if cursor else None
        if next_url:
            request.setHeader(b"link", f'<{next_url}>; rel="next"'.encode("ascii"))
        return self._json(request, {"sources": [self.source_json(s) for s in sources], "total": total,
                                    "per_page": per_page, "next_cursor": cursor, "next": next_url})

    @app.route("/sources/<uuid>", methods=["GET"])
    @token_required
    @inlineCallbacks
    def source(self, request: Any, journalist: Journalist, uuid: str):
        source = yield self._source(uuid)
        return self._json(request, self.source_json(source))

    @app.route("/sources/<uuid>", methods=["DELETE"])
    @token_required
    @inlineCallbacks
    def delete_source(self, request: Any, journalist: Journalist, uuid: str):
        source = yield self._source(uuid)
        yield shield(self.desk.delete_source(source))
        self.events.emit("journalist.source.deleted", username=journalist.username)
        return self._json(request, {"message": "Source and submissions deleted"})

    @app.route("/sources/<uuid>/conversation", methods=["DELETE"])
    @token_required
    @inlineCallbacks
    def delete_conversation(self, request: Any, journalist: Journalist, uuid: str):
        """Every submission and reply of the source goes; the source, its key and designation stay."""
        source = yield self._source(uuid)
        yield shield(self.desk.delete_conversation(source))
        self.events.emit("journalist.conversation.deleted", username=journalist.username)
        return self._json(request, {"message": "Source data deleted"})

    @app.route("/sources/<uuid>/flag", methods=["POST"])
    @token_required
    @inlineCallbacks
    def flag(self, request: Any, journalist: Journalist, uuid: str):
        """Accepted and ignored, as in SecureDrop 2.x: sources here get a key as soon as they
        first write, so there is nothing to flag them for."""
        yield self._source(uuid)
        return self._json(request, {"message": "Source flagged for reply"})

    @app.route("/sources/<uuid>/add_star", methods=["POST"])
    @token_required
    @inlineCallbacks
    def add_star(self, request: Any, journalist: Journalist, uuid: str):
        source = yield self._source(uuid)
        yield self.desk.set_starred(source, True)
        return self._json(request, {"message": "Star added"}, 201)

    @app.route("/sources/<uuid>/remove_star", methods=["DELETE"])
    @token_required
    @inlineCallbacks
    def remove_star(self, request: Any, journalist: Journalist, uuid: str):
        source = yield self._source(uuid)
        yield self.desk.set_starred(source, False)
        return self._json(request, {"message": "Star removed"})

    # -- submissions

    @app.route("/submissions", methods=["GET"])
    @token_required
    @inlineCallbacks
    def all_submissions(self, request: Any, journalist: Journalist):
        items = yield self.desk.all_submissions()
        return self._json(request, {"submissions": [self.submission_json(x) for x in items]})

    @app.route("/sources/<uuid>/submissions", methods=["GET"])
    @token_required
    @inlineCallbacks
    def submissions(self, request: Any, journalist: Journalist, uuid: str):
        source = yield self._source(uuid)
        items = yield self.desk.submissions(source)
        return self._json(request, {"submissions": [self.submission_json(x) for x in items]})

    @inlineCallbacks
    def _submission(self, uuid: str, item: str):
        source = yield self._source(uuid)
        submission = yield self.desk.submission(source, item)
        if submission is None:
            raise ApiError(404, "Not Found", "No such submission.")
        return source, submission

    @app.route("/sources/<uuid>/submissions/<item>", methods=["GET"])
    @token_required
    @inlineCallbacks
    def submission(self, request: Any, journalist: Journalist, uuid: str, item: str):
        _, submission = yield self._submission(uuid, item)
        return self._json(request, self.submission_json(submission))

    @app.route("/sources/<uuid>/submissions/<item>", methods=["DELETE"])
    @token_required
    @inlineCallbacks
    def delete_submission(self, request: Any, journalist: Journalist, uuid: str, item: str):
        source, submission = yield self._submission(uuid, item)
        yield shield(self.desk.delete_submissions(source, [submission.uuid]))
        return self._json(request, {"message": "Submission deleted"})

    @app.route("/sources/<uuid>/submissions/<item>/download", methods=["GET"])
    @token_required
    @inlineCallbacks
    def download_submission(self, request: Any, journalist: Journalist, uuid: str, item: str):
        source, submission = yield self._submission(uuid, item)
        try:
            download = yield self.desk.open_submission(source, submission, journalist.id)
        except NotFound:
            raise ApiError(404, "Not Found", "The file is gone.") from None
        _spell_as_securedrop(request)
        return FileResponse(download, etag=True, unsatisfiable=self._unsatisfiable)

    def _unsatisfiable(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"error": "Range Not Satisfiable", "message": "The requested range is outside the file."}).encode()

    # -- replies

    @app.route("/replies", methods=["GET"])
    @token_required
    @inlineCallbacks
    def all_replies(self, request: Any, journalist: Journalist):
        items = yield self.desk.all_replies()
        return self._json(request, {"replies": [self.reply_json(r) for r in items]})

    @app.route("/sources/<uuid>/replies", methods=["GET"])
    @token_required
    @inlineCallbacks
    def replies(self, request: Any, journalist: Journalist, uuid: str):
        source = yield self._source(uuid)
        items = yield self.desk.replies(source)
        return self._json(request, {"replies": [self.reply_json(r) for r in items]})

    @app.route("/sources/<uuid>/replies", methods=["POST"])
    @token_required
    @inlineCallbacks
    def post_reply(self, request: Any, journalist: Journalist, uuid: str):
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

    @inlineCallbacks
    def _reply(self, uuid: str, item: str):
        source = yield self._source(uuid)
        reply = yield self.desk.reply(source, item)
        if reply is None:
            raise ApiError(404, "Not Found", "No such reply.")
        return source, reply

    @app.route("/sources/<uuid>/replies/<item>", methods=["GET"])
    @token_required
    @inlineCallbacks
    def reply(self, request: Any, journalist: Journalist, uuid: str, item: str):
        _, reply = yield self._reply(uuid, item)
        return self._json(request, self.reply_json(reply))

    @app.route("/sources/<uuid>/replies/<item>", methods=["DELETE"])
    @token_required
    @inlineCallbacks
    def delete_reply(self, request: Any, journalist: Journalist, uuid: str, item: str):
        source, reply = yield self._reply(uuid, item)
        yield shield(self.desk.delete_reply(source, reply.uuid))
        return self._json(request, {"message": "Reply deleted"})

    @app.route("/sources/<uuid>/replies/<item>/download", methods=["GET"])
    @token_required
    @inlineCallbacks
    def download_reply(self, request: Any, journalist: Journalist, uuid: str, item: str):
        source, reply = yield self._reply(uuid, item)
        try:
            download = yield self.desk.open_reply(source, reply, journalist.id)
        except NotFound:
            raise ApiError(404, "Not Found", "This reply was deleted by the source.") from None
        _spell_as_securedrop(request)
        return FileResponse(download, etag=True, unsatisfiable=self._unsatisfiable)

    # -- seen

    @app.route("/seen", methods=["POST"])
    @token_required
    @inlineCallbacks
    def seen(self, request: Any, journalist: Journalist):
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

    # -- errors

    @app.handle_errors(Exception)
    def _errors(self, request: Any, failure: Any) -> bytes:
        from werkzeug.exceptions import HTTPException

        if failure.check(ApiError):
            e = failure.value
            return self._json(request, {"error": e.error, "message": e.message}, e.status)
        if failure.check(HTTPException):
            code = failure.value.code or 500
            names = {404: "Not Found", 405: "Method Not Allowed"}
            return self._json(request, {"error": names.get(code, "Bad Request"),
                                        "message": "No such endpoint, or not with this method."}, code)
        log_failure_safely(failure)
        return self._json(request, {"error": "Internal Server Error", "message": "The request could not be handled."}, 500)
