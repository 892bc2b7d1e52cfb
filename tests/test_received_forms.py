"""Which of a source's forms were stored, beyond their session: per source, bounded by its own
submissions, forgotten after a session's lifetime (nothing any other source does moves it)."""
from __future__ import annotations

from twisted.trial import unittest

from deaddrop.web.source._received_forms import PER_SOURCE, ReceivedForms
from deaddrop.web.source._submission_forms import Receipt


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ReceivedFormsTests(unittest.TestCase):
    def test_known_per_source_only(self):
        received = ReceivedForms(7200.0)
        received.stored(1, "form-a", Receipt(True, 2))
        self.assertEqual(received.receipt(1, "form-a"), Receipt(True, 2))
        self.assertIsNone(received.receipt(2, "form-a"))  # another source's token names nothing
        self.assertIsNone(received.receipt(1, "form-b"))
        self.assertIsNone(received.receipt(1, None))

    def test_forgotten_after_the_lifetime_and_with_the_source(self):
        clock = _Clock()
        received = ReceivedForms(7200.0, clock)
        received.stored(1, "form-a", Receipt(True, 0))
        received.stored(2, "form-b", Receipt(True, 0))
        clock.now += 7199
        self.assertIsNotNone(received.receipt(1, "form-a"))
        received.forget(2)
        self.assertIsNone(received.receipt(2, "form-b"))
        clock.now += 2
        received.sweep()
        self.assertEqual(len(received), 0)
        self.assertEqual(received._by_source, {})

    def test_a_source_pushes_out_only_its_own_receipts(self):
        received = ReceivedForms(7200.0)
        received.stored(1, "victim-form", Receipt(True, 0))
        for n in range(10 * PER_SOURCE):  # another source, storing and storing
            received.stored(2, f"form-{n}", Receipt(True, 0))
        self.assertIsNotNone(received.receipt(1, "victim-form"))
        self.assertEqual(len(received), 1 + PER_SOURCE)
