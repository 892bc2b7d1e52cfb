"""The journalist interface's languages: its catalogue (``locales/``, managed with Babel through
``scripts/i18n``), and which language a request's pages speak.

A logged-in journalist's pages speak the account's language (chosen on the account page, kept
with the account); until one is chosen, and before logging in, the browser's ``Accept-Language``
decides among ``JOURNALIST_LANGUAGES``, else English. The interface writes the code into the
session (``LANGUAGE``) when it reads the login, so every page built for that session, and every
flash said to it, speaks it: ``of(session)``.
"""
from __future__ import annotations

from typing import Any

from deaddrop.i18n.journalist import speech
from deaddrop.i18n.negotiation import from_accept_language
from deaddrop.i18n.speech import Speech
from deaddrop.newsroom.languages import DEFAULT, JOURNALIST_LANGUAGES, LANGUAGES
from deaddrop.web.sessions import Session

LANGUAGE = "language"  # the session's key for the code its pages speak


def N_(message: str) -> str:
    """Marks a message for extraction where it is defined; it is translated where it is shown."""
    return message


__all__ = ["LANGUAGE", "N_", "browser_language", "choices", "of", "speech"]  # speech: deaddrop.i18n.journalist's


def choices() -> list[tuple[str, str]]:
    """(code, name in its own language) of every journalist language, in the menu's order."""
    return [(code, LANGUAGES[code][0]) for code in JOURNALIST_LANGUAGES]


def browser_language(headers: Any) -> str:
    """The journalist language the request's ``Accept-Language`` asks for, else English."""
    raw = headers.getRawHeaders(b"accept-language") if headers is not None else None
    header = raw[0].decode("latin-1") if raw else None
    return from_accept_language(header, JOURNALIST_LANGUAGES) or DEFAULT


def of(session: Session | None) -> Speech:
    """What the pages and flashes of ``session`` speak (English for no session)."""
    return speech(session.data.get(LANGUAGE) if session is not None else None)
