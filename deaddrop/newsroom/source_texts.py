# -*- test-case-name: tests.integration.test_journalist_web,tests.integration.test_source_pages -*-
"""What admins write for the source pages: welcome text, submission instructions and a logo,
per language, with English as the fallback. Kept in the database's ``settings`` table.

Texts are plain text (blank lines make paragraphs; no HTML). A logo is a PNG that
``deaddrop.newsroom.png.clean_png`` accepted, served from the source interface itself under a name made
of its hash, so it is cacheable and no page ever loads anything from elsewhere.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from deaddrop.store import queries

KINDS = ("welcome", "instructions")
MAX_TEXT_CHARS = 2000
FALLBACK = "en"


def _key(kind: str, code: str) -> str:
    return f"source.{kind}.{code}"


def logo_name(png: bytes) -> str:
    return hashlib.sha256(png).hexdigest()[:20] + ".png"


def text_problem(text: str) -> str | None:
    """Why an admin's text cannot be used, or None."""
    if len(text) > MAX_TEXT_CHARS:
        return f"Texts are limited to {MAX_TEXT_CHARS:,} characters."
    if any(ord(c) < 32 and c not in "\n\r\t" for c in text):
        return "Texts cannot contain control characters."
    return None


@dataclass
class SourceTexts:
    texts: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, code) -> text
    logos: dict[str, bytes] = field(default_factory=dict)  # code -> PNG

    @classmethod
    def from_stored(cls, stored: dict[str, str]) -> "SourceTexts":
        out = cls()
        for key, value in stored.items():
            parts = key.split(".")
            if len(parts) != 3 or parts[0] != "source" or not value:
                continue
            if parts[1] in KINDS:
                out.texts[(parts[1], parts[2])] = value
            elif parts[1] == "logo":
                out.logos[parts[2]] = base64.b64decode(value)
        return out

    def text(self, kind: str, code: str) -> str:
        return self.texts.get((kind, code)) or self.texts.get((kind, FALLBACK), "")

    def logo_url(self, code: str) -> str | None:
        png = self.logos.get(code) or self.logos.get(FALLBACK)
        return f"/logo/{logo_name(png)}" if png else None

    def logo_named(self, name: str) -> bytes | None:
        for png in self.logos.values():
            if logo_name(png) == name:
                return png
        return None

    # -- changes: save (on the database thread), then apply in memory ---------------------------

    @staticmethod
    def save_text(conn, kind: str, code: str, text: str) -> None:
        queries.set_setting(conn, _key(kind, code), text)

    @staticmethod
    def save_logo(conn, code: str, png: bytes | None) -> None:
        queries.set_setting(conn, _key("logo", code), base64.b64encode(png).decode("ascii") if png else "")

    def apply_text(self, kind: str, code: str, text: str) -> None:
        if text:
            self.texts[(kind, code)] = text
        else:
            self.texts.pop((kind, code), None)

    def apply_logo(self, code: str, png: bytes | None) -> None:
        if png:
            self.logos[code] = png
        else:
            self.logos.pop(code, None)
