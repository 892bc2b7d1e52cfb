#!/usr/bin/env python3
"""Memory bench (issue 22): the whole source list, streamed, with 100,000 sources.

    .venv/bin/python bench/sources_stream.py [--sources 100000] [--rounds 3]

A real server (``twistd -n deaddrop --tor none``, ephemeral 127.0.0.1 ports) on a data dir whose
database is seeded straight through SQLite with SOURCES visible sources, each with a real
armored public key (an ed25519/cv25519 key, as sources get) and two submission rows. Each
measurement starts a fresh server (Python keeps freed memory, so a second request on the same
process would hide the first one's growth), waits until it is idle, then fetches every source
one of two ways while sampling the server's RSS every 10 ms:

  - stream:   ``GET /api/v1/sources``, the one streamed response SecureDrop's clients expect;
  - baseline: the same list as pages (``?per_page=1000`` and ``next``, 100 requests), the
              way to get everything before.

Rounds interleave the sides (stream, baseline, stream, ...); the best of ROUNDS on each side is
reported, as RSS growth over the idle server and wall time, with the ratio stream/baseline.
Target: the stream's RSS growth < 64 MB at 100,000 sources.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import load  # noqa: E402
import scale  # noqa: E402

TARGET_MB = 64


def add_keys(db_path: str, key_path: str) -> int:
    """Give every seeded source the same real armored public key. -> its length in bytes."""
    with open(key_path) as f:
        armored = f.read()
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("UPDATE sources SET public_key = ?, key_fingerprint = ? WHERE public_key IS NULL",
                     (armored, "F" * 40))
    conn.close()
    return len(armored)


def fetch_all(port: int, context, token: str, paged: bool) -> tuple[int, int]:
    """Every source, streamed or page by page. -> (sources, bytes of JSON read)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=600, context=context)
    headers = {"Authorization": f"Token {token}"}
    count = size = 0
    path: str | None = "/api/v1/sources?per_page=1000" if paged else "/api/v1/sources"
    try:
        while path:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise SystemExit(f"GET {path}: HTTP {response.status}: {body[:200]!r}")
            data = json.loads(body)
            count += len(data["sources"])
            size += len(body)
            path = data.get("next") if paged else None
    finally:
        conn.close()
    return count, size


def settle(pid: int, seconds: float = 2.0) -> int:
    """RSS (kB) once it has stopped moving for ``seconds`` (start-up work done)."""
    last, since = load.rss_kb(pid), time.monotonic()
    while time.monotonic() - since < seconds:
        time.sleep(0.2)
        now = load.rss_kb(pid)
        if abs(now - last) > 256:
            last, since = now, time.monotonic()
    return last


def measure(workdir: str, data: str, key: str, ports: tuple[int, int], context, token: str,
            paged: bool, expected: int) -> tuple[float, float]:
    """One fresh server, one fetch of everything. -> (RSS growth in MB, seconds)."""
    proc = scale.start_server(workdir, data, key, ports, "insecure-fast")
    try:
        journalist = scale.Journalist(ports[1], context)
        journalist.token = token
        status, _ = journalist.request("GET", "/api/v1/user")  # TLS and the token path warmed up
        assert status == 200, status
        journalist.conn.close()
        idle = settle(proc.pid)
        sampler = load.RssSampler(proc.pid, interval=0.01)
        sampler.start()
        started = time.perf_counter()
        count, size = fetch_all(ports[1], context, token, paged)
        seconds = time.perf_counter() - started
        sampler.stop.set()
        sampler.join()
        if count != expected:
            raise SystemExit(f"{'pages' if paged else 'stream'}: {count} sources, expected {expected}")
        peak = max(sampler.peak, load.rss_kb(proc.pid))
        return (peak - idle) / 1024, seconds
    finally:
        scale.stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="dd-stream-", dir="/tmp")
    data = os.path.join(workdir, "data")
    results: dict[str, list[tuple[float, float]]] = {"stream": [], "baseline": []}
    try:
        key = load.make_svs(workdir)
        load.admin("ca", "init", "--data-dir", data)
        ports = (load.free_port(), load.free_port())
        scale.stop(scale.start_server(workdir, data, key, ports, "insecure-fast"))  # initialises the data dir
        cert = load.admin("cert", "issue", "streambench", "--pem", "--data-dir", data,
                          "--out", os.path.join(workdir, "j.p12"))
        account = load.admin("journalist", "add", "streambench", "--data-dir", data, "--kdf-cost", "insecure-fast")
        seconds = scale.seed(os.path.join(data, "db.sqlite"), args.sources, 2)
        key_bytes = add_keys(os.path.join(data, "db.sqlite"), key)
        print(f"seeded {args.sources:,} sources (public key {key_bytes} bytes each) in {seconds:.1f} s", flush=True)
        context = load.tls_context(data, cert["key_pem"], cert["cert_pem"], cert["password"])

        # One token for every round: tokens live in the database, across restarts.
        proc = scale.start_server(workdir, data, key, ports, "insecure-fast")
        try:
            journalist = scale.Journalist(ports[1], context)
            status, text = journalist.request("POST", "/api/v1/token", json.dumps({
                "username": account["username"], "passphrase": account["passphrase"],
                "one_time_code": load.totp_now(account["totp_secret"], [-1])}).encode(),
                {"Content-Type": "application/json"})
            assert status == 200, (status, text[:200])
            token = json.loads(text)["token"]
        finally:
            scale.stop(proc)

        for round_number in range(args.rounds):
            for side in ("stream", "baseline"):
                growth, took = measure(workdir, data, key, ports, context, token, side == "baseline", args.sources)
                results[side].append((growth, took))
                print(f"round {round_number + 1} {side:<8}: RSS +{growth:6.1f} MB, {took:6.2f} s", flush=True)
    finally:
        for home in (os.path.join(data, "gnupg"), os.path.join(workdir, "svs")):
            subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], capture_output=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    best = {side: (min(g for g, _ in rows), min(t for _, t in rows)) for side, rows in results.items()}
    print()
    print(f"DeadDrop source-list stream: {args.sources:,} sources, best of {args.rounds} interleaved rounds a side, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'':<34} {'RSS growth MB':>14} {'seconds':>8}")
    print(f"{'stream  GET /api/v1/sources':<34} {best['stream'][0]:>14.1f} {best['stream'][1]:>8.2f}")
    print(f"{'baseline: pages of 1000':<34} {best['baseline'][0]:>14.1f} {best['baseline'][1]:>8.2f}")
    print(f"ratio stream/baseline: RSS growth {best['stream'][0] / max(best['baseline'][0], 0.1):.2f}, "
          f"time {best['stream'][1] / best['baseline'][1]:.2f}")
    worst = max(g for g, _ in results["stream"])
    verdict = "meets" if worst < TARGET_MB else "MISSES"
    print(f"stream RSS growth, worst round: {worst:.1f} MB: {verdict} the target (< {TARGET_MB} MB)")
    return 0 if worst < TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
