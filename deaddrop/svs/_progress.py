"""A one-line progress display on stderr for large files."""
from __future__ import annotations

import threading
import time
from typing import TextIO

# Below this, a file is done before anyone could read a percentage.
THRESHOLD = 1024 * 1024
_INTERVAL = 0.25  # seconds between redraws


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class Progress:
    """Called from the gpg feeder thread with bytes read so far; prints at most 4 times/s.

    On a terminal the line is redrawn in place (``\\r``); otherwise (``--progress`` into a
    log) each update is its own line, so logs stay readable.
    """

    def __init__(self, stream: TextIO, label: str, total: int, tty: bool) -> None:
        self._stream = stream
        self._label = label
        self._total = max(total, 1)
        self._tty = tty
        self._last = 0.0
        self._lock = threading.Lock()
        self._shown = False

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < _INTERVAL:
                return
            self._last = now
            self._draw(done)

    def _draw(self, done: int) -> None:
        pct = min(100, done * 100 // self._total)
        line = f"{self._label}: {pct}% ({_mb(done)} of {_mb(self._total)})"
        self._stream.write(("\r\x1b[K" + line) if self._tty else line + "\n")
        self._stream.flush()
        self._shown = True

    def close(self, done: int | None = None) -> None:
        """Show the final state (when finished) and end the line."""
        with self._lock:
            if done is not None:
                self._draw(done)
            if self._shown and self._tty:
                self._stream.write("\n")
                self._stream.flush()
