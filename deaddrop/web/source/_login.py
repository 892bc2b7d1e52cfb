"""A logged-in source, as the route guards hand it to a route."""
from __future__ import annotations

from dataclasses import dataclass

from deaddrop.newsroom.newsroom import SourceIdentity
from deaddrop.web.sessions import Session


@dataclass(frozen=True)
class SourceLogin:
    session: Session
    identity: SourceIdentity
    passphrase: str
    is_admin = False
