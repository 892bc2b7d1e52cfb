# -*- test-case-name: tests.test_hotp,tests.integration.test_hotp_accounts -*-
"""Checking a typed HOTP code against an account, atomically.

Runs on the database thread inside one transaction (``Database.run``): the counter is read, the
code matched and the counter moved in that transaction, so two logins racing with the same code
cannot both pass. (TOTP stays in ``deaddrop.newsroom.accounts``, as before.)
"""
from __future__ import annotations

import sqlite3
from typing import Any

from deaddrop.second_factor import hotp
from deaddrop.store import factor_queries as fq


def accept_hotp(conn: sqlite3.Connection, journalist_id: int, typed: Any) -> int:
    """-> the counter value the code was made at (now used up), ``hotp.HOTP_REUSED`` or ``hotp.HOTP_BAD``."""
    state = fq.hotp_state(conn, journalist_id)
    if state is None or not state["hotp_secret"]:
        return hotp.HOTP_BAD
    matched = hotp.match(bytes.fromhex(state["hotp_secret"]), typed, int(state["hotp_counter"]))
    if matched >= 0 and not fq.advance_hotp_counter(conn, journalist_id, matched):
        return hotp.HOTP_REUSED
    return matched
