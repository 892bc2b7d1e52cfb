"""The cookie side of server-side sessions, the same for both HTML interfaces.

A ``SessionStore`` keeps sessions keyed by a token's hash; this binds it to one cookie: read the
token from a request, start a session (always a fresh token: no session fixation), end one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deaddrop.web._common.form_tokens import new_binding
from deaddrop.web.sessions import Session, SessionStore


@dataclass
class SessionCookie:
    store: SessionStore
    name: str
    # None: Secure only when the request came over TLS (the source onion is plain HTTP to us).
    secure: bool | None = None

    def token(self, request: Any) -> str | None:
        """The request's session token; once this response sets the cookie (a login, a logout),
        the one it sets: what is sealed for the session later in the same request (a message
        carried through the login page, kept as a draft) opens with the cookie the browser keeps."""
        set_now = getattr(request, "_session_token_set", None)
        if set_now is not None:
            return set_now or None
        raw = request.getCookie(self.name.encode())
        try:
            return raw.decode("ascii") if raw else None
        except UnicodeDecodeError:
            return None

    def binding(self, request: Any, renew: bool = False) -> str:
        """What anonymous form tokens are bound to: the cookie's value, or a new random one.

        Setting it keeps nothing on the server; SameSite=Strict keeps it out of other sites'
        forms, so a token copied into one is refused."""
        value = getattr(request, "_form_binding", None)  # already chosen for this response
        if value is not None and not renew:
            return value
        value = None if renew else self.token(request)
        if value is None or len(value) > 128:
            value = new_binding()
            self._set(request, value.encode("ascii"))
        request._form_binding = value
        return value

    def lookup(self, request: Any) -> Session | None:
        return self.store.lookup(self.token(request))

    def start(self, request: Any, replacing: Session | None = None) -> tuple[str, Session]:
        """A new session and its cookie; ``replacing`` (the pre-login session) ends first."""
        if replacing is not None:
            self.store.destroy(replacing)
        token, session = self.store.create()
        self._set(request, token.encode())
        return token, session

    def touch(self, request: Any) -> None:
        """Set the cookie again, unchanged. A browser evicts the site's pages from its back/forward
        cache when one of its cookies is set, so Back asks the server again instead of showing
        an old page as it was (with what was typed in it)."""
        if any(c.startswith(self.name.encode() + b"=") for c in request.cookies):
            return  # this response sets it already (a login)
        token = self.token(request)
        if token is not None:
            self._set(request, token.encode("ascii"))

    def end(self, request: Any, session: Session | None) -> None:
        if session is not None:
            self.store.destroy(session)
        self._set(request, b"", max_age=b"0")

    def _set(self, request: Any, value: bytes, **extra: Any) -> None:
        request._session_token_set = value.decode("ascii")
        secure = request.isSecure() if self.secure is None else self.secure
        request.addCookie(self.name.encode(), value, path=b"/", httpOnly=True, secure=secure,
                          sameSite="strict", **extra)
