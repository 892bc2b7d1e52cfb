"""The journalist interface's pages: plain HTML forms, no JavaScript, nothing loaded from elsewhere.

Pages show a source only by its designation; they never show (or hold in a form) anything
derived from a codename.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any, Iterable, cast
from urllib.parse import urlencode

import qrcode
from twisted.web.template import Tag, tags

from deaddrop.transport.certificates import CertificateStatus
from deaddrop.newsroom.desk import ReplyView, SourceFilter, SourceView, SubmissionView
from deaddrop.newsroom.accounts import Journalist
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.web._common.pages import csrf_field, layout
from deaddrop.web.sessions import Session

GENERIC_LOGIN_ERROR = "Login failed. Check your username, passphrase and one-time code."
THROTTLED_LOGIN_ERROR = "Too many failed attempts for this account. Wait a minute, then try again."
# Shown only after the passphrase was right, so it tells nothing to someone without it.
REUSED_CODE_ERROR = "This code was already used; wait for the next one."
CERTIFICATE_MISMATCH_ERROR = ("This browser's certificate was issued for another user. "
                              "Log in with the certificate issued for your username.")


def _page(site_name: str, title: str, body: list[Any], session: Session | None,
          journalist: Journalist | None = None, refresh: str | None = None) -> Tag:
    """``refresh``: a same-site URL the browser goes to at once (a download: the page stays)."""
    nav: list[Any] = []
    if journalist is not None and session is not None:
        nav = [tags.a("Sources", href="/sources"), tags.a("Account", href="/account")]
        if journalist.is_admin:
            nav += [tags.a("Users", href="/admin/users"), tags.a("Settings", href="/admin/settings")]
        nav.append(tags.form(method="post", action="/logout")(
            csrf_field(session), tags.button(f"Log out ({journalist.username})", type="submit", class_="secondary")))
    page = layout(title=title, site_name=f"{site_name} · Newsroom", body=body, nav=nav,
                  flashes=session.pop_flashes() if session else (), body_class="newsroom")
    if refresh is not None:
        head = cast(Tag, page.children[0])  # layout() puts the <head> first
        head(tags.meta(**{"http-equiv": "refresh", "content": f"0; url={refresh}"}))
    return page


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


def megabytes(n_bytes: int) -> str:
    """Bytes as decimal MB, exactly (up to six decimals): what the settings form shows."""
    whole, rest = divmod(int(n_bytes), 1_000_000)
    return f"{whole}.{rest:06d}".rstrip("0").rstrip(".") if rest else str(whole)


def parse_megabytes(text: str) -> int | None:
    """Decimal MB (at most six decimals) as bytes, exactly; None if it is not such a number."""
    import re

    match = re.fullmatch(r"([0-9]{1,9})(?:\.([0-9]{1,6}))?", text.strip())
    if not match:
        return None
    return int(match.group(1)) * 1_000_000 + int((match.group(2) or "").ljust(6, "0"))


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
            # Not required: an account with security keys leaves it empty and touches a key next.
            tags.input(type="text", name="one_time_code", id="one_time_code", autocomplete="one-time-code",
                       inputmode="numeric", pattern="[0-9 ]{6,7}", maxlength="7",
                       **{"aria-describedby": "code-hint"}),
            tags.p("From your app or YubiKey. With a security key, leave it empty.", id="code-hint", class_="hint"),
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


def list_url(only: SourceFilter = SourceFilter(), page: int = 1, select_all: bool = False) -> str:
    """The source list with these filters, on this page (what links and redirects go back to)."""
    params: list[tuple[str, str]] = []
    if only.designation:
        params.append(("q", only.designation))
    if only.starred:
        params.append(("starred", "1"))
    if only.unread:
        params.append(("unread", "1"))
    if page > 1:
        params.append(("page", str(page)))
    if select_all:
        params.append(("select", "all"))
    return "/sources" + ("?" + urlencode(params) if params else "")


def _pager(paging: Paging, only: SourceFilter) -> Tag:
    first = (paging.page - 1) * SOURCES_PER_PAGE + 1
    last = min(paging.total, paging.page * SOURCES_PER_PAGE)
    links: list[Any] = []
    if paging.page > 1:
        links.append(tags.a("← Newer", href=list_url(only, paging.page - 1), rel="prev"))
    links.append(tags.span(f"Sources {first}–{last} of {paging.total} · page {paging.page} of {paging.pages}"))
    if paging.page < paging.pages:
        links.append(tags.a("Older →", href=list_url(only, paging.page + 1), rel="next"))
    return tags.nav(class_="pager", **{"aria-label": "Source list pages"})(*links)


def _checkbox(name: str, value: str, checked: bool, **attributes: Any) -> Tag:
    box = tags.input(type="checkbox", name=name, value=value, **attributes)
    return box(checked="") if checked else box


def _filters(only: SourceFilter) -> Tag:
    """A GET form: the filtered list has an address of its own (bookmarks, back button)."""
    return tags.form(method="get", action="/sources", class_="card filters", role="search")(
        tags.label("Designation contains", for_="q"),
        tags.input(type="search", name="q", id="q", value=only.designation or "", maxlength="64",
                   autocomplete="off", autocapitalize="off", spellcheck="false"),
        tags.div(class_="checks")(
            tags.label(_checkbox("starred", "1", only.starred), "Starred only"),
            tags.label(_checkbox("unread", "1", only.unread), "With unread submissions only"),
        ),
        tags.div(class_="actions")(
            tags.button("Filter", type="submit", class_="secondary"),
            tags.a("Show all sources", href="/sources") if only.active else "",
        ),
    )


def _list_state(only: SourceFilter, page: int) -> list[Tag]:
    """Hidden fields that bring a form's answer back to the same filtered page."""
    fields = [tags.input(type="hidden", name="page", value=str(page))]
    if only.designation:
        fields.append(tags.input(type="hidden", name="q", value=only.designation))
    if only.starred:
        fields.append(tags.input(type="hidden", name="starred", value="1"))
    if only.unread:
        fields.append(tags.input(type="hidden", name="unread", value="1"))
    return fields


def _select_links(select_all_url: str, none_url: str, select_all: bool, what: str) -> Tag:
    """Select all / none without JavaScript: the same page again, every box ticked, or none."""
    if select_all:
        return tags.p(tags.a("Clear the selection", href=none_url), class_="select-all")
    return tags.p(tags.a(f"Select all {what} on this page", href=select_all_url), class_="select-all")


def source_list(site_name: str, session: Session, journalist: Journalist, sources: list[SourceView],
                paging: Paging | None = None, only: SourceFilter = SourceFilter(), select_all: bool = False) -> Tag:
    page = paging.page if paging is not None else 1
    body: list[Any] = [tags.h1("Sources"), _filters(only)]
    if not sources:
        body.append(tags.p("No source matches these filters." if only.active
                           else "No source has submitted anything yet.", class_="hint"))
        return _page(site_name, "Sources", body, session, journalist)
    rows = []
    for s in sources:
        rows.append(tags.tr(
            tags.td(_checkbox("source", s.uuid, select_all, id=f"pick-{s.uuid}",
                              **{"aria-label": f"select {s.designation}"}), class_="pick"),
            tags.td(tags.span("★ ", class_="star", title="starred") if s.is_starred else "",
                    tags.a(s.designation, href=f"/sources/{s.uuid}", class_="designation"), class_="lead"),
            tags.td(tags.span(f"{s.unread} unread", class_="badge" if s.unread else "hint")),
            tags.td(f"{_count(s.messages, 'message')}, {_count(s.documents, 'document')}",
                    **{"data-label": "Submissions"}),
            tags.td(when(s.last_updated), **{"data-label": "Last activity"}),
        ))
    body.append(tags.form(method="post", action="/sources/selected")(
        csrf_field(session),
        *_list_state(only, page),
        _select_links(list_url(only, page, select_all=True), list_url(only, page), select_all, "sources"),
        tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th(""), tags.th("Source"),
                               tags.th("Unread"), tags.th("Submissions"), tags.th("Last activity"))),
            tags.tbody(*rows),
        ),
        tags.div(class_="actions")(
            tags.button("Star", type="submit", name="action", value="star", class_="secondary"),
            tags.button("Unstar", type="submit", name="action", value="unstar", class_="secondary"),
            tags.button("Mark read", type="submit", name="action", value="read", class_="secondary"),
            tags.button("Mark unread", type="submit", name="action", value="unread", class_="secondary"),
            tags.button("Delete selected…", type="submit", name="action", value="delete", class_="danger"),
        ),
    ))
    if paging is not None and paging.pages > 1:
        body.append(_pager(paging, only))
    return _page(site_name, "Sources", body, session, journalist)


def confirm_delete_sources(site_name: str, session: Session, journalist: Journalist, chosen: list[SourceView],
                           only: SourceFilter, page: int) -> Tag:
    """What "Delete selected" on the source list would delete; nothing goes until this form is sent."""
    return _page(site_name, "Delete sources", [
        tags.h1(f"Delete {_count(len(chosen), 'source')}?"),
        tags.ul(*[tags.li(f"{s.designation} ({_count(s.messages, 'message')}, {_count(s.documents, 'document')})",
                          class_="to-delete") for s in chosen]),
        tags.p("This deletes every submission and reply of these sources and their encryption keys. Their "
               "codenames will no longer work. This cannot be undone."),
        tags.form(method="post", action="/sources/selected")(
            csrf_field(session),
            *_list_state(only, page),
            *[tags.input(type="hidden", name="source", value=s.uuid) for s in chosen],
            tags.div(class_="actions")(
                tags.button("Yes, delete this source" if len(chosen) == 1
                            else f"Yes, delete these {len(chosen)} sources",
                            type="submit", name="action", value="delete-confirmed", class_="danger"),
                tags.a("Cancel", href=list_url(only, page), class_="button secondary"),
            ),
        ),
    ], session, journalist)


def source_page(site_name: str, session: Session, journalist: Journalist, source: SourceView,
                submissions: list[SubmissionView], replies: list[ReplyView], *,
                reply_text: str = "", error: str | None = None, select_all: bool = False,
                downloading: tuple[str, str] | None = None) -> Tag:
    """``downloading``: (what, URL) of a download the journalist just asked for. The page is
    drawn after those files were marked read, and sends the browser on to the file (which does
    not replace the page): the counts on it are already the new ones, without JavaScript."""
    base = f"/sources/{source.uuid}"
    star_label = "Unstar" if source.is_starred else "Star"
    unread = tags.button(f"Download all unread ({source.unread})", type="submit", class_="secondary")
    if not source.unread:
        unread(disabled="")
    body: list[Any] = [
        tags.h1(tags.span("★ ", class_="star") if source.is_starred else "", source.designation),
        _error(error),
    ]
    if downloading is not None:
        what, url = downloading
        body.append(tags.p(f"Downloading {what}; it is marked read. If the download does not start, ",
                           tags.a("download it here", href=url), ".", class_="flash flash-ok", id="downloading"))
    body += [
        tags.div(class_="actions")(
            tags.form(method="post", action=f"{base}/star")(
                csrf_field(session),
                tags.input(type="hidden", name="starred", value="0" if source.is_starred else "1"),
                tags.button(star_label, type="submit", class_="secondary"),
            ),
            tags.form(method="post", action=f"{base}/download-unread")(csrf_field(session), unread),
            tags.form(method="post", action=f"{base}/unread")(
                csrf_field(session), tags.button("Mark all unread", type="submit", class_="secondary")),
        ),
        tags.h2("Submissions"),
    ]
    if not submissions:
        body.append(tags.p("No submissions left.", class_="hint"))
    else:
        rows = []
        for item in submissions:
            rows.append(tags.tr(
                tags.td(_checkbox("submission", item.uuid, select_all, id=f"s-{item.uuid}",
                                  **{"aria-label": f"select {item.filename}"}), class_="pick"),
                tags.td(tags.a(item.filename, href=f"{base}/submissions/{item.uuid}/fetch"), class_="lead"),
                tags.td("message" if item.is_message else "document", **{"data-label": "Kind"}),
                tags.td(human_size(item.size), **{"data-label": "Size"}),
                tags.td(when(item.created_at), **{"data-label": "Received"}),
                tags.td("read" if item.is_read else tags.span("unread", class_="badge"), class_="aside"),
            ))
        body.append(tags.form(method="post", action=f"{base}/selected")(
            csrf_field(session),
            _select_links(f"{base}?select=all", base, select_all, "files"),
            tags.table(class_="rows")(tags.thead(tags.tr(tags.th(""), tags.th("File"), tags.th("Kind"),
                                                         tags.th("Size"), tags.th("Received"), tags.th("Status"))),
                                      tags.tbody(*rows)),
            tags.div(class_="actions")(
                tags.button("Download selected", type="submit", name="action", value="download"),
                tags.button("Mark read", type="submit", name="action", value="read", class_="secondary"),
                tags.button("Mark unread", type="submit", name="action", value="unread", class_="secondary"),
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
            sent = tags.time(when(r.created_at), datetime=_iso_date(r.created_at))
            if r.deleted_by_source:
                items.append(tags.li(f"{r.filename} (by {who}, ", sent, "; deleted by the source)"))
            else:
                items.append(tags.li(tags.a(r.filename, href=f"{base}/replies/{r.uuid}/download"),
                                     f" (by {who}, ", sent, ")"))
        body.append(tags.ul(*items, class_="replies"))
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
    return _page(site_name, source.designation, body, session, journalist,
                 refresh=downloading[1] if downloading is not None else None)


def _iso_date(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


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
            error: str | None = None, code_field: bool = True, extra: Iterable[Any] = ()) -> Tag:
    """``code_field``: the re-check asks for a one-time code (an account with keys has none);
    ``extra``: more sections (the security keys, see ``key_pages``)."""
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
        *([tags.label("One-time code", for_="one_time_code"),
           tags.input(type="text", name="one_time_code", id="one_time_code", inputmode="numeric", maxlength="7",
                      required="", autocomplete="one-time-code")] if code_field else []),
        tags.div(class_="actions")(tags.button("Generate a new passphrase", type="submit")),
    ))
    body.extend(extra)
    return _page(site_name, "Account", body, session, journalist)


# -- admin --------------------------------------------------------------------------------

def certificate_text(status: CertificateStatus, now: datetime.datetime) -> tuple[str, str]:
    """-> (what the users page says of a certificate, a CSS class: ok, warn or bad)."""
    until = status.not_after.strftime("%Y-%m-%d") if status.not_after else "?"
    if status.state == "valid":
        return f"valid until {until}", "ok"
    if status.state == "expiring":
        days = max(0, (status.not_after - now).days) if status.not_after else 0
        return f"expires {until} (in {_count(days, 'day')})", "warn"
    if status.state == "expired":
        return f"expired {until}", "bad"
    if status.state == "revoked":
        return f"revoked {(status.revoked_at or '')[:10]}".rstrip(), "bad"
    if status.state == "revoked_not_published":
        return "revoked on the CA, but not yet in the server's CRL: it still works until a new CRL is copied here", \
            "bad"
    if status.state == "none":
        return "none issued", "warn"
    return "unknown", "warn"


def users(site_name: str, session: Session, journalist: Journalist, accounts: list[Journalist],
          error: str | None = None, certificates: Any = None, now: datetime.datetime | None = None,
          factors: dict[int, str] | None = None) -> Tag:
    """``certificates``: username -> ``CertificateStatus`` (see ``deaddrop.transport.certificates``), or None;
    ``factors``: account id -> how it logs in ("app", "YubiKey (HOTP)", "2 security keys")."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    rows = []
    unknown = certificates is None
    for a in accounts:
        # Links to confirmation pages: nothing irreversible happens on this page.
        actions = tags.div(class_="actions account-actions")(
            tags.a("New passphrase…", href=f"/admin/users/{a.uuid}/reset-password", class_="button secondary"),
            tags.a("New two-factor secret…", href=f"/admin/users/{a.uuid}/reset-2fa", class_="button secondary"),
        )
        if a.id != journalist.id:
            actions(tags.a("Delete…", href=f"/admin/users/{a.uuid}/delete", class_="button danger"))
        role = (" ", tags.span("admin", class_="role")) if a.is_admin else ()
        status = certificates(a.username) if certificates is not None else None
        unknown = unknown or status is None or status.state == "unknown"
        text, css = certificate_text(status, now) if status is not None else ("unknown", "warn")
        rows.append(tags.tr(tags.td(a.username, *role, class_="lead"),
                            tags.td((factors or {}).get(a.id, "app"), **{"data-label": "Second factor"}),
                            tags.td(when(a.last_login_at), **{"data-label": "Last login"}),
                            tags.td(tags.span(text, class_=f"cert cert-{css}"), **{"data-label": "Certificate"}),
                            tags.td(actions)))
    body: list[Any] = [
        tags.h1("Users"),
        _error(error),
        tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th("Username"), tags.th("Second factor"), tags.th("Last login"),
                               tags.th("Certificate"), tags.th(""))),
            tags.tbody(*rows)),
    ]
    if unknown:
        body.append(tags.p("Certificate status comes from the CA's list of issued certificates (its state.json, "
                           "beside the CA certificate this server uses) and the CRL in force. This server has no "
                           "copy of that list; copy it over from the CA machine to see each account's "
                           "certificate here.", class_="hint"))
    body.append(tags.form(method="post", action="/admin/users", class_="card")(
        csrf_field(session),
        tags.h2("Add a user"),
        tags.label("Username", for_="username"),
        tags.input(type="text", name="username", id="username", maxlength="64", required="",
                   autocapitalize="off", spellcheck="false"),
        tags.label(tags.input(type="checkbox", name="is_admin", value="1"), " Administrator"),
        tags.p("A passphrase and a two-factor secret are generated and shown once.", class_="hint"),
        tags.div(class_="actions")(tags.button("Add user", type="submit")),
    ))
    return _page(site_name, "Users", body, session, journalist)


# What each account action does, for its confirmation page: (title, explanation, button).
ACCOUNT_ACTIONS = {
    "delete": ("Delete {name}?",
               "{name} can no longer log in, and every session and API token of the account ends at once. "
               "Their replies stay, shown as by a deleted account. This cannot be undone. Revoke their "
               "client certificate on the CA too.",
               "Yes, delete {name}"),
    "reset-password": ("A new passphrase for {name}?",
                       "A new passphrase is generated and shown to you once. {name}'s old passphrase stops "
                       "working, and every session and API token of the account ends at once.",
                       "Yes, make a new passphrase"),
    "reset-2fa": ("A new two-factor secret for {name}?",
                  "A new secret is generated and shown to you once; {name} must add it to their "
                  "authenticator app. Codes from the old one stop working, their YubiKey (HOTP) and security "
                  "keys no longer log them in, their recovery codes stop working, and every session and API "
                  "token of the account ends at once. Do this for someone who lost their key.",
                  "Yes, make a new two-factor secret"),
}


def confirm_account_action(site_name: str, session: Session, journalist: Journalist, target: Journalist,
                           action: str) -> Tag:
    title, explanation, button = (text.format(name=target.username) for text in ACCOUNT_ACTIONS[action])
    return _page(site_name, title, [
        tags.h1(title),
        tags.p(explanation),
        tags.form(method="post", action=f"/admin/users/{target.uuid}/{action}")(
            csrf_field(session),
            tags.input(type="hidden", name="confirm", value="yes"),
            tags.div(class_="actions")(
                tags.button(button, type="submit", **({"class_": "danger"} if action == "delete" else {})),
                tags.a("Cancel", href="/admin/users", class_="button secondary"),
            ),
        ),
    ], session, journalist)


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
            tags.label("Largest upload, in MB (1 MB = 1,000,000 bytes, as sources are told)", for_="max_upload_mb"),
            # Text, not a number field: the exact size, in the sources' unit, round-trips as typed.
            tags.input(type="text", name="max_upload_mb", id="max_upload_mb", inputmode="decimal",
                       value=megabytes(settings.max_upload_size), required="", pattern=r"[0-9]+(\.[0-9]{1,6})?"),
            tags.label(refuse, " Refuse file uploads (sources can still send messages)"),
            tags.label("Delete submissions and replies older than this many days (empty: keep them)",
                       for_="retention_days"),
            tags.input(type="number", name="retention_days", id="retention_days", min="1", max="36500",
                       value=str(settings.retention_days or "")),
            # What this form showed: a field left as it was changes nothing (see save_settings).
            *[tags.input(type="hidden", name=f"shown_{k}", value=v) for k, v in [
                ("organisation_name", settings.organisation_name),
                ("max_upload_mb", megabytes(settings.max_upload_size)),
                ("retention_days", str(settings.retention_days or "")),
                ("refuse_uploads", "0" if settings.allow_uploads else "1")]],
            tags.p(tags.a("Welcome text, submission instructions and logo of the source pages",
                          href="/admin/source-texts")),
            tags.div(class_="actions")(tags.button("Save", type="submit")),
        ),
    ], session, journalist)


def plain(site_name: str, session: Session | None, journalist: Journalist | None, title: str,
          paragraphs: Iterable[str]) -> Tag:
    return _page(site_name, title, [tags.h1(title), *[tags.p(p) for p in paragraphs]], session, journalist)
