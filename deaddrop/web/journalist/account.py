"""A journalist's own account: its page, and a new passphrase.

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from deaddrop.journalists import LoginFailed
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import login_required, login_route
from deaddrop.web._common.routes import Routes
from deaddrop.web.journalist import pages
from deaddrop.web.journalist._login import JournalistLogin


routes = Routes()


@routes.route("/account", methods=["GET"])
@login_required
def account(self: Any, request: Any, login: JournalistLogin):
    return self._html(request, pages.account(self._name, login.session, login.journalist))


@login_route(routes, "/account/new-passphrase", "POST")
def new_passphrase(self: Any, request: Any, login: JournalistLogin):
    session, journalist = login.session, login.journalist
    try:
        yield shield(self.accounts.verify_again(journalist, form_arg(request, "passphrase", 1024),
                                                form_arg(request, "one_time_code", 16)))
    except LoginFailed as failure:
        message = pages.THROTTLED_LOGIN_ERROR if failure.throttled else \
            "That passphrase or one-time code was wrong. Nothing was changed."
        return (yield self._html(request, pages.account(self._name, session, journalist, error=message), 403))
    creds = yield shield(self.accounts.reset_passphrase(journalist.id))
    self._end_other_sessions(session, creds.journalist)
    self.events.emit("journalist.password.changed", username=journalist.username)
    page = pages.account(self._name, session, creds.journalist, new_passphrase=creds.passphrase)
    return (yield self._html(request, page))


def register(cls: Any) -> None:
    """Add the account routes to the journalist interface class ``cls``."""
    routes.register(cls)
