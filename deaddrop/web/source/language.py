"""The language menu: a link on most pages, and on a page with a form (the login page, the
submission form) the form's own buttons, so nothing typed is lost to it.

The routes are added to ``SourceInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from deaddrop.newsroom import codenames
from deaddrop.web._common.forms import form_arg, same_origin
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._submission_forms import OPEN
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS
from deaddrop.web.source.interface import SourceSite


routes = Routes()


@routes.route("/language/<code>", methods=["GET"])
def choose_language(self: SourceSite, request: Any, code: str) -> bytes:
    if code in i18n.LANGUAGES:
        i18n.remember(request, code)
    back = self.arg(request, "next")
    keep = self.arg(request, "keep")
    if back == "/generate" and keep:  # the same codename, in the new language
        return self.redirect(request, f"/generate?keep={quote(keep, safe='')}")
    return self.redirect(request, back if back in pages.RETURN_PATHS else "/")


@routes.route("/language/<code>", methods=["POST"])
def carry_language(self: SourceSite, request: Any, code: str) -> bytes:
    """The language menu of a page with a form, which it posts (``pages._language_buttons``):
    what was typed comes back on the page, in the new language, after a redirect. The
    message of the submission form is kept like a refused form's (sealed with the session
    cookie, in memory, within the drafts' budget); the login page's codename (and a message
    carried there) like a codename (``_carried``). Chosen files cannot come along: a
    urlencoded body has only their names, and a multipart one is refused here before it is
    read (only /submit takes one)."""
    if code in i18n.LANGUAGES:
        i18n.remember(request, code)
    lang = i18n.language(code)
    back = self.arg(request, "next")
    if not same_origin(request) or back not in (pages.LOGIN_FORM[1], pages.SUBMISSION_FORM[1]):
        # Another site's form: the language changes, nothing it sent is shown back.
        return self.redirect(request, back if back in pages.RETURN_PATHS else "/")
    message = (form_arg(request, "msg", MAX_MESSAGE_CHARS) or "")[:MAX_MESSAGE_CHARS]
    login = self.current_login(request) if back == pages.SUBMISSION_FORM[1] else None
    if login is not None:
        forms = self.submission_forms(login.session)
        form = forms.adopt(self.arg(request, pages.FORM_TOKEN_FIELD))
        if form.state != OPEN:  # being sent, or sent: the text goes on a new form
            form = forms.issue()
        self.keep_draft(request, login.session, form, message)
        if any(request.args.get(b"fh", ())):  # a file was chosen: its name came, not its bytes
            login.session.flash(lang.gettext(msgs.FILES_NOT_CARRIED), "warning")
        return self.to_lookup(request, login.session, form)
    # The login page; or the submission form of a session that ended meanwhile, whose
    # message then waits on the login page, as after an expired submit.
    codename = (self.arg(request, "codename") or "")[:codenames.MAX_CODENAME_CHARS]
    self.carried.keep(self.form_binding(request), codename, message)
    return self.redirect(request, "/login")


def register(cls: type[Routed]) -> None:
    """Add the language routes to the source interface class ``cls``."""
    routes.register(cls)
