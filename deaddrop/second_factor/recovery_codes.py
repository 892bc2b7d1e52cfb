# -*- test-case-name: tests.integration.test_key_codes -*-
"""Printed recovery codes of an account with security keys (issue 30, item 5).

Ten codes, each 80 random bits (``XXXX-XXXX-XXXX-XXXX``, base32), made on the account page
after a key login and shown once: the journalist prints them or writes them down. Only their
Argon2id hashes are kept. Each works once, in place of a key at the key step of a login; using
one is a security event, and the journalist is then asked to enrol a new key. Making new codes
replaces the old ones; removing the last key, or an admin's reset, forgets them.

The hashes are Argon2id at a light cost (``COST``): a code is 80 random bits, so what protects it
is its length, not the hash's price, and a login may try every remaining code. The check runs in
the crypto pool, after the passphrase and within the same throttled login attempt.
"""
from __future__ import annotations

import sqlite3
from typing import Any

import nacl.exceptions
import nacl.pwhash.argon2id as argon2id

from deaddrop.crypto.kdf import KdfCost
from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.second_factor.api_codes import new_code, normalise

COUNT = 10
COST = KdfCost(opslimit=2, memlimit=16 * 1024 * 1024)


def make(count: int = COUNT) -> list[str]:
    return [new_code() for _ in range(count)]


def hash_code(code: str, cost: KdfCost = COST) -> str:
    forbid_reactor_thread("Argon2id")
    return argon2id.str((normalise(code) or "").encode("ascii"), opslimit=cost.opslimit,
                        memlimit=cost.memlimit).decode("ascii")


def matching(stored: list[tuple[int, str]], typed: Any) -> int | None:
    """The id of the stored hash ``typed`` matches, else None. Blocking (Argon2id): crypto pool."""
    cleaned = normalise(typed)
    if cleaned is None:
        return None
    forbid_reactor_thread("Argon2id")
    found = None
    for code_id, code_hash in stored:  # every one is tried: the time says nothing of which matched
        try:
            if argon2id.verify(code_hash.encode("ascii"), cleaned.encode("ascii")) and found is None:
                found = code_id
        except (nacl.exceptions.InvalidkeyError, nacl.exceptions.RuntimeError, ValueError):
            pass
    return found


def replace(conn: sqlite3.Connection, journalist_id: int, hashes: list[str], now: float) -> None:
    conn.execute("DELETE FROM recovery_codes WHERE journalist_id = ?", (journalist_id,))
    conn.executemany("INSERT INTO recovery_codes(journalist_id, code_hash, created_at) VALUES (?,?,?)",
                     [(journalist_id, h, now) for h in hashes])


def stored(conn: sqlite3.Connection, journalist_id: int) -> list[tuple[int, str]]:
    return [(r["id"], r["code_hash"]) for r in
            conn.execute("SELECT id, code_hash FROM recovery_codes WHERE journalist_id = ?", (journalist_id,))]


def use(conn: sqlite3.Connection, journalist_id: int, code_id: int) -> int | None:
    """Spend the code: -> how many are left, None if it was already spent (a concurrent login)."""
    cur = conn.execute("DELETE FROM recovery_codes WHERE id = ? AND journalist_id = ?", (code_id, journalist_id))
    if cur.rowcount != 1:
        return None
    return int(conn.execute("SELECT COUNT(*) FROM recovery_codes WHERE journalist_id = ?",
                            (journalist_id,)).fetchone()[0])
