"""Route guards as decorators: logged in, admin only, CSRF on every POST.

A guarded route receives the login as its second argument::

    @app.route("/sources", methods=["GET"])
    @login_required
    def sources(self, request, login): ...

or, for a generator run by ``inlineCallbacks`` (what most routes are), in one line::

    @login_route(routes, "/sources", "GET")
    def sources(self, request, login): ...

The interface class says what a login is and how to refuse (see ``Guarded``); the guard does
the checks in one place, in one order: login, then CSRF (POST only), then admin. Helpers a
guarded route calls may raise ``Refused(response)`` to answer at once (a 404 page, say)
instead of returning a value every caller has to test.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Protocol

from twisted.internet.defer import inlineCallbacks, maybeDeferred

from deaddrop.web._common.forms import form_arg

CSRF_FIELD = "csrf_token"


class Login(Protocol):
    session: Any  # has check_csrf(presented) -> bool

    @property
    def is_admin(self) -> bool: ...


class Guarded(Protocol):
    """What the guards need of an interface: who is logged in, and how it refuses. Each
    interface's Protocol for its feature files (``SourceSite``...) extends it."""

    def current_login(self, request: Any) -> Any:
        """The request's live login (or a Deferred of it), or None."""

    def refuse_anonymous(self, request: Any, post: bool) -> Any:
        """The answer to a request that needs a login and has none (``post``: a form was sent)."""

    def refuse_stale_form(self, request: Any) -> Any:
        """The answer to a form without its session's CSRF token."""

    def refuse_non_admin(self, request: Any) -> Any:
        """The answer to an administrator's route asked for by someone else."""


class Refused(Exception):
    """Raised inside a guarded route: answer with ``response`` instead."""

    def __init__(self, response: Any) -> None:
        super().__init__("refused")
        self.response = response


def _guard(route: Callable[..., Any], admin: bool, csrf: bool = True) -> Callable[..., Any]:
    @functools.wraps(route)
    @inlineCallbacks
    def guarded(self: Guarded, request: Any, *args: Any, **kwargs: Any):
        post = request.method == b"POST"
        login = yield maybeDeferred(self.current_login, request)
        if login is None:
            return self.refuse_anonymous(request, post)
        if csrf and post and not login.session.check_csrf(form_arg(request, CSRF_FIELD)):
            return self.refuse_stale_form(request)
        if admin and not login.is_admin:
            return self.refuse_non_admin(request)
        try:
            return (yield route(self, request, login, *args, **kwargs))
        except Refused as refused:
            return refused.response

    guarded.guard = "admin" if admin else ("login" if csrf else "token")  # type: ignore[attr-defined]
    return guarded


def login_required(route: Callable[..., Any]) -> Callable[..., Any]:
    """The route needs a live login (and, for POST, the session's CSRF token)."""
    return _guard(route, admin=False)


def admin_required(route: Callable[..., Any]) -> Callable[..., Any]:
    """As ``login_required``, and the login must be an administrator's."""
    return _guard(route, admin=True)


def token_required(route: Callable[..., Any]) -> Callable[..., Any]:
    """For APIs authenticated by a header, not a cookie: no CSRF check (a browser cannot
    be made to send the header cross-site)."""
    return _guard(route, admin=False, csrf=False)


def _guarded_route(guard: Callable[..., Any]) -> Callable[..., Any]:
    def route(routes: Any, url: str, method: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            return routes.route(url, methods=[method])(guard(inlineCallbacks(f)))
        return add
    route.__doc__ = (f"``routes.route(url, methods=[method])`` for a generator run by ``inlineCallbacks``, "
                     f"behind ``{guard.__name__}``.")
    return route


# ``@login_route(routes, url, method)``: what nearly every page route and API endpoint wears.
login_route = _guarded_route(login_required)
admin_route = _guarded_route(admin_required)
token_route = _guarded_route(token_required)
