"""Shared test helpers: a real SVS key, a real server on a real port, a cookie-keeping client.

Nothing here is a mock: the server is the one ``twistd deaddrop`` builds, with real gpg and
SQLite, listening on 127.0.0.1:0.
"""
from __future__ import annotations

import atexit
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.logger import globalLogPublisher, formatEvent
from http.cookiejar import CookieJar

from twisted.internet.threads import deferToThread
from twisted.web.client import Agent, HTTPConnectionPool

from deaddrop.config import Config
from deaddrop.crypto.kdf import KdfCost
from deaddrop.server import build_service


def short_tempdir(prefix: str = "dd-") -> str:
    """gpg-agent sockets live in the GnuPG home and their paths are limited to 107 bytes."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def kill_gpg_agent(homedir: str) -> None:
    subprocess.run(["gpgconf", "--homedir", homedir, "--kill", "gpg-agent"], capture_output=True)


@dataclass(frozen=True)
class TestSVS:
    """A submission key pair as an SVS would have it (made once per test process)."""

    homedir: str
    public_key_path: str
    fingerprint: str

    def decrypt(self, ciphertext: bytes) -> bytes:
        proc = subprocess.run(
            ["gpg", "--homedir", self.homedir, "--batch", "--quiet", "--decrypt"],
            input=ciphertext, capture_output=True,
        )
        if proc.returncode != 0:
            raise AssertionError(f"SVS could not decrypt: {proc.stderr.decode(errors='replace')}")
        return proc.stdout


_svs: TestSVS | None = None


def test_svs() -> TestSVS:
    global _svs
    if _svs is None:
        home = short_tempdir("dd-svs-")
        os.chmod(home, 0o700)
        subprocess.run(
            ["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key",
             "DeadDrop test SVS", "future-default", "default", "never"],
            check=True, capture_output=True,
        )
        fingerprint = subprocess.run(
            ["gpg", "--homedir", home, "--batch", "--with-colons", "--list-keys"], check=True, capture_output=True,
        ).stdout.decode().split("fpr:::::::::")[1].split(":")[0]
        public = os.path.join(home, "submission-public.asc")
        with open(public, "wb") as f:
            f.write(subprocess.run(["gpg", "--homedir", home, "--armor", "--export", fingerprint],
                                   check=True, capture_output=True).stdout)
        _svs = TestSVS(home, public, fingerprint)

        def cleanup() -> None:
            kill_gpg_agent(home)
            shutil.rmtree(home, ignore_errors=True)

        atexit.register(cleanup)
    return _svs


class LogCapture:
    """Every log line the process emits while active, formatted as twistd would write it."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: dict) -> None:
        text = formatEvent(event) or ""
        failure = event.get("log_failure")
        if failure is not None:
            text += "\n" + failure.getTraceback()
        self.lines.append(text)

    def start(self) -> "LogCapture":
        globalLogPublisher.addObserver(self)
        return self

    def stop(self) -> None:
        globalLogPublisher.removeObserver(self)

    def text(self) -> str:
        return "\n".join(self.lines)


class RunningServer:
    """``build_service`` + ``startService`` on 127.0.0.1:0, with --tor none and a cheap KDF."""

    def __init__(self, testcase: Any, data_dir: str | None = None, **overrides: Any) -> None:
        self.testcase = testcase
        self.data_dir = data_dir or short_tempdir()
        svs = test_svs()
        settings = dict(
            data_dir=self.data_dir, source_listen="tcp:0:interface=127.0.0.1",
            journalist_listen="tcp:0:interface=127.0.0.1", tor="none",
            submission_key=svs.public_key_path, kdf_cost=KdfCost.parse("insecure-fast"),
            crypto_threads=4,
        )
        settings.update(overrides)
        self.config = Config(**settings)
        self.service: Any = None

    @inlineCallbacks
    def start(self):
        # Start-up blocks (gpg import, SQLite): off the reactor thread, as twistd does before run().
        self.service = yield deferToThread(build_service, self.config, reactor)
        self.service.startService()
        port = yield self.service.source_listener.when_listening()
        self.source_url = f"http://127.0.0.1:{port.getHost().port}"
        return self

    @inlineCallbacks
    def stop(self):
        if self.service is not None and self.service.running:
            yield self.service.stopService()
        kill_gpg_agent(os.path.join(self.data_dir, "gnupg"))

    def cleanup(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)


@inlineCallbacks
def start_server(testcase: Any, **overrides: Any):
    """Start a server for ``testcase`` and arrange for it to stop and be removed afterwards."""
    server = RunningServer(testcase, **overrides)
    testcase.addCleanup(server.cleanup)
    yield server.start()
    testcase.addCleanup(server.stop)
    return server


_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')


class Browser:
    """A cookie-keeping HTTP client that follows redirects like a browser (POST 303 -> GET)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.cookies = CookieJar()
        # Redirects are followed here, not by Twisted's RedirectAgent: CookieAgent adds the
        # Cookie header to the caller's Headers object, so a redirect would resend a stale one.
        self.client = HTTPClient(Agent(reactor, pool=self.pool), cookiejar=self.cookies)
        self.last_html = ""

    def url(self, path: str) -> str:
        return urljoin(self.base_url, path)

    @inlineCallbacks
    def _finish(self, response: Any, follow: bool):
        for _hop in range(5):
            if not follow or response.code not in (301, 302, 303, 307, 308):
                break
            yield response.content()
            location = response.headers.getRawHeaders(b"location")[0].decode()
            response = yield self.client.get(self.url(location), allow_redirects=False)
        body = yield response.content()
        self.last_html = body.decode("utf-8", "replace")
        return response, self.last_html

    USER_AGENT = "DeadDropTestAgent/1 (UA-MARKER-5e1f)"

    def get(self, path: str, follow: bool = True, **kw: Any):
        kw.setdefault("headers", {"User-Agent": self.USER_AGENT})
        d = self.client.get(self.url(path), allow_redirects=False, **kw)
        return d.addCallback(self._finish, follow)

    def post(self, path: str, data: Any = None, files: Any = None, follow: bool = True, **kw: Any):
        kw.setdefault("headers", {"User-Agent": self.USER_AGENT})
        d = self.client.post(self.url(path), data=data, files=files, allow_redirects=False, **kw)
        return d.addCallback(self._finish, follow)

    def csrf(self, html: str | None = None) -> str:
        match = _CSRF.search(html if html is not None else self.last_html)
        assert match, "no CSRF token on the page"
        return match.group(1)

    # -- the source flow ---------------------------------------------------------------------

    @inlineCallbacks
    def create_source(self):
        """-> the codename, logged in on /lookup."""
        response, html = yield self.get("/generate")
        codename = _CODENAME.search(html).group(1)
        response, html = yield self.post("/create", data={"codename": codename, "csrf_token": self.csrf(html)})
        assert response.code == 200 and "Submit files or messages" in html, (response.code, html[:500])
        return codename

    @inlineCallbacks
    def login(self, codename: str):
        response, html = yield self.get("/login")
        response, html = yield self.post("/login", data={"codename": codename, "csrf_token": self.csrf(html)})
        return response, html

    @inlineCallbacks
    def submit(self, message: str = "", files: list[tuple[str, bytes]] = (), extra: list[tuple[str, str]] = ()):
        response, html = yield self.get("/lookup")
        fields = [("csrf_token", self.csrf(html)), ("msg", message)] + list(extra)
        # A browser sends an empty file part (filename="") when no file was chosen.
        files = list(files) or [("", b"")]
        file_fields = [("fh", (name, "application/octet-stream", io.BytesIO(data))) for name, data in files]
        response, html = yield self.post("/submit", data=fields, files=file_fields)
        return response, html

    @inlineCallbacks
    def close(self):
        yield self.pool.closeCachedConnections()
