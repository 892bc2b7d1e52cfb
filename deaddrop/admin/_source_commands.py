"""``deaddrop-admin sources retire-untagged``: end the period in which a wrong codename still
costs the server an Argon2id run.

Sources made before login tags (docs/threat-model.md) get their tag at their next login. While
any source has none, a codename whose tag matches nobody might still be such a source's, so it
is checked with Argon2id. Retiring the untagged sources that have been idle for N days (counted
from their last submission or reply, and never from before the upgrade that brought tags) ends
that: a retired source can no longer log in (its codename is then "not recognised"), and
journalists keep everything it sent. Works while the server runs (the server reads tags per
login). Nothing about which sources is printed or logged, only counts.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

from deaddrop.admin._datadir import initialised_data_dir, open_database
from deaddrop.admin._output import AdminError, Output
from deaddrop.events import SecurityEvents
from deaddrop.store import queries
from deaddrop.store.db import transaction


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("sources", help="sources made before login tags")
    actions = parser.add_subparsers(dest="sources_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser(
        "retire-untagged", parents=[common_parent],
        help="sources without a login tag idle N days can no longer log in (journalists keep what they sent)")
    p.add_argument("--idle-days", type=_days, required=True, metavar="N",
                   help="retire those idle at least N days (and never before N days after the upgrade)")
    p.add_argument("--dry-run", action="store_true", help="only count them")
    p.set_defaults(func=_retire_untagged)


def _days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not 1 <= days <= 36500:
        raise argparse.ArgumentTypeError("--idle-days must be between 1 and 36500")
    return days


def _retire_untagged(args: argparse.Namespace, out: Output) -> int:
    data_dir = initialised_data_dir(args.data_dir)
    conn = open_database(data_dir)
    try:
        before = transaction(conn, queries.untagged_sources)
        if args.dry_run:
            retired = transaction(conn, _count_idle, args.idle_days, time.time())
        else:
            retired = transaction(conn, queries.retire_untagged_sources, args.idle_days, time.time())
        left = before - (0 if args.dry_run else retired)
    except Exception as e:  # noqa: BLE001 - one line for the admin
        raise AdminError(f"could not retire sources: {type(e).__name__}") from None
    finally:
        conn.close()
    if retired and not args.dry_run:
        events = SecurityEvents(os.path.join(data_dir, "logs", "security.jsonl"))
        try:
            events.emit("admin.sources.retired", count=retired)
        finally:
            events.close()
    verb = "would retire" if args.dry_run else "retired"
    out.result({"untagged": before, "retired": 0 if args.dry_run else retired, "idle": retired,
                "untagged_left": left, "idle_days": args.idle_days, "dry_run": args.dry_run},
               f"{verb} {retired} of {before} sources without a login tag (idle {args.idle_days} days or more); "
               f"{left} left without one" + ("" if left else ": a wrong codename now never costs an Argon2id run"))
    return 0


def _count_idle(conn: Any, idle_days: int, now: float) -> int:
    # The same selection as retiring, rolled back: counted without changing anything.
    conn.execute("SAVEPOINT count_idle")
    try:
        return queries.retire_untagged_sources(conn, idle_days, now)
    finally:
        conn.execute("ROLLBACK TO count_idle")
        conn.execute("RELEASE count_idle")
