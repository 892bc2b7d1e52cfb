"""The journalist interface: a Klein app served only on the journalist (mutual TLS) listener.

HTML pages for people, and the JSON API mounted at ``/api/v1`` (see ``api/``). Sessions
are server-side (``dd_journalist`` cookie, idle and absolute timeouts), every form carries a
CSRF token, and every request re-reads the account: a deleted account, or one whose
passphrase or two-factor secret changed since the session began, is logged out at once.

``JournalistInterface`` holds what every page shares; each feature adds its routes with
``register``: ``auth`` (log in and out) and ``key_login`` (its security key step), ``sources``
(the list, triage, a source's page, replies), ``downloads``, ``account`` (one's own) and ``keys``
(one's security keys) and ``key_codes`` (API and recovery codes), ``users`` and ``settings`` (administrators), ``source_texts`` (what
sources see).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generator

from klein import Klein
from twisted.internet.defer import Deferred, inlineCallbacks

from deaddrop.events import SecurityEvents
from deaddrop.newsroom.desk import Desk, SourceView
from deaddrop.newsroom.accounts import Accounts, Journalist
from deaddrop.newsroom.key_login import SecurityKeys
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.newsroom.source_texts import SourceTexts
from deaddrop.transport.connections import ConnectionLimits
from deaddrop.web._common.guards import Refused
from deaddrop.i18n.speech import Speech
from deaddrop.web._common.pages import error_page_bytes, http_error_page_text, set_html
from deaddrop.web._common.responses import HtmlResponses
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web.sessions import Session, SessionStore
from deaddrop.web._common.site import BodyPolicy, DeadDropSite, log_failure_safely
from deaddrop.web._common.static import JOURNALIST as JOURNALIST_STATIC, serve_static
from deaddrop.web.journalist import (account, auth, desks, downloads, i18n, key_codes, key_login, keys, pages, settings,
                                     source_texts, sources, users)
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.api import JournalistAPI
from deaddrop.web.journalist.cert_binding import issued_for
from deaddrop.web.journalist.interface import JournalistSite

COOKIE = "dd_journalist"
MiB = 1024 * 1024


@dataclass
class JournalistInterface(HtmlResponses):
    accounts: Accounts
    desk: Desk
    sessions: SessionStore
    settings: InstanceSettings
    events: SecurityEvents
    api: JournalistAPI  # mounted at /api/v1
    security_keys: SecurityKeys  # keys.py, key_login.py
    source_texts: SourceTexts = field(default_factory=SourceTexts)  # admin pages: source_texts.py
    # The exact `deaddrop-admin cert issue` line for a new user, with {name} (see service.journalist_side).
    cert_issue_command: str = "deaddrop-admin cert issue {name} --out {name}.p12"
    # -> Deferred[username -> CertificateStatus], for the users page (see service.journalist_side); None: unknown.
    certificate_status: Callable[[], Deferred] | None = None
    # The host names the server's certificate carries: the relying parties security keys may use.
    key_hosts: Callable[[], list[str]] = list

    cookie: SessionCookie = field(init=False)

    app = Klein()

    def __post_init__(self) -> None:
        self.cookie = SessionCookie(self.sessions, COOKIE, secure=True)

    # -- plumbing --------------------------------------------------------------------------

    def anonymous_session(self, request: Any) -> Session:
        session = self.cookie.lookup(request) or self.cookie.start(request)[1]
        if "journalist_id" not in session.data:  # before logging in, the browser's language
            session.data[i18n.LANGUAGE] = i18n.browser_language(request.requestHeaders)
        return session

    def speech(self, request: Any) -> Speech:
        """The language of this request's pages: its session's (set when its login was read), else
        the browser's."""
        session = self.cookie.lookup(request)
        if session is not None and i18n.LANGUAGE in session.data:
            return i18n.of(session)
        return i18n.speech(i18n.browser_language(request.requestHeaders))

    @inlineCallbacks
    def current_login(self, request: Any) -> Generator[Deferred[Any], Any, JournalistLogin | None]:
        """The live login, else None. Re-checks the account every time."""
        session = self.cookie.lookup(request)
        if session is None or "journalist_id" not in session.data:
            return None
        journalist = yield self.accounts.get(session.data["journalist_id"])
        if journalist is None or journalist.auth_epoch != session.data.get("auth_epoch"):
            self.sessions.destroy(session)
            return None
        if not issued_for(request, journalist.username):
            return None  # a session cookie counts only over its journalist's own certificate
        # The account's language (read again with the account), else the browser's.
        session.data[i18n.LANGUAGE] = journalist.language or i18n.browser_language(request.requestHeaders)
        return JournalistLogin(session, journalist)

    def refuse_anonymous(self, request: Any, post: bool) -> bytes:
        if post:
            return self.error(request, 403, N_("Please log in again"), N_("Your session ended. Nothing was changed."))
        return self.redirect(request, "/login")

    def refuse_stale_form(self, request: Any) -> bytes:
        return self.error(request, 403, N_("Please try again"),
                          N_("The form was stale or came from elsewhere. Nothing was changed."))

    def refuse_non_admin(self, request: Any) -> bytes:
        return self.error(request, 403, N_("Administrators only"), N_("This page is for administrators."))

    @inlineCallbacks
    def find_source(self, request: Any, login: JournalistLogin, uuid: str) -> Generator[Deferred[Any], Any, SourceView]:
        """The source ``uuid`` as ``login``'s journalist sees it; another desk's source is, as a
        source that does not exist, a 404."""
        source = yield self.desk.source(login.journalist.id, uuid)
        if source is None:
            raise Refused(self.error(request, 404, N_("Not found"),
                                     N_("There is no such source (it may have been deleted).")))
        return source

    def error(self, request: Any, status: int, title: str, message: str, **values: Any) -> bytes:
        """An error page in the request's language: ``title`` and ``message`` are English message
        ids (``N_``), ``values`` fill their placeholders."""
        say = self.speech(request)
        set_html(request, status)
        return error_page_bytes(self.site_name, status, say._(title, **values), say._(message, **values),
                                back=say._("Back to the start"), **pages.frame(say))

    def bind_session(self, session: Session, journalist: Journalist) -> None:
        session.data["journalist_id"] = journalist.id
        session.data["auth_epoch"] = journalist.auth_epoch
        self.sessions.bind(session, journalist.id)

    def end_other_sessions(self, keep: Session | None, journalist: Journalist) -> None:
        self.sessions.destroy_owner(journalist.id, keep=keep)
        if keep is not None:
            self.bind_session(keep, journalist)

    # -- the rest --------------------------------------------------------------------------

    @app.route("/api/v1/", branch=True)
    def api_branch(self, request: Any) -> Any:
        return self.api.resource()

    @app.route("/robots.txt", methods=["GET"])
    def robots(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"User-agent: *\nDisallow: /\n"

    @app.route("/static/<path:name>", methods=["GET"])
    def static(self, request: Any, name: str) -> bytes:
        return serve_static(request, name, JOURNALIST_STATIC)

    @app.handle_errors(Exception)
    def _errors(self, request: Any, failure: Any) -> bytes:
        routing = http_error_page_text(failure)
        if routing is not None:
            return self.error(request, *routing)
        log_failure_safely(failure)
        return self.error(request, 500, N_("Something went wrong"), N_("The server could not handle that request."))

    def _early_page(self, status: int, title: str, message: str, headers: Any = None) -> bytes:
        """A refusal answered before a route runs (too many requests, too large...), in the
        language the browser asks for (its titles and messages are in ``messages``)."""
        say = i18n.speech(i18n.browser_language(headers))
        return error_page_bytes(self.site_name, status, say._(title), say._(message), back=say._("Back to the start"),
                                **pages.frame(say))

    def site(self, reactor: Any = None, connection_limits: ConnectionLimits | None = None) -> DeadDropSite:
        return DeadDropSite(
            self.app.resource(),
            body_policy=BodyPolicy(max_form_bytes=2 * MiB),
            render_error_page=self._early_page,
            # The one multipart upload of this side: an admin's logo for the source pages.
            start_upload=functools.partial(source_texts.start_logo_upload, self),
            upload_targets=frozenset({source_texts.LOGO_PATH}),
            multipart_limit=lambda: source_texts.LOGO_BODY_LIMIT,
            # A logo over the limit is answered by its upload, with the page to try again.
            refuse_large_uploads_early=False,
            connection_limits=connection_limits,
            reactor=reactor,
        )


for _feature in (auth, key_login, key_codes, sources, downloads, account, keys, users, settings, source_texts, desks):
    _feature.register(JournalistInterface)


if TYPE_CHECKING:
    def _provides_what_its_features_use(interface: JournalistInterface) -> JournalistSite:
        return interface
