"""Refusing sources who reach the onion through a web proxy (tor2web) instead of Tor Browser.

A tor2web gateway sees everything the source sends and who the source is; it says so by adding
an ``X-tor2web`` header. Such a request gets a 403 page saying why, before any of its body is
read (SecureDrop refuses these too).
"""
from __future__ import annotations

from typing import Any

TITLE = "Please use Tor Browser"
MESSAGE = (
    "You reached this page through a proxy service (tor2web), which can see what you send and who "
    "you are. Nothing was stored. Download Tor Browser from torproject.org and open this address in it."
)


def refuse_proxied(headers: Any) -> tuple[int, str, str] | None:
    """``(403, title, message)`` for a request that came through tor2web, else ``None``."""
    if headers.hasHeader(b"x-tor2web"):
        return 403, TITLE, MESSAGE
    return None
