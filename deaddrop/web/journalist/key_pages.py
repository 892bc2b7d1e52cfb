"""The security key pages (issue 30): the key step of logging in, registering a key, the keys
on the account page. The first two are the only journalist pages with a script (see
``_webauthn``); without JavaScript, or in a browser without WebAuthn, they say so plainly.
"""
from __future__ import annotations

import datetime
import json
from typing import Any

from twisted.web.template import Tag, tags

from deaddrop.newsroom.accounts import Journalist
from deaddrop.second_factor.security_keys import MAX_NAME_CHARS, SecurityKey
from deaddrop.web._common.pages import csrf_field
from deaddrop.web.journalist.pages import _error, _page, when
from deaddrop.web.sessions import Session

NO_WEBAUTHN = ("This browser cannot use security keys (it has no WebAuthn). Use a current Firefox, Chromium or "
               "Chrome, or ask your admin.")
NO_SCRIPT = ("This page needs JavaScript to talk to your security key: allow it for this site (it runs only "
             "the newsroom's own small script, on this page), or use a browser that allows it.")
KEY_LOGIN_ERROR = "The key was refused. Touch a key registered to your account, on this address."


def no_key_address(hosts: list[str]) -> str:
    if not hosts:
        return ("Security keys need this interface to be reached by a host name, and the server's certificate "
                "names none: ask your admin to issue it with cert server --host NAME.")
    return ("Security keys work only when this interface is opened by its name: " + ", ".join(sorted(hosts))
            + ". Open it that way (your admin can tell you which) and try again.")


def _ceremony(session: Session, action: str, kind: str, options: dict[str, Any], script: Tag,
              fields: list[Any], button: str) -> list[Any]:
    """A form the script fills in (``data-options``) and sends; the messages it may show."""
    return [
        tags.form(method="post", action=action, class_="card", **{"data-webauthn": kind,
                                                                  "data-options": json.dumps(options)})(
            csrf_field(session),
            tags.input(type="hidden", name="credential", value=""),
            *fields,
            tags.div(class_="actions")(tags.button(button, type="button", **{"data-webauthn-start": ""})),
        ),
        tags.p("", id="webauthn-status", role="status", class_="hint"),
        tags.p(NO_WEBAUTHN, id="webauthn-missing", role="alert", class_="flash flash-error", hidden=""),
        tags.noscript(tags.p(NO_SCRIPT, class_="flash flash-error")),
        script,
    ]


def key_login(site_name: str, session: Session, options: dict[str, Any] | None, script: Tag | None,
              error: str | None = None, problem: str | None = None) -> Tag:
    """The key step of a login (or of a re-check): the passphrase was right."""
    body: list[Any] = [tags.h1("Touch your security key"), _error(error)]
    if options is None or script is None:
        body.append(tags.p(problem or KEY_LOGIN_ERROR, class_="flash flash-error", role="alert"))
    else:
        body.append(tags.p("Your passphrase was right. Insert a security key registered to your account, press "
                           "the button, then touch the key.", class_="hint"))
        body += _ceremony(session, "/login/key", "get", options, script, [], "Use my security key")
    body.append(tags.form(method="post", action="/login/recovery", class_="card")(
        csrf_field(session),
        tags.h2("Lost your keys?"),
        tags.p("Use one of your printed recovery codes instead. Each works once.", class_="hint"),
        tags.label("Recovery code", for_="recovery_code"),
        tags.input(type="text", name="recovery_code", id="recovery_code", maxlength="64", autocomplete="off",
                   autocapitalize="characters", spellcheck="false", required=""),
        tags.div(class_="actions")(tags.button("Log in with the recovery code", type="submit", class_="secondary")),
    ))
    body.append(tags.p(tags.a("Start again", href="/login")))
    return _page(site_name, "Security key", body, session)


def key_enrol(site_name: str, session: Session, journalist: Journalist, options: dict[str, Any] | None,
              script: Tag | None, error: str | None = None, problem: str | None = None, name: str = "") -> Tag:
    body: list[Any] = [tags.h1("Register a security key"), _error(error)]
    if options is None or script is None:
        body.append(tags.p(problem or "", class_="flash flash-error", role="alert"))
    else:
        body.append(tags.p("Give the key a name you will recognise, press the button, then touch the key. "
                           "From then on you log in with your passphrase and a touch of one of your keys; "
                           "one-time codes no longer work for this account.", class_="hint"))
        body += _ceremony(session, "/account/keys/new", "create", options, script, [
            tags.label("Name of the key", for_="key-name"),
            tags.input(type="text", name="name", id="key-name", value=name, maxlength=str(MAX_NAME_CHARS),
                       required="", autocomplete="off", placeholder="blue YubiKey"),
        ], "Register the key")
    body.append(tags.p(tags.a("Back to your account", href="/account")))
    return _page(site_name, "Register a key", body, session, journalist)


def keys_section(session: Session, keys: list[SecurityKey], enrol_before: float | None,
                 recovery_left: int = 0) -> Tag:
    """The account page's part about keys: each key, and how to add or remove one; with keys,
    the API code and the recovery codes."""
    parts: list[Any] = [tags.h2("Security keys")]
    if enrol_before is not None:
        day = datetime.datetime.fromtimestamp(enrol_before, datetime.timezone.utc).strftime("%Y-%m-%d")
        parts.append(tags.p(f"Your newsroom requires a security key for this account: register one before {day} "
                            "(after that, one-time codes no longer log you in).", class_="flash flash-warning",
                            role="status"))
    if not keys:
        parts.append(tags.p("You log in with one-time codes. A security key (a YubiKey, say) cannot be phished: "
                            "register one and it replaces the codes.", class_="hint"))
    else:
        rows = [tags.tr(tags.td(k.name, class_="lead"),
                        tags.td(k.aaguid, class_="hint", **{"data-label": "Model (AAGUID)"}),
                        tags.td(when(k.created_at), **{"data-label": "Added"}),
                        tags.td(when(k.last_used_at), **{"data-label": "Last used"}),
                        tags.td(tags.form(method="post", action=f"/account/keys/{k.id}/remove")(
                            csrf_field(session),
                            tags.button("Remove…", type="submit", class_="danger",
                                        **{"aria-label": f"Remove {k.name}"}))))
                for k in keys]
        parts.append(tags.table(class_="rows keys")(
            tags.thead(tags.tr(tags.th("Name"), tags.th("Model (AAGUID)"), tags.th("Added"), tags.th("Last used"),
                               tags.th(""))),
            tags.tbody(*rows)))
    parts.append(tags.p(tags.a("Register a security key…" if not keys else "Register another key…",
                               href="/account/keys/new", class_="button secondary")))
    if keys:
        parts += [
            tags.h3("The API"),
            tags.p("deaddrop-journalist and SecureDrop's API clients cannot touch a key: give them a one-time API "
                   "code where they ask for the one-time code. It works once, for 10 minutes.", class_="hint"),
            tags.form(method="post", action="/account/api-code")(
                csrf_field(session), tags.button("Get an API code", type="submit", class_="secondary")),
            tags.h3("Recovery codes"),
            tags.p(f"{recovery_left} unused recovery code{'s' if recovery_left != 1 else ''}. Each logs you in "
                   "once in place of a key, if you lose your keys.", class_="hint"),
            tags.form(method="post", action="/account/recovery-codes")(
                csrf_field(session),
                tags.button("Make new recovery codes" if recovery_left else "Make recovery codes", type="submit",
                            class_="secondary")),
        ]
    return tags.section(class_="card", id="security-keys")(*parts)


def codes_shown(site_name: str, session: Session, journalist: Journalist, title: str, codes: list[str],
                hints: list[str]) -> Tag:
    """Codes shown once (an API code, recovery codes)."""
    return _page(site_name, title, [
        tags.h1(title),
        tags.ul(*[tags.li(code, class_="codename") for code in codes], class_="codes", id="codes"),
        *[tags.p(hint, class_="hint") for hint in hints],
        tags.p(tags.a("Back to your account", href="/account")),
    ], session, journalist)


def confirm_remove_key(site_name: str, session: Session, journalist: Journalist, key: SecurityKey,
                       last: bool) -> Tag:
    consequence = ("It is your last key: you will log in with one-time codes again, and your recovery codes "
                   "stop working." if last else "You log in with your other keys.")
    return _page(site_name, "Remove a key", [
        tags.h1(f"Remove {key.name}?"),
        tags.p(f"This key will no longer log you in. {consequence}"),
        tags.form(method="post", action=f"/account/keys/{key.id}/remove")(
            csrf_field(session),
            tags.input(type="hidden", name="confirm", value="yes"),
            tags.div(class_="actions")(
                tags.button("Remove the key", type="submit", class_="danger"),
                tags.a("Cancel", href="/account", class_="button secondary"),
            ),
        ),
    ], session, journalist)
