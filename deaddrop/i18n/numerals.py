"""How each source language writes numbers and dates: its digits, separators and calendar.

Each language writes the digits of CLDR's default numbering system for it (Babel knows which,
and the separators, but leaves the digits Latin: they are put in here), and dates in the
Gregorian calendar except Farsi. What a reader expects, language by language:

* Farsi: Persian digits (CLDR's numbering system ``arabext``: ۰-۹, with ``٬`` between thousands
  and ``٫`` before decimals) and the Solar Hijri calendar ("۱۳ آذر ۱۴۰۵"), the ones Iran and
  Afghanistan read every day. Babel has no Persian calendar: it is done here (``solar_hijri``).
* Bengali: Bengali digits (``beng``: "১,০০,০০০", "৪ ডিসেম্বর, ২০২৬"), as Bangladesh writes them in
  print, on screens and in official papers, and as Bengali text in India does too.
* Burmese: Burmese digits (``mymr``: "၁၀၀,၀၀၀", "၂၀၂၆ ဒီဇင်ဘာ ၄"), the ones Myanmar's signs,
  newspapers, news sites and official documents use.
* Arabic: Latin digits and the Gregorian calendar. We ship one ``ar`` for readers from Morocco to
  Iraq: the Maghreb writes Latin digits only, the Mashriq reads both (Latin digits are on every
  phone, and on the big pan-Arab news sites), and CLDR's default for ``ar`` is ``latn`` too (it
  keeps ``arab`` only for regional variants such as ``ar-EG`` or ``ar-SA``, which we do not ship).
* Hindi: Latin digits (CLDR's default), grouped the Indian way ("1,00,000"): Devanagari digits
  exist, but India's official Hindi uses "the international form of Indian numerals" (its
  constitution, article 343) and Hindi on screens is written with them almost everywhere.
* Urdu: Latin digits (CLDR's default for ``ur``, Pakistan's; it gives ``arabext`` only to
  ``ur-IN``): Pakistan's Urdu press and sites write Latin digits.
* Chinese, Korean, Hebrew and the others: Latin digits, which is all they use day to day.
* Calendars: Gregorian everywhere but Farsi. The Chinese, Hebrew, Burmese and Bengali calendars
  date festivals, not everyday papers or messages.
"""
from __future__ import annotations

import datetime
from decimal import Decimal

from functools import lru_cache

from babel import Locale
from babel.dates import format_date
from babel.numbers import format_decimal

from deaddrop.i18n import solar_hijri

# The digits of CLDR's numbering systems a shipped language may default to (tests/test_numerals.py
# fails for a language whose default is not here).
DIGITS = {"latn": "0123456789", "arabext": "۰۱۲۳۴۵۶۷۸۹", "beng": "০১২৩৪৫৬৭৮৯", "mymr": "၀၁၂၃၄၅၆၇၈၉",
          "deva": "०१२३४५६७८९"}


@lru_cache(maxsize=None)
def numbering_system(code: str) -> str:
    """CLDR's default numbering system for the language ``code`` ("latn", "arabext", "beng"...)."""
    return Locale.parse(code).default_numbering_system


def _digits(text: str, code: str) -> str:
    system = numbering_system(code)
    return text if system == "latn" else text.translate(str.maketrans(DIGITS["latn"], DIGITS[system]))


def number(n: int | float | Decimal, code: str, exact: bool = False) -> str:
    """``n`` as the language writes it; ``exact``: every decimal given, not rounded to three."""
    return _digits(format_decimal(n, locale=code, decimal_quantization=not exact, numbering_system="default"), code)


def day(date: datetime.date, code: str) -> str:
    """A day, written out in full ("4 December 2026") in the language's calendar."""
    if code == "fa":
        year, month, of_month = solar_hijri.from_gregorian(date)
        # CLDR's long Persian-calendar date in Farsi: "d MMMM y" (a year is not grouped).
        return _digits(f"{of_month} {solar_hijri.MONTHS_FA[month - 1]} {year}", code)
    return _digits(format_date(date, format="long", locale=code), code)


def clock(moment: datetime.time, code: str) -> str:
    """A time of day on the 24-hour clock ("22:05"), in the language's digits: the journalist
    pages say UTC beside it, so no reader has to guess a.m. from p.m."""
    return _digits(f"{moment.hour:02d}:{moment.minute:02d}", code)
