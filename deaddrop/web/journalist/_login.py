"""A live journalist login, as the route guards hand it to a route."""
from __future__ import annotations

from dataclasses import dataclass

from deaddrop.newsroom.accounts import Journalist
from deaddrop.web.sessions import Session


@dataclass(frozen=True)
class JournalistLogin:
    session: Session
    journalist: Journalist

    @property
    def is_admin(self) -> bool:
        return self.journalist.is_admin
