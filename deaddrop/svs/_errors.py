"""The one exception type the SVS tool shows to its operator as a one-line error."""
from __future__ import annotations


class SvsError(Exception):
    """An expected, explainable failure (missing home, bad input, key refused...).

    The CLI prints ``str(e)`` on a single line; keep messages short and actionable.
    """


class ItemError(SvsError):
    """One input file could not be processed; the run goes on with the others."""


def describe_exception(e: BaseException) -> str:
    """One line for an unexpected per-item exception (OSError's text without the errno)."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
