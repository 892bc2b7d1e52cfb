"""SQL for second factors beyond TOTP (issue 30): HOTP counters, security keys, recovery codes,
one-time API codes, and resetting an account's second factor.

Like ``journalist_queries``, each function takes the connection first and runs inside the one
transaction ``Database.run`` (or ``db.transaction`` in the admin CLI) opened for it.
"""
from __future__ import annotations

import sqlite3
from typing import cast

from deaddrop.store import journalist_queries as jq

Row = sqlite3.Row


# -- HOTP ----------------------------------------------------------------------------------

def hotp_state(conn: sqlite3.Connection, journalist_id: int) -> Row | None:
    return conn.execute("SELECT hotp_secret, hotp_counter FROM journalists WHERE id = ?", (journalist_id,)).fetchone()


def advance_hotp_counter(conn: sqlite3.Connection, journalist_id: int, past: int) -> bool:
    """The key's code at ``past`` was accepted: the next one expected is ``past + 1``. Never moves back."""
    cur = conn.execute("UPDATE journalists SET hotp_counter = ? WHERE id = ? AND hotp_counter <= ?",
                       (past + 1, journalist_id, past))
    return cur.rowcount == 1


# -- resetting the second factor -------------------------------------------------------------

def _forget_other_factors(conn: sqlite3.Connection, journalist_id: int) -> None:
    conn.execute("DELETE FROM security_keys WHERE journalist_id = ?", (journalist_id,))
    conn.execute("DELETE FROM recovery_codes WHERE journalist_id = ?", (journalist_id,))
    conn.execute("DELETE FROM api_codes WHERE journalist_id = ?", (journalist_id,))


def reset_to_totp(conn: sqlite3.Connection, journalist_id: int, totp_secret: str) -> int | None:
    """A new TOTP secret, and no HOTP, key or recovery code any more; sessions and tokens end.
    -> the new auth epoch, None without such an account."""
    epoch = jq.set_totp_secret(conn, journalist_id, totp_secret)
    if epoch is not None:
        conn.execute("UPDATE journalists SET hotp_secret = NULL, hotp_counter = 0 WHERE id = ?", (journalist_id,))
        _forget_other_factors(conn, journalist_id)
    return epoch


def reset_to_hotp(conn: sqlite3.Connection, journalist_id: int, totp_secret: str, hotp_secret_hex: str) -> int | None:
    """A YubiKey in HOTP mode from now on (its counter from 0); the TOTP secret is replaced by one
    nobody is shown, so no app keeps working. -> the new auth epoch, None without such an account."""
    epoch = reset_to_totp(conn, journalist_id, totp_secret)
    if epoch is not None:
        conn.execute("UPDATE journalists SET hotp_secret = ?, hotp_counter = 0 WHERE id = ?",
                     (hotp_secret_hex, journalist_id))
    return epoch


# -- security keys ---------------------------------------------------------------------------

def key_count(conn: sqlite3.Connection, journalist_id: int) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM security_keys WHERE journalist_id = ?", (journalist_id,)).fetchone()[0])


def insert_key(conn: sqlite3.Connection, journalist_id: int, credential_id: bytes, rp_id: str, credential_data: bytes,
               sign_count: int, aaguid: str, name: str, now: float) -> int:
    """Raises ``sqlite3.IntegrityError`` for a credential id already registered."""
    cur = conn.execute(
        "INSERT INTO security_keys(journalist_id, credential_id, rp_id, public_key, sign_count, aaguid, name, created_at)"
        " VALUES (?,?,?,?,?,?,?,?)", (journalist_id, credential_id, rp_id, credential_data, sign_count, aaguid, name, now))
    return cast(int, cur.lastrowid)  # (an INSERT sets it)


def keys_of(conn: sqlite3.Connection, journalist_id: int) -> list[Row]:
    return conn.execute("SELECT id, name, aaguid, rp_id, created_at, last_used_at FROM security_keys"
                        " WHERE journalist_id = ? ORDER BY id", (journalist_id,)).fetchall()


def keys_for_login(conn: sqlite3.Connection, journalist_id: int, rp_id: str) -> list[Row]:
    return conn.execute("SELECT * FROM security_keys WHERE journalist_id = ? AND rp_id = ? ORDER BY id",
                        (journalist_id, rp_id)).fetchall()


def credential_ids(conn: sqlite3.Connection, journalist_id: int, rp_id: str) -> list[bytes]:
    """Each key's credential data (for the browser's list of keys it may use or must not register again)."""
    return [bytes(r["public_key"]) for r in keys_for_login(conn, journalist_id, rp_id)]


def key_used(conn: sqlite3.Connection, key_id: int, sign_count: int, now: float) -> None:
    conn.execute("UPDATE security_keys SET sign_count = ?, last_used_at = ? WHERE id = ?", (sign_count, now, key_id))


def remove_key(conn: sqlite3.Connection, journalist_id: int, key_id: int, keep_one: bool) -> str | None:
    """Remove one of the account's keys; with ``keep_one`` never its last. -> its name, or None
    (no such key of this account, or the last one kept). The last key gone, its recovery codes go too."""
    row = conn.execute("SELECT name FROM security_keys WHERE id = ? AND journalist_id = ?",
                       (key_id, journalist_id)).fetchone()
    if row is None or (keep_one and key_count(conn, journalist_id) <= 1):
        return None
    conn.execute("DELETE FROM security_keys WHERE id = ?", (key_id,))
    if key_count(conn, journalist_id) == 0:
        conn.execute("DELETE FROM recovery_codes WHERE journalist_id = ?", (journalist_id,))
        conn.execute("DELETE FROM api_codes WHERE journalist_id = ?", (journalist_id,))
    return str(row["name"])


def second_factors(conn: sqlite3.Connection) -> dict[int, tuple[int, bool]]:
    """Account id -> (its security keys, whether it has a YubiKey in HOTP mode), for the users
    page (which says it in the reader's language: an app, a YubiKey, N security keys)."""
    return {row["id"]: (int(row["keys"]), bool(row["hotp"]))
            for row in conn.execute("SELECT j.id, j.hotp_secret IS NOT NULL AS hotp,"
                                    " (SELECT COUNT(*) FROM security_keys k WHERE k.journalist_id = j.id) AS keys"
                                    " FROM journalists j")}
