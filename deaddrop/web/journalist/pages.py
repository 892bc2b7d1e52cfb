"""The journalist interface's pages: plain HTML forms, no JavaScript, nothing loaded from elsewhere.

Pages show a source only by its designation; they never show (or hold in a form) anything
derived from a codename.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

import qrcode
from twisted.web.template import Tag, tags

from deaddrop.journalist_desk import ReplyView, SourceView, SubmissionView
from deaddrop.journalists import Journalist
from deaddrop.settings import InstanceSettings
from deaddrop.web._common.pages import csrf_field, layout
from deaddrop.web._common.sessions import Session

GENERIC_LOGIN_ERROR = "Login failed. Check your username, passphrase and one-time code."
THROTTLED_LOGIN_ERROR = "Too many failed attempts for this account. Wait a minute, then try again."
# Shown only after the passphrase was right, so it tells nothing to someone without it.
REUSED_CODE_ERROR = "This code was already used; wait for the next one."
CERTIFICATE_MISMATCH_ERROR = ("This browser's certificate was issued for another user. "
                              "Log in with the certificate issued for your username.")


def _page(site_name: str, title: str, body: list[Any], session: Session | None,
          journalist: Journalist | None = None) -> Tag:
    nav: list[Any] = []
    if journalist is not None and session is not None:
        nav = [tags.a("Sources", href="/sources"), tags.a("Account", href="/account")]
        if journalist.is_admin:
            nav += [tags.a("Users", href="/admin/users"), tags.a("Settings", href="/admin/settings")]
        nav.append(tags.form(method="post", action="/logout")(
            csrf_field(session), tags.button(f"Log out ({journalist.username})", type="submit", class_="secondary")))
    return layout(title=title, site_name=f"{site_name} · Newsroom", body=body, nav=nav,
                  flashes=session.pop_flashes() if session else (), body_class="newsroom")


def _error(message: str | None) -> Any:
    return tags.p(message, class_="flash flash-error", role="alert") if message else ""


def when(ts: float | None) -> str:
    if ts is None:
        return "never"
    if ts % 86400 == 0:  # source times are kept to the day only
        return time.strftime("%Y-%m-%d", time.gmtime(ts))
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


# -- login --------------------------------------------------------------------------------

def login(site_name: str, session: Session, error: str | None, username: str = "",
          session_minutes: tuple[int, int] | None = None) -> Tag:
    """``session_minutes``: (absolute, idle) lengths of a session, shown under the heading."""
    lengths = tags.p(f"You are logged out {session_minutes[0]} minutes after logging in, or after "
                     f"{session_minutes[1]} minutes without activity.", class_="hint") if session_minutes else ""
    return _page(site_name, "Log in", [
        tags.h1("Journalist log in"),
        lengths,
        _error(error),
        tags.form(method="post", action="/login", class_="card")(
            csrf_field(session),
            tags.label("Username", for_="username"),
            tags.input(type="text", name="username", id="username", value=username, autocomplete="username",
                       autocapitalize="off", spellcheck="false", maxlength="64", required="", autofocus=""),
            tags.label("Passphrase", for_="passphrase"),
            tags.input(type="password", name="passphrase", id="passphrase", autocomplete="current-password",
                       maxlength="1024", required=""),
            tags.label("One-time code", for_="one_time_code"),
            tags.input(type="text", name="one_time_code", id="one_time_code", autocomplete="one-time-code",
                       inputmode="numeric", pattern="[0-9 ]{6,7}", maxlength="7", required=""),
            tags.div(class_="actions")(tags.button("Log in", type="submit")),
        ),
    ], session)


# -- sources ------------------------------------------------------------------------------

SOURCES_PER_PAGE = 50


@dataclass(frozen=True)
class Paging:
    page: int  # from 1
    pages: int
    total: int


def _pager(paging: Paging) -> Tag:
    first = (paging.page - 1) * SOURCES_PER_PAGE + 1
    last = min(paging.total, paging.page * SOURCES_PER_PAGE)
    links: list[Any] = []
    if paging.page > 1:
        links.append(tags.a("← Newer", href=f"/sources?page={paging.page - 1}", rel="prev"))
    links.append(tags.span(f"Sources {first}–{last} of {paging.total} · page {paging.page} of {paging.pages}"))
    if paging.page < paging.pages:
        links.append(tags.a("Older →", href=f"/sources?page={paging.page + 1}", rel="next"))
    return tags.nav(class_="pager", **{"aria-label": "Source list pages"})(*links)


def source_list(site_name: str, session: Session, journalist: Journalist, sources: list[SourceView],
                paging: Paging | None = None) -> Tag:
    body: list[Any] = [tags.h1("Sources")]
    if not sources:
        body.append(tags.p("No source has submitted anything yet.", class_="hint"))
    else:
        rows = []
        for s in sources:
            rows.append(tags.tr(
                tags.td(tags.span("★ ", class_="star", title="starred") if s.is_starred else "",
                        tags.a(s.designation, href=f"/sources/{s.uuid}", class_="designation"), class_="lead"),
                tags.td(tags.span(f"{s.unread} unread", class_="badge" if s.unread else "hint")),
                tags.td(f"{_count(s.messages, 'message')}, {_count(s.documents, 'document')}",
                        **{"data-label": "Submissions"}),
                tags.td(when(s.last_updated), **{"data-label": "Last activity"}),
            ))
        body.append(tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th("Source"), tags.th("Unread"), tags.th("Submissions"),
                               tags.th("Last activity"))),
            tags.tbody(*rows),
        ))
        if paging is not None and paging.pages > 1:
            body.append(_pager(paging))
    return _page(site_name, "Sources", body, session, journalist)


def source_page(site_name: str, session: Session, journalist: Journalist, source: SourceView,
                submissions: list[SubmissionView], replies: list[ReplyView], *,
                reply_text: str = "", error: str | None = None) -> Tag:
    base = f"/sources/{source.uuid}"
    star_label = "Unstar" if source.is_starred else "Star"
    unread = tags.button(f"Download all unread ({source.unread})", type="submit", class_="secondary")
    if not source.unread:
        unread(disabled="")
    body: list[Any] = [
        tags.h1(tags.span("★ ", class_="star") if source.is_starred else "", source.designation),
        _error(error),
        tags.div(class_="actions")(
            tags.form(method="post", action=f"{base}/star")(
                csrf_field(session),
                tags.input(type="hidden", name="starred", value="0" if source.is_starred else "1"),
                tags.button(star_label, type="submit", class_="secondary"),
            ),
            tags.form(method="post", action=f"{base}/download-unread")(csrf_field(session), unread),
        ),
        tags.h2("Submissions"),
    ]
    if not submissions:
        body.append(tags.p("No submissions left.", class_="hint"))
    else:
        rows = []
        for item in submissions:
            rows.append(tags.tr(
                tags.td(tags.input(type="checkbox", name="submission", value=item.uuid,
                                   id=f"s-{item.uuid}", **{"aria-label": f"select {item.filename}"}),
                        class_="pick"),
                tags.td(tags.a(item.filename, href=f"{base}/submissions/{item.uuid}/download"), class_="lead"),
                tags.td("message" if item.is_message else "document", **{"data-label": "Kind"}),
                tags.td(human_size(item.size), **{"data-label": "Size"}),
                tags.td("read" if item.is_read else tags.span("unread", class_="badge"), class_="aside"),
            ))
        body.append(tags.form(method="post", action=f"{base}/selected")(
            csrf_field(session),
            tags.table(class_="rows")(tags.thead(tags.tr(tags.th(""), tags.th("File"), tags.th("Kind"),
                                                         tags.th("Size"), tags.th("Status"))), tags.tbody(*rows)),
            tags.div(class_="actions")(
                tags.button("Download selected", type="submit", name="action", value="download"),
                tags.button("Delete selected", type="submit", name="action", value="delete", class_="danger"),
            ),
            tags.p("Files download as stored: encrypted. Decrypt them on the Secure Viewing Station.",
                   class_="hint"),
        ))
    body.append(tags.h2("Replies"))
    if not replies:
        body.append(tags.p("No replies yet.", class_="hint"))
    else:
        items = []
        for r in replies:
            who = r.journalist_username or "a deleted account"
            if r.deleted_by_source:
                items.append(tags.li(f"{r.filename} (by {who}; deleted by the source)"))
            else:
                items.append(tags.li(tags.a(r.filename, href=f"{base}/replies/{r.uuid}/download"), f" (by {who})"))
        body.append(tags.ul(*items))
    body.append(tags.form(method="post", action=f"{base}/reply", class_="card")(
        csrf_field(session),
        tags.label("Reply", for_="reply"),
        tags.textarea(reply_text, name="reply", id="reply", maxlength="100000", required=""),
        tags.p("The reply is encrypted to the source's key (and the submission key) as soon as it arrives; "
               "its text is never stored.", class_="hint"),
        tags.div(class_="actions")(tags.button("Send reply", type="submit")),
    ))
    # Away from the everyday buttons; the link leads to a confirmation page.
    body.append(tags.div(class_="actions source-delete")(
        tags.a("Delete this source…", href=f"{base}/delete", class_="button danger")))
    return _page(site_name, source.designation, body, session, journalist)


def confirm_delete_source(site_name: str, session: Session, journalist: Journalist, source: SourceView) -> Tag:
    return _page(site_name, "Delete source", [
        tags.h1(f"Delete {source.designation}?"),
        tags.p("This deletes every submission and reply of this source and its encryption key. "
               "The source's codename will no longer work. This cannot be undone."),
        tags.form(method="post", action=f"/sources/{source.uuid}/delete")(
            csrf_field(session),
            tags.div(class_="actions")(
                tags.button("Yes, delete this source", type="submit", class_="danger"),
                tags.a("Cancel", href=f"/sources/{source.uuid}", class_="button secondary"),
            ),
        ),
    ], session, journalist)


def confirm_delete_selected(site_name: str, session: Session, journalist: Journalist, source: SourceView,
                            chosen: list[SubmissionView]) -> Tag:
    """What "Delete selected" would delete; nothing is deleted until this form is sent."""
    base = f"/sources/{source.uuid}"
    return _page(site_name, "Delete selected", [
        tags.h1(f"Delete {_count(len(chosen), 'file')} of {source.designation}?"),
        tags.ul(*[tags.li(f"{item.filename} ({human_size(item.size)})", class_="to-delete") for item in chosen]),
        tags.p("Deleted files are gone from the server for good. This cannot be undone."),
        tags.form(method="post", action=f"{base}/selected")(
            csrf_field(session),
            *[tags.input(type="hidden", name="submission", value=item.uuid) for item in chosen],
            tags.div(class_="actions")(
                tags.button("Yes, delete this file" if len(chosen) == 1 else f"Yes, delete these {len(chosen)} files",
                            type="submit", name="action", value="delete-confirmed",
                            class_="danger"),
                tags.a("Cancel", href=base, class_="button secondary"),
            ),
        ),
    ], session, journalist)


# -- account ------------------------------------------------------------------------------

def account(site_name: str, session: Session, journalist: Journalist, *, new_passphrase: str | None = None,
            error: str | None = None) -> Tag:
    body: list[Any] = [tags.h1("Your account"), _error(error),
                       tags.p(f"Username: {journalist.username}", " (administrator)" if journalist.is_admin else "")]
    if new_passphrase:
        body += [
            tags.p("Your new passphrase (shown once; your other sessions and API tokens have ended):",
                   class_="flash flash-ok"),
            tags.p(new_passphrase, class_="codename", id="new-passphrase"),
        ]
    body.append(tags.form(method="post", action="/account/new-passphrase", class_="card")(
        csrf_field(session),
        tags.h2("Get a new passphrase"),
        tags.p("A new passphrase is generated for you. Confirm it is you first.", class_="hint"),
        tags.label("Current passphrase", for_="passphrase"),
        tags.input(type="password", name="passphrase", id="passphrase", maxlength="1024", required="",
                   autocomplete="current-password"),
        tags.label("One-time code", for_="one_time_code"),
        tags.input(type="text", name="one_time_code", id="one_time_code", inputmode="numeric", maxlength="7",
                   required="", autocomplete="one-time-code"),
        tags.div(class_="actions")(tags.button("Generate a new passphrase", type="submit")),
    ))
    return _page(site_name, "Account", body, session, journalist)


# -- admin --------------------------------------------------------------------------------

def users(site_name: str, session: Session, journalist: Journalist, accounts: list[Journalist],
          error: str | None = None) -> Tag:
    rows = []
    for a in accounts:
        actions = tags.div(class_="actions")(
            _post_button(session, f"/admin/users/{a.uuid}/reset-password", "New passphrase", "secondary"),
            _post_button(session, f"/admin/users/{a.uuid}/reset-2fa", "New two-factor secret", "secondary"),
        )
        if a.id != journalist.id:
            actions(_post_button(session, f"/admin/users/{a.uuid}/delete", "Delete", "danger"))
        role = (" ", tags.span("admin", class_="role")) if a.is_admin else ()
        rows.append(tags.tr(tags.td(a.username, *role, class_="lead"),
                            tags.td(when(a.last_login_at), **{"data-label": "Last login"}), tags.td(actions)))
    return _page(site_name, "Users", [
        tags.h1("Users"),
        _error(error),
        tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th("Username"), tags.th("Last login"), tags.th(""))),
            tags.tbody(*rows)),
        tags.form(method="post", action="/admin/users", class_="card")(
            csrf_field(session),
            tags.h2("Add a user"),
            tags.label("Username", for_="username"),
            tags.input(type="text", name="username", id="username", maxlength="64", required="",
                       autocapitalize="off", spellcheck="false"),
            tags.label(tags.input(type="checkbox", name="is_admin", value="1"), " Administrator"),
            tags.p("A passphrase and a two-factor secret are generated and shown once.", class_="hint"),
            tags.div(class_="actions")(tags.button("Add user", type="submit")),
        ),
    ], session, journalist)


def _post_button(session: Session, action: str, label: str, css: str) -> Tag:
    return tags.form(method="post", action=action)(csrf_field(session), tags.button(label, type="submit", class_=css))


def credentials(site_name: str, session: Session, journalist: Journalist, username: str, *,
                passphrase: str | None, totp_secret: str | None, totp_uri: str | None, heading: str,
                cert_command: str | None = None) -> Tag:
    body: list[Any] = [
        tags.h1(heading),
        tags.p(f"Give these to {username} in person. They are shown only this once.", class_="flash flash-warning"),
    ]
    if passphrase:
        body += [tags.h2("Passphrase"), tags.p(passphrase, class_="codename", id="passphrase")]
    if totp_secret and totp_uri:
        body += [
            tags.h2("Two-factor authentication"),
            tags.p("Scan this code with an authenticator app (FreeOTP, Aegis, Google Authenticator…), "
                   "or type the secret in by hand."),
            qr_svg(totp_uri),
            tags.p("Secret: ", tags.code(totp_secret, id="totp-secret")),
            tags.p("URI: ", tags.code(totp_uri, id="totp-uri"), class_="hint"),
        ]
    if cert_command:
        body += [
            tags.h2("Client certificate"),
            tags.p(f"{username} also needs a client certificate from the offline CA: without it the "
                   f"journalist interface does not open, and logins as {username} are accepted only over "
                   "a certificate issued for that username. On the CA machine run:"),
            tags.p(tags.code(cert_command, id="cert-command")),
            tags.p(("CA_DIR is the CA's directory on that machine; " if "CA_DIR" in cert_command else "")
                   + f"give {username} the .p12 file, its import password and the CA's ca.pem.", class_="hint"),
        ]
    body.append(tags.p(tags.a("Back to users", href="/admin/users")))
    return _page(site_name, heading, body, session, journalist)


def qr_svg(data: str, scale: int = 6) -> Tag:
    """The QR code as inline SVG: part of the page, so CSP's img-src never comes into it."""
    qr = qrcode.QRCode(border=4, error_correction=qrcode.constants.ERROR_CORRECT_M)
    qr.add_data(data)
    qr.make(fit=True)
    matrix = qr.get_matrix()
    n = len(matrix)
    path = "".join(f"M{x},{y}h1v1h-1z" for y, row in enumerate(matrix) for x, dark in enumerate(row) if dark)
    return Tag("svg")(
        Tag("rect")(width=str(n), height=str(n), fill="#ffffff"),
        Tag("path")(d=path, fill="#000000"),
        xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {n} {n}", width=str(n * scale), height=str(n * scale),
        role="img", class_="qr", **{"aria-label": "QR code of the two-factor secret",
                                    "shape-rendering": "crispEdges"},
    )


def settings_page(site_name: str, session: Session, journalist: Journalist, settings: InstanceSettings,
                  error: str | None = None) -> Tag:
    refuse = tags.input(type="checkbox", name="refuse_uploads", value="1", id="refuse_uploads")
    if not settings.allow_uploads:
        refuse(checked="")
    return _page(site_name, "Settings", [
        tags.h1("Instance settings"),
        _error(error),
        tags.form(method="post", action="/admin/settings", class_="card")(
            csrf_field(session),
            tags.label("Organisation name", for_="organisation_name"),
            tags.input(type="text", name="organisation_name", id="organisation_name",
                       value=settings.organisation_name, maxlength="100", required=""),
            tags.label("Largest upload, in MiB", for_="max_upload_mib"),
            tags.input(type="number", name="max_upload_mib", id="max_upload_mib", min="1", max="102400",
                       value=str(max(1, settings.max_upload_size // (1024 * 1024))), required=""),
            tags.label(refuse, " Refuse file uploads (sources can still send messages)"),
            tags.label("Delete submissions and replies older than this many days (empty: keep them)",
                       for_="retention_days"),
            tags.input(type="number", name="retention_days", id="retention_days", min="1", max="36500",
                       value=str(settings.retention_days or "")),
            tags.p(tags.a("Welcome text, submission instructions and logo of the source pages",
                          href="/admin/source-texts")),
            tags.div(class_="actions")(tags.button("Save", type="submit")),
        ),
    ], session, journalist)


def plain(site_name: str, session: Session | None, journalist: Journalist | None, title: str,
          paragraphs: Iterable[str]) -> Tag:
    return _page(site_name, title, [tags.h1(title), *[tags.p(p) for p in paragraphs]], session, journalist)
