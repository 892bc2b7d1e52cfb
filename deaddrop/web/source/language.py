"""The language menu: a link on most pages, and on a page with a form (the login page, the
submission form) the form's own buttons, so nothing typed is lost to it.

The routes are added to ``SourceInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from deaddrop.newsroom import codenames
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.source import i18n, messages as msgs, pages
from deaddrop.web.source._answers import login_page_again
from deaddrop.web.source._origin import from_our_page
from deaddrop.web.source._submission_forms import OPEN, RECEIVED
from deaddrop.web.source.pages import MAX_MESSAGE_CHARS, within_limit
from deaddrop.web.source.desk_choice import choice_again
from deaddrop.web.source.interface import SourceSite
from deaddrop.web.source.replies import lookup_page


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
def carry_language(self: SourceSite, request: Any, code: str) -> Any:
    """The language menu of a page with a form, which it posts (``pages._language_buttons``):
    this answer is that page in the new language, with what was typed in its boxes. Nothing
    typed is kept on the server, not even for a redirect: a store of typed texts shared by all
    visitors, however bounded, was a clock of other sources' switches (docs/threat-model.md,
    "Shared stores"). Reloading this answer asks to send the form again, which only shows the
    same page again. Chosen files cannot come along: a urlencoded body has only their names,
    and a multipart one is refused here before it is read (only /submit takes one)."""
    if code in i18n.LANGUAGES:
        i18n.remember(request, code)
    back = self.arg(request, "next")
    if not from_our_page(request) or back not in (pages.LOGIN_FORM[1], pages.SUBMISSION_FORM[1], pages.DESK_FORM[1]):
        # Another site's form: the language changes, nothing it sent is shown back.
        return self.redirect(request, back if back in pages.RETURN_PATHS else "/")
    message = within_limit(form_arg(request, "msg", MAX_MESSAGE_CHARS) or "")
    token = self.arg(request, pages.FORM_TOKEN_FIELD)
    login = self.current_login(request) if back != pages.LOGIN_FORM[1] else None
    if login is not None and back == pages.DESK_FORM[1]:  # the choice of desks, a refused message in it
        return choice_again(self, request, login)
    if login is not None:
        form = self.form_for(login, token)
        if form.state == RECEIVED:  # this switch sent again after the form was: what arrived
            return self.to_lookup(request, login.session, form)
        if form.state != OPEN:  # being sent: the text goes on a new form
            form = self.submission_forms(login.session).issue()
        if any(request.args.get(b"fh", ())):  # a file was chosen: its name came, not its bytes
            login.session.flash(i18n.negotiate(request).gettext(msgs.FILES_NOT_CARRIED), "warning")
        return lookup_page(self, request, login, message=message, form=form)
    # The login page; or the submission form of a session that ended meanwhile, whose
    # message then waits on the login page, as after an expired submit.
    codename = (self.arg(request, "codename") or "")[:codenames.MAX_CODENAME_CHARS]
    return login_page_again(self, request, codename=codename, message=message, form_token=token)


def register(cls: type[Routed]) -> None:
    """Add the language routes to the source interface class ``cls``."""
    routes.register(cls)
