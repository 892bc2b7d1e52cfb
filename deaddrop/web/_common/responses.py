"""Response helpers both HTML interfaces share (their classes provide ``settings``)."""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from deaddrop.web._common.pages import error_page_bytes, render, set_html


class HtmlResponses:
    settings: Any

    @property
    def site_name(self) -> str:
        return self.settings.organisation_name

    def redirect(self, request: Any, location: str) -> bytes:
        request.setResponseCode(303)
        request.setHeader(b"location", location.encode())
        return b""

    def html(self, request: Any, page: Any, status: int = 200) -> Deferred:
        set_html(request, status)
        return render(page)

    def error(self, request: Any, status: int, title: str, message: str) -> bytes:
        set_html(request, status)
        return error_page_bytes(self.site_name, status, title, message)
