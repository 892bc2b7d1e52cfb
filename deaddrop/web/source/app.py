"""The source interface: a Klein app served only on the source listener (behind the onion).

``SourceInterface`` holds what every source page shares: the session and its cookie, the page
frame in the source's language (``i18n.negotiate``), the guards' refusals, the one-time
submission forms, and the flood defence (``defence``, built by ``deaddrop.service``). Each
feature adds its routes with ``register``:

* ``public``: the landing and safety pages, the logo, metadata, the key, static files;
* ``language``: the language menu (a form's own buttons keep what was typed);
* ``codename``: /generate, /create, /login, /logout (one Argon2id admission for both);
* ``replies``: /lookup, and deleting replies;
* ``submit``: /submit, whose body arrives through ``uploads``; nothing typed is ever lost to a
  refusal.

What a page says when something went wrong, on any route, and what /submit answers, is one
table (``_answers.ANSWERS``): the form again with the message in it and what went wrong in
numbers, a full queue (``Busy``) as 503 with Retry-After, anything unexpected as a calm 500.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from klein import Klein

from deaddrop.events import SecurityEvents
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.newsroom.source_texts import SourceTexts
from deaddrop.newsroom.newsroom import Newsroom, SourceIdentity
from deaddrop.transport.connections import ConnectionLimits
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.form_tokens import FormTokens
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.pages import render_sync, set_html
from deaddrop.web._common.request_rate import CircuitRequestRate
from deaddrop.web._common.responses import HtmlResponses
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web.sessions import Session, SessionStore
from deaddrop.web._common.site import BodyPolicy, DeadDropSite, describe_failure
from deaddrop.web.source import (
    codename, desk_choice, i18n, language, messages as msgs, pages, public, replies, submit, uploads,
)
from deaddrop.web.source._answers import answer
from deaddrop.web.source._browser import is_tor_browser
from deaddrop.web.source._in_flight import InFlight
from deaddrop.web.source.defence import CUTS_BEFORE_CLOSING, REFUSALS_BEFORE_CLOSING, FloodDefence
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._origin import COOKIE
from deaddrop.web.source._proxies import refuse_proxied
from deaddrop.web.source._received_forms import ReceivedForms
from deaddrop.web.source._submission_forms import OPEN, RECEIVED, SubmissionForm, SubmissionForms
from deaddrop.web.source.i18n import Counted
from deaddrop.web.source.interface import SourceSite
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS, CustomTexts, PageContext, within_limit

# English texts, kept importable for tests that read pages in English.
NOT_RECOGNIZED = msgs.NOT_RECOGNIZED
THROTTLED = msgs.THROTTLED
# How long an anonymous form (log in, create) stays good, e.g. while a codename is written down.
FORM_LIFETIME = 3600.0
# The codename can be pasted with stray spaces; anything longer cannot be one.
_MAX_CODENAME_CHARS = 1024
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")  # what SessionStore hands out (32 random bytes)

__all__ = ["SourceInterface", "SourceLogin", "shield", "MAX_MESSAGE_CHARS", "REFUSALS_BEFORE_CLOSING",
           "CUTS_BEFORE_CLOSING"]


@dataclass
class SourceInterface(HtmlResponses):
    newsroom: Newsroom
    sessions: SessionStore
    settings: InstanceSettings
    events: SecurityEvents
    submission_key_armored: str
    codename_words: int
    # Wrong codenames per circuit, and what answers a circuit that floods (built by the composition).
    defence: FloodDefence
    demo: bool = False
    texts: SourceTexts = field(default_factory=SourceTexts)
    # Anonymous forms (log in, create) carry their state in a sealed token, not a session.
    forms: FormTokens = field(default_factory=lambda: FormTokens(FORM_LIFETIME))
    # Requests per Tor circuit, shared by every listener of this site.
    request_rate: CircuitRequestRate = field(default_factory=CircuitRequestRate)
    # Uploads still arriving, per source id: a source the newsroom deletes has them ended.
    in_flight: InFlight = field(default_factory=InFlight)

    cookie: SessionCookie = field(init=False)
    # Which of each source's forms were stored, beyond the session that sent them.
    received: ReceivedForms = field(init=False)

    app = Klein()

    def __post_init__(self) -> None:
        self.cookie = SessionCookie(self.sessions, COOKIE)
        self.received = ReceivedForms(self.sessions.absolute_timeout)

    # -- plumbing --------------------------------------------------------------------------

    def session_of(self, request: Any) -> Session | None:
        return self.cookie.lookup(request)

    def form_binding(self, request: Any) -> str:
        """What this visitor's anonymous form tokens are bound to (the source cookie's value,
        set if missing). A closed conversation's session ends here: the visitor starts afresh."""
        session = self.session_of(request)
        if session is not None and session.data.get("closed"):
            self.sessions.destroy(session)
            return self.cookie.binding(request, renew=True)
        return self.cookie.binding(request)

    def form_ctx(self, request: Any, purpose: str, secret: str = "") -> PageContext:
        """An anonymous form page's frame: a sealed form token instead of a session."""
        token = self.forms.issue(purpose, self.form_binding(request), secret)
        return dataclasses.replace(self.page_ctx(request), csrf_token=token)

    def form_secret(self, request: Any, purpose: str) -> str | None:
        """The secret sealed in the posted form's token ("" if none); None if the token is not
        one we issued for ``purpose`` to this browser, or has expired."""
        return self.forms.open(self.arg(request, "csrf_token"), purpose, self.cookie.token(request))

    @staticmethod
    def identity_of(session: Session | None) -> SourceIdentity | None:
        return session.data.get("source") if session else None

    @staticmethod
    def arg(request: Any, name: str) -> str | None:
        return form_arg(request, name, _MAX_CODENAME_CHARS)

    def current_login(self, request: Any) -> SourceLogin | None:
        session = self.session_of(request)
        identity = self.identity_of(session)
        if session is None or identity is None:
            return None
        passphrase = SessionStore.unseal(session, self.cookie.token(request), "passphrase")
        if passphrase is None:
            return None
        return SourceLogin(session, identity, passphrase)

    def source_deleted(self, source_id: int) -> None:
        """The newsroom deleted a source (the composition hands it this): its sessions forget
        everything but that, so the next page can say so calmly instead of "session expired"."""
        for session in self.sessions.owned_by(source_id):
            session.sealed.clear()
            session.data.clear()
            session.data["closed"] = True
            self.sessions.bind(session, None)
        self.in_flight.close(source_id)
        self.received.forget(source_id)

    def refuse_anonymous(self, request: Any, post: bool) -> Any:
        session = self.session_of(request)
        if session is not None and session.data.get("closed"):
            # Said once, calmly, and logged out: the next visit starts afresh (as SecureDrop does).
            self.cookie.end(request, session)
            return self.error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED)
        # A cookie that no longer opens a session: logged out for inactivity (or a restart).
        expired = bool(_TOKEN_SHAPE.fullmatch(self.cookie.token(request) or ""))
        return self.redirect(request, "/login?expired=1" if expired else "/login")

    def refuse_stale_form(self, request: Any) -> bytes:
        return self.error(request, 403, msgs.T_TRY_AGAIN, msgs.STALE_DELETE)

    def refuse_non_admin(self, request: Any) -> bytes:  # no admins on the source side
        return self.refuse_anonymous(request, False)

    @property
    def session_minutes(self) -> int:
        """How long a source stays logged in (--source-session-minutes; tests may shorten it)."""
        return max(1, round(min(self.sessions.idle_timeout, self.sessions.absolute_timeout) / 60))

    def page_ctx(self, request: Any, session: Session | None = None, *, logged_in: bool = False) -> PageContext:
        """What every page's frame needs; pops the session's flashes (they are shown once)."""
        lang = i18n.negotiate(request)
        path = (request.path or b"/").split(b"?", 1)[0].decode("utf-8", "replace")  # None mid-body
        desks, more_desks = self._desks_of(session, lang.code) if logged_in else ((), False)
        return PageContext(
            lang=lang, site_name=self.site_name, path=path,
            csrf_token=session.csrf_token if session else None,
            flashes=session.pop_flashes() if session else (),
            logged_in=logged_in, demo=self.demo,
            tor_browser=is_tor_browser(request.getHeader(b"user-agent")),
            session_minutes=self.session_minutes,
            max_upload_size=self.settings.max_upload_size, allow_uploads=self.settings.allow_uploads,
            custom=CustomTexts(self.texts.text("welcome", lang.code), self.texts.text("instructions", lang.code),
                               self.texts.logo_url(lang.code)),
            desks=desks, more_desks=more_desks,
        )

    def _desks_of(self, session: Session | None, language: str) -> tuple[tuple[str, ...], bool]:
        """With several desks: the names of the logged-in source's, and whether it may add one."""
        identity = self.identity_of(session)
        desks = self.newsroom.desks
        if identity is None or not desks.several:
            return (), False
        more = any(d.id not in identity.desks for d in desks.offered())
        return tuple(desks.names_for(identity.desks, language)), more

    def error(self, request: Any, status: int, title: str, message: str | Counted, kept: str = "",
              **values: Any) -> bytes:
        """A translated error page in the source frame (language menu, Log out, safety link)."""
        login = self.current_login(request)
        ctx = self.page_ctx(request, login.session if login else None, logged_in=login is not None)
        set_html(request, status)
        return render_sync(pages.error(ctx, ctx._(title), ctx._(message, **values), kept=within_limit(kept)))

    # -- one-time submission forms (see _submission_forms) ------------------------------------

    @staticmethod
    def submission_forms(session: Session) -> SubmissionForms:
        return session.data.setdefault("forms", SubmissionForms())

    def form_for(self, login: SourceLogin, token: str | None) -> SubmissionForm:
        """The form ``token`` names in this login's session (``SubmissionForms.adopt``), known as
        stored if this source stored it in any session (``ReceivedForms``): a form sent again
        from a browser's history after its session ended is never stored twice."""
        form = self.submission_forms(login.session).adopt(token)
        if form.state == OPEN:
            receipt = self.received.receipt(login.identity.source_id, form.token)
            if receipt is not None:
                SubmissionForms.received(form, dataclasses.replace(receipt, first=False))
        return form

    def to_lookup(self, request: Any, session: Session, form: SubmissionForm | None = None,
                   refused: bool = False) -> bytes:
        """Redirect to the logged-in page, at the address of a form of its own. A refused form's
        address ends in ``#send`` (its error, by the form), so a client can tell it from a stored one."""
        form = form or self.submission_forms(session).issue()
        if form.state == RECEIVED:
            # Not the form page's own address: a browser could take a redirect to the page it
            # is on as a reload and replace it, and Back would then skip what was sent.
            # And Back must not bring the form back from the back/forward cache, the sent
            # message still in it: that cache lets go of a site's pages when it sets a cookie.
            self.cookie.touch(request)
            return self.redirect(request, f"/lookup?form={form.token}&received=1")
        return self.redirect(request, f"/lookup?form={form.token}" + ("#send" if refused else ""))

    @app.handle_errors(Exception)
    def _errors(self, request: Any, failure: Any) -> bytes:
        # e.g. a full reply decryption queue at /lookup (503), SQLite unable to grow its WAL at
        # /create (507), an unknown address (404): the one table says what each is.
        return answer(self, request, failure)

    def _early_page(self, status: int, title: str, message: str, headers: Any = None) -> bytes:
        """A refusal answered before a route runs (too many requests, too large, headers too
        large, tor2web...): the source frame, in the language the headers ask for."""
        ctx = PageContext(lang=i18n.from_headers(headers), site_name=self.site_name, session_minutes=self.session_minutes,
                          max_upload_size=self.settings.max_upload_size, allow_uploads=self.settings.allow_uploads)
        return render_sync(pages.error(ctx, ctx._(title), ctx._(message)))

    def _report_failure(self, failure: Any) -> None:
        """A source request failed: described (code positions only) in the day's report, not now."""
        self.newsroom.activity.failed(describe_failure(failure))

    def site(self, reactor: Any = None, connection_limits: ConnectionLimits | None = None) -> DeadDropSite:
        return DeadDropSite(
            self.app.resource(),
            # A message carried through the login form: 100,000 characters of up to 4 bytes,
            # percent-encoded (3 bytes each), plus the other fields.
            body_policy=BodyPolicy(max_form_bytes=MAX_MESSAGE_CHARS * 12 + (64 << 10)),
            multipart_limit=functools.partial(uploads.multipart_limit, self.settings),
            render_error_page=self._early_page,
            start_upload=functools.partial(uploads.start_upload, self),
            too_large_message="That upload is larger than this instance accepts. Nothing was stored.",
            upload_targets=frozenset({b"/submit"}),
            refuse_request=refuse_proxied,
            connection_limits=connection_limits,
            reactor=reactor,
            refuse_large_uploads_early=False,
            request_rate=self.request_rate,
            # A circuit that keeps asking faster than that is flooding: closed like one that
            # keeps being throttled.
            on_rate_limited=self.defence.rate_limited,
            report_failure=self._report_failure,
            on_cut=self.defence.cut,
        )


for _feature in (public, language, codename, replies, submit, desk_choice):
    _feature.register(SourceInterface)


if TYPE_CHECKING:
    def _provides_what_its_features_use(interface: SourceInterface) -> SourceSite:
        return interface
