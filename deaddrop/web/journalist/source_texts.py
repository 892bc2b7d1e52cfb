"""Admin pages for what sources see: welcome text, submission instructions and a logo, per
language (English is what other languages fall back to). See ``deaddrop.newsroom.source_texts``.

The routes are added to ``JournalistInterface`` by ``register``; the logo comes as the one
multipart upload the journalist listener takes, held in memory (at most ``png.MAX_BYTES``) and
never written to disk before it is checked.
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import inlineCallbacks, succeed
from twisted.web.template import Tag, tags

from deaddrop.newsroom import png
from deaddrop.newsroom.languages import LANGUAGES
from deaddrop.newsroom.source_texts import KINDS, MAX_TEXT_CHARS, text_problem
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import admin_required, admin_route
from deaddrop.web._common.pages import csrf_field, render_sync
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web._common.upload import REASON_FILES_TOO_LARGE, MultipartUpload, UploadError, UploadLimits
from deaddrop.i18n.negotiation import bcp47
from deaddrop.i18n.speech import Speech
from deaddrop.web.journalist import i18n
from deaddrop.web.journalist.i18n import N_
from deaddrop.web.journalist.pages import _error, _page
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.interface import JournalistSite

LOGO_PATH = b"/admin/source-logo"
# The whole body a logo upload may have: the file and the form's few fields. Anything larger is
# answered at its first file byte with the same page, never read.
LOGO_BODY_LIMIT = 256 * 1024
LOGO_TOO_LARGE = N_("The logo was not saved: that file is larger than {bytes} bytes, the most a logo may have. "
                    "Choose a PNG image of at most {bytes} bytes and {side} x {side} pixels, and upload it again. "
                    "Nothing was changed.")
_LABELS = {"welcome": N_("Welcome text (landing page)"), "instructions": N_("Submission instructions (above the form)")}
# Why a logo is not a PNG the source pages can show (``png.NotAPng``), by its English text.
_NOT_A_PNG = (
    N_("the file is cut short"), N_("the file is damaged (checksum error)"), N_("the file has no end marker"),
    N_("the file is not a PNG image"), N_("the file does not start with a PNG header"),
    N_("the PNG header is not valid"), N_("the image has no palette"), N_("the image data is damaged"),
    N_("the image data does not match its size"),
)


def too_large(say: Speech) -> str:
    return say._(LOGO_TOO_LARGE, bytes=png.MAX_BYTES, side=str(png.MAX_SIDE))


def not_a_png(say: Speech, problem: png.NotAPng) -> str:
    """Why the logo was refused, in ``say``'s language (the sizes are said in full, so every
    reason is one of ``_NOT_A_PNG`` or a size)."""
    if str(problem).startswith("the image must be at most"):
        reason = say._("the image must be at most {side} x {side} pixels", side=str(png.MAX_SIDE))
    elif str(problem).startswith("the file is larger than"):
        reason = say._("the file is larger than {bytes} bytes", bytes=png.MAX_BYTES)
    else:
        reason = say._(str(problem))
    return say._("The logo was not saved: {reason}.", reason=reason)


class _MemorySink:
    """A logo's bytes, in memory (the upload caps them at png.MAX_BYTES)."""

    out_path = ""

    def __init__(self) -> None:
        self.data = bytearray()
        self.plaintext_size = 0

    def write(self, data: bytes) -> None:
        self.data += data
        self.plaintext_size = len(self.data)

    def finish(self):
        return succeed(len(self.data))

    def abort(self) -> None:
        self.data.clear()


def page(site_name: str, session: Any, journalist: Any, texts: Any, error: str | None = None) -> Tag:
    """Per source language, its texts and its logo. A language's name is written in that
    language (marked with its ``lang``), as the source pages' menu writes it."""
    say = i18n.of(session)
    _ = say._
    sections: list[Any] = []
    for code, (name, direction) in LANGUAGES.items():
        own = tags.span(name, lang=bcp47(code), dir=direction)
        fields: list[Any] = [csrf_field(session), tags.input(type="hidden", name="language", value=code)]
        for kind in KINDS:
            field_id = f"{kind}-{code}"
            fields += [tags.label(_(_LABELS[kind]), for_=field_id),
                       tags.textarea(texts.texts.get((kind, code), ""), name=kind, id=field_id, rows="4",
                                     maxlength=str(MAX_TEXT_CHARS), lang=bcp47(code), dir=direction)]
        fields.append(tags.div(class_="actions")(tags.button(_("Save the texts in {language}", language=name),
                                                             type="submit")))
        logo = texts.logos.get(code)
        current = say.n_("Current: {n} byte", "Current: {n} bytes", len(logo)) if logo else _("Current: none")
        logo_form = tags.form(method="post", action=LOGO_PATH.decode(), enctype="multipart/form-data")(
            csrf_field(session), tags.input(type="hidden", name="language", value=code),
            tags.label(_("Logo (PNG, at most {bytes} bytes and {side} x {side} pixels)", bytes=png.MAX_BYTES,
                         side=str(png.MAX_SIDE)), for_=f"logo-{code}"),
            tags.input(type="file", name="logo", id=f"logo-{code}", accept="image/png"),
            tags.p(current if logo or code == "en" else _("Current: none (English's is shown)"), class_="hint"),
            tags.div(class_="actions")(
                tags.button(_("Upload logo"), type="submit"),
                tags.button(_("Remove logo"), type="submit", name="remove", value="1", class_="secondary"),
            ),
        )
        sections.append(tags.section(class_="card")(
            tags.h2(own, " ", tags.span("(", code, ")", dir="ltr")),
            tags.form(method="post", action="/admin/source-texts")(*fields),
            logo_form,
        ))
    return _page(site_name, _("Source pages"), [
        tags.h1(_("What sources see")),
        tags.p(_("Plain text, no HTML; a blank line starts a new paragraph. A language left empty shows the "
                 "English text; if that is empty too, the built-in guidance is shown.")),
        _error(error),
        *sections,
    ], session, journalist)


def _text_problem(say: Speech, problem: str) -> str:
    """``source_texts.text_problem``'s answer in ``say``'s language."""
    if problem.startswith("Texts are limited to"):
        return say.n_("Texts are limited to {n} character.", "Texts are limited to {n} characters.", MAX_TEXT_CHARS)
    return say._("Texts cannot contain control characters.")


routes = Routes()


@routes.route("/admin/source-texts", methods=["GET"])
@admin_required
def source_texts_form(self: JournalistSite, request: Any, login: JournalistLogin):
    return self.html(request, page(self.site_name, login.session, login.journalist, self.source_texts))


@admin_route(routes, "/admin/source-texts", "POST")
def save_source_texts(self: JournalistSite, request: Any, login: JournalistLogin):
    code = form_arg(request, "language", 8) or ""
    values = {kind: (form_arg(request, kind, MAX_TEXT_CHARS + 1) or "").strip() for kind in KINDS}
    say = i18n.of(login.session)
    problem = say._("Unknown language.") if code not in LANGUAGES else next(
        (_text_problem(say, p) for p in map(text_problem, values.values()) if p), None)
    if problem:
        html = page(self.site_name, login.session, login.journalist, self.source_texts, problem)
        return (yield self.html(request, html, 400))

    def save(conn: Any) -> None:
        for kind, text in values.items():
            self.source_texts.save_text(conn, kind, code, text)

    yield shield(self.accounts.db.run(save))
    for kind, text in values.items():
        self.source_texts.apply_text(kind, code, text)
    self.events.emit("admin.source_texts.changed", username=login.journalist.username)
    login.session.flash(say._("Texts for {language} saved.", language=LANGUAGES[code][0]), "ok")
    return self.redirect(request, "/admin/source-texts")


@routes.route(LOGO_PATH.decode(), methods=["POST"])
@inlineCallbacks
def save_source_logo(self: JournalistSite, request: Any):
    # Not @admin_required: its CSRF check reads urlencoded fields; this body is multipart. The
    # upload refuses a file part before a right token; the token is checked here once more, as
    # /submit does, for a body with no file (a removal) and no token at all.
    upload: MultipartUpload | None = getattr(request, "upload", None)
    if upload is None:
        return self.error(request, 400, N_("Nothing received"), N_("Send the logo with the form."))
    try:
        result = yield upload.result
    except UploadError as e:
        login = yield self.current_login(request)
        if e.reason == REASON_FILES_TOO_LARGE and login is not None and login.journalist.is_admin:
            # The size that is accepted, and the forms to try again: not a dead end.
            return (yield self.html(request, page(self.site_name, login.session, login.journalist,
                                                   self.source_texts, too_large(i18n.of(login.session))), 413))
        # e.message: one of the upload's refusals, in the journalist catalogue (messages.UPLOAD).
        return self.error(request, e.status, N_("Logo not saved"), N_("{reason} Nothing was changed."),
                          reason=self.speech(request)._(e.message))
    login = yield self.current_login(request)
    if login is None or not login.journalist.is_admin:
        return self.refuse_non_admin(request)
    if not login.session.check_csrf(result.fields.get("csrf_token")):
        return self.refuse_stale_form(request)
    code = result.fields.get("language")
    if code not in LANGUAGES:
        return self.error(request, 400, N_("Logo not saved"), N_("Unknown language. Nothing was changed."))
    say = i18n.of(login.session)
    logo = None
    if result.fields.get("remove") != "1":
        sink = getattr(request, "logo_sink", None)
        try:
            logo = png.clean_png(bytes(sink.data) if sink else b"")
        except png.NotAPng as e:
            html = page(self.site_name, login.session, login.journalist, self.source_texts, not_a_png(say, e))
            return (yield self.html(request, html, 400))
    yield shield(self.accounts.db.run(self.source_texts.save_logo, code, logo))
    self.source_texts.apply_logo(code, logo)
    self.events.emit("admin.source_logo.changed", username=login.journalist.username)
    login.session.flash(say._("Logo for {language} saved.", language=LANGUAGES[code][0]) if logo
                        else say._("Logo for {language} removed.", language=LANGUAGES[code][0]), "ok")
    return self.redirect(request, "/admin/source-texts")


def start_logo_upload(self: JournalistSite, request: Any, boundary: bytes, length: int | None) -> MultipartUpload:
    session = self.cookie.lookup(request)
    refused = files_refused = None
    if session is None or "journalist_id" not in session.data:
        refused = UploadError(403, "Your session ended.")
    elif length is not None and length > LOGO_BODY_LIMIT:
        # Said at the first file byte, with the page to try again (see answer_now).
        files_refused = UploadError(413, too_large(i18n.speech("en")), REASON_FILES_TOO_LARGE)
    limits = UploadLimits(max_file_bytes=png.MAX_BYTES, file_fields=frozenset({"logo"}),
                          text_fields={"csrf_token": 256, "language": 8, "remove": 1})
    # Looked up now: the page that answers a file too large needs it (see answer_now).
    login = self.current_login(request) if refused is None else None

    def open_sink(filename: str, pause: Callable[[], None], resume: Callable[[], None]) -> _MemorySink:
        request.logo_sink = _MemorySink()
        return request.logo_sink

    def answer_now(error: UploadError) -> None:
        # A file too large: the settings page says what is accepted, at once, and no more of
        # the body is read. Other failures are answered by the route.
        if error.reason != REASON_FILES_TOO_LARGE or login is None:
            return
        request.pause_body()  # not a byte more while the login is looked up

        def answer(found: Any) -> Any:
            if found is not None and found.journalist.is_admin:
                request.answer_early(413, render_sync(page(self.site_name, found.session, found.journalist,
                                                           self.source_texts, too_large(i18n.of(found.session)))))
            # Else the route refuses it, as any upload of a non-admin. Reading goes on either
            # way: what arrives after an answer is dropped unread, and TLS can close.
            request.resume_body()
            return found
        login.addCallback(answer)

    return MultipartUpload(boundary, limits, open_sink, request.pause_body, request.resume_body,
                           refused=refused, csrf_token=session.csrf_token if session else None,
                           files_refused=files_refused, on_fail=answer_now)


def register(cls: type[Routed]) -> None:
    """Add the routes to the journalist interface class ``cls`` (its site takes the logo upload,
    ``start_logo_upload``)."""
    routes.register(cls)
