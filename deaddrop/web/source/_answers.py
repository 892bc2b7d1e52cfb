"""What a source sees: one table (``ANSWERS``, at the end) from what happened to a submission, or
what went wrong on any page, to the page that says it.

A submission is answered with what arrived, or refused with the form again, the typed message
in it, and what went wrong in numbers (the largest file that fits, the limit): nothing typed is
lost. A full queue (``Busy``) is one row, whichever page met it: 503 with Retry-After.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.python.failure import Failure
from werkzeug.exceptions import HTTPException

from deaddrop.admission.disk_space import NoRoom, round_down_coarsely
from deaddrop.admission.queues import BUSY_MESSAGE, BUSY_TITLE, Busy
from deaddrop.crypto.streaming import EncryptionFailed
from deaddrop.newsroom.desks import DeskNotChosen
from deaddrop.newsroom.identity import SourceNotFound
from deaddrop.newsroom.submissions import StorageFailed, Stored, is_disk_full
from deaddrop.web._common.pages import render_sync, set_html
from deaddrop.web._common.site import describe_failure
from deaddrop.web._common.upload import (
    REASON_BAD_FORM, REASON_FILES_TOO_LARGE, REASON_STALE_FORM, REASON_TOO_MANY_FILES, UploadError,
)
from deaddrop.web.source import messages as msgs, pages
from deaddrop.web.source._in_flight import CLOSED
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._origin import from_our_page
from deaddrop.web.source._received import received, received_page, still_logged_in
from deaddrop.web.source._submission_forms import RECEIVED, SENDING, Receipt, SubmissionForm, SubmissionForms
from deaddrop.web.source.desk_choice import lead_to_choice
from deaddrop.web.source.i18n import Counted
from deaddrop.web.source.interface import SourceSite
from deaddrop.web.source.pages import MAX_FILES, MAX_MESSAGE_CHARS, PageContext, within_limit

# Why an upload was refused before its files were read (UploadError.reason).
EXPIRED = "expired"
NO_ROOM = "no-room"  # the disk cannot take the upload and keep its reserve
IN_FLIGHT = "in-flight"
BUSY = "busy"
DESK_NOT_CHOSEN = "desk-not-chosen"  # several desks, and this source has chosen none yet
RETRY_AFTER = b"60"  # seconds, on every busy answer
# A refusal for want of space names the largest file that fits: the body's other parts (the
# message, the form's fields and boundaries) are allowed this much.
_FORM_ALLOWANCE = MAX_MESSAGE_CHARS * 4 + (64 << 10)


class NothingReceived(Exception):
    """A post to /submit without a form body."""


class Expired(Exception):
    """The session ended before the submission could be taken."""


@dataclass
class FormRefused(Exception):
    """The form itself cannot be taken (stale, a bot's, too long, empty...): ``text`` says why."""

    status: int
    text: str | Counted
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class AlreadyReceived(Exception):
    """This form was stored already (sent twice: a double click, Back then resend, a replay)."""

    form: SubmissionForm


@dataclass
class Sent:
    """What a submission's form brought, as its answer needs it: the text fields read (its
    message is given back from them), and once known, whose login and which form it was."""

    fields: dict[str, str]
    login: SourceLogin | None = None
    form: SubmissionForm | None = None

    def message(self, request: Any) -> str:
        """The typed message to give back: only to this site's own page, so another site cannot
        plant a message that a source would then send under their codename."""
        return self.fields.get("msg", "") if from_our_page(request) else ""

    @property
    def token(self) -> str | None:
        return self.form.token if self.form is not None else self.fields.get(pages.FORM_TOKEN_FIELD)


# -- what arrived ------------------------------------------------------------------------------

def _stored(self: SourceSite, request: Any, stored: Stored, sent: Sent) -> bytes:
    login, form = sent.login, sent.form
    assert login is not None and form is not None
    first = bool(login.session.data.pop("first_visit", False))
    receipt = Receipt(stored.message, stored.documents, first=first)
    SubmissionForms.received(form, receipt)
    self.received.stored(login.identity.source_id, form.token, receipt)  # beyond this session too
    return received(self, request, login, form)


def _already_received(self: SourceSite, request: Any, outcome: AlreadyReceived, sent: Sent) -> bytes:
    assert sent.login is not None
    return received(self, request, sent.login, outcome.form)


# -- what went wrong -----------------------------------------------------------------------------

def _busy(self: SourceSite, request: Any, error: Busy, sent: Sent | None) -> bytes:
    """A queue was full (the message's, the replies'...): a flood when many are."""
    self.defence.flood("busy")
    return _busy_refused(self, request, error, sent)


def _busy_refused(self: SourceSite, request: Any, error: Exception, sent: Sent | None) -> bytes:
    status = busy_status(request)
    if sent is None:
        return self.error(request, status, BUSY_TITLE, BUSY_MESSAGE)
    return form_again(self, request, sent, status, msgs.BUSY)  # the message stays


def busy_status(request: Any) -> int:
    """Every busy answer, whichever page says it: 503, and come back in a minute."""
    request.setHeader(b"retry-after", RETRY_AFTER)
    return 503


def _out_of_space(self: SourceSite, request: Any, error: NoRoom, sent: Sent) -> bytes:
    """The disk cannot take the message and keep its reserve."""
    return form_again(self, request, sent, 507, msgs.OUT_OF_SPACE)


def _no_room(self: SourceSite, request: Any, error: UploadError, sent: Sent) -> bytes:
    """The disk cannot take these files and keep its reserve: say what size fits. The size named
    is what would fit were no other upload in flight, rounded down to 1, 2 or 5 times a power of
    ten (``round_down_coarsely``): other sources' uploads do not move it (one that followed them
    as they came was a clock of them: docs/threat-model.md, "Shared stores"), and a file of that
    size fits unless others are uploading. A body that would fit but for uploads in flight is
    told no size, only that there is no room now."""
    disk = self.newsroom.disk
    alone = disk.largest_upload_alone() if disk else 0
    largest = min(self.settings.max_upload_size, alone - _FORM_ALLOWANCE)
    declared = _declared_length(request)
    if largest < 100_000 or (declared is not None and declared <= alone):
        return form_again(self, request, sent, 507, msgs.NO_ROOM_AT_ALL)
    return form_again(self, request, sent, 507, msgs.NO_ROOM if "msg" in sent.fields else msgs.NO_ROOM_LOST,
                      size=round_down_coarsely(largest))


def _declared_length(request: Any) -> int | None:
    """The body's Content-Length, if it has one."""
    raw = request.getHeader(b"content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _not_stored(self: SourceSite, request: Any, e: EncryptionFailed | StorageFailed, sent: Sent) -> bytes:
    # Counted for the day's report (daily_report), never logged now: it would date the source.
    self.newsroom.activity.not_stored("disk_full" if e.disk_full else "storage_failed")
    error = msgs.OUT_OF_SPACE if e.disk_full else msgs.NOT_STORED
    return form_again(self, request, sent, 507 if e.disk_full else 500, error)


def _closed(self: SourceSite, request: Any, error: Exception, sent: Sent) -> bytes:
    """The newsroom closed this source's conversation while it was sending: said once, the typed
    message shown to copy (in this answer only), then logged out."""
    session = self.session_of(request)
    if session is not None and session.data.get("closed"):
        self.cookie.end(request, session)
    return self.error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED, kept=sent.message(request))


def _expired(self: SourceSite, request: Any, error: Exception, sent: Sent) -> bytes:
    """The session ended before the submission could be taken: the login page, the message in it
    to be sent with the codename (``login_page_again``). With nothing typed, once the body is in,
    a redirect to it (post/redirect/get) for a browser whose session ended. A conversation closed
    meanwhile says so instead (``_closed``)."""
    session = self.session_of(request)
    if session is not None and session.data.get("closed"):
        return _closed(self, request, error, sent)
    message = sent.message(request)
    if not message.strip() and not _early(request) and self.cookie.token(request):
        return self.redirect(request, "/login?expired=1")
    return login_page_again(self, request, 403, message=message, form_token=sent.token)


def login_page_again(self: SourceSite, request: Any, status: int = 200, codename: str = "", message: str = "",
                     form_token: str | None = None) -> bytes:
    """The login page, answered now, with what was typed: the codename in its box, and a message
    whose session ended before it was sent, which logging in from this page sends (on its own
    form's token, ``form_token``: that form sent again later is then known as stored). Nothing
    of it is kept on the server (docs/threat-model.md, "Shared stores"): a reload of this page
    asks to send its form again."""
    ctx = self.form_ctx(request, "login")
    notice = ctx._(msgs.EXPIRED_SUBMIT, minutes=self.session_minutes) if message else None
    set_html(request, status)
    return render_sync(pages.login(ctx, notice=notice, carried=within_limit(message), codename=codename,
                                   form_token=form_token if message else None))


def _desk_not_chosen(self: SourceSite, request: Any, error: Exception, sent: Sent) -> bytes:
    """Several desks, and the source has chosen none (a form shown before a second desk was
    added, a message carried through the login page): the choice first, its message waiting in
    its form (issue 29). Nothing was stored, nor any file byte read."""
    # The login that sent it (a message carried through the login page: the session it opened).
    login = still_logged_in(self, request, sent.login) if sent.login is not None else self.current_login(request)
    if login is None:
        return _expired(self, request, error, sent)
    form = self.form_for(login, sent.token)
    if form.state == RECEIVED:
        return form_again(self, request, sent, 409, msgs.STALE_SUBMIT)  # answered with what arrived
    return lead_to_choice(self, request, login, form, within_limit(sent.message(request)), early=_early(request))


def _form_refused(self: SourceSite, request: Any, refused: FormRefused, sent: Sent) -> bytes:
    return form_again(self, request, sent, refused.status, refused.text, **refused.values)


def _too_large(self: SourceSite, request: Any, error: UploadError, sent: Sent) -> bytes:
    if "msg" not in sent.fields:
        said = msgs.TOO_LARGE_LOST
    else:  # "Your message is still below" only when there is one (a form sent with an empty box has none)
        said = msgs.TOO_LARGE if sent.message(request).strip() else msgs.TOO_LARGE_NOTHING_TYPED
    return form_again(self, request, sent, 413, said, size=self.settings.max_upload_size)


def _too_many_files(self: SourceSite, request: Any, error: UploadError, sent: Sent) -> bytes:
    # A bound the source cannot lift: counted for the day's report (never logged now, which
    # would date the source), so the admin learns whether sources keep meeting it.
    self.newsroom.activity.not_stored("too_many_files")
    said = msgs.TOO_MANY_FILES if "msg" in sent.fields else msgs.TOO_MANY_FILES_LOST
    return form_again(self, request, sent, 413, said, limit=MAX_FILES)


def _stale(self: SourceSite, request: Any, error: UploadError, sent: Sent) -> bytes:
    return form_again(self, request, sent, 403, msgs.STALE_SUBMIT)


def _in_flight(self: SourceSite, request: Any, error: UploadError, sent: Sent) -> bytes:
    return form_again(self, request, sent, 429, msgs.IN_FLIGHT)


def _bad_form(self: SourceSite, request: Any, error: UploadError, sent: Sent) -> bytes:
    if error.reason == REASON_BAD_FORM:
        # What the browser sent could not be read: sending it again will not help. Counted for
        # the day's report like any submission that could not be stored.
        self.newsroom.activity.not_stored("bad_form")
    said = msgs.BAD_FORM if "msg" in sent.fields else msgs.BAD_FORM_LOST
    return form_again(self, request, sent, error.status, said)


def _nothing_received(self: SourceSite, request: Any, error: NothingReceived, sent: Sent | None) -> bytes:
    return self.error(request, 400, msgs.T_NOTHING_RECEIVED, msgs.NOTHING_RECEIVED)


def _not_a_page(self: SourceSite, request: Any, error: HTTPException, sent: Sent | None) -> bytes:
    code = error.code or 500
    if code == 404:
        return self.error(request, 404, msgs.T_NOT_FOUND, msgs.NOT_FOUND)
    if code == 405:
        return self.error(request, 405, msgs.T_NOT_ALLOWED, msgs.NOT_ALLOWED)
    return self.error(request, code, msgs.T_REFUSED, msgs.REFUSED)


def _failed(self: SourceSite, request: Any, failure: Failure, sent: Sent | None) -> bytes:
    """Anything else: said calmly; described (code positions only) in the day's report, not now."""
    if sent is not None and sent.form is not None and sent.form.state == SENDING:
        # Failed unexpectedly on its way: the form can be sent again.
        SubmissionForms.refused(sent.form, 500, lambda ctx: ctx._(msgs.NOT_STORED))
    if failure.value is not None and is_disk_full(failure.value):  # e.g. /create when SQLite cannot grow its WAL
        self.newsroom.activity.failed("the disk is full")
        return self.error(request, 507, msgs.T_OUT_OF_SPACE, msgs.OUT_OF_SPACE)
    self.newsroom.activity.failed(describe_failure(failure))  # see SourceInterface._report_failure
    return self.error(request, 500, msgs.T_SOMETHING_WRONG, msgs.SOMETHING_WRONG)


# -- the form again --------------------------------------------------------------------------------

def form_again(self: SourceSite, request: Any, sent: Sent, status: int, error: str | Counted, **values: Any) -> bytes:
    """The submission form again, showing ``error`` with ``status``, the typed message in its box.
    Numbers in ``values`` are formatted in the page's language (``size``: a size in bytes).
    Nothing is read or decrypted here, so this answers at once, even while the body is still
    arriving; a form that was stored already (in any session of its source: ``form_for``)
    answers with what arrived, never with its message as if it were unsent.

    A typed message comes back in this answer, the answer to the POST itself: it is kept
    nowhere on the server, not even for a redirect (a store of drafts shared by all sources,
    however bounded, was a clock of other sources' activity: docs/threat-model.md, "Shared
    stores"). Back or Forward to this page then asks to send the form again, which is harmless:
    the form's one-time token stores it once. A refusal with nothing typed redirects to the
    form's own address instead (post/redirect/get), where the form's record (in the session,
    a few bytes) shows the error."""
    message = within_limit(sent.message(request))
    login = self.current_login(request)
    if login is None:
        ctx = self.page_ctx(request, None)
        return self.error(request, status, msgs.T_NOT_STORED, error, **_formatted(ctx, values))
    form = self.form_for(login, sent.token)
    if form.state == RECEIVED:  # sent again (Back, then "resend"), or replayed: stored once already
        if _early(request):
            # 409 (this form was sent already): a browser still sending shows an answer that comes
            # before its body is through only when it is an error (Chromium resets the page on a 200).
            set_html(request, 409)
            return render_sync(received_page(self, request, login, form))
        return self.to_lookup(request, login.session, form)
    render_error = (lambda ctx: ctx._(error, **_formatted(ctx, values)))
    if _early(request) or message.strip():
        # The page itself (a browser still sending a file does not follow a redirect either),
        # without the replies: what matters now is the form, and reading them can wait.
        SubmissionForms.reopened(form)
        ctx = self.page_ctx(request, login.session, logged_in=True)
        set_html(request, status)
        return render_sync(pages.lookup(ctx, None, message=message, error=render_error(ctx), form_token=form.token))
    SubmissionForms.refused(form, status, render_error)
    return self.to_lookup(request, login.session, form, refused=True)


def _early(request: Any) -> bool:
    """Whether this answer goes out while the body is still arriving (``uploads.start_upload``)."""
    return bool(getattr(request, "answering_early", False))


def _formatted(ctx: PageContext, values: dict[str, Any]) -> dict[str, Any]:
    """Values of an error message in the page's language: sizes in MB (``ctx._`` writes the other
    numbers, and says counts in their plural forms)."""
    return {k: ctx.size(v) if k == "size" else v for k, v in values.items()}


# -- the table ---------------------------------------------------------------------------------------

# A row's page: (the interface, the request, what happened, the submission or None) -> the page.
ToPage = Callable[..., bytes]

# What happened -> what the source sees, after a submission (its form again, the message in it)
# and on any other page (None: a calm 500, like anything unexpected). The first row that matches
# answers. A kind is a class of outcome or error, or the reason of an ``UploadError`` (a body
# refused as it arrived).
ANSWERS: tuple[tuple[type | str, ToPage | None, ToPage | None], ...] = (
    # what happened            after a submission      on any other page
    (Stored,                   _stored,                None),  # what arrived, at its form's address
    (AlreadyReceived,          _already_received,      None),  # stored once, answered as the first time
    (Busy,                     _busy,                  _busy),  # 503, Retry-After; a flood when many are
    (BUSY,                     _busy_refused,          None),  # the same: an upload refused a slot, or ended
    (NoRoom,                   _out_of_space,          None),  # 507: the message would not fit
    (NO_ROOM,                  _no_room,               None),  # 507, with the largest file that fits now
    (EncryptionFailed,         _not_stored,            None),  # 507 when the disk filled up, else 500
    (StorageFailed,            _not_stored,            None),
    (SourceNotFound,           _closed,                None),  # deleted by the newsroom meanwhile: 403
    (CLOSED,                   _closed,                None),
    (Expired,                  _expired,               None),  # the login page, the message waiting in it
    (EXPIRED,                  _expired,               None),
    (DeskNotChosen,            _desk_not_chosen,       None),  # several desks: the choice first, the message kept
    (DESK_NOT_CHOSEN,          _desk_not_chosen,       None),
    (FormRefused,              _form_refused,          None),  # stale, a bot's, too long, empty...
    (REASON_FILES_TOO_LARGE,   _too_large,             None),  # 413, with the limit
    (REASON_TOO_MANY_FILES,    _too_many_files,        None),  # 413, with the limit
    (REASON_STALE_FORM,        _stale,                 None),  # 403
    (IN_FLIGHT,                _in_flight,             None),  # 429: another of its submissions is arriving
    (UploadError,              _bad_form,              None),  # its own status: the form could not be read
    (NothingReceived,          _nothing_received,      None),  # 400
    (HTTPException,            _not_a_page,            _not_a_page),  # 404, 405...
)


def answer(self: SourceSite, request: Any, outcome: Any, sent: Sent | None = None) -> bytes:
    """The page for ``outcome`` (``Stored``, an error, or the ``Failure`` of one) of the
    submission ``sent``, or of any other request when ``sent`` is None (``ANSWERS``)."""
    failure = outcome if isinstance(outcome, Failure) else None
    what = failure.value if failure is not None else outcome
    if isinstance(what, UploadError) and what.reason not in (CLOSED, NO_ROOM) and self.current_login(request) is None:
        what = Expired()  # refused after its session ended: the login page, whatever else was wrong
    row = next((row for row in ANSWERS if _is(what, row[0])), None)
    page = None if row is None else row[1] if sent is not None else row[2]
    if page is None:
        answered = _failed(self, request, failure or Failure(what), sent)
    else:
        answered = page(self, request, what, sent)
    if sent is not None and sent.form is not None and sent.form.state == SENDING:
        # Neither stored nor refused (the source was deleted meanwhile): it can be sent again.
        SubmissionForms.reopened(sent.form)
    return answered


def _is(what: Any, kind: type | str) -> bool:
    if isinstance(kind, str):
        return isinstance(what, UploadError) and what.reason == kind
    return isinstance(what, kind)
