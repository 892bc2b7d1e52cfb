"""The languages the source interface speaks (its pages and the admin's per-language texts)."""

# code -> (name in its own language, text direction). English is the source language.
LANGUAGES: dict[str, tuple[str, str]] = {
    "en": ("English", "ltr"),
    "es": ("Español", "ltr"),
    "fr": ("Français", "ltr"),
    "de": ("Deutsch", "ltr"),
    "pt": ("Português", "ltr"),
    "ru": ("Русский", "ltr"),
    "tr": ("Türkçe", "ltr"),
    "ar": ("العربية", "rtl"),
    "fa": ("فارسی", "rtl"),
}
DEFAULT = "en"
