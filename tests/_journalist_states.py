"""A crawler of the journalist interface (issue 31 item 3): every page a journalist or an admin
can reach without a security key, its refusals and flashes, in one language.

``crawl(testcase, server, people, code)`` logs in as the admin of ``people`` (over the admin's
own certificate), chooses ``code`` on the account page (as a journalist would), and visits each
state; the login page and its refusals are visited by a browser with no session that asks for
``code`` in ``Accept-Language``. -> {state: html}.
"""
from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import inlineCallbacks

from deaddrop.web.journalist import i18n
from tests._support import JournalistBrowser, TotpDevice

_SOURCE_LINK = re.compile(r'href="/sources/([0-9a-f-]{36})"')
_SUBMISSION_BOX = re.compile(r'name="submission" value="([0-9a-f-]{36})"')
_DESK_LINK = re.compile(r'href="/admin/desks/([0-9a-f-]{36})"')


@dataclass
class People:
    admin: Any  # JournalistAccount
    admin_cert: Any
    admin_device: TotpDevice
    other: Any  # an account whose logins the crawl fails on purpose (never logged in)
    other_cert: Any


@inlineCallbacks
def crawl(testcase: Any, server: Any, people: People, code: str):
    seen: dict[str, str] = {}
    tag = i18n.speech(code).tag
    asks = {"User-Agent": JournalistBrowser.USER_AGENT, "Accept-Language": f"{tag},en;q=0.5"}

    def browser(cert: Any) -> JournalistBrowser:
        b = JournalistBrowser(server, cert)
        testcase.addCleanup(b.close)
        return b

    # -- before logging in: the browser's language -------------------------------------------
    anonymous = browser(people.other_cert)
    _r, seen["login"] = yield anonymous.get("/login", headers=asks)
    _r, seen["login-failed"] = yield anonymous.post("/login", headers=asks, data={
        "csrf_token": anonymous.csrf(seen["login"]), "username": people.other.username,
        "passphrase": "not the passphrase", "one_time_code": "000000"})
    _r, seen["login-wrong-certificate"] = yield anonymous.post("/login", headers=asks, data={
        "csrf_token": anonymous.csrf(seen["login"]), "username": people.admin.username,
        "passphrase": "not the passphrase", "one_time_code": "000000"})
    _r, seen["login-expired"] = yield anonymous.post("/login", headers=asks, data={"csrf_token": "stale"})
    _r, seen["not-found-anonymous"] = yield anonymous.get("/no/such/page", headers=asks)

    # -- logged in: the account's language ---------------------------------------------------
    b = browser(people.admin_cert)
    _r, html = yield b.get("/login", headers=asks)
    _r, html = yield b.post("/login", headers=asks, data={
        "csrf_token": b.csrf(html), "username": people.admin.username, "passphrase": people.admin.passphrase,
        "one_time_code": people.admin_device.code()})
    _r, html = yield b.get("/account")
    _r, seen["account-language-saved"] = yield b.post("/account/language",
                                                     data={"csrf_token": b.csrf(html), "language": code})
    _r, seen["sources"] = yield b.get("/sources")
    [source] = _SOURCE_LINK.findall(seen["sources"])[:1]
    _r, seen["sources-none-match"] = yield b.get("/sources?q=zzzzzz")
    _r, seen["sources-select-all"] = yield b.get("/sources?select=all")
    _r, seen["sources-starred"] = yield b.post("/sources/selected", data={
        "csrf_token": b.csrf(), "action": "star", "source": source, "page": "1"})
    _r, seen["sources-nothing-selected"] = yield b.post("/sources/selected", data={
        "csrf_token": b.csrf(), "action": "read", "page": "1"})
    _r, seen["sources-confirm-delete"] = yield b.post("/sources/selected", data={
        "csrf_token": b.csrf(), "action": "delete", "source": source, "page": "1"})
    _r, seen["sources-bad-action"] = yield b.post("/sources/selected", data={
        "csrf_token": b.csrf(), "action": "explode", "page": "1"})
    _r, seen["source"] = yield b.get(f"/sources/{source}")
    items = _SUBMISSION_BOX.findall(seen["source"])
    _r, seen["source-marked-unread"] = yield b.post(f"/sources/{source}/unread", data={"csrf_token": b.csrf()})
    _r, seen["source-confirm-delete-files"] = yield b.post(f"/sources/{source}/selected", data={
        "csrf_token": b.csrf(), "action": "delete", "submission": items})
    _r, seen["source-nothing-selected"] = yield b.post(f"/sources/{source}/selected", data={
        "csrf_token": b.csrf(), "action": "read"})
    _r, seen["source-reply-empty"] = yield b.post(f"/sources/{source}/reply", data={
        "csrf_token": b.csrf(), "reply": "   "})
    _r, seen["source-confirm-delete"] = yield b.get(f"/sources/{source}/delete")
    _r, seen["source-not-found"] = yield b.get(f"/sources/{uuidlib.uuid4()}")
    _r, seen["stale-form"] = yield b.post(f"/sources/{source}/star", data={"csrf_token": "stale", "starred": "1"})
    _r, seen["account"] = yield b.get("/account")
    _r, seen["account-wrong-passphrase"] = yield b.post("/account/new-passphrase", data={
        "csrf_token": b.csrf(), "passphrase": "not it", "one_time_code": "000000"})
    _r, seen["key-enrol-no-name"] = yield b.get("/account/keys/new")
    _r, seen["api-code-without-a-key"] = yield b.post("/account/api-code", data={"csrf_token": b.csrf()})
    _r, seen["users"] = yield b.get("/admin/users")
    other = people.other.uuid
    for action in ("delete", "reset-password", "reset-2fa"):
        _r, seen[f"users-confirm-{action}"] = yield b.get(f"/admin/users/{other}/{action}")
    _r, seen["users-bad-name"] = yield b.post("/admin/users", data={"csrf_token": b.csrf(), "username": "-no-"})
    _r, seen["users-added"] = yield b.post("/admin/users", data={
        "csrf_token": b.csrf(), "username": f"new-{code}".replace("_", "-")})
    _r, seen["users-no-such-user"] = yield b.get(f"/admin/users/{uuidlib.uuid4()}/delete")
    _r, seen["settings"] = yield b.get("/admin/settings")
    _r, seen["settings-refused"] = yield b.post("/admin/settings", data={
        "csrf_token": b.csrf(), "max_upload_mb": "0", "shown_max_upload_mb": "500"})
    _r, seen["settings-saved"] = yield b.post("/admin/settings", data={
        "csrf_token": b.csrf(), "retention_days": "30", "shown_retention_days": ""})
    _r, seen["source-texts"] = yield b.get("/admin/source-texts")
    _r, seen["source-texts-saved"] = yield b.post("/admin/source-texts", data={
        "csrf_token": b.csrf(), "language": "de", "welcome": "Willkommen.", "instructions": ""})
    _r, seen["desks"] = yield b.get("/admin/desks")
    [desk] = _DESK_LINK.findall(seen["desks"])[:1]
    _r, seen["desks-bad-name"] = yield b.post("/admin/desks", data={"csrf_token": b.csrf(), "name": "", "key": "x"})
    _r, seen["desk"] = yield b.get(f"/admin/desks/{desk}")
    _r, seen["desk-saved"] = yield b.post(f"/admin/desks/{desk}/settings", data={
        "csrf_token": b.csrf(), "retention_days": ""})
    _r, seen["desk-confirm-remove"] = yield b.get(f"/admin/desks/{desk}/remove")
    _r, seen["desk-not-removed"] = yield b.post(f"/admin/desks/{desk}/remove", data={
        "csrf_token": b.csrf(), "confirm": "yes"})
    _r, seen["not-found"] = yield b.get("/no/such/page")
    return seen
