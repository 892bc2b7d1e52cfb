#!/usr/bin/env python3
"""Upload benchmark: one run, ratios against raw gpg measured in the same run.

    .venv/bin/python bench/upload.py [--size-mb 100 1000] [--rounds 3] [--keep]

1. Throughput: for each SIZE, a SIZE MiB random file through POST /submit over loopback, against
   `gpg --encrypt --compress-algo none` of the same file to the same key (the baseline).
   Both sides are timed in ROUNDS interleaved rounds (raw gpg, then the upload, and again),
   and each side's best round counts: on a shared machine one sample of either side varies
   by a factor of two, and interleaving exposes both to the same background load.
   The source's key pair (made after its first submission) exists before the first round.
2. Memory: the server's peak RSS growth during each size's rounds (sampled every 10 ms).
3. Reactor latency: p50/p99 of GET /robots.txt while four logins run their Argon2id
   (default cost) and an upload encrypts.
Targets (issues 2, 9 and 21): throughput >= 0.9 x raw gpg at 100 MB and 1 GB (best of
interleaved rounds), RSS growth < 64 MB, reactor p99 < 50 ms.
"""
from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """A tiny cookie-keeping HTTP client on http.client (no Twisted in the load generator)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookie = ""

    def request(self, method: str, path: str, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        headers = dict(headers or {})
        if self.cookie:
            headers["Cookie"] = self.cookie
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                self.cookie = value.split(";", 1)[0]
        conn.close()
        return response.status, data.decode("utf-8", "replace"), response

    def form(self, path: str, fields: dict):
        from urllib.parse import urlencode

        return self.request("POST", path, urlencode(fields), {"Content-Type": "application/x-www-form-urlencoded"})

    @staticmethod
    def csrf(html: str) -> str:
        return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)

    def create_source(self) -> str:
        _, html, _ = self.request("GET", "/generate")
        codename = re.search(r'id="codename"[^>]*>([^<]+)<', html).group(1)
        status, _, _ = self.form("/create", {"codename": codename, "csrf_token": self.csrf(html)})
        assert status == 303, status
        return codename

    def login(self, codename: str) -> int:
        _, html, _ = self.request("GET", "/login")
        status, _, _ = self.form("/login", {"codename": codename, "csrf_token": self.csrf(html)})
        return status

    def upload(self, path: str) -> float:
        status, elapsed = self.post_file(path)
        assert status == 303, status
        return elapsed

    def post_file(self, path: str) -> tuple[int, float]:
        """POST /submit with the file at ``path``, as fast as the server reads it. -> (status, seconds)."""
        _, html, _ = self.request("GET", "/lookup")
        token = self.csrf(html)
        boundary = uuid.uuid4().hex
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{token}\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"msg\"\r\n\r\n\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"fh\"; filename=\"bench.bin\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        length = len(head) + os.path.getsize(path) + len(tail)
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.sendall((f"POST /submit HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {self.cookie}\r\n"
                      f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {length}\r\n"
                      "Connection: close\r\n\r\n").encode() + head)
        start = time.perf_counter()
        try:
            with open(path, "rb") as f:
                sock.sendfile(f)
            sock.sendall(tail)
        except OSError:
            pass  # answered early (refused): read the answer
        response = b""
        while b"\r\n\r\n" not in response:
            data = sock.recv(65536)
            if not data:
                break
            response += data
        elapsed = time.perf_counter() - start
        sock.close()
        return int(response.split(b" ", 2)[1]) if response else 0, elapsed


def cpu_seconds(pid: int) -> float:
    """The server's own CPU time (its threads; not gpg's, which runs in child processes)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_kb(self.pid))
            time.sleep(0.01)


def make_svs(workdir: str) -> str:
    home = os.path.join(workdir, "svs")
    os.mkdir(home, 0o700)
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key", "bench SVS",
                    "future-default", "default", "never"], check=True, capture_output=True)
    key = os.path.join(workdir, "submission-public.asc")
    with open(key, "wb") as f:
        f.write(subprocess.run(["gpg", "--homedir", home, "--armor", "--export"], check=True, capture_output=True).stdout)
    return key


def raw_gpg_seconds(key: str, path: str, workdir: str) -> float:
    """One round of the baseline: gpg reads the file itself and writes the ciphertext."""
    home = os.path.join(workdir, "gpg-baseline")
    os.makedirs(home, mode=0o700, exist_ok=True)
    out = os.path.join(workdir, "baseline.gpg")
    start = time.perf_counter()
    subprocess.run(["gpg", "--homedir", home, "--batch", "--yes", "--recipient-file", key,
                    "--compress-algo", "none", "--output", out, "--encrypt", path], check=True, capture_output=True)
    # The server fsyncs what it stores; the baseline must too to be comparable.
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    elapsed = time.perf_counter() - start
    os.remove(out)
    return elapsed


def start_server(workdir: str, key: str, port: int, kdf_cost: str) -> subprocess.Popen:
    data = os.path.join(workdir, "data")
    log = open(os.path.join(workdir, "server.log"), "w")
    proc = subprocess.Popen(
        [os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile=", "deaddrop", "--tor", "none", "--data-dir", data,
         "--submission-key", key, "--source-listen", f"tcp:{port}:interface=127.0.0.1", "--kdf-cost", kdf_cost,
         "--max-upload-size", str(64 << 30)],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
    )
    for _ in range(2400):  # up to 120 s: start-up is slow on a busy machine
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit("server failed to start; see " + log.name)
            time.sleep(0.05)
    raise SystemExit("server did not listen")


def robots_latencies(port: int, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/robots.txt")
        conn.getresponse().read()
        conn.close()
        out.append(time.perf_counter() - start)
        time.sleep(0.01)


def percentile(values: list, p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def wait_for_source_key(workdir: str, timeout: float = 120.0) -> None:
    """The source's key pair is made after its first submission: let it land before timing, or
    its generation competes with the first rounds for the CPU."""
    import sqlite3

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        db = sqlite3.connect(os.path.join(workdir, "data", "db.sqlite"))
        try:
            if db.execute("SELECT COUNT(*) FROM sources WHERE key_fingerprint IS NULL").fetchone()[0] == 0:
                return
        finally:
            db.close()
        time.sleep(0.2)
    raise SystemExit("the source key was never made")


def write_payload(path: str, size_mb: int) -> int:
    with open(path, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1 << 20))
    return os.path.getsize(path)


def throughput(client: Client, proc: subprocess.Popen, key: str, payload: str, workdir: str, rounds: int) -> dict:
    """Interleaved rounds (raw gpg, then the upload, and again); RSS sampled throughout."""
    rss_before = rss_kb(proc.pid)
    sampler = RssSampler(proc.pid)
    sampler.start()
    gpg_rounds, upload_rounds, upload_cpu = [], [], []
    for _ in range(rounds):
        gpg_rounds.append(raw_gpg_seconds(key, payload, workdir))
        cpu_before = cpu_seconds(proc.pid)
        upload_rounds.append(client.upload(payload))
        upload_cpu.append(cpu_seconds(proc.pid) - cpu_before)
    sampler.stop.set()
    sampler.join()
    return dict(gpg=gpg_rounds, upload=upload_rounds, cpu=min(upload_cpu),
                rss_growth_mb=(sampler.peak - rss_before) / 1024)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, nargs="+", default=[100, 1000], help="payload sizes, in MiB")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per side (at least 3)")
    parser.add_argument("--kdf-cost", default="default")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    workdir = tempfile.mkdtemp(prefix="dd-bench-", dir="/tmp")
    proc = None
    try:
        key = make_svs(workdir)
        port = free_port()
        proc = start_server(workdir, key, port, args.kdf_cost)
        client = Client(port)
        codename = client.create_source()
        warm_up = os.path.join(workdir, "warm-up.bin")
        write_payload(warm_up, 1)
        client.upload(warm_up)
        wait_for_source_key(workdir)

        results = []
        payload = os.path.join(workdir, "payload.bin")
        for size_mb in args.size_mb:
            size = write_payload(payload, size_mb)
            results.append((size, throughput(client, proc, key, payload, workdir, args.rounds)))

        # Reactor latency under load: 4 logins (2 Argon2id each) + one upload, repeated.
        write_payload(payload, min(args.size_mb))
        latencies: list = []
        stop = threading.Event()
        prober = threading.Thread(target=robots_latencies, args=(port, stop, latencies), daemon=True)
        prober.start()
        load_start = time.perf_counter()
        while time.perf_counter() - load_start < 4.0:
            workers = [threading.Thread(target=Client(port).login, args=(codename,)) for _ in range(4)]
            # A session of its own: a source keeps at most 8 sessions, so the logins above would
            # soon end the first one.
            uploader_client = Client(port)
            uploader_client.login(codename)
            uploader = threading.Thread(target=uploader_client.upload, args=(payload,))
            for t in workers + [uploader]:
                t.start()
            for t in workers + [uploader]:
                t.join()
        stop.set()
        prober.join()

        rounds = lambda values: " ".join(f"{v:.2f}" for v in values)
        for size, r in results:
            mb = size / 1e6
            baseline, upload_seconds = min(r["gpg"]), min(r["upload"])
            ratio = baseline / upload_seconds
            print(f"payload                 {mb:.0f} MB random bytes, best of {args.rounds} interleaved rounds per side")
            print(f"raw gpg (baseline)      {baseline:.2f} s  {mb / baseline:.0f} MB/s   rounds {rounds(r['gpg'])} s")
            print(f"POST /submit            {upload_seconds:.2f} s  {mb / upload_seconds:.0f} MB/s   rounds {rounds(r['upload'])} s")
            print(f"server CPU per upload   {r['cpu']:.2f} s  (its own threads; gpg not included)")
            print(f"throughput ratio        {ratio:.2f} x raw gpg   (target >= 0.90)  {'OK' if ratio >= 0.9 else 'MISSED'}")
            print(f"server RSS growth       {r['rss_growth_mb']:.1f} MB       (target < 64)     "
                  f"{'OK' if r['rss_growth_mb'] < 64 else 'MISSED'}")
        p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
        print(f"reactor /robots.txt     p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(latencies)} requests "
              f"(target p99 < 50) {'OK' if p99 < 50 else 'MISSED'}")
        return 0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        subprocess.run(["gpgconf", "--homedir", os.path.join(workdir, "data", "gnupg"), "--kill", "gpg-agent"], capture_output=True)
        subprocess.run(["gpgconf", "--homedir", os.path.join(workdir, "svs"), "--kill", "gpg-agent"], capture_output=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
