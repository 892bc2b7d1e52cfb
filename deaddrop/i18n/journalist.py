"""The journalist catalogue's languages as ``Speech``: what the journalist interface, its digest
mail and ``deaddrop-admin digest test`` speak (``JOURNALIST_LANGUAGES``; English for any other)."""
from __future__ import annotations

from functools import lru_cache

from deaddrop.i18n.catalogs import JOURNALIST
from deaddrop.i18n.speech import Speech, load
from deaddrop.newsroom.languages import DEFAULT, JOURNALIST_LANGUAGES, LANGUAGES


@lru_cache(maxsize=None)
def speech(code: str | None) -> Speech:
    if code not in JOURNALIST_LANGUAGES:
        code = DEFAULT
    return load(JOURNALIST.locale_dir, code, LANGUAGES[code][1])
