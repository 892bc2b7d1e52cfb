"""Administrators change the instance's settings: its name, the largest upload, whether uploads
are taken, and how long submissions are kept.

The routes are added to ``JournalistInterface`` by ``register``.
"""
from __future__ import annotations

from typing import Any

from deaddrop.newsroom.retention import MAX_DAYS as MAX_RETENTION_DAYS
from deaddrop.newsroom.settings import InstanceSettings
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.guards import admin_required, admin_route
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web.journalist import i18n, pages
from deaddrop.web.journalist._login import JournalistLogin
from deaddrop.web.journalist.pages import megabytes, parse_megabytes
from deaddrop.web.journalist.interface import JournalistSite

MIN_UPLOAD_BYTES = 1024  # as --max-upload-size
MAX_UPLOAD_BYTES = 100 * 10**9


routes = Routes()


@routes.route("/admin/settings", methods=["GET"])
@admin_required
def settings_form(self: JournalistSite, request: Any, login: JournalistLogin):
    return self.html(request, pages.settings_page(self.site_name, login.session, login.journalist, self.settings))


@admin_route(routes, "/admin/settings", "POST")
def save_settings(self: JournalistSite, request: Any, login: JournalistLogin):
    """Only what the admin changed is changed: each field is compared with the value its
    form showed (``shown_*``), so an untouched field keeps the setting as it is now, even if
    another admin changed it meanwhile."""
    session, admin = login.session, login.journalist
    current = self.settings

    def changed(field: str, limit: int) -> str | None:
        """The field's new value, or None: left as its form showed it, or not sent at all."""
        raw = form_arg(request, field, limit)
        shown = form_arg(request, f"shown_{field}", limit)
        if raw is None or (shown is not None and raw.strip() == shown.strip()):
            return None
        return raw.strip()

    name = changed("organisation_name", 100)
    size_text = changed("max_upload_mb", 32)
    retention_text = changed("retention_days", 16)
    refuse = form_arg(request, "refuse_uploads") == "1"
    refuse_changed = form_arg(request, "shown_refuse_uploads") != ("1" if refuse else "0")
    size = parse_megabytes(size_text) if size_text is not None else current.max_upload_size
    say = i18n.of(session)
    error = None
    if name is not None and (not name or len(name) > 100 or any(ord(c) < 32 for c in name)):
        error = say._("The organisation name must be 1 to 100 characters.")
    elif size is None or not MIN_UPLOAD_BYTES <= size <= MAX_UPLOAD_BYTES:
        # The bounds as the form takes them (a dot before decimals, whatever the language).
        error = say._("The largest upload must be a number of MB (1 MB = 1,000,000 bytes, up to six decimals) "
                      "between {low} and {high}.", low=megabytes(MIN_UPLOAD_BYTES), high=megabytes(MAX_UPLOAD_BYTES))
    elif retention_text and not (retention_text.isdigit() and 1 <= int(retention_text) <= MAX_RETENTION_DAYS):
        error = say._("Retention must be empty (keep everything) or a whole number of days between 1 and {most}.",
                      most=MAX_RETENTION_DAYS)
    if error or size is None:  # (a size that is None has its error)
        page = pages.settings_page(self.site_name, session, admin, self.settings, error)
        return (yield self.html(request, page, 400))
    updated = InstanceSettings(
        current.organisation_name if name is None else name,
        size,
        current.allow_uploads if not refuse_changed else not refuse,
        current.retention_days if retention_text is None else (int(retention_text) if retention_text else None))
    yield shield(self.accounts.db.run(updated.save))
    # In memory after the database: the source side reads this same object per request.
    self.settings.organisation_name = updated.organisation_name
    self.settings.max_upload_size = updated.max_upload_size
    self.settings.allow_uploads = updated.allow_uploads
    self.settings.retention_days = updated.retention_days
    self.events.emit("admin.settings.changed", username=admin.username)
    session.flash(say._("Settings saved."), "ok")
    return self.redirect(request, "/admin/settings")


def register(cls: type[Routed]) -> None:
    """Add the settings routes to the journalist interface class ``cls``."""
    routes.register(cls)
