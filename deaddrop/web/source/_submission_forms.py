"""One-time submission forms: each form a source is shown is stored at most once.

Every submission form carries a token of its own, and the page that shows it lives at
``/lookup?form=TOKEN``. Once a submission made with that form is stored, the same address shows
what arrived (the "received" page): Back after sending, a reload, a double click or a replayed
form all land there, and nothing is stored twice. A form that was refused (too large, busy...)
keeps the error and, sealed with the session cookie like the key passphrase, the typed message,
so the form is shown again at that GET-able address: Back never asks to resubmit a POST.

Everything lives in the session (memory only). Each session keeps its ``MAX_FORMS`` most recent
forms; typed messages kept for refused forms share one budget of ``DRAFT_BUDGET_BYTES`` across
all sessions, the oldest dropped first, so memory stays bounded whatever sources do.
"""
from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.defer import Deferred

OPEN, SENDING, RECEIVED = "open", "sending", "received"
MAX_FORMS = 16
DRAFT_BUDGET_BYTES = 64 << 20


@dataclass
class Receipt:
    """What arrived with one form (shown on its "received" page)."""

    message: bool
    documents: int
    first: bool = False  # the source's first submission: "what happens next" is shown


@dataclass(eq=False)
class SubmissionForm:
    token: str
    state: str = OPEN
    receipt: Receipt | None = None
    # A refused submission: (HTTP status, a function of the page's language -> the error text).
    error: tuple[int, Callable[[Any], str]] | None = None
    has_draft: bool = False
    _waiters: list[Deferred] = field(default_factory=list)

    def settled(self) -> Deferred:
        """Fires when a submission in flight with this form is stored or refused."""
        d: Deferred = Deferred()
        if self.state == SENDING:
            self._waiters.append(d)
        else:
            d.callback(self)
        return d

    def _settle(self) -> None:
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(self)


class SubmissionForms:
    """A session's forms, most recently issued last."""

    def __init__(self) -> None:
        self._forms: OrderedDict[str, SubmissionForm] = OrderedDict()

    def issue(self) -> SubmissionForm:
        form = SubmissionForm(secrets.token_urlsafe(16))
        self._forms[form.token] = form
        while len(self._forms) > MAX_FORMS:
            # The oldest form that is not being sent goes; one in flight is needed for its answer.
            oldest = next((t for t, f in self._forms.items() if f.state != SENDING), None)
            if oldest is None:
                break
            del self._forms[oldest]
        return form

    def get(self, token: str | None) -> SubmissionForm | None:
        return self._forms.get(token) if token else None

    def adopt(self, token: str | None) -> SubmissionForm:
        """The form of a submission: the known one, else a new record (e.g. an evicted form's
        token: still stored once from now on)."""
        form = self.get(token)
        if form is None:
            form = self.issue()
            if token and len(token) <= 64:
                del self._forms[form.token]
                form.token = token
                self._forms[token] = form
        return form

    @staticmethod
    def sending(form: SubmissionForm) -> None:
        form.state = SENDING
        form.error = None

    @staticmethod
    def received(form: SubmissionForm, receipt: Receipt) -> None:
        form.state = RECEIVED
        form.receipt = receipt
        form.error = None
        form._settle()

    @staticmethod
    def reopened(form: SubmissionForm) -> None:
        """Not stored, nothing to keep: the form can simply be sent again."""
        form.state = OPEN
        form.error = None
        form._settle()

    @staticmethod
    def refused(form: SubmissionForm, status: int, error: Callable[[Any], str]) -> None:
        form.state = OPEN
        form.error = (status, error)
        form._settle()


class DraftBudget:
    """Bytes of typed messages kept for refused forms, across all sessions; oldest out first."""

    def __init__(self, limit: int = DRAFT_BUDGET_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self._held: OrderedDict[tuple[int, str], tuple[Any, int]] = OrderedDict()

    def keep(self, session: Any, name: str, size: int, drop: Callable[[Any, str], None]) -> bool:
        """Account for a draft of ``size`` bytes; evicts older ones (``drop(session, name)``)."""
        key = (id(session), name)
        self.release(session, name)
        if size > self.limit:
            return False
        while self.used + size > self.limit and self._held:
            (_sid, old_name), (old_session, old_size) = self._held.popitem(last=False)
            self.used -= old_size
            drop(old_session, old_name)
        self._held[key] = (session, size)
        self.used += size
        return True

    def release(self, session: Any, name: str) -> None:
        held = self._held.pop((id(session), name), None)
        if held is not None:
            self.used -= held[1]
