"""The Tor part of ``deaddrop-admin status``, and ``deaddrop-admin onion-client add|remove|list``.

``tor_status(data_dir)`` returns the Tor part of the status as a dict and ``format_tor_status``
renders it, so a fuller ``status`` can include both.
"""
from __future__ import annotations

import json
import os
from typing import Any

from deaddrop.admin._datadir import initialised_data_dir
from deaddrop.admin._file_checks import path_check
from deaddrop.admin._output import AdminError
from deaddrop.tor import keys

CLIENTS_POLL_SECONDS = 10  # matches deaddrop.tor.Tuning.clients_interval


def register(subparsers, common_parent) -> None:
    # "status" itself is deaddrop.admin._status_commands; it includes tor_status() below.
    # Only the leaves take the common options: argparse lets a nested parser's defaults
    # overwrite values parsed by its parent, so "--data-dir" on both would be silently lost.
    client = subparsers.add_parser(
        "onion-client",
        help="authorise or revoke journalists' Tor Browsers for the journalist onion service",
    )
    actions = client.add_subparsers(dest="onion_client_action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", parents=[common_parent], help="authorise a new client; prints its key once")
    add.add_argument("name", help="a label for the client, e.g. the journalist's name (letters, digits, - and _)")
    add.set_defaults(func=_client_add)
    remove = actions.add_parser("remove", parents=[common_parent], help="revoke a client")
    remove.add_argument("name")
    remove.set_defaults(func=_client_remove)
    listing = actions.add_parser("list", parents=[common_parent], help="list the authorised clients")
    listing.set_defaults(func=_client_list)


# The onion's key exists (its address with it) but Tor has not uploaded its descriptor yet.
NOT_PUBLISHED = "(not reachable yet: Tor has not published it)"


def _data_dir(args) -> str:
    return initialised_data_dir(args.data_dir)


# -- status -----------------------------------------------------------------------------------


def _mode_check(name: str, path: str, want: int, owner: int | None = None) -> dict[str, Any]:
    found = path_check(name, path, want, os.geteuid() if owner is None else owner)
    assert found is not None
    return found


def _key_checks(name: str, directory: str, owner: int | None) -> tuple[list[dict[str, Any]], keys.OnionKey | None]:
    path = os.path.join(directory, keys.SECRET_KEY_FILE)
    if not os.path.exists(path):
        return [], None
    try:
        key = keys.read_onion_key(directory)
    except keys.OnionKeyError as e:
        return [{"name": name, "ok": False, "detail": str(e)}], None
    return [_mode_check(name, path, 0o600, owner)], key


def _tor_process(data_dir: str) -> dict[str, Any]:
    tor_dir = keys.tor_dir(data_dir)
    try:
        with open(os.path.join(tor_dir, "tor.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            running = os.path.join(tor_dir, "torrc").encode() in f.read().split(b"\0")
    except (OSError, ValueError):
        return {"pid": None, "running": False}
    return {"pid": pid if running else None, "running": running}


def _last_tor_event(data_dir: str) -> dict[str, Any] | None:
    path = os.path.join(data_dir, "logs", "security.jsonl")
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(tail):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and str(record.get("event", "")).startswith("tor."):
            return record
    return None


def tor_status(data_dir: str, owner: int | None = None) -> dict[str, Any]:
    """The Tor part of ``deaddrop-admin status``: addresses, process, file checks (each file
    owned by ``owner``, by default the user running this)."""
    checks: list[dict[str, Any]] = []
    tor_dir = keys.tor_dir(data_dir)
    if os.path.isdir(tor_dir):
        checks.append(_mode_check("tor_dir", tor_dir, 0o700, owner))
    else:
        checks.append({"name": "tor_dir", "ok": True, "detail": f"{tor_dir} not created yet (the server creates it)"})

    source_checks, source_key = _key_checks("source_key", keys.service_dir(data_dir, keys.SOURCE), owner)
    checks += source_checks
    source_onion = None
    onion_file = keys.source_onion_file(data_dir)
    if os.path.exists(onion_file):
        with open(onion_file) as f:
            source_onion = f.read().strip() or None
        if source_onion is None or not keys.is_valid_onion_address(source_onion):
            checks.append({"name": "source_onion", "ok": False, "detail": f"{onion_file} is not a v3 onion address"})
        elif source_key is not None and source_key.address != source_onion:
            checks.append({
                "name": "source_onion",
                "ok": False,
                "detail": f"{onion_file} says {source_onion} but the key is for {source_key.address}; "
                "the server rewrites it at its next start",
            })
        else:
            checks.append({"name": "source_onion", "ok": True, "detail": source_onion})
    elif source_key is not None:
        checks.append({"name": "source_onion", "ok": True,
                       "detail": f"{source_key.address} {NOT_PUBLISHED}"})

    journalist_checks, journalist_key = _key_checks("journalist_key", keys.service_dir(data_dir, keys.JOURNALIST), owner)
    checks += journalist_checks
    try:
        clients = keys.list_clients(data_dir)
    except keys.OnionKeyError as e:
        clients = {}
        checks.append({
            "name": "journalist_clients",
            "ok": False,
            "detail": f"{e}; the server keeps the journalist onion down until it is fixed",
        })
    else:
        for name in clients:
            path = os.path.join(keys.clients_dir(data_dir), name + ".auth")
            checks.append(_mode_check(f"client:{name}", path, 0o600, owner))

    return {
        "data_dir": data_dir,
        "source_onion": source_onion,
        # The address as soon as its key exists (tor.onion.key_created), published or not.
        "source_onion_address": source_key.address if source_key is not None else source_onion,
        "journalist_onion": {
            "exists": journalist_key is not None,
            "address": journalist_key.address if journalist_key is not None else None,
            "clients": len(clients),
        },
        "tor": _tor_process(data_dir),
        "last_tor_event": _last_tor_event(data_dir),
        "checks": checks,
    }


def format_tor_status(status: dict[str, Any]) -> str:
    lines = [f"Data directory:   {status['data_dir']}"]
    source = status["source_onion"]
    if source:
        lines.append(f"Source onion:     http://{source}/")
    elif status.get("source_onion_address"):
        lines.append(f"Source onion:     http://{status['source_onion_address']}/ {NOT_PUBLISHED}")
    else:
        lines.append("Source onion:     (no key yet: the server makes it at its first start with Tor)")
    j = status["journalist_onion"]
    if j["exists"]:
        lines.append(f"Journalist onion: {j['address']} ({j['clients']} authorised client(s); client auth required)")
    else:
        lines.append("Journalist onion: none (created by 'deaddrop-admin onion-client add NAME')")
    tor = status["tor"]
    running = f"running, pid {tor['pid']}" if tor["running"] else "not running (or not launched by DeadDrop)"
    lines.append(f"Tor process:      {running}")
    event = status.get("last_tor_event")
    if event:
        extra = " ".join(f"{k}={event[k]}" for k in ("reason", "progress", "delay", "detail") if k in event)
        lines.append(f"Last Tor event:   {event.get('timestamp', '?')} {event['event']} {extra}".rstrip())
    lines.append("Checks:")
    for check in status["checks"]:
        lines.append(f"  [{'ok' if check['ok'] else 'FAIL'}] {check['name']}: {check['detail']}")
    return "\n".join(lines)


# -- onion-client -----------------------------------------------------------------------------


def _client_add(args, out) -> int:
    data_dir = _data_dir(args)
    try:
        address, pair = keys.add_client(data_dir, args.name)
    except keys.OnionKeyError as e:
        raise AdminError(str(e)) from None
    line = keys.tor_browser_line(address, pair.private_b32)
    text = "\n".join([
        f"Authorised client {args.name!r} for the journalist onion service https://{address}/",
        "Give this line to the journalist over a secure channel; it is shown only once and not stored:",
        "",
        f"  {line}",
        "",
        "Tor Browser: open the address and, when asked for a key, paste the part after 'x25519:'.",
        "A tor client: save the line in <ClientOnionAuthDir>/<name>.auth_private.",
        f"A running server picks the change up within {CLIENTS_POLL_SECONDS} seconds"
        " (needs --journalist-onion).",
    ])
    out.result(
        {"name": args.name, "journalist_onion": address, "tor_browser_line": line, "public_key": pair.public_b32},
        text,
    )
    return 0


def _client_remove(args, out) -> int:
    data_dir = _data_dir(args)
    try:
        keys.remove_client(data_dir, args.name)
    except keys.OnionKeyError as e:
        raise AdminError(str(e)) from None
    out.result(
        {"name": args.name, "removed": True},
        f"Revoked client {args.name!r}. A running server republishes the journalist onion without it within "
        f"{CLIENTS_POLL_SECONDS} seconds (a stopped one at its next start).",
    )
    return 0


def _client_list(args, out) -> int:
    data_dir = _data_dir(args)
    try:
        clients = keys.list_clients(data_dir)
    except keys.OnionKeyError as e:
        raise AdminError(str(e)) from None
    key = keys.read_onion_key(keys.service_dir(data_dir, keys.JOURNALIST))
    address = key.address if key is not None else None
    rows = [{"name": name, "public_key": public} for name, public in clients.items()]
    if rows:
        text = "\n".join([f"Journalist onion: {address}"] + [f"  {r['name']}  x25519:{r['public_key']}" for r in rows])
    else:
        text = "No authorised clients (the journalist onion is not published)."
    out.result({"journalist_onion": address, "clients": rows}, text)
    return 0
