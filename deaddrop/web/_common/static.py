"""The few static files (one stylesheet), served from the package with fixed types."""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

_STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
_TYPES = {"style.css": b"text/css; charset=utf-8"}


@lru_cache(maxsize=None)
def _read(name: str) -> bytes:
    with open(os.path.join(_STATIC_DIR, name), "rb") as f:
        return f.read()


def serve_static(request: Any, name: str) -> bytes:
    if name not in _TYPES:  # an allow-list: no path is ever built from the URL
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"Not found\n"
    request.setHeader(b"content-type", _TYPES[name])
    return _read(name)
