"""Backup numbers: each backup of an instance is numbered above the last, and restore refuses to
go back to an older one.

Whoever can write where backups are kept can put an older, genuinely signed backup in place of
the newest: restoring it would bring back a deleted journalist's account with its passphrase and
TOTP secret, deleted sources, and an old CRL under which a revoked certificate is valid again.
A signature cannot tell old from new, a number can, within one line of backups
(``backup_lineage``: every restore starts a new line, with an instance id of its own).

``DATA/backup-sequence`` holds the instance's id (random, made at its first numbered backup or
by the restore that made the data dir), the number of its last backup and the backups it was
restored from; ``backup`` raises the number before it starts, so a failed backup uses up its
number and numbers only grow. It is not in the archive: the signed manifest carries all three,
and restore writes the file for the new line, numbered on from the backup restored.

Restore remembers, in ``deaddrop-newest-backup`` inside the GnuPG home holding the backup key's
secret half, the newest backup it has restored of each line (and of the lines it descends from),
and the lines it started, and refuses an archive older than one of them unless told to go back
deliberately. ``--not-older-than INSTANCE:N`` does the same from what the admin kept, for a
first restore on a machine that remembers nothing.
"""
from __future__ import annotations

import json
import os
import re
import secrets
from typing import Any

from deaddrop.admin.backup_lineage import WHY, Backup, Numbered, SequenceError, Wanted, check_wanted
from deaddrop.durable import write_atomically

SEQUENCE_FILE = "backup-sequence"
STATE_FILE = "deaddrop-newest-backup"
_INSTANCE = re.compile(r"^[0-9a-f]{32}$")

def _read_json(path: str) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read(64 * 1024).decode("utf-8"))


def parse_ancestry(value: Any, below: int) -> tuple[Backup, ...]:
    """The backups a line was restored from, oldest first, as the manifest and the numbers file
    hold them: distinct instances, numbers rising, each below the next line's ``below``.
    Raises ``ValueError``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError("ancestry")
    found = []
    for entry in value:
        if not (isinstance(entry, dict) and set(entry) == {"instance", "sequence"}
                and isinstance(entry["instance"], str) and _INSTANCE.match(entry["instance"])
                and isinstance(entry["sequence"], int) and entry["sequence"] >= 1):
            raise ValueError("ancestry")
        found.append(Backup(entry["instance"], entry["sequence"]))
    numbers = [b.sequence for b in found] + [below]
    if any(a >= b for a, b in zip(numbers, numbers[1:])) or len({b.instance for b in found}) != len(found):
        raise ValueError("ancestry")
    return tuple(found)


def take_next_number(data_dir: str) -> tuple[str, int, tuple[Backup, ...]]:
    """(instance id, this backup's number, the backups the instance was restored from), the
    number written to ``DATA/backup-sequence`` before the backup starts. A damaged file is
    refused rather than restarted from 1."""
    path = os.path.join(data_dir, SEQUENCE_FILE)
    try:
        held = _read_json(path)
        instance, last = held["instance"], held["sequence"]
        if not (isinstance(instance, str) and _INSTANCE.match(instance) and isinstance(last, int) and last >= 0):
            raise ValueError(instance)
        ancestry = parse_ancestry(held.get("ancestry"), last + 1)
    except FileNotFoundError:
        instance, last, ancestry = secrets.token_hex(16), 0, ()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SequenceError(f"{path} is damaged ({e.__class__.__name__}): it should read "
                            '{"instance": "<32 hex digits>", "sequence": <last backup number>} (and the "ancestry" '
                            "a restore wrote); put back the instance and last number the backups printed (restore "
                            "refuses backups older than one it saw)") from None
    write_numbers(data_dir, instance, last + 1, ancestry)
    return instance, last + 1, ancestry


def write_numbers(data_dir: str, instance: str, sequence: int, ancestry: tuple[Backup, ...] = ()) -> None:
    held: dict[str, Any] = {"instance": instance, "sequence": sequence}
    if ancestry:
        held["ancestry"] = [b.as_json() for b in ancestry]
    write_atomically(os.path.join(data_dir, SEQUENCE_FILE), json.dumps(held, sort_keys=True).encode() + b"\n", 0o600)


def start_line(data_dir: str, restored: Numbered, state: str) -> tuple[str, int]:
    """``DATA/backup-sequence`` for a restored data dir: a new instance id, descending from
    ``restored``; its next backup numbered above the one restored and above any newer one of
    that line this backup key's restores have seen. -> (new instance id, next backup's number)."""
    newest = newest_seen(state, restored.instance)
    last = max(restored.sequence, newest.sequence if newest else 0)
    instance = secrets.token_hex(16)
    write_numbers(data_dir, instance, last, restored.chain())
    return instance, last + 1


# -- what restore remembers --------------------------------------------------------------------------


def state_path(gnupg_home: str | None) -> str:
    """Where restore remembers the newest backup of each line: in the GnuPG home that holds the
    backup key's secret half (gpg's own when none is given)."""
    home = gnupg_home or os.environ.get("GNUPGHOME") or os.path.join(os.path.expanduser("~"), ".gnupg")
    return os.path.join(home, STATE_FILE)


def _known(state: str) -> dict[str, dict[str, Any]]:
    """instance -> {"sequence": newest restored (absent: none yet), "created": its time if known,
    "parent": the backup the line was restored from, if known}."""
    try:
        known = _read_json(state)
        if not isinstance(known, dict):
            raise ValueError(state)
        for instance, entry in known.items():
            if not (_INSTANCE.match(instance) and isinstance(entry, dict)
                    and isinstance(entry.get("sequence", 0), int) and isinstance(entry.get("created", ""), str)):
                raise ValueError(instance)
            parent = entry.get("parent")
            if parent is not None:
                parse_ancestry([parent], entry.get("sequence", parent["sequence"] + 1))
        return known
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError):
        # A damaged memory must not let an older backup through unnoticed.
        raise SequenceError(f"{state} cannot be read: restore keeps there the newest backup it has seen; "
                            "move it aside and give --not-older-than with your newest backup's instance and "
                            "number") from None


def _remembered(instance: str, entry: dict[str, Any]) -> Numbered | None:
    if "sequence" not in entry:
        return None  # a line this backup key's restore started, none of whose backups it restored
    return Numbered(instance, int(entry["sequence"]), str(entry.get("created", "")))


def _said(numbered: Numbered) -> str:
    return numbered.describe() if numbered.created else Backup.describe(numbered)


def newest_seen(state: str, instance: str) -> Numbered | None:
    entry = _known(state).get(instance)
    return None if entry is None else _remembered(instance, entry)


def remember(state: str, restored: Numbered, started: str) -> Numbered:
    """Keep ``restored`` (and each line it descends from, at the backup it holds of it) as the
    newest of its line unless a newer one is remembered, and ``started``, the line the restore
    began. -> the newest of ``restored``'s line."""
    known = _known(state)
    parent: Backup | None = None
    for line in restored.chain():
        entry = known.setdefault(line.instance, {})
        if entry.get("sequence", 0) < line.sequence:
            entry["sequence"] = line.sequence
            entry.pop("created", None)
            if line.instance == restored.instance:
                entry["created"] = restored.created
        if parent is not None:
            entry["parent"] = parent.as_json()
        parent = line
    known[started] = {"parent": Backup(restored.instance, restored.sequence).as_json()}
    write_atomically(state, json.dumps(known, sort_keys=True, indent=1).encode() + b"\n", 0o600)
    newest = _remembered(restored.instance, known[restored.instance])
    assert newest is not None
    return newest


def check_not_older(archive: str, found: Numbered, not_older_than: Wanted | None, state: str,
                    allow_older: bool) -> None:
    """Refuse ``found`` if its state does not hold the backup ``not_older_than`` names, or if it is
    older than a backup this backup key's restores saw (unless ``allow_older``): one of the lines
    it descends from at a backup below one remembered, or a remembered backup of a line restored
    from this archive or a newer backup of its line."""
    known = _known(state)
    if not_older_than is not None:
        starts = {i: (e["parent"]["sequence"] if e.get("parent") else 0) for i, e in known.items()}
        check_wanted(archive, found, not_older_than, starts)
    if allow_older:
        return
    for line in found.chain():
        newest = _remembered(line.instance, known.get(line.instance, {}))
        if newest is not None and line.sequence < newest.sequence:
            whose = "," if line.instance == found.instance else f", which holds {line.describe()} only,"
            _refuse_older(archive, found, f"{whose} older than {_said(newest)}", state)
    for instance, entry in known.items():
        newest = _remembered(instance, entry)
        point = _restored_from(known, instance, found.instance)
        if newest is not None and point is not None and point >= found.sequence:
            _refuse_older(archive, found, f", older than {_said(newest)} (of a copy restored from its #{point})",
                          state)


def _restored_from(known: dict[str, dict[str, Any]], instance: str, ancestor: str) -> int | None:
    """The backup of ``ancestor``'s line that ``instance``'s line descends from, if the state knows."""
    seen = set()
    while instance not in seen:
        seen.add(instance)
        parent = known.get(instance, {}).get("parent")
        if parent is None:
            return None
        if parent["instance"] == ancestor:
            return int(parent["sequence"])
        instance = parent["instance"]
    return None


def _refuse_older(archive: str, found: Numbered, why: str, state: str) -> None:
    raise SequenceError(f"{archive} is {found.describe()}{found.origin()}{why} which a restore with this backup key "
                        f"already saw (remembered in {state}): {WHY}; refused. To go back to it deliberately, add "
                        "--allow-older")


def refuse_unnumbered(archive: str, created: str) -> None:
    raise SequenceError(f"{archive} is a backup of {created} made before backups were numbered: restore cannot "
                        f"tell whether a newer one exists ({WHY}); refused. If you know it is the newest, "
                        "add --allow-unnumbered")
