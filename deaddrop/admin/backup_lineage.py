"""Lines of backups: which backups of which instance an archive's state holds.

Backup numbers alone cannot tell copies apart. A restored copy (a restore drill on another
machine) that kept the original's instance id and numbered on from the backup it came from made
backups with the same numbers as the original's later ones: the copy's #3, restored from #1,
does not hold what the original deleted before its #2, yet a number comparison took it as newer.

So every restore starts a new line: the restored data dir gets an instance id of its own and
remembers the backups it descends from (its ancestry: the backup it was restored from, the one
that instance was restored from, and so on, oldest first). An archive's state holds backup N of
instance I exactly when I is the archive's own instance and N is at most its number, or I is an
ancestor restored from at #M with N at most M. ``backup`` prints the instance with the number
("backup #42 of instance 3f9a2c1d, ..."); ``--not-older-than 3f9a2c1d:42`` asks for exactly that.

A plain ``--not-older-than 42`` does not say whose #42 it was. It is accepted only when every line
restore knows of (the archive's ancestry, and the copies this backup key's restores started)
that could have made a #42 is one whose #42 the archive holds; otherwise restore refuses and
asks for ``INSTANCE:42``. A copy restore never heard of (restored with another backup key home)
is invisible to a plain number: the printed ``INSTANCE:N`` is the form to keep.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SHORT = 8  # the hex digits of an instance id that ``backup`` prints and --not-older-than takes
_WANTED = re.compile(r"^(?:([0-9a-f]{%d,32}):)?([0-9]+)$" % SHORT)
WHY = "an older backup brings back deleted accounts and sources, and an older CRL"


class SequenceError(Exception):
    """An archive that does not hold the backup the admin asked for, or older than one restore
    already saw, or a damaged numbers file; one line for the admin."""


@dataclass(frozen=True)
class Backup:
    """Backup #``sequence`` of an instance: a point in that instance's line."""

    instance: str  # 32 hex digits, made at the instance's first backup or by the restore that made it
    sequence: int

    def short(self) -> str:
        return self.instance[:SHORT]

    def describe(self) -> str:
        return f"backup #{self.sequence} of instance {self.short()}"

    def as_json(self) -> dict[str, object]:
        return {"instance": self.instance, "sequence": self.sequence}


@dataclass(frozen=True)
class Numbered(Backup):
    """An archive's number, time and ancestry, from its signed manifest."""

    created: str = ""  # UTC, to the second: "2026-12-04T17:43:05Z"
    ancestry: tuple[Backup, ...] = ()  # the backups its line was restored from, oldest first

    def describe(self) -> str:
        return f"{super().describe()}, {self.created}"

    def origin(self) -> str:
        """" (restored from backup #1 of instance 3f9a2c1d)", or "" for an instance never restored."""
        return f" (restored from {self.ancestry[-1].describe()})" if self.ancestry else ""

    def chain(self) -> tuple[Backup, ...]:
        """Every line the archive's state holds, each with the newest of its backups it holds."""
        return (*self.ancestry, Backup(self.instance, self.sequence))

    def holds(self, instance: str) -> Backup | None:
        return next((b for b in self.chain() if b.instance == instance), None)


@dataclass(frozen=True)
class Wanted:
    """``--not-older-than``: a backup number, with (a prefix of) its instance id if given."""

    sequence: int
    instance: str | None

    def __str__(self) -> str:
        return f"{self.instance}:{self.sequence}" if self.instance else str(self.sequence)


def parse_wanted(text: str) -> Wanted:
    """``42`` or ``3f9a2c1d:42`` (at least SHORT hex digits). Raises ``ValueError``."""
    m = _WANTED.match(text.strip().lower())
    if not m or int(m.group(2)) < 1:
        raise ValueError(f"give the instance and number as 'backup' printed them ('backup #42 of instance 3f9a2c1d' "
                         f"is 3f9a2c1d:42; at least {SHORT} hex digits), or a number alone, not {text!r}")
    return Wanted(int(m.group(2)), m.group(1))


def check_wanted(archive: str, found: Numbered, wanted: Wanted, known: dict[str, int]) -> None:
    """Refuse ``found`` unless its state holds the backup ``wanted`` names. ``known`` maps each
    line a restore with this backup key saw or started to the number it was restored from (0:
    never restored)."""
    if wanted.instance is not None:
        _check_named(archive, found, wanted)
    else:
        _check_plain(archive, found, wanted.sequence, known)


def _said(archive: str, found: Numbered) -> str:
    return f"{archive} is {found.describe()}{found.origin()}"


def _check_named(archive: str, found: Numbered, wanted: Wanted) -> None:
    assert wanted.instance is not None
    lines = [b for b in found.chain() if b.instance.startswith(wanted.instance)]
    if len(lines) > 1:
        raise SequenceError(f"{_said(archive, found)}: the instance {wanted.instance} of --not-older-than {wanted} "
                            "matches more than one instance this archive descends from; give more of its digits")
    if not lines:
        raise SequenceError(f"{_said(archive, found)}, which holds no backup of instance {wanted.instance} "
                            f"(--not-older-than {wanted}): it is not that instance nor a copy restored from it; "
                            f"{WHY}; refused. Restore a backup of instance {wanted.instance}, #{wanted.sequence} "
                            "or a newer one")
    held = lines[0]
    if held.sequence < wanted.sequence:
        through = ("" if held.instance == found.instance
                   else f", which holds instance {held.short()} only through its backup #{held.sequence}")
        raise SequenceError(f"{_said(archive, found)}{through}, older than --not-older-than {wanted}: {WHY}; refused. "
                            f"Restore backup #{wanted.sequence} of instance {held.short()} or a newer one")


def _check_plain(archive: str, found: Numbered, sequence: int, known: dict[str, int]) -> None:
    # Each line's numbers start above the backup it was restored from (0: never restored), and
    # it may have gone on numbering after a copy was restored from it.
    starts = dict(known)
    previous = 0
    for line in found.chain():
        starts[line.instance] = previous
        previous = line.sequence
    could = [instance for instance, start in starts.items() if sequence > start]
    holding = [i for i in could if (found.holds(i) or Backup(i, 0)).sequence >= sequence]
    if not holding:
        raise SequenceError(f"{_said(archive, found)}, older than --not-older-than {sequence}: {WHY}; refused. "
                            f"Restore backup #{sequence} or a newer one")
    missing = [i for i in could if i not in holding]
    if missing:
        raise SequenceError(
            f"{_said(archive, found)}: --not-older-than {sequence} does not say which instance's backup #{sequence} "
            f"you mean, and this archive holds the #{sequence} of instance {', '.join(i[:SHORT] for i in holding)} but "
            f"not of {', '.join(_lacking(found, i, known) for i in missing)}: a copy restored from an older backup "
            f"and backed up since has numbers of its own; {WHY}; refused. Give the instance your newest backup "
            f"printed ('backup #{sequence} of instance ...'): --not-older-than INSTANCE:{sequence}")


def _lacking(found: Numbered, instance: str, known: dict[str, int]) -> str:
    held = found.holds(instance)
    if held is not None:
        return f"instance {instance[:SHORT]} (only through its #{held.sequence})"
    if known[instance]:
        return f"instance {instance[:SHORT]} (a copy a restore with this backup key made from a #{known[instance]})"
    return f"instance {instance[:SHORT]} (another instance whose backups a restore with this backup key saw)"
