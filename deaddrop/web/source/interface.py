"""What a feature file of the source interface may use of it: ``SourceSite``.

Each feature module (``public``, ``language``, ``codename``, ``replies``, ``submit``, and the
helpers they share) takes the interface as ``self: SourceSite``; ``SourceInterface`` (app.py)
is the one class that provides it, and a type checker holds the two together.
"""
from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred

from deaddrop.newsroom.newsroom import Newsroom, SourceIdentity
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.newsroom.source_texts import SourceTexts
from deaddrop.web._common.form_tokens import FormTokens
from deaddrop.web._common.guards import Guarded
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web.sessions import Session, SessionStore
from deaddrop.web.source._in_flight import InFlight
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._received_forms import ReceivedForms
from deaddrop.web.source._submission_forms import SubmissionForm, SubmissionForms
from deaddrop.web.source.defence import FloodDefence
from deaddrop.web.source.i18n import Counted
from deaddrop.web.source.pages import PageContext


class SourceSite(Guarded, Protocol):
    """The source interface, as its routes and their helpers see it (and as its guards do:
    ``Guarded``)."""

    # -- its parts ----------------------------------------------------------------------------
    newsroom: Newsroom
    sessions: SessionStore
    settings: InstanceSettings
    submission_key_armored: str
    codename_words: int  # how many words a new codename has
    defence: FloodDefence  # wrong codenames and floods, per circuit
    texts: SourceTexts  # the welcome, instructions and logo an admin set
    forms: FormTokens  # sealed tokens of anonymous forms (log in, create) and receipts
    in_flight: InFlight  # uploads still arriving, per source
    received: ReceivedForms  # which of each source's forms were stored, beyond their session
    cookie: SessionCookie

    @property
    def site_name(self) -> str:
        """The organisation's name, as every page shows it."""

    @property
    def session_minutes(self) -> int:
        """How long a source stays logged in, as pages say it."""

    # -- the request's visitor -------------------------------------------------------------
    def session_of(self, request: Any) -> Session | None:
        """The session of the request's cookie, if any."""

    @staticmethod
    def identity_of(session: Session | None) -> SourceIdentity | None:
        """The source logged in to ``session``, if any."""

    def current_login(self, request: Any) -> SourceLogin | None:
        """The request's live login (session, identity, passphrase), else None."""

    def form_binding(self, request: Any) -> str:
        """What this visitor's anonymous form tokens are bound to (the cookie's value, set if missing)."""

    def form_secret(self, request: Any, purpose: str) -> str | None:
        """The secret sealed in the posted form's token ("" if none); None if not ours, or expired."""

    @staticmethod
    def arg(request: Any, name: str) -> str | None:
        """A form or query field, bounded in length."""

    # -- answers ------------------------------------------------------------------------------
    def page_ctx(self, request: Any, session: Session | None = None, *, logged_in: bool = False) -> PageContext:
        """What every page's frame needs (pops the session's flashes)."""

    def form_ctx(self, request: Any, purpose: str, secret: str = "") -> PageContext:
        """An anonymous form page's frame: a sealed form token instead of a session."""

    def html(self, request: Any, page: Any, status: int = 200) -> Deferred[bytes]:
        """``page`` rendered, with ``status``."""

    def redirect(self, request: Any, location: str) -> bytes:
        """A 303 to ``location``."""

    def error(self, request: Any, status: int, title: str, message: str | Counted, kept: str = "",
              **values: Any) -> bytes:
        """A translated error page in the source frame, ``kept`` (a typed message) shown in it."""

    # -- one-time submission forms (see _submission_forms) ------------------------------------
    @staticmethod
    def submission_forms(session: Session) -> SubmissionForms:
        """The session's submission forms."""

    def form_for(self, login: SourceLogin, token: str | None) -> SubmissionForm:
        """The form ``token`` names for this login, known as stored if its source stored it."""

    def to_lookup(self, request: Any, session: Session, form: SubmissionForm | None = None,
                  refused: bool = False) -> bytes:
        """A redirect to the logged-in page, at the address of a form of its own."""
