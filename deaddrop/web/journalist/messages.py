"""Messages the journalist interface shows that are written elsewhere in English: the refusals
the shared site answers before a route runs (``web/_common/site.py``), the routing errors
(``web/_common/pages.http_error_page_text``) and the shared upload's refusals. Listed here so the
journalist catalogue holds them; each is translated where it is shown (``JournalistInterface.error``
and ``_early_page``), by its English text.
"""
from __future__ import annotations

from deaddrop.web.journalist.i18n import N_

EARLY = (
    N_("Too many requests"),
    N_("Too many requests over this connection at once. Wait a few seconds, then reload the page."),
    N_("Unsupported upload"),
    N_("This address does not accept uploads."),
    N_("Too large"),
    N_("That request is too large."),
    N_("That upload is too large."),
    N_("Bad address"),
    N_("That address could not be read."),
    N_("Something went wrong"),
    N_("The server could not handle that request. Nothing you sent was stored unless you saw a confirmation."),
    N_("Request refused"),
    N_("The request's headers are too large."),
)

ROUTING = (
    N_("Not found"),
    N_("There is nothing at this address."),
    N_("Not allowed"),
    N_("That action is not available this way."),
    N_("Request refused"),
    N_("The request could not be handled."),
)

# The shared multipart upload's refusals (an admin's logo), by their English text.
UPLOAD = (
    N_("The form data could not be read (bad boundary)."),
    N_("Too many form fields or too large a header."),
    N_("The form data could not be read."),
    N_("The form data was incomplete."),
    N_("The upload was interrupted."),
    N_("Unexpected file field."),
    N_("Too many files in one submission."),
    N_("The form was stale. Please submit again."),
    N_("Unexpected form field."),
    N_("Repeated form field."),
    N_("That message is too long."),
    N_("That file is larger than this instance accepts."),
    N_("The form data is not valid UTF-8 text."),
    N_("The form data contains invalid characters."),
    N_("Your session ended."),
)
