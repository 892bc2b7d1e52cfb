"""What every ``deaddrop-admin`` sub-command shares: its error type and its output."""
from __future__ import annotations

import json
import sys
from typing import Any


class AdminError(Exception):
    """A clear, one-line, expected failure (bad path, duplicate name, missing CA...)."""


class Output:
    """Prints either human text or a single JSON document (``--json``)."""

    def __init__(self, as_json: bool, stream=None) -> None:
        self.as_json = as_json
        self._stream = stream or sys.stdout

    def result(self, data: dict[str, Any], text: str) -> None:
        if self.as_json:
            self._stream.write(json.dumps(data, sort_keys=True) + "\n")
        else:
            self._stream.write(text.rstrip("\n") + "\n")

    def progress(self, text: str) -> None:
        """A line shown at once, before the result (human output only: JSON is one document)."""
        if not self.as_json:
            self._stream.write(text.rstrip("\n") + "\n")
            self._stream.flush()
