"""``deaddrop-admin desk add|list|rename|remove|members|key|describe|set`` (issue 29).

A desk is a name, a text for sources in each language, its own submission key (its own SVS:
``deaddrop-svs init`` there) and its members. Works while the server runs: it re-reads desks
within ``newsroom.desks.RELOAD_SECONDS`` and checks membership on every request. A desk's key
is set and replaced with the care the instance's key gets: its fingerprint is printed, a
different key is refused without ``--replace-key``, and a replacement is the security event
``admin.desk.key_replaced``. The default desk's key is the instance's submission key
(``--submission-key``, ``--replace-submission-key`` at start-up). The rules are ``newsroom.desk_admin``'s,
which the admin pages follow too; here their refusals name this command's flags.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from deaddrop.admin._opened import OpenedDataDir, with_opened
from deaddrop.admin._output import AdminError, Output
from deaddrop.newsroom import desk_admin
from deaddrop.newsroom.desk_admin import DeskRefused
from deaddrop.newsroom.languages import LANGUAGES as SOURCE_LANGUAGES
from deaddrop.store import desk_queries as dq


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
    key_path = ""  # the --key file a refusal names

    def run(self, fn: Any, *args: Any) -> Any:
        try:
            return super().run(fn, *args)
        except DeskRefused as e:
            raise AdminError(_said(e, path=self.key_path)) from None

    def desk(self, name: str) -> Any:
        return self.run(lambda conn: desk_admin.desk(conn, name=name))

    def emit(self, change: desk_admin.Change | None) -> None:
        if change is not None:
            self.events.emit(change.event, **change.fields)


_with_desks = with_opened(_Instance)

# What each refusal says here (the admin pages say it in their own words, see desk_admin).
_SAID = {
    "name_taken": "{detail}",
    "bad_name": "a desk name must be 1 to {limit} printable characters",
    "no_such_desk": "no desk named {name!r} (see 'deaddrop-admin desk list')",
    "key_in_use": ("key {fingerprint} is already desk {desk!r}'s: each desk needs a key of its own (its own SVS), "
                   "or the two desks read each other's sources"),
    "not_a_key": "{path}: {problem}",
    "default_key": ("{desk!r} is the default desk: its key is the instance's submission key; start the server with "
                    "--submission-key NEW.asc --replace-submission-key to replace it"),
    "key_differs": ("{path} is key {fingerprint}, but desk {desk!r} has key {current}: refusing to replace it, or "
                    "every new submission to the desk would be readable by whoever holds the other key. If the "
                    "desk's SVS key really changed, add --replace-key (logged as a security event)"),
    "has_sources": ("{desk!r} still has {count} source(s): a desk is removed only once no source has chosen it "
                    "(delete those sources first)"),
    "is_default": "{desk!r} is the default desk (its key is the instance's submission key): it cannot be removed",
    "no_such_journalist": "no journalist named {username!r} (see 'deaddrop-admin journalist list')",
    "too_long": "the {what} is too long (at most {limit} characters)",
    "bad_retention": "--retention-days takes a number of days from 1 to {limit}, or off",
    "bad_language": "--lang {language}: not a source language ({languages})",
}


def _said(e: DeskRefused, **more: Any) -> str:
    return _SAID[e.reason].format(**{"languages": ", ".join(sorted(SOURCE_LANGUAGES)), **e.values, **more})


def read_desk_key(path: str) -> tuple[str, str]:
    """Check a desk's public key as the server checks the submission key (one public key that
    can encrypt, not expired), in a throwaway keyring. -> (armored, fingerprint)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            armored = f.read()
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror}") from None
    try:
        return armored, desk_admin.check_key(armored)
    except DeskRefused as e:
        raise AdminError(_said(e, path=path)) from None


def _desk_json(instance: _Instance, row: Any) -> dict[str, Any]:
    return {"name": row["name"], "uuid": row["uuid"], "default": bool(row["is_default"]),
            "fingerprint": row["key_fingerprint"], "members": dq.member_names(instance.conn, row["id"]),
            "sources": row["sources"], "show_members": bool(row["show_members"]),
            "retention_days": row["retention_days"], "texts": dq.texts_of(row)}


def _add(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    name = instance.run(lambda conn: desk_admin.desk_name(args.name))
    armored, fingerprint = read_desk_key(args.key)
    change = instance.run(desk_admin.add, name, armored, fingerprint, args.description, time.time())
    instance.emit(change)
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
    change = instance.run(desk_admin.rename, row, args.new_name)
    instance.emit(change)
    new = change.fields["target"]
    out.result({"renamed": row["name"], "name": new}, f"renamed desk {row['name']} to {new}")
    return 0


def _remove(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    instance.emit(instance.run(desk_admin.remove, row))
    out.result({"removed": row["name"]}, f"removed desk {row['name']}")
    return 0


def _members(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    for username, add in [(u, True) for u in args.add] + [(u, False) for u in args.remove]:
        instance.emit(instance.run(desk_admin.member, row, username, add))
    members = instance.run(dq.member_names, row["id"])
    out.result({"desk": row["name"], "members": members},
               f"{row['name']}: " + (", ".join(members) if members else "no members (nobody reads it)"))
    return 0


def _key(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    if row["is_default"]:
        raise AdminError(_said(DeskRefused("default_key", desk=row["name"])))
    armored, fingerprint = read_desk_key(args.key)
    instance.key_path = args.key
    change = instance.run(desk_admin.key, row, armored, fingerprint, args.replace_key)
    if change is None:
        out.result({"desk": row["name"], "fingerprint": fingerprint}, f"{row['name']} already has key {fingerprint}")
        return 0
    if change.event == "admin.desk.key_replaced":
        change.fields["detail"] += " (--replace-key)"
    instance.emit(change)
    out.result({"desk": row["name"], "fingerprint": fingerprint, "previous": row["key_fingerprint"]},
               f"desk {row['name']} now encrypts to key {fingerprint}"
               + (f" (was {row['key_fingerprint']}; what was sent before stays readable only by the old key)"
                  if row["key_fingerprint"] else ""))
    return 0


def _describe(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    change, texts = instance.run(desk_admin.describe, row, args.lang, args.title, args.description)
    instance.emit(change)
    entry = texts.get(args.lang, {})
    out.result({"desk": row["name"], "texts": texts}, f"{row['name']} ({args.lang}): {entry or 'no text'}")
    return 0


def _set(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    row = instance.desk(args.name)
    show = None if args.show_members is None else args.show_members == "on"
    retention: int | None | str = "unchanged"
    if args.retention_days is not None:
        retention = instance.run(lambda conn: desk_admin.retention_days(args.retention_days))
    instance.emit(instance.run(desk_admin.configure, row, show, retention))
    return _list(instance, args, out)
