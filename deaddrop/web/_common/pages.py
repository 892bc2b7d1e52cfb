"""HTML pages built from ``twisted.web.template`` tags: escaping is automatic, no JavaScript.

Every page is complete without scripts, fonts or anything loaded from elsewhere; the only
extra request is the stylesheet, from the same origin under a content-hashed (cacheable) name.
"""
from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.defer import Deferred
from twisted.web.template import Tag, flattenString, tags

from deaddrop.web._common.static import hashed_url
from deaddrop.web.sessions import Session

DOCTYPE = b"<!DOCTYPE html>\n"


def csrf_field(session: Session) -> Tag:
    return tags.input(type="hidden", name="csrf_token", value=session.csrf_token)


def flash_list(flashes: Iterable[tuple[str, str]]) -> Tag | str:
    items = [tags.p(message, class_=f"flash flash-{category}", role="status") for category, message in flashes]
    return tags.div(*items, class_="flashes") if items else ""


def layout(
    *,
    title: str,
    site_name: str,
    body: Iterable[Any],
    flashes: Iterable[tuple[str, str]] = (),
    nav: Iterable[Any] = (),
    body_class: str = "",
    lang: str = "en",
    direction: str = "ltr",
    footer: str = "Powered by DeadDrop",
) -> Tag:
    """``lang`` (BCP 47) and ``direction`` ("ltr", "rtl"): the page's language; ``footer``: the
    footer's line, said in it."""
    return tags.html(lang=lang, dir=direction)(
        head(f"{title} · {site_name}"),
        tags.body(class_=body_class)(
            tags.header(
                tags.div(class_="brand")(tags.a(site_name, href="/")),
                tags.nav(*nav) if nav else "",
                class_="top",
            ),
            Tag("main")(flash_list(flashes), *body),
            tags.footer(tags.p(footer)),
        ),
    )


def head(title: str) -> Tag:
    """The <head> every page of both interfaces has: no external anything, one stylesheet."""
    return tags.head(
        tags.meta(charset="utf-8"),
        tags.meta(name="viewport", content="width=device-width, initial-scale=1"),
        tags.meta(name="referrer", content="no-referrer"),
        tags.title(title),
        tags.link(rel="stylesheet", href=stylesheet_url()),
    )


def stylesheet_url() -> str:
    return hashed_url("style.css")


def render(tag: Tag) -> Deferred:
    """-> Deferred[bytes] of a full HTML document."""
    return flattenString(None, tag).addCallback(lambda html: DOCTYPE + html)


def render_sync(tag: Tag) -> bytes:
    """For pages built outside a request (early refusals): tags flatten synchronously."""
    out: list[bytes] = []
    d = flattenString(None, tag)
    d.addCallback(out.append)
    if not out:
        raise RuntimeError("page did not flatten synchronously")
    return DOCTYPE + out[0]


def set_html(request: Any, status: int = 200) -> None:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"text/html; charset=utf-8")


def error_page_bytes(site_name: str, status: int, title: str, message: str, *, back: str = "Back to the start",
                     lang: str = "en", direction: str = "ltr", footer: str = "Powered by DeadDrop") -> bytes:
    """``back``: the link to the start; ``lang``, ``direction`` and ``footer`` as ``layout``'s,
    all in the page's language."""
    return render_sync(
        layout(
            title=title,
            site_name=site_name,
            body=[tags.h1(title), tags.p(message), tags.p(tags.a(back, href="/"))],
            body_class="error",
            lang=lang,
            direction=direction,
            footer=footer,
        )
    )


def http_error_page_text(failure: Any) -> tuple[int, str, str] | None:
    """(status, title, message) for a routing error (404, 405...), None for anything else."""
    from werkzeug.exceptions import HTTPException

    if not failure.check(HTTPException):
        return None
    code = failure.value.code or 500
    if code == 404:
        return 404, "Not found", "There is nothing at this address."
    if code == 405:
        return 405, "Not allowed", "That action is not available this way."
    return code, "Request refused", "The request could not be handled."
