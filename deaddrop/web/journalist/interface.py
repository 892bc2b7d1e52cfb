"""What a feature file of the journalist interface may use of it: ``JournalistSite``.

Each feature module (``auth``, ``key_login``, ``sources``, ``downloads``, ``account``, ``keys``,
``key_codes``, ``users``, ``settings``, ``source_texts``) takes the interface as
``self: JournalistSite``; ``JournalistInterface`` (app.py) is the one class that provides it,
and a type checker holds the two together.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from twisted.internet.defer import Deferred

from deaddrop.events import SecurityEvents
from deaddrop.i18n.speech import Speech
from deaddrop.newsroom.accounts import Accounts, Journalist
from deaddrop.newsroom.desk import Desk, SourceView
from deaddrop.newsroom.key_login import SecurityKeys
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.newsroom.source_texts import SourceTexts
from deaddrop.web._common.guards import Guarded
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.sessions import Session, SessionStore


class JournalistSite(Guarded, Protocol):
    """The journalist interface, as its routes and their helpers see it (and as its guards do:
    ``Guarded``)."""

    # -- its parts ----------------------------------------------------------------------------
    accounts: Accounts
    desk: Desk
    sessions: SessionStore
    settings: InstanceSettings
    events: SecurityEvents
    source_texts: SourceTexts  # what sources see, set by admins
    # The exact `deaddrop-admin cert issue` line for a new user, with {name}.
    cert_issue_command: str
    # -> Deferred[username -> CertificateStatus], for the users page; None: unknown.
    certificate_status: Callable[[], Deferred[Any]] | None
    security_keys: SecurityKeys
    cookie: SessionCookie

    def key_hosts(self) -> list[str]:
        """The host names the server's certificate carries: the relying parties security keys may use."""

    @property
    def site_name(self) -> str:
        """The organisation's name, as every page shows it."""

    # -- the request's visitor -------------------------------------------------------------
    def anonymous_session(self, request: Any) -> Session:
        """The cookie's session, started if there is none (the login steps keep state in it)."""

    def current_login(self, request: Any) -> Deferred[JournalistLogin | None]:
        """The live login, else None; the account is read again every time."""

    def bind_session(self, session: Session, journalist: Journalist) -> None:
        """``session`` is now ``journalist``'s, at the account's current credentials."""

    def end_other_sessions(self, keep: Session | None, journalist: Journalist) -> None:
        """Every session of ``journalist`` but ``keep`` ends (a credential changed)."""

    def find_source(self, request: Any, login: JournalistLogin, uuid: str) -> Deferred[SourceView]:
        """The source ``uuid`` as ``login``'s journalist sees it; raises ``Refused`` with a 404
        page if there is none, or it is another desk's (the same page)."""

    # -- answers ------------------------------------------------------------------------------
    def html(self, request: Any, page: Any, status: int = 200) -> Deferred[bytes]:
        """``page`` rendered, with ``status``."""

    def redirect(self, request: Any, location: str) -> bytes:
        """A 303 to ``location``."""

    def error(self, request: Any, status: int, title: str, message: str, **values: Any) -> bytes:
        """An error page in the request's language: ``title`` and ``message`` are English message
        ids (marked ``N_``), ``values`` fill their placeholders."""

    def speech(self, request: Any) -> Speech:
        """The language this request's pages and flashes speak (see ``i18n``)."""

