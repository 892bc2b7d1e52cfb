"""Backup numbers: each backup of an instance is numbered above the last, and restore refuses to
go back to an older one.

Whoever can write where backups are kept can put an older, genuinely signed backup in place of
the newest: restoring it would bring back a deleted journalist's account with its passphrase and
TOTP secret, deleted sources, and an old CRL under which a revoked certificate is valid again.
A signature cannot tell old from new, a number can.

``DATA/backup-sequence`` holds the instance's id (random, made at its first numbered backup) and
the number of its last backup; ``backup`` raises it before it starts, so a failed backup uses up
its number and numbers only grow. It is not in the archive: the signed manifest carries the
number, and restore writes the file from it, so the restored instance's next backup is numbered
above the one restored.

Restore remembers, in ``deaddrop-newest-backup`` inside the GnuPG home holding the backup key's
secret half, the newest number it has restored of each instance, and refuses an older one
unless told to go back deliberately. ``--not-older-than N`` does the same from a number the
admin kept, for a first restore on a machine that remembers nothing.
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from typing import Any

from deaddrop.durable import write_atomically

SEQUENCE_FILE = "backup-sequence"
STATE_FILE = "deaddrop-newest-backup"
_WHY = "an older backup brings back deleted accounts and sources, and an older CRL"


class SequenceError(Exception):
    """An archive older than one the admin asked for or restore already saw, or a damaged
    numbers file; one line for the admin."""


@dataclass(frozen=True)
class Numbered:
    instance: str  # 32 hex digits, the same for every backup of one instance (and its restored copies)
    sequence: int
    created: str  # UTC, to the second: "2026-12-04T17:43:05Z"

    def describe(self) -> str:
        return f"backup #{self.sequence}, {self.created}"


def _read_json(path: str) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read(64 * 1024).decode("utf-8"))


def take_next_number(data_dir: str) -> tuple[str, int]:
    """(instance id, this backup's number), the number written to ``DATA/backup-sequence``
    before the backup starts. A damaged file is refused rather than restarted from 1."""
    path = os.path.join(data_dir, SEQUENCE_FILE)
    try:
        held = _read_json(path)
        instance, last = held["instance"], held["sequence"]
        if not (isinstance(instance, str) and len(instance) == 32 and isinstance(last, int) and last >= 0):
            raise ValueError(instance)
    except FileNotFoundError:
        instance, last = secrets.token_hex(16), 0
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SequenceError(f"{path} is damaged ({e.__class__.__name__}): it should read "
                         '{"instance": "<32 hex digits>", "sequence": <last backup number>}; put back the last '
                         "number the backups printed (restore refuses backups numbered below one it saw)") from None
    write_numbers(data_dir, instance, last + 1)
    return instance, last + 1


def write_numbers(data_dir: str, instance: str, sequence: int) -> None:
    data = json.dumps({"instance": instance, "sequence": sequence}, sort_keys=True).encode() + b"\n"
    write_atomically(os.path.join(data_dir, SEQUENCE_FILE), data, 0o600)


def state_path(gnupg_home: str | None) -> str:
    """Where restore remembers the newest backup of each instance: in the GnuPG home that holds
    the backup key's secret half (gpg's own when none is given)."""
    home = gnupg_home or os.environ.get("GNUPGHOME") or os.path.join(os.path.expanduser("~"), ".gnupg")
    return os.path.join(home, STATE_FILE)


def newest_seen(state: str, instance: str) -> Numbered | None:
    try:
        entry = _read_json(state)[instance]
        return Numbered(instance, int(entry["sequence"]), str(entry["created"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        # A damaged memory must not let an older backup through unnoticed.
        raise SequenceError(f"{state} cannot be read: restore keeps there the newest backup it has seen; "
                              "move it aside and give --not-older-than with your newest backup's number") from None


def remember(state: str, restored: Numbered) -> Numbered:
    """Keep ``restored`` as this instance's newest, unless a newer one is remembered. -> the newest."""
    try:
        known = _read_json(state)
    except FileNotFoundError:
        known = {}
    newest = newest_seen(state, restored.instance)
    if newest is None or restored.sequence > newest.sequence:
        known[restored.instance] = {"sequence": restored.sequence, "created": restored.created}
        write_atomically(state, json.dumps(known, sort_keys=True, indent=1).encode() + b"\n", 0o600)
        return restored
    return newest


def check_not_older(archive: str, found: Numbered, not_older_than: int | None, state: str,
                    allow_older: bool) -> None:
    """Refuse ``found`` if its number is below ``not_older_than`` or below the newest backup of the
    same instance that restore remembers (unless ``allow_older``)."""
    if not_older_than is not None and found.sequence < not_older_than:
        raise SequenceError(f"{archive} is {found.describe()}, older than --not-older-than {not_older_than}: "
                              f"{_WHY}; refused. Restore backup #{not_older_than} or a newer one")
    newest = newest_seen(state, found.instance)
    if newest is not None and found.sequence < newest.sequence and not allow_older:
        raise SequenceError(f"{archive} is {found.describe()}, older than {newest.describe()} which a restore with "
                              f"this backup key already saw (remembered in {state}): {_WHY}; refused. To go back "
                              "to it deliberately, add --allow-older")


def refuse_unnumbered(archive: str, created: str) -> None:
    raise SequenceError(f"{archive} is a backup of {created} made before backups were numbered: restore cannot "
                          f"tell whether a newer one exists ({_WHY}); refused. If you know it is the newest, "
                          "add --allow-unnumbered")
