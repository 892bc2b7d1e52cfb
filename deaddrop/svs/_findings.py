"""What ``mat2 --show`` found in a file, and how that is told to the operator.

mat2 lists metadata fields by the names each format gives them (``Artist``, ``GPSLatitude``,
``dc:creator``, ``date_time`` for every member of a docx...): 78 of them for an ordinary Word
file, where the one that names the source is easily missed. So the kinds that identify or
date someone are named first, in plain words, each with the fields that made it (``author/
creator (dc:creator)``), and the rest are counted. Field names only, never their values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from deaddrop.svs._inputs import display

MAX_FIELDS_NAMED = 8  # per kind; the rest of a kind's fields are counted

# In the order they are told. A field belongs to the first pattern it matches; None: a field
# whose name looks like one of these but says nothing of who, where or when (exposure time).
_KINDS: list[tuple[str | None, re.Pattern[str]]] = [
    ("software", re.compile(r"software|producer|application|appversion|creatortool|generator|encod|program|tool")),
    ("author/creator", re.compile(r"author|creator|artist|owner|modifiedby|byline|company|manager|copyright"
                                  r"|contributor|publisher|user(?!comment)")),
    ("GPS/location", re.compile(r"gps|location|latitude|longitude|altitude|geotag|city|country")),
    ("camera make/model/serial", re.compile(r"^make|model|serial|lens|camera")),
    (None, re.compile(r"exposure|shutter|focal|duration|timezone|timescale|uptodate")),
    ("dates", re.compile(r"date|time|year|created|modified")),
    ("comments", re.compile(r"comment|description|notes?$")),
]
TOLD_FIRST = ["author/creator", "GPS/location", "camera make/model/serial", "software", "dates", "comments"]


@dataclass
class Findings:
    """What ``mat2 --show`` said of one file."""

    supported: bool
    kinds: list[str] = field(default_factory=list)  # metadata field names (never their values)
    problem: str | None = None  # why mat2 cannot clean it


_UNSUPPORTED_RE = re.compile(r"format \(([^)]*)\) is not supported")
_WENT_WRONG_RE = re.compile(r"something went wrong")
_HEADER_RE = re.compile(r"^\[\++\] Metadata for ")
_NONE_RE = re.compile(r"^\s*No metadata found in ")
# "    dc:creator: Jane": the name ends at the first ": " (names hold colons: dc:creator).
_FIELD_RE = re.compile(r"^\s+(\S.{0,199}?): ")
_BARE_FIELD_RE = re.compile(r"^\s+(\S[^:]{0,199}):\s*$")


def parse_show(text: str) -> Findings:
    """Parse ``mat2 --show``'s output: field names at any depth (archive members nest), no
    values. Output that is none of what mat2 prints for a file it read is a failure."""
    kinds: list[str] = []
    understood = False
    for line in text.splitlines():
        m = _UNSUPPORTED_RE.search(line)
        if m:
            return Findings(False, problem=f"mat2 cannot clean this type ({display(m.group(1))})")
        if line.startswith("[-]") or _WENT_WRONG_RE.search(line):
            return Findings(False, problem="mat2 cannot read it (damaged, or not what its name says)")
        if _HEADER_RE.match(line) or _NONE_RE.match(line):
            understood = True
            continue
        m = _FIELD_RE.match(line) or _BARE_FIELD_RE.match(line)
        if m and understood:
            kind = display(m.group(1).strip())[:60]
            if kind not in kinds:
                kinds.append(kind)
    if not understood:
        return Findings(False, problem="mat2 said nothing it was expected to say about it")
    return Findings(True, sorted(kinds, key=str.lower))


def kind_of(name: str) -> str | None:
    """The plain-word kind a field belongs to (``"GPS/location"``), or ``None`` for the rest."""
    lowered = name.lower()
    for kind, pattern in _KINDS:
        if pattern.search(lowered):
            return kind
    return None


def describe(fields: list[str]) -> str:
    """``author/creator (Artist, OwnerName), GPS/location (GPSLatitude, ...), and 3 other kinds``."""
    grouped: dict[str, list[str]] = {kind: [] for kind in TOLD_FIRST}
    others = 0
    for name in fields:
        kind = kind_of(name)
        if kind is None:
            others += 1
        else:
            grouped[kind].append(name)
    parts = []
    for kind in TOLD_FIRST:
        names = grouped[kind]
        if names:
            shown = ", ".join(names[:MAX_FIELDS_NAMED])
            more = len(names) - MAX_FIELDS_NAMED
            parts.append(f"{kind} ({shown}{f' and {more} more' if more > 0 else ''})")
    if others:
        plural = "s" if others != 1 else ""
        parts.append(f"and {others} other kind{plural}" if parts else f"{others} kind{plural} of metadata")
    return ", ".join(parts)
