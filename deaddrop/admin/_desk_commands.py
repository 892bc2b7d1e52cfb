"""``deaddrop-admin desk add|list|rename|remove|members|key|describe|set`` (issue 29).

A desk is a name, a text for sources in each language, its own submission key (its own SVS:
``deaddrop-svs init`` there) and its members. Works while the server runs: it re-reads desks
within ``newsroom.desks.RELOAD_SECONDS`` and checks membership on every request. A desk's key
is set and replaced with the care the instance's key gets: its fingerprint is printed, a
different key is refused without ``--replace-key``, and a replacement is the security event
``admin.desk.key_replaced``. The default desk's key is the instance's submission key
(``--submission-key``, ``--replace-submission-key`` at start-up).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid as uuidlib
from typing import Any

from deaddrop.admin._opened import OpenedDataDir, with_opened
from deaddrop.admin._output import AdminError, Output
from deaddrop.crypto.gpg import GpgError, Keyring, SubmissionKeyError
from deaddrop.newsroom.languages import LANGUAGES as SOURCE_LANGUAGES
from deaddrop.store import desk_queries as dq
from deaddrop.store import journalist_queries as jq

MAX_NAME = 80
MAX_DESCRIPTION = 1000


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("desk", help="desks: who reads which source, each with its own key")
    actions = parser.add_subparsers(dest="desk_command", metavar="ACTION")
    actions.required = True

    p = actions.add_parser("add", parents=[common_parent], help="add a desk with its own submission key")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--key", metavar="KEY.asc", required=True,
                   help="the desk's SVS public key (deaddrop-svs init on the desk's own SVS)")
    p.add_argument("--description", metavar="TEXT", default="", help="what sources read about the desk (English)")
    p.set_defaults(func=_with_desks(_add))

    p = actions.add_parser("list", parents=[common_parent], help="desks, their keys, members and sources")
    p.set_defaults(func=_with_desks(_list))

    p = actions.add_parser("rename", parents=[common_parent], help="rename a desk (what admins and sources see)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("new_name", metavar="NEW_NAME")
    p.set_defaults(func=_with_desks(_rename))

    p = actions.add_parser("remove", parents=[common_parent],
                           help="remove a desk no source has chosen (refused while it has sources)")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=_with_desks(_remove))

    p = actions.add_parser("members", parents=[common_parent], help="list, add or remove a desk's journalists")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--add", metavar="USER", action="append", default=[], help="make USER a member (repeatable)")
    p.add_argument("--remove", metavar="USER", action="append", default=[], help="USER no longer reads it (repeatable)")
    p.set_defaults(func=_with_desks(_members))

    p = actions.add_parser("key", parents=[common_parent], help="set a desk's submission key")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--key", metavar="KEY.asc", required=True)
    p.add_argument("--replace-key", action="store_true",
                   help="replace the desk's key by another (its SVS key really changed): a security event")
    p.set_defaults(func=_with_desks(_key))

    p = actions.add_parser("describe", parents=[common_parent],
                           help="the desk's name and description for sources in one language")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--lang", metavar="LANG", default="en", help="a source language code (default en)")
    p.add_argument("--title", metavar="TEXT", help="the desk's name in that language")
    p.add_argument("--description", metavar="TEXT", help="its description in that language ('' removes it)")
    p.set_defaults(func=_with_desks(_describe))

    p = actions.add_parser("set", parents=[common_parent], help="a desk's settings")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--show-members", choices=("on", "off"),
                   help="sources see its members' names (off: only how many they are)")
    p.add_argument("--retention-days", metavar="N|off",
                   help="delete what this desk was sent after N days (off: the instance's --retention-days)")
    p.set_defaults(func=_with_desks(_set))


class _Instance(OpenedDataDir):
    def run(self, fn: Any, *args: Any) -> Any:
        try:
            return super().run(fn, *args)
        except dq.DeskError as e:
            raise AdminError(str(e)) from None

    def desk(self, name: str) -> Any:
        row = self.run(dq.desk_by_name, name)
        if row is None:
            raise AdminError(f"no desk named {name!r} (see 'deaddrop-admin desk list')")
        return row


_with_desks = with_opened(_Instance)


def _name(text: str) -> str:
    name = " ".join(text.split())
    if not name or len(name) > MAX_NAME or any(not c.isprintable() for c in name):
        raise AdminError(f"a desk name must be 1 to {MAX_NAME} printable characters")
    return name


def read_desk_key(path: str) -> tuple[str, str]:
    """Check a desk's public key as the server checks the submission key (one public key that
    can encrypt, not expired), in a throwaway keyring. -> (armored, fingerprint)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            armored = f.read()
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror}") from None
    home = tempfile.mkdtemp(prefix="dd-desk-", dir="/tmp")  # gpg-agent's socket path is short
    keyring = Keyring(home)
    try:
        fingerprint = keyring.import_submission_key(armored)
    except (SubmissionKeyError, GpgError) as e:
        raise AdminError(f"{path}: {e}") from None
    finally:
        keyring.stop_agent()
        shutil.rmtree(home, ignore_errors=True)
    return armored, fingerprint


def _key_in_use(instance: _Instance, fingerprint: str, other_than: int | None = None) -> None:
    for row in instance.run(dq.all_desks):
        if row["key_fingerprint"] == fingerprint and row["id"] != other_than:
            raise AdminError(f"key {fingerprint} is already desk {row['name']!r}'s: each desk needs a key of its own "
                             "(its own SVS), or the two desks read each other's sources")


def _desk_json(instance: _Instance, row: Any) -> dict[str, Any]:
    return {"name": row["name"], "uuid": row["uuid"], "default": bool(row["is_default"]),
            "fingerprint": row["key_fingerprint"], "members": dq.member_names(instance.conn, row["id"]),
            "sources": row["sources"], "show_members": bool(row["show_members"]),
            "retention_days": row["retention_days"], "texts": dq.texts_of(row)}


def _add(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    name = _name(args.name)
    armored, fingerprint = read_desk_key(args.key)
    _key_in_use(instance, fingerprint)
    texts = {"en": {"description": args.description}} if args.description else {}
    instance.run(dq.insert_desk, str(uuidlib.uuid4()), name, fingerprint, armored,
                 float(int(time.time() // 86400 * 86400)), texts)
    instance.events.emit("admin.desk.added", target=name, fingerprint=fingerprint)
    out.result({"added": name, "fingerprint": fingerprint},
               f"added desk {name}, key {fingerprint}\n"
               f"  compare this fingerprint with the one the desk's SVS printed at 'deaddrop-svs init'.\n"
               f"  it has no members yet: deaddrop-admin desk members {_quoted(name)} --add USER")
    return 0


def _quoted(name: str) -> str:
    return f"'{name}'" if " " in name else name


def _list(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    desks = [_desk_json(instance, row) for row in instance.run(dq.all_desks)]
    lines = []
    for d in desks:
        lines.append(f"{d['name']}{' (default)' if d['default'] else ''}: key {d['fingerprint'] or 'none yet'}, "
                     f"{len(d['members'])} member(s) ({', '.join(d['members']) or 'nobody'}), {d['sources']} source(s)"
                     + (f", keeps {d['retention_days']} days" if d["retention_days"] else ""))
    out.result({"desks": desks}, "\n".join(lines))
    return 0


def _rename(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    new = _name(args.new_name)
    instance.run(dq.rename_desk, row["id"], new)
    instance.events.emit("admin.desk.renamed", target=new, detail=f"was {row['name']}")
    out.result({"renamed": row["name"], "name": new}, f"renamed desk {row['name']} to {new}")
    return 0


def _remove(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    instance.run(dq.remove_desk, row["id"])
    instance.events.emit("admin.desk.removed", target=row["name"])
    out.result({"removed": row["name"]}, f"removed desk {row['name']}")
    return 0


def _members(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    for username, add in [(u, True) for u in args.add] + [(u, False) for u in args.remove]:
        account = instance.run(jq.journalist_by_username, username)
        if account is None:
            raise AdminError(f"no journalist named {username!r} (see 'deaddrop-admin journalist list')")
        changed = instance.run(dq.add_member if add else dq.remove_member, row["id"], account["id"])
        if changed:
            instance.events.emit("admin.desk.member_added" if add else "admin.desk.member_removed",
                                 target=account["username"], detail=f"desk {row['name']}")
    members = instance.run(dq.member_names, row["id"])
    out.result({"desk": row["name"], "members": members},
               f"{row['name']}: " + (", ".join(members) if members else "no members (nobody reads it)"))
    return 0


def _key(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    if row["is_default"]:
        raise AdminError(f"{row['name']!r} is the default desk: its key is the instance's submission key; start the "
                         "server with --submission-key NEW.asc --replace-submission-key to replace it")
    armored, fingerprint = read_desk_key(args.key)
    if fingerprint == row["key_fingerprint"]:
        out.result({"desk": row["name"], "fingerprint": fingerprint}, f"{row['name']} already has key {fingerprint}")
        return 0
    _key_in_use(instance, fingerprint, row["id"])
    if row["key_fingerprint"] and not args.replace_key:
        raise AdminError(f"{args.key} is key {fingerprint}, but desk {row['name']!r} has key {row['key_fingerprint']}: "
                         "refusing to replace it, or every new submission to the desk would be readable by whoever "
                         "holds the other key. If the desk's SVS key really changed, add --replace-key "
                         "(logged as a security event)")
    instance.run(dq.set_key, row["id"], fingerprint, armored)
    if row["key_fingerprint"]:
        instance.events.emit("admin.desk.key_replaced", target=row["name"], fingerprint=fingerprint,
                             detail=f"replaced {row['key_fingerprint']} (--replace-key)")
    else:
        instance.events.emit("admin.desk.key_set", target=row["name"], fingerprint=fingerprint)
    out.result({"desk": row["name"], "fingerprint": fingerprint, "previous": row["key_fingerprint"]},
               f"desk {row['name']} now encrypts to key {fingerprint}"
               + (f" (was {row['key_fingerprint']}; what was sent before stays readable only by the old key)"
                  if row["key_fingerprint"] else ""))
    return 0


def _describe(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    if args.lang not in SOURCE_LANGUAGES:
        raise AdminError(f"--lang {args.lang}: not a source language ({', '.join(sorted(SOURCE_LANGUAGES))})")
    texts = dq.texts_of(row)
    entry = dict(texts.get(args.lang, {}))
    for key, value in (("name", args.title), ("description", args.description)):
        if value is None:
            continue
        value = value.strip()
        if len(value) > (MAX_NAME if key == "name" else MAX_DESCRIPTION):
            raise AdminError(f"the {key} is too long")
        if value:
            entry[key] = value
        else:
            entry.pop(key, None)
    texts[args.lang] = entry
    if not entry:
        del texts[args.lang]
    instance.run(dq.set_texts, row["id"], texts)
    instance.events.emit("admin.desk.described", target=row["name"], detail=f"language {args.lang}")
    out.result({"desk": row["name"], "texts": texts}, f"{row['name']} ({args.lang}): {entry or 'no text'}")
    return 0


def _set(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    if args.show_members is not None:
        instance.run(dq.set_show_members, row["id"], args.show_members == "on")
    if args.retention_days is not None:
        days = None
        if args.retention_days != "off":
            try:
                days = int(args.retention_days)
            except ValueError:
                raise AdminError("--retention-days takes a number of days or off") from None
            if not 1 <= days <= 36500:
                raise AdminError("--retention-days must be between 1 and 36500")
        instance.run(dq.set_retention, row["id"], days)
    instance.events.emit("admin.desk.changed", target=row["name"])
    return _list(instance, args, out)
