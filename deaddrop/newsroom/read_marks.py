# -*- test-case-name: tests.integration.test_read_marks,tests.integration.test_login_traces -*-
"""Which replies each source has been shown since the last midnight UTC: in memory, written then.

The source page says how many replies are new (issue 11), so showing a reply changes what the
server keeps. Written when the source reads it, that change would give the WAL an mtime and a
ctime of that second, and a ctime no cut can hide: a seized disk would date the reading (and so
the login) until the next write. So a mark is held here (a reply's file name, for its source's
page: no time, no count of visits) and written at the next midnight UTC, with the day's other
counts: the database then says the reply was read on or before that day, as every time kept
says no more than a day.

A crash or a stop loses the marks not yet written: those replies are shown as new once more.
A stop writes none on purpose: written then, they would date the reading to between the last
midnight and the stop.
"""
from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.defer import Deferred, succeed

from deaddrop.store import queries


class ReadMarks:
    """The replies shown to each source and not yet written (``queries.mark_replies_read_by_source``)."""

    def __init__(self) -> None:
        self._shown: dict[int, set[str]] = {}

    def add(self, source_id: int, filenames: Iterable[str]) -> None:
        self._shown.setdefault(source_id, set()).update(filenames)

    def shown(self, source_id: int, filename: str) -> bool:
        return filename in self._shown.get(source_id, ())

    def forget(self, source_id: int) -> None:
        """The source is gone: nothing of it stays here."""
        self._shown.pop(source_id, None)

    def write(self, db: Any) -> Deferred:
        """Write every mark held (what the midnight timer runs); a reply deleted meanwhile is
        skipped. The marks leave memory only once written: a failed write keeps them."""
        if not self._shown:
            return succeed(None)
        taken = {source_id: sorted(names) for source_id, names in self._shown.items()}

        def written(_: Any) -> None:
            for source_id, names in taken.items():
                left = self._shown.get(source_id, set()) - set(names)
                if left:
                    self._shown[source_id] = left
                else:
                    self._shown.pop(source_id, None)

        return db.run(_write_all, taken).addCallback(written)

    def __len__(self) -> int:
        return sum(len(names) for names in self._shown.values())


def _write_all(conn: Any, taken: dict[int, list[str]]) -> None:
    for source_id, names in taken.items():
        queries.mark_replies_read_by_source(conn, source_id, names)
