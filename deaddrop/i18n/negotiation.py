"""Which of the languages an interface ships a browser asks for (``Accept-Language``).

The header is attacker-controlled: a bounded prefix and a bounded number of entries are read.
"""
from __future__ import annotations

from typing import Collection

_MAX_HEADER_CHARS = 512
_MAX_ENTRIES = 20
# Language subtags browsers still send for languages whose code changed (ISO 639 withdrew them).
_OLD_SUBTAGS = {"iw": "he", "in": "id", "ji": "yi"}
# Chinese is written in two scripts: a tag that names neither says it through its region.
_TRADITIONAL_REGIONS = frozenset({"tw", "hk", "mo"})


def bcp47(code: str) -> str:
    """A gettext code as a BCP 47 language tag (``zh_Hans`` -> ``zh-Hans``)."""
    return code.replace("_", "-")


def code_for_tag(tag: str, known: Collection[str]) -> str | None:
    """The code of ``known`` a browser's language tag asks for, or None.

    ``pt-BR`` is ``pt``; ``iw`` (an old code) is ``he``. Chinese goes by its script: ``zh-Hant``,
    ``zh-TW``, ``zh-HK`` and ``zh-MO`` are Traditional, any other ``zh`` Simplified.
    """
    subtags = tag.strip().lower().replace("_", "-").split("-")
    primary = _OLD_SUBTAGS.get(subtags[0], subtags[0])
    if primary == "zh":
        rest = set(subtags[1:])
        traditional = "hant" in rest or ("hans" not in rest and bool(rest & _TRADITIONAL_REGIONS))
        primary = "zh_Hant" if traditional else "zh_Hans"
    return primary if primary in known else None


def from_accept_language(header: str | None, known: Collection[str]) -> str | None:
    """The best of ``known`` for an ``Accept-Language`` value, or None.

    Each entry is read by ``code_for_tag``; entries keep their order among equal quality values.
    """
    if not header:
        return None
    ranked: list[tuple[float, int, str]] = []
    for index, entry in enumerate(header[:_MAX_HEADER_CHARS].split(",")[:_MAX_ENTRIES]):
        tag, _, params = entry.strip().partition(";")
        quality = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                quality = float(params[2:])
            except ValueError:
                continue
        code = code_for_tag(tag, known)
        if quality > 0 and code is not None:
            ranked.append((-quality, index, code))
    return min(ranked)[2] if ranked else None
