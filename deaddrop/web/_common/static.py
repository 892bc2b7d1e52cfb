"""The few static files (one stylesheet; for the journalist side, the one WebAuthn script),
served from the package with fixed types.

The stylesheet is linked under a name that carries a hash of its content
(``/static/style.<hash>.css``), so browsers may cache it for a year while pages stay
``no-store``: a changed stylesheet gets a new name. The plain name still works, uncached.
"""
from __future__ import annotations

import base64
import hashlib
import os
from functools import lru_cache
from typing import Any

_STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
_TYPES = {"style.css": b"text/css; charset=utf-8", "webauthn.js": b"text/javascript; charset=utf-8"}
# What each interface serves: the source side has no script to serve at all.
SHARED = frozenset({"style.css"})
JOURNALIST = SHARED | {"webauthn.js"}
_CACHE_FOREVER = b"public, max-age=31536000, immutable"


@lru_cache(maxsize=None)
def _read(name: str) -> bytes:
    with open(os.path.join(_STATIC_DIR, name), "rb") as f:
        return f.read()


@lru_cache(maxsize=None)
def hashed_names() -> dict[str, str]:
    """content-hashed name -> file name, for every static file."""
    out = {}
    for name in _TYPES:
        stem, dot, ext = name.rpartition(".")
        out[f"{stem}.{hashlib.sha256(_read(name)).hexdigest()[:16]}{dot}{ext}"] = name
    return out


def hashed_url(name: str) -> str:
    return "/static/" + next(h for h, n in hashed_names().items() if n == name)


def integrity(name: str) -> str:
    """The file's Subresource Integrity value (``sha384-...``)."""
    return "sha384-" + base64.b64encode(hashlib.sha384(_read(name)).digest()).decode("ascii")


def serve_static(request: Any, name: str, served: frozenset[str] = SHARED) -> bytes:
    hashed = hashed_names().get(name)
    if hashed not in served and name not in served:  # an allow-list: no path is ever built from the URL
        request.setResponseCode(404)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"Not found\n"
    if hashed is not None:
        # Replaces the no-store every response starts with: this name never changes content.
        request.setHeader(b"cache-control", _CACHE_FOREVER)
        request.responseHeaders.removeHeader(b"pragma")
        name = hashed
    request.setHeader(b"content-type", _TYPES[name])
    return _read(name)
