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


def accept_hotp(conn: sqlite3.Connection, journalist_id: int, typed: Any, first: int | None = None) -> hotp.Matched:
    """The typed code, matched (``first``: the far code of a resynchronisation begun at the last
    login, see ``hotp.match``) and, if accepted, used up: a code a concurrent login used first
    is reused."""
    state = fq.hotp_state(conn, journalist_id)
    if state is None or not state["hotp_secret"]:
        return hotp.Matched(hotp.HOTP_BAD)
    matched = hotp.match(bytes.fromhex(state["hotp_secret"]), typed, int(state["hotp_counter"]), first)
    if matched.accepted and not fq.advance_hotp_counter(conn, journalist_id, matched.counter):
        return hotp.Matched(hotp.HOTP_REUSED)
    return matched
