"""What a source sees of a submission that was stored: its form's page says what arrived, and
after the session ended meanwhile, the login page says it (from a sealed receipt).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from twisted.web.template import Tag

from deaddrop.newsroom.identity import SourceIdentity
from deaddrop.web.sessions import Session
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._submission_forms import RECEIVED, SubmissionForm, SubmissionForms
from deaddrop.web.source.interface import SourceSite

# The purpose (and binding) of the sealed receipt of a submission received after its session ended.
_RECEIPT = "received"


def received(self: SourceSite, request: Any, login: SourceLogin, form: SubmissionForm) -> bytes:
    """What arrived, at its form's own address (post/redirect/get); after the session ended, the
    login page, which says it."""
    live = still_logged_in(self, request, login)
    if live is None:
        return _received_after_logout(self, request, form)
    return self.to_lookup(request, live.session, _received_in(self, live.session, form))


def _received_in(self: SourceSite, session: Session, form: SubmissionForm) -> SubmissionForm:
    """``form`` as known to ``session``: a source that logged in again while its submission
    was arriving sees what arrived in its new session too."""
    mine = self.submission_forms(session).adopt(form.token)
    if mine is not form and mine.state != RECEIVED and form.receipt is not None:
        first = form.receipt.first or bool(session.data.pop("first_visit", False))
        SubmissionForms.received(mine, dataclasses.replace(form.receipt, first=first))
    return mine


def received_page(self: SourceSite, request: Any, login: SourceLogin, form: SubmissionForm) -> Tag:
    """What one stored form delivered (its address, and any form sent again after it was stored)."""
    ctx = self.page_ctx(request, login.session, logged_in=True)
    receipt = form.receipt
    assert receipt is not None
    text = msgs.received(ctx.lang, receipt.message, receipt.documents)
    return pages.received(ctx, text, receipt.first, self.submission_forms(login.session).issue().token)


def still_logged_in(self: SourceSite, request: Any, login: SourceLogin) -> SourceLogin | None:
    """``login``'s session if it is still live, else this browser's current login to the same
    source (logged in again meanwhile), else None (expired, logged out, or closed)."""
    # The same source: its identity may have gained a desk meanwhile (the source chose one more).
    if self.sessions.is_live(login.session) and _source_id(self.identity_of(login.session)) == login.identity.source_id:
        return login
    current = self.current_login(request)
    if current is not None and current.identity.source_id == login.identity.source_id:
        return current
    return None


def _source_id(identity: SourceIdentity | None) -> int | None:
    return identity.source_id if identity is not None else None


def _received_after_logout(self: SourceSite, request: Any, form: SubmissionForm) -> bytes:
    """Stored, but the session ended while the body was arriving: a redirect (post/redirect/get)
    to the login page, which says both; reloading it sends nothing again. What arrived rides
    in a sealed receipt token: nobody can forge one. It is not bound to the cookie, which
    may have changed meanwhile (a logout or a new login in another tab), and it says only
    what arrived, never what it said."""
    receipt = form.receipt
    assert receipt is not None
    token = self.forms.issue(_RECEIPT, _RECEIPT, f"{int(receipt.message)}:{receipt.documents}")
    return self.redirect(request, f"/login?received={token}")


def receipt_thanks(self: SourceSite, request: Any, lang: i18n.Language) -> str | None:
    """The thanks of a receipt token in the query (``_received_after_logout``), else None."""
    opened = self.forms.open(self.arg(request, "received"), _RECEIPT, _RECEIPT) or ""
    message, _, documents = opened.partition(":")
    if message not in ("0", "1") or not documents.isdigit() or len(documents) > 6:
        return None
    return msgs.received(lang, message == "1", int(documents))
