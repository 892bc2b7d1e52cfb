"""Whether a source's form post came from one of our own pages: only then is what it carries (a
typed message, a codename) shown back, so another site cannot plant text that a source would
send under their codename (docs/threat-model.md, "Another site's form")."""
from __future__ import annotations

from typing import Any

from deaddrop.web._common.forms import same_origin

# The source interface's one cookie (session, or the binding of the login form's token):
# SameSite=Strict, so never sent with another site's request.
COOKIE = "dd_source"


def from_our_page(request: Any) -> bool:
    return same_origin(request, COOKIE)
