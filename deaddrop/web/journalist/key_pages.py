"""The security key pages (issue 30): the key step of logging in, registering a key, the keys
on the account page. The first two are the only journalist pages with a script (see
``_webauthn``); without JavaScript, or in a browser without WebAuthn, they say so plainly.
"""
from __future__ import annotations

import json
from typing import Any

from twisted.web.template import Tag, tags

from deaddrop.newsroom.accounts import Journalist
from deaddrop.second_factor.security_keys import MAX_NAME_CHARS, SecurityKey
from deaddrop.i18n.speech import Speech
from deaddrop.web._common.pages import csrf_field
from deaddrop.web.journalist import i18n
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist.pages import _error, _page, when
from deaddrop.web.sessions import Session

NO_WEBAUTHN = N_("This browser cannot use security keys (it has no WebAuthn). Use a current Firefox, Chromium or "
                 "Chrome, or ask your admin.")
NO_SCRIPT = N_("This page needs JavaScript to talk to your security key: allow it for this site (it runs only "
               "the newsroom's own small script, on this page), or use a browser that allows it.")
KEY_LOGIN_ERROR = N_("The key was refused. Touch a key registered to your account, on this address.")


def no_key_address(say: Speech, hosts: list[str]) -> str:
    if not hosts:
        return say._("Security keys need this interface to be reached by a host name, and the server's certificate "
                     "names none: ask your admin to issue it with cert server --host NAME.")
    return say._("Security keys work only when this interface is opened by its name: {names}. Open it that way "
                 "(your admin can tell you which) and try again.", names=", ".join(sorted(hosts)))


def _script_says(session: Session) -> dict[str, str]:
    """What ``webauthn.js`` may say, in the page's language (its keys are the script's)."""
    _ = i18n.of(session)._
    return {
        "registered": _("This key is already registered to your account. Use another key, or keep this one."),
        "address": _("The browser refused to use a key on this address. Open the interface by the name your admin "
                     "gave you (not a number), then try again."),
        "timeout": _("The key was not touched in time, or the request was cancelled. Try again."),
        # {error}: the browser's name for what went wrong (such as "NotReadableError"), filled in by the script.
        "failed": _("The browser could not talk to the key ({error}). Try again."),
        "touch": _("Touch your security key now."),
        "checking": _("Checking…"),
    }


def _ceremony(session: Session, action: str, kind: str, options: dict[str, Any], script: Tag,
              fields: list[Any], button: str) -> list[Any]:
    """A form the script fills in (``data-options``) and sends; the messages it may show (the
    script's own, in the page's language: ``data-says``)."""
    _ = i18n.of(session)._
    return [
        tags.form(method="post", action=action, class_="card", **{"data-webauthn": kind,
                                                                  "data-options": json.dumps(options),
                                                                  "data-says": json.dumps(_script_says(session))})(
            csrf_field(session),
            tags.input(type="hidden", name="credential", value=""),
            *fields,
            tags.div(class_="actions")(tags.button(button, type="button", **{"data-webauthn-start": ""})),
        ),
        tags.p("", id="webauthn-status", role="status", class_="hint"),
        tags.p(_(NO_WEBAUTHN), id="webauthn-missing", role="alert", class_="flash flash-error", hidden=""),
        tags.noscript(tags.p(_(NO_SCRIPT), class_="flash flash-error")),
        script,
    ]


def key_login(site_name: str, session: Session, options: dict[str, Any] | None, script: Tag | None,
              error: str | None = None, problem: str | None = None) -> Tag:
    """The key step of a login (or of a re-check): the passphrase was right."""
    _ = i18n.of(session)._
    body: list[Any] = [tags.h1(_("Touch your security key")), _error(error)]
    if options is None or script is None:
        body.append(tags.p(problem or _(KEY_LOGIN_ERROR), class_="flash flash-error", role="alert"))
    else:
        body.append(tags.p(_("Your passphrase was right. Insert a security key registered to your account, press "
                             "the button, then touch the key."), class_="hint"))
        body += _ceremony(session, "/login/key", "get", options, script, [], _("Use my security key"))
    body.append(tags.form(method="post", action="/login/recovery", class_="card")(
        csrf_field(session),
        tags.h2(_("Lost your keys?")),
        tags.p(_("Use one of your printed recovery codes instead. Each works once."), class_="hint"),
        tags.label(_("Recovery code"), for_="recovery_code"),
        tags.input(type="text", name="recovery_code", id="recovery_code", maxlength="64", autocomplete="off",
                   autocapitalize="characters", spellcheck="false", required="", dir="ltr"),
        tags.div(class_="actions")(tags.button(_("Log in with the recovery code"), type="submit",
                                               class_="secondary")),
    ))
    body.append(tags.p(tags.a(_("Start again"), href="/login")))
    return _page(site_name, _("Security key"), body, session)


def key_enrol(site_name: str, session: Session, journalist: Journalist, options: dict[str, Any] | None,
              script: Tag | None, error: str | None = None, problem: str | None = None, name: str = "") -> Tag:
    _ = i18n.of(session)._
    body: list[Any] = [tags.h1(_("Register a security key")), _error(error)]
    if options is None or script is None:
        body.append(tags.p(problem or "", class_="flash flash-error", role="alert"))
    else:
        body.append(tags.p(_("Give the key a name you will recognise, press the button, then touch the key. "
                             "From then on you log in with your passphrase and a touch of one of your keys; "
                             "one-time codes no longer work for this account."), class_="hint"))
        body += _ceremony(session, "/account/keys/new", "create", options, script, [
            tags.label(_("Name of the key"), for_="key-name"),
            tags.input(type="text", name="name", id="key-name", value=name, maxlength=str(MAX_NAME_CHARS),
                       required="", autocomplete="off", placeholder=_("blue YubiKey"), dir="auto"),
        ], _("Register the key"))
    body.append(tags.p(tags.a(_("Back to your account"), href="/account")))
    return _page(site_name, _("Register a key"), body, session, journalist)


def keys_section(session: Session, keys: list[SecurityKey], enrol_before: float | None,
                 recovery_left: int = 0) -> Tag:
    """The account page's part about keys: each key, and how to add or remove one; with keys,
    the API code and the recovery codes."""
    say = i18n.of(session)
    _ = say._
    parts: list[Any] = [tags.h2(_("Security keys"))]
    if enrol_before is not None:
        parts.append(tags.p(_("Your newsroom requires a security key for this account: register one before {day} "
                              "(after that, one-time codes no longer log you in).", day=say.day(enrol_before)),
                            class_="flash flash-warning", role="status"))
    if not keys:
        parts.append(tags.p(_("You log in with one-time codes. A security key (a YubiKey, say) cannot be phished: "
                              "register one and it replaces the codes."), class_="hint"))
    else:
        rows = [tags.tr(tags.td(k.name, class_="lead", dir="auto"),
                        tags.td(k.aaguid, class_="hint", dir="ltr", **{"data-label": _("Model (AAGUID)")}),
                        tags.td(when(say, k.created_at), **{"data-label": _("Added")}),
                        tags.td(when(say, k.last_used_at), **{"data-label": _("Last used")}),
                        tags.td(tags.form(method="post", action=f"/account/keys/{k.id}/remove")(
                            csrf_field(session),
                            tags.button(_("Remove…"), type="submit", class_="danger",
                                        **{"aria-label": _("Remove {name}", name=k.name)}))))
                for k in keys]
        parts.append(tags.table(class_="rows keys")(
            tags.thead(tags.tr(tags.th(_("Name")), tags.th(_("Model (AAGUID)")), tags.th(_("Added")),
                               tags.th(_("Last used")), tags.th(""))),
            tags.tbody(*rows)))
    parts.append(tags.p(tags.a(_("Register a security key…") if not keys else _("Register another key…"),
                               href="/account/keys/new", class_="button secondary")))
    if keys:
        parts += [
            tags.h3(_("The API")),
            tags.p(_("deaddrop-journalist and SecureDrop's API clients cannot touch a key: give them a one-time API "
                     "code where they ask for the one-time code. It works once, for 10 minutes."), class_="hint"),
            tags.form(method="post", action="/account/api-code")(
                csrf_field(session), tags.button(_("Get an API code"), type="submit", class_="secondary")),
            tags.h3(_("Recovery codes")),
            tags.p(say.n_("{n} unused recovery code. Each logs you in once in place of a key, if you lose your keys.",
                          "{n} unused recovery codes. Each logs you in once in place of a key, if you lose your keys.",
                          recovery_left), class_="hint"),
            tags.form(method="post", action="/account/recovery-codes")(
                csrf_field(session),
                tags.button(_("Make new recovery codes") if recovery_left else _("Make recovery codes"),
                            type="submit", class_="secondary")),
        ]
    return tags.section(class_="card", id="security-keys")(*parts)


def codes_shown(site_name: str, session: Session, journalist: Journalist, title: str, codes: list[str],
                hints: list[str]) -> Tag:
    """Codes shown once (an API code, recovery codes); ``title`` and ``hints`` said by the route."""
    _ = i18n.of(session)._
    return _page(site_name, title, [
        tags.h1(title),
        tags.ul(*[tags.li(code, class_="codename") for code in codes], class_="codes", id="codes", dir="ltr"),
        *[tags.p(hint, class_="hint") for hint in hints],
        tags.p(tags.a(_("Back to your account"), href="/account")),
    ], session, journalist)


def confirm_remove_key(site_name: str, session: Session, journalist: Journalist, key: SecurityKey,
                       last: bool) -> Tag:
    _ = i18n.of(session)._
    consequence = (_("This key will no longer log you in. It is your last key: you will log in with one-time codes "
                     "again, and your recovery codes stop working.") if last
                   else _("This key will no longer log you in. You log in with your other keys."))
    return _page(site_name, _("Remove a key"), [
        tags.h1(_("Remove {name}?", name=key.name)),
        tags.p(consequence),
        tags.form(method="post", action=f"/account/keys/{key.id}/remove")(
            csrf_field(session),
            tags.input(type="hidden", name="confirm", value="yes"),
            tags.div(class_="actions")(
                tags.button(_("Remove the key"), type="submit", class_="danger"),
                tags.a(_("Cancel"), href="/account", class_="button secondary"),
            ),
        ),
    ], session, journalist)
