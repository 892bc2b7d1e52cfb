"""/submit's body as it arrives: admitted before its first byte, its files encrypted as they
stream (never on disk in the clear), refused at the first file byte when it cannot be taken.

What an upload may hold (disk space, pump slots) is the newsroom's to say
(``Submissions.admit_upload``); here its refusals become pages (``_answers``), with the typed
message back.
"""
from __future__ import annotations

from typing import Any, Callable

from deaddrop.admission.queues import BUSY_MESSAGE, Busy, KeyBusy
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.admission.disk_space import NoRoom
from deaddrop.transport.circuits import circuit_of
from deaddrop.web._common.site import DeadDropRequest
from deaddrop.web._common.upload import REASON_FILES_TOO_LARGE, MultipartUpload, UploadError, UploadLimits
from deaddrop.web.source import pages
from deaddrop.newsroom.desks import DeskNotChosen
from deaddrop.web.source._answers import BUSY, DESK_NOT_CHOSEN, EXPIRED, IN_FLIGHT, NO_ROOM, Sent, answer
from deaddrop.web.source.desk_choice import needs_choice
from deaddrop.web.source.pages import MAX_FILES, MAX_MESSAGE_CHARS
from deaddrop.web.source.interface import SourceSite

STILL_RECEIVING = "Another submission from you is still being received. Please wait for it to finish."
CHOOSE_FIRST = "Choose who reads your messages first."


def multipart_limit(settings: InstanceSettings) -> int:
    """The largest /submit body: the largest file, the message, and the form around them. Read
    per request: admins can change the limit while the server runs."""
    return settings.max_upload_size + MAX_MESSAGE_CHARS * 4 + (1 << 20)


def start_upload(self: SourceSite, request: DeadDropRequest, boundary: bytes, length: int | None) -> MultipartUpload:
    """Called when /submit's headers arrive, before any body byte is read.

    When the submission cannot be taken (session expired, another upload in flight, a
    Content-Length over the limit) the text fields are still read, so the answer can give
    the message back, and the answer goes out at the first file byte: no file byte is
    read past that point."""
    text_fields = {"csrf_token": 256, pages.FORM_TOKEN_FIELD: 64, "msg": MAX_MESSAGE_CHARS * 4,
                   pages.HONEYPOT_FIELD: 1024}
    limits = UploadLimits(
        max_file_bytes=self.settings.max_upload_size, text_fields=text_fields, file_fields=frozenset({"fh"}),
        max_files=MAX_FILES,
        # One file part more than allowed reaches the file check, which says what is wrong.
        max_parts=len(text_fields) + MAX_FILES + 1,
    )
    files_refused = None
    # The one session check of an upload, before its first byte: whatever happens to the
    # session later (expiry, a logout in another tab), what this login started is received.
    login = request.upload_login = self.current_login(request)
    session = login.session if login else None
    if login is None:
        files_refused = UploadError(403, "Your session expired; please log in again.", EXPIRED)
    elif not self.newsroom.submissions.may_upload(login.identity.source_id):
        files_refused = UploadError(429, STILL_RECEIVING, IN_FLIGHT)
    elif length is not None and length > multipart_limit(self.settings):
        files_refused = UploadError(413, "That upload is too large.", REASON_FILES_TOO_LARGE)
    elif needs_choice(self, login):  # several desks, none chosen: to whom would its files go?
        files_refused = UploadError(409, CHOOSE_FIRST, DESK_NOT_CHOSEN)

    def evict() -> None:  # another upload needs the room
        self.defence.flood("upload_ended")
        upload.cancel(UploadError(503, BUSY_MESSAGE, BUSY))

    hold = self.newsroom.submissions.admit_upload(login.identity.source_id if login else None, circuit_of(request),
                                                  evict=evict)

    def open_sink(filename: str, pause: Callable[[], None], resume: Callable[[], None]) -> Any:
        # Before the first file's first byte: the whole body's disk space (its Content-Length,
        # or the limit if it has none) and its one pump slot (see deaddrop.newsroom.uploads).
        try:
            hold.admit(multipart_limit(self.settings) if length is None else length)
        except NoRoom:
            raise UploadError(507, "Not enough free disk space.", NO_ROOM)
        except KeyBusy:
            raise UploadError(429, STILL_RECEIVING, IN_FLIGHT)
        except Busy:
            self.defence.flood("busy")
            raise UploadError(503, BUSY_MESSAGE, BUSY)
        # To the keys of the desks this login's source chose (what it chose when the upload began).
        try:
            return self.newsroom.submissions.encrypt_stream(
                gzip_name=filename, compress=False, on_pause=pause, on_resume=resume,
                identity=login.identity if login else None)
        except DeskNotChosen:  # (checked at the headers; a desk removed meanwhile)
            raise UploadError(409, CHOOSE_FIRST, DESK_NOT_CHOSEN) from None

    def answer_now(error: UploadError) -> None:
        # Not a word more is read: the page goes out now, with what was typed.
        request.answering_early = True  # the form itself, at once (see form_again)
        page = answer(self, request, error, Sent(upload.fields_so_far()))
        request.answer_early(request.code, page)  # the page's own status (409 for a form stored already)

    upload = MultipartUpload(boundary, limits, open_sink, request.pause_body, request.resume_body,
                             csrf_token=session.csrf_token if session else None,
                             files_refused=files_refused, on_fail=answer_now, progress=hold.progress)

    if login is not None:
        self.in_flight.add(login.identity.source_id, upload)

    def done(result: Any) -> Any:
        hold.release()
        if login is not None:
            self.in_flight.discard(login.identity.source_id, upload)
        return result

    upload.result.addBoth(done)
    return upload
