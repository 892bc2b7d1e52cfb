"""docs/monitoring.md as a catalogue: every security event, its keys and its reasons.

``install()`` (run by ``tests/__init__.py``, so for every test of the suite) checks each event
the code emits in the test process against the catalogue; an event, key or reason the doc does
not list is logged as an error, which fails the test that emitted it. Events written by servers
run as child processes are checked where the tests read them (``problems()``).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twisted.python import log

from deaddrop.events import ALLOWED_FIELDS, add_observer
from tests._markdown import table_rows

DOC = Path(__file__).resolve().parents[1] / "docs" / "monitoring.md"
ALWAYS = frozenset({"timestamp", "event", "program"})
_TOKEN = re.compile(r"`([A-Za-z0-9_]+)`")


class UnlistedEvent(Exception):
    """An event, key or reason that docs/monitoring.md does not list."""


class CatalogueError(Exception):
    """docs/monitoring.md's event table cannot be read as a catalogue."""


@dataclass(frozen=True)
class Entry:
    fields: frozenset[str]
    reasons: tuple[str, ...]  # as written, ``N`` standing for a number

    def reason_listed(self, reason: str) -> bool:
        return any(_reason_pattern(r).fullmatch(reason) for r in self.reasons)


@functools.lru_cache(maxsize=None)
def _reason_pattern(written: str) -> re.Pattern:
    return re.compile("_".join(r"\d+" if part == "N" else re.escape(part) for part in written.split("_")))


def _rows(text: str) -> list[list[str]]:
    try:
        return table_rows(text, "| event | fields | meaning |")
    except ValueError as e:
        raise CatalogueError(str(e)) from None


def _names(cell: str) -> list[str]:
    names = []
    for written in re.findall(r"`([a-z0-9_.]+)`", cell):
        if written.startswith("."):
            if not names:
                raise CatalogueError(f"{written} has no event before it to abbreviate: {cell}")
            written = names[-1].rsplit(".", 1)[0] + written
        names.append(written)
    if not names:
        raise CatalogueError(f"no event name in {cell!r}")
    return names


def _fields(cell: str) -> frozenset[str]:
    fields = set()
    for part in re.sub(r"\([^)]*\)", "", cell).split(","):
        name = part.strip().strip("`")
        if name not in ALLOWED_FIELDS:
            raise CatalogueError(f"{name!r} is not a key of deaddrop/events.py's allow-list: {cell!r}")
        fields.add(name)
    return frozenset(fields)


def parse(text: str) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for names, fields, meaning in _rows(text):
        fields_set = _fields(fields)
        reasons: tuple[str, ...] = ()
        if "reason" in fields_set:
            reasons = tuple(t for t in _TOKEN.findall(meaning) if t not in ALLOWED_FIELDS)
            if not reasons:
                raise CatalogueError(f"{names}: a reason key, but no reason listed")
        for name in _names(names):
            if name in found:
                raise CatalogueError(f"{name} is listed twice")
            found[name] = Entry(fields_set, reasons)
    return found


def allow_list_in_doc(text: str) -> set[str]:
    """The keys the prose says come from the allow-list."""
    start = text.index("Other keys come")
    paragraph = text[start:text.index("\n\n", start)]
    return set(re.findall(r"`([a-z_]+)`", paragraph.split("The table below")[0])) - {"deaddrop"}


@functools.lru_cache(maxsize=1)
def catalogue() -> dict[str, Entry]:
    return parse(DOC.read_text("utf-8"))


def problems(record: dict[str, Any]) -> list[str]:
    """What in this event line docs/monitoring.md does not list."""
    name = record.get("event")
    entry = catalogue().get(name)
    if entry is None:
        return [f"the event {name!r} is not listed in docs/monitoring.md"]
    found = [f"{name}: the key {key!r} is not listed for it in docs/monitoring.md"
             for key in sorted(set(record) - ALWAYS - entry.fields)]
    reason = record.get("reason")
    if reason is not None and not entry.reason_listed(str(reason)):
        found.append(f"{name}: the reason {reason!r} is not listed for it in docs/monitoring.md")
    return found


def check(record: dict[str, Any]) -> None:
    found = problems(record)
    if found:
        log.err(UnlistedEvent("; ".join(found)), "a security event docs/monitoring.md does not list")


def install() -> None:
    if not getattr(install, "done", False):
        install.done = True  # type: ignore[attr-defined]
        add_observer(check)
