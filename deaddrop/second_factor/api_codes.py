# -*- test-case-name: tests.integration.test_key_codes -*-
"""One-time codes for the API of an account with security keys (issue 30, item 4).

SecureDrop's API clients (``securedrop-sdk``, ``deaddrop-journalist``) log in with a username, a
passphrase and a one-time code; they cannot touch a security key. So a journalist whose account
has keys asks for an API code on the account page, after logging in there with a key, and types
it where those clients ask for the one-time code. The code:

* is 80 random bits, shown once as ``XXXX-XXXX-XXXX-XXXX`` (base32: no 0/1/8/9 to mistake);
* works once, within ``LIFETIME`` seconds, together with the account's passphrase, and only
  while the account's credentials are unchanged (a new passphrase or reset ends it);
* is stored as a keyed hash only; asking for a new one ends the previous one;
* its use is a security event (``journalist.api_code.used``), as its issue is
  (``journalist.api_code.issued``).

The token the API then gives lives as any API token does (``deaddrop-journalist logout`` ends it).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import sqlite3
from typing import Any

LIFETIME = 600.0
_FORMAT = re.compile(r"[A-Z2-7]{16}")


def new_code() -> str:
    raw = base64.b32encode(secrets.token_bytes(10)).decode("ascii")
    return "-".join(raw[i:i + 4] for i in range(0, 16, 4))


def normalise(typed: Any) -> str | None:
    """As typed (dashes, spaces, lower case allowed) -> the 16 characters, or None."""
    if not isinstance(typed, str) or len(typed) > 64:
        return None
    cleaned = re.sub(r"[\s-]+", "", typed).upper()
    return cleaned if _FORMAT.fullmatch(cleaned) else None


def code_hash(normalised: str) -> str:
    return hashlib.blake2b(normalised.encode("ascii"), digest_size=32, person=b"dd-api-code").hexdigest()


def issue(conn: sqlite3.Connection, journalist_id: int, code: str, now: float) -> float:
    """Store ``code`` (from ``new_code``) as the account's one API code. -> when it expires."""
    row = conn.execute("SELECT auth_epoch FROM journalists WHERE id = ?", (journalist_id,)).fetchone()
    conn.execute("DELETE FROM api_codes WHERE journalist_id = ?", (journalist_id,))
    conn.execute("INSERT INTO api_codes(code_hash, journalist_id, auth_epoch, created_at, expires_at)"
                 " VALUES (?,?,?,?,?)", (code_hash(normalise(code) or ""), journalist_id, row["auth_epoch"], now,
                                         now + LIFETIME))
    return now + LIFETIME


def use(conn: sqlite3.Connection, journalist_id: int, typed: Any, now: float) -> bool:
    """True once for the account's live code (it is used up); False for anything else."""
    cleaned = normalise(typed)
    if cleaned is None:
        return False
    wanted = code_hash(cleaned)
    row = conn.execute(
        "SELECT c.code_hash FROM api_codes c JOIN journalists j ON j.id = c.journalist_id"
        " WHERE c.journalist_id = ? AND c.expires_at > ? AND c.auth_epoch = j.auth_epoch",
        (journalist_id, now)).fetchone()
    if row is None or not hmac.compare_digest(row["code_hash"], wanted):
        return False
    conn.execute("DELETE FROM api_codes WHERE journalist_id = ?", (journalist_id,))
    return True
