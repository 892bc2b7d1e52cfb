"""One language of one catalogue, as a page or a mail speaks it: its messages (gettext, with
Babel's plural rules), its numbers and its dates (``numerals``).

The journalist interface and the digest mail speak through a ``Speech``; the source interface
has its own richer ``Language`` (web/source/i18n.py) but fills its placeholders the same way
(``fill``).
"""
from __future__ import annotations

import datetime
import gettext as _gettext
from dataclasses import dataclass
from typing import Any

from deaddrop.i18n import numerals
from deaddrop.i18n.negotiation import bcp47

DOMAIN = "messages"


def fill(translated: str, english: str, values: dict[str, Any]) -> str:
    """``translated`` with its placeholders filled in; the English message if it cannot be (a
    catalog whose placeholders differ from the code's: ``scripts/i18n compile`` refuses one, and
    tests/test_i18n.py fails, but a page must never fail for it)."""
    try:
        return translated.format(**values)
    except (KeyError, IndexError, ValueError, AttributeError):
        return english.format(**values)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _utc(timestamp: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc)


@dataclass(frozen=True)
class Speech:
    code: str
    direction: str  # "ltr" or "rtl"
    translations: Any  # gettext.NullTranslations

    @property
    def tag(self) -> str:
        """The code as HTML's ``lang`` wants it (BCP 47)."""
        return bcp47(self.code)

    def _(self, message: str, **values: Any) -> str:
        """``message`` in this language, its placeholders filled; whole numbers among ``values``
        are written the language's way."""
        text = self.translations.gettext(message)
        return fill(text, message, self._shown(values)) if values else text

    def n_(self, singular: str, plural: str, n: int, **values: Any) -> str:
        """The message that says the count ``n`` (as ``{n}``), in the plural form the language
        uses for it (Babel's rules: Russian has three, Arabic six)."""
        english = singular if n == 1 else plural
        return fill(self.translations.ngettext(singular, plural, n), english, self._shown({**values, "n": n}))

    def _shown(self, values: dict[str, Any]) -> dict[str, Any]:
        return {k: self.number(v) if _is_count(v) else v for k, v in values.items()}

    def number(self, n: float) -> str:
        return numerals.number(n, self.code)

    def day(self, timestamp: float) -> str:
        """The day (UTC) of ``timestamp``, written out in the language's calendar."""
        return numerals.day(_utc(timestamp).date(), self.code)

    def clock(self, timestamp: float) -> str:
        """The time of day (UTC) of ``timestamp``, "HH:MM" in the language's digits."""
        return numerals.clock(_utc(timestamp).time(), self.code)


# English needs no catalogue: its messages are the code's own.
ENGLISH = Speech(ENGLISH_CODE := "en", "ltr", _gettext.NullTranslations())


def load(locale_dir: str, code: str, direction: str) -> Speech:
    """The language ``code`` of the catalogue under ``locale_dir`` (English: the messages as written)."""
    if code == ENGLISH_CODE:
        return ENGLISH
    # fallback=False: a missing catalogue is a packaging bug, not something to hide.
    return Speech(code, direction, _gettext.translation(DOMAIN, locale_dir, languages=[code]))
