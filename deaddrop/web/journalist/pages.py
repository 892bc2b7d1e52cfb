"""The journalist interface's pages: plain HTML forms, no JavaScript, nothing loaded from elsewhere.

Pages show a source only by its designation; they never show (or hold in a form) anything
derived from a codename. Every visible string is said in the session's language
(``i18n.of(session)``: the account's choice, else the browser's); messages a route passes in
(errors, headings) arrive already said in it.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any, Iterable, cast
from urllib.parse import urlencode

import qrcode
from twisted.web.template import Tag, tags

from deaddrop.i18n.speech import Speech
from deaddrop.transport.certificates import CertificateStatus
from deaddrop.newsroom.desk import ReplyView, SourceFilter, SourceView, SubmissionView
from deaddrop.newsroom.accounts import Journalist
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.web._common.pages import csrf_field, layout
from deaddrop.web.journalist import i18n
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.sessions import Session

GENERIC_LOGIN_ERROR = N_("Login failed. Check your username, passphrase and one-time code.")
THROTTLED_LOGIN_ERROR = N_("Too many failed attempts for this account. Wait a minute, then try again.")
# Shown only after the passphrase was right, so it tells nothing to someone without it.
REUSED_CODE_ERROR = N_("This code was already used; wait for the next one.")
# Also only after a right passphrase: the YubiKey was pressed where this server did not see it.
NEXT_CODE_PROMPT = N_("Your YubiKey is ahead of this server (it was pressed where the server did not see it). "
                      "To bring them back in step, log in again within 5 minutes with the key's next code: "
                      "press it once more.")
CERTIFICATE_MISMATCH_ERROR = N_("This browser's certificate was issued for another user. "
                                "Log in with the certificate issued for your username.")
SESSION_EXPIRED = N_("Your session expired. Please log in again.")


def frame(say: Speech) -> dict[str, str]:
    """What ``layout`` needs to say the page's frame in ``say``'s language."""
    return {"lang": say.tag, "direction": say.direction, "footer": say._("Powered by DeadDrop")}


def _page(site_name: str, title: str, body: list[Any], session: Session | None,
          journalist: Journalist | None = None, refresh: str | None = None) -> Tag:
    """``refresh``: a same-site URL the browser goes to at once (a download: the page stays)."""
    say = i18n.of(session)
    _ = say._
    nav: list[Any] = []
    if journalist is not None and session is not None:
        nav = [tags.a(_("Sources"), href="/sources"), tags.a(_("Account"), href="/account")]
        if journalist.is_admin:
            nav += [tags.a(_("Users"), href="/admin/users"), tags.a(_("Desks"), href="/admin/desks"),
                    tags.a(_("Settings"), href="/admin/settings")]
        nav.append(tags.form(method="post", action="/logout")(
            csrf_field(session), tags.button(_("Log out ({name})", name=journalist.username), type="submit",
                                             class_="secondary")))
    page = layout(title=title, site_name=_("{name} · Newsroom", name=site_name), body=body, nav=nav,
                  flashes=session.pop_flashes() if session else (), body_class="newsroom", **frame(say))
    if refresh is not None:
        head = cast(Tag, page.children[0])  # layout() puts the <head> first
        head(tags.meta(**{"http-equiv": "refresh", "content": f"0; url={refresh}"}))
    return page


def _error(message: str | None) -> Any:
    return tags.p(message, class_="flash flash-error", role="alert") if message else ""


def when(say: Speech, ts: float | None) -> str:
    """A moment as the pages show it: the day, and the time (UTC) unless only the day is kept."""
    if ts is None:
        return say._("never")
    if ts % 86400 == 0:  # source times are kept to the day only
        return say.day(ts)
    return say._("{day}, {time} UTC", day=say.day(ts), time=say.clock(ts))


def counts(say: Speech, messages: int, documents: int) -> str:
    """"2 messages, 1 document", in the language's plural forms."""
    return say._("{messages}, {documents}",
                 messages=say.n_("{n} message", "{n} messages", messages),
                 documents=say.n_("{n} document", "{n} documents", documents))


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


def human_size(say: Speech, n: int) -> str:
    if n < 1024:
        return say.n_("{n} byte", "{n} bytes", n)
    size = n / 1024
    for unit in (N_("{size} KiB"), N_("{size} MiB")):
        if size < 1024:
            return say._(unit, size=say.number(round(size, 1)))
        size /= 1024
    return say._("{size} GiB", size=say.number(round(size, 1)))


# -- login --------------------------------------------------------------------------------

def login(site_name: str, session: Session, error: str | None, username: str = "",
          session_minutes: tuple[int, int] | None = None) -> Tag:
    """``session_minutes``: (absolute, idle) lengths of a session, shown under the heading."""
    say = i18n.of(session)
    _ = say._
    lengths = tags.p(say._("You are logged out {absolute} after logging in, or after {idle} without activity.",
                           absolute=say.n_("{n} minute", "{n} minutes", session_minutes[0]),
                           idle=say.n_("{n} minute", "{n} minutes", session_minutes[1])),
                     class_="hint") if session_minutes else ""
    return _page(site_name, _("Log in"), [
        tags.h1(_("Journalist log in")),
        lengths,
        _error(error),
        tags.form(method="post", action="/login", class_="card")(
            csrf_field(session),
            tags.label(_("Username"), for_="username"),
            tags.input(type="text", name="username", id="username", value=username, autocomplete="username",
                       autocapitalize="off", spellcheck="false", maxlength="64", required="", autofocus="",
                       dir="auto"),
            tags.label(_("Passphrase"), for_="passphrase"),
            tags.input(type="password", name="passphrase", id="passphrase", autocomplete="current-password",
                       maxlength="1024", required="", dir="ltr"),
            tags.label(_("One-time code"), for_="one_time_code"),
            # Not required: an account with security keys leaves it empty and touches a key next.
            tags.input(type="text", name="one_time_code", id="one_time_code", autocomplete="one-time-code",
                       inputmode="numeric", pattern="[0-9 ]{6,7}", maxlength="7", dir="ltr",
                       **{"aria-describedby": "code-hint"}),
            tags.p(_("From your app or YubiKey. With a security key, leave it empty."), id="code-hint",
                   class_="hint"),
            tags.div(class_="actions")(tags.button(_("Log in"), type="submit")),
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


def _pager(say: Speech, paging: Paging, only: SourceFilter) -> Tag:
    _ = say._
    first = (paging.page - 1) * SOURCES_PER_PAGE + 1
    last = min(paging.total, paging.page * SOURCES_PER_PAGE)
    links: list[Any] = []
    if paging.page > 1:
        links.append(tags.a(_("← Newer"), href=list_url(only, paging.page - 1), rel="prev"))
    links.append(tags.span(_("Sources {first}–{last} of {total} · page {page} of {pages}", first=first, last=last,
                             total=paging.total, page=paging.page, pages=paging.pages)))
    if paging.page < paging.pages:
        links.append(tags.a(_("Older →"), href=list_url(only, paging.page + 1), rel="next"))
    return tags.nav(class_="pager", **{"aria-label": _("Source list pages")})(*links)


def _checkbox(name: str, value: str, checked: bool, **attributes: Any) -> Tag:
    box = tags.input(type="checkbox", name=name, value=value, **attributes)
    return box(checked="") if checked else box


def _filters(say: Speech, only: SourceFilter) -> Tag:
    """A GET form: the filtered list has an address of its own (bookmarks, back button)."""
    _ = say._
    return tags.form(method="get", action="/sources", class_="card filters", role="search")(
        tags.label(_("Designation contains"), for_="q"),
        tags.input(type="search", name="q", id="q", value=only.designation or "", maxlength="64",
                   autocomplete="off", autocapitalize="off", spellcheck="false", dir="ltr"),
        tags.div(class_="checks")(
            tags.label(_checkbox("starred", "1", only.starred), _("Starred only")),
            tags.label(_checkbox("unread", "1", only.unread), _("With unread submissions only")),
        ),
        tags.div(class_="actions")(
            tags.button(_("Filter"), type="submit", class_="secondary"),
            tags.a(_("Show all sources"), href="/sources") if only.active else "",
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


def _select_links(select_all_url: str, none_url: str, select_all: bool, everything: str, clear: str) -> Tag:
    """Select all / none without JavaScript: the same page again, every box ticked, or none."""
    if select_all:
        return tags.p(tags.a(clear, href=none_url), class_="select-all")
    return tags.p(tags.a(everything, href=select_all_url), class_="select-all")


# A designation is English words in every language: said as English, laid out left to right.
DESIGNATION = {"lang": "en", "dir": "ltr"}


def source_list(site_name: str, session: Session, journalist: Journalist, sources: list[SourceView],
                paging: Paging | None = None, only: SourceFilter = SourceFilter(), select_all: bool = False) -> Tag:
    say = i18n.of(session)
    _ = say._
    page = paging.page if paging is not None else 1
    body: list[Any] = [tags.h1(_("Sources")), _filters(say, only)]
    if not sources:
        body.append(tags.p(_("No source matches these filters.") if only.active
                           else _("No source has submitted anything yet."), class_="hint"))
        return _page(site_name, _("Sources"), body, session, journalist)
    rows = []
    for s in sources:
        rows.append(tags.tr(
            tags.td(_checkbox("source", s.uuid, select_all, id=f"pick-{s.uuid}",
                              **{"aria-label": _("select {designation}", designation=s.designation)}),
                    class_="pick"),
            tags.td(tags.span("★ ", class_="star", title=_("starred")) if s.is_starred else "",
                    tags.a(s.designation, href=f"/sources/{s.uuid}", class_="designation", **DESIGNATION),
                    class_="lead"),
            tags.td(tags.span(say.n_("{n} unread", "{n} unread", s.unread), class_="badge" if s.unread else "hint")),
            tags.td(counts(say, s.messages, s.documents), **{"data-label": _("Submissions")}),
            tags.td(when(say, s.last_updated), **{"data-label": _("Last activity")}),
        ))
    body.append(tags.form(method="post", action="/sources/selected")(
        csrf_field(session),
        *_list_state(only, page),
        _select_links(list_url(only, page, select_all=True), list_url(only, page), select_all,
                      _("Select all sources on this page"), _("Clear the selection")),
        tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th(""), tags.th(_("Source")),
                               tags.th(_("Unread")), tags.th(_("Submissions")), tags.th(_("Last activity")))),
            tags.tbody(*rows),
        ),
        tags.div(class_="actions")(
            tags.button(_("Star"), type="submit", name="action", value="star", class_="secondary"),
            tags.button(_("Unstar"), type="submit", name="action", value="unstar", class_="secondary"),
            tags.button(_("Mark read"), type="submit", name="action", value="read", class_="secondary"),
            tags.button(_("Mark unread"), type="submit", name="action", value="unread", class_="secondary"),
            tags.button(_("Delete selected…"), type="submit", name="action", value="delete", class_="danger"),
        ),
    ))
    if paging is not None and paging.pages > 1:
        body.append(_pager(say, paging, only))
    return _page(site_name, _("Sources"), body, session, journalist)


def confirm_delete_sources(site_name: str, session: Session, journalist: Journalist, chosen: list[SourceView],
                           only: SourceFilter, page: int) -> Tag:
    """What "Delete selected" on the source list would delete; nothing goes until this form is sent."""
    say = i18n.of(session)
    _ = say._
    return _page(site_name, _("Delete sources"), [
        tags.h1(say.n_("Delete {n} source?", "Delete {n} sources?", len(chosen))),
        tags.ul(*[tags.li(s.designation, " (", counts(say, s.messages, s.documents), ")", class_="to-delete")
                  for s in chosen]),
        tags.p(_("This deletes every submission and reply of these sources and their encryption keys. Their "
                 "codenames will no longer work. This cannot be undone.")),
        tags.form(method="post", action="/sources/selected")(
            csrf_field(session),
            *_list_state(only, page),
            *[tags.input(type="hidden", name="source", value=s.uuid) for s in chosen],
            tags.div(class_="actions")(
                tags.button(_("Yes, delete this source") if len(chosen) == 1 else
                            say.n_("Yes, delete these {n} sources", "Yes, delete these {n} sources", len(chosen)),
                            type="submit", name="action", value="delete-confirmed", class_="danger"),
                tags.a(_("Cancel"), href=list_url(only, page), class_="button secondary"),
            ),
        ),
    ], session, journalist)


def source_page(site_name: str, session: Session, journalist: Journalist, source: SourceView,
                submissions: list[SubmissionView], replies: list[ReplyView], *,
                reply_text: str = "", error: str | None = None, select_all: bool = False,
                downloading: tuple[str, str] | None = None) -> Tag:
    """``downloading``: (what, URL) of a download the journalist just asked for (``what`` said
    in the page's language). The page is drawn after those files were marked read, and sends the
    browser on to the file (which does not replace the page): the counts on it are already the
    new ones, without JavaScript."""
    say = i18n.of(session)
    _ = say._
    base = f"/sources/{source.uuid}"
    star_label = _("Unstar") if source.is_starred else _("Star")
    unread = tags.button(_("Download all unread ({n})", n=source.unread), type="submit", class_="secondary")
    if not source.unread:
        unread(disabled="")
    body: list[Any] = [
        tags.h1(tags.span("★ ", class_="star") if source.is_starred else "",
                tags.span(source.designation, **DESIGNATION)),
        _error(error),
    ]
    if downloading is not None:
        what, url = downloading
        body.append(tags.p(_("Downloading {what}; it is marked read.", what=what), " ",
                           tags.a(_("If the download does not start, download it here."), href=url),
                           class_="flash flash-ok", id="downloading"))
    body += [
        tags.div(class_="actions")(
            tags.form(method="post", action=f"{base}/star")(
                csrf_field(session),
                tags.input(type="hidden", name="starred", value="0" if source.is_starred else "1"),
                tags.button(star_label, type="submit", class_="secondary"),
            ),
            tags.form(method="post", action=f"{base}/download-unread")(csrf_field(session), unread),
            tags.form(method="post", action=f"{base}/unread")(
                csrf_field(session), tags.button(_("Mark all unread"), type="submit", class_="secondary")),
        ),
        tags.h2(_("Submissions")),
    ]
    if not submissions:
        body.append(tags.p(_("No submissions left."), class_="hint"))
    else:
        rows = []
        for item in submissions:
            rows.append(tags.tr(
                tags.td(_checkbox("submission", item.uuid, select_all, id=f"s-{item.uuid}",
                                  **{"aria-label": _("select {file}", file=item.filename)}), class_="pick"),
                tags.td(tags.a(item.filename, href=f"{base}/submissions/{item.uuid}/fetch", dir="ltr"),
                        class_="lead"),
                tags.td(_("message") if item.is_message else _("document"), **{"data-label": _("Kind")}),
                tags.td(human_size(say, item.size), **{"data-label": _("Size")}),
                tags.td(when(say, item.created_at), **{"data-label": _("Received")}),
                tags.td(_("read") if item.is_read else tags.span(_("unread"), class_="badge"), class_="aside"),
            ))
        body.append(tags.form(method="post", action=f"{base}/selected")(
            csrf_field(session),
            _select_links(f"{base}?select=all", base, select_all, _("Select all files on this page"),
                          _("Clear the selection")),
            tags.table(class_="rows")(tags.thead(tags.tr(tags.th(""), tags.th(_("File")), tags.th(_("Kind")),
                                                         tags.th(_("Size")), tags.th(_("Received")),
                                                         tags.th(_("Status")))),
                                      tags.tbody(*rows)),
            tags.div(class_="actions")(
                tags.button(_("Download selected"), type="submit", name="action", value="download"),
                tags.button(_("Mark read"), type="submit", name="action", value="read", class_="secondary"),
                tags.button(_("Mark unread"), type="submit", name="action", value="unread", class_="secondary"),
                tags.button(_("Delete selected"), type="submit", name="action", value="delete", class_="danger"),
            ),
            tags.p(_("Files download as stored: encrypted. Decrypt them on the Secure Viewing Station."),
                   class_="hint"),
        ))
    body.append(tags.h2(_("Replies")))
    if not replies:
        body.append(tags.p(_("No replies yet."), class_="hint"))
    else:
        items = []
        for r in replies:
            sent = tags.time(when(say, r.created_at), datetime=_iso_date(r.created_at))
            name = tags.a(r.filename, href=f"{base}/replies/{r.uuid}/download", dir="ltr") \
                if not r.deleted_by_source else tags.span(r.filename, dir="ltr")
            if r.journalist_username:
                by = _("by {name}", name=r.journalist_username)
            else:
                by = _("by a deleted account")
            note: list[Any] = [" (", by, ", ", sent, "; ", _("deleted by the source"), ")"] \
                if r.deleted_by_source else [" (", by, ", ", sent, ")"]
            items.append(tags.li(name, *note))
        body.append(tags.ul(*items, class_="replies"))
    body.append(tags.form(method="post", action=f"{base}/reply", class_="card")(
        csrf_field(session),
        tags.label(_("Reply"), for_="reply"),
        tags.textarea(reply_text, name="reply", id="reply", maxlength="100000", required="", dir="auto"),
        tags.p(_("The reply is encrypted to the source's key (and the submission key) as soon as it arrives; "
                 "its text is never stored."), class_="hint"),
        tags.div(class_="actions")(tags.button(_("Send reply"), type="submit")),
    ))
    # Away from the everyday buttons; the link leads to a confirmation page.
    body.append(tags.div(class_="actions source-delete")(
        tags.a(_("Delete this source…"), href=f"{base}/delete", class_="button danger")))
    return _page(site_name, source.designation, body, session, journalist,
                 refresh=downloading[1] if downloading is not None else None)


def _iso_date(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def confirm_delete_source(site_name: str, session: Session, journalist: Journalist, source: SourceView) -> Tag:
    _ = i18n.of(session)._
    return _page(site_name, _("Delete source"), [
        tags.h1(_("Delete {designation}?", designation=source.designation)),
        tags.p(_("This deletes every submission and reply of this source and its encryption key. "
                 "The source's codename will no longer work. This cannot be undone.")),
        tags.form(method="post", action=f"/sources/{source.uuid}/delete")(
            csrf_field(session),
            tags.div(class_="actions")(
                tags.button(_("Yes, delete this source"), type="submit", class_="danger"),
                tags.a(_("Cancel"), href=f"/sources/{source.uuid}", class_="button secondary"),
            ),
        ),
    ], session, journalist)


def confirm_delete_selected(site_name: str, session: Session, journalist: Journalist, source: SourceView,
                            chosen: list[SubmissionView]) -> Tag:
    """What "Delete selected" would delete; nothing is deleted until this form is sent."""
    say = i18n.of(session)
    _ = say._
    base = f"/sources/{source.uuid}"
    return _page(site_name, _("Delete selected"), [
        tags.h1(say.n_("Delete {n} file of {designation}?", "Delete {n} files of {designation}?", len(chosen),
                       designation=source.designation)),
        tags.ul(*[tags.li(tags.span(item.filename, dir="ltr"), " (", human_size(say, item.size), ")",
                          class_="to-delete") for item in chosen]),
        tags.p(_("Deleted files are gone from the server for good. This cannot be undone.")),
        tags.form(method="post", action=f"{base}/selected")(
            csrf_field(session),
            *[tags.input(type="hidden", name="submission", value=item.uuid) for item in chosen],
            tags.div(class_="actions")(
                tags.button(_("Yes, delete this file") if len(chosen) == 1 else
                            say.n_("Yes, delete these {n} files", "Yes, delete these {n} files", len(chosen)),
                            type="submit", name="action", value="delete-confirmed", class_="danger"),
                tags.a(_("Cancel"), href=base, class_="button secondary"),
            ),
        ),
    ], session, journalist)


# -- account ------------------------------------------------------------------------------

def _language_form(say: Speech, session: Session, journalist: Journalist) -> Tag:
    """The account's language: each named in its own language (a reader of it is choosing)."""
    _ = say._
    chosen = journalist.language or say.code
    options = []
    for code, name in i18n.choices():
        option = tags.option(name, value=code, lang=i18n.speech(code).tag)
        options.append(option(selected="") if code == chosen else option)
    return tags.form(method="post", action="/account/language", class_="card", id="language")(
        csrf_field(session),
        tags.h2(_("Language")),
        tags.p(_("The language of these pages and of your digest mail."), class_="hint"),
        tags.label(_("Language"), for_="language-choice"),
        tags.select(*options, name="language", id="language-choice"),
        tags.div(class_="actions")(tags.button(_("Save the language"), type="submit", class_="secondary")),
    )


def account(site_name: str, session: Session, journalist: Journalist, *, new_passphrase: str | None = None,
            error: str | None = None, code_field: bool = True, extra: Iterable[Any] = ()) -> Tag:
    """``code_field``: the re-check asks for a one-time code (an account with keys has none);
    ``extra``: more sections (the security keys, see ``key_pages``)."""
    say = i18n.of(session)
    _ = say._
    who = _("Username: {name} (administrator)", name=journalist.username) if journalist.is_admin \
        else _("Username: {name}", name=journalist.username)
    body: list[Any] = [tags.h1(_("Your account")), _error(error), tags.p(who)]
    if new_passphrase:
        body += [
            tags.p(_("Your new passphrase (shown once; your other sessions and API tokens have ended):"),
                   class_="flash flash-ok"),
            tags.p(new_passphrase, class_="codename", lang="en", dir="ltr", id="new-passphrase"),
        ]
    body.append(_language_form(say, session, journalist))
    body.append(tags.form(method="post", action="/account/new-passphrase", class_="card")(
        csrf_field(session),
        tags.h2(_("Get a new passphrase")),
        tags.p(_("A new passphrase is generated for you. Confirm it is you first."), class_="hint"),
        tags.label(_("Current passphrase"), for_="passphrase"),
        tags.input(type="password", name="passphrase", id="passphrase", maxlength="1024", required="",
                   autocomplete="current-password", dir="ltr"),
        *([tags.label(_("One-time code"), for_="one_time_code"),
           tags.input(type="text", name="one_time_code", id="one_time_code", inputmode="numeric", maxlength="7",
                      required="", autocomplete="one-time-code", dir="ltr")] if code_field else []),
        tags.div(class_="actions")(tags.button(_("Generate a new passphrase"), type="submit")),
    ))
    body.extend(extra)
    return _page(site_name, _("Account"), body, session, journalist)
# -- admin --------------------------------------------------------------------------------

def certificate_text(say: Speech, status: CertificateStatus, now: datetime.datetime) -> tuple[str, str]:
    """-> (what the users page says of a certificate, a CSS class: ok, warn or bad)."""
    _ = say._
    until = say.day(status.not_after.timestamp()) if status.not_after else "?"
    if status.state == "valid":
        return _("valid until {day}", day=until), "ok"
    if status.state == "expiring":
        days = max(0, (status.not_after - now).days) if status.not_after else 0
        return _("expires {day} ({within})", day=until, within=say.n_("in {n} day", "in {n} days", days)), "warn"
    if status.state == "expired":
        return _("expired {day}", day=until), "bad"
    if status.state == "revoked":
        revoked = status.revoked_at or ""
        try:
            day = say.day(datetime.datetime.fromisoformat(revoked[:10]).replace(
                tzinfo=datetime.timezone.utc).timestamp())
        except ValueError:
            return _("revoked"), "bad"
        return _("revoked {day}", day=day), "bad"
    if status.state == "revoked_not_published":
        return _("revoked on the CA, but not yet in the server's CRL: it still works until a new CRL is copied "
                 "here"), "bad"
    if status.state == "none":
        return _("none issued"), "warn"
    return _("unknown"), "warn"


def second_factor_text(say: Speech, keys: int, hotp: bool) -> str:
    """How an account logs in, for the users page."""
    if keys:
        return say.n_("{n} security key", "{n} security keys", keys)
    return say._("YubiKey (HOTP)") if hotp else say._("app")


def users(site_name: str, session: Session, journalist: Journalist, accounts: list[Journalist],
          error: str | None = None, certificates: Any = None, now: datetime.datetime | None = None,
          factors: dict[int, tuple[int, bool]] | None = None) -> Tag:
    """``certificates``: username -> ``CertificateStatus`` (see ``deaddrop.transport.certificates``), or None;
    ``factors``: account id -> (its security keys, whether it has a YubiKey in HOTP mode)."""
    say = i18n.of(session)
    _ = say._
    now = now or datetime.datetime.now(datetime.timezone.utc)
    rows = []
    unknown = certificates is None
    for a in accounts:
        # Links to confirmation pages: nothing irreversible happens on this page.
        actions = tags.div(class_="actions account-actions")(
            tags.a(_("New passphrase…"), href=f"/admin/users/{a.uuid}/reset-password", class_="button secondary"),
            tags.a(_("New two-factor secret…"), href=f"/admin/users/{a.uuid}/reset-2fa", class_="button secondary"),
        )
        if a.id != journalist.id:
            actions(tags.a(_("Delete…"), href=f"/admin/users/{a.uuid}/delete", class_="button danger"))
        role = (" ", tags.span(_("admin"), class_="role")) if a.is_admin else ()
        status = certificates(a.username) if certificates is not None else None
        unknown = unknown or status is None or status.state == "unknown"
        text, css = certificate_text(say, status, now) if status is not None else (_("unknown"), "warn")
        rows.append(tags.tr(tags.td(a.username, *role, class_="lead"),
                            tags.td(second_factor_text(say, *(factors or {}).get(a.id, (0, False))),
                                    **{"data-label": _("Second factor")}),
                            tags.td(when(say, a.last_login_at), **{"data-label": _("Last login")}),
                            tags.td(tags.span(text, class_=f"cert cert-{css}"), **{"data-label": _("Certificate")}),
                            tags.td(actions)))
    body: list[Any] = [
        tags.h1(_("Users")),
        _error(error),
        tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th(_("Username")), tags.th(_("Second factor")), tags.th(_("Last login")),
                               tags.th(_("Certificate")), tags.th(""))),
            tags.tbody(*rows)),
    ]
    if unknown:
        body.append(tags.p(_("Certificate status comes from the CA's list of issued certificates (its state.json, "
                             "beside the CA certificate this server uses) and the CRL in force. This server has no "
                             "copy of that list; copy it over from the CA machine to see each account's "
                             "certificate here."), class_="hint"))
    body.append(tags.form(method="post", action="/admin/users", class_="card")(
        csrf_field(session),
        tags.h2(_("Add a user")),
        tags.label(_("Username"), for_="username"),
        tags.input(type="text", name="username", id="username", maxlength="64", required="",
                   autocapitalize="off", spellcheck="false", dir="ltr"),
        tags.label(tags.input(type="checkbox", name="is_admin", value="1"), " ", _("Administrator")),
        tags.p(_("A passphrase and a two-factor secret are generated and shown once."), class_="hint"),
        tags.div(class_="actions")(tags.button(_("Add user"), type="submit")),
    ))
    return _page(site_name, _("Users"), body, session, journalist)


# What each account action does, for its confirmation page: (title, explanation, button).
ACCOUNT_ACTIONS = {
    "delete": (N_("Delete {name}?"),
               N_("{name} can no longer log in, and every session and API token of the account ends at once. "
                  "Their replies stay, shown as by a deleted account. This cannot be undone. Revoke their "
                  "client certificate on the CA too."),
               N_("Yes, delete {name}")),
    "reset-password": (N_("A new passphrase for {name}?"),
                       N_("A new passphrase is generated and shown to you once. {name}'s old passphrase stops "
                          "working, and every session and API token of the account ends at once."),
                       N_("Yes, make a new passphrase")),
    "reset-2fa": (N_("A new two-factor secret for {name}?"),
                  N_("A new secret is generated and shown to you once; {name} must add it to their "
                     "authenticator app. Codes from the old one stop working, their YubiKey (HOTP) and security "
                     "keys no longer log them in, their recovery codes stop working, and every session and API "
                     "token of the account ends at once. Do this for someone who lost their key."),
                  N_("Yes, make a new two-factor secret")),
}


def confirm_account_action(site_name: str, session: Session, journalist: Journalist, target: Journalist,
                           action: str) -> Tag:
    _ = i18n.of(session)._
    title, explanation, button = (_(text, name=target.username) for text in ACCOUNT_ACTIONS[action])
    return _page(site_name, title, [
        tags.h1(title),
        tags.p(explanation),
        tags.form(method="post", action=f"/admin/users/{target.uuid}/{action}")(
            csrf_field(session),
            tags.input(type="hidden", name="confirm", value="yes"),
            tags.div(class_="actions")(
                tags.button(button, type="submit", **({"class_": "danger"} if action == "delete" else {})),
                tags.a(_("Cancel"), href="/admin/users", class_="button secondary"),
            ),
        ),
    ], session, journalist)


def credentials(site_name: str, session: Session, journalist: Journalist, username: str, *,
                passphrase: str | None, totp_secret: str | None, totp_uri: str | None, heading: str,
                cert_command: str | None = None) -> Tag:
    """``heading``: said in the page's language by the route."""
    _ = i18n.of(session)._
    body: list[Any] = [
        tags.h1(heading),
        tags.p(_("Give these to {name} in person. They are shown only this once.", name=username),
               class_="flash flash-warning"),
    ]
    if passphrase:
        body += [tags.h2(_("Passphrase")),
                 tags.p(passphrase, class_="codename", lang="en", dir="ltr", id="passphrase")]
    if totp_secret and totp_uri:
        body += [
            tags.h2(_("Two-factor authentication")),
            tags.p(_("Scan this code with an authenticator app (FreeOTP, Aegis, Google Authenticator…), "
                     "or type the secret in by hand.")),
            qr_svg(totp_uri, label=_("QR code of the two-factor secret")),
            tags.p(_("Secret:"), " ", tags.code(totp_secret, dir="ltr", id="totp-secret")),
            tags.p(_("URI:"), " ", tags.code(totp_uri, dir="ltr", id="totp-uri"), class_="hint"),
        ]
    if cert_command:
        body += [
            tags.h2(_("Client certificate")),
            tags.p(_("{name} also needs a client certificate from the offline CA: without it the journalist "
                     "interface does not open, and logins as {name} are accepted only over a certificate issued "
                     "for that username. On the CA machine run:", name=username)),
            tags.p(tags.code(cert_command, id="cert-command"), dir="ltr"),
            tags.p(_("CA_DIR is the CA's directory on that machine; give {name} the .p12 file, its import "
                     "password and the CA's ca.pem.", name=username) if "CA_DIR" in cert_command
                   else _("Give {name} the .p12 file, its import password and the CA's ca.pem.", name=username),
                   class_="hint"),
        ]
    body.append(tags.p(tags.a(_("Back to users"), href="/admin/users")))
    return _page(site_name, heading, body, session, journalist)


def qr_svg(data: str, scale: int = 6, label: str = "QR code of the two-factor secret") -> Tag:
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
        role="img", class_="qr", **{"aria-label": label, "shape-rendering": "crispEdges"},
    )


def settings_page(site_name: str, session: Session, journalist: Journalist, settings: InstanceSettings,
                  error: str | None = None) -> Tag:
    _ = i18n.of(session)._
    refuse = tags.input(type="checkbox", name="refuse_uploads", value="1", id="refuse_uploads")
    if not settings.allow_uploads:
        refuse(checked="")
    return _page(site_name, _("Settings"), [
        tags.h1(_("Instance settings")),
        _error(error),
        tags.form(method="post", action="/admin/settings", class_="card")(
            csrf_field(session),
            tags.label(_("Organisation name"), for_="organisation_name"),
            tags.input(type="text", name="organisation_name", id="organisation_name",
                       value=settings.organisation_name, maxlength="100", required="", dir="auto"),
            tags.label(_("Largest upload, in MB (1 MB = 1,000,000 bytes, as sources are told)"), for_="max_upload_mb"),
            # Text, not a number field: the exact size, in the sources' unit, round-trips as typed.
            tags.input(type="text", name="max_upload_mb", id="max_upload_mb", inputmode="decimal", dir="ltr",
                       value=megabytes(settings.max_upload_size), required="", pattern=r"[0-9]+(\.[0-9]{1,6})?"),
            tags.label(refuse, " ", _("Refuse file uploads (sources can still send messages)")),
            tags.label(_("Delete submissions and replies older than this many days (empty: keep them)"),
                       for_="retention_days"),
            tags.input(type="number", name="retention_days", id="retention_days", min="1", max="36500",
                       value=str(settings.retention_days or "")),
            # What this form showed: a field left as it was changes nothing (see save_settings).
            *[tags.input(type="hidden", name=f"shown_{k}", value=v) for k, v in [
                ("organisation_name", settings.organisation_name),
                ("max_upload_mb", megabytes(settings.max_upload_size)),
                ("retention_days", str(settings.retention_days or "")),
                ("refuse_uploads", "0" if settings.allow_uploads else "1")]],
            tags.p(tags.a(_("Welcome text, submission instructions and logo of the source pages"),
                          href="/admin/source-texts")),
            tags.div(class_="actions")(tags.button(_("Save"), type="submit")),
        ),
    ], session, journalist)
