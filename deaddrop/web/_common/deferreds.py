"""Deferred helpers both web interfaces share."""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure


def shield(d: Deferred) -> Deferred:
    """Follow ``d`` but never cancel it: a commit must finish even if the client hangs up."""
    out: Deferred = Deferred(lambda _: None)

    def forward(result: Any) -> None:
        if out.called:
            return  # cancelled: the request is gone, the work still completed
        if isinstance(result, Failure):
            out.errback(result)
        else:
            out.callback(result)

    d.addBoth(forward)
    return out
