"""How each source language writes numbers and dates: its digits, separators and calendar.

Babel writes numbers with Latin digits unless told otherwise, and dates in the Gregorian
calendar only. What a reader expects, language by language:

* Farsi: Persian digits (CLDR's numbering system ``arabext``: ۰-۹, with ``٬`` between thousands
  and ``٫`` before decimals) and the Solar Hijri calendar ("۱۳ آذر ۱۴۰۵"), the ones Iran and
  Afghanistan read every day. Babel knows the separators but leaves the digits Latin, and has no
  Persian calendar: both are done here (``solar_hijri``).
* Arabic: Latin digits and the Gregorian calendar. We ship one ``ar`` for readers from Morocco to
  Iraq: the Maghreb writes Latin digits only, the Mashriq reads both (Latin digits are on every
  phone, and on the big pan-Arab news sites), and CLDR's default for ``ar`` is ``latn`` too (it
  keeps ``arab`` only for regional variants such as ``ar-EG`` or ``ar-SA``, which we do not ship).
* The other languages: Latin digits, the Gregorian calendar, Babel's separators.
"""
from __future__ import annotations

import datetime
from decimal import Decimal

from babel.dates import format_date
from babel.numbers import format_decimal

from deaddrop.web.source import solar_hijri

# Languages that write their own digits, in CLDR's numbering system of that name.
_NATIVE = {"fa": "arabext"}
_DIGITS = {"arabext": "۰۱۲۳۴۵۶۷۸۹"}


def _digits(text: str, code: str) -> str:
    system = _NATIVE.get(code)
    return text.translate(str.maketrans("0123456789", _DIGITS[system])) if system else text


def number(n: int | float | Decimal, code: str, exact: bool = False) -> str:
    """``n`` as the language writes it; ``exact``: every decimal given, not rounded to three."""
    system = "default" if code in _NATIVE else "latn"
    return _digits(format_decimal(n, locale=code, decimal_quantization=not exact, numbering_system=system), code)


def day(date: datetime.date, code: str) -> str:
    """A day, written out in full ("4 December 2026") in the language's calendar."""
    if code == "fa":
        year, month, of_month = solar_hijri.from_gregorian(date)
        # CLDR's long Persian-calendar date in Farsi: "d MMMM y" (a year is not grouped).
        return _digits(f"{of_month} {solar_hijri.MONTHS_FA[month - 1]} {year}", code)
    return format_date(date, format="long", locale=code)
