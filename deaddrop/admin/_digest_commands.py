"""``deaddrop-admin digest test NAME``: send one digest mail now, and say what happened.

It uses the running server's mail settings (``DATA/status.json``: server, TLS mode, sender, CA,
login; the password is read again from ``--smtp-password-file``) and the same SMTP client, so a
wrong ``--smtp-tls``, a refused certificate or a refused login shows now, not at the next slot.
The mail has the digest's shape and is encrypted to the journalist's registered key, but carries
no counts: a count sent at an admin's moment would date arrivals more finely than the slots do,
and the counts stay for the next digest. The outcome is an ``admin.digest.test`` security event.

This is the one admin command that runs Twisted's reactor (for the SMTP client), so it is run
as its own process, as every admin command is from the shell.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

from deaddrop.admin._datadir import initialised_data_dir, open_database
from deaddrop.admin._output import AdminError, Output
from deaddrop.admin._status_commands import server_status
from deaddrop.events import SecurityEvents
from deaddrop.store import digest_queries as dq
from deaddrop.store import journalist_queries as jq
from deaddrop.store.db import transaction


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("digest", help="the encrypted digest mail")
    actions = parser.add_subparsers(dest="digest_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser(
        "test", parents=[common_parent],
        help="send one digest mail to a journalist now, with the running server's mail settings, and say what "
        "happened (it counts nothing; exit 1 if it failed)")
    p.add_argument("name", metavar="NAME", help="the journalist's username")
    p.set_defaults(func=_test)


def _server_target(data_dir: str) -> Any:
    from deaddrop.digest.smtp import SmtpTarget

    server = server_status(data_dir)
    if not server["running"]:
        raise AdminError("the server is not running: digest test sends with the running server's --smtp-* settings "
                         "(start it first)")
    digest = server["reported"].get("digest") or {}
    if not digest.get("enabled") or not digest.get("settings"):
        raise AdminError("the server runs without --smtp-server: there is no digest mail to test (see the README, "
                         "The digest mail)")
    try:
        return SmtpTarget.from_settings(digest["settings"])
    except ValueError as e:
        raise AdminError(str(e)) from None


def _recipient(data_dir: str, name: str) -> Any:
    conn = open_database(data_dir)
    try:
        row = transaction(conn, jq.journalist_by_username, name)
        if row is None:
            raise AdminError(f"no journalist named {name!r} (see 'deaddrop-admin journalist list')")
        found = transaction(conn, dq.recipient, row["id"])
    finally:
        conn.close()
    if found is None:
        raise AdminError(f"{name} gets no digest mail: register an address and key first ('deaddrop-admin journalist "
                         f"notify {name} --email ADDRESS --key KEY.asc')")
    return found


def _compose(target: Any, recipient: Any, gpg_binary: str = "gpg") -> bytes | None:
    """The test mail, encrypted to the registered key; None if gpg refuses the key."""
    from deaddrop.digest import mail
    from deaddrop.i18n import journalist as i18n

    home = tempfile.mkdtemp(prefix="dd-dt-")
    try:
        return mail.compose_test(gpg_binary, home, target.from_addr, recipient.email, recipient.public_key,
                                 time.time(), i18n.speech(recipient.language))
    except mail.EncryptionFailed:
        return None
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _deliver(target: Any, to_addr: str, message: bytes) -> tuple[str | None, str]:
    """Run the reactor for one send: -> (None, "") once the server took it, else (reason, detail)."""
    from twisted.internet import reactor
    from twisted.internet.defer import maybeDeferred

    from deaddrop.digest import smtp

    outcome: list[tuple[str | None, str]] = []

    def failed(f: Any) -> None:
        outcome.append((smtp.failure_reason(f), smtp.failure_detail(f, target)))

    def go() -> None:
        d = maybeDeferred(smtp.send, reactor, target, to_addr, message)
        d.addCallbacks(lambda _: outcome.append((None, "")), failed)
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(go)
    reactor.run()
    if not outcome:
        raise AdminError("interrupted before the mail server answered")
    return outcome[0]


def _test(args: argparse.Namespace, out: Output) -> int:
    data_dir = initialised_data_dir(args.data_dir)
    target = _server_target(data_dir)
    recipient = _recipient(data_dir, args.name)
    message = _compose(target, recipient)
    reason: str | None
    if message is None:
        reason, detail = "key_unusable", (f"gpg cannot encrypt to {args.name}'s registered key (expired or revoked?): "
                                          "register a new one with 'deaddrop-admin journalist notify'")
    else:
        reason, detail = _deliver(target, recipient.email, message)
    events = SecurityEvents(os.path.join(data_dir, "logs", "security.jsonl"))
    try:
        events.emit("admin.digest.test", target=args.name, **({"reason": reason} if reason else {}))
    finally:
        events.close()
    data = {"username": args.name, "email": recipient.email, "smtp_server": target.describe(), "sent": reason is None,
            "reason": reason, "detail": detail or None}
    if reason is None:
        out.result(data, f"sent: the mail server {target.describe()} accepted a test digest for {args.name} "
                         f"({recipient.email}); ask {args.name} whether it arrived and opens with their key")
        return 0
    out.result(data, f"FAILED ({reason}): {detail}\n  (the digest of {args.name} via {target.describe()}; "
                     "failure classes: README, The digest mail)")
    return 1
