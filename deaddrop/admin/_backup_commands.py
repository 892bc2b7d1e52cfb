"""``deaddrop-admin backup --out FILE --to-key KEY.asc --sign-key KEY`` and
``deaddrop-admin restore FILE --signer KEY.asc``."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from typing import Any

from deaddrop.admin import _status_commands
from deaddrop.admin._datadir import initialised_data_dir
from deaddrop.admin.backup import BackupError, make_backup, restore_backup
from deaddrop.admin._output import AdminError, Output
from deaddrop.events import SecurityEvents


def _record(data_dir: str, event: str, report: Any) -> None:
    """Write ``event`` with the report's file count and bytes to the data dir's security log."""
    events = SecurityEvents(os.path.join(data_dir, "logs", "security.jsonl"))
    try:
        events.emit(event, count=report.files, bytes=report.bytes)
    finally:
        events.close()


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "backup", parents=[common_parent],
        help="write an encrypted backup of the data directory (works while the server runs)")
    p.add_argument("--out", required=True, metavar="FILE", help="the backup file to write (must not exist)")
    p.add_argument("--to-key", required=True, metavar="KEY.asc",
                   help="the OpenPGP public key the backup is encrypted to (keep its secret key offline)")
    p.add_argument("--sign-key", required=True, metavar="KEY",
                   help="the backup-signing key (fingerprint of a secret key in --gnupg-home): restore refuses "
                        "an archive it did not sign")
    p.add_argument("--gnupg-home", metavar="DIR", default=None,
                   help="the GnuPG home holding the backup-signing key (default: gpg's own)")
    p.add_argument("--gpg-binary", default="gpg", help=argparse.SUPPRESS)
    p.set_defaults(func=_backup)

    p = subparsers.add_parser(
        "restore", parents=[common_parent],
        help="restore a backup into a new or empty --data-dir, or one holding only the new server's tls/ "
             "(kept; verifies it; decrypts with your gpg)")
    p.add_argument("archive", metavar="FILE", help="a file written by 'deaddrop-admin backup'")
    p.add_argument("--signer", required=True, metavar="KEY.asc",
                   help="the backup-signing key's public half: an archive it did not sign is refused")
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
        # What the running server was started with, so that restore can say how to start the copy.
        reported = _status_commands.server_status(data_dir)["reported"]
        report = make_backup(data_dir, args.out, args.to_key, args.sign_key, args.gnupg_home, args.gpg_binary,
                             start_options=reported.get("start_options"))
    except BackupError as e:
        raise AdminError(str(e)) from None
    seconds = time.monotonic() - started
    _record(data_dir, "admin.backup", report)
    out.result(
        {"out": report.path, "files": report.files, "bytes": report.bytes, "recipient": report.recipient,
         "signer": report.signer, "schema_version": report.schema_version, "seconds": round(seconds, 3),
         "restore_command": restore_command(report.path)},
        f"wrote {report.path}: {report.files} files, {_size(report.bytes)} before encryption, in {seconds:.1f} s\n"
        f"  encrypted to {report.recipient} (check this fingerprint; only its secret key can restore it)\n"
        f"  signed by {report.signer} (the backup-signing key; restore refuses what it did not sign)\n"
        f"  restore with: {restore_command(report.path)}\n"
        f"    BACKUP_GNUPG_HOME: the GnuPG home holding the secret key of {report.recipient}\n"
        f"    SIGNER.asc: the public key of {report.signer}, kept apart from the backups "
        f"(gpg{' --homedir ' + args.gnupg_home if args.gnupg_home else ''} --armor --export {report.signer})",
    )
    return 0


def restore_command(archive: str) -> str:
    return (f"deaddrop-admin restore {shlex.quote(archive)} --data-dir NEW_DIR "
            "--gnupg-home BACKUP_GNUPG_HOME --signer SIGNER.asc")


def start_command(data_dir: str, options: tuple[str, ...] | None) -> list[str]:
    """The command that starts the restored instance: no --submission-key (the data dir holds it)."""
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    return [twistd if os.path.isfile(twistd) else "twistd", "-n", "--pidfile=", "deaddrop", "--data-dir", data_dir,
            *(options or ())]


def _restore(args: argparse.Namespace, out: Output) -> int:
    started = time.monotonic()
    try:
        report = restore_backup(args.archive, args.data_dir, args.signer, args.gnupg_home, args.gpg_binary)
    except BackupError as e:
        raise AdminError(str(e)) from None
    seconds = time.monotonic() - started
    command = start_command(report.data_dir, report.start_options)
    _record(report.data_dir, "admin.restore", report)
    out.result(
        {"data_dir": report.data_dir, "files": report.files, "bytes": report.bytes, "signer": report.signer,
         "schema_version": report.schema_version, "created": report.created, "seconds": round(seconds, 3),
         "start_command": command, "kept": list(report.kept), "not_restored": list(report.not_restored)},
        f"restored {report.files} files ({_size(report.bytes)}) from a backup of {report.created} signed by "
        f"{report.signer} into {report.data_dir} in {seconds:.1f} s; every file matched the manifest\n"
        + (f"  kept this server's own {', '.join(report.kept)} (already in the data dir, unchanged); "
           + (f"the archive's {', '.join(report.not_restored)} matched the manifest and were NOT restored\n"
              if report.not_restored else "the archive held no tls/ files\n")
           if report.kept else "")
        + f"  start it with: {shlex.join(command)}\n"
        + ("  (the options it ran with at the backup; files they name outside the data dir are not in the backup; "
           "no --submission-key: the data dir holds the instance's key)\n" if report.start_options is not None else
           "  (the server was not running during the backup, so the options it ran with are not known: add them, "
           "e.g. from its systemd unit; no --submission-key: the data dir holds the instance's key)\n")
        + f"  or, as the service of docs/deploy/install.md: chown -R deaddrop: {shlex.quote(report.data_dir)}, "
          "then systemctl enable --now deaddrop\n"
          "  it keeps the onion address, sources, accounts and submission key",
    )
    return 0
