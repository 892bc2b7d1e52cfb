"""Response helpers both HTML interfaces share (their classes provide ``settings``)."""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from deaddrop.web._common.pages import error_page_bytes, render, set_html


class HtmlResponses:
    settings: Any

    @property
    def _name(self) -> str:
        return self.settings.organisation_name

    def _redirect(self, request: Any, location: str) -> bytes:
        request.setResponseCode(303)
        request.setHeader(b"location", location.encode())
        return b""

    def _html(self, request: Any, page: Any, status: int = 200) -> Deferred:
        set_html(request, status)
        return render(page)

    def _error(self, request: Any, status: int, title: str, message: str) -> bytes:
        set_html(request, status)
        return error_page_bytes(self._name, status, title, message)
