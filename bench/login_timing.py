#!/usr/bin/env python3
"""Can an online prober date other sources' logins from its own answer times? (issue 26, item 1)

    .venv/bin/python bench/login_timing.py [--probes 200] [--rate 2] [--logins 5] [--creates 0]
                                           [--kdf-cost default] [--window 6] [--code DIR] [--seed N]

A real server (``twistd -n -y bench/_tor_like.tac``: ``twistd deaddrop --tor none`` plus the
Tor-only PROXY listener, so that each probe arrives on a circuit of its own, as on the onion)
on a fresh data dir. A victim source is created first; then a prober sends ``--probes``
well-formed random codenames (GET /login, then POST /login, each on a fresh connection of a
fresh circuit) at ``--rate`` a second, timing each POST from its last byte sent to the answer's
last byte, while the victim logs in ``--logins`` times (and new sources are made ``--creates``
times) at random moments at least ``--window`` seconds apart. The server's Argon2id runs are
timed inside it (bench-only, ``_tor_like.RUN_LOG_ENV``: start and duration, nothing else).

Detectors, each flagging probes from the prober's own answer times only:
  set-change  its time (to 1 ms) is none of the previous 16 probes' times
  set-entry   ... and one of the next 8 probes' times is (a new value joined the set: flagged late)
  first-time  its time (to 1 ms) is none of any earlier probe's (the "repeat-of-earlier" test)
              (these three again with 10 ms: a loaded machine blurs 1 ms, not copied runs)
  jump        it differs from the previous probe's by over 4 x the median of the last 30 jumps (and 5 ms)
  mean-shift  the mean of the last 5 is 3 standard errors (and 2 ms) off the 20 before
  var-shift   the variance of the last 5 is over 4 x, or under 1/4 of, the 20 before
  late-step   it took over 1.5 x the median time (an answer at a later step of the grid)
Flags at most 3 probes apart are one episode (a rolling window keeps flagging for a few probes
after one odd answer), dated by its first probe's answer. An episode is true when that answer
arrived within ``--window`` seconds after a victim event. Chance is a flagger with as many
episodes at random moments: expected true = episodes x (share of the probing time inside
windows), with the binomial tail P(X >= true); events caught (a true episode in the window)
against 1 - (1 - window/T)^episodes each. Also, from the server's run log (which no prober
has), whether answers that left while an Argon2id run took a core were slower.

Also: how often a probe's time is within 1 ms of an earlier probe's (the review: 145 of 300),
and of a real Argon2id run's duration (within 1 ms, or 0-10 ms over it: a copied run time plus
the connection; the review: misses copied them), each run's time, the server's answer
delay (from its start-up line), and the load. ``--code DIR`` runs another checkout's server (an
older commit unpacked with ``git archive``) for a before/after comparison.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import load  # noqa: E402  (bench/load.py: free ports, the SVS key)
from _tor_client import Target, fresh_circuit, read_all  # noqa: E402
from _tor_like import RUN_LOG_ENV  # noqa: E402
from abuse import FORM, code_env, csrf_of, form_body, raw_request  # noqa: E402

from deaddrop.newsroom import codenames  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
MATCH = 0.001  # two times "repeat" when within 1 ms (the review's measure)
WIDE_MATCH = 0.010
COPY_OVERHEAD = 0.010  # a copied run time as seen by the client: the run's time plus up to 10 ms


@dataclass
class Probe:
    sent: float  # monotonic, the POST's last byte
    took: float  # seconds to the answer's last byte
    status: int

    @property
    def answered(self) -> float:
        return self.sent + self.took


# -- the server and its clients ---------------------------------------------------------------

def start_server(args: argparse.Namespace, workdir: str) -> tuple[subprocess.Popen, Target, str, str]:
    data = os.path.join(workdir, "data")
    key = load.make_svs(workdir)
    port = load.free_port()
    argv = ["--tor", "none", "--data-dir", data, "--submission-key", key, "--kdf-cost", args.kdf_cost,
            "--source-listen", f"tcp:{port}:interface=127.0.0.1",
            "--journalist-listen", f"tcp:{load.free_port()}:interface=127.0.0.1"]
    if args.crypto_threads:
        argv += ["--crypto-threads", str(args.crypto_threads)]
    env = code_env(args)
    env["DEADDROP_BENCH_ARGV"] = json.dumps(argv)
    runs = os.path.join(workdir, "runs.txt")
    env[RUN_LOG_ENV] = runs
    log_path = os.path.join(workdir, "server.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile=", "-y",
                                 os.path.join(HERE, "_tor_like.tac")], stdout=log, stderr=subprocess.STDOUT,
                                cwd=workdir, env=env)
    target = Target(port, os.path.join(data, "tor", "source.sock"))
    deadline = time.monotonic() + 120
    while True:
        try:
            target.connect(None, timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start; see {log_path}")
            time.sleep(0.1)
    # Its start-up Argon2id runs are over: it says so (older code times one run: a few seconds).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as log:
            if "answers leave" in log.read() or args.code:
                break
        time.sleep(0.5)
    time.sleep(5.0 if args.code else 0.5)
    return proc, target, log_path, runs


def post_timed(target: Target, circuit: int, path: str, fields: dict[str, str], cookie: str) -> Probe:
    """POST on a fresh connection of ``circuit``, timed from its last byte sent to the answer's last."""
    body = form_body(fields)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: {FORM}\r\n"
            f"Cookie: {cookie}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with target.connect(circuit, 120.0) as s:
        s.sendall(head + body)
        sent = time.monotonic()
        answer = read_all(s)
        took = time.monotonic() - sent
    first = answer.split(b"\r\n", 1)[0].split()
    return Probe(sent, took, int(first[1]) if len(first) > 1 else 0)


def visit(target: Target, path: str, form_path: str, fields: dict[str, str]) -> Probe:
    """GET ``form_path`` then POST ``path`` with its token, both on one fresh circuit."""
    circuit = fresh_circuit()
    status, cookie, text, _ = raw_request(target, circuit, "GET", form_path)
    fields = dict(fields, csrf_token=csrf_of(text))
    if "codename" not in fields:  # /create: the codename /generate showed
        fields["codename"] = re.search(r'id="codename"[^>]*>([^<]+)<', text).group(1).strip()
    return post_timed(target, circuit, path, fields, cookie)


# -- the detectors ------------------------------------------------------------------------------

def _matches(t: float, others: list[float], within: float | None = None) -> bool:
    return any(abs(t - o) <= (MATCH if within is None else within) for o in others)


def value_detectors(times: list[float], within: float) -> dict[str, list[int]]:
    """The detectors that compare values, two times being the same when ``within`` apart."""
    suffix = "" if within == MATCH else f"/{within * 1000:g}ms"
    flags: dict[str, list[int]] = {name + suffix: [] for name in ("set-change", "set-entry", "first-time")}
    for i, t in enumerate(times):
        if i >= 16 and not _matches(t, times[i - 16:i], within):
            flags["set-change" + suffix].append(i)
            if _matches(t, times[i + 1:i + 9], within):
                flags["set-entry" + suffix].append(i)
        if i >= 16 and not _matches(t, times[:i], within):
            flags["first-time" + suffix].append(i)
    return flags


def detectors(times: list[float]) -> dict[str, list[int]]:
    """Each detector's flagged probe indexes, from the answer times alone."""
    flags = value_detectors(times, MATCH)
    # A loaded machine blurs 1 ms; copied run times still stand out at 10 ms (runs differ by more).
    flags.update(value_detectors(times, WIDE_MATCH))
    flags.update({name: [] for name in ("jump", "mean-shift", "var-shift", "late-step")})
    typical = statistics.median(times)
    for i, t in enumerate(times):
        if i >= 31:
            jumps = [abs(times[j] - times[j - 1]) for j in range(i - 30, i)]
            if abs(t - times[i - 1]) > max(0.005, 4 * statistics.median(jumps)):
                flags["jump"].append(i)
        if i >= 24:
            recent, before = times[i - 4:i + 1], times[i - 24:i - 4]
            se = statistics.stdev(before) / math.sqrt(len(recent))
            shift = abs(statistics.mean(recent) - statistics.mean(before))
            if shift > max(0.002, 3 * se):
                flags["mean-shift"].append(i)
            ratio = (statistics.variance(recent) + 1e-10) / (statistics.variance(before) + 1e-10)
            if ratio > 4 or ratio < 0.25:
                flags["var-shift"].append(i)
        if t > 1.5 * typical:
            flags["late-step"].append(i)
    return flags


def binomial_tail(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


def episodes(flagged: list[int]) -> list[int]:
    """The first probe of each run of flags (flagged probes at most 3 apart are one episode: a
    rolling window keeps flagging for a few probes after one odd answer)."""
    firsts: list[int] = []
    for i in flagged:
        if not firsts or i - last > 3:
            firsts.append(i)
        last = i
    return firsts


def score(probes: list[Probe], events: list[float], window: float, flagged: list[int]) -> dict[str, float]:
    """Episodes, as true or not against chance (a flagger with as many episodes at random)."""
    start, end = probes[0].answered, probes[-1].answered
    span = end - start
    covered = sum(max(0.0, min(e + window, end) - max(e, start)) for e in events)
    p = covered / span
    at = [probes[i].answered for i in episodes(flagged)]
    true = sum(1 for a in at if any(e <= a <= e + window for e in events))
    caught = sum(1 for e in events if any(e <= a <= e + window for a in at))
    chance_caught = sum(1 - (1 - max(0.0, min(e + window, end) - max(e, start)) / span) ** len(at) for e in events)
    return {"flags": len(flagged), "episodes": len(at), "true": true, "expected": len(at) * p,
            "p": binomial_tail(len(at), p, true) if at else 1.0, "caught": caught, "chance_caught": chance_caught}


# -- the run -------------------------------------------------------------------------------------

def schedule(rng: random.Random, count: int, first: float, last: float, apart: float) -> list[float]:
    """``count`` random moments in [first, last], at least ``apart`` from each other."""
    for _ in range(10_000):
        moments = sorted(rng.uniform(first, last) for _ in range(count))
        if all(b - a >= apart for a, b in zip(moments, moments[1:])):
            return moments
    raise SystemExit("cannot fit the victim's events that far apart: more probes or fewer events")


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    workdir = tempfile.mkdtemp(prefix="login-timing-")
    proc, target, log_path, runs_path = start_server(args, workdir)
    load_before = os.getloadavg()
    try:
        codename = victim_codename(target)
        duration = args.probes / args.rate
        t0 = time.monotonic() + 1.0
        plan = [(t, "login") for t in schedule(rng, args.logins + args.creates, 8.0, duration - 8.0, args.window)]
        kinds = ["login"] * args.logins + ["create"] * args.creates
        rng.shuffle(kinds)
        plan = [(t, kind) for (t, _), kind in zip(plan, kinds)]
        probes: list[Probe | None] = [None] * args.probes
        events: list[tuple[float, str, int]] = []
        lock = threading.Lock()

        def probe(i: int) -> None:
            result = visit(target, "/login", "/login",
                           {"codename": codenames.generate_codename(args.codename_words)})
            probes[i] = result

        def event(kind: str) -> None:
            if kind == "login":
                result = visit(target, "/login", "/login", {"codename": codename})
            else:
                result = visit(target, "/create", "/generate", {})
            with lock:
                events.append((result.sent, kind, result.status))

        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            futures = []
            queue = sorted([(t0 + i / args.rate + rng.uniform(-0.1, 0.1), "probe", i) for i in range(args.probes)]
                           + [(t0 + t, kind, -1) for t, kind in plan])
            for at, kind, i in queue:
                time.sleep(max(0.0, at - time.monotonic()))
                futures.append(pool.submit(probe, i) if kind == "probe" else pool.submit(event, kind))
            for f in futures:
                f.result()
        load_after = os.getloadavg()
    finally:
        proc.terminate()
        proc.wait(60)
        subprocess.run(["gpgconf", "--homedir", os.path.join(workdir, "data", "gnupg"), "--kill", "gpg-agent"],
                       capture_output=True)
    runs = []
    if os.path.exists(runs_path):
        with open(runs_path) as f:
            runs = [list(map(float, line.split())) for line in f if line.strip()]
    delay = None
    with open(log_path, errors="replace") as f:
        for line in f:
            match = re.search(r"answers leave ([0-9.]+) s after", line)
            if match:
                delay = float(match.group(1))
    return {"probes": [[p.sent, p.took, p.status] for p in probes if p is not None], "events": sorted(events),
            "runs": runs, "delay": delay, "load": [load_before[0], load_after[0]], "cores": os.cpu_count(),
            "args": {k: getattr(args, k) for k in ("rate", "window", "kdf_cost", "crypto_threads", "code", "seed")}}


def victim_codename(target: Target) -> str:
    """The victim: a source made before the probing starts. -> its codename."""
    circuit = fresh_circuit()
    status, cookie, text, _ = raw_request(target, circuit, "GET", "/generate")
    codename = re.search(r'id="codename"[^>]*>([^<]+)<', text).group(1).strip()
    made = post_timed(target, circuit, "/create", {"codename": codename, "csrf_token": csrf_of(text)}, cookie)
    if made.status != 303:
        raise SystemExit(f"/create answered {made.status}")
    return codename


def report(measured: dict) -> str:
    args = argparse.Namespace(**measured["args"])
    probes = sorted((Probe(*p) for p in measured["probes"]), key=lambda p: p.sent)
    events = [tuple(e) for e in measured["events"]]
    runs = [tuple(r) for r in measured["runs"]]
    times = [p.took for p in probes]
    durations = [took for _, took in runs]
    delay = measured["delay"]
    repeats = sum(1 for i, t in enumerate(times) if _matches(t, times[:i]))
    copies = sum(1 for t in times if _matches(t, durations))
    # A copy as the prober sees it: a run's time plus what the connection and page add.
    plus = sum(1 for t in times if any(0 <= t - d <= COPY_OVERHEAD for d in durations))
    nearest = min((abs(t - d) for t in times for d in durations), default=float("nan"))
    out = []
    w = out.append
    w(f"login-timing: {len(probes)} wrong-codename probes at {args.rate}/s on fresh circuits; "
      f"victim events: {', '.join(f'{k} ({s})' for _, k, s in events)}")
    w(f"code: {args.code or 'this checkout'}; --kdf-cost {args.kdf_cost}; crypto threads "
      f"{args.crypto_threads or 'default'}; cores {measured['cores']}; load {measured['load'][0]:.1f} -> "
      f"{measured['load'][1]:.1f} (1-min avg); window {args.window:g} s; seed {args.seed}")
    w(f"server's answer delay: {delay if delay is not None else 'none (no grid in this code)'} s; "
      f"Argon2id runs timed in the server: {len(durations)} "
      + (f"(median {statistics.median(durations):.3f} s, {min(durations):.3f}-{max(durations):.3f})" if durations else ""))
    w(f"probe statuses: {sorted({p.status for p in probes})}; probe time: median {statistics.median(times):.4f} s, "
      f"p1 {percentile(times, 1):.4f}, p99 {percentile(times, 99):.4f}, max {max(times):.4f}")
    w(f"probes within 1 ms of an earlier probe's time: {repeats}/{len(times)}; within 1 ms of a real run's "
      f"duration: {copies}/{len(times)} (nearest {nearest * 1000:.1f} ms); 0-10 ms over one: {plus}/{len(times)}")
    matched = [(d, sum(1 for t in times if abs(t - d) <= MATCH)) for d in durations]
    w("runs (s, probes within 1 ms of it): " + ", ".join(f"{d:.3f} ({n})" for d, n in matched))
    w(overlap(probes, runs))
    w("")
    w(f"{'detector':<16} {'flags':>5} {'episodes':>8} {'true':>5} {'chance':>7} {'P(>=true)':>10} "
      f"{'events caught':>14} {'chance':>7}")
    for name, flagged in detectors(times).items():
        s = score(probes, [e for e, _, _ in events], args.window, flagged)
        w(f"{name:<16} {s['flags']:>5} {s['episodes']:>8} {s['true']:>5} {s['expected']:>7.1f} {s['p']:>10.3f} "
          f"{s['caught']:>8}/{len(events):<5} {s['chance_caught']:>7.1f}")
    return "\n".join(out)


def overlap(probes: list[Probe], runs: list[tuple]) -> str:
    """What no prober sees but the server's run log shows: did answers that left while an
    Argon2id run was under way (CPU taken) take longer than the others?"""
    during = [p.took for p in probes if any(s <= p.answered <= s + d for s, d in runs)]
    other = [p.took for p in probes if not any(s <= p.answered <= s + d for s, d in runs)]
    if not during or not other:
        return f"answers that left during a run: {len(during)} (nothing to compare)"
    return (f"answers that left during a run: {len(during)}, median {statistics.median(during) * 1000:.1f} ms "
            f"vs {statistics.median(other) * 1000:.1f} ms for the other {len(other)} "
            f"(mean {statistics.mean(during) * 1000:.1f} vs {statistics.mean(other) * 1000:.1f})")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--rate", type=float, default=2.0, help="probes a second")
    parser.add_argument("--logins", type=int, default=5, help="the victim's logins")
    parser.add_argument("--creates", type=int, default=0, help="new sources made meanwhile")
    parser.add_argument("--window", type=float, default=6.0, help="seconds after an event a flag counts as true")
    parser.add_argument("--kdf-cost", default="default")
    parser.add_argument("--crypto-threads", type=int, default=0)
    parser.add_argument("--codename-words", type=int, default=7)
    parser.add_argument("--code", help="run the server from this checkout instead")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--out", help="also append the report to this file")
    parser.add_argument("--raw", help="also save what was measured (JSON: times only) to this file")
    parser.add_argument("--analyse", metavar="RAW", help="report on a file saved with --raw; run nothing")
    parser.add_argument("--match-ms", type=float, default=1.0,
                        help="two answer times repeat when this close (the review: 1 ms)")
    args = parser.parse_args()
    global MATCH
    MATCH = args.match_ms / 1000
    if args.analyse:
        with open(args.analyse) as f:
            measured = json.load(f)
    else:
        measured = run(args)
        if args.raw:
            with open(args.raw, "w") as f:
                json.dump(measured, f)
    text = report(measured)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
