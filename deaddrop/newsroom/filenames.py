# -*- test-case-name: tests.test_codenames -*-
"""Sanitising the names sources give their files.

The name travels only inside the encrypted envelope, but the SVS will write a file under it,
so it must be a plain, harmless, single path component in every operating system.
"""
from __future__ import annotations

import os
import re
import unicodedata

MAX_NAME_BYTES = 200
FALLBACK_NAME = "document"

_WINDOWS_DEVICES = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9]|conin\$|conout\$)(\..*)?$", re.IGNORECASE)
# Characters that are separators, reserved on Windows or invisible/direction-changing.
_FORBIDDEN = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]')


def sanitise_filename(raw: str | None) -> str:
    if not raw:
        return FALLBACK_NAME
    name = unicodedata.normalize("NFC", raw)
    # Browsers may send a full path (old IE) with either separator: keep only the last part.
    name = re.split(r"[/\\]", name)[-1]
    name = _FORBIDDEN.sub("_", name)
    name = name.strip(" .")  # no hidden files, no "..", no trailing dots (Windows)
    if not name:
        return FALLBACK_NAME
    if _WINDOWS_DEVICES.match(name):
        name = "_" + name
    return _truncate(name)


def _truncate(name: str) -> str:
    if len(name.encode("utf-8")) <= MAX_NAME_BYTES:
        return name
    stem, ext = os.path.splitext(name)
    ext = ext if len(ext.encode("utf-8")) <= 16 else ""
    budget = MAX_NAME_BYTES - len(ext.encode("utf-8"))
    encoded = stem.encode("utf-8")[:budget]
    stem = encoded.decode("utf-8", "ignore")  # never cut a character in half
    return (stem or FALLBACK_NAME) + ext
