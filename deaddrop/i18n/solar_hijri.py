"""The Solar Hijri (Persian) calendar, the one Iran and Afghanistan date things by.

Babel formats Gregorian dates only, so Farsi pages convert here (``numerals.day``). The year
starts at Nowruz, 1 Farvardin; months 1-6 have 31 days, 7-11 have 30, the twelfth 29, or 30 in a
leap year. Leap years follow the 33-year arithmetic cycle (8 leap years in 33, as ICU's Persian
calendar): it matches the astronomical calendar Iran uses for 1178-1633 SH (1799-2254 CE), which
holds every date this server can show.
"""
from __future__ import annotations

import datetime

# CLDR's Farsi names of the months (the "format, wide" forms of its Persian calendar).
MONTHS_FA = ("فروردین", "اردیبهشت", "خرداد", "تیر", "مرداد", "شهریور",
             "مهر", "آبان", "آذر", "دی", "بهمن", "اسفند")

# The proleptic Gregorian ordinal of 1 Farvardin of year 1 under the 33-year rule (21 March
# 622), so that 1 Farvardin 1403 falls on 20 March 2024, as it did.
_EPOCH = 226895
_FIRST_HALF = 6 * 31  # Farvardin to Shahrivar


def is_leap(year: int) -> bool:
    """A year of 366 days: 8 of every 33, at fixed places in the cycle."""
    return (25 * year + 11) % 33 < 8


def _year_start(year: int) -> int:
    """The Gregorian ordinal of 1 Farvardin ``year``: 365 days a year, plus the leap days of the
    years before it (``(8 * year + 21) // 33`` of them, which is ``is_leap`` counted)."""
    return _EPOCH + 365 * (year - 1) + (8 * year + 21) // 33


def from_gregorian(day: datetime.date) -> tuple[int, int, int]:
    """(year, month 1-12, day of the month) of the Solar Hijri date of ``day``."""
    ordinal = day.toordinal()
    year = (ordinal - _EPOCH) * 33 // 12053 + 1  # 12053 days in 33 years: right, or one too many
    while _year_start(year) > ordinal:
        year -= 1
    while _year_start(year + 1) <= ordinal:
        year += 1
    into = ordinal - _year_start(year)
    if into < _FIRST_HALF:
        return year, into // 31 + 1, into % 31 + 1
    into -= _FIRST_HALF
    return year, 7 + into // 30, into % 30 + 1


def to_gregorian(year: int, month: int, day: int) -> datetime.date:
    """The Gregorian date of a Solar Hijri one (the inverse of ``from_gregorian``)."""
    length = 31 if month <= 6 else (30 if month < 12 or is_leap(year) else 29)
    if not (1 <= month <= 12 and 1 <= day <= length):
        raise ValueError(f"no such Solar Hijri date: {year}-{month}-{day}")
    into = (month - 1) * 31 if month <= 7 else _FIRST_HALF + (month - 7) * 30
    return datetime.date.fromordinal(_year_start(year) + into + day - 1)
