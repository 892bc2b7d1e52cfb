#!/usr/bin/env python3
"""Scale benchmark (issue 12): the journalist's pages and API with 100,000 sources.

    .venv/bin/python bench/scale.py [--sources 100000] [--submissions 2] [--samples 50] [--kdf-cost default]

A real server (``twistd -n deaddrop --tor none``, ephemeral 127.0.0.1 ports) on a data dir
whose database is seeded straight through SQLite with SOURCES visible sources of SUBMISSIONS
rows each (no files: nothing on these pages reads them). One more source is made the real way
(create, submit a message and a file) so that its page has real files behind it. Then, one
request at a time, p50/p99 over SAMPLES requests of:
  - the journalist index (``GET /sources``, HTML, first page),
  - that one source's page (``GET /sources/<uuid>``),
  - the API source list (``GET /api/v1/sources?per_page=100``, first page, and a page deep in the
    list; the whole list streamed is bench/sources_stream.py's),
  - a source login (``POST /login`` with the codename: includes its Argon2id, timed alone too).
Targets: every p99 < 200 ms apart from the login's Argon2id; server RSS < 256 MB.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from urllib.parse import urlencode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import load  # noqa: E402
from load import SourceBrowser, percentile  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)


def start_server(workdir: str, data: str, key: str, ports: tuple[int, int], kdf_cost: str) -> subprocess.Popen:
    log = open(os.path.join(workdir, "server.log"), "a")
    argv = [os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile=", "deaddrop", "--tor", "none", "--data-dir", data,
            "--submission-key", key, "--kdf-cost", kdf_cost,
            "--source-listen", f"tcp:{ports[0]}:interface=127.0.0.1",
            "--journalist-listen", f"tcp:{ports[1]}:interface=127.0.0.1",
            "--journalist-ca", os.path.join(data, "ca", "ca.pem"), "--journalist-crl", os.path.join(data, "ca", "crl.pem")]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    deadline = time.monotonic() + 120
    for port in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    stop(proc)  # one that is merely slow must not outlive the bench
                    raise SystemExit(f"server did not start; see {log.name}")
                time.sleep(0.1)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def seed(db_path: str, sources: int, per_source: int) -> float:
    """Visible sources with submissions, written in one transaction. -> seconds taken."""
    start = time.perf_counter()
    conn = sqlite3.connect(db_path)
    now = time.time()
    with conn:
        base = conn.execute("SELECT COALESCE(MAX(id), 0) FROM sources").fetchone()[0]
        conn.executemany(
            "INSERT INTO sources (id, uuid, filesystem_id, designation, created_at, last_updated, next_n, is_starred,"
            " pending) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
            ((base + i + 1, str(uuid.uuid4()), f"seeded{base + i + 1:08d}", f"seeded source {base + i + 1:08d}",
              now - 86400 * 30 + i, now - 86400 * 30 + i * 7 % 86400 * 30, per_source + 1, 1 if i % 997 == 0 else 0)
             for i in range(sources)))
        conn.executemany(
            "INSERT INTO submissions (uuid, source_id, n, filename, kind, size, seen, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((str(uuid.uuid4()), base + i + 1, n + 1,
              f"{n + 1}-seeded_source_{base + i + 1:08d}-{'msg' if n % 2 == 0 else 'doc.gz'}.gpg",
              "msg" if n % 2 == 0 else "doc", 1000 + n, n % 2, now - 86400)
             for i in range(sources) for n in range(per_source)))
        # On the default desk, as everything of an instance with one desk is (issue 29).
        conn.execute("INSERT INTO source_desks(source_id, desk_id) SELECT s.id, d.id FROM sources s, desks d"
                     " WHERE s.id > ? AND d.is_default = 1", (base,))
        conn.execute("INSERT INTO submission_desks(submission_id, desk_id) SELECT x.id, d.id FROM submissions x, desks d"
                     " WHERE x.source_id > ? AND d.is_default = 1", (base,))
    conn.close()
    return time.perf_counter() - start


class Journalist:
    """One mutual-TLS connection, kept alive; HTML pages with a session cookie, API with a token."""

    def __init__(self, port: int, context) -> None:
        self.port, self.context = port, context
        self.conn = None
        self.cookie = ""
        self.token = ""

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        headers = dict(headers or {})
        if self.cookie:
            headers["Cookie"] = self.cookie
        if self.token and path.startswith("/api/"):
            headers["Authorization"] = f"Token {self.token}"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=120, context=self.context)
            try:
                self.conn.request(method, path, body=body, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            for name, value in response.getheaders():
                if name.lower() == "set-cookie" and not path.startswith("/api/"):
                    self.cookie = value.split(";", 1)[0]
            if response.getheader("connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            return response.status, data.decode("utf-8", "replace")
        raise AssertionError("unreachable")


def timed(samples: int, fn) -> list[float]:
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=100_000)
    parser.add_argument("--submissions", type=int, default=2, help="submission rows per seeded source (default 2)")
    parser.add_argument("--samples", type=int, default=50, help="requests per measured page (default 50)")
    parser.add_argument("--logins", type=int, default=10, help="source logins to time (default 10)")
    parser.add_argument("--kdf-cost", default="default")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="dd-scale-", dir="/tmp")
    data = os.path.join(workdir, "data")
    proc = None
    try:
        key = load.make_svs(workdir)
        load.admin("ca", "init", "--data-dir", data)
        ports = (load.free_port(), load.free_port())
        stop(start_server(workdir, data, key, ports, args.kdf_cost))  # the server initialises the data dir
        cert = load.admin("cert", "issue", "scalebench", "--pem", "--data-dir", data, "--out", os.path.join(workdir, "j.p12"))
        account = load.admin("journalist", "add", "scalebench", "--data-dir", data, "--kdf-cost", args.kdf_cost)
        seconds = seed(os.path.join(data, "db.sqlite"), args.sources, args.submissions)
        print(f"seeded {args.sources:,} sources x {args.submissions} submissions in {seconds:.1f} s", flush=True)
        proc = start_server(workdir, data, key, ports, args.kdf_cost)
        rss_start = load.rss_kb(proc.pid)

        # One real source, with real files, made and logged in the real way.
        browser = SourceBrowser(ports[0])
        codename = browser.create()
        browser.submit("scale bench message", "scale.bin", os.urandom(100_000))

        context = load.tls_context(data, cert["key_pem"], cert["cert_pem"], cert["password"])
        j = Journalist(ports[1], context)
        last_step = [-1]
        status, text = j.request("POST", "/api/v1/token", json.dumps({
            "username": account["username"], "passphrase": account["passphrase"],
            "one_time_code": load.totp_now(account["totp_secret"], last_step)}).encode(),
            {"Content-Type": "application/json"})
        assert status == 200, (status, text[:200])
        j.token = json.loads(text)["token"]
        status, page = j.request("GET", "/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        status, _ = j.request("POST", "/login", urlencode({
            "csrf_token": csrf, "username": account["username"], "passphrase": account["passphrase"],
            "one_time_code": load.totp_now(account["totp_secret"], last_step)}).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 303, status
        conn = sqlite3.connect(f"file:{os.path.join(data, 'db.sqlite')}?mode=ro", uri=True)
        [(real_uuid,)] = conn.execute("SELECT uuid FROM sources WHERE pending = 0 AND designation NOT LIKE 'seeded %'")
        conn.close()

        def get(path: str, must: str):
            def fn() -> None:
                status, body = j.request("GET", path)
                if status != 200 or must not in body:
                    raise SystemExit(f"GET {path}: HTTP {status}: {body[:200]!r}")
            return fn

        sampler = load.RssSampler(proc.pid)
        sampler.start()
        status, first = j.request("GET", "/api/v1/sources?per_page=100")
        deep = json.loads(first)["next"]
        for _ in range(300):  # a page 300 pages deep (30,000 sources in)
            status, page = j.request("GET", deep)
            deep = json.loads(page)["next"] or deep
        rows = [
            ("journalist index GET /sources", timed(args.samples, get("/sources", "Sources"))),
            ("journalist index, page 1000", timed(args.samples, get("/sources?page=1000", "Sources"))),
            ("one source's page", timed(args.samples, get(f"/sources/{real_uuid}", "-doc.gz.gpg"))),
            ("API GET /api/v1/sources?per_page=100", timed(args.samples, get("/api/v1/sources?per_page=100",
                                                                              '"sources"'))),
            ("API sources, 300 pages deep", timed(args.samples, get(deep, '"sources"'))),
        ]

        def login() -> None:
            b = SourceBrowser(ports[0])
            b.log_in(codename)

        rows.append(("source login (Argon2id incl.)", timed(args.logins, login)))
        sys.path.insert(0, os.path.dirname(HERE))
        from deaddrop.crypto.kdf import KdfCost  # the same cost, alone, for reference
        from nacl.pwhash import argon2id

        cost = KdfCost.parse(args.kdf_cost)
        kdf = timed(args.logins, lambda: argon2id.kdf(32, b"correct horse battery staple", os.urandom(16),
                                                       opslimit=cost.opslimit, memlimit=cost.memlimit))
        rows.append(("  one Argon2id run, in this process", kdf))
        sampler.stop.set()
        sampler.join()
        rss_peak = max(sampler.peak, load.rss_kb(proc.pid, "VmHWM"))
    finally:
        if proc is not None:
            stop(proc)
        for home in (os.path.join(data, "gnupg"), os.path.join(workdir, "svs")):
            subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], capture_output=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(f"DeadDrop scale bench: {args.sources:,} visible sources, {args.sources * args.submissions:,} submissions, "
          f"kdf-cost {args.kdf_cost}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'request':<36} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, values in rows:
        print(f"{name:<36} {len(values):>4} {percentile(values, 50) * 1000:>8.1f} {percentile(values, 99) * 1000:>8.1f} "
              f"{max(values) * 1000:>8.1f}")
    print(f"server RSS: {rss_start / 1024:.0f} MB after start, peak {rss_peak / 1024:.0f} MB (target < 256)")
    print("targets: every p99 < 200 ms apart from the login's own Argon2id")
    return 0


if __name__ == "__main__":
    sys.exit(main())
