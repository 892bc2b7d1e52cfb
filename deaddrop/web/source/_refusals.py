"""What a source sees when a submission is refused: always the typed message back, and what
went wrong in numbers (the largest file that fits, the limit), on the submission form again.
"""
from __future__ import annotations

from typing import Any

from deaddrop.crypto.streaming import EncryptionFailed
from deaddrop.newsroom.newsroom import StorageFailed
from deaddrop.web._common.forms import same_origin
from deaddrop.web._common.pages import render_sync, set_html
from deaddrop.web._common.upload import (
    REASON_BAD_FORM, REASON_FILES_TOO_LARGE, REASON_STALE_FORM, REASON_TOO_MANY_FILES, UploadError,
)
from deaddrop.web.source import messages as msgs, pages
from deaddrop.web.source._in_flight import CLOSED
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._submission_forms import RECEIVED, SubmissionForm, SubmissionForms
from deaddrop.web.source.replies import received_page
from deaddrop.web.source.i18n import Counted
from deaddrop.web.source.pages import MAX_FILES, MAX_MESSAGE_CHARS, PageContext
from deaddrop.web.source.interface import SourceSite

# Why an upload was refused before its files were read (UploadError.reason).
EXPIRED = "expired"
NO_ROOM = "no-room"  # the disk cannot take the upload and keep its reserve
IN_FLIGHT = "in-flight"
BUSY = "busy"
# A refusal for want of space names the largest file that fits: the body's other parts (the
# message, the form's fields and boundaries) are allowed this much.
_FORM_ALLOWANCE = MAX_MESSAGE_CHARS * 4 + (64 << 10)


def form_again(self: SourceSite, request: Any, status: int, message: str, error: str | Counted, token: str | None = None,
               **values: Any) -> bytes:
    """The submission form again, at a GET-able address: a redirect to the form's page
    (post/redirect/get), which shows ``error`` with ``status`` and ``message`` (kept sealed in the
    session), so Back, Forward or a reload never asks to send a form again. Numbers in ``values``
    are formatted in the page's language (``size``: a size in bytes). Nothing is read or
    decrypted here, so this answers at once, even while the body is still arriving; a form that
    was stored already answers with what arrived, never with its message as if it were unsent."""
    login = self.current_login(request)
    if login is None:
        ctx = self.page_ctx(request, None)
        return self.error(request, status, msgs.T_NOT_STORED, error, **_formatted(ctx, values))
    forms = self.submission_forms(login.session)
    form = forms.adopt(token)
    if form.state == RECEIVED:  # sent again (Back, then "resend"), or replayed: stored once already
        return _already_received(self, request, login, form)
    render_error = (lambda ctx: ctx._(error, **_formatted(ctx, values)))
    if _early(request):
        # Refused while a file is still arriving (too large, no room, busy, another upload in
        # flight): a browser still sending does not follow a redirect, it shows this page.
        SubmissionForms.reopened(form)
        ctx = self.page_ctx(request, login.session, logged_in=True)
        set_html(request, status)
        return render_sync(pages.lookup(ctx, None, message=message[:MAX_MESSAGE_CHARS], error=render_error(ctx),
                                        form_token=form.token))
    SubmissionForms.refused(form, status, render_error)
    self.keep_draft(request, login.session, form, message[:MAX_MESSAGE_CHARS])
    return self.to_lookup(request, login.session, form, refused=True)


def _early(request: Any) -> bool:
    """Whether this answer goes out while the body is still arriving (``uploads.start_upload``)."""
    return bool(getattr(request, "answering_early", False))


def _already_received(self: SourceSite, request: Any, login: SourceLogin, form: SubmissionForm) -> bytes:
    if _early(request):
        # 409 (this form was sent already): a browser still sending shows an answer that comes
        # before its body is through only when it is an error (Chromium resets the page on a 200).
        set_html(request, 409)
        return render_sync(received_page(self, request, login, form))
    return self.to_lookup(request, login.session, form)


def _expired_page(self: SourceSite, request: Any, message: str) -> bytes:
    """The session ended before the submission could be taken: the login page, the message waiting
    in it to be sent with the codename. After a whole body, a redirect to it (post/redirect/get),
    the message held meanwhile like a text carried across a language switch (``_carried``: in
    memory, sealed to this browser's cookie, minutes at most). Only for a browser that has a
    session cookie, as a source whose session ended does: a visitor that never logged in leaves
    nothing behind."""
    token = self.cookie.token(request)
    if token and not _early(request) and self.carried.keep(token, "", message[:MAX_MESSAGE_CHARS]):
        return self.redirect(request, "/login?expired=1")
    ctx = self.form_ctx(request, "login")
    set_html(request, 403)
    notice = ctx._(msgs.EXPIRED_SUBMIT, minutes=self.session_minutes)
    return render_sync(pages.login(ctx, notice=notice, carried=message[:MAX_MESSAGE_CHARS]))


def closed_page(self: SourceSite, request: Any, message: str) -> bytes:
    """The newsroom closed this source's conversation while it was sending: said once, the typed
    message shown to copy, then logged out. After a whole body, a redirect to /lookup, which says
    it (``SourceInterface._refuse_anonymous``), the message held meanwhile as ``_expired_page`` does."""
    session = self.session_of(request)
    closed = session is not None and session.data.get("closed")
    token = self.cookie.token(request)
    if closed and token and not _early(request) and self.carried.keep(token, "", message[:MAX_MESSAGE_CHARS]):
        return self.redirect(request, "/lookup")
    if closed:
        self.cookie.end(request, session)
    return self.error(request, 403, msgs.T_CLOSED, msgs.SOURCE_CLOSED, kept=message)


def refused_upload_page(self: SourceSite, request: Any, error: UploadError, fields: dict[str, str]) -> bytes:
    """What a source sees when a submission is refused: always the typed message back."""
    message = fields.get("msg", "") if same_origin(request) else ""
    have_message = "msg" in fields
    session = self.session_of(request)
    if error.reason == CLOSED:
        return closed_page(self, request, message)
    if error.reason == NO_ROOM:
        return _no_room_page(self, request, message, have_message, fields.get(pages.FORM_TOKEN_FIELD))
    if error.reason == EXPIRED or self.current_login(request) is None:
        if session is not None and session.data.get("closed"):
            return closed_page(self, request, message)
        return _expired_page(self, request, message)
    token = fields.get(pages.FORM_TOKEN_FIELD)
    if error.reason == REASON_FILES_TOO_LARGE:
        # "Your message is still below" only when there is one (a form sent with an empty box has none).
        said = (msgs.TOO_LARGE if message.strip() else msgs.TOO_LARGE_NOTHING_TYPED) if have_message \
            else msgs.TOO_LARGE_LOST
        return form_again(self, request, 413, message, said, token=token, size=self.settings.max_upload_size)
    if error.reason == REASON_TOO_MANY_FILES:
        # A bound the source cannot lift: counted for the day's report (never logged now, which
        # would date the source), so the admin learns whether sources keep meeting it.
        self.newsroom.activity.not_stored("too_many_files")
        return form_again(self, request, 413, message, msgs.TOO_MANY_FILES if have_message else msgs.TOO_MANY_FILES_LOST,
                          token=token, limit=MAX_FILES)
    if error.reason == REASON_STALE_FORM:
        return form_again(self, request, 403, message, msgs.STALE_SUBMIT, token=token)
    if error.reason == IN_FLIGHT:
        return form_again(self, request, 429, message, msgs.IN_FLIGHT, token=token)
    if error.reason == BUSY or error.status == 503:
        request.setHeader(b"retry-after", b"60")
        return form_again(self, request, 503, message, msgs.BUSY, token=token)
    if error.reason == REASON_BAD_FORM:
        # What the browser sent could not be read: sending it again will not help. Counted for
        # the day's report like any submission that could not be stored.
        self.newsroom.activity.not_stored("bad_form")
    return form_again(self, request, error.status, message, msgs.BAD_FORM if have_message else msgs.BAD_FORM_LOST,
                      token=token)


def _no_room_page(self: SourceSite, request: Any, message: str, have_message: bool, token: str | None = None) -> bytes:
    """The disk cannot take these files and keep its reserve: say what size fits now."""
    disk = self.newsroom.disk
    largest = min(self.settings.max_upload_size, disk.largest_upload() - _FORM_ALLOWANCE if disk else 0)
    if largest < 100_000:
        return form_again(self, request, 507, message, msgs.NO_ROOM_AT_ALL, token=token)
    # Rounded down to what the page shows (tenths of a MB below 10 MB, whole MB above): a
    # file of the size named must fit.
    step = 100_000 if largest < 10_000_000 else 1_000_000
    largest -= largest % step
    return form_again(self, request, 507, message, msgs.NO_ROOM if have_message else msgs.NO_ROOM_LOST,
                      token=token, size=largest)


def storage_failed(self: SourceSite, request: Any, e: EncryptionFailed | StorageFailed, message: str = "",
                   token: str | None = None) -> Any:
    # Counted for the day's report (daily_report), never logged now: it would date the source.
    self.newsroom.activity.not_stored("disk_full" if e.disk_full else "storage_failed")
    error = msgs.OUT_OF_SPACE if e.disk_full else msgs.NOT_STORED
    return form_again(self, request, 507 if e.disk_full else 500, message, error, token=token)


def _formatted(ctx: PageContext, values: dict[str, Any]) -> dict[str, Any]:
    """Values of an error message in the page's language: sizes in MB (``ctx._`` writes the other
    numbers, and says counts in their plural forms)."""
    return {k: ctx.size(v) if k == "size" else v for k, v in values.items()}
