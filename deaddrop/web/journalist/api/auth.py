"""Tokens (log in, log out) and the journalists: who one is, and everyone's names.

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.accounts import Journalist, LoginFailed
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.guards import token_required
from deaddrop.web._common.routes import Routes
from deaddrop.web.journalist.api._shared import ApiError, iso, token_route
from deaddrop.web.journalist.cert_binding import refuse_mismatch

routes = Routes()


def user_json(j: Journalist) -> dict[str, Any]:
    return {"uuid": j.uuid, "username": j.username, "is_admin": j.is_admin,
            "first_name": None, "last_name": None, "last_login": iso(j.last_login_at)}


@routes.route("/token", methods=["POST"])
@inlineCallbacks
def token(self: Any, request: Any):
    body = self._body(request)
    for field in ("username", "passphrase", "one_time_code"):
        if body.get(field) is None:  # absent: a malformed request, not a failed login
            raise ApiError(400, "Bad Request", f"'{field}' is missing from the request body.")
    if refuse_mismatch(request, body.get("username"), self.events):
        raise ApiError(403, "Forbidden", "Token authentication failed: this client certificate was issued "
                                         "for another user.")
    try:
        # An account with security keys gives a one-time API code from its account page here.
        journalist = yield shield(self.accounts.authenticate(
            body.get("username"), body.get("passphrase"), body.get("one_time_code"), api=True))
    except LoginFailed as failure:
        if failure.throttled:
            raise ApiError(429, "Too Many Requests", "Too many failed attempts for this account; wait a minute.")
        raise ApiError(403, "Forbidden", "Token authentication failed.") from None
    token, expires = yield self.accounts.issue_token(journalist)
    return self._json(request, {"token": token, "expiration": iso(expires), "journalist_uuid": journalist.uuid,
                                "journalist_first_name": None, "journalist_last_name": None})


@token_route(routes, "/logout", "POST")
def logout(self: Any, request: Any, journalist: Journalist):
    yield self.accounts.revoke_token(self._bearer(request))
    return self._json(request, {"message": "Your token has been revoked."})


@routes.route("/user", methods=["GET"])
@token_required
def user(self: Any, request: Any, journalist: Journalist) -> bytes:
    return self._json(request, user_json(journalist))


@token_route(routes, "/users", "GET")
def users(self: Any, request: Any, journalist: Journalist):
    everyone = yield self.accounts.list()
    return self._json(request, {"users": [{"uuid": j.uuid, "username": j.username, "first_name": None,
                                           "last_name": None} for j in everyone]})


def register(cls: Any) -> None:
    """Add the token and user routes to the API class ``cls``."""
    routes.register(cls)
