# -*- test-case-name: tests.integration.test_desks,tests.integration.test_desk_admin_pages -*-
"""How desks are changed (issue 29): the one set of rules behind ``deaddrop-admin desk ...`` and
the admin pages, so both refuse the same things and log the same events.

Each change runs inside one transaction on a database connection (the command line's own, or
the server's through ``Database.run``) and returns the security event it makes (``Change``);
the caller emits it, with the admin's name on the web. A refusal is ``DeskRefused``: a reason
(a fixed word) and its values, which each interface says in its own words (the command line
names its flags, the pages speak the admin's language).

A desk's key is treated as the instance's submission key is: checked as the server checks that
one (one public key that can encrypt, not expired, never a secret key), never shared with
another desk, and replaced only when the admin says so explicitly (``replace``): every new
submission to the desk is then readable by whoever holds the new key.
"""
from __future__ import annotations

import shutil
import sqlite3
import tempfile
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from deaddrop.crypto.gpg import GpgError, Keyring, SubmissionKeyError
from deaddrop.newsroom.languages import LANGUAGES as SOURCE_LANGUAGES
from deaddrop.store import desk_queries as dq
from deaddrop.store import journalist_queries as jq

MAX_NAME = 80
MAX_DESCRIPTION = 1000
MAX_RETENTION_DAYS = 36500
MAX_KEY_CHARS = 256 * 1024


class DeskRefused(Exception):
    """A desk change that is not made. ``reason``: name_taken, bad_name, no_such_desk, key_in_use,
    not_a_key, default_key, key_differs, has_sources, is_default, no_such_journalist, too_long,
    bad_retention, bad_language; ``values`` say which (names, fingerprints, counts)."""

    def __init__(self, reason: str, **values: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.values = values


@dataclass(frozen=True)
class Change:
    """A security event to emit for a change that was made (``event`` and its fields)."""

    event: str
    fields: dict[str, Any] = field(default_factory=dict)


def desk_name(text: str) -> str:
    """A desk name as kept: spaces collapsed; 1 to MAX_NAME printable characters."""
    name = " ".join(text.split())
    if not name or len(name) > MAX_NAME or any(not c.isprintable() for c in name):
        raise DeskRefused("bad_name", limit=MAX_NAME)
    return name


def retention_days(text: str) -> int | None:
    """``N`` days (1 to MAX_RETENTION_DAYS), or ``off``/empty: the instance's setting."""
    text = text.strip()
    if text in ("", "off"):
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_RETENTION_DAYS:
        raise DeskRefused("bad_retention", limit=MAX_RETENTION_DAYS)
    return int(text)


def check_key(armored: str) -> str:
    """Blocking (gpg, in a throwaway keyring): the fingerprint of the one public key that can
    encrypt in ``armored``, as the server checks the submission key."""
    if len(armored) > MAX_KEY_CHARS:
        raise DeskRefused("not_a_key", problem="the file is larger than 256 KiB")
    home = tempfile.mkdtemp(prefix="dd-desk-", dir="/tmp")  # gpg-agent's socket path is short
    keyring = Keyring(home)
    try:
        return keyring.import_submission_key(armored)
    except (SubmissionKeyError, GpgError) as e:
        raise DeskRefused("not_a_key", problem=str(e)) from None
    finally:
        keyring.close()
        shutil.rmtree(home, ignore_errors=True)


def desk(conn: sqlite3.Connection, *, name: str | None = None, uuid: str | None = None) -> Any:
    """The desk row named ``name`` (case-insensitively; its spaces as ``desk_name`` keeps them, so
    the name a rename was given finds the desk) or with ``uuid``."""
    row = dq.desk_by_name(conn, " ".join(name.split())) if name is not None else _by_uuid(conn, uuid or "")
    if row is None:
        raise DeskRefused("no_such_desk", name=name or uuid)
    return row


def _by_uuid(conn: sqlite3.Connection, uuid: str) -> Any:
    row = conn.execute("SELECT id FROM desks WHERE uuid = ?", (uuid,)).fetchone()
    return dq.desk_by_id(conn, row[0]) if row else None


def _key_free(conn: sqlite3.Connection, fingerprint: str, other_than: int | None = None) -> None:
    for row in dq.all_desks(conn):
        if row["key_fingerprint"] == fingerprint and row["id"] != other_than:
            raise DeskRefused("key_in_use", fingerprint=fingerprint, desk=row["name"])


def _guarded(change: Any, *args: Any) -> Any:
    try:
        return change(*args)
    except dq.DeskError as e:
        raise DeskRefused("name_taken", detail=str(e)) from None


# -- the changes (each in its caller's transaction) --------------------------------------------

def add(conn: sqlite3.Connection, name: str, armored: str, fingerprint: str, description: str,
        now: float) -> Change:
    """A new desk with its own key (``fingerprint``: ``check_key``'s) and no members."""
    name = desk_name(name)
    description = description.strip()
    if len(description) > MAX_DESCRIPTION:
        raise DeskRefused("too_long", what="description", limit=MAX_DESCRIPTION)
    _key_free(conn, fingerprint)
    texts = {"en": {"description": description}} if description else {}
    _guarded(dq.insert_desk, conn, str(uuidlib.uuid4()), name, fingerprint, armored, float(int(now // 86400 * 86400)),
             texts)
    return Change("admin.desk.added", {"target": name, "fingerprint": fingerprint})


def rename(conn: sqlite3.Connection, row: Any, new_name: str) -> Change:
    new = desk_name(new_name)
    _guarded(dq.rename_desk, conn, row["id"], new)
    return Change("admin.desk.renamed", {"target": new, "detail": f"was {row['name']}"})


def remove(conn: sqlite3.Connection, row: Any) -> Change:
    """Refused for the default desk (its key is the instance's) and while a source has chosen it."""
    if row["is_default"]:
        raise DeskRefused("is_default", desk=row["name"])
    if row["sources"]:
        raise DeskRefused("has_sources", desk=row["name"], count=row["sources"])
    dq.remove_desk(conn, row["id"])
    return Change("admin.desk.removed", {"target": row["name"]})


def member(conn: sqlite3.Connection, row: Any, username: str, add: bool) -> Change | None:
    """``username`` joins (``add``) or leaves the desk. -> None if it already was so."""
    account = jq.journalist_by_username(conn, username)
    if account is None:
        raise DeskRefused("no_such_journalist", username=username)
    changed = (dq.add_member if add else dq.remove_member)(conn, row["id"], account["id"])
    if not changed:
        return None
    return Change("admin.desk.member_added" if add else "admin.desk.member_removed",
                  {"target": account["username"], "detail": f"desk {row['name']}"})


def key(conn: sqlite3.Connection, row: Any, armored: str, fingerprint: str, replace: bool) -> Change | None:
    """The desk's key set, or replaced if ``replace`` says so. -> None if it is the key it has."""
    if row["is_default"]:
        raise DeskRefused("default_key", desk=row["name"])
    if fingerprint == row["key_fingerprint"]:
        return None
    _key_free(conn, fingerprint, row["id"])
    if row["key_fingerprint"] and not replace:
        raise DeskRefused("key_differs", desk=row["name"], fingerprint=fingerprint, current=row["key_fingerprint"])
    dq.set_key(conn, row["id"], fingerprint, armored)
    if row["key_fingerprint"]:
        return Change("admin.desk.key_replaced", {"target": row["name"], "fingerprint": fingerprint,
                                                  "detail": f"replaced {row['key_fingerprint']}"})
    return Change("admin.desk.key_set", {"target": row["name"], "fingerprint": fingerprint})


def describe(conn: sqlite3.Connection, row: Any, language: str, title: str | None,
             description: str | None) -> tuple[Change, dict[str, dict[str, str]]]:
    """What sources read of the desk in ``language`` (None: left as it is; "": removed, so the
    English, else the name, is shown). -> the event, and every language's texts now."""
    if language not in SOURCE_LANGUAGES:
        raise DeskRefused("bad_language", language=language)
    texts = dq.texts_of(row)
    entry = dict(texts.get(language, {}))
    for what, value, limit in (("name", title, MAX_NAME), ("description", description, MAX_DESCRIPTION)):
        if value is None:
            continue
        value = value.strip()
        if len(value) > limit:
            raise DeskRefused("too_long", what=what, limit=limit)
        if value:
            entry[what] = value
        else:
            entry.pop(what, None)
    if entry:
        texts[language] = entry
    else:
        texts.pop(language, None)
    dq.set_texts(conn, row["id"], texts)
    return Change("admin.desk.described", {"target": row["name"], "detail": f"language {language}"}), texts


def configure(conn: sqlite3.Connection, row: Any, show_members: bool | None = None,
              retention: int | None | str = "unchanged") -> Change:
    """Whether sources see its members' names; how long it keeps what it was sent (None: the
    instance's ``--retention-days``; "unchanged": as it is)."""
    if show_members is not None:
        dq.set_show_members(conn, row["id"], show_members)
    if retention != "unchanged":
        assert retention is None or isinstance(retention, int)
        dq.set_retention(conn, row["id"], retention)
    return Change("admin.desk.changed", {"target": row["name"]})
