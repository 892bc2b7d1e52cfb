"""Text carried across the login page's language switch: sealed, bound to the browser, once, bounded."""
from __future__ import annotations

from twisted.trial import unittest

from deaddrop.web.source._carried import CarriedTexts

CODENAME = "abacus abdomen abide ablaze abroad absurd"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CarriedTextsTests(unittest.TestCase):
    def test_given_back_once_and_only_to_the_same_browser(self):
        carried = CarriedTexts()
        carried.keep("a.browser-one", CODENAME, "a message ✓")
        self.assertIsNone(carried.take("a.browser-two"))
        self.assertIsNone(carried.take(None))
        self.assertEqual(carried.take("a.browser-one"), (CODENAME, "a message ✓"))
        self.assertIsNone(carried.take("a.browser-one"))  # once
        self.assertEqual((len(carried), carried.used), (0, 0))

    def test_sealed_in_memory_under_the_browser_cookie(self):
        carried = CarriedTexts()
        carried.keep("a.browser-one", CODENAME, "")
        held = b"".join(slot + sealed for slot, (_t, sealed) in carried._held.items())
        for word in CODENAME.split():
            self.assertNotIn(word.encode(), held)
        self.assertNotIn(b"a.browser-one", held)

    def test_forgotten_after_its_lifetime(self):
        clock = _Clock()
        carried = CarriedTexts(lifetime=300.0, clock=clock)
        carried.keep("a.one", CODENAME, "")
        clock.now += 299
        carried.keep("a.two", CODENAME, "")
        clock.now += 2
        self.assertIsNone(carried.take("a.one"))
        self.assertEqual(len(carried), 1)  # expired entries go whoever asks
        self.assertEqual(carried.take("a.two"), (CODENAME, ""))

    def test_a_new_switch_replaces_the_last_and_an_emptied_box_keeps_nothing(self):
        carried = CarriedTexts()
        carried.keep("a.one", "first words", "")
        carried.keep("a.one", CODENAME, "")
        self.assertEqual(len(carried), 1)
        carried.keep("a.one", "", "")
        self.assertEqual((len(carried), carried.used), (0, 0))
        self.assertIsNone(carried.take("a.one"))

    def test_bounded_oldest_out_first(self):
        carried = CarriedTexts(max_bytes=4000)
        for n in range(20):
            self.assertTrue(carried.keep(f"a.{n}", CODENAME, "x" * 500))
            self.assertLessEqual(carried.used, 4000)
        self.assertIsNone(carried.take("a.0"))
        self.assertEqual(carried.take("a.19"), (CODENAME, "x" * 500))
        self.assertFalse(carried.keep("a.big", "", "x" * 5000))  # larger than the whole budget
        self.assertIsNone(carried.take("a.big"))
