# -*- test-case-name: tests.test_i18n -*-
"""The languages the source interface speaks (its pages and the admin's per-language texts), and
those of the journalist interface.

A language is shipped once it is listed here and its catalog is compiled (docs/translating.md);
the menu lists them in the order below. The codes are gettext's (the folder names under
``deaddrop/web/source/locales``, such as ``zh_Hans``); pages write them as BCP 47 tags
(``zh-Hans``: ``i18n.Language.tag``).
"""

# code -> (name in its own language, text direction). English is the source language.
# The menu's order: Latin script, then Cyrillic, then right to left, then the scripts of South
# and Southeast Asia, then Chinese and Korean.
LANGUAGES: dict[str, tuple[str, str]] = {
    "en": ("English", "ltr"),
    "es": ("Español", "ltr"),
    "fr": ("Français", "ltr"),
    "de": ("Deutsch", "ltr"),
    "it": ("Italiano", "ltr"),
    "pt": ("Português", "ltr"),
    "nl": ("Nederlands", "ltr"),
    "pl": ("Polski", "ltr"),
    "tr": ("Türkçe", "ltr"),
    "id": ("Bahasa Indonesia", "ltr"),
    "vi": ("Tiếng Việt", "ltr"),
    "sw": ("Kiswahili", "ltr"),
    "ru": ("Русский", "ltr"),
    "uk": ("Українська", "ltr"),
    "ar": ("العربية", "rtl"),
    "fa": ("فارسی", "rtl"),
    "ur": ("اردو", "rtl"),
    "he": ("עברית", "rtl"),
    "hi": ("हिन्दी", "ltr"),
    "bn": ("বাংলা", "ltr"),
    "my": ("မြန်မာ", "ltr"),
    "zh_Hans": ("简体中文", "ltr"),
    "zh_Hant": ("繁體中文", "ltr"),
    "ko": ("한국어", "ltr"),
}
DEFAULT = "en"

# Languages shipped before every message is translated: the menu marks them "incomplete", the
# missing messages are shown in English (one by one), and tests/test_i18n.py lets them through.
# Every other language must be translated in full.
INCOMPLETE: frozenset[str] = frozenset()

# The languages of the journalist interface and its digest mail (a catalogue of its own, under
# deaddrop/web/journalist/locales): each account chooses one on its account page. Names and
# directions are those of ``LANGUAGES``; the order is the menu's.
JOURNALIST_LANGUAGES: tuple[str, ...] = ("en", "es", "fr", "de", "pt", "tr", "ru", "ar", "fa")
# As ``INCOMPLETE``, for the journalist catalogue.
JOURNALIST_INCOMPLETE: frozenset[str] = frozenset()
