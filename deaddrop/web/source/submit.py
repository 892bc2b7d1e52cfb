"""/submit: a message and files, stored once, answered with what arrived (post/redirect/get).

The body streams in first (``uploads``); this route runs once it has arrived: it checks the
form, encrypts the message, commits both, and says what was stored. The route is added to
``SourceInterface`` by ``register``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from twisted.internet.defer import Deferred, inlineCallbacks

from deaddrop.admission.queues import Busy
from deaddrop.crypto.streaming import EncryptionFailed
from deaddrop.newsroom.identity import SourceIdentity
from deaddrop.newsroom.newsroom import EncryptedPart, SourceNotFound, StorageFailed
from deaddrop.admission.disk_space import NoRoom
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import same_origin
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.sessions import Session
from deaddrop.web._common.site import DeadDropRequest
from deaddrop.web._common.upload import MultipartUpload, UploadError, UploadResult
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._login import SourceLogin
from deaddrop.web.source._refusals import EXPIRED, closed_page, form_again, refused_upload_page, storage_failed
from deaddrop.web.source._submission_forms import RECEIVED, SENDING, Receipt, SubmissionForm, SubmissionForms
from deaddrop.web.source.i18n import Counted
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS
from deaddrop.web.source.interface import SourceSite

# The purpose (and binding) of the sealed receipt of a submission received after its session ended.
_RECEIPT = "received"


routes = Routes()


@routes.route("/submit", methods=["POST"])
def submit(self: SourceSite, request: DeadDropRequest) -> Deferred:
    # Klein cancels a route's Deferred when the connection drops. A body that arrived whole
    # must still be committed or its ciphertext discarded: cancelled half-way (waiting for
    # the encryptors, or the message's encryption) its temp files were left in DATA/tmp.
    return shield(_submit(self, request))


def register(cls: type[Routed]) -> None:
    """Add /submit to the source interface class ``cls``."""
    routes.register(cls)


@inlineCallbacks
def _submit(self: SourceSite, request: DeadDropRequest):
    upload: MultipartUpload | None = getattr(request, "upload", None)
    if upload is None:
        return self.error(request, 400, msgs.T_NOTHING_RECEIVED, msgs.NOTHING_RECEIVED)
    try:
        result: UploadResult = yield upload.result
    except UploadError as e:
        return refused_upload_page(self, request, e, upload.fields_so_far())
    except EncryptionFailed as e:
        fields = upload.fields_so_far()
        return storage_failed(self, request, e, fields.get("msg", ""), fields.get(pages.FORM_TOKEN_FIELD))
    # The login checked once, when the upload started: a session that ended while the body
    # was arriving (expiry, a logout in another tab) does not lose what was sent.
    login: SourceLogin | None = request.upload_login
    if login is None:  # not reached: a body without a login fails at its first file byte or end
        self.newsroom.discard(result.files)
        return refused_upload_page(self, request, UploadError(403, "expired", EXPIRED), result.fields)
    message = result.fields.get("msg", "")
    token = result.fields.get(pages.FORM_TOKEN_FIELD)
    problem: tuple[int, str | Counted, dict[str, Any]] | None = None
    if not login.session.check_csrf(result.fields.get("csrf_token")):
        problem = (403, msgs.STALE_SUBMIT, {})
    elif result.fields.get(pages.HONEYPOT_FIELD):
        problem = (403, msgs.HONEYPOT, {})  # as SecureDrop: a bot
    elif len(message) > MAX_MESSAGE_CHARS:
        problem = (413, msgs.TOO_LONG, dict(count=len(message), limit=MAX_MESSAGE_CHARS))
    elif not message.strip() and not result.files:
        problem = (400, msgs.EMPTY, {})
    elif result.files and not self.settings.allow_uploads:
        problem = (400, msgs.NO_FILES, {})
    if problem is not None:
        self.newsroom.discard(result.files)
        live = _still_logged_in(self, request, login)
        if live is None:  # nothing stored: the login page, the message carried in it
            return refused_upload_page(self, request, UploadError(problem[0], "expired", EXPIRED), result.fields)
        return form_again(self, request, problem[0], message, problem[1], token=token, **problem[2])
    form = self.submission_forms(login.session).adopt(token)
    while form.state == SENDING:  # the same form, sent twice at once (a double click)
        yield form.settled()
    if form.state == RECEIVED:  # already stored: answered with what arrived, stored once
        self.newsroom.discard(result.files)
        live = _still_logged_in(self, request, login)
        if live is None:
            return _received_after_logout(self, request, form)
        return self.to_lookup(request, live.session, _received_in(self, live.session, form))
    page = yield store_submission(self, request, login, message, result, form)
    return page


@inlineCallbacks
def store_submission(self: SourceSite, request: Any, login: SourceLogin, message: str, result: UploadResult,
                     form: SubmissionForm):
    """Encrypt the message, commit it with the (already encrypted) files, show what arrived."""
    parts: list[EncryptedPart] = []
    SubmissionForms.sending(form)
    try:
        page = yield _encrypt_and_commit(self, request, login, message, result, form, parts)
    except BaseException:
        if form.state == SENDING:  # cancelled or failed unexpectedly: the form can be sent again
            SubmissionForms.refused(form, 500, lambda ctx: ctx._(msgs.NOT_STORED))
        raise
    if form.state == SENDING:  # not stored, and nothing to keep (e.g. the source was deleted)
        SubmissionForms.reopened(form)
    return page


@inlineCallbacks
def _encrypt_and_commit(self: SourceSite, request: Any, login: SourceLogin, message: str, result: UploadResult,
                        form: SubmissionForm, parts: list[EncryptedPart]):
    try:
        if message.strip():
            # Its room was counted with the files' body, if it came with files.
            part = yield shield(self.newsroom.encrypt_message(login.identity, message, room_held=bool(result.files)))
            parts.append(part)
        parts += [EncryptedPart("doc", f.temp_path, f.ciphertext_size) for f in result.files]
        # The first submission also makes the source's key pair (a pending source has none).
        yield shield(self.newsroom.commit_submission(login.identity, parts, login.passphrase))
    except (EncryptionFailed, StorageFailed) as e:
        self.newsroom.discard([*result.files, *parts])
        return storage_failed(self, request, e, message, form.token)
    except NoRoom:  # the disk cannot take the message and keep its reserve
        self.newsroom.discard([*result.files, *parts])
        return form_again(self, request, 507, message, msgs.OUT_OF_SPACE, token=form.token)
    except Busy:
        self.newsroom.discard([*result.files, *parts])
        self.defence.flood("busy")
        request.setHeader(b"retry-after", b"60")
        return form_again(self, request, 503, message, msgs.BUSY, token=form.token)  # the message stays
    except SourceNotFound:  # deleted by the newsroom while this was on its way: nothing kept
        self.newsroom.discard([*result.files, *parts])
        return closed_page(self, request, message if same_origin(request) else "")
    first = bool(login.session.data.pop("first_visit", False))
    SubmissionForms.received(form, Receipt(bool(message.strip()), len(result.files), first=first))
    self.drop_draft(login.session, f"draft:{form.token}")
    live = _still_logged_in(self, request, login)
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


def _still_logged_in(self: SourceSite, request: Any, login: SourceLogin) -> SourceLogin | None:
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
