"""Shared test helpers: a real SVS key, a real server on a real port, a cookie-keeping client.

Nothing here is a mock: the server is the one ``twistd deaddrop`` builds, with real gpg and
SQLite, listening on 127.0.0.1:0.
"""
from __future__ import annotations

import atexit
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
from deaddrop.crypto.run_home import remove_left_behind
from deaddrop.service import build_service


def short_tempdir(prefix: str = "dd-") -> str:
    """gpg-agent sockets live in the GnuPG home and their paths are limited to 107 bytes."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def kill_gpg_agent(homedir: str) -> None:
    """Stop the agent of ``homedir``, and of the run home of a ``Keyring`` whose files are there."""
    subprocess.run(["gpgconf", "--homedir", homedir, "--kill", "gpg-agent"], capture_output=True)
    remove_left_behind(homedir)


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
        yield self.service.calibrated  # its timed Argon2id runs, before a test counts runs
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
def initialised_data_dir(testcase: Any, **overrides: Any):
    """A data dir the server has initialised (started once, then stopped), removed afterwards."""
    server = RunningServer(testcase, **overrides)
    testcase.addCleanup(server.cleanup)
    yield server.start()
    yield server.stop()
    return server.data_dir


@inlineCallbacks
def start_server(testcase: Any, **overrides: Any):
    """Start a server for ``testcase`` and arrange for it to stop and be removed afterwards."""
    server = RunningServer(testcase, **overrides)
    testcase.addCleanup(server.cleanup)
    yield server.start()
    testcase.addCleanup(server.stop)
    return server


def multipart_body(fields: list[tuple[str, str]], files: list[tuple[str, bytes]], file_field: str = "fh"):
    """A multipart/form-data body as a browser builds it. -> (bytes, content type).

    Built here rather than with treq's MultiPartProducer, which (seen with treq 26.7 on a
    shared reactor) can stall before the closing boundary after a large file part.
    """
    import uuid as _uuid

    boundary = "----DeadDropTest" + _uuid.uuid4().hex
    out = bytearray()
    for name, value in fields:
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n').encode()
        out += value.encode("utf-8") + b"\r\n"
    for filename, data in files:
        quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{quoted}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n").encode("utf-8")
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


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
            # As a browser does: the same User-Agent on the redirected request.
            response = yield self.client.get(self.url(location), allow_redirects=False,
                                             headers={"User-Agent": self.USER_AGENT})
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
        assert response.code == 200 and "Send more and read replies" in html, (response.code, html[:500])
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
        body, content_type = multipart_body(fields, list(files) or [("", b"")])
        response, html = yield self.post("/submit", data=body, headers={
            "User-Agent": self.USER_AGENT, "Content-Type": content_type})
        return response, html

    @inlineCallbacks
    def close(self):
        yield self.pool.closeCachedConnections()


# -- the journalist side (mutual TLS) ----------------------------------------------------------

import time as _time
from pathlib import Path as _Path

from cryptography import x509 as _x509
from cryptography.hazmat.primitives import serialization as _serialization
from OpenSSL import SSL as _SSL
from OpenSSL.crypto import X509 as _X509
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator as _IClientCreator
from twisted.web.iweb import IPolicyForHTTPS as _IPolicyForHTTPS
from zope.interface import implementer as _implementer


@_implementer(_IClientCreator)
class _ClientCreator:
    def __init__(self, context: Any) -> None:
        self._context = context

    def clientConnectionForTLS(self, tlsProtocol: Any) -> Any:
        return _SSL.Connection(self._context, None)


@_implementer(_IPolicyForHTTPS)
class MutualTLSPolicy:
    """Trusts ``server_cert`` (the server's certificate or the CA that signed it) and presents a client certificate."""

    def __init__(self, server_cert: str, client: tuple[str, str] | None) -> None:
        ctx = _SSL.Context(_SSL.TLS_METHOD)
        ctx.get_cert_store().add_cert(_X509.from_cryptography(
            _x509.load_pem_x509_certificate(_Path(server_cert).read_bytes())))
        ctx.set_verify(_SSL.VERIFY_PEER, lambda conn, cert, errno, depth, ok: bool(ok))
        if client is not None:
            key_path, cert_path = client
            ctx.use_certificate(_x509.load_pem_x509_certificate(_Path(cert_path).read_bytes()))
            ctx.use_privatekey(_serialization.load_pem_private_key(_Path(key_path).read_bytes(), None))
        self._creator = _ClientCreator(ctx)

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return self._creator


@dataclass
class JournalistAccount:
    username: str
    passphrase: str
    totp_secret: str
    uuid: str
    is_admin: bool


@inlineCallbacks
def start_journalist_server(testcase: Any, **overrides: Any):
    """A server whose data dir has a demo CA (``DATA/ca``), so the journalist listener starts.

    Sets ``server.journalist_url``, ``server.ca_dir`` and ``server.server_cert``.
    """
    from deaddrop.transport import ca

    data_dir = overrides.pop("data_dir", None) or short_tempdir()
    if not os.path.exists(os.path.join(data_dir, "ca", "ca.pem")):
        ca.init_ca(os.path.join(data_dir, "ca"))
    server = yield start_server(testcase, data_dir=data_dir, **overrides)
    yield journalist_url(server)
    return server


@inlineCallbacks
def journalist_url(server: RunningServer):
    """Wait for the journalist listener of a (re)started server; -> its https URL."""
    port = yield server.service.journalist_listener.when_listening()
    server.journalist_url = f"https://127.0.0.1:{port.getHost().port}"
    server.ca_dir = os.path.join(server.data_dir, "ca")
    # What a journalist trusts: the CA that signed both their certificate and the server's.
    server.server_cert = os.path.join(server.ca_dir, "ca.pem")
    return server.journalist_url


def issue_client_cert(server: RunningServer, name: str) -> tuple[str, str]:
    """A client certificate from the server's demo CA: -> (key PEM path, cert PEM path)."""
    from deaddrop.transport import ca

    out_dir = os.path.join(server.data_dir, "clients")
    os.makedirs(out_dir, exist_ok=True)
    r = ca.issue_client_cert(server.ca_dir, name, os.path.join(out_dir, f"{name}.p12"), b"test-password")
    return client_pems(r["p12"], b"test-password")


def client_pems(p12_path: str, password: bytes) -> tuple[str, str]:
    """Unprotected PEM copies of a ``.p12``'s key and certificate, for test clients only.

    ``cert issue`` never writes an unprotected key; tests' TLS clients want one.
    -> (key PEM path, cert PEM path), beside the ``.p12``.
    """
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, cert, _cas = pkcs12.load_key_and_certificates(_Path(p12_path).read_bytes(), password)
    stem = os.path.splitext(p12_path)[0]
    key_path, cert_path = f"{stem}.test-key.pem", f"{stem}.test-cert.pem"
    _Path(key_path).write_bytes(key.private_bytes(_serialization.Encoding.PEM, _serialization.PrivateFormat.PKCS8,
                                                  _serialization.NoEncryption()))
    _Path(cert_path).write_bytes(cert.public_bytes(_serialization.Encoding.PEM))
    return key_path, cert_path


@inlineCallbacks
def add_journalist(server: RunningServer, username: str, admin: bool = False):
    creds = yield server.service.accounts.create(username, is_admin=admin)
    return JournalistAccount(username, creds.passphrase, creds.totp_secret, creds.journalist.uuid, admin)


class TotpDevice:
    """An authenticator app for tests: every call gives a code for a step not used yet.

    The server refuses a code twice and accepts one step ahead, so two logins in the same 30 s
    work; for more, the server's account clock is moved forward (never back).
    """

    def __init__(self, server: RunningServer, secret: str) -> None:
        self.server = server
        self.secret = secret
        self.last_step = -1

    def code(self) -> str:
        from deaddrop.newsroom.accounts import TOTP_INTERVAL, totp_code

        accounts = self.server.service.accounts
        now_step = int(accounts.clock() // TOTP_INTERVAL)
        step = max(now_step, self.last_step + 1)
        if step > now_step + 1:
            shift = (step - now_step - 1) * TOTP_INTERVAL
            previous = accounts.clock
            accounts.clock = lambda: previous() + shift
        self.last_step = step
        return totp_code(self.secret, step)


class JournalistBrowser(Browser):
    """A ``Browser`` over mutual TLS that keeps every page it saw (for leak checks)."""

    def __init__(self, server: RunningServer, client: tuple[str, str] | None) -> None:
        super().__init__(server.journalist_url)
        self.server = server
        self.client = HTTPClient(Agent(reactor, contextFactory=MutualTLSPolicy(server.server_cert, client),
                                       pool=self.pool), cookiejar=self.cookies)
        self.pages: list[str] = []

    @inlineCallbacks
    def _finish(self, response: Any, follow: bool):
        response, html = yield super()._finish(response, follow)
        self.pages.append(html)
        return response, html

    @inlineCallbacks
    def log_in(self, account: JournalistAccount, device: TotpDevice | None = None, passphrase: str | None = None,
               code: str | None = None):
        response, html = yield self.get("/login")
        if code is None:
            code = (device or TotpDevice(self.server, account.totp_secret)).code()
        response, html = yield self.post("/login", data={
            "csrf_token": self.csrf(html), "username": account.username,
            "passphrase": account.passphrase if passphrase is None else passphrase, "one_time_code": code,
        })
        return response, html

    @inlineCallbacks
    def get_bytes(self, path: str, **kw: Any):
        response = yield self.client.get(self.url(path), allow_redirects=False, **kw)
        body = yield response.content()
        return response, body

    @inlineCallbacks
    def post_bytes(self, path: str, data: Any, **kw: Any):
        response = yield self.client.post(self.url(path), data=data, allow_redirects=False, **kw)
        body = yield response.content()
        return response, body


class ApiClient:
    """JSON over mutual TLS with ``Authorization: Token``; keeps every response body."""

    def __init__(self, server: RunningServer, client: tuple[str, str] | None) -> None:
        self.server = server
        self.pool = HTTPConnectionPool(reactor, persistent=False)
        self.agent = Agent(reactor, contextFactory=MutualTLSPolicy(server.server_cert, client), pool=self.pool)
        self.http = HTTPClient(self.agent)
        self.token: str | None = None
        self.bodies: list[bytes] = []
        self.responses: list[Any] = []

    @inlineCallbacks
    def request(self, method: str, path: str, json_body: Any = None, headers: dict[bytes, list[bytes]] | None = None,
                raw: bytes | None = None):
        """-> (response, body bytes)."""
        import json as _json

        all_headers = dict(headers or {})
        if self.token is not None:
            all_headers.setdefault(b"authorization", [b"Token " + self.token.encode()])
        data = raw
        if json_body is not None:
            data = _json.dumps(json_body).encode()
            all_headers[b"content-type"] = [b"application/json"]
        response = yield self.http.request(method, self.server.journalist_url + path, data=data,
                                           headers=all_headers)
        body = yield response.content()
        self.bodies.append(body)
        self.responses.append(response)
        return response, body

    @inlineCallbacks
    def json(self, method: str, path: str, json_body: Any = None, **kw: Any):
        """-> (status, decoded JSON)."""
        import json as _json

        response, body = yield self.request(method, path, json_body, **kw)
        return response.code, _json.loads(body)

    @inlineCallbacks
    def log_in(self, account: JournalistAccount, device: TotpDevice | None = None):
        code = (device or TotpDevice(self.server, account.totp_secret)).code()
        status, data = yield self.json("POST", "/api/v1/token", {
            "username": account.username, "passphrase": account.passphrase, "one_time_code": code})
        assert status == 200, (status, data)
        self.token = data["token"]
        return data

    def close(self):
        return self.pool.closeCachedConnections()


def security_events(server: RunningServer) -> list[dict[str, Any]]:
    import json as _json

    path = os.path.join(server.data_dir, "logs", "security.jsonl")
    with open(path, encoding="utf-8") as f:
        return [_json.loads(line) for line in f if line.strip()]


def wait_until(predicate: Any, timeout: float = 5.0):
    """Poll briefly on the reactor (events can land a turn after a client saw a failure)."""
    from twisted.internet.task import deferLater

    @inlineCallbacks
    def poll():
        deadline = _time.monotonic() + timeout
        while not predicate():
            if _time.monotonic() > deadline:
                raise AssertionError("timed out waiting for a condition")
            yield deferLater(reactor, 0.01, lambda: None)

    return poll()
