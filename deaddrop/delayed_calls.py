"""One helper for the services that keep a timer (``reactor.callLater``) between runs."""
from __future__ import annotations

from typing import Any


def cancel(call: Any) -> None:
    """Cancel ``call`` (an ``IDelayedCall`` or None) unless it has run or was cancelled already."""
    if call is not None and call.active():
        call.cancel()
