"""/submit: a message and files, stored once, answered with what arrived (post/redirect/get).

The body streams in first (``uploads``: admitted at its headers, its files encrypted as they
arrive); this route runs once it has arrived. It checks the form, has the newsroom store the
submission (``Submissions.submit``: the message encrypted, all of it committed, or all of it
discarded), and answers through the source interface's one table (``_answers``). The route is
added to ``SourceInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, inlineCallbacks, succeed
from twisted.python.failure import Failure

from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web._common.site import DeadDropRequest
from deaddrop.web._common.upload import MultipartUpload, UploadedFile, UploadResult
from deaddrop.web.source import messages as msgs, pages
from deaddrop.web.source._answers import (
    AlreadyReceived, Expired, FormRefused, NothingReceived, Sent, answer,
)
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._received import still_logged_in
from deaddrop.web.source._submission_forms import RECEIVED, SENDING, SubmissionForms
from deaddrop.web.source.interface import SourceSite
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS, message_chars

routes = Routes()


@routes.route("/submit", methods=["POST"])
def submit(self: SourceSite, request: DeadDropRequest) -> Deferred:
    answered = _submit(self, request)
    # Klein cancels a route's Deferred when the connection drops. A body that arrived whole
    # must still be committed or its ciphertext discarded: cancelled half-way (waiting for
    # the encryptors, or the message's encryption) its temp files were left in DATA/tmp.
    return shield(answered)


def register(cls: type[Routed]) -> None:
    """Add /submit to the source interface class ``cls``."""
    routes.register(cls)


@inlineCallbacks
def _submit(self: SourceSite, request: DeadDropRequest):
    upload: MultipartUpload | None = getattr(request, "upload", None)
    sent = Sent(upload.fields_so_far() if upload is not None else {})
    try:
        if upload is None:
            raise NothingReceived()
        # Refused or failed as it arrived (too large, bad form, a hang-up...): its files are gone.
        received: UploadResult = yield upload.result
        # The login checked once, when the upload started: a session that ended while the body
        # was arriving (expiry, a logout in another tab) does not lose what was sent.
        sent = Sent(received.fields, request.upload_login)
        outcome = yield _stored(self, request, sent, received.files)
    except Exception:
        outcome = Failure()
    return answer(self, request, outcome, sent)


@inlineCallbacks
def _stored(self: SourceSite, request: Any, sent: Sent, files: list[UploadedFile]):
    """``sent`` and its ``files`` (encrypted as they arrived), stored by the newsroom once the
    form is taken. -> ``Stored``; raises why not."""
    try:
        sent.form = yield _form_taken(self, request, sent, bool(files))
    except Exception:
        self.newsroom.submissions.discard(files)  # arrived whole, but the form was refused
        raise
    stored = yield _store(self, sent, files)
    return stored


@inlineCallbacks
def _form_taken(self: SourceSite, request: Any, sent: Sent, with_files: bool):
    """The form of a body that arrived whole, once its own checks pass and nothing else is
    sending it. Raises why it cannot be taken: ``Expired``, ``FormRefused``, ``AlreadyReceived``."""
    login, fields = sent.login, sent.fields
    if login is None:  # not reached: a body without a login fails at its first file byte or end
        raise Expired()
    message = fields.get("msg", "")
    if not login.session.check_csrf(fields.get("csrf_token")):
        refused = FormRefused(403, msgs.STALE_SUBMIT)
    elif fields.get(pages.HONEYPOT_FIELD):
        refused = FormRefused(403, msgs.HONEYPOT)  # as SecureDrop: a bot
    elif message_chars(message) > MAX_MESSAGE_CHARS:
        refused = FormRefused(413, msgs.TOO_LONG, dict(count=message_chars(message), limit=MAX_MESSAGE_CHARS))
    elif not message.strip() and not with_files:
        refused = FormRefused(400, msgs.EMPTY)
    elif with_files and not self.settings.allow_uploads:
        refused = FormRefused(400, msgs.NO_FILES)
    else:
        form = self.form_for(login, fields.get(pages.FORM_TOKEN_FIELD))
        while form.state == SENDING:  # the same form, sent twice at once (a double click)
            yield form.settled()
        if form.state == RECEIVED:  # already stored: answered with what arrived, stored once
            raise AlreadyReceived(form)
        return form
    if still_logged_in(self, request, login) is None:  # nothing stored: the login page, the message in it
        raise Expired()
    raise refused


def _store(self: SourceSite, sent: Sent, files: list[Any]) -> Deferred:
    """The newsroom stores the message in ``sent`` with ``files`` (``Submissions.submit``: all of
    it, or none of it). -> ``Stored``."""
    login, form = sent.login, sent.form
    assert login is not None and form is not None
    SubmissionForms.sending(form)
    return self.newsroom.submissions.submit(login.identity, sent.fields.get("msg", ""), files, login.passphrase)


def carried_submission(self: SourceSite, request: Any, login: SourceLogin, message: str,
                       token: str | None = None) -> Deferred:
    """A message carried through the login page (its session had ended), sent on the token of
    the form it was typed in (``form_for``: that form, sent again from the browser's history,
    is then known as stored, and one known as stored already is not stored again): stored and
    answered as if sent from /submit. -> the page."""
    sent = Sent({"msg": message}, login, self.form_for(login, token))
    if sent.form is not None and sent.form.state == RECEIVED:  # its refusal was sent again: once
        return succeed(answer(self, request, AlreadyReceived(sent.form), sent))
    # Shielded like /submit: a visitor who leaves now still has it stored (or discarded) whole.
    return shield(_store(self, sent, [])).addBoth(lambda outcome: answer(self, request, outcome, sent))
