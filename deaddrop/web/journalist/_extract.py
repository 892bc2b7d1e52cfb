"""A Babel extractor for the journalist interface, which stays in English for now.

Its pages are built with ``twisted.web.template.tags``; every human-readable literal is an
argument of a ``tags.*(...)`` call, a page title or a flash. This extractor finds those literals
with ``ast``, so ``scripts/i18n extract-journalist`` can write a template without the pages
being rewritten around a marker first. f-strings cannot be extracted (``fstrings_in`` lists
them): they are the ones to rewrite as ``"...{name}...".format(...)`` when the interface is
translated.
"""
from __future__ import annotations

import ast
from typing import Any, Iterator

# Keyword arguments that hold visible text (labels for screen readers included).
_TEXT_KEYWORDS = {"title", "placeholder", "alt", "aria-label", "value"}
# Calls whose first string argument is visible text, beside tags.*(): page titles, flashes, errors.
_TEXT_CALLS = {"_page": 2, "plain": 2, "_error": 2, "flash": 1, "_count": 1}  # -> how many literals
_NOT_TEXT = {"POST", "GET", "post", "get", "submit", "hidden", "text", "checkbox", "number", "password", "file"}


def _visible(text: str) -> bool:
    return any(c.isalpha() for c in text) and text not in _NOT_TEXT and not text.startswith(("/", "#", "."))


def _literals(node: ast.AST) -> Iterator[tuple[int, str | None]]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _visible(node.value):
        yield node.lineno, node.value
    elif isinstance(node, ast.JoinedStr):
        yield node.lineno, None
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body)
        yield from _literals(node.orelse)


def extract_tag_strings(fileobj: Any, keywords: Any, comment_tags: Any, options: Any):
    """Babel extraction method: yields (lineno, funcname, message, comments)."""
    tree = ast.parse(fileobj.read().decode("utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        # tags.div(class_="x")(children...): the children are the arguments of the outer call.
        tag = func.func if isinstance(func, ast.Call) else func
        is_tag = isinstance(tag, ast.Attribute) and isinstance(tag.value, ast.Name) and tag.value.id == "tags"
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        args: list[ast.expr] = []
        if is_tag:
            args = list(node.args) + [k.value for k in node.keywords if k.arg in _TEXT_KEYWORDS]
        elif name in _TEXT_CALLS:
            texts = [a for a in node.args if isinstance(a, (ast.JoinedStr, ast.IfExp))
                     or (isinstance(a, ast.Constant) and isinstance(a.value, str))]
            args = texts[:_TEXT_CALLS[name]] + [e for a in node.args if isinstance(a, (ast.List, ast.Tuple)) for e in a.elts]
        for arg in args:
            for lineno, text in _literals(arg):
                if text is not None:
                    yield lineno, None, text, []


def fstrings_in(source: str) -> list[int]:
    """Lines with visible text built by an f-string (not extractable as it stands)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for arg in node.args:
                lines += [lineno for lineno, text in _literals(arg) if text is None]
    return sorted(set(lines))
