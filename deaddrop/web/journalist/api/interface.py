"""What a feature file of the journalist API may use of it: ``ApiSite``.

Each feature module (``auth``, ``sources``, ``submissions``, ``replies``) takes the API as
``self: ApiSite``; ``JournalistAPI`` (``__init__.py``) is the one class that provides it, and
a type checker holds the two together.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from twisted.internet.defer import Deferred

from deaddrop.events import SecurityEvents
from deaddrop.newsroom.accounts import Accounts, Journalist
from deaddrop.newsroom.desk import Desk, SourceView
from deaddrop.web.journalist._files import FileResponse


class ApiSite(Protocol):
    """The journalist API, as its endpoints see it (and as ``token_required`` does)."""

    accounts: Accounts
    desk: Desk
    events: SecurityEvents
    submission_key_armored: str

    @staticmethod
    def json_response(request: Any, data: Any, status: int = 200) -> bytes:
        """``data`` as the JSON body of the answer, with ``status``."""

    def json_body(self, request: Any) -> dict[str, Any]:
        """The request's JSON object; raises ``ApiError`` (400) if it is not one."""

    @staticmethod
    def bearer(request: Any) -> str | None:
        """The token of the request's ``Authorization: Token ...`` header, if any."""

    def current_login(self, request: Any) -> Deferred[Journalist | None]:
        """The journalist the request's token belongs to, over their own certificate, else None."""

    def refuse_anonymous(self, request: Any, post: bool) -> bytes:
        """Raises ``ApiError`` (403): the token is missing, expired or revoked."""

    def find_source(self, journalist: Journalist, uuid: str) -> Deferred[SourceView]:
        """The source ``uuid`` as ``journalist`` sees it; raises ``ApiError`` (404) if there is
        none, or it is another desk's (the same answer)."""

    def find_source_item(self, journalist: Journalist, uuid: str, item: str, find: Callable[[SourceView, str], Deferred[Any]],
                         missing: str) -> Deferred[tuple[SourceView, Any]]:
        """The source ``uuid`` and its submission or reply ``item`` (``find(source, item)``)."""

    def download(self, request: Any, opening: Deferred[Any], gone: str) -> Deferred[FileResponse]:
        """The file ``opening`` (a Deferred of the desk's download) sends, with SecureDrop's ETag."""
