"""Streaming ``multipart/form-data``: parse as bytes arrive, encrypt file parts on the fly.

No request body is ever held whole: text fields are capped small, file parts flow straight
into a ``StreamEncryption`` (see ``deaddrop.crypto.streaming``), and the transport is paused
while the encryptor catches up. Nothing becomes visible in the store until the route commits.
"""
from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import multipart
from twisted.internet.defer import Deferred, DeferredList

from deaddrop.newsroom.filenames import sanitise_filename


class FileSink(Protocol):
    out_path: str
    plaintext_size: int

    def write(self, data: bytes) -> None: ...
    def finish(self) -> Deferred: ...
    def abort(self) -> None: ...


@dataclass(frozen=True)
class UploadLimits:
    max_file_bytes: int  # all file parts together
    text_fields: dict[str, int]  # allowed text field -> max bytes
    file_fields: frozenset[str]
    max_parts: int = 32  # every part, text or file (the parser's bound)
    max_header_bytes: int = 4096
    # File parts in one body (chosen-nothing parts included); None: only ``max_parts`` bounds them.
    # Over it, the refusal says so (REASON_TOO_MANY_FILES), not that the form could not be read.
    max_files: int | None = None


@dataclass
class UploadError(Exception):
    status: int
    message: str
    # Why, for interfaces that explain it in their own words (see the REASON_* names).
    reason: str = ""


REASON_FILES_TOO_LARGE = "files-too-large"
REASON_TOO_MANY_FILES = "too-many-files"
REASON_TEXT_TOO_LARGE = "text-too-large"
REASON_STALE_FORM = "stale-form"
REASON_BAD_FORM = "bad-form"


@dataclass
class UploadedFile:
    original_name: str
    temp_path: str
    plaintext_size: int
    ciphertext_size: int


@dataclass
class UploadResult:
    fields: dict[str, str] = field(default_factory=dict)
    files: list[UploadedFile] = field(default_factory=list)


class BodyProgress(Protocol):
    """Told of the body's bytes as they arrive, and when it stops arriving (to judge its pace)."""

    interrupted: bool  # set when the client went away mid-body

    def received(self, n: int) -> None: ...
    def ended(self) -> None: ...


OpenSink = Callable[[str, Callable[[], None], Callable[[], None]], FileSink]
OnFail = Callable[[UploadError], None]


class MultipartUpload:
    """Fed from the reactor thread by the request; ``result`` fires after ``end()``."""

    def __init__(
        self,
        boundary: bytes,
        limits: UploadLimits,
        open_sink: OpenSink,
        pause_transport: Callable[[], None],
        resume_transport: Callable[[], None],
        refused: UploadError | None = None,
        csrf_token: str | None = None,
        files_refused: UploadError | None = None,
        on_fail: OnFail | None = None,
        progress: BodyProgress | None = None,
    ) -> None:
        """``csrf_token``: if given, the ``csrf_token`` field must match it and come before any
        file part, so a forged or stale form is refused before a single file byte is encrypted.

        ``files_refused``: read the text fields (so the page can give the typed message back)
        but fail with this error at the first file byte. A stale CSRF token switches to this
        mode too. ``on_fail`` is called once, at the moment the upload fails: the interface
        can answer at once instead of reading the rest of the body. ``progress`` hears of every
        body byte fed, and of the end of the body (complete or not)."""
        self._limits = limits
        self._open_sink = open_sink
        self._pause_transport = pause_transport
        self._resume_transport = resume_transport
        self._error: UploadError | None = refused
        self._parser: multipart.PushMultipartParser | None = None
        if self._error is None:
            try:
                self._parser = multipart.PushMultipartParser(
                    boundary, max_header_size=limits.max_header_bytes, max_header_count=8,
                    # Not strict: strict mode rejects an epilogue that arrives in a later chunk
                    # than the closing boundary, i.e. depends on how TCP split the body.
                    max_segment_count=limits.max_parts, strict=False,
                )
            except multipart.MultipartError:
                self._error = UploadError(400, "The form data could not be read (bad boundary).")
        self._csrf_token = csrf_token
        self._csrf_seen = csrf_token is None
        self._files_refused = files_refused
        self._on_fail = on_fail
        self._progress = progress
        self._fields: dict[str, bytearray] = {}
        self._segment: Any = None
        self._segment_sink: FileSink | None = None
        self._segment_name = ""
        self._segment_text: bytearray | None = None
        self._sinks: list[tuple[str, FileSink]] = []
        self._paused_by: set[int] = set()
        self._file_bytes = 0
        self._file_parts = 0
        self.result: Deferred[UploadResult] = Deferred()
        self._ended = False

    @property
    def failed(self) -> UploadError | None:
        return self._error

    @property
    def takes_files(self) -> bool:
        """False when no file byte will be taken (refused, or files refused from the start: only
        the text fields are read, as from a form)."""
        return self._error is None and self._files_refused is None

    def fields_so_far(self) -> dict[str, str]:
        """The text fields read whole so far (undecodable ones left out), even after a failure."""
        out = {}
        for name, value in self._fields.items():
            try:
                text = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if "\x00" not in text:
                out[name] = text
        return out

    # -- feeding ---------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self._error is not None or self._ended or self._parser is None or self._parser.closed:
            return  # refused bodies (no parser) and epilogues are read and dropped
        if self._progress is not None:
            self._progress.received(len(data))
            if self._error is not None:
                return  # ended while these bytes were counted (to keep the disk's reserve)
        try:
            for event in self._parser.parse(data):
                self._on_event(event)
        except UploadError as e:
            self._fail(e)
        except multipart.ParserLimitReached:
            self._fail(UploadError(413, "Too many form fields or too large a header.", REASON_BAD_FORM))
        except multipart.MultipartError:
            self._fail(UploadError(400, "The form data could not be read.", REASON_BAD_FORM))

    def end(self) -> None:
        """The whole body has arrived."""
        if self._ended:
            return
        self._ended = True
        self._body_ended()
        if self._error is None and self._parser is not None:  # (a parser unless refused)
            try:
                self._parser.close(check_complete=True)
            except multipart.MultipartError:
                self._fail(UploadError(400, "The form data was incomplete.", REASON_BAD_FORM))
        if self._error is None and self._files_refused is not None:
            self._fail(self._files_refused)  # every text field was read; no file byte was
        if self._error is not None:
            self._abort_sinks()
            self.result.errback(self._error)
            return
        self._finish_sinks()

    def abort(self) -> None:
        """The connection went away mid-body: throw everything away."""
        if not self._ended:
            self._ended = True
            if self._progress is not None:
                self._progress.interrupted = True
            self._body_ended()
            self._abort_sinks()
            self.result.errback(UploadError(400, "The upload was interrupted."))
            self.result.addErrback(lambda _: None)

    def cancel(self, error: UploadError) -> None:
        """Stop taking a body still arriving: its files are thrown away and it fails with
        ``error`` (answered through ``on_fail``). Nothing happens once the body is complete."""
        if not self._ended:
            self._fail(error)

    def _body_ended(self) -> None:
        if self._progress is not None:
            self._progress.ended()

    # -- parser events ---------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        if isinstance(event, multipart.MultipartSegment):
            self._start_segment(event)
        elif event is None:
            self._end_segment()
        else:
            self._segment_data(event)

    def _start_segment(self, segment: Any) -> None:
        name = segment.name
        self._segment = segment
        self._segment_name = name
        if segment.filename is not None or name in self._limits.file_fields:
            # A file field sent without a filename (some clients do) is still a file.
            if name not in self._limits.file_fields:
                raise UploadError(400, "Unexpected file field.", REASON_BAD_FORM)
            self._file_parts += 1
            if self._limits.max_files is not None and self._file_parts > self._limits.max_files:
                raise UploadError(413, "Too many files in one submission.", REASON_TOO_MANY_FILES)
            if not self._csrf_seen and self._files_refused is None:
                self._files_refused = UploadError(403, "The form was stale. Please submit again.", REASON_STALE_FORM)
            self._segment_sink = None
            self._segment_text = None
            self._pending_filename = sanitise_filename(segment.filename)
            self._has_filename = bool(segment.filename)
        else:
            if name not in self._limits.text_fields:
                raise UploadError(400, "Unexpected form field.", REASON_BAD_FORM)
            if name in self._fields:
                raise UploadError(400, "Repeated form field.", REASON_BAD_FORM)
            self._segment_text = bytearray()

    def _segment_data(self, data: bytes) -> None:
        if self._segment_text is not None:
            self._segment_text += data
            if len(self._segment_text) > self._limits.text_fields[self._segment_name]:
                raise UploadError(413, "That message is too long.", REASON_TEXT_TOO_LARGE)
            return
        if self._files_refused is not None:
            raise self._files_refused
        self._file_bytes += len(data)
        if self._file_bytes > self._limits.max_file_bytes:
            raise UploadError(413, "That file is larger than this instance accepts.", REASON_FILES_TOO_LARGE)
        if self._segment_sink is None:
            self._segment_sink = self._open(self._pending_filename)
        self._segment_sink.write(data)

    def _end_segment(self) -> None:
        if self._segment_text is not None:
            self._fields[self._segment_name] = self._segment_text
            if self._segment_name == "csrf_token" and self._csrf_token is not None:
                presented = bytes(self._segment_text)
                if not hmac.compare_digest(presented, self._csrf_token.encode()):
                    if self._files_refused is None:
                        self._files_refused = UploadError(403, "The form was stale. Please submit again.",
                                                          REASON_STALE_FORM)
                else:
                    self._csrf_seen = True
        elif self._segment_sink is not None:
            # Only closes the input; the outcome is collected (and reported) in _finish_sinks.
            # Without the errback a failed encryption was also logged as an "Unhandled error".
            self._segment_sink.finish().addErrback(lambda _: None)
        # A file field with no bytes (nothing chosen in the browser) is simply no file.
        self._segment = self._segment_sink = self._segment_text = None

    def _open(self, filename: str) -> FileSink:
        index = len(self._sinks)
        sink = self._open_sink(filename, lambda: self._sink_paused(index), lambda: self._sink_resumed(index))
        self._sinks.append((filename, sink))
        return sink

    # -- back-pressure ---------------------------------------------------------------------

    def _sink_paused(self, index: int) -> None:
        if not self._paused_by and not self._ended:
            self._pause_transport()
        self._paused_by.add(index)

    def _sink_resumed(self, index: int) -> None:
        self._paused_by.discard(index)
        if not self._paused_by and not self._ended:
            self._resume_transport()

    # -- completion ------------------------------------------------------------------------

    def _fail(self, error: UploadError) -> None:
        first = self._error is None
        if first:
            self._error = error
        self._abort_sinks()
        if self._paused_by:
            self._paused_by.clear()
            self._resume_transport()  # keep reading (and dropping) so the client gets the answer
        if first and self._on_fail is not None and not self._ended:
            self._on_fail(error)

    def _abort_sinks(self) -> None:
        for _name, sink in self._sinks:
            sink.abort()
        self._sinks = []

    def _finish_sinks(self) -> None:
        sinks = self._sinks
        try:
            fields = {name: bytes(value).decode("utf-8") for name, value in self._fields.items()}
        except UnicodeDecodeError:
            self._abort_sinks()
            self.result.errback(UploadError(400, "The form data is not valid UTF-8 text."))
            return
        if any("\x00" in value for value in fields.values()):
            self._abort_sinks()
            self.result.errback(UploadError(400, "The form data contains invalid characters."))
            return

        def collected(results: list) -> UploadResult:
            files = []
            for (name, sink), (ok, value) in zip(sinks, results):
                files.append(UploadedFile(name, sink.out_path, sink.plaintext_size, value if ok else -1))
            failures = [value for ok, value in results if not ok]
            if failures:
                for uploaded in files:
                    _remove_quietly(uploaded.temp_path)  # ciphertext, but no row will own it
                raise failures[0].value
            return UploadResult(fields, files)

        finished = DeferredList([sink.finish() for _name, sink in sinks], consumeErrors=True)
        finished.addCallback(collected).chainDeferred(self.result)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
