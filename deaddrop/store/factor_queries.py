"""SQL for second factors beyond TOTP (issue 30): HOTP counters, security keys, recovery codes,
one-time API codes, and resetting an account's second factor.

Like ``journalist_queries``, each function takes the connection first and runs inside the one
transaction ``Database.run`` (or ``db.transaction`` in the admin CLI) opened for it.
"""
from __future__ import annotations

import sqlite3

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
