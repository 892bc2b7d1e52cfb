# -*- test-case-name: tests.test_codenames,tests.integration.test_designations -*-
"""Codenames (what a source memorises) and designations (what journalists call a source).

The two are unrelated by construction: a designation is drawn at random from its own word
lists, never derived from the codename.
"""
from __future__ import annotations

import os
import re
import secrets
from functools import lru_cache
from importlib.resources import files

# Package data: in the checkout ``deaddrop/wordlists`` links to the top-level ``wordlists/`` (the
# one copy); wheels and sdists carry the files themselves, so an installed copy finds them too.
WORDLIST_DIR = str(files("deaddrop") / "wordlists")

MIN_WORDS = 4
MAX_WORDS = 16
# Long enough for 16 of the longest words; anything longer is refused before any KDF runs.
MAX_CODENAME_CHARS = 256
_WORD = re.compile(r"^[a-z]+(?:-[a-z]+)?$")


MIN_CODENAME_BITS = 64
CODENAME_LIST, DESIGNATION_LISTS = "codename-words.txt", ("adjectives.txt", "nouns.txt")
# Words of the codename list that are never drawn for a new codename (insults, crimes, illnesses,
# weapons...), but still accepted: codenames made before they were retired keep working.
RETIRED_LIST = "codename-retired.txt"
# A new designation is two different adjectives and a noun ("amber quiet lantern"): curated
# lists of words anyone can say about anyone cannot make 10^8 designations with two words
# (480 x 1,903 = 913,440), three do (480 x 479 x 1,903 = 437,537,760). Designations made with
# one adjective ("amber lantern") keep working everywhere: they are only never drawn again.
DESIGNATION_ADJECTIVES = 2
# Designations an instance needs at the least, and per source it holds: new ones are drawn at
# random until a free one comes up, so the space must stay mostly free.
MIN_DESIGNATIONS = 10**8
DESIGNATIONS_PER_SOURCE = 4


class WordListError(ValueError):
    """A word list is missing, damaged or too small; one line naming the file and the fault."""


def read_word_list(path: str) -> tuple[str, ...]:
    """The words of a list: one per line, unique, lowercase ASCII (a hyphen inside is allowed)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise WordListError(f"word list {path}: {e.strerror}") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as e:
        raise WordListError(f"word list {path}: byte {e.start} is not ASCII") from None
    words = tuple(line.strip() for line in text.splitlines() if line.strip())
    for number, word in enumerate(words, 1):
        if not _WORD.match(word):
            raise WordListError(f"word list {path}: {word!r} is not a lowercase ASCII word")
    if len(set(words)) != len(words):
        seen: set[str] = set()
        duplicate = next(w for w in words if w in seen or seen.add(w))  # type: ignore[func-returns-value]
        raise WordListError(f"word list {path}: {duplicate!r} appears more than once")
    return words


def check_word_lists(n_words: int, directory: str = WORDLIST_DIR) -> float:
    """Start-up check: every list well formed, a codename of ``n_words`` words (drawn from the
    words not retired) at least ``MIN_CODENAME_BITS`` bits, and at least ``MIN_DESIGNATIONS``
    designations. -> the codename's entropy in bits."""
    import math

    adjectives, nouns = (read_word_list(os.path.join(directory, name)) for name in DESIGNATION_LISTS)
    space = designations_of(len(adjectives), len(nouns))
    if space < MIN_DESIGNATIONS:
        raise WordListError(
            f"the designation lists {os.path.join(directory, DESIGNATION_LISTS[0])} ({len(adjectives)} words) and "
            f"{os.path.join(directory, DESIGNATION_LISTS[1])} ({len(nouns)} words) make {space:,} designations, "
            f"fewer than the {MIN_DESIGNATIONS:,} required: use longer lists")
    path = os.path.join(directory, CODENAME_LIST)
    words = _drawable(read_word_list(path), _read_retired(directory))
    bits = n_words * math.log2(len(words)) if len(words) > 1 else 0.0
    if bits < MIN_CODENAME_BITS:
        needed = math.ceil(MIN_CODENAME_BITS / math.log2(len(words))) if len(words) > 1 else None
        advice = f"use --codename-words {needed} or more" if needed and needed <= MAX_WORDS else "use a longer list"
        raise WordListError(
            f"a codename of {n_words} words from {path} ({len(words)} words not retired) has {bits:.1f} bits, "
            f"fewer than the {MIN_CODENAME_BITS} required: {advice}")
    return bits


def _read_retired(directory: str) -> frozenset[str]:
    path = os.path.join(directory, RETIRED_LIST)
    return frozenset(read_word_list(path)) if os.path.exists(path) else frozenset()


def _drawable(words: tuple[str, ...], retired: frozenset[str]) -> tuple[str, ...]:
    return tuple(w for w in words if w not in retired)


def designations_of(adjectives: int, nouns: int) -> int:
    """How many designations lists of these sizes make: two different adjectives, in order, and
    a noun (adjectives x (adjectives - 1) x nouns)."""
    return adjectives * max(0, adjectives - 1) * nouns


def designation_space(directory: str | None = None) -> int:
    """How many designations the lists make (``designations_of``)."""
    directory = directory or WORDLIST_DIR
    adjectives, nouns = (read_word_list(os.path.join(directory, name)) for name in DESIGNATION_LISTS)
    return designations_of(len(adjectives), len(nouns))


def check_designation_space(sources: int, directory: str | None = None) -> int:
    """Start-up check against the instance: the lists must leave most designations free for the
    sources it holds (``DESIGNATIONS_PER_SOURCE`` per source), or a new source could find no free
    one. -> the space. Raises ``WordListError`` with one line saying what to do."""
    directory = directory or WORDLIST_DIR
    space = designation_space(directory)
    needed = max(MIN_DESIGNATIONS, DESIGNATIONS_PER_SOURCE * sources)
    if space < needed:
        raise WordListError(
            f"the designation lists in {directory} make {space:,} designations; this instance holds {sources:,} "
            f"sources and needs at least {needed:,} ({DESIGNATIONS_PER_SOURCE} per source): use longer "
            f"{DESIGNATION_LISTS[0]} and {DESIGNATION_LISTS[1]}")
    return space


@lru_cache(maxsize=None)
def _load(name: str) -> tuple[str, ...]:
    return read_word_list(os.path.join(WORDLIST_DIR, name))


@lru_cache(maxsize=None)
def drawable_codename_words() -> tuple[str, ...]:
    """The words new codenames are drawn from: the list less the retired words."""
    return _drawable(codename_words(), _read_retired(WORDLIST_DIR))


def codename_words() -> tuple[str, ...]:
    return _load("codename-words.txt")


@lru_cache(maxsize=None)
def _codename_word_set() -> frozenset[str]:
    return frozenset(codename_words())


def generate_codename(n_words: int) -> str:
    words = drawable_codename_words()
    return " ".join(secrets.choice(words) for _ in range(n_words))


# What may stand between the words a source types: white space, commas, dots, semicolons and
# hyphens (hyphens are resolved against the list below, which has a few hyphenated words).
_SEPARATORS = re.compile(r"[\s,.;\u060c\u3001]+")


def normalise_codename(text: str) -> str | None:
    """The canonical form of what a source typed, or None if it cannot be a codename.

    Words may be separated by any run of white space, commas, dots, semicolons or hyphens, in
    any case: "Abacus-abdomen, ABIDE.ablaze" is "abacus abdomen abide ablaze". The result only
    says the *shape* is right; whether a source has this codename is for the KDF and the
    database to say.
    """
    if not isinstance(text, str) or len(text) > MAX_CODENAME_CHARS:
        return None
    known = _codename_word_set()
    words: list[str] = []
    for token in _SEPARATORS.split(text.strip().lower()):
        if not token:
            continue
        words += _split_hyphens(token, known)
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    if not all(word in known for word in words):
        return None
    return " ".join(words)


def unknown_words(text: str, limit: int = 16) -> list[str]:
    """The typed words that are in no codename (not in the list), in the order typed, at most
    ``limit`` of them, each cut to 40 characters: what a source is told to check after a miss."""
    if not isinstance(text, str):
        return []
    known = _codename_word_set()
    found: list[str] = []
    for token in _SEPARATORS.split(text[:MAX_CODENAME_CHARS].strip().lower()):
        for word in _split_hyphens(token, known) if token else []:
            if word not in known and word[:40] not in found:
                found.append(word[:40])
    return found[:limit]


def _split_hyphens(token: str, known: frozenset[str]) -> list[str]:
    """``t-shirt-abacus`` -> ``["t-shirt", "abacus"]``: a hyphen joins two parts only when
    together they are a listed word (no part of a listed hyphenated word is a word itself)."""
    parts = [p for p in token.split("-")]
    out: list[str] = []
    i = 0
    while i < len(parts):
        if i + 1 < len(parts) and f"{parts[i]}-{parts[i + 1]}" in known:
            out.append(f"{parts[i]}-{parts[i + 1]}")
            i += 2
        else:
            if parts[i]:
                out.append(parts[i])
            i += 1
    return out


def generate_designation() -> str:
    """A new designation: two different adjectives and a noun, "amber quiet lantern"."""
    first, second = _random.sample(_load(DESIGNATION_LISTS[0]), DESIGNATION_ADJECTIVES)
    return f"{first} {second} {secrets.choice(_load(DESIGNATION_LISTS[1]))}"


_random = secrets.SystemRandom()


def entropy_bits(n_words: int) -> float:
    import math

    return n_words * math.log2(len(drawable_codename_words()))
