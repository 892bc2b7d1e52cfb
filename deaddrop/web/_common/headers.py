"""Response headers every page of both interfaces carries."""
from __future__ import annotations

from typing import Any

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

SECURITY_HEADERS = {
    b"Content-Security-Policy": CSP.encode("ascii"),
    b"Cache-Control": b"no-store",
    b"Pragma": b"no-cache",
    b"Referrer-Policy": b"no-referrer",
    b"X-Frame-Options": b"DENY",
    b"X-Content-Type-Options": b"nosniff",
    b"Cross-Origin-Opener-Policy": b"same-origin",
    b"Cross-Origin-Resource-Policy": b"same-origin",
    b"Permissions-Policy": b"camera=(), microphone=(), geolocation=(), interest-cohort=()",
}


def apply_security_headers(request: Any) -> None:
    for name, value in SECURITY_HEADERS.items():
        request.setHeader(name, value)


def raw_header_block() -> bytes:
    return b"".join(name + b": " + value + b"\r\n" for name, value in SECURITY_HEADERS.items())
