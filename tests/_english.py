"""Finding English left on a page that should be in another language.

A page's text is what a reader sees or hears: the text of its elements and the attributes
read out (``aria-label``, ``alt``, ``title``, ``placeholder``), leaving out what is English on
purpose or not ours: the codename and anything else marked ``lang`` other than the page's (the
language menu's names), what the source typed (text boxes), and the newsroom's replies.

``EnglishFinder(code).findings(html)`` flags, in that text:

* a message of the English catalog left as it is: a whole element that reads exactly as an
  English message (a button "Log in"), or three or more words of one (a sentence with a
  placeholder filled in) that the language's own translations do not contain;
* English prose that is in no catalog (hard-coded text): three or more distinct words that
  only English uses ("the", "your", "with"...) in one element.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser

from deaddrop.i18n import catalogs

# Words that mark English prose and are not words of the other shipped Latin-script languages
# ("die", "was", "will", "of", "in", "is", "to" are left out: German, Dutch, Polish use them).
_ENGLISH_WORDS = frozenset("""
the and you your with this that are have has please our been from would could should there
their which what when cannot does not into about than only were these those they them its
""".split())
_WORD = re.compile(r"[A-Za-z']+")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_BLOCKS = frozenset("p li h1 h2 h3 h4 h5 h6 label button a summary title td th dt dd legend option "
                    "div section header footer nav main ul ol form article details textarea time span strong".split())
_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
_READ_OUT = ("aria-label", "alt", "title", "placeholder")


class _Text(HTMLParser):
    """The page's text as chunks, one per element, without what is English on purpose."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page_lang: str | None = None
        self.chunks: list[str] = []
        self._open: list[tuple[str, bool]] = []  # (tag, skipped)
        self._buffer: list[str] = []

    def _skipping(self) -> bool:
        return any(skipped for _tag, skipped in self._open)

    def _flush(self) -> None:
        text = " ".join("".join(self._buffer).split())
        if text:
            self.chunks.append(text)
        self._buffer = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "html":
            self.page_lang = attributes.get("lang")
        if tag in _BLOCKS:
            self._flush()
        classes = (attributes.get("class") or "").split()
        skipped = (tag == "textarea" or "reply" in classes or "codename" in classes
                   or ("lang" in attributes and attributes["lang"] != self.page_lang))
        if not (skipped or self._skipping()):
            self.chunks += [attributes[name] for name in _READ_OUT if attributes.get(name)]
        if tag not in _VOID:
            self._open.append((tag, skipped))

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCKS:
            self._flush()
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index][0] == tag:
                del self._open[index:]
                break

    def handle_data(self, data: str) -> None:
        if not self._skipping():
            self._buffer.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def text_chunks(html: str) -> tuple[str | None, list[str]]:
    """-> (the page's ``lang``, its text chunks)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.page_lang, parser.chunks


def _english_messages(locale_dir: str) -> list[str]:
    out = []
    for message in catalogs.template(locale_dir):
        if message.id:
            out += list(message.id) if isinstance(message.id, tuple) else [message.id]
    return out


def _fragments(message: str) -> list[str]:
    """The runs of ``message`` between its placeholders that hold three words or more."""
    return [f.strip() for f in _PLACEHOLDER.split(message) if len(_WORD.findall(f)) >= 3]


class EnglishFinder:
    """What on a page in language ``code`` is English (see the module's docstring); the messages
    are those of the catalogue under ``locale_dir`` (the source pages' unless said)."""

    def __init__(self, code: str, locale_dir: str = catalogs.LOCALE_DIR) -> None:
        self.code = code
        english = _english_messages(locale_dir)
        translations: list[str] = []
        if code != "en":
            for message in catalogs.read(catalogs.po_path(code, locale_dir), code):
                if message.id:
                    translations += list(message.string) if isinstance(message.string, tuple) else [message.string]
        said = "\n".join(translations)
        # English the translation itself keeps ("Tor Browser", "(Safest)") is not a finding.
        self.whole = {m for m in english if m not in said and _WORD.search(m)}
        self.fragments = {f for m in english for f in _fragments(m) if f not in said}

    def findings(self, html: str) -> list[str]:
        _lang, chunks = text_chunks(html)
        found = []
        for chunk in chunks:
            words = {w.lower() for w in _WORD.findall(chunk)}
            if chunk in self.whole:
                found.append(f"an English message: {chunk!r}")
            elif any(fragment in chunk for fragment in self.fragments):
                found.append(f"part of an English message: {chunk!r}")
            elif len(words & _ENGLISH_WORDS) >= 3:
                found.append(f"English prose: {chunk!r}")
        return found
