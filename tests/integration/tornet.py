"""A private Tor network on 127.0.0.1 for integration tests, from the Debian ``tor`` package.

Three directory authorities (keys from ``tor-gencert``), two relays (every node is a guard, HSDir
and exit by authority fiat) and a client tor with a SocksPort and a ControlPort. No network
access. The processes are started with ``subprocess`` (not the reactor), so one network can be
shared by a whole test module without trial finding "unclean reactor" selectables; they are
stopped by PID (checked against ``/proc/PID/cmdline``), and each tor also watches this process
(``__OwningControllerProcess``) so none outlives a killed test run.

Use::

    net = TorNetwork().start()           # blocking, ~10-15 s (BRING_UP_SECONDS at most)
    net.tor_options                      # [(key, value)...] for make_tor_service(tor_options=...)
    net.seed_data_dir(path)              # pre-seed a tor DataDirectory with the authority certs
    net.wrapper                          # a tor_binary that sets the low-memory environment
    net.client_socks_port, net.client_control_port
    net.add_client("other")              # another client tor, its own circuits: .socks_port, .control_port
    net.stop()

or ``shared_network()`` for one network per test process (stopped at exit), or run
``python -m tests.integration.tornet`` to keep one up by hand.

Speed (see shared/notes/private-tor-network.md): the authorities' first vote is placed >= 2.5 s
after launch by choosing the initial voting interval; relays are SIGHUPed once a consensus
exists; the client starts only when the consensus lists every relay and the relays hold its
microdescriptors; ``cached-certs`` is pre-seeded. Memory: no GeoIP, one CPU worker, a wrapper
script setting ``MALLOC_ARENA_MAX=1``.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

VOTE_INTERVALS = (8, 9, 10, 12, 15, 18, 20)  # 8-20 s per the notes; Tor wants divisors of 30 minutes (not 16)
VOTE_LEAD = 4.0  # VoteDelay + DistDelay: the vote happens this long before the boundary
FIRST_VOTE_MARGIN = 2.5  # relay descriptors must reach the authorities before the first vote
# Bring-up takes 13-16 s on a quiet machine; on a loaded 2-core one it took up to 72 s (52 s of
# them the authorities' RSA keys), so it gets twice that.
BRING_UP_SECONDS = 150.0

COMMON = [
    ("TestingTorNetwork", "1"),
    ("PathsNeededToBuildCircuits", "0.67"),
    ("GeoIPFile", "/nonexistent"),
    ("GeoIPv6File", "/nonexistent"),
    ("NumCPUs", "1"),
    # Vanguards-lite wants layer-2 nodes a 5-node network often cannot supply ("Failed to find
    # node for hop #2"): bootstrap then stalls at 95% for up to ~20 s. Not needed here.
    ("VanguardsLiteEnabled", "0"),
]
RELAY = [("Address", "127.0.0.1"), ("AssumeReachable", "1"), ("SocksPort", "0"), ("ExitRelay", "0"),
         ("MaxConsensusAgeForDiffs", "20 seconds"), ("ContactInfo", "tornet@localhost")]
AUTHORITY = [
    ("AuthoritativeDirectory", "1"),
    ("V3AuthoritativeDirectory", "1"),
    ("TestingDirAuthVoteGuard", "*"),
    ("TestingDirAuthVoteHSDir", "*"),
    ("TestingDirAuthVoteExit", "*"),
    ("TestingMinExitFlagThreshold", "0"),
    ("TestingAuthDirTimeToLearnReachability", "0"),
    ("V3AuthNIntervalsValid", "2"),
    ("TestingV3AuthInitialVoteDelay", "2"),
    ("TestingV3AuthInitialDistDelay", "2"),
    ("V3AuthVotingInterval", "10"),
    ("V3AuthVoteDelay", "2"),
    ("V3AuthDistDelay", "2"),
]


class TorNetworkError(Exception):
    pass


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def plan_first_vote(launch: float) -> tuple[int, float, float]:
    """Authorities launched at ``launch`` vote first at the next multiple of their initial
    interval minus VOTE_LEAD (never a later one): a vote sooner than FIRST_VOTE_MARGIN after
    launch misses the relays' descriptors and a whole round is lost. Returns
    ``(interval, boundary, delay)``: the interval with the earliest good boundary, and how long
    to wait before launching (0 unless no interval fits now)."""
    delay = 0.0
    while True:
        at = launch + delay
        good = []
        for interval in VOTE_INTERVALS:
            boundary = (int(at) // interval + 1) * interval  # the boundary Tor will use
            if boundary - VOTE_LEAD >= at + FIRST_VOTE_MARGIN:
                good.append((boundary, interval))
        if good:
            boundary, interval = min(good)
            return interval, float(boundary), delay
        delay += 0.25


class _Node:
    def __init__(self, net: "TorNetwork", name: str) -> None:
        self.net = net
        self.name = name
        self.dir = os.path.join(net.base, name)
        os.mkdir(self.dir, 0o700)
        self.torrc = os.path.join(self.dir, "torrc")
        self.log = os.path.join(self.dir, "stdout.log")
        self.proc: subprocess.Popen | None = None
        self.options: list[tuple[str, str]] = []

    def write_torrc(self) -> None:
        lines = [f"DataDirectory {self.dir}", f"Nickname {self.name}", "Log notice stdout",
                 f"__OwningControllerProcess {os.getpid()}"]
        lines += [f"{k} {v}" for k, v in self.options]
        with open(self.torrc, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self) -> None:
        self.write_torrc()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.net.wrapper, "-f", self.torrc, "--defaults-torrc", os.path.join(self.dir, "none")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True,
            )

    def output(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = "\n".join(self.output().splitlines()[-5:])
            raise TorNetworkError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def owns(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return self.torrc.encode() in f.read().split(b"\0")
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None and self.owns(self.proc.pid):
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(5)


class TorNetwork:
    def __init__(self, base_dir: str | None = None, tor_binary: str | None = None,
                 tor_gencert: str | None = None, relays: int = 2, keep: bool | None = None) -> None:
        self.tor_binary = tor_binary or shutil.which("tor") or "/usr/sbin/tor"
        self.tor_gencert = tor_gencert or shutil.which("tor-gencert") or "/usr/bin/tor-gencert"
        self.n_relays = relays
        self._own_base = base_dir is None
        self.base = base_dir or tempfile.mkdtemp(prefix="dd-tornet-")
        os.chmod(self.base, 0o700)
        self.keep = bool(os.environ.get("DEADDROP_KEEP_TORNET")) if keep is None else keep
        self.authorities: list[_Node] = []
        self.relays: list[_Node] = []
        self.client: _Node | None = None
        self.extra_clients: list[_Node] = []  # add_client()
        self.dir_authority_lines: list[str] = []
        self.tor_options: list[tuple[str, str]] = []
        self.client_socks_port = 0
        self.client_control_port = 0
        self.client_cookie = ""
        self.bring_up_seconds = 0.0
        self.timings: dict[str, float] = {}
        self._certs = b""
        self.wrapper = os.path.join(self.base, "tor-wrapper.sh")

    @staticmethod
    def available() -> str | None:
        """None if a network can be built here, else why not (for SkipTest)."""
        for name in ("tor", "tor-gencert"):
            if shutil.which(name) is None and not any(os.path.exists(f"{d}/{name}") for d in ("/usr/sbin", "/usr/bin")):
                return f"{name} is not installed (apt-get install tor)"
        return None

    # -- bring-up -------------------------------------------------------------------------

    def start(self, timeout: float = BRING_UP_SECONDS) -> "TorNetwork":
        t0 = time.monotonic()
        try:
            self._start(t0, timeout)
        except BaseException:
            self.stop()
            raise
        self.bring_up_seconds = time.monotonic() - t0
        sys.stderr.write(f"tornet: private Tor network up in {self.bring_up_seconds:.1f} s "
                         f"({', '.join(f'{k} {v:.1f}' for k, v in self.timings.items())})\n")
        return self

    def _mark(self, t0: float, what: str) -> None:
        self.timings[what] = time.monotonic() - t0

    def _start(self, t0: float, timeout: float) -> None:
        deadline = t0 + timeout
        with open(self.wrapper, "w") as f:
            f.write("#!/bin/sh\n# tor with a small, stable memory footprint\n"
                    "MALLOC_ARENA_MAX=1 MALLOC_TRIM_THRESHOLD_=131072\nexport MALLOC_ARENA_MAX MALLOC_TRIM_THRESHOLD_\n"
                    f'exec {self.tor_binary} "$@"\n')
        os.chmod(self.wrapper, 0o700)

        ports = iter(_free_ports(3 * 2 + self.n_relays + 2))
        self.authorities = [_Node(self, f"auth{i}") for i in range(3)]
        self.relays = [_Node(self, f"relay{i}") for i in range(self.n_relays)]
        for node in self.authorities:
            node.or_port, node.dir_port = next(ports), next(ports)
        for node in self.relays:
            node.or_port = next(ports)
        self.client_socks_port, self.client_control_port = next(ports), next(ports)

        self._make_authority_keys(deadline)
        self._mark(t0, "keys")
        self.dir_authority_lines = [
            f"{a.name} orport={a.or_port} no-v2 v3ident={a.v3ident} 127.0.0.1:{a.dir_port} {a.fingerprint}"
            for a in self.authorities
        ]
        network = COMMON + [("DirAuthority", line) for line in self.dir_authority_lines]
        self.tor_options = list(network)

        interval, boundary, delay = plan_first_vote(time.time() + 0.05)
        if delay:
            time.sleep(delay)
        for a in self.authorities:
            a.options = network + RELAY + AUTHORITY + [
                ("ORPort", f"127.0.0.1:{a.or_port}"), ("DirPort", f"127.0.0.1:{a.dir_port}"),
                ("TestingV3AuthInitialVotingInterval", str(interval)),
            ]
            a.start()
        for r in self.relays:
            r.options = network + RELAY + [("ORPort", f"127.0.0.1:{r.or_port}")]
            self.seed_data_dir(r.dir)
        self._wait(lambda: all(_listening(a.dir_port) for a in self.authorities), deadline, "authorities listening")
        for r in self.relays:
            r.start()
        self._mark(t0, "launched")

        names = {n.name for n in self.authorities + self.relays}
        first_vote = time.strftime("%H:%M:%S", time.gmtime(boundary - VOTE_LEAD))
        self._wait(lambda: names <= self._consensus_names(), deadline,
                   f"a consensus listing every relay (first vote at {first_vote}Z)")
        self._mark(t0, "consensus")
        for r in self.relays:
            r.signal(signal.SIGHUP)  # resets their directory download back-off
        self._wait(self._relays_have_microdescs, deadline, "relays holding the microdescriptors")
        self._mark(t0, "relays ready")

        self.client = self._client_node("client", self.client_socks_port, self.client_control_port)
        self.client_cookie = self.client.cookie
        self.client.start()
        self._wait(lambda: "Bootstrapped 100%" in self.client.output(), deadline, "the client bootstrapped")
        self._mark(t0, "client")

    def _client_node(self, name: str, socks_port: int, control_port: int) -> _Node:
        node = _Node(self, name)
        node.socks_port, node.control_port = socks_port, control_port
        node.cookie = os.path.join(node.dir, "control_auth_cookie")
        node.options = self.tor_options + [
            # ExtendedErrors: onion failures get their own SOCKS codes (0xF0-0xF7), so a test can
            # tell "client authorisation missing" (0xF4) from "descriptor not found yet" (0xF0).
            ("SocksPort", f"127.0.0.1:{socks_port} ExtendedErrors"),
            ("ControlPort", f"127.0.0.1:{control_port}"),
            ("CookieAuthentication", "1"),
        ]
        self.seed_data_dir(node.dir)
        return node

    def add_client(self, name: str, timeout: float = BRING_UP_SECONDS) -> _Node:
        """One more client tor of its own (its own guards, circuits and SOCKS port), once the
        network is up: ``.socks_port``, ``.control_port``, ``.cookie``. Stopped with the network."""
        socks_port, control_port = _free_ports(2)
        node = self._client_node(name, socks_port, control_port)
        self.extra_clients.append(node)
        node.start()
        self._wait(lambda: "Bootstrapped 100%" in node.output(), time.monotonic() + timeout,
                   f"client {name} bootstrapped")
        return node

    def _make_authority_keys(self, deadline: float) -> None:
        procs: list[subprocess.Popen] = []
        try:
            self._run_key_tools(procs, deadline)
        finally:
            for p in procs:  # on a timeout or a failure, none is left running
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def _run_key_tools(self, procs: list[subprocess.Popen], deadline: float) -> None:
        for a in self.authorities:
            keys = os.path.join(a.dir, "keys")
            os.mkdir(keys, 0o700)
            a.cert = os.path.join(keys, "authority_certificate")
            procs.append(subprocess.Popen(
                [self.tor_gencert, "--create-identity-key", "--passphrase-fd", "0", "-m", "12",
                 "-i", os.path.join(keys, "authority_identity_key"), "-s", os.path.join(keys, "authority_signing_key"),
                 "-c", a.cert, "-a", f"127.0.0.1:{a.dir_port}"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))
            fp_torrc = os.path.join(a.dir, "fingerprint.torrc")
            with open(fp_torrc, "w") as f:
                f.write(f"DataDirectory {a.dir}\nORPort 127.0.0.1:{a.or_port}\nAddress 127.0.0.1\n"
                        f"Nickname {a.name}\nSocksPort 0\nLog err stderr\nExitRelay 0\nContactInfo tornet@localhost\n")
            procs.append(subprocess.Popen(
                [self.tor_binary, "--list-fingerprint", "-f", fp_torrc,
                 "--defaults-torrc", os.path.join(a.dir, "none")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))
        for p in procs:
            # RSA key generation: seconds on a quiet machine, and it took tor-gencert over 30 s
            # on a loaded 2-core one; the bring-up's own deadline bounds it.
            try:
                _, err = p.communicate(b"\n" if p.stdin else None, timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TorNetworkError(f"timed out waiting for {os.path.basename(p.args[0])} (the authority keys); "
                                      f"logs in {self.base}") from None
            if p.returncode != 0:
                raise TorNetworkError(f"{p.args[0]} failed: {err.decode(errors='replace').strip()}")
        certs = []
        for a in self.authorities:
            with open(a.cert, "rb") as f:
                cert = f.read()
            certs.append(cert)
            a.v3ident = re.search(rb"^fingerprint ([0-9A-F]{40})$", cert, re.M).group(1).decode()
            with open(os.path.join(a.dir, "fingerprint")) as f:
                a.fingerprint = f.read().split()[1]
        self._certs = b"".join(certs)

    def seed_data_dir(self, data_dir: str) -> None:
        """Pre-seed a Tor DataDirectory with the authorities' certificates (saves a fetch)."""
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        with open(os.path.join(data_dir, "cached-certs"), "wb") as f:
            f.write(self._certs)

    def _wait(self, predicate, deadline: float, what: str) -> None:
        while True:
            for node in self.nodes():
                node.check_alive()
            if predicate():
                return
            if time.monotonic() > deadline:
                raise TorNetworkError(f"timed out waiting for {what}; logs in {self.base}")
            time.sleep(0.1)

    def nodes(self) -> list[_Node]:
        return self.authorities + self.relays + ([self.client] if self.client else []) + self.extra_clients

    def _consensus_names(self) -> set[str]:
        url = f"http://127.0.0.1:{self.authorities[0].dir_port}/tor/status-vote/current/consensus-microdesc"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read().decode("ascii", "replace")
        except OSError:
            return set()
        return set(re.findall(r"^r (\S+) ", text, re.M))

    def _relays_have_microdescs(self) -> bool:
        wanted = len(self.authorities) + len(self.relays)
        for r in self.relays:
            if not os.path.exists(os.path.join(r.dir, "cached-microdesc-consensus")):
                return False
            count = 0
            for name in ("cached-microdescs", "cached-microdescs.new"):
                try:
                    with open(os.path.join(r.dir, name), "rb") as f:
                        count += len(re.findall(rb"^onion-key$", f.read(), re.M))
                except FileNotFoundError:
                    pass
            if count < wanted:
                return False
        return True

    # -- teardown -------------------------------------------------------------------------

    def stop(self) -> None:
        nodes = self.nodes()
        for node in nodes:  # TERM them all first, then wait: faster than one by one
            node.signal(signal.SIGTERM)
        for node in nodes:
            node.stop()
        if self._own_base and not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)


_shared: TorNetwork | None = None


def shared_network() -> TorNetwork:
    """One network per test process: started on first use, stopped at interpreter exit."""
    global _shared
    if _shared is None:
        net = TorNetwork()
        net.start()
        _shared = net
        atexit.register(net.stop)
    return _shared


def stop_shared_network() -> None:
    global _shared
    if _shared is not None:
        _shared.stop()
        _shared = None


if __name__ == "__main__":  # pragma: no cover - manual use
    net = TorNetwork(keep=True).start()
    print("tor_options:")
    for k, v in net.tor_options:
        print(f"  --tor-option '{k}={v}'")
    print(f"client SOCKS 127.0.0.1:{net.client_socks_port}, control 127.0.0.1:{net.client_control_port}")
    print(f"tor wrapper: {net.wrapper}; logs in {net.base}. Ctrl-C stops the network.")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        net.stop()
