"""A small client for the journalist API (``/api/v1``), on treq over mutual TLS."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import treq
from treq.client import HTTPClient
from twisted.internet.defer import inlineCallbacks
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

SOURCES_PAGE = 1000  # the server's largest page


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass
class Credentials:
    username: str
    passphrase: str
    one_time_code: Callable[[], str]


class JournalistApi:
    def __init__(self, reactor: Any, base_url: str, tls_policy: Any, session_file: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 4
        self._http = HTTPClient(Agent(reactor, contextFactory=tls_policy, pool=self._pool))
        self._session_file = session_file
        self.token: str | None = None

    # -- tokens ------------------------------------------------------------------------------

    def _load_saved_token(self) -> str | None:
        if not self._session_file:
            return None
        try:
            with open(self._session_file) as f:
                saved = json.load(f)
        except (OSError, ValueError):
            return None
        if saved.get("url") != self.base_url or saved.get("expires_at", 0) < time.time() + 60:
            return None
        return saved.get("token")

    def _save_token(self, token: str, expires_at: float) -> None:
        if not self._session_file:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self._session_file)), mode=0o700, exist_ok=True)
        tmp = self._session_file + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"url": self.base_url, "token": token, "expires_at": expires_at}, f)
        os.replace(tmp, self._session_file)

    @inlineCallbacks
    def log_in(self, credentials_factory: Callable[[], Credentials], reuse: bool = True):
        """Reuse a saved, still valid token (a one-time code is accepted once); else log in."""
        saved = self._load_saved_token() if reuse else None
        if saved:
            self.token = saved
            try:
                yield self.get_json("/user")
                return
            except ApiError as e:
                if e.status != 403:
                    raise
                self.token = None
        creds = credentials_factory()
        body = yield self.request_json("POST", "/token", {
            "username": creds.username, "passphrase": creds.passphrase, "one_time_code": creds.one_time_code()})
        self.token = body["token"]
        self._save_token(self.token, time.time() + 7 * 3600)

    @inlineCallbacks
    def log_out(self):
        if self.token:
            yield self.request_json("POST", "/logout", {})
        self.token = None
        if self._session_file and os.path.exists(self._session_file):
            os.remove(self._session_file)

    # -- requests ----------------------------------------------------------------------------

    def _headers(self, extra: dict[str, str] | None = None) -> Headers:
        headers = Headers({"Accept": ["application/json"]})
        if self.token:
            headers.setRawHeaders("Authorization", [f"Token {self.token}"])
        for name, value in (extra or {}).items():
            headers.setRawHeaders(name, [value])
        return headers

    def url(self, path: str) -> str:
        if path.startswith("/api/v1"):
            return self.base_url + path
        return f"{self.base_url}/api/v1{path}"

    @inlineCallbacks
    def request_json(self, method: str, path: str, body: Any = None):
        kwargs: dict[str, Any] = {"headers": self._headers()}
        if body is not None:
            kwargs["data"] = json.dumps(body).encode("utf-8")
            kwargs["headers"].setRawHeaders("Content-Type", ["application/json"])
        response = yield self._http.request(method, self.url(path), **kwargs)
        raw = yield treq.content(response)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"message": raw[:200].decode("utf-8", "replace")}
        if response.code >= 400:
            raise ApiError(response.code, data.get("message") or data.get("error") or "error")
        return data

    def get_json(self, path: str):
        return self.request_json("GET", path)

    @inlineCallbacks
    def all_sources(self):
        """Every source, following the server's pages (``next``) to the last one.

        Pages rather than the one streamed list: each response stays small on the workstation
        too, and they come in the source list's order (starred, then latest activity)."""
        sources: list[dict] = []
        first = f"/sources?per_page={SOURCES_PAGE}"
        path: str | None = first
        followed: set[str] = set()
        while path:
            if not (path == first or path.startswith("/api/v1/sources?")) or path in followed:
                raise ApiError(502, "the server's source list pointed to an unexpected next page")
            followed.add(path)
            listing = yield self.get_json(path)
            sources.extend(listing.get("sources", []))
            path = listing.get("next")
        return sources

    def get_stream(self, path: str, headers: dict[str, str] | None = None):
        """The raw response: the caller reads the body with ``treq.collect`` (streamed)."""
        return self._http.get(self.url(path), headers=self._headers(headers), unbuffered=True)

    @inlineCallbacks
    def close(self):
        yield self._pool.closeCachedConnections()
