"""The route guards of web/_common/guards.py, on a stand-in interface (pure logic)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import succeed
from twisted.trial import unittest

from deaddrop.web._common.guards import Refused, admin_required, login_required, token_required


@dataclass
class _Session:
    csrf_token: str

    def check_csrf(self, presented: Any) -> bool:
        return presented == self.csrf_token


@dataclass
class _Login:
    session: _Session
    is_admin: bool


class _Request:
    def __init__(self, method: bytes = b"GET", csrf: str | None = None) -> None:
        self.method = method
        self.args = {b"csrf_token": [csrf.encode()]} if csrf is not None else {}


class _App:
    def __init__(self, login: _Login | None) -> None:
        self.login = login

    def current_login(self, request: Any) -> Any:
        return succeed(self.login)  # a Deferred, as the journalist side's is

    def refuse_anonymous(self, request: Any, post: bool) -> str:
        return "anonymous-post" if post else "anonymous-get"

    def refuse_stale_form(self, request: Any) -> str:
        return "stale"

    def refuse_non_admin(self, request: Any) -> str:
        return "not-admin"

    @login_required
    def page(self, request: Any, login: _Login, item: str = "") -> str:
        return f"page {item}"

    @admin_required
    def admin_page(self, request: Any, login: _Login) -> str:
        return "admin page"

    @login_required
    def missing(self, request: Any, login: _Login) -> str:
        raise Refused("404 page")

    @token_required
    def api(self, request: Any, login: _Login) -> str:
        return "api"


class GuardTests(unittest.TestCase):
    def _call(self, route: str, login: _Login | None, request: _Request, **kwargs: Any) -> Any:
        return self.successResultOf(getattr(_App(login), route)(request, **kwargs))

    def test_anonymous_requests_are_refused_before_the_route_runs(self):
        self.assertEqual(self._call("page", None, _Request()), "anonymous-get")
        self.assertEqual(self._call("page", None, _Request(b"POST")), "anonymous-post")
        self.assertEqual(self._call("api", None, _Request()), "anonymous-get")

    def test_the_route_gets_the_login_and_its_url_arguments(self):
        login = _Login(_Session("t"), is_admin=False)
        self.assertEqual(self._call("page", login, _Request(), item="x"), "page x")

    def test_every_post_needs_the_sessions_csrf_token(self):
        login = _Login(_Session("t"), is_admin=True)
        self.assertEqual(self._call("page", login, _Request(b"POST")), "stale")
        self.assertEqual(self._call("page", login, _Request(b"POST", "other")), "stale")
        self.assertEqual(self._call("page", login, _Request(b"POST", "t")), "page ")
        self.assertEqual(self._call("admin_page", login, _Request(b"POST")), "stale")

    def test_token_routes_take_no_csrf_token(self):
        login = _Login(_Session("t"), is_admin=False)
        self.assertEqual(self._call("api", login, _Request(b"POST")), "api")

    def test_admin_pages_need_an_admin(self):
        self.assertEqual(self._call("admin_page", _Login(_Session("t"), False), _Request()), "not-admin")
        self.assertEqual(self._call("admin_page", _Login(_Session("t"), True), _Request()), "admin page")

    def test_refused_answers_with_its_response(self):
        self.assertEqual(self._call("missing", _Login(_Session("t"), False), _Request()), "404 page")
