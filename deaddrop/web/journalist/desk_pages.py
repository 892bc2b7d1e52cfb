"""The admin pages for desks (issue 29): the list and a form to add one, a desk's own page
(name, members, what sources read of it in each language, settings, its key), and the pages
that confirm replacing a key and removing a desk. Rendered here; the routes are ``desks``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.web.template import Tag, tags

from deaddrop.newsroom.accounts import Journalist
from deaddrop.newsroom.desk_admin import MAX_DESCRIPTION, MAX_KEY_CHARS, MAX_NAME, MAX_RETENTION_DAYS
from deaddrop.newsroom.languages import LANGUAGES
from deaddrop.web._common.pages import csrf_field
from deaddrop.web.journalist import i18n
from deaddrop.web.journalist.pages import _error, _page
from deaddrop.web.sessions import Session


@dataclass(frozen=True)
class DeskView:
    """A desk as the admin pages show it."""

    uuid: str
    name: str
    is_default: bool
    fingerprint: str | None
    members: tuple[str, ...]
    sources: int
    show_members: bool
    retention_days: int | None
    texts: dict[str, dict[str, str]]


def grouped(fingerprint: str | None) -> str:
    """A fingerprint in groups of four, as gpg prints it (easier to compare aloud)."""
    if not fingerprint:
        return ""
    return " ".join(fingerprint[i:i + 4] for i in range(0, len(fingerprint), 4))


def _fingerprint(fingerprint: str | None, none: str) -> Tag:
    return tags.code(grouped(fingerprint), dir="ltr", class_="fingerprint") if fingerprint else tags.span(none)


def desks_page(site_name: str, session: Session, journalist: Journalist, desks: list[DeskView],
               error: str | None = None) -> Tag:
    say = i18n.of(session)
    _ = say._
    rows = []
    for d in desks:
        name: list[Any] = [tags.a(d.name, href=f"/admin/desks/{d.uuid}", dir="auto")]
        if d.is_default:
            name += [" ", tags.span(_("default"), class_="role")]
        rows.append(tags.tr(
            tags.td(*name, class_="lead"),
            tags.td(_fingerprint(d.fingerprint, _("none yet")), **{"data-label": _("Key")}),
            tags.td(", ".join(d.members) or _("nobody"), **{"data-label": _("Members")}),
            tags.td(say.number(d.sources), **{"data-label": _("Sources")}),
        ))
    return _page(site_name, _("Desks"), [
        tags.h1(_("Desks")),
        tags.p(_("Each desk has its own submission key (its own Secure Viewing Station) and its own members. With "
                 "more than one desk, each source chooses the desks that read it; a journalist sees only the "
                 "sources of their desks.")),
        _error(error),
        tags.table(class_="rows")(
            tags.thead(tags.tr(tags.th(_("Desk")), tags.th(_("Key")), tags.th(_("Members")), tags.th(_("Sources")))),
            tags.tbody(*rows)),
        tags.form(method="post", action="/admin/desks", class_="card")(
            tags.h2(_("Add a desk")),
            csrf_field(session),
            tags.label(_("Name"), for_="name"),
            tags.input(type="text", name="name", id="name", maxlength=str(MAX_NAME), required="", dir="auto"),
            tags.label(_("Its public key (the submission-public.asc that deaddrop-svs init wrote on the desk's own "
                         "SVS)"), for_="key"),
            tags.textarea(name="key", id="key", rows="6", required="", dir="ltr", spellcheck="false",
                          maxlength=str(MAX_KEY_CHARS)),
            tags.label(_("What sources read about it (English)"), for_="description"),
            tags.textarea(name="description", id="description", rows="3", maxlength=str(MAX_DESCRIPTION),
                          dir="auto"),
            tags.div(class_="actions")(tags.button(_("Add the desk"), type="submit")),
        ),
    ], session, journalist)


def desk_page(site_name: str, session: Session, journalist: Journalist, desk: DeskView, accounts: list[Journalist],
              error: str | None = None) -> Tag:
    say = i18n.of(session)
    _ = say._
    base = f"/admin/desks/{desk.uuid}"
    body: list[Any] = [
        tags.h1(desk.name, dir="auto"),
        _error(error),
        tags.p(say.n_("{n} source has chosen this desk.", "{n} sources have chosen this desk.", desk.sources)),
        tags.form(method="post", action=f"{base}/rename", class_="card")(
            tags.h2(_("Name")),
            csrf_field(session),
            tags.label(_("The desk's name (what admins see, and sources where it has no name in their language)"),
                       for_="new_name"),
            tags.input(type="text", name="name", id="new_name", value=desk.name, maxlength=str(MAX_NAME), required="",
                       dir="auto"),
            tags.div(class_="actions")(tags.button(_("Rename"), type="submit")),
        ),
        _members_form(say, session, base, desk, accounts),
        _settings_form(say, session, base, desk),
        _texts(say, session, base, desk),
        _key_section(say, session, base, desk),
    ]
    if not desk.is_default:
        body.append(tags.p(tags.a(_("Remove this desk…"), href=f"{base}/remove", class_="button danger")))
    body.append(tags.p(tags.a(_("Back to desks"), href="/admin/desks")))
    return _page(site_name, desk.name, body, session, journalist)


def _members_form(say: Any, session: Session, base: str, desk: DeskView, accounts: list[Journalist]) -> Tag:
    _ = say._
    boxes = []
    for i, account in enumerate(accounts):
        box = tags.input(type="checkbox", name="member", value=account.username, id=f"member-{i}")
        if account.username in desk.members:
            box(checked="")
        boxes.append(tags.label(box, account.username, for_=f"member-{i}"))
    return tags.form(method="post", action=f"{base}/members", class_="card")(
        tags.h2(_("Members")),
        tags.p(_("Members read this desk's sources. A journalist may be on several desks."), class_="hint"),
        csrf_field(session),
        # The accounts this form showed: only their membership changes (one added meanwhile stays as it is).
        *[tags.input(type="hidden", name="shown", value=a.username) for a in accounts],
        *boxes,
        tags.div(class_="actions")(tags.button(_("Save members"), type="submit")),
    )


def _settings_form(say: Any, session: Session, base: str, desk: DeskView) -> Tag:
    _ = say._
    show = tags.input(type="checkbox", name="show_members", value="1", id="show_members")
    if desk.show_members:
        show(checked="")
    return tags.form(method="post", action=f"{base}/settings", class_="card")(
        tags.h2(_("Settings")),
        csrf_field(session),
        tags.label(show, " ", _("Sources see the names of its members (otherwise only how many they are)"),
                   for_="show_members"),
        tags.label(_("Delete what this desk was sent after this many days (empty: the instance's setting)"),
                   for_="desk_retention"),
        tags.input(type="number", name="retention_days", id="desk_retention", min="1", max=str(MAX_RETENTION_DAYS),
                   value=str(desk.retention_days or "")),
        tags.div(class_="actions")(tags.button(_("Save settings"), type="submit")),
    )


def _texts(say: Any, session: Session, base: str, desk: DeskView) -> Tag:
    """A form per source language, each folded away until opened (24 of them)."""
    _ = say._
    forms = []
    for code, (language, direction) in LANGUAGES.items():
        entry = desk.texts.get(code, {})
        summary = f"{language} ({code})" + (f": {entry['name']}" if entry.get("name") else "")
        forms.append(tags.details(
            tags.summary(summary),
            tags.form(method="post", action=f"{base}/texts")(
                csrf_field(session),
                tags.input(type="hidden", name="language", value=code),
                tags.label(_("Name"), for_=f"title-{code}"),
                tags.input(type="text", name="title", id=f"title-{code}", value=entry.get("name", ""),
                           maxlength=str(MAX_NAME), lang=code, dir=direction),
                tags.label(_("Description"), for_=f"description-{code}"),
                tags.textarea(entry.get("description", ""), name="description", id=f"description-{code}", rows="3",
                              maxlength=str(MAX_DESCRIPTION), lang=code, dir=direction),
                tags.div(class_="actions")(tags.button(_("Save"), type="submit")),
            ),
        ))
    return tags.section(class_="card")(
        tags.h2(_("What sources read")),
        tags.p(_("In each source language: the desk's name and what it is about. Left empty, sources read the "
                 "English, else the desk's name."), class_="hint"),
        *forms,
    )


def _key_section(say: Any, session: Session, base: str, desk: DeskView) -> Tag:
    _ = say._
    section = tags.section(class_="card")(
        tags.h2(_("Submission key")),
        tags.p(_("Fingerprint:"), " ", _fingerprint(desk.fingerprint, _("none yet"))),
    )
    if desk.is_default:
        return section(tags.p(_("This is the instance's submission key. It is replaced only when the server is "
                                "started with --submission-key NEW.asc --replace-submission-key."), class_="hint"))
    return section(
        tags.p(_("Compare it with the fingerprint the desk's SVS printed at deaddrop-svs init."), class_="hint"),
        tags.form(method="post", action=f"{base}/key")(
            csrf_field(session),
            tags.label(_("A new public key for this desk"), for_="new_key"),
            tags.textarea(name="key", id="new_key", rows="6", required="", dir="ltr", spellcheck="false",
                          maxlength=str(MAX_KEY_CHARS)),
            tags.div(class_="actions")(tags.button(_("Replace the key…") if desk.fingerprint else _("Set the key"),
                                                   type="submit", class_="secondary")),
        ),
    )


def confirm_key(site_name: str, session: Session, journalist: Journalist, desk: DeskView, armored: str,
                fingerprint: str) -> Tag:
    """Replacing a desk's key, said plainly, with both fingerprints; nothing changes until confirmed."""
    _ = i18n.of(session)._
    return _page(site_name, _("Replace the key of {name}", name=desk.name), [
        tags.h1(_("Replace the key of {name}", name=desk.name)),
        tags.p(_("Every new submission to this desk will be encrypted to the new key: whoever holds it reads what "
                 "this desk's sources send from now on. What was sent before stays readable by the old key only. "
                 "This is logged as a security event."), class_="flash flash-warning"),
        tags.p(_("Current key:"), " ", _fingerprint(desk.fingerprint, "")),
        tags.p(_("New key:"), " ", _fingerprint(fingerprint, "")),
        tags.form(method="post", action=f"/admin/desks/{desk.uuid}/key")(
            csrf_field(session),
            tags.input(type="hidden", name="key", value=armored),
            tags.input(type="hidden", name="confirm", value="yes"),
            tags.label(tags.input(type="checkbox", name="compared", value="yes", id="compared", required=""), " ",
                       _("I compared the new fingerprint with the one the desk's SVS printed"), for_="compared"),
            tags.div(class_="actions")(
                tags.button(_("Replace the key"), type="submit", class_="danger"),
                tags.a(_("Cancel"), href=f"/admin/desks/{desk.uuid}", class_="button secondary"),
            ),
        ),
    ], session, journalist)


def confirm_remove(site_name: str, session: Session, journalist: Journalist, desk: DeskView) -> Tag:
    _ = i18n.of(session)._
    return _page(site_name, _("Remove {name}", name=desk.name), [
        tags.h1(_("Remove {name}", name=desk.name)),
        tags.p(_("The desk, its key and its members' access go. A desk that a source has chosen cannot be removed: "
                 "what was sent to it stays where it was sent.")),
        tags.form(method="post", action=f"/admin/desks/{desk.uuid}/remove")(
            csrf_field(session),
            tags.input(type="hidden", name="confirm", value="yes"),
            tags.div(class_="actions")(
                tags.button(_("Remove the desk"), type="submit", class_="danger"),
                tags.a(_("Cancel"), href=f"/admin/desks/{desk.uuid}", class_="button secondary"),
            ),
        ),
    ], session, journalist)
