"""Issue 9, "PoW on the private Tor network": an introduction flood raises the source onion's
suggested PoW effort, while a legitimate Tor client still loads the source page.

Everything runs on 127.0.0.1: the private network of ``tests/integration/tornet.py`` (3
authorities, 2 relays, one client tor used as the *legitimate* visitor), ``--flood-clients``
more client tors for the attacker, and the real server (``twistd -n deaddrop --tor launch``,
defaults, so PoW on) with a MetricsPort on its Tor for the reading.

* Flood: ``--threads`` threads per flood client, each request with a fresh SOCKS username, so
  every one costs the service a new introduction (INTRODUCE2) and rendezvous. Tor clients
  solve the PoW puzzle their descriptor asks for, as real attackers' Tors would.
* Legitimate visitor: every ``--legit-every`` seconds a fresh circuit GETs ``/`` (120 s
  timeout), the way a new Tor Browser visit does.
* Reading: ``tor_hs_pow_suggested_effort``, ``tor_hs_rdv_pow_pqueue_count`` and the
  INTRODUCE2 / rendezvous counters of the service's Tor every 10 s. Tor recomputes the effort
  every 300 s from its last (re)start, so ``--flood`` should cover at least two periods.

Usage: ``.venv/bin/python bench/pow_flood.py [--flood 660] [--flood-clients 3] [--threads 12]``
(about flood + 2 minutes; prints a timeline and a summary; exit 1 if the effort never rose or
the legitimate visitor never got the page).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests._support import short_tempdir, test_svs  # noqa: E402
from tests.integration import tornet  # noqa: E402
from tests.integration.test_tor_defences import http_get  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_client(net: tornet.TorNetwork, name: str) -> tuple[tornet._Node, int]:
    node = tornet._Node(net, name)
    port = free_port()
    node.options = list(net.tor_options) + [("SocksPort", f"127.0.0.1:{port}")]
    net.seed_data_dir(node.dir)
    node.start()
    return node, port


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


class Metrics:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def read(self, onion: str) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            text = r.read().decode()
        found = {}
        for name in ("tor_hs_pow_suggested_effort", "tor_hs_rdv_pow_pqueue_count", "tor_hs_intro_num_total",
                     "tor_hs_rdv_num_total"):
            m = re.search(rf'^{name}{{onion="{onion}"}} (\S+)$', text, re.M)
            found[name] = float(m.group(1)) if m else float("nan")
        return found


class Flood:
    def __init__(self, address: str, socks_ports: list[int], threads: int) -> None:
        self.address = address
        self.ports = socks_ports
        self.threads = threads
        self.stop = threading.Event()
        self.attempts = 0
        self.ok = 0
        self.lock = threading.Lock()

    def run(self) -> list[threading.Thread]:
        workers = []
        for port in self.ports:
            for _ in range(self.threads):
                t = threading.Thread(target=self._worker, args=(port,), daemon=True)
                t.start()
                workers.append(t)
        return workers

    def _worker(self, port: int) -> None:
        while not self.stop.is_set():
            ok = False
            try:  # a fresh username: a new circuit, a new introduction
                ok = is_page(http_get(port, self.address, "flood-" + secrets.token_hex(6), timeout=20))
            except OSError:
                pass
            with self.lock:
                self.attempts += 1
                self.ok += ok


def is_page(body: bytes) -> bool:
    return b"<html" in body.lower()


class Visitor:
    """The legitimate visitor, in its own thread: a fresh circuit every ``every`` seconds."""

    def __init__(self, port: int, address: str, every: float, effort) -> None:
        self.port, self.address, self.every, self.effort = port, address, every, effort
        self.visits: list[tuple[float, bool, float, float]] = []  # (start, ok, latency, effort at start)
        self.stop = threading.Event()

    def run(self, t0: float) -> threading.Thread:
        def loop():
            while not self.stop.wait(0 if not self.visits else self.every):
                effort = self.effort()
                start = time.monotonic() - t0
                ok, latency = legit_visit(self.port, self.address)
                self.visits.append((start, ok, latency, effort))

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread


def legit_visit(port: int, address: str) -> tuple[bool, float]:
    t0 = time.monotonic()
    try:
        body = http_get(port, address, "legit-" + secrets.token_hex(6), timeout=120)
        return is_page(body), time.monotonic() - t0
    except OSError:
        return False, time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=float, default=660.0, help="flood duration in seconds (default 660)")
    parser.add_argument("--flood-clients", type=int, default=3)
    parser.add_argument("--threads", type=int, default=12, help="flood threads per flood client")
    parser.add_argument("--legit-every", type=float, default=20.0)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    base = short_tempdir("dd-powflood-")
    net = tornet.TorNetwork()
    clients: list[tornet._Node] = []
    server = None
    try:
        net.start()
        data_dir = os.path.join(base, "data")
        os.makedirs(data_dir, mode=0o700)
        net.seed_data_dir(os.path.join(data_dir, "tor"))
        metrics_port = free_port()
        argv = [os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile=", "deaddrop", "--data-dir", data_dir,
                "--submission-key", test_svs().public_key_path, "--kdf-cost", "insecure-fast",
                "--source-listen", f"tcp:{free_port()}:interface=127.0.0.1",
                "--journalist-listen", "tcp:0:interface=127.0.0.1", "--tor-binary", net.wrapper,
                "--tor-option", f"MetricsPort=127.0.0.1:{metrics_port}",
                "--tor-option", "MetricsPortPolicy=accept 127.0.0.1"]
        for key, value in net.tor_options:
            argv += ["--tor-option", f"{key}={value}"]
        log = open(os.path.join(base, "twistd.log"), "ab")
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  cwd=base, start_new_session=True)
        for i in range(args.flood_clients):
            clients.append(start_client(net, f"flood{i}"))
        onion_file = os.path.join(data_dir, "source-onion.txt")
        security = os.path.join(data_dir, "logs", "security.jsonl")
        wait_for(lambda: os.path.exists(security) and '"tor.onion.published"' in open(security).read(), 120,
                 "the source onion's publication")
        address = open(onion_file).read().strip()
        onion = address[: -len(".onion")]
        started = time.monotonic()  # ~ the service's PoW (re)initialisation: periods count from here
        for node, _ in clients:
            wait_for(lambda n=node: "Bootstrapped 100%" in n.output(), 90, f"{node.name} bootstrapped")
        metrics = Metrics(metrics_port)
        legit_port = net.client_socks_port

        wait_for(lambda: legit_visit(legit_port, address)[0], 90, "a first visit (descriptor spreading)")
        before = [legit_visit(legit_port, address) for _ in range(3)]
        effort_before = metrics.read(onion)["tor_hs_pow_suggested_effort"]
        print(f"onion up; legit visits before the flood: "
              f"{[f'{lat:.1f}s' if ok else 'FAIL' for ok, lat in before]}; effort {effort_before:g}", flush=True)

        flood = Flood(address, [port for _, port in clients], args.threads)
        samples: list[dict] = []
        t0 = time.monotonic()
        flood.run()
        visitor = Visitor(legit_port, address, args.legit_every,
                          lambda: metrics.read(onion)["tor_hs_pow_suggested_effort"])
        visitor.run(t0)
        visits = visitor.visits
        next_sample = t0
        last = (t0, metrics.read(onion))
        print(f"{'t':>5} {'effort':>6} {'queue':>5} {'INTRO2/s':>8} {'rend/s':>6} {'flood/s':>7}  legit", flush=True)
        attempts_at = (t0, 0)
        while time.monotonic() - t0 < args.flood:
            if time.monotonic() >= next_sample:
                now = time.monotonic()
                m = metrics.read(onion)
                dt = now - last[0]
                intro_rate = (m["tor_hs_intro_num_total"] - last[1]["tor_hs_intro_num_total"]) / dt
                rend_rate = (m["tor_hs_rdv_num_total"] - last[1]["tor_hs_rdv_num_total"]) / dt
                with flood.lock:
                    attempts = flood.attempts
                flood_rate = (attempts - attempts_at[1]) / (now - attempts_at[0])
                attempts_at = (now, attempts)
                last = (now, m)
                sample = {"t": now - t0, "since_publish": now - started, "effort": m["tor_hs_pow_suggested_effort"],
                          "queue": m["tor_hs_rdv_pow_pqueue_count"], "intro_per_s": intro_rate,
                          "rend_per_s": rend_rate, "flood_per_s": flood_rate}
                samples.append(sample)
                recent = [v for v in list(visits) if v[0] + v[2] > sample["t"] - 10]  # ended in the last 10 s
                legit = " ".join(f"{'ok' if ok else 'FAIL'} {lat:.1f}s" for _, ok, lat, _ in recent)
                print(f"{sample['t']:5.0f} {sample['effort']:6g} {sample['queue']:5g} {intro_rate:8.1f} "
                      f"{rend_rate:6.1f} {flood_rate:7.1f}  {legit}", flush=True)
                next_sample = now + 10
            time.sleep(0.5)
        flood.stop.set()
        visitor.stop.set()
        flood_seconds = time.monotonic() - t0
        after = metrics.read(onion)

        efforts = [s["effort"] for s in samples]
        ok_visits = [v for v in visits if v[1]]
        summary = {
            "flood_seconds": round(flood_seconds),
            "flood_clients": args.flood_clients,
            "flood_threads": args.flood_clients * args.threads,
            "flood_attempts_per_s": round(flood.attempts / flood_seconds, 2),
            "flood_successes_per_s": round(flood.ok / flood_seconds, 2),
            "introduce2_per_s_mean": round(statistics.mean(s["intro_per_s"] for s in samples[1:]), 2),
            "rendezvous_per_s_mean": round(statistics.mean(s["rend_per_s"] for s in samples[1:]), 2),
            "effort_before": effort_before,
            "effort_max": max(efforts),
            "effort_end": after["tor_hs_pow_suggested_effort"],
            "first_rise_at_s": next((round(s["since_publish"]) for s in samples if s["effort"] > effort_before), None),
            "legit_visits": len(visits),
            "legit_ok": len(ok_visits),
            "legit_latency_p50_s": round(statistics.median(v[2] for v in ok_visits), 2) if ok_visits else None,
            "legit_latency_max_s": round(max(v[2] for v in ok_visits), 2) if ok_visits else None,
            # by the effort published when the visit started
            "legit_before_rise": f"{sum(1 for v in ok_visits if v[3] <= effort_before)}/"
                                 f"{sum(1 for v in visits if v[3] <= effort_before)} ok",
            "legit_after_rise": f"{sum(1 for v in ok_visits if v[3] > effort_before)}/"
                                f"{sum(1 for v in visits if v[3] > effort_before)} ok",
        }
        print(json.dumps(summary, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"summary": summary, "samples": samples, "visits": visits}, f, indent=1)
        return 0 if summary["effort_max"] > effort_before and ok_visits else 1
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()
        if server is not None:
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for node, _ in clients:
            node.stop()
        net.stop()
        if not os.environ.get("DEADDROP_KEEP_TORNET"):
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
