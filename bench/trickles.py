#!/usr/bin/env python3
"""Disk room held by trickles (issue 26, item 5), over real sockets against a real server.

    .venv/bin/python bench/trickles.py [--scenario small large] [--code DIR] [--keep]

Each scenario mounts a tmpfs for the data dir (root needed; a tmpfs only uses the memory that is
written to it, so a 40 GB one costs what the run writes), starts ``twistd deaddrop`` on it, makes
one source per upload, then opens the trickles, four a second: each a POST /submit whose
Content-Length claims CLAIM and whose file bytes come at RATE, from one sender thread,
non-blocking. Once they are past their grace it sends one real upload at full speed from yet
another source and reports whether it was stored.

  small  the data dir on a 1,200 MB tmpfs, ``--disk-reserve 100MB``: 10 trickles claiming 100 MB
         at 20 KiB/s (above the fair rate, so no rule about slow uploads ends them), then 200 MiB.
  large  a 40 GB tmpfs, the default reserve (2 GB): 100 trickles claiming 500 MB at 16 KiB/s
         (their claims, 50 GB, exceed the disk), then 100 MiB.

Also reported: trickles still open (not answered) when the real upload was sent and after it, the
lowest free space seen (sampled every 50 ms), the server's RSS growth, and reactor latency
(GET /robots.txt) throughout. ``--code DIR`` runs the server from another checkout (PYTHONPATH),
e.g. main before the change, unpacked with ``git archive``. The KDF runs at ``insecure-fast``:
this measures disk accounting, not logins.
"""
from __future__ import annotations

import argparse
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from upload import Client, free_port, make_svs, percentile, robots_latencies, rss_kb, write_payload  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
KIB, MB = 1024, 10**6
SCENARIOS = {
    # name: (tmpfs size, --disk-reserve or None, trickles, claim, rate, real upload in MiB)
    "small": ("1200m", "100MB", 10, 100 * MB, 20 * KIB, 200),
    "large": ("40g", None, 100, 500 * MB, 16 * KIB, 100),
}
SETTLE = 15.0  # seconds between the last trickle and the real upload: past their 10 s grace
TICK = 0.25
OPEN_PER_SECOND = 4  # trickles opened a second (all at once, the youngest hold their whole claim)


def submit_head(client: Client, boundary: str) -> bytes:
    """The multipart body up to the first file byte, for ``client``'s form."""
    _, html, _ = client.request("GET", "/lookup")
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{client.csrf(html)}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"msg\"\r\n\r\n\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"fh\"; filename=\"bench.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()


def open_post(client: Client, length: int, boundary: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", client.port))
    sock.sendall((f"POST /submit HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {client.cookie}\r\n"
                  f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {length}\r\n"
                  "Connection: close\r\n\r\n").encode())
    return sock


class Trickles(threading.Thread):
    """Sends ``rate`` bytes a second on each socket added, and notes which ones the server answered."""

    def __init__(self, rate: int) -> None:
        super().__init__(daemon=True)
        self.sockets: list[socket.socket] = []
        self.rate = rate
        self.answers: dict[int, bytes] = {}
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.opened: list[float] = []
        self.sent: list[int] = []

    def add(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        with self._lock:
            self.sockets.append(sock)
            self.opened.append(time.monotonic())
            self.sent.append(0)

    def run(self) -> None:
        noise = os.urandom(1 << 16)
        while not self.stop.is_set():
            started = time.monotonic()
            with self._lock:
                sockets = list(self.sockets)
            for i, sock in enumerate(sockets):
                if i in self.answers:
                    continue
                # What it owes at RATE since it opened, a tick ahead (a token bucket): measured
                # over any window, never below the rate.
                owed = min(len(noise), int(self.rate * (started - self.opened[i] + TICK)) - self.sent[i])
                try:
                    self.sent[i] += sock.send(noise[:owed]) if owed > 0 else 0
                except BlockingIOError:
                    pass
                except OSError:
                    self.answers.setdefault(i, b"(closed)")
            readable, _, _ = select.select([s for i, s in enumerate(sockets) if i not in self.answers], [], [], 0)
            for sock in readable:
                i = sockets.index(sock)
                try:
                    self.answers[i] = sock.recv(200) or b"(closed)"
                except OSError:
                    self.answers[i] = b"(closed)"
            time.sleep(max(0.0, TICK - (time.monotonic() - started)))

    def still_open(self) -> int:
        return len(self.sockets) - len(self.answers)

    def mean_rate(self) -> float:
        now = time.monotonic()
        open_ones = [i for i in range(len(self.sockets)) if i not in self.answers]
        return sum(self.sent[i] / (now - self.opened[i]) for i in open_ones) / max(1, len(open_ones))


class FreeSampler(threading.Thread):
    def __init__(self, path: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.path, self.pid, self.stop = path, pid, threading.Event()
        self.lowest, self.rss_peak = None, 0

    def run(self) -> None:
        while not self.stop.is_set():
            st = os.statvfs(self.path)
            free = st.f_bavail * st.f_frsize
            self.lowest = free if self.lowest is None else min(self.lowest, free)
            self.rss_peak = max(self.rss_peak, rss_kb(self.pid))
            time.sleep(0.05)


def run_scenario(name: str, args: argparse.Namespace, workdir: str, key: str) -> list[str]:
    size, reserve, count, claim, rate, real_mib = SCENARIOS[name]
    mnt = os.path.join(workdir, name)
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", mnt], check=True)
    proc = None
    try:
        port = free_port()
        argv = [os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile=", "deaddrop", "--tor", "none",
                "--data-dir", os.path.join(mnt, "data"), "--submission-key", key,
                "--source-listen", f"tcp:{port}:interface=127.0.0.1", "--kdf-cost", "insecure-fast"]
        argv += ["--disk-reserve", reserve] if reserve else []
        env = dict(os.environ)
        if args.code:
            env["PYTHONPATH"] = os.path.abspath(args.code) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(os.path.join(workdir, f"server-{name}.log"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env)
        for _ in range(2400):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit("server failed to start; see " + log.name)
                time.sleep(0.05)
        clients = []
        for _ in range(count + 1):
            client = Client(port)
            client.create_source()
            clients.append(client)
        payload = os.path.join(workdir, "payload.bin")
        write_payload(payload, real_mib)
        rss_before = rss_kb(proc.pid)
        latencies: list = []
        stop = threading.Event()
        prober = threading.Thread(target=robots_latencies, args=(port, stop, latencies), daemon=True)
        sampler = FreeSampler(mnt, proc.pid)
        prober.start()
        sampler.start()
        trickles = Trickles(rate)
        trickles.start()
        for i, client in enumerate(clients[:count]):
            boundary = uuid.uuid4().hex
            head = submit_head(client, boundary)
            sock = open_post(client, len(head) + claim + len(f"\r\n--{boundary}--\r\n"), boundary)
            sock.sendall(head)
            trickles.add(sock)
            if i % OPEN_PER_SECOND == OPEN_PER_SECOND - 1:
                time.sleep(1.0)
        time.sleep(SETTLE)
        open_before, mean_rate = trickles.still_open(), trickles.mean_rate()
        status, seconds = clients[count].post_file(payload)
        time.sleep(1.0)
        open_after = trickles.still_open()
        stop.set()
        sampler.stop.set()
        trickles.stop.set()
        prober.join()
        sampler.join()
        trickles.join()
        for sock in trickles.sockets:
            sock.close()
        refused = sorted({a.split(b"\r\n", 1)[0].decode("latin-1") for a in trickles.answers.values()})
        p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
        stored = status in (200, 303)
        return [
            f"== {name}: tmpfs {size}, --disk-reserve {reserve or 'default (2GB,5%)'}; {count} trickles claiming "
            f"{claim // MB} MB at {rate // KIB} KiB/s, then a real {real_mib} MiB upload after {SETTLE:.0f} s",
            f"trickles open            {open_before} of {count} before the real upload, {open_after} after"
            + (f"; answered: {', '.join(refused)}" if refused else ""),
            f"trickles' mean rate      {mean_rate / KIB:.2f} KiB/s each (file bytes, since each opened)",
            f"real upload              HTTP {status} in {seconds:.1f} s  {'STORED' if stored else 'REFUSED'}",
            f"lowest free space        {sampler.lowest / MB:.0f} MB",
            f"server RSS growth        {(sampler.rss_peak - rss_before) / 1024:.1f} MB",
            f"reactor /robots.txt      p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(latencies)} requests",
        ]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        subprocess.run(["gpgconf", "--homedir", os.path.join(mnt, "data", "gnupg"), "--kill", "gpg-agent"],
                       capture_output=True)
        subprocess.run(["umount", mnt], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", nargs="+", choices=sorted(SCENARIOS), default=["small", "large"])
    parser.add_argument("--code", help="run the server from this checkout (PYTHONPATH)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (server logs)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="dd-trickles-", dir="/tmp")
    try:
        key = make_svs(workdir)
        for name in args.scenario:
            print("\n".join(run_scenario(name, args, workdir, key)), flush=True)
        return 0
    finally:
        subprocess.run(["gpgconf", "--homedir", os.path.join(workdir, "svs"), "--kill", "gpg-agent"], capture_output=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
