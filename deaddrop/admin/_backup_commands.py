"""``deaddrop-admin backup --out FILE --to-key KEY.asc`` and ``deaddrop-admin restore FILE``."""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

from deaddrop.admin._datadir import initialised_data_dir
from deaddrop.admin.backup import BackupError, make_backup, restore_backup
from deaddrop.admin._output import AdminError, Output
from deaddrop.events import SecurityEvents


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "backup", parents=[common_parent],
        help="write an encrypted backup of the data directory (works while the server runs)")
    p.add_argument("--out", required=True, metavar="FILE", help="the backup file to write (must not exist)")
    p.add_argument("--to-key", required=True, metavar="KEY.asc",
                   help="the OpenPGP public key the backup is encrypted to (keep its secret key offline)")
    p.add_argument("--gpg-binary", default="gpg", help=argparse.SUPPRESS)
    p.set_defaults(func=_backup)

    p = subparsers.add_parser(
        "restore", parents=[common_parent],
        help="restore a backup into a new or empty --data-dir (verifies it; decrypts with your gpg)")
    p.add_argument("archive", metavar="FILE", help="a file written by 'deaddrop-admin backup'")
    p.add_argument("--gnupg-home", metavar="DIR", default=None,
                   help="the GnuPG home holding the backup key's secret half (default: gpg's own)")
    p.add_argument("--gpg-binary", default="gpg", help=argparse.SUPPRESS)
    p.set_defaults(func=_restore)


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _backup(args: argparse.Namespace, out: Output) -> int:
    data_dir = initialised_data_dir(args.data_dir)
    started = time.monotonic()
    try:
        report = make_backup(data_dir, args.out, args.to_key, args.gpg_binary)
    except BackupError as e:
        raise AdminError(str(e)) from None
    seconds = time.monotonic() - started
    events = SecurityEvents(os.path.join(data_dir, "logs", "security.jsonl"))
    try:
        events.emit("admin.backup", count=report.files, bytes=report.bytes)
    finally:
        events.close()
    out.result(
        {"out": report.path, "files": report.files, "bytes": report.bytes, "recipient": report.recipient,
         "schema_version": report.schema_version, "seconds": round(seconds, 3)},
        f"wrote {report.path}: {report.files} files, {_size(report.bytes)} before encryption, in {seconds:.1f} s\n"
        f"  encrypted to {report.recipient} (check this fingerprint; only its secret key can restore it)\n"
        f"  restore with: deaddrop-admin restore {report.path} --data-dir NEW_DIR",
    )
    return 0


def _restore(args: argparse.Namespace, out: Output) -> int:
    started = time.monotonic()
    try:
        report = restore_backup(args.archive, args.data_dir, args.gnupg_home, args.gpg_binary)
    except BackupError as e:
        raise AdminError(str(e)) from None
    seconds = time.monotonic() - started
    events = SecurityEvents(os.path.join(report.data_dir, "logs", "security.jsonl"))
    try:
        events.emit("admin.restore", count=report.files, bytes=report.bytes)
    finally:
        events.close()
    out.result(
        {"data_dir": report.data_dir, "files": report.files, "bytes": report.bytes,
         "schema_version": report.schema_version, "created": report.created, "seconds": round(seconds, 3)},
        f"restored {report.files} files ({_size(report.bytes)}) from a backup of {report.created} into "
        f"{report.data_dir} in {seconds:.1f} s; every file matched the manifest\n"
        f"  start the server with --data-dir {report.data_dir} (it keeps the onion address, sources and accounts)",
    )
    return 0
