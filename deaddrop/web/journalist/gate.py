"""The journalist site's root: HSTS on every response, and nothing without a client certificate.

Normally the TLS handshake already refuses a client without a certificate. With
``--journalist-explain-missing-cert`` it lets one in, and this gate is then all it can reach:
``GET /`` gets one static page saying what is missing, every other request a 403 with the same
page. No route, session, cookie or form of the application is ever touched without a verified
certificate. The check runs on every request, whatever the option, as a second line.
"""
from __future__ import annotations

from typing import Any

from twisted.web.resource import Resource

from deaddrop.transport.tls import peer_certificate

# Browsers remember for a year that this origin is HTTPS-only: no downgrade on a later visit.
HSTS = b"max-age=31536000"

MISSING_CERT_PAGE = b"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Newsroom certificate needed</title></head>
<body><h1>Newsroom certificate needed</h1>
<p>This interface needs your newsroom certificate; ask your admin.</p>
<p>Your admin gives you a <code>.p12</code> file and its password. Import it into this browser, then reload this page.</p>
</body></html>
"""


class CertificateGate(Resource):
    isLeaf = True

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner

    def render(self, request: Any) -> Any:
        request.setHeader(b"Strict-Transport-Security", HSTS)
        if peer_certificate(request.transport) is not None:
            return self._inner.render(request)
        # Only reachable with --journalist-explain-missing-cert (the handshake refuses otherwise).
        root = request.method in (b"GET", b"HEAD") and request.path == b"/"
        request.setResponseCode(200 if root else 403)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"content-length", b"%d" % len(MISSING_CERT_PAGE))
        return b"" if request.method == b"HEAD" else MISSING_CERT_PAGE
