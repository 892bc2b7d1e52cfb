#!/usr/bin/env python3
"""Load benchmark: N concurrent sources and one journalist against a real server.

    /work/venv/bin/python bench/load.py [--sources 100] [--kdf-cost default|insecure-fast] [--keep]

The server is ``twistd -n deaddrop --tor none`` in a subprocess, on a fresh data dir with a
journalist CA and account made by ``deaddrop-admin ... --json``, and a submission key whose
secret half only this script holds (its "SVS").

Phase 1, load (timed): N source threads start at once; each
  create   GET /generate, POST /create, GET /lookup
  login    GET /logout, GET /login, POST /login, GET /lookup
  submit   POST /submit (a message and a random FILE_MB file), GET /lookup (confirmation)
while a journalist (mutual TLS, token via TOTP) lists sources and downloads every submission
as it appears (each download checked against its ETag ``sha256:...``).
Phase 2, checks: every submission is listed and downloaded and decrypts with the SVS key to
what its source sent (documents are gzip with the file name in FNAME).
Phase 3, keys and replies: for every source the journalist waits for ``key.public`` (with a
timeout), encrypts a reply with gpg to the source key + the submission key and posts it;
the source keys must all differ. Then all N sources log in at once and must read their own
reply on /lookup, which proves each has a working key pair.

Prints a summary table; exit status 0 only if there were no errors and every check passed.
The load generator is plain threads on http.client (no Twisted): a few ms of CPU per source.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import html as htmllib
import http.client
import json
import os
import re
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

VENV_BIN = os.path.dirname(sys.executable)
HTTP_TIMEOUT = 900.0

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')
_FORM_TOKEN = re.compile(r'name="form_token" value="([^"]+)"')
_MESSAGE = re.compile(r"^load-bench source (\d+) nonce ([0-9a-f]{32})$")


class StepError(Exception):
    pass


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a source: a cookie-keeping browser on http.client ------------------------------------

class SourceBrowser:
    def __init__(self, port: int) -> None:
        self.port = port
        self.cookie = ""
        self.csrf = ""
        self.form_token = ""  # the one-time submission form's token (its page is /lookup?form=TOKEN)
        self.location = ""  # where the last redirect pointed

    def connection(self) -> http.client.HTTPConnection:
        """A fresh connection per request (bench/abuse.py's browsers arrive over a Tor circuit)."""
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT)

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None,
                expect: int = 200) -> tuple[http.client.HTTPResponse, str]:
        conn = self.connection()
        try:
            headers = {"Connection": "close"}
            if self.cookie:
                headers["Cookie"] = self.cookie
            if content_type:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise StepError(f"{method} {path}: {type(e).__name__}: {e}") from None
        finally:
            conn.close()
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                pair = value.split(";", 1)[0]
                self.cookie = "" if pair.endswith("=") else pair
        text = data.decode("utf-8", "replace")
        if response.status != expect:
            raise StepError(f"{method} {path}: HTTP {response.status} (expected {expect}): {_title(text)}")
        return response, text

    def form(self, path: str, fields: dict[str, str], expect: int = 303) -> tuple[http.client.HTTPResponse, str]:
        return self.request("POST", path, urlencode(fields).encode(), "application/x-www-form-urlencoded", expect)

    def lookup(self, must_contain: str = 'action="/submit"') -> str:
        """The page the last redirect named (``/lookup?form=TOKEN``: a one-time submission form
        of its own, or what a sent form delivered), else ``/lookup``."""
        where, self.location = self.location or "/lookup", ""
        _, text = self.request("GET", where)
        if must_contain not in text:
            raise StepError(f"GET {where}: page lacks {must_contain!r}: {_title(text)}")
        if 'action="/submit"' in text:
            self.csrf = _csrf(text, where)
            match = _FORM_TOKEN.search(text)
            self.form_token = htmllib.unescape(match.group(1)) if match else ""
        return text

    def follow(self, response: http.client.HTTPResponse, path: str) -> None:
        """The redirect goes to ``path`` (query and fragment aside); the next lookup() follows it."""
        location = response.getheader("location", "")
        if location.split("#", 1)[0].split("?", 1)[0] != path:
            raise StepError(f"redirected to {location!r}, expected {path!r}")
        self.location = location.split("#", 1)[0]

    def create(self) -> str:
        _, text = self.request("GET", "/generate")
        match = _CODENAME.search(text)
        if not match:
            raise StepError("GET /generate: no codename on the page")
        codename = htmllib.unescape(match.group(1)).strip()
        response, _ = self.form("/create", {"codename": codename, "csrf_token": _csrf(text, "/generate")})
        self.follow(response, "/lookup")
        self.lookup()
        return codename

    def log_out(self) -> None:
        _, text = self.request("GET", "/logout")
        if "You are logged out" not in text:
            raise StepError("GET /logout: not logged out")

    def log_in(self, codename: str) -> str:
        _, text = self.request("GET", "/login")
        response, _ = self.form("/login", {"codename": codename, "csrf_token": _csrf(text, "/login")})
        self.follow(response, "/lookup")
        return self.lookup()

    def submit(self, message: str, filename: str, data: bytes) -> None:
        boundary = uuid.uuid4().hex
        body = b"".join([
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{self.csrf}\r\n".encode(),
            (f"--{boundary}\r\nContent-Disposition: form-data; name=\"form_token\"\r\n\r\n{self.form_token}\r\n".encode()
             if self.form_token else b""),  # (older code has no one-time forms)
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"msg\"\r\n\r\n{message}\r\n".encode(),
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"fh\"; filename=\"{filename}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n".encode(),
            data,
            f"\r\n--{boundary}--\r\n".encode(),
        ])
        response, _ = self.request("POST", "/submit", body, f"multipart/form-data; boundary={boundary}", 303)
        self.follow(response, "/lookup")
        self.lookup("We received your message and 1 document")


def _csrf(text: str, where: str) -> str:
    match = _CSRF.search(text)
    if not match:
        raise StepError(f"{where}: no CSRF token on the page")
    return htmllib.unescape(match.group(1))


def _title(text: str) -> str:
    match = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.S)
    return (match.group(1) if match else text[:120]).strip()


# -- the journalist: JSON over mutual TLS, one persistent connection per thread --------------

class JournalistClient:
    def __init__(self, port: int, context: ssl.SSLContext, token: str | None = None) -> None:
        self.port, self.context, self.token = port, context, token
        self.conn: http.client.HTTPSConnection | None = None
        self.reconnects = 0

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT,
                                                        context=self.context)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as e:
                self.conn.close()
                self.conn = None
                # A kept-alive connection the server closed meanwhile: reconnect once.
                if fresh or attempt or not isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError,
                                                          BrokenPipeError)):
                    raise StepError(f"{method} {path}: {type(e).__name__}: {e}") from None
                self.reconnects += 1
                continue
            if response.getheader("connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            return response.status, {k.lower(): v for k, v in response.getheaders()}, payload
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        status, _, payload = self.request(method, path, body)
        if status != expect:
            raise StepError(f"{method} {path}: HTTP {status} (expected {expect}): {payload[:200]!r}")
        return json.loads(payload)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# -- shared state ---------------------------------------------------------------------------

@dataclass
class SourceRun:
    index: int
    codename: str = ""
    nonce: str = ""
    filename: str = ""
    file_sha256: str = ""
    create_done: float | None = None
    submitted: bool = False
    failed: str | None = None
    uuid: str | None = None
    reply_text: str | None = None
    reply_sent: bool = False
    reply_read: bool = False


@dataclass
class SeenSource:
    uuid: str
    first_seen: float
    key_seen: float | None = None
    fingerprint: str | None = None
    public_key: str | None = None
    counted: int = 0
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # submission uuid -> (filename, path)


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[str, list[str]] = {}

    def timed(self, step: str, fn: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            result = fn(*args)
        except StepError as e:
            self.error(step, str(e))
            raise
        except Exception as e:  # a bug in the bench or an unexpected page: still an error, still counted
            self.error(step, f"{type(e).__name__}: {e}")
            raise StepError(str(e)) from e
        with self.lock:
            self.latency.setdefault(step, []).append(time.perf_counter() - start)
        return result

    def error(self, step: str, message: str) -> None:
        with self.lock:
            self.errors.setdefault(step, []).append(message)

    def error_count(self) -> int:
        return sum(len(v) for v in self.errors.values())


def rss_kb(pid: int, field_name: str = "VmRSS") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own user+system CPU, its waited-for children's) in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak, self.stop = pid, interval, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_kb(self.pid))
            self.stop.wait(self.interval)


# -- setup ----------------------------------------------------------------------------------

def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stderr.decode(errors='replace')}")
    return proc


def admin(*args: str) -> dict[str, Any]:
    return json.loads(run([os.path.join(VENV_BIN, "deaddrop-admin"), *args, "--json"]).stdout)


def make_svs(workdir: str) -> str:
    home = os.path.join(workdir, "svs")
    os.mkdir(home, 0o700)
    run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key", "load bench SVS",
         "future-default", "default", "never"])
    key = os.path.join(workdir, "submission-public.asc")
    with open(key, "wb") as f:
        f.write(run(["gpg", "--homedir", home, "--armor", "--export"]).stdout)
    return key


def start_server(workdir: str, data: str, key: str, source_port: int, journalist_port: int,
                 args: argparse.Namespace) -> subprocess.Popen:
    log = open(os.path.join(workdir, "server.log"), "w")
    backlog = f":backlog={args.backlog}" if args.backlog else ""
    argv = [os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile=", "deaddrop", "--tor", "none", "--data-dir", data,
            "--submission-key", key, "--kdf-cost", args.kdf_cost,
            "--source-listen", f"tcp:{source_port}:interface=127.0.0.1{backlog}",
            "--journalist-listen", f"tcp:{journalist_port}:interface=127.0.0.1{backlog}",
            "--journalist-ca", os.path.join(data, "ca", "ca.pem"),
            "--journalist-crl", os.path.join(data, "ca", "crl.pem")]
    if args.crypto_threads:
        argv += ["--crypto-threads", str(args.crypto_threads)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    deadline = time.monotonic() + 60
    for port in (source_port, journalist_port):
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"server failed to start; see {log.name}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"server did not listen on {port}; see {log.name}")
                time.sleep(0.05)
    return proc


def tls_context(data: str, key_pem: str, cert_pem: str, password: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(os.path.join(data, "ca", "ca.pem"))  # the CA that signed the server's certificate
    ctx.load_cert_chain(cert_pem, key_pem, password=password)  # `cert issue --pem` encrypts the key
    return ctx


def totp_now(secret: str, last_step: list[int]) -> str:
    from deaddrop.newsroom.accounts import TOTP_INTERVAL, totp_code

    step = max(int(time.time() // TOTP_INTERVAL), last_step[0] + 1)
    if step > int(time.time() // TOTP_INTERVAL) + 1:
        time.sleep((step - 1) * TOTP_INTERVAL - time.time() + 0.5)
    last_step[0] = step
    return totp_code(secret, step)


# -- phase 1: the sources -------------------------------------------------------------------

def source_flow(s: SourceRun, port: int, stats: Stats, start: threading.Barrier, file_bytes: int,
                times: dict[str, list[float]]) -> None:
    browser = SourceBrowser(port)
    s.nonce = os.urandom(16).hex()
    s.filename = f"bench-{s.index:04d}.bin"
    message = f"load-bench source {s.index} nonce {s.nonce}"
    start.wait()
    try:
        s.codename = stats.timed("create", browser.create)
        s.create_done = time.perf_counter()
        stats.timed("login", lambda: (browser.log_out(), browser.log_in(s.codename)))
        data = os.urandom(file_bytes)
        s.file_sha256 = hashlib.sha256(data).hexdigest()
        t0 = time.perf_counter()
        stats.timed("submit", browser.submit, message, s.filename, data)
        with stats.lock:
            times["submit_start"].append(t0)
            times["submit_end"].append(time.perf_counter())
        s.submitted = True
    except StepError as e:
        s.failed = str(e)


# -- the journalist during the load ----------------------------------------------------------

class JournalistWatcher(threading.Thread):
    """Lists sources and downloads new submissions until told to stop (then one last round)."""

    def __init__(self, client: JournalistClient, stats: Stats, downloads: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.client, self.stats, self.downloads, self.interval = client, stats, downloads, interval
        self.seen: dict[str, SeenSource] = {}
        self.stop = threading.Event()
        self.rounds = 0
        self.bytes_downloaded = 0
        self.fatal: str | None = None

    def run(self) -> None:
        try:
            while True:
                last = self.stop.is_set()
                self.round()
                if last:
                    break
                self.stop.wait(self.interval)
        except Exception as e:  # noqa: BLE001 - reported, and the checks then fail
            self.fatal = f"{type(e).__name__}: {e}"

    def round(self) -> None:
        self.rounds += 1
        sources: list[dict[str, Any]] = []
        path: str | None = "/api/v1/sources?per_page=1000"
        while path:  # the list comes in pages
            try:
                listing = self.stats.timed("j.list", self.client.json, "GET", path)
            except StepError:
                return
            sources += listing["sources"]
            path = listing.get("next")
        now = time.perf_counter()
        for src in sources:
            seen = self.seen.get(src["uuid"])
            if seen is None:
                seen = self.seen[src["uuid"]] = SeenSource(src["uuid"], now)
            key = src.get("key") or {}
            if key.get("public") and seen.key_seen is None:
                seen.key_seen, seen.public_key, seen.fingerprint = now, key["public"], key.get("fingerprint")
            count = src["number_of_documents"] + src["number_of_messages"]
            if count > len(seen.files):
                self.fetch(seen)

    def fetch(self, seen: SeenSource) -> None:
        try:
            items = self.stats.timed("j.submissions", self.client.json, "GET", f"/api/v1/sources/{seen.uuid}/submissions")
        except StepError:
            return
        for item in items["submissions"]:
            if item["uuid"] in seen.files:
                continue
            try:
                path = self.stats.timed("j.download", self.download, item)
            except StepError:
                continue
            seen.files[item["uuid"]] = (item["filename"], path)

    def download(self, item: dict[str, Any]) -> str:
        status, headers, body = self.client.request("GET", item["download_url"])
        if status != 200:
            raise StepError(f"GET {item['download_url']}: HTTP {status}: {body[:200]!r}")
        want = headers.get("etag", "").strip('"')
        got = "sha256:" + hashlib.sha256(body).hexdigest()
        if want != got:
            raise StepError(f"{item['filename']}: ETag {want!r} but the body hashes to {got!r}")
        if len(body) != item["size"]:
            raise StepError(f"{item['filename']}: listed size {item['size']} but {len(body)} bytes downloaded")
        path = os.path.join(self.downloads, item["uuid"] + ".gpg")
        with open(path, "wb") as f:
            f.write(body)
        self.bytes_downloaded += len(body)
        return path


# -- phase 2: decrypt and match --------------------------------------------------------------

def svs_decrypt(svs_home: str, path: str) -> bytes:
    proc = subprocess.run(["gpg", "--homedir", svs_home, "--batch", "--quiet", "--decrypt", path], capture_output=True)
    if proc.returncode != 0:
        raise StepError(f"{os.path.basename(path)}: SVS cannot decrypt: {proc.stderr.decode(errors='replace')[-200:]}")
    return proc.stdout


def gunzip_with_name(blob: bytes) -> tuple[str, bytes]:
    if not (blob[:3] == b"\x1f\x8b\x08" and blob[3] & 0x08):
        raise StepError("not a gzip stream with FNAME")
    end = blob.index(b"\x00", 10)
    return blob[10:end].decode("utf-8"), zlib.decompress(blob[end + 1:], -zlib.MAX_WBITS)


def verify_submissions(runs: list[SourceRun], seen: dict[str, SeenSource], svs_home: str, stats: Stats,
                       checks: list[tuple[str, bool, str]]) -> None:
    jobs = [(src, sub_uuid, name, path) for src in seen.values() for sub_uuid, (name, path) in src.files.items()]

    def one(job: tuple[SeenSource, str, str, str]) -> tuple[str, str, Any]:
        src, _sub, name, path = job
        plain = svs_decrypt(svs_home, path)
        if name.endswith("-msg.gpg"):
            return src.uuid, "msg", plain.decode("utf-8", "replace")
        if name.endswith("-doc.gz.gpg"):
            fname, content = gunzip_with_name(plain)
            return src.uuid, "doc", (fname, hashlib.sha256(content).hexdigest(), len(content))
        raise StepError(f"unexpected stored name {name}")

    found: dict[str, dict[str, list[Any]]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for job, fut in zip(jobs, pool.map(lambda j: _catch(one, j), jobs)):
            if isinstance(fut, StepError):
                stats.error("verify", str(fut))
                continue
            source_uuid, kind, value = fut
            found.setdefault(source_uuid, {"msg": [], "doc": []})[kind].append(value)

    by_index = {r.index: r for r in runs}
    problems: list[str] = []
    matched: set[int] = set()
    for source_uuid, parts in found.items():
        msgs, docs = parts["msg"], parts["doc"]
        if len(msgs) != 1 or len(docs) != 1:
            problems.append(f"{source_uuid}: {len(msgs)} messages and {len(docs)} documents (want 1 and 1)")
            continue
        m = _MESSAGE.match(msgs[0])
        run_ = by_index.get(int(m.group(1))) if m else None
        if run_ is None or m.group(2) != run_.nonce:
            problems.append(f"{source_uuid}: message {msgs[0][:80]!r} is from no bench source")
            continue
        fname, digest, size = docs[0]
        if (fname, digest) != (run_.filename, run_.file_sha256):
            problems.append(f"{source_uuid}: document {fname} ({size} bytes) is not source {run_.index}'s file")
            continue
        if run_.uuid is not None:
            problems.append(f"source {run_.index} appears twice ({run_.uuid}, {source_uuid})")
            continue
        run_.uuid = source_uuid
        matched.add(run_.index)
    submitted = [r for r in runs if r.submitted]
    missing = [r.index for r in submitted if r.index not in matched]
    for p in problems:
        stats.error("verify", p)
    checks.append(("every submission listed, downloaded, decrypts to what was sent",
                   not missing and not problems,
                   f"{len(matched)}/{len(submitted)} sources matched (msg + 1 MB doc each)"
                   + (f"; missing: {missing[:10]}" if missing else "")
                   + (f"; {len(problems)} problems" if problems else "")))


def _catch(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except StepError as e:
        return e
    except Exception as e:  # noqa: BLE001
        return StepError(f"{type(e).__name__}: {e}")


# -- phase 3: replies ------------------------------------------------------------------------

def encrypt_reply(gnupg_home: str, plaintext: str, key_files: list[str]) -> str:
    argv = ["gpg", "--homedir", gnupg_home, "--batch", "--no-tty", "--quiet", "--armor", "--trust-model", "always"]
    for path in key_files:
        argv += ["--recipient-file", path]
    proc = subprocess.run(argv + ["--encrypt"], input=plaintext.encode(), capture_output=True)
    if proc.returncode != 0:
        raise StepError("gpg could not encrypt the reply: " + proc.stderr.decode(errors="replace")[-200:])
    return proc.stdout.decode("ascii")


def send_replies(runs: list[SourceRun], watcher: JournalistWatcher, port: int, context: ssl.SSLContext,
                 token: str, workdir: str, svs_key: str, stats: Stats, key_timeout: float,
                 key_wait: dict[int, float]) -> None:
    todo = [r for r in runs if r.uuid is not None]
    lock = threading.Lock()
    workers = 4

    def worker(n: int) -> None:
        client = JournalistClient(port, context, token)
        home = os.path.join(workdir, f"jg{n}")
        os.mkdir(home, 0o700)
        while True:
            with lock:
                if not todo:
                    break
                r = todo.pop()
            try:
                stats.timed("reply", reply_one, r, client, home)
            except StepError:
                pass
        client.close()

    def reply_one(r: SourceRun, client: JournalistClient, home: str) -> None:
        seen = watcher.seen[r.uuid]
        waited_from = time.perf_counter()
        deadline = waited_from + key_timeout
        while seen.public_key is None:
            src = client.json("GET", f"/api/v1/sources/{r.uuid}")
            key = src.get("key") or {}
            if key.get("public"):
                seen.key_seen, seen.public_key, seen.fingerprint = time.perf_counter(), key["public"], key["fingerprint"]
                break
            if time.perf_counter() > deadline:
                raise StepError(f"source {r.index}: no key.public after {key_timeout:.0f} s")
            time.sleep(0.5)
        key_wait[r.index] = time.perf_counter() - waited_from
        key_file = os.path.join(home, "source.asc")
        with open(key_file, "w") as f:
            f.write(seen.public_key)
        r.reply_text = f"load-bench reply to source {r.index} {os.urandom(12).hex()}"
        armored = encrypt_reply(home, r.reply_text, [key_file, svs_key])
        client.json("POST", f"/api/v1/sources/{r.uuid}/replies", {"reply": armored, "uuid": str(uuid.uuid4())},
                    expect=201)
        r.reply_sent = True

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in range(workers):
        subprocess.run(["gpgconf", "--homedir", os.path.join(workdir, f"jg{n}"), "--kill", "gpg-agent"],
                       capture_output=True)


def read_reply_flow(r: SourceRun, port: int, stats: Stats, start: threading.Barrier) -> None:
    browser = SourceBrowser(port)
    start.wait()

    def read() -> None:
        page = browser.log_in(r.codename)
        if "(This reply could not be decrypted.)" in page:
            raise StepError(f"source {r.index}: /lookup says the reply could not be decrypted")
        if htmllib.escape(r.reply_text or "") not in page:
            raise StepError(f"source {r.index}: the reply is not on /lookup")
        r.reply_read = True

    try:
        stats.timed("read reply", read)
    except StepError:
        pass


# -- main -----------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=100, help="concurrent sources (default 100)")
    parser.add_argument("--kdf-cost", default="default", help="server Argon2id cost: default (honest figures), "
                        "insecure-fast (quick run) or OPS:MEMBYTES")
    parser.add_argument("--file-mb", type=float, default=1.0, help="size of each source's random file (default 1)")
    parser.add_argument("--key-timeout", type=float, default=300.0, help="seconds to wait for a source's key")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="journalist listing interval, seconds")
    parser.add_argument("--crypto-threads", type=int, help="server --crypto-threads (default: the server's)")
    parser.add_argument("--backlog", type=int, help="listen backlog of both server endpoints (default: Twisted's "
                        "50; more than that many connections opened at once can be reset by the kernel)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (server.log, data)")
    args = parser.parse_args()
    if args.sources < 1:
        parser.error("--sources must be at least 1")
    file_bytes = int(args.file_mb * 1_000_000)

    began = time.perf_counter()
    load_avg_start = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix="dd-load-", dir="/tmp")  # short: gpg-agent socket paths
    data = os.path.join(workdir, "data")
    proc = None
    checks: list[tuple[str, bool, str]] = []
    stats = Stats()
    try:
        # -- setup: SVS key, CA, client certificate, journalist account, server
        svs_key = make_svs(workdir)
        admin("ca", "init", "--data-dir", data)
        source_port, journalist_port = free_port(), free_port()
        # The server initialises the data dir at its first start; deaddrop-admin refuses one before.
        proc = start_server(workdir, data, svs_key, source_port, journalist_port, args)
        # The certificate's name is the account's: logins are bound to it.
        cert = admin("cert", "issue", "loadbench", "--pem", "--data-dir", data,
                     "--out", os.path.join(workdir, "journalist.p12"))
        account = admin("journalist", "add", "loadbench", "--data-dir", data, "--kdf-cost", args.kdf_cost)
        context = tls_context(data, cert["key_pem"], cert["cert_pem"], cert["password"])
        journalist = JournalistClient(journalist_port, context)
        totp_step = [-1]
        login = journalist.json("POST", "/api/v1/token", {
            "username": account["username"], "passphrase": account["passphrase"],
            "one_time_code": totp_now(account["totp_secret"], totp_step)})
        journalist.token = login["token"]
        rss_start = rss_kb(proc.pid)
        print(f"server pid {proc.pid} up (kdf-cost {args.kdf_cost}, RSS {rss_start / 1024:.0f} MB); "
              f"{args.sources} sources starting", flush=True)

        # -- phase 1: load
        downloads = os.path.join(workdir, "downloads")
        os.mkdir(downloads)
        watcher = JournalistWatcher(journalist, stats, downloads, args.poll_interval)
        sampler = RssSampler(proc.pid)
        runs = [SourceRun(i) for i in range(args.sources)]
        barrier = threading.Barrier(args.sources + 1)
        times: dict[str, list[float]] = {"submit_start": [], "submit_end": []}
        threads = [threading.Thread(target=source_flow, args=(r, source_port, stats, barrier, file_bytes, times),
                                    daemon=True) for r in runs]
        for t in threads:
            t.start()
        sampler.start()
        watcher.start()
        cpu_self0 = resource.getrusage(resource.RUSAGE_SELF)
        srv_cpu0 = cpu_seconds(proc.pid)
        barrier.wait()
        load_start = time.perf_counter()
        for t in threads:
            t.join()
        load_seconds = time.perf_counter() - load_start
        cpu_self1 = resource.getrusage(resource.RUSAGE_SELF)
        srv_cpu1 = cpu_seconds(proc.pid)
        print(f"load phase done in {load_seconds:.1f} s; journalist catching up", flush=True)

        # The journalist keeps polling until it has everything the sources were told was received.
        expected = sum(2 for r in runs if r.submitted)
        catch_up_deadline = time.perf_counter() + 120
        while (sum(len(s.files) for s in watcher.seen.values()) < expected and time.perf_counter() < catch_up_deadline
               and watcher.is_alive()):
            time.sleep(0.2)
        watcher.stop.set()
        watcher.join()
        if watcher.fatal:
            stats.error("journalist", watcher.fatal)

        # -- phase 2: every submission present and decrypting to what was sent
        created = [r for r in runs if r.create_done is not None]
        checks.append(("server lists one source per created account", len(watcher.seen) == len(created),
                       f"{len(watcher.seen)} listed, {len(created)} created"))
        verify_submissions(runs, watcher.seen, os.path.join(workdir, "svs"), stats, checks)

        # -- phase 3: keys, replies, and every source reading its reply
        key_wait: dict[int, float] = {}
        reply_start = time.perf_counter()
        send_replies(runs, watcher, journalist_port, context, journalist.token, workdir, svs_key, stats,
                     args.key_timeout, key_wait)
        reply_seconds = time.perf_counter() - reply_start
        with_uuid = [r for r in runs if r.uuid is not None]
        keyed = [watcher.seen[r.uuid] for r in with_uuid if watcher.seen[r.uuid].public_key]
        fingerprints = {s.fingerprint for s in keyed}
        publics = {s.public_key for s in keyed}
        checks.append(("every source has a key (key.public non-null)", len(keyed) == len(with_uuid) == args.sources,
                       f"{len(keyed)}/{args.sources}"))
        checks.append(("source keys are all different", len(fingerprints) == len(publics) == len(keyed),
                       f"{len(fingerprints)} distinct fingerprints for {len(keyed)} keys"))
        sent = [r for r in runs if r.reply_sent]
        checks.append(("journalist reply accepted for every source (201)", len(sent) == args.sources,
                       f"{len(sent)}/{args.sources} in {reply_seconds:.1f} s"))
        read_start = time.perf_counter()
        barrier = threading.Barrier(len(sent) + 1)
        readers = [threading.Thread(target=read_reply_flow, args=(r, source_port, stats, barrier), daemon=True)
                   for r in sent]
        for t in readers:
            t.start()
        barrier.wait()
        for t in readers:
            t.join()
        read_seconds = time.perf_counter() - read_start
        read_ok = [r for r in runs if r.reply_read]
        checks.append(("every source logs in and reads its own reply on /lookup", len(read_ok) == args.sources,
                       f"{len(read_ok)}/{args.sources} in {read_seconds:.1f} s"))

        sampler.stop.set()
        sampler.join()
        rss_hwm = rss_kb(proc.pid, "VmHWM")
        rss_peak = max(sampler.peak, rss_hwm)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for home in (os.path.join(data, "gnupg"), os.path.join(workdir, "svs")):
            subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], capture_output=True)

    server_problems = server_log_problems(os.path.join(workdir, "server.log"))
    checks.append(("server log has no errors or tracebacks", not server_problems,
                   f"{len(server_problems)} lines" if server_problems else "clean"))
    checks.append(("no request errors (target 0)", stats.error_count() == 0, f"{stats.error_count()} errors"))
    total_seconds = time.perf_counter() - began

    # -- report
    ok_submits = sum(1 for r in runs if r.submitted)
    mb = ok_submits * file_bytes / 1e6
    window = (max(times["submit_end"]) - min(times["submit_start"])) if times["submit_end"] else float("nan")
    key_latency = [watcher.seen[r.uuid].key_seen - r.create_done for r in with_uuid
                   if watcher.seen[r.uuid].key_seen is not None and r.create_done is not None]
    waited = [v for v in key_wait.values() if v > 0.05]
    cpu_bench = (cpu_self1.ru_utime + cpu_self1.ru_stime) - (cpu_self0.ru_utime + cpu_self0.ru_stime)
    cpu_srv = srv_cpu1[0] - srv_cpu0[0]
    cpu_gpg = srv_cpu1[1] - srv_cpu0[1]

    print()
    print(f"DeadDrop load bench: {args.sources} concurrent sources, kdf-cost {args.kdf_cost}, "
          f"{file_bytes / 1e6:g} MB file + message each, {os.cpu_count()} CPUs")
    print("-" * 92)
    print(f"{'load phase (create+login+submit)':<42} {load_seconds:8.1f} s wall")
    print(f"{'throughput over the load phase':<42} {ok_submits / load_seconds:8.2f} submissions/s  "
          f"{mb / load_seconds:7.2f} MB/s")
    print(f"{'throughput over the submit window':<42} {ok_submits / window:8.2f} submissions/s  "
          f"{mb / window:7.2f} MB/s   ({window:.1f} s, first submit start to last end)")
    print(f"{'CPU during load':<42} server {cpu_srv:.1f} s + gpg children {cpu_gpg:.1f} s, "
          f"load generator {cpu_bench:.1f} s")
    print(f"{'server RSS':<42} start {rss_start / 1024:.0f} MB, peak {rss_peak / 1024:.0f} MB (VmHWM)")
    print(f"{'machine load average (1 min)':<42} {load_avg_start:.1f} at start, {os.getloadavg()[0]:.1f} at the end "
          "(other processes share these CPUs)")
    print("-" * 92)
    print(f"{'latency (s)':<16} {'n':>5} {'p50':>8} {'p99':>8} {'max':>8} {'errors':>7}")
    for step in ("create", "login", "submit", "j.list", "j.submissions", "j.download", "reply", "read reply"):
        values = stats.latency.get(step, [])
        errors = len(stats.errors.get(step, []))
        print(f"{step:<16} {len(values):>5} {percentile(values, 50):>8.2f} {percentile(values, 99):>8.2f} "
              f"{max(values) if values else float('nan'):>8.2f} {errors:>7}")
    print(f"{'key ready':<16} {len(key_latency):>5} {percentile(key_latency, 50):>8.2f} "
          f"{percentile(key_latency, 99):>8.2f} {max(key_latency) if key_latency else float('nan'):>8.2f}   "
          f"(create answered -> key.public seen by journalist, +/-{args.poll_interval:g} s; "
          f"{len(waited)} not ready when replying)")
    print("-" * 92)
    print(f"journalist: {watcher.rounds} listing rounds, {watcher.bytes_downloaded / 1e6:.0f} MB downloaded, "
          f"{journalist.reconnects} keep-alive reconnects")
    for name, ok, detail in checks:
        print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}")
    for step, messages in stats.errors.items():
        print(f"errors in {step} ({len(messages)}):")
        for m in sorted(set(messages))[:5]:
            print(f"    {m}  (x{messages.count(m)})")
    for line in server_problems[:10]:
        print(f"    server.log: {line}")
    failed = [c for c in checks if not c[1]]
    print(f"total {total_seconds:.0f} s; {'ALL CHECKS PASSED' if not failed else f'{len(failed)} CHECK(S) FAILED'}"
          + (f"; work dir kept: {workdir}" if args.keep or failed else ""))
    if not args.keep and not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def server_log_problems(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return [f"cannot read {path}"]
    return [line for line in lines if re.search(r"#(error|critical)\]|Traceback|Unhandled", line)]


if __name__ == "__main__":
    sys.exit(main())
