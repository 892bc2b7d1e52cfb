"""The journalist site's root: HSTS on every response, and nothing without a client certificate.

Normally the TLS handshake already refuses a client without a certificate. With
``--journalist-explain-missing-cert`` it lets one in, and this gate is then all it can reach:
``GET /`` gets one static page saying what is missing (in the language the browser asks for),
every other request a 403 with the same page. No route, session, cookie or form of the application is ever touched without a verified
certificate. The check runs on every request, whatever the option, as a second line.
"""
from __future__ import annotations

from functools import lru_cache
from html import escape
from typing import Any

from twisted.web.resource import Resource

from deaddrop.web.journalist import i18n

from deaddrop.transport.tls import peer_certificate

# Browsers remember for a year that this origin is HTTPS-only: no downgrade on a later visit.
HSTS = b"max-age=31536000"



@lru_cache(maxsize=None)
def missing_cert_page(code: str) -> bytes:
    """The one page a browser without a certificate gets, in the language ``code`` (the
    browser's: there is no session, nor any account, yet). Built once per language."""
    say = i18n.speech(code)
    title = escape(say._("Newsroom certificate needed"))
    return (f'<!DOCTYPE html>\n<html lang="{say.tag}" dir="{say.direction}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{title}</title></head>\n<body><h1>{title}</h1>\n"
            f"<p>{escape(say._('This interface needs your newsroom certificate; ask your admin.'))}</p>\n"
            "<p>" + escape(say._("Your admin gives you a {file} file and its password. Import it into this browser, "
                                 "then reload this page.", file="\0")).replace("\0", "<code>.p12</code>")
            + "</p>\n</body></html>\n").encode("utf-8")


MISSING_CERT_PAGE = missing_cert_page("en")


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
        page = missing_cert_page(i18n.browser_language(request.requestHeaders))
        request.setResponseCode(200 if root else 403)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"content-length", b"%d" % len(page))
        return b"" if request.method == b"HEAD" else page
