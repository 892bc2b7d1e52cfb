"""The source interface's languages: gettext catalogs (managed with Babel) and choosing one.

The language is the one a source picked in the menu (a cookie that holds nothing but the
language code), else the best match of the browser's ``Accept-Language``, else English.
Catalogs live in ``locales/<code>/LC_MESSAGES/messages.po``; the compiled ``.mo`` files are
committed beside them (``scripts/i18n compile`` rebuilds them), so an install needs no build step.
"""
from __future__ import annotations

import gettext as _gettext
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from deaddrop.i18n import negotiation
from deaddrop.i18n.speech import fill
from deaddrop.newsroom.languages import DEFAULT, INCOMPLETE, LANGUAGES

LOCALE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "locales")
DOMAIN = "messages"
COOKIE = "dd_lang"

TRANSLATED = tuple(code for code in LANGUAGES if code != DEFAULT)

# Languages whose sentences follow each other without a space ("……的文件。为了您的安全，……").
_NO_SPACE_BETWEEN_SENTENCES = frozenset({"zh", "ja"})


def N_(message: str) -> str:
    """Marks a string for extraction where it is defined; it is translated where it is shown."""
    return message


def Np_(singular: str, plural: str) -> tuple[str, str]:
    """``N_`` for a message that says a count (``scripts/i18n`` extracts it with its plural)."""
    return singular, plural


@dataclass(frozen=True)
class Counted:
    """A message that says one or more counts, in the plural forms of the language (Babel's
    plural rules: Arabic has six, Russian three). Its sentences are plain message ids, or
    ``(Np_(singular, plural), key)``: said in the form for ``values[key]``, as ``{n}``."""

    parts: tuple[Any, ...]

    def __init__(self, *parts: Any) -> None:
        object.__setattr__(self, "parts", parts)

    def say(self, lang: "Language", number: Callable[[int], str], values: dict[str, Any]) -> str:
        shown = {k: number(v) if _is_count(v) else v for k, v in values.items()}
        sentences = []
        for part in self.parts:
            if isinstance(part, str):
                sentences.append(fill(lang.gettext(part), part, shown))
                continue
            (singular, plural), key = part
            count = values[key]
            english = singular if count == 1 else plural
            sentences.append(fill(lang.ngettext(singular, plural, count), english, {**shown, "n": number(count)}))
        return lang.space.join(sentences)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    direction: str
    translations: Any  # gettext.NullTranslations

    @property
    def tag(self) -> str:
        """The code as HTML's ``lang`` wants it (BCP 47: ``zh-Hans``, not gettext's ``zh_Hans``)."""
        return bcp47(self.code)

    @property
    def space(self) -> str:
        """What goes between two sentences: a space, or nothing in Chinese."""
        return "" if self.code.split("_")[0] in _NO_SPACE_BETWEEN_SENTENCES else " "

    @property
    def complete(self) -> bool:
        """Every message translated (else the menu says so: ``languages.INCOMPLETE``)."""
        return self.code not in INCOMPLETE

    def gettext(self, message: str) -> str:
        return self.translations.gettext(message)

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        return self.translations.ngettext(singular, plural, n)


@lru_cache(maxsize=None)
def language(code: str) -> Language:
    """The ``Language`` for a code of ``LANGUAGES`` (English for any other)."""
    if code not in LANGUAGES:
        code = DEFAULT
    name, direction = LANGUAGES[code]
    if code == DEFAULT:
        translations: Any = _gettext.NullTranslations()
    else:
        # fallback=False: a missing catalog is a packaging bug, not something to hide.
        translations = _gettext.translation(DOMAIN, LOCALE_DIR, languages=[code])
    return Language(code, name, direction, translations)


def bcp47(code: str) -> str:
    """A gettext code as a BCP 47 language tag (``zh_Hans`` -> ``zh-Hans``)."""
    return negotiation.bcp47(code)


def code_for_tag(tag: str) -> str | None:
    """The code of ``LANGUAGES`` a browser's language tag asks for, or None (``negotiation``)."""
    return negotiation.code_for_tag(tag, LANGUAGES)


def from_accept_language(header: str | None) -> str | None:
    """The best of ``LANGUAGES`` for an ``Accept-Language`` value, or None (``negotiation``)."""
    return negotiation.from_accept_language(header, LANGUAGES)


def negotiate(request: Any) -> Language:
    """The language of this request: the menu's cookie, else Accept-Language, else English."""
    chosen = request.getCookie(COOKIE.encode())
    if chosen:
        code = chosen.decode("ascii", "replace")
        if code in LANGUAGES:
            return language(code)
    header = request.getHeader(b"accept-language")
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    return language(from_accept_language(header) or DEFAULT)


def from_headers(headers: Any) -> Language:
    """``negotiate`` for raw request headers (a refusal answered before any route runs);
    English when there are none yet."""
    if headers is None:
        return language(DEFAULT)
    for raw in headers.getRawHeaders(b"cookie", [])[:8]:
        for pair in raw[:4096].split(b";"):
            name, _, value = pair.strip().partition(b"=")
            code = value.decode("ascii", "replace")
            if name == COOKIE.encode() and code in LANGUAGES:
                return language(code)
    accept = (headers.getRawHeaders(b"accept-language") or [b""])[0]
    return language(from_accept_language(accept.decode("latin-1")) or DEFAULT)


def remember(request: Any, code: str) -> None:
    """Set the menu's cookie: the language code and nothing else, for this browser session only.
    This request's own answer is in that language too (``negotiate``): the language menu of a
    page with a form answers with the page itself."""
    request.addCookie(COOKIE.encode(), code.encode("ascii"), path=b"/", httpOnly=True,
                      secure=request.isSecure(), sameSite="lax")
    received = getattr(request, "received_cookies", None)
    if isinstance(received, dict):
        received[COOKIE.encode()] = code.encode("ascii")
