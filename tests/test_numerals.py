"""Issue 27 item 7: numbers and dates as each source language writes them. Farsi: Persian digits
and the Solar Hijri calendar; Arabic: Latin digits (see deaddrop/i18n/numerals.py)."""
from __future__ import annotations

import datetime
import re
import unicodedata
from decimal import Decimal

from babel import Locale
from twisted.trial import unittest

from deaddrop.web._common.pages import render_sync
from deaddrop.i18n import numerals, solar_hijri
from deaddrop.web.source import i18n, messages, pages
from deaddrop.web.source.pages import PageContext, ShownReply

_TAG = re.compile(r"<[^>]*>")


def _visible(page) -> str:
    """The page's text, without tags and their attributes (``datetime="2026-12-04"`` is for machines)."""
    return _TAG.sub(" ", render_sync(page).decode("utf-8"))


def _numbers_shown(code: str) -> tuple[PageContext, dict[str, str]]:
    """The texts of pages in ``code`` that say numbers and dates (three new replies of 4 December
    2026, 12 documents, 100,003 characters, 65,536 bytes, 120 minutes...). -> (context, {what: text})."""
    ctx = PageContext(lang=i18n.language(code), site_name="x", session_minutes=120, max_upload_size=524_288_000)
    when = datetime.datetime(2026, 12, 4, 12, tzinfo=datetime.timezone.utc).timestamp()
    replies = [ShownReply(n, "…", when, new=True) for n in (1, 2, 3)]
    return ctx, {
        "lookup": _visible(pages.lookup(ctx, replies, codename="alpha beta")),
        "index": _visible(pages.index(ctx)),
        "safety": _visible(pages.safety(ctx, retention_days=30)),
        "received": messages.received(ctx.lang, True, 12),
        "too long": ctx._(messages.TOO_LONG, count=100_003, limit=100_000),
        "too large": ctx._(messages.TOO_LARGE, size=ctx.size(65_536)),
        "inactive": ctx._(messages.INACTIVE, minutes=120),
        "deleted": ctx._(messages.REPLIES_DELETED, count=3),
    }


class SolarHijriTests(unittest.TestCase):
    # Nowruz (1 Farvardin) as Iran kept it: the day of the March equinox if it falls before noon
    # in Tehran, else the day after.
    NOWRUZ = {1300: (1921, 3, 21), 1354: (1975, 3, 21), 1375: (1996, 3, 20), 1399: (2020, 3, 20),
              1400: (2021, 3, 21), 1403: (2024, 3, 20), 1404: (2025, 3, 21), 1405: (2026, 3, 21),
              1407: (2028, 3, 20), 1408: (2029, 3, 20), 1409: (2030, 3, 21)}

    def test_nowruz_falls_where_it_did(self):
        for year, gregorian in self.NOWRUZ.items():
            self.assertEqual(solar_hijri.from_gregorian(datetime.date(*gregorian)), (year, 1, 1), year)
            self.assertEqual(solar_hijri.to_gregorian(year, 1, 1), datetime.date(*gregorian), year)

    def test_leap_years_end_on_esfand_30(self):
        self.assertEqual([y for y in range(1395, 1421) if solar_hijri.is_leap(y)], [1395, 1399, 1403, 1408, 1412, 1416, 1420])
        self.assertEqual(solar_hijri.from_gregorian(datetime.date(2025, 3, 20)), (1403, 12, 30))
        self.assertEqual(solar_hijri.from_gregorian(datetime.date(2026, 3, 20)), (1404, 12, 29))
        self.assertRaises(ValueError, solar_hijri.to_gregorian, 1404, 12, 30)
        self.assertRaises(ValueError, solar_hijri.to_gregorian, 1404, 7, 31)

    def test_month_lengths_and_known_days(self):
        self.assertEqual(solar_hijri.from_gregorian(datetime.date(2026, 12, 4)), (1405, 9, 13))  # the date
        self.assertEqual(solar_hijri.from_gregorian(datetime.date(2025, 12, 21)), (1404, 9, 30))  # Yalda night
        self.assertEqual(solar_hijri.from_gregorian(datetime.date(2025, 9, 22)), (1404, 6, 31))
        self.assertEqual(solar_hijri.from_gregorian(datetime.date(2025, 9, 23)), (1404, 7, 1))

    def test_every_day_of_five_centuries_goes_there_and_back(self):
        day, end, last = datetime.date(1800, 1, 1), datetime.date(2300, 1, 1), None
        while day < end:
            shown = solar_hijri.from_gregorian(day)
            self.assertEqual(solar_hijri.to_gregorian(*shown), day)
            if last is not None:  # one day later, always the next day of the Persian calendar
                self.assertIn(shown, {(last[0], last[1], last[2] + 1), (last[0], last[1] + 1, 1), (last[0] + 1, 1, 1)})
            last, day = shown, day + datetime.timedelta(days=1)


class NumeralsTests(unittest.TestCase):
    def test_farsi_writes_persian_digits_and_separators(self):
        self.assertEqual(numerals.number(1234567, "fa"), "۱٬۲۳۴٬۵۶۷")
        self.assertEqual(numerals.number(Decimal("0.0655"), "fa", exact=True), "۰٫۰۶۵۵")
        self.assertEqual([unicodedata.digit(c) for c in numerals.number(1234567890, "fa") if c != "٬"],
                         [1, 2, 3, 4, 5, 6, 7, 8, 9, 0])
        self.assertTrue(all(unicodedata.name(c).startswith("EXTENDED ARABIC-INDIC DIGIT")
                            for c in numerals.number(9876543210, "fa") if c != "٬"))

    def test_farsi_dates_are_solar_hijri_in_persian_digits(self):
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "fa"), "۱۳ آذر ۱۴۰۵")
        self.assertEqual(numerals.day(datetime.date(2024, 3, 20), "fa"), "۱ فروردین ۱۴۰۳")
        self.assertEqual(numerals.day(datetime.date(2025, 3, 20), "fa"), "۳۰ اسفند ۱۴۰۳")

    def test_arabic_keeps_latin_digits_as_cldr_does_for_ar(self):
        self.assertEqual(Locale.parse("ar").default_numbering_system, "latn")
        self.assertEqual(Locale.parse("ar_EG").default_numbering_system, "arab")  # a variant we do not ship
        self.assertEqual(numerals.number(1234567, "ar"), "1,234,567")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "ar"), "4 ديسمبر 2026")

    def test_the_other_languages_are_unchanged(self):
        self.assertEqual(numerals.number(1234567, "de"), "1.234.567")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "en"), "December 4, 2026")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "fr"), "4 décembre 2026")

    def test_bengali_and_burmese_write_their_own_digits(self):
        """Issue 31: CLDR's default numbering systems, the digits Bangladesh and Myanmar read."""
        self.assertEqual(numerals.number(100_000, "bn"), "১,০০,০০০")  # grouped the Indian way
        self.assertEqual(numerals.number(Decimal("0.0655"), "bn", exact=True), "০.০৬৫৫")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "bn"), "৪ ডিসেম্বর, ২০২৬")
        self.assertEqual(numerals.number(100_000, "my"), "၁၀၀,၀၀၀")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "my"), "၂၀၂၆ ဒီဇင်ဘာ ၄")

    def test_hindi_urdu_and_the_others_keep_latin_digits(self):
        self.assertEqual(numerals.number(100_000, "hi"), "1,00,000")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "hi"), "4 दिसंबर 2026")
        self.assertEqual(numerals.number(100_000, "ur"), "100,000")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "ur"), "4 دسمبر، 2026")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "zh_Hans"), "2026年12月4日")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "ko"), "2026년 12월 4일")
        self.assertEqual(numerals.day(datetime.date(2026, 12, 4), "he"), "4 בדצמבר 2026")

    def test_every_shipped_language_has_the_digits_of_its_numbering_system(self):
        for code in i18n.LANGUAGES:
            self.assertIn(numerals.numbering_system(code), numerals.DIGITS, code)

    def test_every_number_and_date_a_farsi_page_shows_is_persian(self):
        ctx, shown = _numbers_shown("fa")
        for name, text in shown.items():
            self.assertEqual(re.findall(r"[0-9]+", text), [], name)
        self.assertIn("۱۳ آذر ۱۴۰۵", shown["lookup"])
        self.assertIn("۳ پاسخ تازه", shown["lookup"])
        self.assertIn("۱۲۰ دقیقه", shown["inactive"])
        self.assertIn("۱۰۰٬۰۰۳", shown["too long"])
        self.assertIn("۰٫۰۶۵۵", shown["too large"])
        self.assertIn("۱۲ سند", shown["received"])
        when = datetime.datetime(2026, 12, 4, 12, tzinfo=datetime.timezone.utc).timestamp()
        reply = ShownReply(1, "…", when)
        self.assertIn('datetime="2026-12-04"', render_sync(pages.lookup(ctx, [reply])).decode())  # for machines


class NativeDigitsPagesTests(unittest.TestCase):
    """Issue 31: a page in a language that writes its own digits shows no Latin digit at all
    (every count, size and date), as the Farsi pages do."""

    def test_every_number_and_date_a_bengali_or_burmese_page_shows_is_in_its_digits(self):
        native = [c for c in i18n.LANGUAGES if numerals.numbering_system(c) != "latn"]
        self.assertLessEqual({"fa", "bn", "my"}, set(native))
        for code in native:
            ctx, shown = _numbers_shown(code)
            digits = numerals.DIGITS[numerals.numbering_system(code)]
            for name, text in shown.items():
                self.assertEqual(re.findall(r"[0-9]+", text), [], f"{code}/{name}")
            self.assertIn(numerals.day(datetime.date(2026, 12, 4), code), shown["lookup"])
            self.assertTrue(set(numerals.number(120, code)) <= set(digits), code)
            self.assertIn(numerals.number(120, code), shown["index"], code)
