"""``deaddrop-admin backup --out FILE --to-key KEY.asc --sign-key KEY`` and
``deaddrop-admin restore FILE --signer KEY.asc [--not-older-than INSTANCE:N]``."""
from __future__ import annotations

import argparse
import os
import shlex
import time
from typing import Any

from deaddrop.admin import _status_commands
from deaddrop.admin._datadir import initialised_data_dir
from deaddrop.admin._output import AdminError, Output
from deaddrop.admin._restored_start import restored_start
from deaddrop.admin.backup import BackupError, make_backup
from deaddrop.admin.backup_lineage import SHORT, Numbered, Wanted, parse_wanted
from deaddrop.admin.backup_sequence import STATE_FILE
from deaddrop.admin.restore import Manifest, restore_backup
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
                   help="the GnuPG home holding the backup key's secret half (default: gpg's own); restore "
                        f"remembers there, in {STATE_FILE}, the newest backup it restored of each instance and "
                        "refuses an older one")
    p.add_argument("--not-older-than", type=_wanted, metavar="INSTANCE:N",
                   help="refuse an archive that does not hold your newest backup: give its instance and number "
                        "as 'backup' printed them ('backup #42 of instance 3f9a2c1d' is 3f9a2c1d:42; an older "
                        "one brings back deleted accounts and an old CRL). A number alone is refused where it "
                        "could be another copy's")
    p.add_argument("--allow-older", action="store_true",
                   help="restore an archive older than the newest this GnuPG home has restored (deliberately "
                        "going back)")
    p.add_argument("--allow-unnumbered", action="store_true",
                   help="restore an archive made before backups were numbered (restore cannot tell whether "
                        "it is the newest)")
    p.add_argument("--gpg-binary", default="gpg", help=argparse.SUPPRESS)
    p.set_defaults(func=_restore)


def _wanted(text: str) -> Wanted:
    try:
        return parse_wanted(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    numbered = Numbered(report.instance, report.sequence, report.created)
    keep = f"{numbered.short()}:{numbered.sequence}"
    restore = restore_command(report.path, keep)
    out.result(
        {"out": report.path, "files": report.files, "bytes": report.bytes, "recipient": report.recipient,
         "signer": report.signer, "schema_version": report.schema_version, "seconds": round(seconds, 3),
         "sequence": report.sequence, "instance": report.instance, "created": report.created, "keep": keep,
         "restore_command": restore},
        f"{numbered.describe()}\n"
        f"wrote {report.path}: {report.files} files, {_size(report.bytes)} before encryption, in {seconds:.1f} s\n"
        f"  encrypted to {report.recipient} (check this fingerprint; only its secret key can restore it)\n"
        f"  signed by {report.signer} (the backup-signing key; restore refuses what it did not sign)\n"
        f"  keep {keep} (instance and number) with the backup key: with --not-older-than {keep}, restore refuses "
        "a backup that does not hold this one (an older one, or a restored copy's)\n"
        f"  restore with: {restore}\n"
        f"    BACKUP_GNUPG_HOME: the GnuPG home holding the secret key of {report.recipient}\n"
        f"    SIGNER.asc: the public key of {report.signer}, kept apart from the backups "
        f"(gpg{' --homedir ' + args.gnupg_home if args.gnupg_home else ''} --armor --export {report.signer})",
    )
    return 0


def restore_command(archive: str, keep: str) -> str:
    return (f"deaddrop-admin restore {shlex.quote(archive)} --data-dir NEW_DIR "
            f"--gnupg-home BACKUP_GNUPG_HOME --signer SIGNER.asc --not-older-than {keep}")


def _restore(args: argparse.Namespace, out: Output) -> int:
    started = time.monotonic()

    def verified(manifest: Manifest) -> None:
        origin = manifest.numbered.origin() if manifest.numbered else ""
        out.progress(f"{manifest.describe()}{origin}: signed by the backup-signing key; checking its number, "
                     "then restoring")

    try:
        report = restore_backup(args.archive, args.data_dir, args.signer, args.gnupg_home, args.gpg_binary,
                                not_older_than=args.not_older_than, allow_older=args.allow_older,
                                allow_unnumbered=args.allow_unnumbered, on_verified=verified)
    except BackupError as e:
        raise AdminError(str(e)) from None
    seconds = time.monotonic() - started
    manifest = report.manifest
    start = restored_start(report.data_dir, manifest)
    _record(report.data_dir, "admin.restore", report)
    numbered = manifest.numbered
    out.result(
        {"data_dir": report.data_dir, "files": report.files, "bytes": report.bytes, "signer": report.signer,
         "schema_version": manifest.schema_version, "created": manifest.created,
         "sequence": numbered.sequence if numbered else None, "instance": numbered.instance if numbered else None,
         "ancestry": [b.as_json() for b in numbered.ancestry] if numbered else None,
         "next_sequence": report.next_sequence, "new_instance": report.instance,
         "seconds": round(seconds, 3), "start_command": start.argv, "dropped_options": start.dropped,
         "as_at_backup": start.note, "remembered": report.remembered, "kept": list(report.kept),
         "not_restored": list(report.not_restored)},
        f"restored {report.files} files ({_size(report.bytes)}) signed by {report.signer} into {report.data_dir} "
        f"in {seconds:.1f} s; every file matched the manifest\n"
        + (f"  kept this server's own {', '.join(report.kept)} (already in the data dir, unchanged); "
           + (f"the archive's {', '.join(report.not_restored)} matched the manifest and were NOT restored\n"
              if report.not_restored else "the archive held no tls/ files\n")
           if report.kept else "")
        + f"  start it with: {shlex.join(start.argv)}\n"
        + ("  (the options it ran with at the backup" if manifest.start_options is not None else
           "  (the server was not running during the backup, so the options it ran with are not known: add them, "
           "e.g. from its systemd unit")
        + (f"; paths in the old data dir {start.moved_from} now name this one" if start.moved_from else "")
        + (f"; left out, for development only: {shlex.join(start.dropped)}" if start.dropped else "")
        + "; files named outside the data dir are not in the backup; no --submission-key: the data dir holds "
          "the instance's key)\n"
        + f"  {start.note}\n"
        + f"  or, as the service of docs/deploy/install.md: chown -R deaddrop: {shlex.quote(report.data_dir)}, "
          "then systemctl enable --now deaddrop\n"
          "  it keeps the onion address, sources, accounts and submission key\n"
        + (f"  its next backup will be #{report.next_sequence} of instance {report.instance[:SHORT]}, its own (each "
           f"restore starts a new one, so a copy's backups never pass for the original's); {report.remembered}"
           if report.next_sequence and report.instance else
           f"  {report.remembered}"),
    )
    return 0
