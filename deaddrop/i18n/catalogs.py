"""The translation catalogs as files: where they are, how much is translated, what is wrong.

There are two catalogues (``CATALOGUES``): the source interface's, and the journalist
interface's (its pages and its digest mail). Each is a folder ``locales`` beside its interface's
code, with one ``<code>/LC_MESSAGES/messages.po`` per language (gettext's standard layout) and
the template every catalog is merged from, ``messages.pot``. ``scripts/i18n`` (check, init,
compile) and tests/test_i18n.py read the ``.po`` files through this module; pages only ever read
the compiled ``.mo`` files.

    python -m deaddrop.i18n.catalogs check [CODE...]           # what to fix, in plain words
    python -m deaddrop.i18n.catalogs init CODE [journalist]    # a new language's catalog
"""
from __future__ import annotations

import datetime
import gettext
import os
import re
import string
import sys
from dataclasses import dataclass
from typing import Iterable

from babel import Locale, UnknownLocaleError
from babel.messages.catalog import Catalog, Message
from babel.messages.plurals import get_plural
from babel.messages.pofile import read_po, write_po

from deaddrop.newsroom.languages import INCOMPLETE, JOURNALIST_INCOMPLETE, JOURNALIST_LANGUAGES, LANGUAGES

_WEB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "web")


@dataclass(frozen=True)
class Catalogue:
    """One interface's messages in every language it has a file for."""

    name: str  # what scripts/i18n and the status table call it
    locale_dir: str
    shipped: tuple[str, ...]  # the languages offered (English first), in the menu's order
    incomplete: frozenset[str]  # shipped before every message is translated (marked so)
    about: str  # what it translates, for a new file's opening comment


SOURCE = Catalogue("source", os.path.join(_WEB, "source", "locales"), tuple(LANGUAGES), INCOMPLETE,
                   "DeadDrop's source interface")
JOURNALIST = Catalogue("journalist", os.path.join(_WEB, "journalist", "locales"), JOURNALIST_LANGUAGES,
                       JOURNALIST_INCOMPLETE, "DeadDrop's journalist interface and its digest mail")
CATALOGUES = {c.name: c for c in (SOURCE, JOURNALIST)}
LOCALE_DIR = SOURCE.locale_dir
TEMPLATE = "messages.pot"
# The line of the .po file's opening comment that a native speaker sets after reading the whole
# catalog: the day, and a name or handle if they like ("2027-01-15, Amina"); "no" until then.
# (A comment, not a header field: gettext's tools drop header fields they do not know.)
REVIEW_LINE = "Native-speaker review:"
NOT_REVIEWED = "no"
_REVIEW = re.compile(r"^#\s*" + re.escape(REVIEW_LINE) + r"[ \t]*(.*)$", re.MULTILINE)

# What a translation must keep exactly as the English has it: addresses, the names of things a
# source types or looks for, and the file type they are told to make.
# Bounded by ASCII letters only: Korean, Turkish and Bengali attach their endings to a word
# ("torproject.org에서", "torproject.org'dan", "gettor@torproject.org-এ").
_KEPT_TOKENS = re.compile(r"(?<![A-Za-z0-9_.+-])(?:[A-Za-z0-9_.+-]+@[A-Za-z0-9.-]*[A-Za-z0-9]"
                          r"|[A-Za-z0-9-]+\.(?:org|com|net|onion)|zip|tor2web|DeadDrop|Tor)"
                          r"(?![A-Za-z0-9_]|-[A-Za-z0-9])")
_MARKUP = re.compile(r"<[^<>]*>|&#?\w+;")
# Plural forms are tried for the counts 0 to this, to learn which forms stand for one count only.
_COUNTS_TRIED = 1000


def po_path(code: str, locale_dir: str = LOCALE_DIR) -> str:
    return os.path.join(locale_dir, code, "LC_MESSAGES", "messages.po")


def read(path: str, code: str | None = None) -> Catalog:
    with open(path, "rb") as f:
        return read_po(f, locale=code)


def template(locale_dir: str = LOCALE_DIR) -> Catalog:
    return read(os.path.join(locale_dir, TEMPLATE))


def catalog_codes(locale_dir: str = LOCALE_DIR) -> list[str]:
    """Every language with a catalog, shipped or not, in the menu's order, then by code."""
    found = {name for name in os.listdir(locale_dir) if os.path.isfile(po_path(name, locale_dir))}
    return [c for c in LANGUAGES if c in found] + sorted(found - set(LANGUAGES))


def must_be_complete(code: str, catalogue: Catalogue = SOURCE) -> bool:
    """A shipped language not marked incomplete: every message must be translated."""
    return code in catalogue.shipped and code not in catalogue.incomplete


def _ids(message: Message) -> tuple[str, ...]:
    """The English of ``message``: one text, or the singular and the plural."""
    return (message.id,) if isinstance(message.id, str) else tuple(message.id)


def _key(message: Message) -> str:
    return _ids(message)[0]


def _forms(message: Message) -> tuple[str, ...]:
    """The translation's forms (one, or one per plural form; "" where none is written)."""
    written = message.string
    return tuple(written) if isinstance(written, (tuple, list)) else (written or "",)


def _translated(message: Message | None) -> bool:
    return message is not None and not message.fuzzy and all(_forms(message))


@dataclass(frozen=True)
class Progress:
    translated: int
    total: int

    @property
    def complete(self) -> bool:
        return self.translated == self.total

    @property
    def percent(self) -> int:
        """Rounded down: 99.7% is not 100%."""
        return 100 * self.translated // self.total if self.total else 100


def progress(catalog: Catalog, messages: Catalog) -> Progress:
    """How many of the template's ``messages`` ``catalog`` translates (fuzzy ones do not count:
    gettext leaves them out of the compiled file)."""
    keys = [_key(m) for m in messages if m.id]
    return Progress(sum(1 for k in keys if _translated(catalog.get(k))), len(keys))


def review(catalog: Catalog) -> str:
    """What the catalog's review line says: a day (and maybe a name), or ``NOT_REVIEWED``."""
    found = _REVIEW.search(catalog.header_comment or "")
    return (found.group(1).strip() if found else "") or NOT_REVIEWED


def _fields(text: str) -> list[str] | None:
    """The ``{placeholders}`` of ``text`` as written (name, conversion and format), sorted; None
    if ``text`` is not a valid format string (a lone brace)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    return sorted("{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
                  for _literal, name, spec, conv in parsed if name is not None)


def _single_count_forms(catalog: Catalog) -> set[int]:
    """The plural forms that stand for one count only (Arabic's "one" and "two", Hebrew's "two"):
    they may say their number in words instead of ``{n}``. Hindi's "one" stands for 0 and 1, so
    it must keep ``{n}``."""
    choose = gettext.c2py(catalog.plural_expr)
    counts: dict[int, set[int]] = {}
    for n in range(_COUNTS_TRIED + 1):
        counts.setdefault(choose(n), set()).add(n)
    return {form for form, ns in counts.items() if len(ns) == 1}


def problems(catalog: Catalog, messages: Catalog, complete: bool) -> list[str]:
    """What is wrong with ``catalog`` against the template's ``messages``, one line each, in
    words a translator can act on. ``complete``: untranslated messages are problems too."""
    found = []
    expected = get_plural(str(catalog.locale))
    if (catalog.num_plurals, catalog.plural_expr) != (expected.num_plurals, expected.plural_expr):
        found.append(f"the header's Plural-Forms is not Babel's for this language: {expected.plural_forms}")
    single = _single_count_forms(catalog)
    for wanted in messages:
        if not wanted.id:
            continue
        key = _key(wanted)
        message = catalog.get(key)
        if message is None:
            found.append(f"missing (run scripts/i18n extract): {key!r}")
            continue
        if message.fuzzy:
            found.append(f"marked fuzzy (check it, then delete the '#, fuzzy' line): {key!r}")
        forms = _forms(message)
        if isinstance(wanted.id, tuple) and len(forms) != catalog.num_plurals:
            found.append(f"{len(forms)} plural forms instead of {catalog.num_plurals}: {key!r}")
        if complete and not all(forms):
            found.append(f"not translated: {key!r}")
        english = _ids(wanted)[-1]
        for index, form in enumerate(forms):
            if form:
                found += [f"{p}: {key!r} -> {form!r}" for p in form_problems(english, form, index in single)]
    return found


def form_problems(english: str, translated: str, count_in_words: bool = False) -> list[str]:
    """What a translation changed that it must keep: placeholders, markup, addresses and names.
    ``count_in_words``: a plural form for one count only, which may leave ``{n}`` out."""
    out = []
    fields, wanted = _fields(translated), _fields(english)
    if fields is None:
        out.append("a brace { or } that is not a placeholder (write placeholders exactly as in English)")
    elif fields != wanted and not (count_in_words and [f for f in wanted or () if f != "{n}"] == fields):
        out.append(f"placeholders {fields} instead of {wanted}")
    if sorted(_MARKUP.findall(translated)) != sorted(_MARKUP.findall(english)):
        out.append("markup differs from the English")
    missing = [t for t in _KEPT_TOKENS.findall(english) if t not in _KEPT_TOKENS.findall(translated)]
    if missing:
        out.append(f"must keep {missing} as written in English")
    return out


def init(code: str, locale_dir: str = LOCALE_DIR, about: str = SOURCE.about) -> str:
    """Start the catalog of a new language from the template. -> its path."""
    try:
        locale = Locale.parse(code)
    except (ValueError, UnknownLocaleError) as e:
        raise SystemExit(f"{code!r} is not a language code Babel knows ({e}); see docs/translating.md") from e
    path = po_path(code, locale_dir)
    if os.path.exists(path):
        raise SystemExit(f"{path} already exists")
    name = locale.get_display_name("en")
    catalog = Catalog(locale=locale, project="DeadDrop", version="", msgid_bugs_address="",
                      creation_date=datetime.datetime.now(datetime.timezone.utc), fuzzy=False,
                      header_comment=f"# {name} ({code}) translation of {about}.\n"
                                     "# This file is distributed under the same license as the DeadDrop project.\n"
                                     f"# {REVIEW_LINE} {NOT_REVIEWED}")
    catalog.update(template(locale_dir), no_fuzzy_matching=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        write_po(f, catalog, omit_header=False, no_location=True, ignore_obsolete=True)
    return path


def check(codes: Iterable[str], locale_dir: str = LOCALE_DIR, errors_only: bool = False,
          catalogue: Catalogue = SOURCE) -> int:
    """Print each catalog's problems. -> how many there were. ``errors_only``: leave out
    untranslated messages (they are shown in English, so a catalog with some still compiles)."""
    messages = template(locale_dir)
    total = 0
    for code in codes:
        catalog = read(po_path(code, locale_dir), code)
        found = problems(catalog, messages, complete=must_be_complete(code, catalogue) and not errors_only)
        done = progress(catalog, messages)
        print(f"{catalogue.name} {code}: {done.translated} of {done.total} messages translated ({done.percent}%), "
              f"{len(found) or 'no'} problem{'' if len(found) == 1 else 's'}")
        for line in found:
            print(f"  {line}")
        total += len(found)
    return total


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "init" and len(args) in (1, 2) and (args[1:] or ["source"])[0] in CATALOGUES:
        catalogue = CATALOGUES[(args[1:] or ["source"])[0]]
        print(f"wrote {init(args[0], catalogue.locale_dir, catalogue.about)}")
        return 0
    if command == "check":
        errors_only = "--errors-only" in args
        wanted = [a for a in args if a != "--errors-only"]
        found = 0
        for catalogue in CATALOGUES.values():
            codes = catalog_codes(catalogue.locale_dir)
            found += check([c for c in wanted if c in codes] if wanted else codes, catalogue.locale_dir,
                           errors_only, catalogue)
        return 1 if found else 0
    print(__doc__.split("\n\n")[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
