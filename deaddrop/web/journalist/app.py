"""The journalist interface: a Klein app served only on the journalist (mutual TLS) listener.

HTML pages for people, and the JSON API mounted at ``/api/v1`` (see ``api.py``). Sessions
are server-side (``dd_journalist`` cookie, idle and absolute timeouts), every form carries a
CSRF token, and every request re-reads the account: a deleted account, or one whose
passphrase or two-factor secret changed since the session began, is logged out at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from klein import Klein
from twisted.internet.defer import inlineCallbacks

from deaddrop.events import SecurityEvents
from deaddrop.journalist_desk import Desk, KeyNotReady, MAX_REPLY_CHARS, NotFound, SourceView, valid_uuid
from deaddrop.journalists import Accounts, AccountError, Journalist, LoginFailed
from deaddrop.retention import MAX_DAYS as MAX_RETENTION_DAYS
from deaddrop.settings import InstanceSettings
from deaddrop.web._common.responses import HtmlResponses
from deaddrop.web._common.pages import error_page_bytes, http_error_page_text
from deaddrop.web._common.sessions import Session, SessionStore
from deaddrop.web._common.site import BodyPolicy, DeadDropSite, log_failure_safely
from deaddrop.web._common.static import serve_static
from deaddrop.web.journalist import pages
from deaddrop.web.journalist._files import FileResponse
from deaddrop.web.source.app import shield

COOKIE = "dd_journalist"
MiB = 1024 * 1024
MAX_UPLOAD_MIB = 100 * 1024


@dataclass
class JournalistInterface(HtmlResponses):
    accounts: Accounts
    desk: Desk
    sessions: SessionStore
    settings: InstanceSettings
    events: SecurityEvents
    api: Any = None  # JournalistAPI, mounted at /api/v1

    app = Klein()

    # -- plumbing --------------------------------------------------------------------------

    def _token(self, request: Any) -> str | None:
        raw = request.getCookie(COOKIE.encode())
        try:
            return raw.decode("ascii") if raw else None
        except UnicodeDecodeError:
            return None

    def _new_session(self, request: Any, replacing: Session | None = None) -> Session:
        if replacing is not None:
            self.sessions.destroy(replacing)
        token, session = self.sessions.create()
        request.addCookie(COOKIE.encode(), token.encode(), path=b"/", httpOnly=True, secure=True, sameSite="strict")
        return session

    def _anonymous_session(self, request: Any) -> Session:
        return self.sessions.lookup(self._token(request)) or self._new_session(request)

    @inlineCallbacks
    def _current(self, request: Any):
        """-> (session, journalist) for a live login, else None. Re-checks the account every time."""
        session = self.sessions.lookup(self._token(request))
        if session is None or "journalist_id" not in session.data:
            return None
        journalist = yield self.accounts.get(session.data["journalist_id"])
        if journalist is None or journalist.auth_epoch != session.data.get("auth_epoch"):
            self.sessions.destroy(session)
            return None
        return session, journalist

    def _arg(self, request: Any, name: str, limit: int = 4096) -> str | None:
        values = request.args.get(name.encode())
        if not values or len(values) != 1 or len(values[0]) > limit * 4:
            return None
        try:
            return values[0].decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _args(self, request: Any, name: str) -> list[str]:
        found = []
        for value in request.args.get(name.encode(), [])[:1000]:
            try:
                found.append(value.decode("ascii"))
            except UnicodeDecodeError:
                continue
        return found

    def _stale_form(self, request: Any) -> bytes:
        return self._error(request, 403, "Please try again", "The form was stale or came from elsewhere. Nothing was changed.")

    @inlineCallbacks
    def _logged_in(self, request: Any, *, admin: bool = False, post: bool = False):
        """(session, journalist), or the response to send instead (login redirect, 403)."""
        current = yield self._current(request)
        if current is None:
            if post:
                return self._error(request, 403, "Please log in again", "Your session ended. Nothing was changed.")
            return self._redirect(request, "/login")
        session, journalist = current
        if post and not session.check_csrf(self._arg(request, "csrf_token")):
            return self._stale_form(request)
        if admin and not journalist.is_admin:
            return self._error(request, 403, "Administrators only", "This page is for administrators.")
        return current

    @inlineCallbacks
    def _source(self, request: Any, uuid: str):
        source = yield self.desk.source(uuid)
        if source is None:
            return self._error(request, 404, "Not found", "There is no such source (it may have been deleted).")
        return source

    # -- log in and out --------------------------------------------------------------------

    @app.route("/", methods=["GET"])
    @inlineCallbacks
    def index(self, request: Any):
        current = yield self._current(request)
        return self._redirect(request, "/sources" if current else "/login")

    @app.route("/login", methods=["GET"])
    @inlineCallbacks
    def login_form(self, request: Any):
        current = yield self._current(request)
        if current is not None:
            return self._redirect(request, "/sources")
        lengths = (round(self.sessions.absolute_timeout / 60), round(self.sessions.idle_timeout / 60))
        return (yield self._html(request, pages.login(self._name, self._anonymous_session(request), None,
                                                      session_minutes=lengths)))

    @app.route("/login", methods=["POST"])
    @inlineCallbacks
    def login(self, request: Any):
        session = self.sessions.lookup(self._token(request))
        if session is None or not session.check_csrf(self._arg(request, "csrf_token")):
            session = self._anonymous_session(request)
            page = pages.login(self._name, session, "Your session expired. Please log in again.")
            return (yield self._html(request, page, 403))
        username = (self._arg(request, "username", 64) or "").strip()
        try:
            journalist = yield shield(self.accounts.authenticate(
                username, self._arg(request, "passphrase", 1024), self._arg(request, "one_time_code", 16)))
        except LoginFailed as failure:
            status, message = (429, pages.THROTTLED_LOGIN_ERROR) if failure.throttled else (403, pages.GENERIC_LOGIN_ERROR)
            return (yield self._html(request, pages.login(self._name, session, message, username[:64]), status))
        fresh = self._new_session(request, replacing=session)
        self._bind(fresh, journalist)
        return self._redirect(request, "/sources")

    @staticmethod
    def _bind(session: Session, journalist: Journalist) -> None:
        session.data["journalist_id"] = journalist.id
        session.data["auth_epoch"] = journalist.auth_epoch

    @app.route("/logout", methods=["POST"])
    def logout(self, request: Any) -> Any:
        session = self.sessions.lookup(self._token(request))
        if session is not None and session.check_csrf(self._arg(request, "csrf_token")):
            self.sessions.destroy(session)
            request.addCookie(COOKIE.encode(), b"", path=b"/", httpOnly=True, secure=True, sameSite="strict",
                              max_age=b"0")
        return self._redirect(request, "/login")

    # -- sources ---------------------------------------------------------------------------

    @app.route("/sources", methods=["GET"])
    @inlineCallbacks
    def sources(self, request: Any):
        current = yield self._logged_in(request)
        if not isinstance(current, tuple):
            return current
        session, journalist = current
        sources = yield self.desk.sources()
        return (yield self._html(request, pages.source_list(self._name, session, journalist, sources)))

    @app.route("/sources/<uuid>", methods=["GET"])
    @inlineCallbacks
    def source(self, request: Any, uuid: str):
        current = yield self._logged_in(request)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        return (yield self._source_page(request, current, source))

    @inlineCallbacks
    def _source_page(self, request: Any, current: tuple[Session, Journalist], source: SourceView, *,
                     status: int = 200, reply_text: str = "", error: str | None = None):
        session, journalist = current
        submissions = yield self.desk.submissions(source)
        replies = yield self.desk.replies(source)
        page = pages.source_page(self._name, session, journalist, source, submissions, replies,
                                 reply_text=reply_text, error=error)
        return (yield self._html(request, page, status))

    @app.route("/sources/<uuid>/submissions/<item>/download", methods=["GET"])
    @inlineCallbacks
    def download_submission(self, request: Any, uuid: str, item: str):
        current = yield self._logged_in(request)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        submission = yield self.desk.submission(source, item)
        if submission is None:
            return self._error(request, 404, "Not found", "There is no such submission (it may have been deleted).")
        try:
            download = yield self.desk.open_submission(source, submission, current[1].id)
        except NotFound:  # its file is gone, or is not a regular file inside the store
            return self._error(request, 404, "Not found", "There is no such submission (it may have been deleted).")
        return FileResponse(download, etag=True)

    @app.route("/sources/<uuid>/replies/<item>/download", methods=["GET"])
    @inlineCallbacks
    def download_reply(self, request: Any, uuid: str, item: str):
        current = yield self._logged_in(request)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        reply = yield self.desk.reply(source, item)
        if reply is None or reply.deleted_by_source:
            return self._error(request, 404, "Not found", "There is no such reply.")
        try:
            download = yield self.desk.open_reply(source, reply, current[1].id)
        except NotFound:
            return self._error(request, 404, "Not found", "There is no such reply.")
        return FileResponse(download, etag=True)

    @app.route("/sources/<uuid>/download-unread", methods=["POST"])
    @inlineCallbacks
    def download_unread(self, request: Any, uuid: str):
        return (yield self._zip(request, uuid, None))

    @app.route("/sources/<uuid>/selected", methods=["POST"])
    @inlineCallbacks
    def selected(self, request: Any, uuid: str):
        action = self._arg(request, "action")
        chosen = [u for u in self._args(request, "submission") if valid_uuid(u)]
        if action == "download":
            return (yield self._zip(request, uuid, chosen))
        current = yield self._logged_in(request, post=True)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        if action != "delete":
            return self._error(request, 400, "Nothing done", "Choose download or delete.")
        if not chosen:
            current[0].flash("Select at least one submission first.", "warning")
            return self._redirect(request, f"/sources/{uuid}")
        count = yield shield(self.desk.delete_submissions(source, chosen))
        current[0].flash(f"Deleted {count} submission{'s' if count != 1 else ''}.", "ok")
        return self._redirect(request, f"/sources/{uuid}")

    @inlineCallbacks
    def _zip(self, request: Any, uuid: str, chosen: list[str] | None):
        current = yield self._logged_in(request, post=True)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        try:
            download = yield self.desk.zip_submissions(source, chosen, current[1].id)
        except NotFound:
            return self._error(request, 404, "Not found", "A selected submission's file is missing.")
        if download is None:
            current[0].flash("Nothing to download: select submissions first." if chosen is not None
                             else "There are no unread submissions.", "warning")
            return self._redirect(request, f"/sources/{uuid}")
        return FileResponse(download)

    @app.route("/sources/<uuid>/star", methods=["POST"])
    @inlineCallbacks
    def star(self, request: Any, uuid: str):
        current = yield self._logged_in(request, post=True)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        yield self.desk.set_starred(source, self._arg(request, "starred") == "1")
        return self._redirect(request, f"/sources/{uuid}")

    @app.route("/sources/<uuid>/reply", methods=["POST"])
    @inlineCallbacks
    def reply(self, request: Any, uuid: str):
        current = yield self._logged_in(request, post=True)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        text = self._arg(request, "reply", 1 << 20) or ""
        if not text.strip():
            return (yield self._source_page(request, current, source, status=400, error="Write a reply first."))
        if len(text) > MAX_REPLY_CHARS:
            return (yield self._source_page(request, current, source, status=413, reply_text=text[:MAX_REPLY_CHARS],
                                            error=f"Replies are limited to {MAX_REPLY_CHARS:,} characters."))
        try:
            yield shield(self.desk.reply_plaintext(source, text, current[1].id))
        except KeyNotReady:
            return (yield self._source_page(
                request, current, source, status=409, reply_text=text,
                error="This source's encryption key is not ready yet, so the reply was NOT sent. It is made the "
                      "next time the source logs in. Your text is still below: try again later."))
        current[0].flash("Reply sent. It is stored encrypted; the source will see it the next time they log in.", "ok")
        return self._redirect(request, f"/sources/{uuid}")

    @app.route("/sources/<uuid>/delete", methods=["GET"])
    @inlineCallbacks
    def delete_source_confirm(self, request: Any, uuid: str):
        current = yield self._logged_in(request)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        return (yield self._html(request, pages.confirm_delete_source(self._name, current[0], current[1], source)))

    @app.route("/sources/<uuid>/delete", methods=["POST"])
    @inlineCallbacks
    def delete_source(self, request: Any, uuid: str):
        current = yield self._logged_in(request, post=True)
        if not isinstance(current, tuple):
            return current
        source = yield self._source(request, uuid)
        if not isinstance(source, SourceView):
            return source
        yield shield(self.desk.delete_source(source))
        self.events.emit("journalist.source.deleted", username=current[1].username)
        current[0].flash(f"{source.designation} and everything they sent were deleted.", "ok")
        return self._redirect(request, "/sources")

    # -- own account -----------------------------------------------------------------------

    @app.route("/account", methods=["GET"])
    @inlineCallbacks
    def account(self, request: Any):
        current = yield self._logged_in(request)
        if not isinstance(current, tuple):
            return current
        return (yield self._html(request, pages.account(self._name, current[0], current[1])))

    @app.route("/account/new-passphrase", methods=["POST"])
    @inlineCallbacks
    def new_passphrase(self, request: Any):
        current = yield self._logged_in(request, post=True)
        if not isinstance(current, tuple):
            return current
        session, journalist = current
        try:
            yield shield(self.accounts.verify_again(journalist, self._arg(request, "passphrase", 1024),
                                                    self._arg(request, "one_time_code", 16)))
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
        self.sessions.destroy_where(lambda s: s is not keep and s.data.get("journalist_id") == journalist.id)
        if keep is not None:
            self._bind(keep, journalist)

    # -- admin -----------------------------------------------------------------------------

    @app.route("/admin/users", methods=["GET"])
    @inlineCallbacks
    def users(self, request: Any):
        current = yield self._logged_in(request, admin=True)
        if not isinstance(current, tuple):
            return current
        return (yield self._users_page(request, current))

    @inlineCallbacks
    def _users_page(self, request: Any, current: tuple[Session, Journalist], status: int = 200,
                    error: str | None = None):
        accounts = yield self.accounts.list()
        return (yield self._html(request, pages.users(self._name, current[0], current[1], accounts, error), status))

    @app.route("/admin/users", methods=["POST"])
    @inlineCallbacks
    def add_user(self, request: Any):
        current = yield self._logged_in(request, admin=True, post=True)
        if not isinstance(current, tuple):
            return current
        session, admin = current
        username = (self._arg(request, "username", 64) or "").strip()
        try:
            creds = yield shield(self.accounts.create(username, is_admin=self._arg(request, "is_admin") == "1"))
        except AccountError as e:
            return (yield self._users_page(request, current, 400, str(e)))
        self.events.emit("admin.journalist.added", username=admin.username, target=creds.journalist.username)
        page = pages.credentials(self._name, session, admin, creds.journalist.username, passphrase=creds.passphrase,
                                 totp_secret=creds.totp_secret, totp_uri=creds.totp_uri,
                                 heading=f"Added {creds.journalist.username}")
        return (yield self._html(request, page))

    @inlineCallbacks
    def _target(self, request: Any, uuid: str):
        target = yield self.accounts.by_uuid(uuid) if valid_uuid(uuid) else None
        if target is None:
            return self._error(request, 404, "Not found", "There is no such user.")
        return target

    @inlineCallbacks
    def _admin_acting_on(self, request: Any, uuid: str):
        """-> (session, admin, target journalist), or the refusal page to return instead."""
        current = yield self._logged_in(request, admin=True, post=True)
        if not isinstance(current, tuple):
            return current
        target = yield self._target(request, uuid)
        if not isinstance(target, Journalist):
            return target
        return (*current, target)

    @app.route("/admin/users/<uuid>/reset-password", methods=["POST"])
    @inlineCallbacks
    def reset_password(self, request: Any, uuid: str):
        found = yield self._admin_acting_on(request, uuid)
        if not isinstance(found, tuple):
            return found
        session, admin, target = found
        creds = yield shield(self.accounts.reset_passphrase(target.id))
        self._end_other_sessions(session if target.id == admin.id else None, creds.journalist)
        self.events.emit("admin.journalist.password_reset", username=admin.username, target=target.username)
        page = pages.credentials(self._name, session, admin, target.username, passphrase=creds.passphrase,
                                 totp_secret=None, totp_uri=None, heading=f"New passphrase for {target.username}")
        return (yield self._html(request, page))

    @app.route("/admin/users/<uuid>/reset-2fa", methods=["POST"])
    @inlineCallbacks
    def reset_2fa(self, request: Any, uuid: str):
        found = yield self._admin_acting_on(request, uuid)
        if not isinstance(found, tuple):
            return found
        session, admin, target = found
        creds = yield shield(self.accounts.reset_totp(target.id))
        self._end_other_sessions(session if target.id == admin.id else None, creds.journalist)
        self.events.emit("admin.journalist.2fa_reset", username=admin.username, target=target.username)
        page = pages.credentials(self._name, session, admin, target.username, passphrase=None,
                                 totp_secret=creds.totp_secret, totp_uri=creds.totp_uri,
                                 heading=f"New two-factor secret for {target.username}")
        return (yield self._html(request, page))

    @app.route("/admin/users/<uuid>/delete", methods=["POST"])
    @inlineCallbacks
    def delete_user(self, request: Any, uuid: str):
        found = yield self._admin_acting_on(request, uuid)
        if not isinstance(found, tuple):
            return found
        session, admin, target = found
        if target.id == admin.id:
            return (yield self._users_page(request, (session, admin), 400, "You cannot delete your own account."))
        yield shield(self.accounts.delete(target.id))
        self.sessions.destroy_where(lambda s: s.data.get("journalist_id") == target.id)
        self.events.emit("admin.journalist.deleted", username=admin.username, target=target.username)
        session.flash(f"Deleted {target.username}.", "ok")
        return self._redirect(request, "/admin/users")

    @app.route("/admin/settings", methods=["GET"])
    @inlineCallbacks
    def settings_form(self, request: Any):
        current = yield self._logged_in(request, admin=True)
        if not isinstance(current, tuple):
            return current
        return (yield self._html(request, pages.settings_page(self._name, current[0], current[1], self.settings)))

    @app.route("/admin/settings", methods=["POST"])
    @inlineCallbacks
    def save_settings(self, request: Any):
        current = yield self._logged_in(request, admin=True, post=True)
        if not isinstance(current, tuple):
            return current
        session, admin = current
        name = (self._arg(request, "organisation_name", 100) or "").strip()
        size_text = (self._arg(request, "max_upload_mib", 16) or "").strip()
        retention_text = (self._arg(request, "retention_days", 16) or "").strip()
        error = None
        if not name or len(name) > 100 or any(ord(c) < 32 for c in name):
            error = "The organisation name must be 1 to 100 characters."
        elif not size_text.isdigit() or not 1 <= int(size_text) <= MAX_UPLOAD_MIB:
            error = f"The largest upload must be a whole number of MiB between 1 and {MAX_UPLOAD_MIB}."
        elif retention_text and not (retention_text.isdigit() and 1 <= int(retention_text) <= MAX_RETENTION_DAYS):
            error = f"Retention must be empty (keep everything) or a whole number of days between 1 and {MAX_RETENTION_DAYS}."
        if error:
            page = pages.settings_page(self._name, session, admin, self.settings, error)
            return (yield self._html(request, page, 400))
        updated = InstanceSettings(name, int(size_text) * MiB, self._arg(request, "refuse_uploads") != "1",
                                   int(retention_text) if retention_text else None)
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

    def site(self, reactor: Any = None) -> DeadDropSite:
        return DeadDropSite(
            self.app.resource(),
            body_policy=BodyPolicy(max_form_bytes=2 * MiB),
            render_error_page=lambda status, title, message: error_page_bytes(self._name, status, title, message),
            start_upload=None,  # the journalist side takes no multipart uploads
            reactor=reactor,
        )
