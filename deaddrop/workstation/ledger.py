"""What this workstation has downloaded: the submission ids ``sync`` fetched, so that it fetches
the rest whatever anyone did in the browser.

The server's "unread" is the newsroom's (nobody has read it yet): "Download all unread" in the
browser, or a colleague reading a file, makes it read, and a ``sync`` that fetched only unread
files skipped it without a word. The ledger keeps ``sync`` to what it can know: this machine's
own downloads. It holds submission ids only (no designation, no file name), lives beside the
session file (``~/.cache/deaddrop-journalist/downloaded.json``, 0600), and is cut to the ids the
server still has after each complete sync. Losing it costs a download again, never a skip.
"""
from __future__ import annotations

import json
import os

from deaddrop.durable import write_atomically

LEDGER_NAME = "downloaded.json"


def ledger_path_beside(session_file: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(session_file)), LEDGER_NAME)


class DownloadLedger:
    """The set of submission ids downloaded here; ``path`` None keeps it in memory only."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._ids: set[str] = set()
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    self._ids = set(json.load(f).get("downloaded", []))
            except FileNotFoundError:
                pass
            except (OSError, ValueError, AttributeError):
                # Unreadable: start again, which downloads again rather than skips.
                self._ids = set()

    def __contains__(self, submission_id: str) -> bool:
        return submission_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, submission_id: str) -> None:
        self._ids.add(submission_id)

    def save(self, still_on_server: set[str] | None = None) -> None:
        """Write it (0600, atomically); ``still_on_server``, after a complete sync, drops the ids
        of submissions deleted since."""
        if still_on_server is not None:
            self._ids &= still_on_server
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        data = json.dumps({"downloaded": sorted(self._ids)}, indent=0).encode("utf-8")
        write_atomically(self.path, data, mode=0o600)
