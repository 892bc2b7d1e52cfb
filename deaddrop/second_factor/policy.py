# -*- test-case-name: tests.integration.test_key_policy -*-
"""Whether an account must log in with a security key (``deaddrop-admin settings
require-security-keys on|admins|off [--grace-days N]``; issue 30, item 2).

``on`` requires keys of every account, ``admins`` of administrators only. From the moment it is
turned on, accounts without a key may still log in with their one-time codes for the grace
period, to enrol one; an account made, or reset by an admin, later gets a grace period of its
own from then. After it, a code login of such an account is refused (``keys_required``). An
account that has keys never logs in with a code anyway, whatever the setting.

Kept in the database's ``settings`` table, so the running server sees a change made by
``deaddrop-admin`` at the next login.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from deaddrop.store import queries

MODES = ("off", "on", "admins")
DEFAULT_GRACE_DAYS = 14
MAX_GRACE_DAYS = 365

_MODE, _SINCE, _GRACE = "require_security_keys", "require_security_keys_since", "require_security_keys_grace_days"


@dataclass(frozen=True)
class KeyPolicy:
    mode: str = "off"
    since: float = 0.0
    grace_days: int = DEFAULT_GRACE_DAYS

    def applies_to(self, is_admin: bool) -> bool:
        return self.mode == "on" or (self.mode == "admins" and is_admin)

    def deadline(self, enrol_by: float | None) -> float:
        """Until when an account this applies to may still log in with a code to enrol a key."""
        return max(self.since + self.grace_days * 86400, enrol_by or 0.0)

    def code_login_refused(self, is_admin: bool, enrol_by: float | None, now: float) -> bool:
        return self.applies_to(is_admin) and now >= self.deadline(enrol_by)

    def enrol_before(self, is_admin: bool, enrol_by: float | None) -> float | None:
        """For an account without keys: the deadline to show it, None if it need not enrol."""
        return self.deadline(enrol_by) if self.applies_to(is_admin) else None


def load(conn: sqlite3.Connection) -> KeyPolicy:
    stored = queries.get_settings(conn)
    mode = stored.get(_MODE, "off")
    return KeyPolicy(mode if mode in MODES else "on",  # an unreadable setting fails closed
                     float(stored.get(_SINCE, "0") or 0), int(stored.get(_GRACE, DEFAULT_GRACE_DAYS) or 0))


def save(conn: sqlite3.Connection, mode: str, grace_days: int | None, now: float) -> KeyPolicy:
    """The grace period starts when keys become required (not when the setting is repeated)."""
    if mode not in MODES:
        raise ValueError(f"require-security-keys is one of {', '.join(MODES)}")
    if grace_days is not None and not 0 <= grace_days <= MAX_GRACE_DAYS:
        raise ValueError(f"--grace-days must be 0 to {MAX_GRACE_DAYS}")
    before = load(conn)
    queries.set_setting(conn, _MODE, mode)
    if mode != "off" and before.mode == "off":
        queries.set_setting(conn, _SINCE, repr(now))
    if grace_days is not None:
        queries.set_setting(conn, _GRACE, str(grace_days))
    return load(conn)


def grant_grace(conn: sqlite3.Connection, journalist_id: int, now: float) -> None:
    """While keys are required, a new or reset account gets the grace period from now to enrol one."""
    keys = load(conn)
    if keys.mode != "off":
        conn.execute("UPDATE journalists SET keys_enrol_by = ? WHERE id = ?",
                     (now + keys.grace_days * 86400, journalist_id))
