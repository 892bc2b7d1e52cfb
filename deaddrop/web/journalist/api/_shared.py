"""What every part of the API shares: its error, its timestamps, query arguments, and the
download's header spelling."""
from __future__ import annotations

import datetime
import json
from typing import Any

from twisted.web.http_headers import Headers

from deaddrop.web._common.guards import token_route  # noqa: F401 (the API's routes take it from here)

PREFIX = "/api/v1"


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def query_text(request: Any, name: bytes) -> str | None:
    values = request.args.get(name)
    if not values:
        return None
    try:
        return values[0].decode("ascii")
    except UnicodeDecodeError:
        raise ApiError(400, "Bad Request", f"'{name.decode()}' must be ASCII.") from None


def query_int(request: Any, name: bytes, default: int, low: int, high: int) -> int:
    text = query_text(request, name)
    if text is None:
        return default
    if not (text.isdigit() and len(text) <= 7) or not low <= int(text) <= high:
        raise ApiError(400, "Bad Request", f"'{name.decode()}' must be a whole number from {low} to {high}.")
    return int(text)


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


def spell_as_securedrop(request: Any) -> None:
    request.responseHeaders = _SecureDropSpelling(dict(request.responseHeaders.getAllRawHeaders()))


def unsatisfiable(request: Any) -> bytes:
    """The answer to a download's Range outside the file."""
    request.setHeader(b"content-type", b"application/json")
    return json.dumps({"error": "Range Not Satisfiable", "message": "The requested range is outside the file."}).encode()

