# -*- test-case-name: tests.test_received_forms -*-
"""Which of a source's forms were stored, for a while after the session that sent them ended.

A refused submission is answered by the POST itself, its message in the answer (nothing typed
is kept on the server: ``_refusals``), so a browser's history can send that form again long
after it went through: Back to the refusal, then "resend", perhaps after logging out and in
again. A session's own forms (``_submission_forms``) end with it; this remembers, per source,
the tokens of its stored forms and what arrived, so such a form is answered with what arrived
and never stored twice, whichever session it comes back in.

Nothing here is shared between sources, so nothing any source does can push out or be seen
to push out another's: a source keeps its ``PER_SOURCE`` most recent receipts (only its own
submissions push out its own), and each is forgotten ``lifetime`` seconds after it was stored
(a session's whole life: a browser history older than that is from a session long ended).
What it holds in all is bounded by how fast submissions can be stored (each one an encryption,
a first one a key pair) times that lifetime; memory only, keyed by the source's row id, holding
random tokens and counts, never a message.
"""
from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Callable

from deaddrop.web.source._submission_forms import MAX_FORMS, Receipt

PER_SOURCE = MAX_FORMS


class ReceivedForms:
    def __init__(self, lifetime: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lifetime = lifetime
        self._clock = clock
        # source -> token -> (expiry, what arrived), oldest first.
        self._by_source: dict[int, OrderedDict[str, tuple[float, Receipt]]] = {}
        # (expiry, source, token), in the order stored: expiry works from the front, O(1) each.
        self._expiring: deque[tuple[float, int, str]] = deque()

    def __len__(self) -> int:
        return sum(len(held) for held in self._by_source.values())

    def stored(self, source_id: int, token: str, receipt: Receipt) -> None:
        """Remember that ``source_id``'s form ``token`` was stored, and what arrived."""
        self.sweep()
        expires = self._clock() + self.lifetime
        held = self._by_source.setdefault(source_id, OrderedDict())
        held[token] = (expires, receipt)
        held.move_to_end(token)
        while len(held) > PER_SOURCE:
            held.popitem(last=False)
        self._expiring.append((expires, source_id, token))

    def receipt(self, source_id: int, token: str | None) -> Receipt | None:
        """What arrived with ``source_id``'s form ``token``, if it was stored (and not forgotten)."""
        self.sweep()
        held = self._by_source.get(source_id)
        found = held.get(token) if held is not None and token else None
        return found[1] if found is not None else None

    def forget(self, source_id: int) -> None:
        """The source was deleted."""
        self._by_source.pop(source_id, None)

    def sweep(self) -> None:
        now = self._clock()
        while self._expiring and self._expiring[0][0] <= now:
            expires, source_id, token = self._expiring.popleft()
            held = self._by_source.get(source_id)
            if held is None:
                continue
            if token in held and held[token][0] == expires:  # not stored again since
                del held[token]
            if not held:
                del self._by_source[source_id]
