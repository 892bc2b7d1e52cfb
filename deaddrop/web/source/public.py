"""Pages and files anyone may read: the landing page, the safety page, the instance's logo, and
the machine-readable files (metadata, the submission key, robots.txt, static files).

The routes are added to ``SourceInterface`` by ``register``.
"""
from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred

from deaddrop import __version__
from deaddrop.web._common.routes import Routed, Routes
from deaddrop.web._common.static import serve_static
from deaddrop.web.source import messages as msgs, pages
from deaddrop.web.source.interface import SourceSite


routes = Routes()


@routes.route("/", methods=["GET"])
def index(self: SourceSite, request: Any) -> Deferred:
    login = self.current_login(request)
    ctx = self.page_ctx(request, login.session if login else None, logged_in=login is not None)
    return self.html(request, pages.index(ctx))


@routes.route("/safety", methods=["GET"])
def safety(self: SourceSite, request: Any) -> Deferred:
    login = self.current_login(request)
    ctx = self.page_ctx(request, login.session if login else None, logged_in=login is not None)
    # The admin's retention setting (None: kept until journalists delete them).
    return self.html(request, pages.safety(ctx, self.settings.retention_days))


@routes.route("/logo/<name>", methods=["GET"])
def logo(self: SourceSite, request: Any, name: str) -> bytes:
    png = self.texts.logo_named(name)
    if png is None:
        return self.error(request, 404, msgs.T_NOT_FOUND, msgs.NOT_FOUND)
    request.setHeader(b"content-type", b"image/png")
    # Named by its hash: a new logo gets a new name, so this one may be cached.
    request.setHeader(b"cache-control", b"public, max-age=31536000, immutable")
    request.responseHeaders.removeHeader(b"pragma")
    return png


@routes.route("/favicon.ico", methods=["GET"])
def favicon(self: SourceSite, request: Any) -> bytes:
    # Browsers ask for it on every visit: no icon, and no error page either.
    request.setResponseCode(204)
    return b""


@routes.route("/robots.txt", methods=["GET"])
def robots(self: SourceSite, request: Any) -> bytes:
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    return b"User-agent: *\nDisallow: /\n"


@routes.route("/metadata", methods=["GET"])
def metadata(self: SourceSite, request: Any) -> bytes:
    request.setHeader(b"content-type", b"application/json")
    return json.dumps({
        "organization_name": self.settings.organisation_name,
        "submission_key_fingerprint": self.newsroom.submission_fingerprint,
        "gpg_fpr": self.newsroom.submission_fingerprint,
        "allow_document_uploads": self.settings.allow_uploads,
        "version": __version__,
    }, sort_keys=True).encode()


@routes.route("/public-key", methods=["GET"])
def public_key(self: SourceSite, request: Any) -> bytes:
    request.setHeader(b"content-type", b"application/pgp-keys")
    request.setHeader(b"content-disposition", b'attachment; filename="submission-key.asc"')
    return self.submission_key_armored.encode("ascii")


@routes.route("/static/<path:name>", methods=["GET"])
def static(self: SourceSite, request: Any, name: str) -> bytes:
    return serve_static(request, name)


def register(cls: type[Routed]) -> None:
    """Add the public routes to the source interface class ``cls``."""
    routes.register(cls)
