"""The journalist JSON API, ``/api/v1``, in SecureDrop's shape (for workstation clients).

``POST /api/v1/token`` exchanges username, passphrase and one-time code for a token sent
back as ``Authorization: Token <token>``. Tokens live server-side (hashed) and expire; logout
revokes one, and a credential change revokes them all. The API never sets a cookie and never
reads one. Every error is ``{"error": ..., "message": ...}``.

A journalist client never receives a codename, a filesystem id or anything derived from
them: a source is its random ``uuid``, its designation and its public key.

``JournalistAPI`` holds what every endpoint shares (tokens, JSON in and out, errors); each
feature adds its routes with ``register``: ``auth`` (token, logout, users), ``sources``,
``submissions`` (with marking seen) and ``replies``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klein import Klein
from twisted.internet.defer import inlineCallbacks

from deaddrop.events import SecurityEvents
from deaddrop.newsroom.desk import Desk, NotFound
from deaddrop.newsroom.accounts import Accounts, Journalist
from deaddrop.web._common.guards import token_required
from deaddrop.web._common.site import log_failure_safely
from deaddrop.web.journalist._files import FileResponse
from deaddrop.web.journalist.api import auth, replies, sources, submissions
from deaddrop.web.journalist.api._shared import PREFIX, ApiError, spell_as_securedrop, unsatisfiable
from deaddrop.web.journalist.api.interface import ApiSite
from deaddrop.web.journalist.cert_binding import issued_for


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
    def json_response(request: Any, data: Any, status: int = 200) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(data, sort_keys=True).encode("utf-8")

    def json_body(self, request: Any) -> dict[str, Any]:
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
    def bearer(request: Any) -> str | None:
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

    def current_login(self, request: Any) -> Any:
        """The journalist the request's token belongs to (a Deferred), or None (for ``token_required``).

        A token counts only over its journalist's own certificate, like the login that made it."""
        d = self.accounts.journalist_for_token(self.bearer(request))
        return d.addCallback(lambda j: j if j is not None and issued_for(request, j.username) else None)

    def refuse_anonymous(self, request: Any, post: bool) -> bytes:
        raise ApiError(403, "Forbidden", "Token authentication failed: missing, expired or revoked token.")

    @inlineCallbacks
    def find_source(self, journalist: Journalist, uuid: str):
        """The source ``uuid`` as ``journalist`` sees it; another desk's source is, as a source
        that does not exist, a 404."""
        source = yield self.desk.source(journalist.id, uuid)
        if source is None:
            raise ApiError(404, "Not Found", "No such source.")
        return source

    @inlineCallbacks
    def find_source_item(self, journalist: Journalist, uuid: str, item: str, find: Any, missing: str):
        """The source ``uuid`` and its submission or reply ``item`` (``find(source, item)``)."""
        source = yield self.find_source(journalist, uuid)
        found = yield find(source, item)
        if found is None:
            raise ApiError(404, "Not Found", missing)
        return source, found

    @inlineCallbacks
    def download(self, request: Any, opening: Any, gone: str):
        """The file ``opening`` (a Deferred of the desk's download) sends, with SecureDrop's ETag."""
        try:
            download = yield opening
        except NotFound:
            raise ApiError(404, "Not Found", gone) from None
        spell_as_securedrop(request)
        return FileResponse(download, etag=True, unsatisfiable=unsatisfiable)

    # -- the API's root and the instance -----------------------------------------------------

    @app.route("/", methods=["GET"])
    def root(self, request: Any) -> bytes:
        return self.json_response(request, {
            "token_url": f"{PREFIX}/token", "sources_url": f"{PREFIX}/sources",
            "submissions_url": f"{PREFIX}/submissions", "replies_url": f"{PREFIX}/replies",
            "seen_url": f"{PREFIX}/seen", "user_url": f"{PREFIX}/user", "current_user_url": f"{PREFIX}/user",
            "all_users_url": f"{PREFIX}/users", "logout_url": f"{PREFIX}/logout",
        })

    @app.route("/instance", methods=["GET"])
    @token_required
    def instance(self, request: Any, journalist: Journalist) -> bytes:
        """The submission public key, so workstations encrypt replies to it as well."""
        return self.json_response(request, {"submission_key": {
            "type": "PGP", "fingerprint": self.desk.newsroom.submission_fingerprint,
            "public": self.submission_key_armored}})

    # -- errors

    @app.handle_errors(Exception)
    def _errors(self, request: Any, failure: Any) -> bytes:
        from werkzeug.exceptions import HTTPException

        if failure.check(ApiError):
            e = failure.value
            return self.json_response(request, {"error": e.error, "message": e.message}, e.status)
        if failure.check(HTTPException):
            code = failure.value.code or 500
            names = {404: "Not Found", 405: "Method Not Allowed"}
            return self.json_response(request, {"error": names.get(code, "Bad Request"),
                                        "message": "No such endpoint, or not with this method."}, code)
        log_failure_safely(failure)
        return self.json_response(request, {"error": "Internal Server Error", "message": "The request could not be handled."}, 500)


for _feature in (auth, sources, submissions, replies):
    _feature.register(JournalistAPI)


if TYPE_CHECKING:
    def _provides_what_its_features_use(api: JournalistAPI) -> ApiSite:
        return api
