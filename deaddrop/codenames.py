"""Codenames (what a source memorises) and designations (what journalists call a source).

The two are unrelated by construction: a designation is drawn at random from its own word
lists, never derived from the codename.
"""
from __future__ import annotations

import os
import re
import secrets
from functools import lru_cache

WORDLIST_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "wordlists")

MIN_WORDS = 4
MAX_WORDS = 16
# Long enough for 16 of the longest words; anything longer is refused before any KDF runs.
MAX_CODENAME_CHARS = 256
_WORD = re.compile(r"^[a-z]+(?:-[a-z]+)?$")


@lru_cache(maxsize=None)
def _load(name: str) -> tuple[str, ...]:
    with open(os.path.join(WORDLIST_DIR, name), encoding="ascii") as f:
        words = tuple(line.strip() for line in f if line.strip())
    if len(set(words)) != len(words) or not all(_WORD.match(w) for w in words):
        raise ValueError(f"word list {name} has duplicates or non-ASCII-lowercase words")
    return words


def codename_words() -> tuple[str, ...]:
    return _load("codename-words.txt")


@lru_cache(maxsize=None)
def _codename_word_set() -> frozenset[str]:
    return frozenset(codename_words())


def generate_codename(n_words: int) -> str:
    words = codename_words()
    return " ".join(secrets.choice(words) for _ in range(n_words))


def normalise_codename(text: str) -> str | None:
    """The canonical form of what a source typed, or None if it cannot be a codename.

    Surrounding whitespace and repeated inner whitespace are ignored, and case does not
    matter. The result only says the *shape* is right; whether a source has this codename is
    for the KDF and the database to say.
    """
    if not isinstance(text, str) or len(text) > MAX_CODENAME_CHARS:
        return None
    words = text.strip().lower().split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    known = _codename_word_set()
    if not all(word in known for word in words):
        return None
    return " ".join(words)


def generate_designation() -> str:
    return f"{secrets.choice(_load('adjectives.txt'))} {secrets.choice(_load('nouns.txt'))}"


def entropy_bits(n_words: int) -> float:
    import math

    return n_words * math.log2(len(codename_words()))
