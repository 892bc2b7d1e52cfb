"""The journalist interface: a Klein app served only on the journalist (mutual TLS) listener.

HTML pages for people, and the JSON API mounted at ``/api/v1`` (see ``api.py``). Sessions
are server-side (``dd_journalist`` cookie, idle and absolute timeouts), every form carries a
CSRF token, and every request re-reads the account: a deleted account, or one whose
passphrase or two-factor secret changed since the session began, is logged out at once.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from klein import Klein
from twisted.internet.defer import inlineCallbacks

from deaddrop.events import SecurityEvents
from deaddrop.journalist_desk import (
    Desk, KeyNotReady, MAX_REPLY_CHARS, NotFound, SourceFilter, SourceView, valid_uuid,
)
from deaddrop.journalists import Accounts, AccountError, Journalist, LoginFailed
from deaddrop.retention import MAX_DAYS as MAX_RETENTION_DAYS
from deaddrop.settings import InstanceSettings
from deaddrop.source_texts import SourceTexts
from deaddrop.transport.connections import ConnectionLimits
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg, form_args
from deaddrop.web._common.guards import Refused, admin_required, login_required
from deaddrop.web._common.responses import HtmlResponses
from deaddrop.web._common.pages import error_page_bytes, http_error_page_text
from deaddrop.web._common.session_cookie import SessionCookie
from deaddrop.web.sessions import Session, SessionStore
from deaddrop.web._common.site import BodyPolicy, DeadDropSite, log_failure_safely
from deaddrop.web._common.static import serve_static
from deaddrop.web.journalist import pages, source_texts
from deaddrop.web.journalist.pages import megabytes, parse_megabytes
from deaddrop.web.journalist._files import FileResponse
from deaddrop.web.journalist.cert_binding import issued_for, refuse_mismatch

COOKIE = "dd_journalist"
MAX_ZIP_TICKETS = 8  # zip downloads a session remembers (see _zip_then_page)
MiB = 1024 * 1024
MIN_UPLOAD_BYTES = 1024  # as --max-upload-size
MAX_UPLOAD_BYTES = 100 * 10**9


def login_error(failure: LoginFailed) -> str:
    """The message for a failed login. A reused code is only ever reported after the
    passphrase was right (``Accounts.authenticate`` checks it first), so naming it helps the
    journalist and tells nothing to someone without the passphrase."""
    return pages.REUSED_CODE_ERROR if failure.reason == "totp_reused" else pages.GENERIC_LOGIN_ERROR


@dataclass(frozen=True)
class JournalistLogin:
    """A live journalist login, as the route guards hand it to a route."""

    session: Session
    journalist: Journalist

    @property
    def is_admin(self) -> bool:
        return self.journalist.is_admin


@dataclass
class JournalistInterface(HtmlResponses):
    accounts: Accounts
    desk: Desk
    sessions: SessionStore
    settings: InstanceSettings
    events: SecurityEvents
    api: Any = None  # JournalistAPI, mounted at /api/v1
    source_texts: SourceTexts = field(default_factory=SourceTexts)  # admin pages: source_texts.py
    # The exact `deaddrop-admin cert issue` line for a new user, with {name} (see wiring).
    cert_issue_command: str = "deaddrop-admin cert issue {name} --out {name}.p12"
    # -> Deferred[username -> CertificateStatus], for the users page (see wiring); None: unknown.
    certificate_status: Any = None

    cookie: SessionCookie = field(init=False)

    app = Klein()

    def __post_init__(self) -> None:
        self.cookie = SessionCookie(self.sessions, COOKIE, secure=True)

    # -- plumbing --------------------------------------------------------------------------

    def _anonymous_session(self, request: Any) -> Session:
        return self.cookie.lookup(request) or self.cookie.start(request)[1]

    @inlineCallbacks
    def _current_login(self, request: Any):
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
        return JournalistLogin(session, journalist)

    def _refuse_anonymous(self, request: Any, post: bool) -> bytes:
        if post:
            return self._error(request, 403, "Please log in again", "Your session ended. Nothing was changed.")
        return self._redirect(request, "/login")

    def _refuse_stale_form(self, request: Any) -> bytes:
        return self._error(request, 403, "Please try again", "The form was stale or came from elsewhere. Nothing was changed.")

    def _refuse_non_admin(self, request: Any) -> bytes:
        return self._error(request, 403, "Administrators only", "This page is for administrators.")

    @inlineCallbacks
    def _source(self, request: Any, uuid: str):
        source = yield self.desk.source(uuid)
        if source is None:
            raise Refused(self._error(request, 404, "Not found", "There is no such source (it may have been deleted)."))
        return source

    # -- log in and out --------------------------------------------------------------------

    @app.route("/", methods=["GET"])
    @inlineCallbacks
    def index(self, request: Any):
        login = yield self._current_login(request)
        return self._redirect(request, "/sources" if login else "/login")

    @app.route("/login", methods=["GET"])
    @inlineCallbacks
    def login_form(self, request: Any):
        login = yield self._current_login(request)
        if login is not None:
            return self._redirect(request, "/sources")
        lengths = (round(self.sessions.absolute_timeout / 60), round(self.sessions.idle_timeout / 60))
        return (yield self._html(request, pages.login(self._name, self._anonymous_session(request), None,
                                                      session_minutes=lengths)))

    @app.route("/login", methods=["POST"])
    @inlineCallbacks
    def login(self, request: Any):
        session = self.cookie.lookup(request)
        if session is None or not session.check_csrf(form_arg(request, "csrf_token")):
            session = self._anonymous_session(request)
            page = pages.login(self._name, session, "Your session expired. Please log in again.")
            return (yield self._html(request, page, 403))
        username = (form_arg(request, "username", 64) or "").strip()
        if refuse_mismatch(request, username, self.events):
            page = pages.login(self._name, session, pages.CERTIFICATE_MISMATCH_ERROR, username[:64])
            return (yield self._html(request, page, 403))
        try:
            journalist = yield shield(self.accounts.authenticate(
                username, form_arg(request, "passphrase", 1024), form_arg(request, "one_time_code", 16)))
        except LoginFailed as failure:
            status, message = (429, pages.THROTTLED_LOGIN_ERROR) if failure.throttled else (403, login_error(failure))
            return (yield self._html(request, pages.login(self._name, session, message, username[:64]), status))
        _, fresh = self.cookie.start(request, replacing=session)
        self._bind(fresh, journalist)
        return self._redirect(request, "/sources")

    def _bind(self, session: Session, journalist: Journalist) -> None:
        session.data["journalist_id"] = journalist.id
        session.data["auth_epoch"] = journalist.auth_epoch
        self.sessions.bind(session, journalist.id)

    @app.route("/logout", methods=["POST"])
    def logout(self, request: Any) -> Any:
        session = self.cookie.lookup(request)
        if session is not None and session.check_csrf(form_arg(request, "csrf_token")):
            self.cookie.end(request, session)
        return self._redirect(request, "/login")

    # -- sources ---------------------------------------------------------------------------

    @app.route("/sources", methods=["GET"])
    @login_required
    @inlineCallbacks
    def sources(self, request: Any, login: JournalistLogin):
        only, page = _list_state(request)
        sources, total = yield self.desk.sources(page, pages.SOURCES_PER_PAGE, only)
        last = max(1, -(-total // pages.SOURCES_PER_PAGE))
        if page > last:  # a stale link after deletions: show the last page there is
            page = last
            sources, total = yield self.desk.sources(page, pages.SOURCES_PER_PAGE, only)
        paging = pages.Paging(page, last, total)
        return (yield self._html(request, pages.source_list(self._name, login.session, login.journalist, sources,
                                                            paging, only, form_arg(request, "select") == "all")))

    @app.route("/sources/selected", methods=["POST"])
    @login_required
    @inlineCallbacks
    def sources_selected(self, request: Any, login: JournalistLogin):
        """The source list's actions on the ticked sources; back to the same filtered page."""
        only, page = _list_state(request)
        back = pages.list_url(only, page)
        action = form_arg(request, "action")
        if action not in ("star", "unstar", "read", "unread", "delete", "delete-confirmed"):
            return self._error(request, 400, "Nothing done", "Choose an action for the selected sources.")
        chosen = yield self.desk.sources_among(form_args(request, "source"))
        session, journalist = login.session, login.journalist
        if not chosen:
            session.flash("Select at least one source first.", "warning")
            return self._redirect(request, back)
        n = _count_text(len(chosen), "source")
        if action in ("star", "unstar"):
            for source in chosen:
                yield self.desk.set_starred(source, action == "star")
            session.flash(f"{'Starred' if action == 'star' else 'Unstarred'} {n}.", "ok")
        elif action in ("read", "unread"):
            yield self.desk.mark_sources(chosen, journalist.id, read=action == "read")
            session.flash(f"Marked every submission of {n} {action}.", "ok")
        elif action == "delete":
            # Nothing goes before the journalist has seen the list (as for one source).
            page_ = pages.confirm_delete_sources(self._name, session, journalist, chosen, only, page)
            return (yield self._html(request, page_))
        else:
            for source in chosen:
                yield shield(self.desk.delete_source(source))
                self.events.emit("journalist.source.deleted", username=journalist.username)
            session.flash(f"Deleted {n} and everything they sent.", "ok")
        return self._redirect(request, back)

    @app.route("/sources/<uuid>", methods=["GET"])
    @login_required
    @inlineCallbacks
    def source(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        downloading = None
        fetch, zip_ticket = form_arg(request, "fetch", 64), form_arg(request, "zip", 64)
        if fetch is not None:
            item = yield self.desk.submission(source, fetch)
            if item is not None:
                downloading = (item.filename, f"/sources/{uuid}/submissions/{item.uuid}/download")
        elif zip_ticket is not None and zip_ticket in login.session.data.get("zips", {}):
            count = len(login.session.data["zips"][zip_ticket][1])
            downloading = (f"a zip of {_count_text(count, 'file')}", f"/sources/{uuid}/zip/{zip_ticket}")
        return (yield self._source_page(request, login, source, select_all=form_arg(request, "select") == "all",
                                        downloading=downloading))

    @inlineCallbacks
    def _source_page(self, request: Any, login: JournalistLogin, source: SourceView, *,
                     status: int = 200, reply_text: str = "", error: str | None = None, select_all: bool = False,
                     downloading: tuple[str, str] | None = None):
        submissions = yield self.desk.submissions(source)
        replies = yield self.desk.replies(source)
        page = pages.source_page(self._name, login.session, login.journalist, source, submissions, replies,
                                 reply_text=reply_text, error=error, select_all=select_all, downloading=downloading)
        return (yield self._html(request, page, status))

    @app.route("/sources/<uuid>/submissions/<item>/fetch", methods=["GET"])
    @login_required
    @inlineCallbacks
    def fetch_submission(self, request: Any, login: JournalistLogin, uuid: str, item: str):
        """A file link on the source page: mark it read, then show the page again (with the new
        counts), which sends the browser on to the download itself."""
        source = yield self._source(request, uuid)
        submission = yield self.desk.submission(source, item)
        if submission is None:
            return self._error(request, 404, "Not found", "There is no such submission (it may have been deleted).")
        yield self.desk.mark_submissions(source, [submission.uuid], login.journalist.id, read=True)
        return self._redirect(request, f"/sources/{uuid}?fetch={submission.uuid}")

    @app.route("/sources/<uuid>/submissions/<item>/download", methods=["GET"])
    @login_required
    @inlineCallbacks
    def download_submission(self, request: Any, login: JournalistLogin, uuid: str, item: str):
        source = yield self._source(request, uuid)
        submission = yield self.desk.submission(source, item)
        if submission is None:
            return self._error(request, 404, "Not found", "There is no such submission (it may have been deleted).")
        try:
            download = yield self.desk.open_submission(source, submission, login.journalist.id)
        except NotFound:  # its file is gone, or is not a regular file inside the store
            return self._error(request, 404, "Not found", "There is no such submission (it may have been deleted).")
        return FileResponse(download, etag=True)

    @app.route("/sources/<uuid>/replies/<item>/download", methods=["GET"])
    @login_required
    @inlineCallbacks
    def download_reply(self, request: Any, login: JournalistLogin, uuid: str, item: str):
        source = yield self._source(request, uuid)
        reply = yield self.desk.reply(source, item)
        if reply is None or reply.deleted_by_source:
            return self._error(request, 404, "Not found", "There is no such reply.")
        try:
            download = yield self.desk.open_reply(source, reply, login.journalist.id)
        except NotFound:
            return self._error(request, 404, "Not found", "There is no such reply.")
        return FileResponse(download, etag=True)

    @app.route("/sources/<uuid>/download-unread", methods=["POST"])
    @login_required
    @inlineCallbacks
    def download_unread(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        unread = [i.uuid for i in (yield self.desk.submissions(source)) if not i.is_read]
        return (yield self._zip_then_page(request, login, source, unread, "There are no unread submissions."))

    @app.route("/sources/<uuid>/selected", methods=["POST"])
    @login_required
    @inlineCallbacks
    def selected(self, request: Any, login: JournalistLogin, uuid: str):
        action = form_arg(request, "action")
        chosen = [u for u in form_args(request, "submission") if valid_uuid(u)]
        source = yield self._source(request, uuid)
        if action == "download":
            return (yield self._zip_then_page(request, login, source, chosen,
                                              "Nothing to download: select submissions first."))
        if action not in ("delete", "delete-confirmed", "read", "unread"):
            return self._error(request, 400, "Nothing done", "Choose download, mark read or unread, or delete.")
        if not chosen:
            login.session.flash("Select at least one submission first.", "warning")
            return self._redirect(request, f"/sources/{uuid}")
        if action in ("read", "unread"):
            count = yield self.desk.mark_submissions(source, chosen, login.journalist.id, read=action == "read")
            login.session.flash(f"Marked {_count_text(count, 'submission')} {action}.", "ok")
            return self._redirect(request, f"/sources/{uuid}")
        if action == "delete":
            # Nothing goes before the journalist has seen the list (as for deleting a source).
            listed = [s for s in (yield self.desk.submissions(source)) if s.uuid in set(chosen)]
            page = pages.confirm_delete_selected(self._name, login.session, login.journalist, source, listed)
            return (yield self._html(request, page))
        count = yield shield(self.desk.delete_submissions(source, chosen))
        login.session.flash(f"Deleted {count} submission{'s' if count != 1 else ''}.", "ok")
        return self._redirect(request, f"/sources/{uuid}")

    @inlineCallbacks
    def _zip_then_page(self, request: Any, login: JournalistLogin, source: SourceView, chosen: list[str],
                       nothing: str):
        """Mark the chosen submissions read and show the source page again, which sends the
        browser on to ``/sources/<uuid>/zip/<ticket>`` for the zip: the page's counts are new."""
        wanted = set(chosen)
        present = [i.uuid for i in (yield self.desk.submissions(source)) if i.uuid in wanted]
        if not present:
            login.session.flash(nothing, category="warning")
            return self._redirect(request, f"/sources/{source.uuid}")
        yield self.desk.mark_submissions(source, present, login.journalist.id, read=True)
        zips = login.session.data.setdefault("zips", {})
        while len(zips) >= MAX_ZIP_TICKETS:  # the oldest goes: a session holds a few, never many
            del zips[next(iter(zips))]
        ticket = secrets.token_urlsafe(12)
        zips[ticket] = (source.uuid, present)
        return self._redirect(request, f"/sources/{source.uuid}?zip={ticket}")

    @app.route("/sources/<uuid>/zip/<ticket>", methods=["GET"])
    @login_required
    @inlineCallbacks
    def download_zip(self, request: Any, login: JournalistLogin, uuid: str, ticket: str):
        """The zip a download button asked for (its ticket lives in this session only)."""
        source = yield self._source(request, uuid)
        owner, chosen = login.session.data.get("zips", {}).get(ticket, (None, []))
        if owner != source.uuid:
            return self._error(request, 404, "Not found", "This download has expired. Ask for it again.")
        try:
            download = yield self.desk.zip_submissions(source, chosen, login.journalist.id)
        except NotFound:
            return self._error(request, 404, "Not found", "A selected submission's file is missing.")
        if download is None:
            return self._error(request, 404, "Not found", "These submissions were deleted in the meantime.")
        return FileResponse(download)

    @app.route("/sources/<uuid>/unread", methods=["POST"])
    @login_required
    @inlineCallbacks
    def mark_source_unread(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        count = yield self.desk.mark_sources([source], login.journalist.id, read=False)
        login.session.flash(f"Marked {_count_text(count, 'submission')} unread.", "ok")
        return self._redirect(request, f"/sources/{uuid}")

    @app.route("/sources/<uuid>/star", methods=["POST"])
    @login_required
    @inlineCallbacks
    def star(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        yield self.desk.set_starred(source, form_arg(request, "starred") == "1")
        return self._redirect(request, f"/sources/{uuid}")

    @app.route("/sources/<uuid>/reply", methods=["POST"])
    @login_required
    @inlineCallbacks
    def reply(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        text = form_arg(request, "reply", 1 << 20) or ""
        if not text.strip():
            return (yield self._source_page(request, login, source, status=400, error="Write a reply first."))
        if len(text) > MAX_REPLY_CHARS:
            return (yield self._source_page(request, login, source, status=413, reply_text=text[:MAX_REPLY_CHARS],
                                            error=f"Replies are limited to {MAX_REPLY_CHARS:,} characters."))
        try:
            yield shield(self.desk.reply_plaintext(source, text, login.journalist.id))
        except KeyNotReady:
            return (yield self._source_page(
                request, login, source, status=409, reply_text=text,
                error="This source's encryption key is not ready yet, so the reply was NOT sent. It is made the "
                      "next time the source logs in. Your text is still below: try again later."))
        login.session.flash("Reply sent. It is stored encrypted; the source will see it the next time they log in.", "ok")
        return self._redirect(request, f"/sources/{uuid}")

    @app.route("/sources/<uuid>/delete", methods=["GET"])
    @login_required
    @inlineCallbacks
    def delete_source_confirm(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        return (yield self._html(request, pages.confirm_delete_source(self._name, login.session, login.journalist, source)))

    @app.route("/sources/<uuid>/delete", methods=["POST"])
    @login_required
    @inlineCallbacks
    def delete_source(self, request: Any, login: JournalistLogin, uuid: str):
        source = yield self._source(request, uuid)
        yield shield(self.desk.delete_source(source))
        self.events.emit("journalist.source.deleted", username=login.journalist.username)
        login.session.flash(f"{source.designation} and everything they sent were deleted.", "ok")
        return self._redirect(request, "/sources")

    # -- own account -----------------------------------------------------------------------

    @app.route("/account", methods=["GET"])
    @login_required
    def account(self, request: Any, login: JournalistLogin):
        return self._html(request, pages.account(self._name, login.session, login.journalist))

    @app.route("/account/new-passphrase", methods=["POST"])
    @login_required
    @inlineCallbacks
    def new_passphrase(self, request: Any, login: JournalistLogin):
        session, journalist = login.session, login.journalist
        try:
            yield shield(self.accounts.verify_again(journalist, form_arg(request, "passphrase", 1024),
                                                    form_arg(request, "one_time_code", 16)))
        except LoginFailed as failure:
            message = pages.THROTTLED_LOGIN_ERROR if failure.throttled else \
                "That passphrase or one-time code was wrong. Nothing was changed."
            return (yield self._html(request, pages.account(self._name, session, journalist, error=message), 403))
        creds = yield shield(self.accounts.reset_passphrase(journalist.id))
        self._end_other_sessions(session, creds.journalist)
        self.events.emit("journalist.password.changed", username=journalist.username)
        page = pages.account(self._name, session, creds.journalist, new_passphrase=creds.passphrase)
        return (yield self._html(request, page))

    def _end_other_sessions(self, keep: Session | None, journalist: Journalist) -> None:
        self.sessions.destroy_owner(journalist.id, keep=keep)
        if keep is not None:
            self._bind(keep, journalist)

    # -- admin -----------------------------------------------------------------------------

    @app.route("/admin/users", methods=["GET"])
    @admin_required
    def users(self, request: Any, login: JournalistLogin):
        return self._users_page(request, login)

    @inlineCallbacks
    def _users_page(self, request: Any, login: JournalistLogin, status: int = 200, error: str | None = None):
        accounts = yield self.accounts.list()
        certificates = (yield self.certificate_status()) if self.certificate_status is not None else None
        page = pages.users(self._name, login.session, login.journalist, accounts, error, certificates)
        return (yield self._html(request, page, status))

    @app.route("/admin/users/<uuid>/<any(delete, 'reset-password', 'reset-2fa'):action>", methods=["GET"])
    @admin_required
    @inlineCallbacks
    def confirm_account_action(self, request: Any, login: JournalistLogin, uuid: str, action: str):
        """What the users page's buttons lead to: the action explained, and one button to do it."""
        target = yield self._target(request, uuid)
        if action == "delete" and target.id == login.journalist.id:
            return (yield self._users_page(request, login, 400, "You cannot delete your own account."))
        return (yield self._html(request, pages.confirm_account_action(self._name, login.session, login.journalist,
                                                                       target, action)))

    def _confirmed(self, request: Any, login: JournalistLogin, target: Journalist, action: str) -> Any:
        """None when the form says it was confirmed; else the confirmation page (nothing done)."""
        if form_arg(request, "confirm") == "yes":
            return None
        return self._html(request, pages.confirm_account_action(self._name, login.session, login.journalist,
                                                                target, action))

    @app.route("/admin/users", methods=["POST"])
    @admin_required
    @inlineCallbacks
    def add_user(self, request: Any, login: JournalistLogin):
        username = (form_arg(request, "username", 64) or "").strip()
        try:
            creds = yield shield(self.accounts.create(username, is_admin=form_arg(request, "is_admin") == "1"))
        except AccountError as e:
            return (yield self._users_page(request, login, 400, str(e)))
        self.events.emit("admin.journalist.added", username=login.journalist.username, target=creds.journalist.username)
        page = pages.credentials(self._name, login.session, login.journalist, creds.journalist.username,
                                 passphrase=creds.passphrase, totp_secret=creds.totp_secret, totp_uri=creds.totp_uri,
                                 heading=f"Added {creds.journalist.username}",
                                 cert_command=self.cert_issue_command.format(name=creds.journalist.username))
        return (yield self._html(request, page))

    @inlineCallbacks
    def _target(self, request: Any, uuid: str):
        target = yield self.accounts.by_uuid(uuid) if valid_uuid(uuid) else None
        if target is None:
            raise Refused(self._error(request, 404, "Not found", "There is no such user."))
        return target

    @app.route("/admin/users/<uuid>/reset-password", methods=["POST"])
    @admin_required
    @inlineCallbacks
    def reset_password(self, request: Any, login: JournalistLogin, uuid: str):
        session, admin = login.session, login.journalist
        target = yield self._target(request, uuid)
        unconfirmed = self._confirmed(request, login, target, "reset-password")
        if unconfirmed is not None:
            return (yield unconfirmed)
        creds = yield shield(self.accounts.reset_passphrase(target.id))
        self._end_other_sessions(session if target.id == admin.id else None, creds.journalist)
        self.events.emit("admin.journalist.password_reset", username=admin.username, target=target.username)
        page = pages.credentials(self._name, session, admin, target.username, passphrase=creds.passphrase,
                                 totp_secret=None, totp_uri=None, heading=f"New passphrase for {target.username}")
        return (yield self._html(request, page))

    @app.route("/admin/users/<uuid>/reset-2fa", methods=["POST"])
    @admin_required
    @inlineCallbacks
    def reset_2fa(self, request: Any, login: JournalistLogin, uuid: str):
        session, admin = login.session, login.journalist
        target = yield self._target(request, uuid)
        unconfirmed = self._confirmed(request, login, target, "reset-2fa")
        if unconfirmed is not None:
            return (yield unconfirmed)
        creds = yield shield(self.accounts.reset_totp(target.id))
        self._end_other_sessions(session if target.id == admin.id else None, creds.journalist)
        self.events.emit("admin.journalist.2fa_reset", username=admin.username, target=target.username)
        page = pages.credentials(self._name, session, admin, target.username, passphrase=None,
                                 totp_secret=creds.totp_secret, totp_uri=creds.totp_uri,
                                 heading=f"New two-factor secret for {target.username}")
        return (yield self._html(request, page))

    @app.route("/admin/users/<uuid>/delete", methods=["POST"])
    @admin_required
    @inlineCallbacks
    def delete_user(self, request: Any, login: JournalistLogin, uuid: str):
        session, admin = login.session, login.journalist
        target = yield self._target(request, uuid)
        if target.id == admin.id:
            return (yield self._users_page(request, login, 400, "You cannot delete your own account."))
        unconfirmed = self._confirmed(request, login, target, "delete")
        if unconfirmed is not None:
            return (yield unconfirmed)
        yield shield(self.accounts.delete(target.id))
        self.sessions.destroy_owner(target.id)
        self.events.emit("admin.journalist.deleted", username=admin.username, target=target.username)
        session.flash(f"Deleted {target.username}.", "ok")
        return self._redirect(request, "/admin/users")

    @app.route("/admin/settings", methods=["GET"])
    @admin_required
    def settings_form(self, request: Any, login: JournalistLogin):
        return self._html(request, pages.settings_page(self._name, login.session, login.journalist, self.settings))

    @app.route("/admin/settings", methods=["POST"])
    @admin_required
    @inlineCallbacks
    def save_settings(self, request: Any, login: JournalistLogin):
        """Only what the admin changed is changed: each field is compared with the value its
        form showed (``shown_*``), so an untouched field keeps the setting as it is now, even if
        another admin changed it meanwhile."""
        session, admin = login.session, login.journalist
        current = self.settings

        def changed(field: str, limit: int) -> str | None:
            """The field's new value, or None: left as its form showed it, or not sent at all."""
            raw = form_arg(request, field, limit)
            shown = form_arg(request, f"shown_{field}", limit)
            if raw is None or (shown is not None and raw.strip() == shown.strip()):
                return None
            return raw.strip()

        name = changed("organisation_name", 100)
        size_text = changed("max_upload_mb", 32)
        retention_text = changed("retention_days", 16)
        refuse = form_arg(request, "refuse_uploads") == "1"
        refuse_changed = form_arg(request, "shown_refuse_uploads") != ("1" if refuse else "0")
        size = parse_megabytes(size_text) if size_text is not None else current.max_upload_size
        error = None
        if name is not None and (not name or len(name) > 100 or any(ord(c) < 32 for c in name)):
            error = "The organisation name must be 1 to 100 characters."
        elif size is None or not MIN_UPLOAD_BYTES <= size <= MAX_UPLOAD_BYTES:
            error = (f"The largest upload must be a number of MB (1 MB = 1,000,000 bytes, up to six decimals) "
                     f"between {megabytes(MIN_UPLOAD_BYTES)} and {megabytes(MAX_UPLOAD_BYTES)}.")
        elif retention_text and not (retention_text.isdigit() and 1 <= int(retention_text) <= MAX_RETENTION_DAYS):
            error = f"Retention must be empty (keep everything) or a whole number of days between 1 and {MAX_RETENTION_DAYS}."
        if error:
            page = pages.settings_page(self._name, session, admin, self.settings, error)
            return (yield self._html(request, page, 400))
        updated = InstanceSettings(
            current.organisation_name if name is None else name,
            size,
            current.allow_uploads if not refuse_changed else not refuse,
            current.retention_days if retention_text is None else (int(retention_text) if retention_text else None))
        yield shield(self.accounts.db.run(updated.save))
        # In memory after the database: the source side reads this same object per request.
        self.settings.organisation_name = updated.organisation_name
        self.settings.max_upload_size = updated.max_upload_size
        self.settings.allow_uploads = updated.allow_uploads
        self.settings.retention_days = updated.retention_days
        self.events.emit("admin.settings.changed", username=admin.username)
        session.flash("Settings saved.", "ok")
        return self._redirect(request, "/admin/settings")

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
        return serve_static(request, name)

    @app.handle_errors(Exception)
    def _errors(self, request: Any, failure: Any) -> bytes:
        routing = http_error_page_text(failure)
        if routing is not None:
            return self._error(request, *routing)
        log_failure_safely(failure)
        return self._error(request, 500, "Something went wrong", "The server could not handle that request.")

    def site(self, reactor: Any = None, connection_limits: ConnectionLimits | None = None) -> DeadDropSite:
        return DeadDropSite(
            self.app.resource(),
            body_policy=BodyPolicy(max_form_bytes=2 * MiB),
            render_error_page=lambda status, title, message, headers=None: error_page_bytes(
                self._name, status, title, message),
            # The one multipart upload of this side: an admin's logo for the source pages.
            start_upload=self.start_logo_upload,
            upload_targets=frozenset({source_texts.LOGO_PATH}),
            multipart_limit=lambda: source_texts.LOGO_BODY_LIMIT,
            # A logo over the limit is answered by its upload, with the page to try again.
            refuse_large_uploads_early=False,
            connection_limits=connection_limits,
            reactor=reactor,
        )


source_texts.register(JournalistInterface)


def _list_state(request: Any) -> tuple[SourceFilter, int]:
    """The source list's filters and page, from the query string or a form's hidden fields."""
    designation = " ".join((form_arg(request, "q", 64) or "").split())[:64]
    only = SourceFilter(designation or None, form_arg(request, "starred") == "1", form_arg(request, "unread") == "1")
    return only, _page_number(form_arg(request, "page", 16))


def _count_text(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _page_number(text: str | None) -> int:
    """``?page=N`` from 1; anything else is the first page."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 7:
        return 1
    return max(1, int(text))

