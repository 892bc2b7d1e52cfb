"""Sizes shown to sources: decimal MB (the admin's unit), true to what the limit is (issue 17 §5, 23 §4)."""
from __future__ import annotations

from twisted.trial import unittest

from deaddrop.web.source import i18n
from deaddrop.web.source.pages import PageContext


def shown(n_bytes: int, lang: str = "en") -> str:
    return PageContext(i18n.language(lang), "DeadDrop").size(n_bytes)


class SizeTests(unittest.TestCase):
    def test_a_small_limit_is_never_zero_and_never_rounded_up(self):
        self.assertEqual(shown(2000), "0.002 MB")  # --max-upload-size 2000 said "0 MB"
        self.assertEqual(shown(1024), "0.00102 MB")
        self.assertEqual(shown(65536), "0.0655 MB")  # not "0.1 MB": that is more than allowed
        self.assertEqual(shown(200_000), "0.2 MB")
        self.assertEqual(shown(1_234_567), "1.23 MB")
        self.assertEqual(shown(99_999_999), "99.9 MB")

    def test_large_limits_in_whole_megabytes_grouped_in_the_pages_language(self):
        self.assertEqual(shown(500_000_000), "500 MB")
        self.assertEqual(shown(524_288_000), "524 MB")
        self.assertEqual(shown(5 * 10**9), "5,000 MB")
        self.assertEqual(shown(5 * 10**9, "de"), "5.000 MB")
        self.assertEqual(shown(2000, "fr"), "0,002 Mo")

    def test_what_is_shown_never_exceeds_the_limit(self):
        import decimal

        for n in [1, 999, 1000, 1001, 65_536, 999_999, 1_000_001, 123_456_789, 10**10 + 7]:
            text = shown(n).removesuffix(" MB").replace(",", "")
            self.assertLessEqual(decimal.Decimal(text) * 1_000_000, n, n)
            self.assertGreater(decimal.Decimal(text) * 1_000_000, n * 0.99 - 1, n)
