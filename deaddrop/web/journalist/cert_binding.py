"""A journalist logs in only over a client certificate issued for that username.

The certificate's common name is the username it was issued for (``deaddrop-admin cert issue
NAME``). Checked before any factor, so a mismatch costs no Argon2id, consumes no one-time code
and feeds no throttle: revoking Bob's certificate keeps Bob out even if he holds Alice's.
"""
from __future__ import annotations

from typing import Any

from deaddrop.events import SecurityEvents
from deaddrop.newsroom.accounts import valid_username
from deaddrop.transport.tls import peer_common_name

MISMATCH = "certificate_mismatch"


def issued_for(request: Any, username: Any) -> bool:
    """Whether the request's verified client certificate was issued for ``username``."""
    name = peer_common_name(request.transport)
    return isinstance(username, str) and name is not None and name.casefold() == username.strip().casefold()


def refuse_mismatch(request: Any, username: Any, events: SecurityEvents) -> bool:
    """True, after logging ``journalist.login.fail``, when the certificate is someone else's."""
    if issued_for(request, username):
        return False
    key = username.strip().lower() if isinstance(username, str) else ""
    # Only a well-formed name reaches the log: the field is typed by whoever connects.
    events.emit("journalist.login.fail", username=key if valid_username(key) else None, reason=MISMATCH,
                subject=peer_common_name(request.transport))
    return True
