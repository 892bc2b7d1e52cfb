"""``deaddrop-admin``: one console script, one sub-command module per area.

Each ``_*_commands`` module exposes ``register(subparsers)`` which adds its sub-commands and
sets ``func`` on each parser to a callable ``func(args, out) -> int`` where ``out`` is an
``Output`` (text or ``--json``). Errors are raised as ``AdminError`` (the CA's, ``deaddrop.transport.ca``, as
``CAError``) and printed in one line. ``AdminError`` and ``Output`` live in ``_output``, so the
command modules never import this module back.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from deaddrop.admin import _registry, instances
from deaddrop.admin._output import AdminError, Output
from deaddrop.transport.ca import CAError

__all__ = ["AdminError", "Output", "build_parser", "main"]


DEFAULT_DATA_DIR = "./deaddrop-data"


def _add_global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    # None at the top level: main() applies DEFAULT_DATA_DIR, once it knows --instance was not given.
    parser.add_argument("--data-dir", default=default,
                        help=f"the server's data directory (default {DEFAULT_DATA_DIR})"
                        if default is not argparse.SUPPRESS else "the server's data directory")
    parser.add_argument("--instance", default=default, metavar="NAME",
                        help="the Debian package's instance deaddrop@NAME: --data-dir /var/lib/deaddrop/NAME")
    parser.add_argument("--json", action="store_true", default=default if default is argparse.SUPPRESS else False,
                        help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    """Git style: ``--data-dir``, ``--instance`` and ``--json`` go before or after the sub-command.

    The top-level parser holds the defaults; the copies on each sub-command default to
    SUPPRESS, so a value given before the sub-command is not overwritten by a default after it.
    """
    parser = argparse.ArgumentParser(prog="deaddrop-admin", description="Administer a DeadDrop instance.")
    _add_global_options(parser, None)
    common = argparse.ArgumentParser(add_help=False)
    _add_global_options(common, argparse.SUPPRESS)
    parser.set_defaults(common_parent=common)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for register in _registry.registrars():
        register(subparsers, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Output(getattr(args, "json", False))
    try:
        args.data_dir = instances.data_dir_of(args.data_dir, args.instance, DEFAULT_DATA_DIR)
        return int(args.func(args, out) or 0)
    except (AdminError, CAError) as e:
        if out.as_json:
            sys.stdout.write(json.dumps({"error": str(e)}) + "\n")
        sys.stderr.write(f"deaddrop-admin: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("deaddrop-admin: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
