"""docs/promises.md: every promise of the README and the docs names the test that holds it.

A row whose test does not exist (renamed, deleted, mistyped) fails here, so the table cannot
quietly stop being true. Whether each named test really fails when its promise is broken was
checked by breaking the code (see the issue's report); this checks that the names resolve.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from twisted.trial import unittest

from tests._markdown import table_rows

DOC = Path(__file__).resolve().parents[1] / "docs" / "promises.md"
_TEST_ID = re.compile(r"`(tests(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def rows(text: str) -> list[tuple[str, str, list[str]]]:
    """(promise, where, test ids) for each row of the table."""
    return [(promise, where, _TEST_ID.findall(held_by))
            for promise, where, held_by in table_rows(text, "| promise | where | held by |")]


def resolve(test_id: str):
    """The test method ``test_id`` names (module path, class, method), or an AssertionError."""
    parts = test_id.split(".")
    for split in range(len(parts) - 2, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        target = module
        for name in parts[split:]:
            target = getattr(target, name, None)
            if target is None:
                raise AssertionError(f"{test_id}: {'.'.join(parts[split:])} not found in {module.__name__}")
        if not (parts[-1].startswith("test_") and callable(target)):
            raise AssertionError(f"{test_id} is not a test method")
        cls = getattr(module, parts[split])
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
            raise AssertionError(f"{test_id}: {parts[split]} is not a test case")
        return target
    raise AssertionError(f"{test_id}: no such module")


class PromisesTableTests(unittest.TestCase):
    def test_every_row_names_an_existing_test(self):
        table = rows(DOC.read_text("utf-8"))
        self.assertGreater(len(table), 100)
        problems = []
        for promise, where, tests in table:
            if not tests:
                problems.append(f"{promise!r} ({where}) names no test")
            for test_id in tests:
                try:
                    resolve(test_id)
                except AssertionError as e:
                    problems.append(f"{promise!r}: {e}")
        self.assertEqual(problems, [])

    def test_a_row_naming_a_missing_test_fails(self):
        text = DOC.read_text("utf-8")
        self.assertRaises(AssertionError, resolve, "tests.test_promises.PromisesTableTests.test_no_such_thing")
        self.assertRaises(AssertionError, resolve, "tests.test_no_such_module.Tests.test_x")
        self.assertRaises(AssertionError, resolve, "tests.test_promises.rows")
        broken = text.replace("`tests.test_kdf.KdfTests.test_both_outputs_come_from_one_argon2id_run`", "no test yet")
        [row] = [r for r in rows(broken) if r[0].startswith("`--kdf-cost`")]
        self.assertEqual(row[2], [])
        self.assertIs(resolve("tests.test_promises.PromisesTableTests.test_every_row_names_an_existing_test"),
                      PromisesTableTests.test_every_row_names_an_existing_test)
