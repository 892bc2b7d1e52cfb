"""Tokens (log in, log out) and the journalists: who one is, and everyone's names.

The routes are added to ``JournalistAPI`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.newsroom.accounts import Journalist, LoginFailed
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.guards import token_required
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist.api._shared import ApiError, iso, token_route
from deaddrop.web.journalist.cert_binding import refuse_mismatch
from deaddrop.web.journalist.api.interface import ApiSite

routes = Routes()


def user_json(j: Journalist) -> dict[str, Any]:
    return {"uuid": j.uuid, "username": j.username, "is_admin": j.is_admin,
            "first_name": None, "last_name": None, "last_login": iso(j.last_login_at)}


@routes.route("/token", methods=["POST"])
@inlineCallbacks
def token(self: ApiSite, request: Any):
    body = self.json_body(request)
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
        if failure.reason == "hotp_next_code":  # (only after a right passphrase, as on the login page)
            raise ApiError(403, "Forbidden", "Token authentication failed: the YubiKey is ahead of this server; "
                                             "within 5 minutes, send its next code (press it once more).") from None
        raise ApiError(403, "Forbidden", "Token authentication failed.") from None
    token, expires = yield self.accounts.issue_token(journalist)
    return self.json_response(request, {"token": token, "expiration": iso(expires), "journalist_uuid": journalist.uuid,
                                "journalist_first_name": None, "journalist_last_name": None})


@token_route(routes, "/logout", "POST")
def logout(self: ApiSite, request: Any, journalist: Journalist):
    yield self.accounts.revoke_token(self.bearer(request) or "")  # (token_route: there is one)
    return self.json_response(request, {"message": "Your token has been revoked."})


@routes.route("/user", methods=["GET"])
@token_required
def user(self: ApiSite, request: Any, journalist: Journalist) -> bytes:
    return self.json_response(request, user_json(journalist))


@token_route(routes, "/users", "GET")
def users(self: ApiSite, request: Any, journalist: Journalist):
    everyone = yield self.accounts.list()
    return self.json_response(request, {"users": [{"uuid": j.uuid, "username": j.username, "first_name": None,
                                           "last_name": None} for j in everyone]})


def register(cls: type[Routed]) -> None:
    """Add the token and user routes to the API class ``cls``."""
    routes.register(cls)
