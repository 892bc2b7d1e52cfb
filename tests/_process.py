"""The real ``twistd -n deaddrop`` as a child process, and a blocking raw-socket HTTP client.

``ServerProcess`` starts the server exactly as an admin would (``--tor none`` and a cheap KDF
aside), on a free loopback port, waits until it listens *and* has logged its start-up store
recovery, and can ``kill -9`` it at any moment and start it again on the same data directory.
Everything it started is cleaned up: the server, the gpg processes it forked (its process
group) and the gpg-agent of its keyring.

``RawClient`` speaks HTTP/1.1 over a plain socket with ``Connection: close``, so a test sees
exactly what the server sent (status, headers, body) and can send bytes no HTTP library would.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import urlencode

from tests._support import kill_gpg_agent, test_svs

VENV_BIN = os.path.dirname(sys.executable)
TWISTD = os.path.join(VENV_BIN, "twistd")
RECOVERY_LINE = re.compile(
    r"store recovery: (\d+) temp files removed, (\d+) rows without file removed, (\d+) files without row removed"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Recovery:
    temp_files_removed: int
    rows_without_file: int
    files_without_row: int


class ServerProcess:
    """One data directory, served by successive ``twistd -n deaddrop`` processes."""

    def __init__(self, data_dir: str, *, workdir: str | None = None, extra_args: Iterable[str] = (),
                 submission_key: str | None = None, twistd: str = TWISTD,
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.twistd = twistd  # another install's (tests/integration/test_packaging.py)
        self.env = env
        self.workdir = workdir or os.path.dirname(os.path.abspath(data_dir))
        self.extra_args = list(extra_args)
        self.submission_key = submission_key or test_svs().public_key_path
        self.log_path = os.path.join(self.workdir, "twistd.log")
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._log_offset = 0
        self.starts = 0

    # -- life cycle ----------------------------------------------------------------------

    def argv(self, port: int) -> list[str]:
        return [
            self.twistd, "-n", "--pidfile=", "deaddrop",
            "--tor", "none",
            "--data-dir", self.data_dir,
            "--submission-key", self.submission_key,
            "--source-listen", f"tcp:{port}:interface=127.0.0.1",
            "--journalist-listen", "tcp:0:interface=127.0.0.1",
            "--kdf-cost", "insecure-fast",
            *self.extra_args,
        ]

    def start(self, timeout: float = 30.0) -> Recovery:
        """Start (or restart) and wait until it serves. -> the recovery its start-up logged."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        self.port = free_port()
        with open(self.log_path, "ab") as log:
            # Own session and process group: kill() can find the gpg children it leaves behind.
            self.proc = subprocess.Popen(self.argv(self.port), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True,
                                         env=self.env)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"twistd exited with {self.proc.returncode} at start:\n{self.log_since_start()}")
            if RECOVERY_LINE.search(self.log_since_start()):
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                    return self.recovery()
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"twistd did not start within {timeout} s:\n{self.log_since_start()}")

    def kill(self, orphan_grace: float = 5.0) -> None:
        """``kill -9`` the server process, as a crash would.

        The gpg encryptors it had forked get EOF on their input and may still finish writing a
        temp file; they are given ``orphan_grace`` seconds to do so (any later would be after a
        real restart's recovery too), then their process group is killed, as a service manager
        does for the control group of a crashed service.
        """
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        deadline = time.monotonic() + orphan_grace
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.02)
        _kill_group(pgid)

    def stop(self, timeout: float = 20.0) -> None:
        """A clean shutdown (SIGTERM), falling back to SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(orphan_grace=0)
        _kill_group(self.proc.pid)

    def cleanup(self) -> None:
        if self.proc is not None:
            self.kill(orphan_grace=0)
            _kill_group(self.proc.pid)
        kill_gpg_agent(os.path.join(self.data_dir, "gnupg"))

    # -- what it logged ------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def recovery(self) -> Recovery:
        match = RECOVERY_LINE.search(self.log_since_start())
        assert match, "no store recovery line in this start's log"
        return Recovery(*(int(g) for g in match.groups()))

    def client(self) -> "RawClient":
        assert self.port is not None
        return RawClient(self.port)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- a blocking HTTP client over raw sockets ---------------------------------------------------

@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    raw: bytes = b""

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class ConnectionBroke(Exception):
    """The server closed or reset the connection before a whole response head arrived."""


def parse_response(raw: bytes) -> Response:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1."):
        raise ConnectionBroke(f"no response head in {raw[:200]!r}")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    headers = []
    for line in lines[1:]:
        key, _, value = line.partition(b":")
        headers.append((key.decode("latin-1").strip(), value.decode("latin-1").strip()))
    for key, value in headers:
        if key.lower() == "content-length":
            body = body[: int(value)]
    return Response(status, headers, body, raw)


def exchange(port: int, data: bytes | Iterable[bytes], timeout: float = 30.0, half_close: bool = False) -> Response:
    """Send raw bytes (or chunks), read until the server closes. Raises ConnectionBroke.

    ``half_close``: shut the sending side after the bytes, as a client that gives up does.
    """
    chunks = [data] if isinstance(data, bytes) else data
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            try:
                for chunk in chunks:
                    sock.sendall(chunk)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer early (413, 400) and stop reading: read what it said
            received = bytearray()
            while True:
                try:
                    piece = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not piece:
                    break
                received += piece
    except (ConnectionRefusedError, socket.timeout, OSError) as e:
        raise ConnectionBroke(repr(e))
    return parse_response(bytes(received))


_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')


def multipart_body(boundary: str, fields: list[tuple[str, str | bytes]],
                   files: list[tuple[str, str | bytes, bytes]] = ()) -> bytes:
    """fields: (name, value); files: (field name, filename, content). Values may be raw bytes."""
    b = boundary.encode()
    out = bytearray()
    for name, value in fields:
        value = value.encode("utf-8") if isinstance(value, str) else value
        out += b"--" + b + b'\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n' + value + b"\r\n"
    for name, filename, content in files:
        filename = filename.encode("utf-8") if isinstance(filename, str) else filename
        out += (b"--" + b + b'\r\nContent-Disposition: form-data; name="' + name.encode() + b'"; filename="'
                + filename + b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + content + b"\r\n")
    out += b"--" + b + b"--\r\n"
    return bytes(out)


@dataclass
class RawClient:
    """A source's browser, reduced to a cookie and raw HTTP/1.1 requests."""

    port: int
    cookie: str = ""
    extra_headers: list[tuple[str, str]] = field(default_factory=list)

    def request_bytes(self, method: str, path: str, body: bytes = b"", content_type: str | None = None,
                      headers: Iterable[tuple[str, str]] = ()) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
        if self.cookie:
            lines.append(f"Cookie: {self.cookie}")
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        lines += [f"{k}: {v}" for k, v in list(self.extra_headers) + list(headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def request(self, method: str, path: str, body: bytes = b"", content_type: str | None = None,
                headers: Iterable[tuple[str, str]] = (), timeout: float = 30.0) -> Response:
        response = exchange(self.port, self.request_bytes(method, path, body, content_type, headers), timeout)
        for key, value in response.headers:
            if key.lower() == "set-cookie" and value.startswith("dd_source="):
                pair = value.split(";", 1)[0]
                self.cookie = "" if pair == "dd_source=" else pair
        return response

    def get(self, path: str, **kw) -> Response:
        return self.request("GET", path, **kw)

    def form(self, path: str, fields: dict | list) -> Response:
        return self.request("POST", path, urlencode(fields).encode(), "application/x-www-form-urlencoded")

    @staticmethod
    def csrf(html: str | bytes) -> str:
        html = html.decode("utf-8", "replace") if isinstance(html, bytes) else html
        match = _CSRF.search(html)
        assert match, f"no CSRF token in {html[:300]!r}"
        return match.group(1)

    def create_source(self, wanted: Callable[[str], bool] = lambda codename: True) -> str:
        """Create a source with the first codename /generate offers that is ``wanted``."""
        for _ in range(1000):
            page = self.get("/generate")
            codename = _CODENAME.search(page.text).group(1)
            if wanted(codename):
                break
        else:
            raise AssertionError("/generate offered no wanted codename in 1,000 pages")
        response = self.form("/create", {"codename": codename, "csrf_token": self.csrf(page.body)})
        assert response.status == 303, (response.status, response.text[:300])
        return codename

    def login(self, codename: str) -> Response:
        page = self.get("/login")
        return self.form("/login", {"codename": codename, "csrf_token": self.csrf(page.body)})

    def lookup_csrf(self) -> str:
        page = self.get("/lookup")
        assert page.status == 200, (page.status, page.text[:300])
        return self.csrf(page.body)

    def submit_bytes(self, csrf: str, message: str | bytes = "", files: list[tuple[str, bytes]] = (),
                     boundary: str = "dd-test-boundary-7Qx9") -> bytes:
        file_parts = [("fh", name, content) for name, content in files] or [("fh", "", b"")]
        body = multipart_body(boundary, [("csrf_token", csrf), ("msg", message)], file_parts)
        return self.request_bytes("POST", "/submit", body, f"multipart/form-data; boundary={boundary}")

    def submit(self, message: str | bytes = "", files: list[tuple[str, bytes]] = (), csrf: str | None = None,
               timeout: float = 60.0) -> Response:
        csrf = csrf if csrf is not None else self.lookup_csrf()
        return exchange(self.port, self.submit_bytes(csrf, message, files), timeout)
