#!/usr/bin/env python3
"""Abuse benchmark (issue 9): every anonymous attack of the issue's table, replayed against a
real server while a legitimate source and a journalist work alongside.

    .venv/bin/python bench/abuse.py [--attacks all|NAME,...] [--seconds 45] [--kdf-cost default]
                                    [--mode circuits|shared|onion] [--attack-circuits 8] [--code DIR] [--quick]
                                    [--repeat N]

For each attack a fresh server (``twistd -n deaddrop --tor none`` on ephemeral 127.0.0.1
ports, a copy of one prepared data dir: CA, client certificates, journalist accounts, and a
submission key whose secret half only this script holds) is started, then:
  1. the attack prepares (what an attacker can do at leisure: e.g. log in 128 times);
  2. for ``--seconds`` the attack runs while
     - a legitimate source loops: create, log out + log in, submit a message and a 5 MB file,
       then log in again and read the journalist's reply;
     - a journalist (mutual TLS, API token) lists sources, downloads every submission, and
       replies to each source once its key is there;
     the source's cycle that is under way when the time is up still completes (the attack
     goes on meanwhile), bounded by per-request timeouts;
  3. the server's RSS and open fds are sampled every 0.2 s; afterwards the database is
     read for pending sources (created, never submitted).

One row per attack: the attacker's request rate and bytes sent; the legitimate source's
success rate and login/submit p50/p99 (s); the journalist's p99 over all its requests (ms);
the server's peak RSS and open fds; and what the attack achieved (notes).

Modes. ``circuits`` (the default) replays the attacks as they arrive through the launched Tor:
the server also listens where only that Tor connects, ``haproxy:unix:DATA/tor/source.sock``
(the production listener, added by ``twistd -y bench/_tor_like.tac``), and every source-side
client starts each connection with Tor's PROXY v1 line naming its circuit. The legitimate
source takes a fresh circuit each cycle (Tor Browser's new identity); each attacker spreads
its streams over ``--attack-circuits`` circuits, or more where its concurrency needs them (Tor
allows 16 streams at once per circuit). A circuit the server closes (CLOSECIRCUIT, done by the
stand-in for Tor in bench/_tor_like.py) is replaced by a fresh one, as an attacker's Tor would
build one, but no faster than the onion service's PoW queue takes introductions (5 a second,
burst 50, as deaddrop/tor/defences.py sets it; bench/_tor_client.py ``IntroductionQueue``).
``shared`` is the old ``--tor none`` replay: every source-side client on the plain
TCP listener, all in one shared budget. The journalist (and journalist-logins) are never on Tor.
Targets (issue 9): 100% legitimate success, login p99 < 5 s, submit p99 < 10 s, journalist
p99 < 500 ms, RSS < 512 MB, no pending-source leak after purge.

``onion`` (issue 20) is the real onion path: a private Tor network (tests/integration/tornet.py:
3 authorities, 2 relays, client Tors), the server as ``twistd deaddrop --tor launch`` in it (its
own Tor, PoW on, its Tor-only socket, real CLOSECIRCUIT), and every source-side client through a
client Tor's SOCKS port, one circuit per SOCKS username (bench/_onion.py). The legitimate source
has a client Tor of its own; the attackers use ``--attacker-tors`` others (default 2), as real
sources and attackers do not share a Tor: an attacker's hundreds of circuits being closed and
rebuilt do not queue the source's circuit builds in the same client. The legitimate source builds
each fresh circuit as a step of its own ("circuit"), so the table's login times are the server's
answers on a built circuit and the notes pair each visit's circuit build with its answer. The
attackers' client Tors' control ports say which circuits were closed; the attacker then moves to a
fresh one, no faster than the PoW queue admits introductions. Its default attacks are issue 20's rows: a 40-circuit
wrong-codename flood; 20 new sources at once right after it; a /create flood from fresh circuits
at the PoW rate; reconnecting slow bodies from 64 and from 256 circuits with the server under
``ulimit -n 1024``. Each row reports the Argon2id runs spent on logins (from the line the server
logs when it stops) against the legitimate logins. Targets (issue 20): legitimate success 100%,
login p99 < 5 s, journalist p99 < 500 ms.

Only 127.0.0.1 and the server's own unix socket are ever contacted. ``--code DIR`` runs the
server and admin commands from another checkout (e.g. an older commit unpacked with ``git
archive``) for a before/after comparison; a checkout without the Tor-only listener runs in
shared mode, and the output says so. The idle-connections attack runs the server with RLIMIT_NOFILE 1024 (soft and
hard, as ``ulimit -n 1024``).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import html as htmllib
import json
import math
import os
import random
import re
import resource
import shutil
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import load  # noqa: E402  (bench/load.py: the source browser, journalist client, setup helpers)
from load import JournalistClient, SourceBrowser, StepError, percentile  # noqa: E402
from _tor_client import (CLOSED_STATUS, INTRODUCTIONS, MAX_STREAMS, CircuitHTTPConnection, CircuitSet, Target,  # noqa: E402
                         fresh_circuit, read_all)
from _tor_like import CLOSED_LOG  # noqa: E402

from deaddrop.newsroom import codenames  # noqa: E402

VENV_BIN = os.path.dirname(sys.executable)
LEGIT_FILE_BYTES = 5 * 1000 * 1000
SOURCE_TIMEOUT = 60.0  # one legitimate request; longer counts as a failure
REPLY_TIMEOUT = 90.0  # from the submission's answer to the journalist's reply being posted


# -- the server ------------------------------------------------------------------------------

class Server:
    def __init__(self, workdir: str, template: str, args: argparse.Namespace, extra: list[str],
                 nofile: int | None, copy: bool = True, network: Any = None) -> None:
        self.workdir = workdir
        self.data = os.path.join(workdir, "data")
        if copy:
            shutil.copytree(os.path.join(template, "data"), self.data, symlinks=True)
        self.source_port, self.journalist_port = load.free_port(), load.free_port()
        tor_socket = os.path.join(self.data, "tor", "source.sock") if args.mode == "circuits" else None
        self.target = Target(self.source_port, tor_socket)
        self.attacker_target = self.target  # onion mode: the attackers' own client Tors
        tor = network.server_args() if network is not None else ["--tor", "none"]
        if network is not None:
            network.net.seed_data_dir(os.path.join(self.data, "tor"))
        argv = tor + [
                "--data-dir", self.data, "--submission-key", os.path.join(template, "submission-public.asc"),
                "--kdf-cost", args.kdf_cost,
                "--source-listen", f"tcp:{self.source_port}:interface=127.0.0.1",
                "--journalist-listen", f"tcp:{self.journalist_port}:interface=127.0.0.1",
                "--journalist-ca", os.path.join(self.data, "ca", "ca.pem"),
                "--journalist-crl", os.path.join(self.data, "ca", "crl.pem")] + extra
        env = code_env(args)
        twistd = [os.path.join(VENV_BIN, "twistd"), "-n", "--pidfile="]
        if tor_socket:
            env["DEADDROP_BENCH_ARGV"] = json.dumps(argv)
            argv = twistd + ["-y", os.path.join(HERE, "_tor_like.tac")]
        else:
            argv = twistd + ["deaddrop"] + argv

        def limits() -> None:
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.log_path = os.path.join(workdir, "server.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                         env=env, preexec_fn=limits)
        deadline = time.monotonic() + 90
        ready = [lambda: socket.create_connection(("127.0.0.1", self.source_port), timeout=0.5),
                 lambda: socket.create_connection(("127.0.0.1", self.journalist_port), timeout=0.5)]
        if tor_socket:
            ready.append(lambda: self.target.connect(None, timeout=0.5))
        for connect in ready:
            while True:
                try:
                    connect().close()
                    break
                except OSError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"server did not start; see {self.log_path}")
                    time.sleep(0.1)
        if network is not None:
            # The real onion path: its own Tor publishes it; every source-side client goes
            # through the client Tor of the private network.
            from _onion import wait_published

            address = wait_published(os.path.join(self.data, "logs", "security.jsonl"), self.proc, 180)
            self.target = network.target(address)
            self.attacker_target = network.attacker_target(address)
            deadline = time.monotonic() + 120
            # Each client Tor fetches the descriptor on its first visit (not counted).
            for target in (self.target, self.attacker_target):
                for circuit in target.one_circuit_per_tor():
                    while True:
                        try:
                            if raw_request(target, circuit, "GET", "/", timeout=30)[0] == 200:
                                break
                        except OSError:
                            pass
                        if time.monotonic() > deadline:
                            raise SystemExit(f"the onion did not answer; see {self.log_path}")
                        time.sleep(1.0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["gpgconf", "--homedir", os.path.join(self.data, "gnupg"), "--kill", "gpg-agent"],
                       capture_output=True)

    def login_checks(self) -> tuple[int, int] | None:
        """(Argon2id checks run for logins, codenames turned away by their tag), from the line the
        server logs when it stops; None if the code under test does not log it."""
        found = None
        with open(self.log_path, errors="replace") as log:
            for line in log:
                match = re.search(r"source logins since start: (\d+) Argon2id checks, (\d+) codenames", line)
                if match:
                    found = int(match.group(1)), int(match.group(2))
        return found

    def circuits_closed(self) -> int:
        """How many circuits the server had Tor close (bench/_tor_like.py logs a count, no id)."""
        closed = 0
        with open(self.log_path, errors="replace") as log:
            for line in log:
                if CLOSED_LOG in line:
                    closed = int(line.rsplit(CLOSED_LOG, 1)[1].split()[0])
        return closed

    def pending_sources(self) -> tuple[int, int]:
        """(sources that never submitted, folders in the store): read-only, after the server stopped."""
        rows = -1
        db = os.path.join(self.data, "deaddrop.sqlite")
        for name in os.listdir(self.data):
            if name.endswith((".sqlite", ".db", ".sqlite3")):
                db = os.path.join(self.data, name)
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            rows = conn.execute("SELECT count(*) FROM sources WHERE pending = 1").fetchone()[0]
            conn.close()
        except sqlite3.Error:
            pass
        store = os.path.join(self.data, "store")
        folders = len(os.listdir(store)) if os.path.isdir(store) else -1
        return rows, folders


def code_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = os.path.abspath(args.code) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def admin(args: argparse.Namespace, *argv: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", "import sys; from deaddrop.admin.cli import main; sys.exit(main())",
                           *argv, "--json"],
                          capture_output=True, env=code_env(args), cwd="/")  # not this checkout: --code decides
    if proc.returncode != 0:
        raise SystemExit(f"deaddrop-admin {' '.join(argv)} failed:\n{proc.stderr.decode(errors='replace')}")
    return json.loads(proc.stdout)


def issue_cert(args: argparse.Namespace, name: str, data: str, where: str) -> dict[str, Any]:
    """A client certificate as PEM files (``--pem`` where ``cert issue`` has it, older code wrote PEM anyway)."""
    out = os.path.join(where, f"{name}.p12")
    try:
        return admin(args, "cert", "issue", name, "--pem", "--data-dir", data, "--out", out)
    except SystemExit:
        return admin(args, "cert", "issue", name, "--data-dir", data, "--out", out)


def tls_context(data: str, cert: dict[str, Any]) -> ssl.SSLContext:
    """Trust the server as the code under test has it: its CA-signed certificate, or (older code)
    the self-signed one in DATA/tls."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for path in (os.path.join(data, "ca", "ca.pem"), os.path.join(data, "tls", "server.pem")):
        if os.path.exists(path):
            ctx.load_verify_locations(path)
    ctx.load_cert_chain(cert["cert_pem"], cert["key_pem"], password=cert.get("password"))
    return ctx


def server_help(args: argparse.Namespace) -> str:
    proc = subprocess.run([os.path.join(VENV_BIN, "twistd"), "deaddrop", "--help"], capture_output=True,
                          env=code_env(args))
    return proc.stdout.decode(errors="replace")


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.rss_kb, self.fds, self.stop = pid, 0, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.rss_kb = max(self.rss_kb, load.rss_kb(self.pid))
            try:
                self.fds = max(self.fds, len(os.listdir(f"/proc/{self.pid}/fd")))
            except OSError:
                pass
            self.stop.wait(0.2)


# -- the legitimate users -----------------------------------------------------------------------

class Legit:
    """What the legitimate source and journalist did, and how long each step took."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {}
        self.attempts = 0
        self.failures: list[str] = []
        self.failed_after: list[float] = []  # how long each failed step took
        self.visits: list[tuple[str, float, float]] = []  # onion mode: (step, circuit build s, answer s)
        self.j_times: list[float] = []
        self.j_failures: list[str] = []
        self.reply_for: dict[str, str] = {}  # source uuid -> reply text posted
        self.current_reply = ""  # the text the journalist is to send to the newest source

    def step(self, name: str, fn: Any, *a: Any) -> Any:
        with self.lock:
            self.attempts += 1
        start = time.perf_counter()
        try:
            result = fn(*a)
        except Exception as e:  # noqa: BLE001 - every failure of a legitimate step is counted
            with self.lock:
                self.failures.append(f"{name}: {type(e).__name__}: {str(e)[:160]}")
                self.failed_after.append(time.perf_counter() - start)
            raise StepError(str(e)) from None
        with self.lock:
            self.times.setdefault(name, []).append(time.perf_counter() - start)
        return result


class TimedBrowser(SourceBrowser):
    """A source browser over one Tor circuit (ignored in shared mode), with a bounded wait per request.
    ``built`` receives how long its first connection took (over the onion: building the circuit,
    introduction and rendezvous included)."""

    built: list[float] | None = None
    circuits: set[int] = set()  # every legitimate circuit (onion mode: the client Tor says which closed)

    def __init__(self, target: Target, circuit: int | None) -> None:
        super().__init__(target.port)
        self.target, self.circuit = target, circuit
        if circuit is not None:
            TimedBrowser.circuits.add(circuit)
        self._first = True

    def build(self) -> float:
        """Open the circuit (a first stream, closed at once: over the onion, the introduction and
        rendezvous through the onion's PoW queue). -> seconds it took."""
        self._first = False
        started = time.perf_counter()
        try:
            self.target.connect(self.circuit, SOURCE_TIMEOUT).close()
        except OSError as e:
            raise StepError(f"{type(e).__name__}: {e}") from None
        took = time.perf_counter() - started
        if self.built is not None:
            self.built.append(took)
        return took

    def connection(self) -> CircuitHTTPConnection:
        if self._first and self.built is not None:
            try:
                self.build()
            except StepError:
                pass
        return CircuitHTTPConnection(self.target, self.circuit, SOURCE_TIMEOUT)


def on_fresh_circuit(legit: Legit, browser: TimedBrowser, name: str, fn: Any, *a: Any) -> Any:
    """Step ``name`` as the first thing done on ``browser``'s fresh circuit. Over the onion the
    circuit is built first, as a step of its own ("circuit"), so ``name`` times the server's
    answers on a built circuit; the pair (build, answer) is kept in ``legit.visits``."""
    if TimedBrowser.built is None:
        return legit.step(name, fn, *a)
    build = legit.step("circuit", browser.build)
    started = time.perf_counter()
    result = legit.step(name, fn, *a)
    with legit.lock:
        legit.visits.append((name, build, time.perf_counter() - started))
    return result


def source_loop(target: Target, legit: Legit, window_end: float, journalist_done: threading.Event) -> None:
    data = os.urandom(LEGIT_FILE_BYTES)
    while time.monotonic() < window_end:
        browser = TimedBrowser(target, fresh_circuit())  # Tor Browser's "new identity" each cycle
        nonce = uuid.uuid4().hex
        with legit.lock:
            legit.current_reply = f"abuse-bench reply {nonce}"
            reply = legit.current_reply
        try:
            codename = on_fresh_circuit(legit, browser, "create", browser.create)
            legit.step("login", lambda: (browser.log_out(), browser.log_in(codename)))
            legit.step("submit", browser.submit, f"abuse-bench message {nonce}", "legit.bin", data)
        except StepError:
            time.sleep(1.0)
            continue

        def read_reply() -> None:
            deadline = time.monotonic() + REPLY_TIMEOUT
            while True:
                with legit.lock:
                    sent = reply in legit.reply_for.values()
                if sent:
                    break
                if time.monotonic() > deadline:
                    raise StepError("no reply from the journalist in time")
                time.sleep(0.5)
            browser.log_out()
            page = browser.log_in(codename)
            if htmllib.escape(reply) not in page:
                raise StepError("the reply is not on /lookup")

        try:
            legit.step("read reply", read_reply)
        except StepError:
            pass
    journalist_done.set()


class JournalistLoop(threading.Thread):
    def __init__(self, port: int, context: ssl.SSLContext, token: str, legit: Legit, gnupg_home: str,
                 svs_key: str) -> None:
        super().__init__(daemon=True)
        self.client = JournalistClient(port, context, token)
        self.legit, self.home, self.svs_key = legit, gnupg_home, svs_key
        self.downloaded: dict[str, int] = {}
        self.stop = threading.Event()

    def timed(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        start = time.perf_counter()
        try:
            result = self.client.json(method, path, body, expect) if method != "DOWNLOAD" else self._download(path)
        except Exception as e:  # noqa: BLE001
            with self.legit.lock:
                self.legit.j_failures.append(f"{method} {path.split('/')[-1][:12]}: {str(e)[:160]}")
            raise StepError(str(e)) from None
        with self.legit.lock:
            self.legit.j_times.append(time.perf_counter() - start)
        return result

    def _download(self, url: str) -> bytes:
        status, _, body = self.client.request("GET", url)
        if status != 200:
            raise StepError(f"download: HTTP {status}")
        return body

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.round()
            except StepError:
                pass
            self.stop.wait(1.0)

    def round(self) -> None:
        listing = self.timed("GET", "/api/v1/sources")
        for src in listing["sources"]:
            count = src["number_of_documents"] + src["number_of_messages"]
            if count > self.downloaded.get(src["uuid"], 0):
                items = self.timed("GET", f"/api/v1/sources/{src['uuid']}/submissions")
                for item in items["submissions"]:
                    self.timed("DOWNLOAD", item["download_url"])
                self.downloaded[src["uuid"]] = len(items["submissions"])
            with self.legit.lock:
                replied, text = src["uuid"] in self.legit.reply_for, self.legit.current_reply
            key = (src.get("key") or {}).get("public")
            if not replied and key and self.downloaded.get(src["uuid"]):
                key_file = os.path.join(self.home, "source.asc")
                with open(key_file, "w") as f:
                    f.write(key)
                armored = load.encrypt_reply(self.home, text, [key_file, self.svs_key])
                self.timed("POST", f"/api/v1/sources/{src['uuid']}/replies",
                           {"reply": armored, "uuid": str(uuid.uuid4())}, 201)
                with self.legit.lock:
                    self.legit.reply_for[src["uuid"]] = text


# -- attack plumbing -------------------------------------------------------------------------------

class Attack:
    name = "none"
    what = "no attack (control row)"
    server_args: list[str] = []
    nofile: int | None = None
    streams = 0  # source-side connections it holds at once, at most: sizes its circuits (0: none)
    per_circuit = MAX_STREAMS  # of those, on one circuit at once
    circuits_wanted: int | None = None  # exactly this many circuits (else --attack-circuits or more)
    onion_only = False  # a row of issue 20's table: --mode onion only

    def __init__(self, ctx: "Context") -> None:
        self.ctx = ctx
        self.circuits = (ctx.circuits(self.streams, self.per_circuit, self.circuits_wanted)
                         if self.streams else None)
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes_sent = 0
        self.statuses: dict[str, int] = {}
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.notes: list[str] = []
        self.last_status: dict[int, int] = {}

    @property
    def circuit_count(self) -> int | None:
        """Circuits the attacker spreads over (None: no circuits, shared mode or not source-side)."""
        return self.circuits.count if self.circuits is not None and self.ctx.target.per_circuit else None

    def request(self, stream: Stream, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float = 120.0) -> tuple[int, str, str, int]:
        """``raw_request`` over the circuit of ``stream``; one the server closed is replaced."""
        answer = raw_request(self.ctx.target, stream.circuit, method, path, body, headers, timeout)
        if answer[0] == CLOSED_STATUS:
            stream.closed()
        return answer

    def count(self, sent: int, status: str | int | None = None, requests: int = 1) -> None:
        if status == CLOSED_STATUS:
            status = "circuit-closed"
        elif status == 0:
            status = "no-answer"  # closed before a status line: e.g. its circuit was closed meanwhile
        with self.lock:
            self.requests += requests
            self.bytes_sent += sent
            if status is not None:
                self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1

    def prepare(self) -> None:
        """Done before the measured window: what an attacker can set up at leisure."""

    def start(self) -> None:
        """Start the attack's threads."""

    def spawn(self, fn: Any, *a: Any) -> None:
        t = threading.Thread(target=fn, args=a, daemon=True)
        t.start()
        self.threads.append(t)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def after(self, server: Server) -> None:
        """Checks once the server has stopped."""


class Context:
    def __init__(self, server: Server, args: argparse.Namespace, template: "Template", network: Any = None) -> None:
        self.server, self.args, self.template, self.network = server, args, template, network
        self.target = server.attacker_target  # onion mode: never the legitimate source's client Tor
        self.undo: list[Any] = []

    def circuits(self, streams: int, per_circuit: int = MAX_STREAMS, count: int | None = None) -> CircuitSet:
        """An attacker's circuits: ``count``, else ``--attack-circuits``, or more if ``streams``
        need them. In onion mode the client Tor says when one was closed."""
        if not self.target.per_circuit:
            return CircuitSet(1, max_streams=1 << 30, introductions=None)  # shared mode: no circuits, one budget
        circuits = CircuitSet(count or max(self.args.attack_circuits, math.ceil(streams / per_circuit)), per_circuit)
        if self.network is not None:
            self.undo.append(self.network.watch_attackers(circuits.closed_circuit))
        return circuits


def raw_request(target: Target, circuit: int | None, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float = 120.0) -> tuple[int, str, str, int]:
    """One request on its own connection over ``circuit``: (status, Set-Cookie pair, body text, bytes sent)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    if body or method == "POST":
        head += f"Content-Length: {len(body)}\r\n"
    wire = head.encode() + b"\r\n" + body
    with target.connect(circuit, timeout) as s:
        s.sendall(wire)
        raw = read_all(s)
    head_end = raw.find(b"\r\n\r\n")
    lines = raw[:head_end].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1]) if lines and lines[0].startswith("HTTP/") else 0
    cookie = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "set-cookie":
            cookie = value.strip().split(";", 1)[0]
    return status, cookie, raw[head_end + 4:].decode("utf-8", "replace"), len(wire)


def form_body(fields: dict[str, str]) -> bytes:
    from urllib.parse import urlencode

    return urlencode(fields).encode()


FORM = "application/x-www-form-urlencoded"


def csrf_of(text: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', text)
    return htmllib.unescape(match.group(1)) if match else ""


def wrong_login(attack: Attack, slot: int | None = None) -> None:
    """GET /login for a form, then POST a well-formed codename that belongs to nobody: both on
    one circuit (``slot``, or the least busy), one stream at a time."""
    assert attack.circuits is not None
    with attack.circuits.stream(slot) as stream:
        status, cookie, text, sent = attack.request(stream, "GET", "/login")
        attack.count(sent, status if status == CLOSED_STATUS else None)
        if status == CLOSED_STATUS:
            return
        headers = {"Content-Type": FORM}
        if cookie:
            headers["Cookie"] = cookie
        body = form_body({"codename": codenames.generate_codename(attack.ctx.args.codename_words),
                          "csrf_token": csrf_of(text)})
        status, _, _, sent = attack.request(stream, "POST", "/login", body, headers)
        attack.count(sent, status)
        if slot is not None:
            attack.last_status[slot] = status


# -- the attacks, as in the issue's table ---------------------------------------------------------

class WrongCodenames(Attack):
    name = "wrong-codenames"
    what = "wrong well-formed codenames at POST /login, 60 a minute (issue: 31/min), not waiting for answers"
    rate = 1.0
    streams = 128

    def start(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(self.streams)  # never waiting on the server
        self.spawn(self.run)

    def one(self) -> None:
        try:
            wrong_login(self)
        except OSError:
            self.count(0, "conn-error", requests=0)

    def run(self) -> None:
        paced(self, self.rate, lambda: self.pool.submit(self.one))

    def finish(self) -> None:
        super().finish()
        self.pool.shutdown(wait=True, cancel_futures=True)


def paced(attack: Attack, rate: float, fire: Any) -> None:
    """Call ``fire`` ``rate`` times a second until the attack stops, whatever the server answers."""
    next_at = time.monotonic()
    while not attack.stop.is_set():
        fire()
        next_at += 1.0 / rate
        attack.stop.wait(max(0.0, next_at - time.monotonic()))


class ConcurrentLogins(Attack):
    name = "concurrent-logins"
    what = "120 wrong logins in flight at all times (issue: 120 at once)"
    streams = 120

    def start(self) -> None:
        for _ in range(self.streams):
            self.spawn(self.run)

    def run(self, slot: int | None = None) -> None:
        while not self.stop.is_set():
            try:
                wrong_login(self, slot)
            except OSError:
                self.count(0, "conn-error")
                self.stop.wait(0.2)


class ManyCircuitLogins(ConcurrentLogins):
    """Few streams on each of many circuits: per-circuit budgets alone do not hold it back."""

    name = "circuit-logins"
    per_circuit = 2

    def __init__(self, ctx: "Context") -> None:
        self.streams = self.per_circuit * max(8, ctx.args.attack_circuits)
        super().__init__(ctx)
        self.what = (f"many-circuit Argon2id flood: wrong logins, {self.per_circuit} in flight on each of "
                     f"{self.streams // self.per_circuit} circuits")

    def start(self) -> None:
        for worker in range(self.streams):
            self.spawn(self.run, worker // self.per_circuit)


class AnonSessions(Attack):
    name = "anon-sessions"
    what = "anonymous GET /login flood, pipelined on keep-alive connections (issue: 100k in 112 s)"
    streams = 8  # keep-alive connections
    batch = 50

    def start(self) -> None:
        for _ in range(self.streams):
            self.spawn(self.run)

    def run(self) -> None:
        request = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        assert self.circuits is not None
        while not self.stop.is_set():
            try:
                with self.circuits.stream() as stream, self.ctx.target.connect(stream.circuit, 30) as s:
                    reader = _ResponseReader(s)
                    while not self.stop.is_set():
                        s.sendall(request * self.batch)
                        for _ in range(self.batch):
                            status = reader.next_status()
                            self.count(len(request), status)
                            if status == CLOSED_STATUS:
                                stream.closed()
                                raise EOFError
            except (OSError, EOFError, ValueError, IndexError):
                self.count(0, "conn-error", requests=0)
                self.stop.wait(0.1)


class _ResponseReader:
    """Reads pipelined HTTP/1.1 responses (Content-Length or chunked) off one socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def _until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            data = self.sock.recv(262144)
            if not data:
                raise EOFError
            self.buf += data
        found, _, self.buf = self.buf.partition(sep)
        return found

    def _skip(self, n: int) -> None:
        while len(self.buf) < n:
            data = self.sock.recv(262144)
            if not data:
                raise EOFError
            self.buf += data
        self.buf = self.buf[n:]

    def next_status(self) -> int:
        head = self._until(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        lower = head.lower()
        if b"transfer-encoding: chunked" in lower:
            while True:
                size = int(self._until(b"\r\n").split(b";")[0], 16)
                self._skip(size + 2)
                if size == 0:
                    return status
        match = re.search(rb"(?m)^content-length:\s*(\d+)", lower)
        self._skip(int(match.group(1)) if match else 0)
        return status


class SlowUploads(Attack):
    name = "slow-uploads"
    what = "one codename logged in 128 times, 256 uploads dribbling 1,100 bytes per 20 s"
    sessions = 128
    per_session = 2
    streams = sessions * per_session  # session i logs in and uploads on circuit i (mod their number)
    dribble_bytes, dribble_every = 1100, 20.0

    def prepare(self) -> None:
        assert self.circuits is not None
        browser = TimedBrowser(self.ctx.target, self.circuits.current(0))
        codename = browser.create()
        self.count(0, requests=3)

        self.logins = self.sessions_by(lambda b: b.log_in(codename), 4, "login-refused", 180)
        self.notes.append(f"the attacker got {len(self.logins)} of {self.sessions} sessions in its preparation")

    def sessions_by(self, step: Any, requests: int, refused: str, seconds: float) -> list[tuple[int, str, str]]:
        """``self.sessions`` logged-in browsers, session i on circuit i, each made by ``step``
        (retried while the server refuses, for up to ``seconds``). -> (session, cookie, csrf)s"""
        deadline = time.monotonic() + seconds

        def one(session: int) -> tuple[int, str, str] | None:
            assert self.circuits is not None
            b = TimedBrowser(self.ctx.target, None)
            while time.monotonic() < deadline:  # a defended server may refuse or delay them
                b.circuit = self.circuits.current(session)
                try:
                    step(b)
                    self.count(0, requests=requests)
                    return session, b.cookie, b.csrf
                except StepError as e:
                    if f"HTTP {CLOSED_STATUS}" in str(e):
                        self.circuits.replace(session, b.circuit)
                    self.count(0, refused, requests=0)
                    time.sleep(2.0)
            return None

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            return [login for login in pool.map(one, range(self.sessions)) if login]

    def start(self) -> None:
        self.spawn(self.run)

    def _open(self, session: int, cookie: str, csrf: str) -> socket.socket | None:
        boundary = uuid.uuid4().hex
        preamble = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{csrf}\r\n"
                    f"--{boundary}\r\nContent-Disposition: form-data; name=\"msg\"\r\n\r\nhi\r\n"
                    f"--{boundary}\r\nContent-Disposition: form-data; name=\"fh\"; filename=\"slow.bin\"\r\n"
                    "Content-Type: application/octet-stream\r\n\r\n").encode()
        head = (f"POST /submit HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {50 << 20}\r\n\r\n").encode()
        assert self.circuits is not None
        try:
            s = self.ctx.target.connect(self.circuits.current(session), 5)
            s.sendall(head + preamble)
            s.setblocking(False)
        except OSError:
            self.count(0, "conn-error", requests=0)
            return None
        self.count(len(head) + len(preamble), "opened")
        return s

    def run(self) -> None:
        assert self.circuits is not None
        slots: list[list[Any]] = []  # [socket or None, session, cookie, csrf, next send time]
        for session, cookie, csrf in self.logins:
            for _ in range(self.per_session):
                slots.append([None, session, cookie, csrf, 0.0])
        dribble = b"x" * self.dribble_bytes
        closed_line = f"HTTP/1.1 {CLOSED_STATUS} ".encode()
        while not self.stop.is_set():
            now = time.monotonic()
            for slot in slots:
                s = slot[0]
                if s is not None:
                    try:
                        answer = s.recv(65536)
                        if answer.startswith(closed_line):  # the server closed this circuit
                            self.circuits.replace(slot[1], self.circuits.current(slot[1]))
                        if answer == b"":  # answered or closed: the attacker opens another
                            raise OSError
                        s.close()
                        slot[0] = None
                        continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        s.close()
                        slot[0] = None
                        continue
                if slot[0] is None:
                    slot[0] = self._open(slot[1], slot[2], slot[3])
                    slot[4] = time.monotonic() + self.dribble_every
                elif now >= slot[4]:
                    try:
                        slot[0].send(dribble)
                        self.count(len(dribble), requests=0)
                    except OSError:
                        slot[0].close()
                        slot[0] = None
                    slot[4] = now + self.dribble_every
            self.stop.wait(0.5)
        for slot in slots:
            if slot[0] is not None:
                slot[0].close()


class ManyIdentityUploads(SlowUploads):
    """The slow-uploads attack by an attacker who read the defences: a codename of its own for
    every two uploads (the per-identity cap), 16 uploads a circuit, and each upload just above
    the server's 2 KiB/s minimum rate, so that every upload pump stays held."""

    name = "slow-uploads-many"
    what = "128 codenames (one /create each), 256 uploads at 2,600 bytes a second, 16 per circuit"
    per_session = 2
    dribble_bytes, dribble_every = 2600, 1.0

    def prepare(self) -> None:
        self.logins = self.sessions_by(lambda b: b.create(), 3, "create-refused", 240)
        self.notes.append(f"the attacker made {len(self.logins)} of {self.sessions} codenames in its preparation")


class IdleConnections(Attack):
    name = "idle-connections"
    what = "1,010 sockets at 35 bytes/s each (header lines), server under ulimit -n 1024"
    nofile = 1024
    sockets = 1010
    streams = sockets  # socket i on circuit i (mod their number)

    def start(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
        self.spawn(self.run)

    def _open(self, i: int) -> socket.socket | None:
        assert self.circuits is not None
        try:
            return self.ctx.target.open_nonblocking(self.circuits.current(i))
        except OSError:
            return None

    def run(self) -> None:
        socks: list[Any] = [None] * self.sockets
        started = [False] * self.sockets
        line = b"X-Drip: " + b"a" * 25 + b"\r\n"  # 35 bytes
        while not self.stop.is_set():
            tick = time.monotonic()
            for i in range(self.sockets):
                s = socks[i]
                if s is None:
                    s = socks[i] = self._open(i)
                    started[i] = False
                    if s is None:
                        continue
                try:
                    if not started[i]:
                        s.send(b"GET / HTTP/1.1\r\n")
                        started[i] = True
                        self.count(16, "opened")
                    else:
                        try:
                            if s.recv(4096) == b"":
                                raise ConnectionResetError
                        except BlockingIOError:
                            pass
                        s.send(line)
                        self.count(len(line), requests=0)
                except (BlockingIOError, InterruptedError):
                    pass  # still connecting
                except OSError:
                    s.close()
                    socks[i] = None
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))
        for s in socks:
            if s is not None:
                s.close()


class GenerateCreate(Attack):
    name = "generate-create"
    what = "GET /generate + POST /create, 1 a second, never submitting (issue: 200 in 233 s)"
    rate = 1.0
    streams = 64

    def start(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(self.streams)  # never waiting on the server
        self.spawn(self.run)

    def one(self) -> None:
        assert self.circuits is not None
        try:
            with self.circuits.stream() as stream:
                status, cookie, text, sent = self.request(stream, "GET", "/generate")
                self.count(sent)
                match = re.search(r'id="codename"[^>]*>([^<]+)<', text)
                if not match:
                    self.count(0, f"no-codename-{status}", requests=0)
                    return
                body = form_body({"codename": htmllib.unescape(match.group(1)).strip(),
                                  "csrf_token": csrf_of(text)})
                status, _, _, sent = self.request(stream, "POST", "/create", body,
                                                  {"Content-Type": FORM, "Cookie": cookie})
                self.count(sent, status)
        except OSError:
            self.count(0, "conn-error", requests=0)

    def run(self) -> None:
        paced(self, self.rate, lambda: self.pool.submit(self.one))

    def finish(self) -> None:
        super().finish()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def after(self, server: Server) -> None:
        rows, folders = server.pending_sources()
        self.notes.append(f"pending sources after the attack: {rows} (store folders {folders})")
        self.pending_left = rows
        template = self.ctx.template
        if not template.purge_args:
            self.notes.append(f"pending sources left: {rows} ({template.purge_note})")
            return
        # Let the purge's time pass: the pending sources are made three days old, then the
        # server starts again (its purge runs at start-up) and gets a minute to remove them.
        db = os.path.join(server.data, "db.sqlite")
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("UPDATE sources SET created_at = created_at - 3 * 86400 WHERE pending = 1")
        conn.close()
        again = Server(server.workdir, template.dir, self.ctx.args, template.purge_args, None, copy=False)
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and server.pending_sources()[0] > 0:
                time.sleep(1.0)
        finally:
            again.stop()
        rows, folders = server.pending_sources()
        self.pending_left = rows
        self.notes.append(f"pending sources left: {rows} (store folders {folders}; {template.purge_note}, "
                          "their creation made 3 days old)")


class JournalistLogins(Attack):
    name = "journalist-logins"
    what = "60 concurrent API logins with the victim's certificate and passphrase, guessing codes"
    workers = 60

    def start(self) -> None:
        t = self.ctx.template
        self.context = tls_context(self.ctx.server.data, t.attacker_cert)
        for _ in range(self.workers):
            self.spawn(self.run)

    def run(self) -> None:
        victim = self.ctx.template.victim
        client = JournalistClient(self.ctx.server.journalist_port, self.context)
        while not self.stop.is_set():
            body = {"username": victim["username"], "passphrase": victim["passphrase"],
                    "one_time_code": f"{random.randrange(10**6):06d}"}
            try:
                status, _, _ = client.request("POST", "/api/v1/token", body)
                self.count(len(str(body)) + 200, status)
            except StepError:
                self.count(0, "conn-error", requests=0)
                client.close()
                self.stop.wait(0.2)
        client.close()

    def after(self, server: Server) -> None:
        checked = sum(n for status, n in self.statuses.items() if status not in ("429", "503", "conn-error"))
        self.notes.append(f"one-time codes checked: {checked} of {self.requests} attempts")


# -- issue 20's rows, over the real onion path (--mode onion) -------------------------------------

def build_circuits(attack: Attack) -> None:
    """At leisure, before the measured window: each of the attacker's circuits is built by a first
    request, no faster than the onion's PoW queue admits introductions."""
    assert attack.circuits is not None

    def build(slot: int) -> None:
        circuit = attack.circuits.wait_ready(slot)
        try:
            raw_request(attack.ctx.target, circuit, "GET", "/", timeout=60)
            attack.count(0, requests=1)
        except OSError:
            attack.count(0, "conn-error", requests=0)

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        list(pool.map(build, range(attack.circuits.count)))


class OnionWrongCodenames(Attack):
    name = "onion-wrong-codenames"
    what = ("wrong codenames from 40 circuits, each sending the next as soon as answered (throttled, "
            "then closed), closed circuits replaced at the PoW rate")
    onion_only = True
    circuits_wanted = 40
    streams, per_circuit = 40, 1

    def prepare(self) -> None:
        build_circuits(self)

    def start(self) -> None:
        for slot in range(self.circuits_wanted):
            self.spawn(self.run, slot)

    def run(self, slot: int) -> None:
        while not self.stop.is_set():
            try:
                wrong_login(self, slot)
                if self.last_status.get(slot) in (0, None):
                    self.stop.wait(1.0)  # dropped: was the circuit closed? (see OnionSlowBodies.run)
            except OSError:
                self.count(0, "conn-error", requests=0)
                assert self.circuits is not None
                self.circuits.replace(slot, self.circuits.current(slot))  # paced, as above


class OnionNewSources(OnionWrongCodenames):
    name = "onion-new-sources"
    what = "20 new sources at once, each on a fresh circuit, right after the 40-circuit wrong-codename flood"
    burst = 20

    def legit_phase(self, target: Any, legit: Legit, seconds: float) -> None:
        """The flood for ``seconds``, then it stops and 20 sources arrive at once."""
        self.stop.wait(seconds)
        self.finish()

        def one() -> None:
            try:
                browser = TimedBrowser(target, fresh_circuit())
                on_fresh_circuit(legit, browser, "create", browser.create)
            except StepError:
                pass

        threads = [threading.Thread(target=one, daemon=True) for _ in range(self.burst)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=SOURCE_TIMEOUT + 10)
        times = legit.times.get("create", [])
        if times:
            self.notes.append(f"the {self.burst} new sources: create p50/p99 {fmt_pair(times)} s "
                              f"(the server's answer, once the circuit was built; in onion mode see the visits)")


class OnionCreateFlood(Attack):
    name = "onion-create-flood"
    what = ("GET /generate + POST /create, each from a fresh circuit, at the PoW rate (5 new circuits a second); "
            "returning sources (made before it) log in and submit during it, each visit on a fresh circuit")
    onion_only = True
    returning = 3

    def prepare(self) -> None:
        """The returning sources, made at leisure before the flood (one submission each)."""
        self.codenames = []
        for i in range(self.returning):
            browser = TimedBrowser(self.ctx.server.target, fresh_circuit())  # the source's own client Tor
            codename = browser.create()
            browser.submit(f"abuse-bench returning source {i}", "first.bin", b"x" * 1000)
            self.codenames.append(codename)
            self.count(0, requests=5)

    def legit_phase(self, target: Any, legit: Legit, seconds: float) -> None:
        """For ``seconds``: a returning source comes back (fresh circuit), logs in, sends a message
        and a file; then the next. issue 20: a /create never takes a login's place."""
        data = os.urandom(LEGIT_FILE_BYTES)
        end, i = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            browser = TimedBrowser(target, fresh_circuit())
            codename = self.codenames[i % len(self.codenames)]
            i += 1
            try:
                on_fresh_circuit(legit, browser, "login", browser.log_in, codename)
                legit.step("submit", browser.submit, f"abuse-bench returning {uuid.uuid4().hex}", "legit.bin", data)
            except StepError:
                time.sleep(1.0)

    def start(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(64)
        self.spawn(self.run)

    def run(self) -> None:
        while not self.stop.is_set():
            self.stop.wait(max(0.0, INTRODUCTIONS.ready_at() - time.monotonic()))
            if not self.stop.is_set():
                self.pool.submit(self.one, fresh_circuit())

    def one(self, circuit: int) -> None:
        try:
            status, cookie, text, sent = raw_request(self.ctx.target, circuit, "GET", "/generate", timeout=60)
            self.count(sent)
            match = re.search(r'id="codename"[^>]*>([^<]+)<', text)
            if not match:
                self.count(0, f"no-codename-{status}", requests=0)
                return
            body = form_body({"codename": htmllib.unescape(match.group(1)).strip(), "csrf_token": csrf_of(text)})
            status, _, _, sent = raw_request(self.ctx.target, circuit, "POST", "/create", body,
                                             {"Content-Type": FORM, "Cookie": cookie}, timeout=60)
            self.count(sent, status)
        except OSError:
            self.count(0, "conn-error", requests=0)

    def finish(self) -> None:
        super().finish()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def after(self, server: Server) -> None:
        rows, folders = server.pending_sources()
        self.notes.append(f"pending sources after the attack: {rows} rows (store folders: {folders})")


class OnionSlowBodies(Attack):
    name = "onion-slow-bodies-64"
    what = ("64 circuits x 16 streams holding slow POST bodies (a byte every 2 s), each reopened at once "
            "when cut, closed circuits replaced at the PoW rate; server under ulimit -n 1024")
    onion_only = True
    nofile = 1024
    circuits_wanted = 64
    per_circuit = MAX_STREAMS
    head = (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 100000\r\n\r\ncodename=")

    def __init__(self, ctx: "Context") -> None:
        self.streams = self.circuits_wanted * self.per_circuit
        super().__init__(ctx)

    def prepare(self) -> None:
        build_circuits(self)

    def start(self) -> None:
        for slot in range(self.circuits_wanted):
            self.spawn(self.run, slot)

    def run(self, slot: int) -> None:
        assert self.circuits is not None
        held: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                circuit = self.circuits.wait_ready(slot, self.stop)
                while len(held) < self.per_circuit and not self.stop.is_set():
                    try:
                        s = self.ctx.target.connect(circuit, 30)
                        s.sendall(self.head)
                        self.count(len(self.head))
                        held.append(s)
                    except OSError:
                        # The circuit could not be had (its introduction failed): a fresh one,
                        # paced, rather than the client Tor retrying this one at once.
                        self.count(0, "conn-error", requests=0)
                        self.circuits.replace(slot, circuit)
                        break
                cut = False
                for s in list(held):
                    try:
                        try:  # (no select(): this process holds more than 1,024 descriptors)
                            if not s.recv(4096, socket.MSG_DONTWAIT):
                                raise OSError("cut")
                            raise OSError("answered")  # refused with a page: as good as cut
                        except BlockingIOError:
                            pass
                        s.send(b"x")
                        self.bytes_sent += 1
                    except OSError:
                        self.count(0, "cut", requests=0)
                        held.remove(s)
                        s.close()
                        cut = True
                # Reopened at once, but not before the client Tor could say whether the circuit
                # itself was closed: a stream on a closed circuit's name would have that Tor
                # build another one, an introduction past the PoW queue's rate.
                self.stop.wait(2.0 if not cut else 1.0)
        finally:
            for s in held:
                s.close()


class OnionSlowBodies256(OnionSlowBodies):
    name = "onion-slow-bodies-256"
    what = OnionSlowBodies.what.replace("64 circuits", "256 circuits")
    circuits_wanted = 256


ATTACKS = [Attack, WrongCodenames, ConcurrentLogins, ManyCircuitLogins, AnonSessions, SlowUploads, ManyIdentityUploads, IdleConnections, GenerateCreate,
           JournalistLogins, OnionWrongCodenames, OnionNewSources, OnionCreateFlood, OnionSlowBodies,
           OnionSlowBodies256]


# -- one prepared data dir for every run ------------------------------------------------------------

class Template:
    def __init__(self, workdir: str, args: argparse.Namespace) -> None:
        self.dir = os.path.join(workdir, "template")
        os.mkdir(self.dir)
        data = os.path.join(self.dir, "data")
        self.svs_key = load.make_svs(self.dir)
        admin(args, "ca", "init", "--data-dir", data)
        # The server initialises a data dir at its first start; deaddrop-admin refuses one before.
        Server(self.dir, self.dir, args, [], None, copy=False).stop()
        # A certificate is bound to the account of its name. The attacker of journalist-logins
        # holds the victim's certificate and passphrase (a stolen laptop), not the one-time code.
        self.cert = issue_cert(args, "abusebench", data, self.dir)
        self.attacker_cert = issue_cert(args, "victim", data, self.dir)
        self.account = admin(args, "journalist", "add", "abusebench", "--data-dir", data, "--kdf-cost", args.kdf_cost)
        self.victim = admin(args, "journalist", "add", "victim", "--data-dir", data, "--kdf-cost", args.kdf_cost)
        self.purge_note = "the server has no pending-source purge"
        self.purge_args: list[str] = []
        help_text = server_help(args)
        match = re.search(r"--(pending-source[\w-]*)", help_text)
        if match:
            self.purge_args = [f"--{match.group(1)}", args.pending_purge]
            self.purge_note = f"after the purge, --{match.group(1)} {args.pending_purge}"


# -- running one attack ---------------------------------------------------------------------------

class Row:
    def __init__(self, attack: Attack, legit: Legit, sampler: Sampler, seconds: float, load_avg: float) -> None:
        self.attack, self.legit, self.sampler, self.seconds = attack, legit, sampler, seconds
        self.load_avg = load_avg
        self.load_end = load_avg  # the 1-minute load average when the row ended


def run_one(cls: type[Attack], template: Template, args: argparse.Namespace, workdir: str,
            network: Any = None) -> Row:
    run_dir = tempfile.mkdtemp(prefix=f"{cls.name[:8]}-", dir=workdir)
    extra = list(cls.server_args)
    if cls is GenerateCreate:
        extra += template.purge_args
    server = Server(run_dir, template.dir, args, extra, cls.nofile, network=network)
    closed_before = network.attacker_closed if network is not None else 0
    rendezvous_before = network.attacker_rendezvous if network is not None else 0
    attack_started = time.monotonic()
    sampler = Sampler(server.proc.pid)
    sampler.start()
    attack = None
    try:
        context = tls_context(server.data, template.cert)
        journalist = JournalistClient(server.journalist_port, context)
        token = journalist.json("POST", "/api/v1/token", {
            "username": template.account["username"], "passphrase": template.account["passphrase"],
            "one_time_code": load.totp_now(template.account["totp_secret"], [-1])})["token"]
        journalist.close()
        ctx = Context(server, args, template, network)
        attack = cls(ctx)
        attack.prepare()
        if TimedBrowser.built is not None:
            TimedBrowser.built = []  # circuits of the row's legitimate visits only
        prepared_requests, prepared_bytes = attack.requests, attack.bytes_sent
        attack.requests = attack.bytes_sent = 0
        legit = Legit()
        home = os.path.join(run_dir, "jg")
        os.mkdir(home, 0o700)
        jloop = JournalistLoop(server.journalist_port, context, token, legit, home, template.svs_key)
        load_avg = os.getloadavg()[0]
        rendezvous_before = network.attacker_rendezvous if network is not None else 0
        attack_started = time.monotonic()
        attack.start()
        time.sleep(min(5.0, args.seconds / 6))  # the attack ramps up before the legitimate users arrive
        began = time.monotonic()
        done = threading.Event()
        jloop.start()
        if hasattr(attack, "legit_phase"):
            source = threading.Thread(target=attack.legit_phase, args=(server.target, legit, args.seconds), daemon=True)
        else:
            source = threading.Thread(target=source_loop, args=(server.target, legit, began + args.seconds, done),
                                      daemon=True)
        source.start()
        source.join(timeout=args.seconds + 4 * SOURCE_TIMEOUT + REPLY_TIMEOUT)
        if source.is_alive():
            legit.failures.append("the legitimate source was still stuck when the run was cut off")
        jloop.stop.set()
        jloop.join(timeout=SOURCE_TIMEOUT)
        attack.finish()
        seconds = time.monotonic() - began + min(5.0, args.seconds / 6)
        load_end = os.getloadavg()[0]
        if prepared_requests:
            attack.notes.append(f"prepared with {prepared_requests} requests")
    finally:
        if attack is not None:
            for undo in attack.ctx.undo:
                undo()
        sampler.stop.set()
        sampler.join()
        server.stop()
        attack_seconds = time.monotonic() - attack_started
        subprocess.run(["gpgconf", "--homedir", os.path.join(run_dir, "jg"), "--kill", "gpg-agent"],
                       capture_output=True)
    if network is not None:
        if TimedBrowser.built:
            attack.notes.append(f"legitimate circuits: {len(TimedBrowser.built)}, built (introduction and rendezvous "
                                f"through the onion's PoW queue) in p50/p99 {fmt_pair(TimedBrowser.built)} s")
        TimedBrowser.built = []
        for note in visit_notes(legit):
            attack.notes.append(note)
        closed = {c: r for c, r in network.source_watcher.reasons.items() if c in TimedBrowser.circuits}
        if closed:
            why = ", ".join(f"{r}: {n}" for r, n in sorted(collections.Counter(closed.values()).items()))
            attack.notes.append(f"legitimate circuits closed while in use or after (the source's client Tor's "
                                f"reasons): {why}")
        TimedBrowser.circuits = set()
        moved = f"; the attacker built {attack.circuits.replaced} fresh ones" if attack.circuit_count else ""
        attack.notes.append(f"attacker circuits closed, as the attackers' client Tors saw them: "
                            f"{network.attacker_closed - closed_before}{moved}")
        if attack.circuit_count or isinstance(attack, OnionCreateFlood):
            sent = network.attacker_rendezvous - rendezvous_before
            attack.notes.append(f"introductions the attackers' Tors sent (rendezvous circuits) from the attack's start "
                                f"until the server stopped: {sent}, {sent / attack_seconds:.1f}/s over "
                                f"{attack_seconds:.0f} s (the PoW queue admits {INTRODUCTIONS.rate:g}/s, burst "
                                f"{INTRODUCTIONS.burst})")
    elif server.target.per_circuit:
        closed = server.circuits_closed()
        moved = f"; the attacker built {attack.circuits.replaced} fresh ones" if attack.circuit_count else ""
        attack.notes.append(f"circuits the server closed (CLOSECIRCUIT, emulated): {closed}{moved}")
    checks = server.login_checks()
    if checks is not None:
        logins = len(legit.times.get("login", [])) + len(legit.times.get("read reply", []))
        attack.notes.append(f"Argon2id runs for logins: {checks[0]} (legitimate logins that succeeded: {logins}); "
                            f"codenames turned away by their tag: {checks[1]}")
        attack.argon2id_runs = checks[0]
    attack.after(server)
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    row = Row(attack, legit, sampler, seconds, load_avg)
    row.load_end = load_end
    return row


def visit_notes(legit: Legit) -> list[str]:
    """Onion mode: each legitimate visit's circuit build and the server's answer, paired."""
    notes = []
    by_step: dict[str, list[tuple[float, float]]] = {}
    for name, build, answer in legit.visits:
        by_step.setdefault(name, []).append((build, answer))
    for name, pairs in sorted(by_step.items()):
        builds, answers = [b for b, _ in pairs], [a for _, a in pairs]
        totals = [b + a for b, a in pairs]
        slowest = sorted(pairs, key=sum, reverse=True)[:3]
        notes.append(f"legitimate {name} visits on fresh circuits: {len(pairs)}; circuit build p50/p99 "
                     f"{fmt_pair(builds)} s, then the server's answer p50/p99 {fmt_pair(answers)} s (build + answer "
                     f"{fmt_pair(totals)} s; slowest: {', '.join(f'{b:.2f} + {a:.2f}' for b, a in slowest)})")
    return notes


def fmt_p99(values: list[float]) -> str:
    return f"{percentile(values, 99):.2f}" if values else "-"


def fmt_pair(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 50):.2f}/{percentile(values, 99):.2f}"


def print_row(row: Row, out: Any) -> None:
    a, legit = row.attack, row.legit
    ok = legit.attempts - len(legit.failures)
    j_total = len(legit.j_times) + len(legit.j_failures)
    j_p99 = percentile(legit.j_times, 99) * 1000 if legit.j_times else float("nan")
    circuits = str(a.circuit_count) if a.circuit_count else "-"
    print(f"{a.name:<18} {circuits:>4} {a.requests / row.seconds:>8.1f} {a.bytes_sent / 1e6:>8.2f}  "
          f"{ok:>3}/{legit.attempts:<3} {fmt_pair(legit.times.get('login', [])):>11} "
          f"{fmt_pair(legit.times.get('submit', [])):>11} {j_p99:>7.0f} {len(legit.j_failures):>3}/{j_total:<4} "
          f"{row.sampler.rss_kb / 1024:>6.0f} {row.sampler.fds:>5} {row.load_avg:>5.1f} "
          f"{fmt_p99(legit.times.get('circuit', [])):>9}", file=out, flush=True)


HEADER = (f"{'attack':<18} {'circ':>4} {'att req/s':>8} {'att MB':>8}  {'src ok':>7} {'login p50/99':>11} "
          f"{'submit p50/99':>11} {'j p99ms':>7} {'j err':>8} {'RSS MB':>6} {'fds':>5} {'load':>5} {'circ p99':>9}")


def verdict(row: Row) -> list[str]:
    legit = row.legit
    misses = []
    if legit.failures or legit.attempts == 0:
        misses.append(f"legit success {legit.attempts - len(legit.failures)}/{legit.attempts}")
    if legit.j_failures:
        misses.append(f"journalist errors {len(legit.j_failures)}")
    if legit.times.get("login") and percentile(legit.times["login"], 99) >= 5:
        misses.append("login p99 >= 5 s")
    if legit.times.get("submit") and percentile(legit.times["submit"], 99) >= 10:
        misses.append("submit p99 >= 10 s")
    if legit.j_times and percentile(legit.j_times, 99) >= 0.5:
        misses.append("journalist p99 >= 500 ms")
    if row.sampler.rss_kb >= 512 * 1024:
        misses.append("RSS >= 512 MB")
    if getattr(row.attack, "pending_left", 0) > 0:
        misses.append("pending sources left")
    return misses


def supports_circuits(args: argparse.Namespace) -> bool:
    """Whether the code under test has the Tor-only listener bench/_tor_like.py builds on."""
    # Where today's code has them, or an older checkout (--code) had them.
    check = ("import importlib\n"
             "def first(*names):\n"
             "    for name in names:\n"
             "        try:\n"
             "            return importlib.import_module(name)\n"
             "        except ImportError:\n"
             "            pass\n"
             "    raise ImportError(names)\n"
             "s = first('deaddrop.service.source_side', 'deaddrop.server')\n"
             "c = first('deaddrop.transport.circuits', 'deaddrop.web._common.circuits')\n"
             "assert c.from_tor and c.circuit_of_address\n"
             "assert hasattr(s, 'add_tor_only_listener') or hasattr(s, '_add_tor_only_listener')")
    return subprocess.run([sys.executable, "-c", check], capture_output=True, env=code_env(args), cwd="/").returncode == 0


def code_revision(code: str) -> str:
    marker = os.path.join(code, "COMMIT")  # written beside a `git archive` export
    if os.path.exists(marker):
        with open(marker) as f:
            return f.read().strip()[:10]
    commit = subprocess.run(["git", "-C", code, "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True)
    return commit.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [cls.name for cls in ATTACKS]
    parser.add_argument("--attacks", default="all", help=f"comma-separated, from: {', '.join(names)} (default all)")
    parser.add_argument("--seconds", type=float, default=45.0, help="measured window per attack (default 45)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run: 15 s windows, insecure-fast KDF")
    parser.add_argument("--kdf-cost", default="default", help="server Argon2id cost (default: the real one)")
    parser.add_argument("--codename-words", type=int, default=7, help="words in the server's codenames (default 7)")
    parser.add_argument("--pending-purge", default="1",
                        help="value for the server's pending-source purge option, if it has one (default 1)")
    parser.add_argument("--mode", choices=("circuits", "shared", "onion"), default="circuits",
                        help="circuits: source-side clients come over Tor circuits (PROXY listener); "
                             "shared: the plain listener, one budget for all; onion: the real onion path, "
                             "twistd deaddrop --tor launch in a private Tor network, every source-side client "
                             "through a client Tor, one circuit per SOCKS username; its default attacks are "
                             "issue 20's rows (default circuits)")
    parser.add_argument("--attack-circuits", type=int, default=8,
                        help="circuits each attacker spreads over, at least (more where its concurrency needs them "
                             "at 16 streams a circuit; default 8)")
    parser.add_argument("--attacker-tors", type=int, default=2,
                        help="onion mode: client Tors the attackers' circuits are spread over, none of them the "
                             "legitimate source's (default 2)")
    parser.add_argument("--code", help="run the server and admin commands from this checkout instead")
    parser.add_argument("--keep", action="store_true", help="keep each run's work dir (server.log, data)")
    parser.add_argument("--repeat", type=int, default=1, help="run the chosen attacks this many times, interleaved")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.kdf_cost = 15.0, "insecure-fast"
    if args.attacks == "all":
        chosen = [cls.name for cls in ATTACKS if cls is Attack or cls.onion_only == (args.mode == "onion")]
    else:
        chosen = [n.strip() for n in args.attacks.split(",")]
    unknown = set(chosen) - set(names)
    if unknown:
        parser.error(f"unknown attack(s): {', '.join(sorted(unknown))}")

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the idle-connections attacker needs >1,010 sockets
    workdir = tempfile.mkdtemp(prefix="dd-abuse-", dir="/tmp")  # short: gpg-agent socket paths
    code = os.path.abspath(args.code) if args.code else os.path.dirname(HERE)
    revision = code_revision(code)
    print(f"DeadDrop abuse bench: code {code} ({revision}), kdf-cost {args.kdf_cost}, {args.seconds:g} s per attack, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.mode == "circuits" and not supports_circuits(args):
        print(f"NOTE: the code at {code} has no Tor-only PROXY listener (service.source_side.add_tor_only_listener, server.add_tor_only_listener or "
              "_add_tor_only_listener, circuits.from_tor): running --mode shared instead")
        args.mode = "shared"
    if args.mode == "onion":
        print(f"mode: onion, twistd deaddrop --tor launch in a private Tor network (3 authorities, 2 relays, "
              f"{1 + args.attacker_tors} client Tors): the server's own Tor, PoW on, and its Tor-only socket; the "
              f"legitimate source through a client Tor of its own, the attackers through {args.attacker_tors} others "
              f"(--attacker-tors), one circuit per SOCKS username; the legitimate source takes a fresh circuit each "
              f"visit and builds it first (step \"circuit\"), so its circuit build and the server's answer are timed "
              f"apart; circuits the server closes (CLOSECIRCUIT) are seen on the client Tors' control ports and replaced, "
              f"attackers' new circuits no faster than the onion's PoW queue admits introductions "
              f"({INTRODUCTIONS.rate:g}/s, burst {INTRODUCTIONS.burst})")
    elif args.mode == "circuits":
        print(f"mode: circuits, --tor none plus the Tor-only listener haproxy:unix:DATA/tor/source.sock "
              f"(bench/_tor_like.tac): each source-side connection starts with Tor's PROXY line naming its "
              f"circuit; the legitimate source takes a fresh circuit each cycle; each attacker spreads over "
              f"N = {args.attack_circuits} circuits (--attack-circuits), or more where it needs more than 16 "
              f"streams a circuit (column circ); a circuit the server closes is replaced by a fresh one, "
              f"attackers' new circuits no faster than the onion's PoW queue admits introductions "
              f"({INTRODUCTIONS.rate:g}/s, burst {INTRODUCTIONS.burst})")
    else:
        print("mode: shared, --tor none, one TCP listener per interface: every attacker and the legitimate source "
              "share the server's single LOCAL budget (no per-circuit identity)")
    template = Template(workdir, args)
    print(f"pending-source purge: {template.purge_note}")
    rows: list[Row] = []
    network = None
    try:
        if args.mode == "onion":
            from _onion import OnionNetwork

            network = OnionNetwork(attacker_tors=args.attacker_tors)
            TimedBrowser.built = []
        print(HEADER, flush=True)
        for _ in range(args.repeat):
            for cls in ATTACKS:
                if cls.name in chosen:
                    rows.append(run_one(cls, template, args, workdir, network))
                    print_row(rows[-1], sys.stdout)
    finally:
        if network is not None:
            network.stop()
        for home in (os.path.join(template.dir, "svs"),):
            subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], capture_output=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("columns: circuits the attacker spreads over (circuits mode; - where none); attacker requests/s over the window (connections opened, for idle-connections) and MB sent; "
          "legitimate source steps ok/attempted (create, login, submit, read reply; onion mode: building each "
          "fresh circuit is a step of its own, \"circuit\"); login and submit p50/p99 in s (the server's answers "
          "on a built circuit); journalist p99 over all its API requests, and its errors; server peak RSS and open "
          "fds; the machine's 1-minute load average when the attack started (other work shares these CPUs); "
          "onion mode: p99 of the legitimate source's circuit builds, in s (its own client Tor; introduction and "
          "rendezvous through the onion's PoW queue)")
    print("targets: 100% legit success, login p99 < 5 s, submit p99 < 10 s, journalist p99 < 500 ms, RSS < 512 MB, "
          "no pending sources left after purge")
    all_ok = True
    for row in rows:
        misses = verdict(row)
        all_ok &= not misses
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(row.attack.statuses.items()))
        print(f"- {row.attack.name}: {row.attack.what}. {'MET' if not misses else 'MISSED: ' + '; '.join(misses)}.")
        busy = " (ABOVE 4 when the row started: the machine was busy)" if row.load_avg > 4 else ""
        print(f"    1-minute load average: {row.load_avg:.1f} when the row started{busy}, {row.load_end:.1f} when it ended")
        if statuses:
            print(f"    attacker answers: {statuses}")
        for note in row.attack.notes:
            print(f"    {note}")
        if row.legit.failed_after:
            print(f"    legit failures came after p50/max {fmt_pair(row.legit.failed_after).split('/')[0]}/"
                  f"{max(row.legit.failed_after):.2f} s")
        for failure in sorted(set(row.legit.failures))[:4]:
            print(f"    legit source failure: {failure} (x{row.legit.failures.count(failure)})")
        for failure in sorted(set(row.legit.j_failures))[:3]:
            print(f"    journalist failure: {failure} (x{row.legit.j_failures.count(failure)})")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
