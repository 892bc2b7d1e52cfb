"""``deaddrop-admin settings require-security-keys on|admins|off [--grace-days N]`` (issue 30, item 2).

``on`` requires a security key of every journalist account, ``admins`` of administrators only.
Accounts without a key keep logging in with their one-time codes for the grace period (from
the moment keys became required, or from an admin's reset of the account), then no longer. The
running server reads the setting at every login. Without a mode it prints the setting in force.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

from deaddrop.admin._datadir import initialised_data_dir, open_database
from deaddrop.admin._output import AdminError, Output
from deaddrop.events import SecurityEvents
from deaddrop.second_factor import policy
from deaddrop.store.db import transaction


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("settings", help="instance settings kept in the database")
    actions = parser.add_subparsers(dest="settings_command", metavar="SETTING")
    actions.required = True
    p = actions.add_parser(
        "require-security-keys", parents=[common_parent],
        help="require journalists to log in with a security key: on (everyone), admins (administrators only) or off")
    p.add_argument("mode", nargs="?", choices=policy.MODES, help="omit to show the setting in force")
    p.add_argument("--grace-days", type=int, metavar="N",
                   help=f"days accounts without a key may still log in with codes to enrol one "
                        f"(default {policy.DEFAULT_GRACE_DAYS})")
    p.set_defaults(func=_require_security_keys)


def _require_security_keys(args: argparse.Namespace, out: Output) -> int:
    data_dir = initialised_data_dir(args.data_dir)
    conn = open_database(data_dir)
    try:
        if args.mode is None:
            if args.grace_days is not None:
                raise AdminError("--grace-days goes with a mode: on, admins or off")
            keys = transaction(conn, policy.load)
        else:
            try:
                keys = transaction(conn, policy.save, args.mode, args.grace_days, time.time())
            except ValueError as e:
                raise AdminError(str(e)) from None
            events = SecurityEvents(os.path.join(data_dir, "logs", "security.jsonl"))
            try:
                events.emit("admin.security_keys.required", kind=keys.mode, count=keys.grace_days)
            finally:
                events.close()
    finally:
        conn.close()
    out.result({"require_security_keys": keys.mode, "grace_days": keys.grace_days,
                "grace_until": _day(keys.deadline(None)) if keys.mode != "off" else None}, _describe(keys))
    return 0


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def _describe(keys: policy.KeyPolicy) -> str:
    if keys.mode == "off":
        return "security keys are not required (each account may still register its own)"
    who = "every journalist account" if keys.mode == "on" else "administrator accounts"
    return (f"security keys are required of {who}: accounts without one log in with their one-time codes "
            f"until {_day(keys.deadline(None))} ({keys.grace_days} days' grace; an account an admin resets "
            f"gets {keys.grace_days} days from then), then no longer")
