"""One-time submission forms: each form a source is shown is stored at most once.

Every submission form carries a token of its own, and the page that shows it lives at
``/lookup?form=TOKEN``. Once a submission made with that form is stored, the same address shows
what arrived (the "received" page): Back after sending, a reload, a double click or a replayed
form all land there, and nothing is stored twice. A form that was refused (too large, busy...)
keeps its error, so a refusal with nothing typed can be shown again at that GET-able address.
A typed message is never kept here: it comes back in the refusal's own answer (``_refusals``).

Everything lives in the session (memory only): each session keeps its ``MAX_FORMS`` most recent
forms, a few bytes each. Nothing here is shared between sessions, so no source's forms can push
out, or be seen to push out, another's.
"""
from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.defer import Deferred

OPEN, SENDING, RECEIVED = "open", "sending", "received"
MAX_FORMS = 16


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
