"""Reading form fields (urlencoded bodies and query strings) the same way on both interfaces."""
from __future__ import annotations

from typing import Any


def form_arg(request: Any, name: str, limit: int = 4096) -> str | None:
    """The single UTF-8 value of ``name`` (at most ``limit`` characters), else None."""
    values = request.args.get(name.encode())
    if not values or len(values) != 1 or len(values[0]) > limit * 4:
        return None
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        return None


def form_args(request: Any, name: str, most: int = 1000) -> list[str]:
    """Every ASCII value of ``name`` (the first ``most``); others are skipped."""
    found = []
    for value in request.args.get(name.encode(), [])[:most]:
        try:
            found.append(value.decode("ascii"))
        except UnicodeDecodeError:
            continue
    return found


def same_origin(request: Any, cookie: str) -> bool:
    """Whether a form post came from this site's own page (Fetch Metadata and Origin, when the
    browser sends them): only then is a typed message shown back, so another site cannot post
    a message that a source would then send under their codename. ``cookie``: the name of the
    site's own SameSite=Strict cookie."""
    site = request.getHeader(b"sec-fetch-site")
    if site is not None:
        return site in (b"same-origin", b"none")
    origin = request.getHeader(b"origin")
    if origin is None:
        return True  # a browser too old to send Origin (every current one sends it with a POST)
    if origin == b"null":
        # Our pages say Referrer-Policy: no-referrer, so a browser without Fetch Metadata sends
        # "Origin: null" for them; but so it does for any other site's page that says the same
        # (or a sandboxed frame's). Our own pages are told apart by our SameSite=Strict cookie,
        # which a browser sends with no other site's request: every page whose form can carry a
        # message set it (the login form's binding, or the session).
        return request.getCookie(cookie.encode("ascii")) is not None
    return origin.split(b"://", 1)[-1] == (request.getHeader(b"host") or b"")
