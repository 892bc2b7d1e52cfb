"""The real server behind its real onion: ``twistd -n deaddrop --tor launch`` in a private Tor network.

The server is started as an admin would start it, as a child process; only ``--tor-option``
lines point its Tor at the private network of ``tornet.py`` (and ``--tor-binary`` is the
fixture's low-memory wrapper). A source visits through the fixture's client tor over SOCKS with
treq: ``/generate``, ``/create``, ``/lookup``, ``/submit`` (a message and a file), and the stored
files decrypt with the test SVS key to what was sent. Then: the address survives a restart
(SIGTERM, start again), and a ``kill -9`` of the server's Tor is survived (the web service keeps
serving, ``tor.exited`` is logged, the onion comes back), during its bootstrap as after publication. And ``--tor control:unix:PATH``
against a separately run Tor (control socket + cookie, as Debian's): published, served, and that
Tor is left running when the server stops.

One private network per module (``tornet.shared_network()``, stopped after this module's last
test). Timings go to stderr at the end ("onion source visit timings: ..."). With
``DEADDROP_KEEP_TORNET=1`` the temporary directories (twistd and Tor logs) are kept.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request

import txtorcon
from treq.client import HTTPClient
from twisted.internet import reactor, task
from twisted.internet.defer import DeferredList, ensureDeferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.trial import unittest

from deaddrop.tor import keys
from tests._support import Browser, kill_gpg_agent, short_tempdir, test_svs
from tests import _event_catalogue as event_catalogue
from tests.integration import tornet
from tests.integration.test_source_flow import gunzip_with_name, stored_files

VENV_BIN = os.path.dirname(sys.executable)
TWISTD = os.path.join(VENV_BIN, "twistd")
ADMIN = os.path.join(VENV_BIN, "deaddrop-admin")

MODULE_START = time.monotonic()
TIMINGS: dict[str, float] = {}
BOOTSTRAP_LINE = re.compile(r"Tor bootstrap (\d+)%: (\S[^\n]*)")


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (from /proc/*/stat)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()  # after "(comm)": state, ppid, ...
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(name))
    return found


def cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


class OnionServer:
    """One data directory served by successive ``twistd -n deaddrop --tor launch`` processes."""

    def __init__(self, net: tornet.TorNetwork, base: str, tor: str = "launch") -> None:
        self.net = net
        self.base = base
        self.tor = tor
        self.data_dir = os.path.join(base, "data")
        self.log_path = os.path.join(base, "twistd.log")
        self.torrc = os.path.join(self.data_dir, "tor", "torrc")
        self.security_log = os.path.join(self.data_dir, "logs", "security.jsonl")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log_offset = 0
        os.makedirs(self.data_dir, mode=0o700)
        # Saves the client a certificate fetch (the server creates DATA/tor 0700 itself otherwise).
        net.seed_data_dir(os.path.join(self.data_dir, "tor"))

    def argv(self) -> list[str]:
        args = [
            TWISTD, "-n", "--pidfile=", "deaddrop",
            "--tor", self.tor,
            "--data-dir", self.data_dir,
            "--submission-key", test_svs().public_key_path,
            "--source-listen", f"tcp:{self.port}:interface=127.0.0.1",
            "--journalist-listen", "tcp:0:interface=127.0.0.1",
            "--kdf-cost", "insecure-fast",
        ]
        if self.tor == "launch":
            args += ["--tor-binary", self.net.wrapper]
            for key, value in self.net.tor_options:
                args += ["--tor-option", f"{key}={value}"]
        return args

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            # Own process group: cleanup() can find what it forked (Tor, gpg) if it is killed.
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.base, start_new_session=True)

    async def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, as a service manager does, and check that it shut down cleanly."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"twistd did not stop within {timeout} s after SIGTERM")
            await sleep(0.05)
        # twistd ends the reactor, then re-raises the signal it stopped on: -15 is a clean stop.
        log = self.log_text(since_start=True)
        assert self.proc.returncode in (0, -signal.SIGTERM), (self.proc.returncode, log[-2000:])
        assert "Server Shut Down." in log and "Traceback" not in log, log[-3000:]

    def cleanup(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            try:  # anything it left in its process group (our session; its id is our child's pid)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        kill_gpg_agent(os.path.join(self.data_dir, "gnupg"))

    # -- what it says ----------------------------------------------------------------------

    def log_text(self, since_start: bool = False) -> str:
        try:
            with open(self.log_path, "rb") as f:
                if since_start:
                    f.seek(self._log_offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def events(self, name: str | None = None, **fields) -> list[dict]:
        try:
            with open(self.security_log, encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        # The server runs in a child process: its events are checked against the doc here.
        unlisted = [p for r in records for p in event_catalogue.problems(r)]
        assert not unlisted, unlisted
        return [r for r in records if (name is None or r.get("event") == name)
                and all(r.get(k) == v for k, v in fields.items())]

    def published_count(self) -> int:
        return len(self.events("tor.onion.published", detail="source"))

    def onion_file(self) -> str | None:
        try:
            with open(keys.source_onion_file(self.data_dir)) as f:
                return f.read().strip()
        except FileNotFoundError:
            return None

    def tor_pid(self) -> int | None:
        """The Tor this server launched: its child whose command line names DATA/tor/torrc."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        for pid in children(self.proc.pid):
            if self.torrc.encode() in cmdline(pid):
                return pid
        return None

    async def wait_until(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc is not None and self.proc.poll() is not None:
                tail = "\n".join(self.log_text(since_start=True).splitlines()[-25:])
                raise AssertionError(f"twistd exited ({self.proc.returncode}) while waiting for {what}:\n{tail}")
            if time.monotonic() > deadline:
                tail = "\n".join(self.log_text(since_start=True).splitlines()[-25:])
                raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{tail}")
            await sleep(0.1)

    async def wait_published(self, already: int, timeout: float = 90.0) -> str:
        """Until the source descriptor was uploaded once more than ``already`` times; -> address."""
        await self.wait_until(lambda: self.published_count() > already, timeout, "the source onion's upload")
        return self.events("tor.onion.published", detail="source")[-1]["onion"]


class OnionBrowser(Browser):
    """``Browser`` (cookies, redirects, the source flow helpers) through a Tor SOCKS port."""

    def __init__(self, address: str, tor: txtorcon.Tor, socks_port: int) -> None:
        super().__init__(f"http://{address}/")
        self.client = HTTPClient(
            tor.web_agent(pool=self.pool, socks_endpoint=TCP4ClientEndpoint(reactor, "127.0.0.1", socks_port)),
            cookiejar=self.cookies,
        )

    def get(self, path, follow=True, **kw):
        kw.setdefault("timeout", 60)
        return super().get(path, follow, **kw)

    def post(self, path, data=None, files=None, follow=True, **kw):
        kw.setdefault("timeout", 60)
        return super().post(path, data, files, follow, **kw)


_NAMES: set[str] = set()


def _test_done(case) -> None:
    TIMINGS[case.id().rsplit(".", 1)[-1]] = time.monotonic() - case._started
    _NAMES.discard(case.id())
    if not _NAMES:
        tornet.stop_shared_network()
        TIMINGS["module total"] = time.monotonic() - MODULE_START
        tests = sorted(k for k in TIMINGS if k.startswith("test_"))
        steps = [k for k in TIMINGS if not k.startswith("test_") and k != "module total"]
        order = ["network bring-up"] + sorted(k for k in steps if k != "network bring-up") + tests + ["module total"]
        sys.stderr.write("onion source visit timings: "
                         + ", ".join(f"{k} {TIMINGS[k]:.1f} s" for k in order if k in TIMINGS) + "\n")


class OnionSourceVisitTests(unittest.TestCase):
    # The first test of the module also waits for the shared network.
    timeout = tornet.BRING_UP_SECONDS + 400

    def setUp(self):
        reason = tornet.TorNetwork.available()
        if reason:
            raise unittest.SkipTest(reason)
        self._started = time.monotonic()
        self.addCleanup(_test_done, self)
        self.net = tornet.shared_network()
        TIMINGS.setdefault("network bring-up", self.net.bring_up_seconds)

    def tempdir(self) -> str:
        base = short_tempdir("dd-onion-")
        if not os.environ.get("DEADDROP_KEEP_TORNET"):  # keep the logs with the network's
            self.addCleanup(shutil.rmtree, base, True)
        return base

    def server(self, tor: str = "launch") -> OnionServer:
        server = OnionServer(self.net, self.tempdir(), tor)
        self.addCleanup(server.cleanup)
        return server

    async def system_tor(self) -> tuple[subprocess.Popen, str]:
        """A Tor run apart from DeadDrop, as Debian's is: a control socket with cookie
        authentication, no onion services of its own. -> (process, control socket path)."""
        base = self.tempdir()
        data = os.path.join(base, "tor")
        self.net.seed_data_dir(data)
        socket_path = os.path.join(base, "control")
        torrc = os.path.join(base, "torrc")
        with open(torrc, "w") as f:
            f.write("\n".join([
                f"DataDirectory {data}", f'ControlSocket "{socket_path}"', "ControlSocketsGroupWritable 1",
                "CookieAuthentication 1", "CookieAuthFileGroupReadable 1", "SocksPort 0", "Log notice stdout",
                f"__OwningControllerProcess {os.getpid()}",
            ] + [f"{k} {v}" for k, v in self.net.tor_options]) + "\n")
        log_path = os.path.join(base, "tor.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([self.net.wrapper, "-f", torrc, "--defaults-torrc", os.path.join(base, "none")],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

        def stop():
            if proc.poll() is None and torrc.encode() in cmdline(proc.pid):
                proc.terminate()
            proc.wait(10)

        self.addCleanup(stop)
        deadline = time.monotonic() + 60
        while True:
            with open(log_path, "rb") as f:
                if b"Bootstrapped 100%" in f.read() and os.path.exists(socket_path):
                    return proc, socket_path
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the system Tor did not bootstrap (exit {proc.poll()}); log in {log_path}")
            await sleep(0.1)

    async def client_tor(self) -> txtorcon.Tor:
        """A control connection to the fixture's client tor (for HSFETCH)."""
        tor = await txtorcon.connect(reactor, TCP4ClientEndpoint(reactor, "127.0.0.1", self.net.client_control_port))

        async def close():
            d = tor.protocol.when_disconnected()
            tor.protocol.transport.loseConnection()
            try:
                await d
            except Exception:
                pass

        self.addCleanup(lambda: ensureDeferred(close()))
        return tor

    def browser(self, address: str, tor: txtorcon.Tor) -> OnionBrowser:
        browser = OnionBrowser(address, tor, self.net.client_socks_port)
        self.addCleanup(browser.close)
        return browser

    async def reach(self, browser: OnionBrowser, tor: txtorcon.Tor, fresh: bool = False,
                    timeout: float = 150.0) -> str:
        """GET / through the onion until it answers 200, retrying while the descriptor spreads.

        ``fresh``: make the client tor fetch the descriptor again first (after a restart of the
        server's Tor the one it cached names dead introduction points; a browser would get there
        too, after its introduction attempts failed).
        """
        host = browser.base_url.split("//", 1)[1].split(".onion", 1)[0]
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if fresh:
                await tor.protocol.queue_command(f"HSFETCH {host}")
                await sleep(0.5)
            try:
                # After a restart the client may first try the old introduction points (and
                # the service's new PoW seed): on a busy 2-core machine that took over 60 s.
                response, html = await browser.get("/", timeout=30)
                if response.code == 200:
                    return html
                last = f"HTTP {response.code}"
            except Exception as e:  # SOCKS errors while the descriptor spreads to the HSDirs
                last = f"{type(e).__name__}: {e}"
            fresh = True
            await sleep(0.5)
        raise AssertionError(f"could not reach {browser.base_url} through Tor: {last}")

    def assert_decrypts(self, server: OnionServer, expected_messages: list[str],
                        expected_docs: list[tuple[str, bytes]]) -> None:
        svs = test_svs()
        files = stored_files(server.data_dir)
        messages, docs = [], []
        for path in files:
            with open(path, "rb") as f:
                plaintext = svs.decrypt(f.read())
            if path.endswith("-msg.gpg"):
                messages.append(plaintext.decode())
            elif path.endswith("-doc.gz.gpg"):
                docs.append(gunzip_with_name(plaintext))
        self.assertEqual(len(files), len(messages) + len(docs), files)
        self.assertEqual(sorted(messages), sorted(expected_messages))
        self.assertEqual(sorted(docs), sorted(expected_docs))

    # -- the tests ---------------------------------------------------------------------------

    def test_source_visit_through_the_onion_and_same_address_after_restart(self):
        return ensureDeferred(self._visit_and_restart())

    async def _visit_and_restart(self):
        server = self.server()
        tor = await self.client_tor()

        t0 = time.monotonic()
        server.start()
        address = await server.wait_published(0)
        TIMINGS["first onion (server start -> descriptor uploaded)"] = time.monotonic() - t0
        self.assertTrue(keys.is_valid_onion_address(address), address)
        self.assertEqual(server.onion_file(), address)

        # The log shows the bootstrap, with percent and summary, and the address.
        log = server.log_text()
        progress = [(int(p), s) for p, s in BOOTSTRAP_LINE.findall(log)]
        self.assertIn((100, "Done"), progress, log[-3000:])
        self.assertGreaterEqual(len({p for p, _ in progress}), 3, progress)
        self.assertTrue(all(s.strip() for _, s in progress), progress)
        self.assertIn(f"Source onion service published: http://{address}/", log)
        self.assertEqual(self.events_named(server, "tor.fatal"), [])

        # deaddrop-admin status prints it.
        status = subprocess.run([ADMIN, "status", "--data-dir", server.data_dir, "--json"],
                                capture_output=True, text=True, timeout=30)
        data = json.loads(status.stdout)
        self.assertEqual(data["source_onion"], address)
        self.assertTrue(data["tor"]["running"], data)
        self.assertEqual(data["tor"]["pid"], server.tor_pid())
        self.assertEqual([c for c in data["checks"] if not c["ok"]], [])
        self.assertEqual(status.returncode, 0, status.stderr)

        # A source's whole visit, through the client tor.
        t1 = time.monotonic()
        browser = self.browser(address, tor)
        await self.reach(browser, tor)
        TIMINGS["first page through the onion"] = time.monotonic() - t1
        codename = await browser.create_source()
        message = "hello through the onion MARKER-31c8"
        document = b"ONION-FILE-MARKER " * 2000 + os.urandom(100_000)
        response, html = await browser.submit(message, [("leak.pdf", document)])
        self.assertEqual(response.code, 200)
        self.assertIn("We received your message and 1 document", html)
        TIMINGS["source visit (page -> stored)"] = time.monotonic() - t1
        self.assert_decrypts(server, [message], [("leak.pdf", document)])

        # Issue 17 §5: what Tor prints once the onion is up may be about a visitor. More streams
        # on one circuit than HiddenServiceMaxStreams (16) make the server's Tor warn and close
        # the circuit: not a word of it in twistd's log when it happens, a count for the day.
        flood = self.browser(address, tor)
        await DeferredList([flood.get("/robots.txt", timeout=30) for _ in range(24)], consumeErrors=True)
        await sleep(1)

        # Restart: SIGTERM, start again, same address, the codename still works.
        tor_pid = server.tor_pid()
        t2 = time.monotonic()
        await server.stop()
        self.assertNotIn(server.torrc.encode(), cmdline(tor_pid))  # our Tor went with it
        db = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        try:  # the day's counts, kept by the clean stop for the midnight report
            [(kept,)] = db.execute("SELECT value FROM settings WHERE key = 'daily_counts'").fetchall()
        finally:
            db.close()
        tor_lines = json.loads(kept)["tor_lines"]
        self.assertTrue(any("Maximum streams per circuit limit reached on rendezvous circuit # for service <onion>"
                            in line for line in tor_lines), tor_lines)
        self.assertGreaterEqual(json.loads(kept)["tor_warnings"], 1)
        log = server.log_text()
        self.assertNotIn("Maximum streams per circuit", log)
        self.assertNotIn("rendezvous", log.split("Tor bootstrap 100%", 1)[-1])
        published = server.published_count()
        server.start()
        again = await server.wait_published(published)
        TIMINGS["restart (SIGTERM -> descriptor uploaded again)"] = time.monotonic() - t2
        self.assertEqual(again, address)
        self.assertEqual(server.onion_file(), address)
        self.assertEqual(self.events_named(server, "tor.onion.address_changed"), [])

        t3 = time.monotonic()
        browser = self.browser(address, tor)
        await self.reach(browser, tor, fresh=True)
        TIMINGS["first page after restart"] = time.monotonic() - t3
        response, html = await browser.login(codename)
        self.assertIn("Send more and read replies", html)
        response, html = await browser.submit("after the restart")
        self.assertIn("We received your message", html)
        self.assert_decrypts(server, [message, "after the restart"], [("leak.pdf", document)])
        await server.stop()

    def test_server_survives_sigkill_of_its_tor_during_bootstrap_and_after_publication(self):
        return ensureDeferred(self._sigkill())

    async def _sigkill(self):
        server = self.server()
        tor = await self.client_tor()
        server.start()

        # During bootstrap: killed as soon as Tor reports progress, long before it is ready.
        deadline = time.monotonic() + 90
        while not server.events("tor.bootstrap"):
            if server.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("no bootstrap progress:\n" + server.log_text(since_start=True)[-3000:])
            await sleep(0.01)
        first = server.tor_pid()
        self.assertIsNotNone(first, "no child of twistd runs DATA/tor/torrc")
        os.kill(first, signal.SIGKILL)
        t_boot = time.monotonic()
        await server.wait_until(lambda: server.events("tor.exited"), 15, "tor.exited during bootstrap")
        names = [e["event"] for e in server.events()]
        self.assertNotIn("tor.ready", names[:names.index("tor.exited")])  # it was still bootstrapping
        self.assertEqual(server.events("tor.exited")[0]["reason"], "signal_9")
        # The server did not stop; its source interface serves while Tor is relaunched.
        self.assertIsNone(server.proc.poll())
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/generate", timeout=10) as response:
            self.assertEqual(response.status, 200)
        await server.wait_until(lambda: server.tor_pid() not in (None, first), 30, "the relaunch")
        self.assertTrue(server.events("tor.restart"))
        address = await server.wait_published(0)
        TIMINGS["recovery (SIGKILL during bootstrap -> descriptor uploaded)"] = time.monotonic() - t_boot
        self.assertEqual(self.events_named(server, "tor.fatal"), [])
        browser = self.browser(address, tor)
        await self.reach(browser, tor)

        pid = server.tor_pid()
        self.assertIsNotNone(pid, "no child of twistd runs DATA/tor/torrc")
        self.assertTrue(os.path.basename(cmdline(pid)[0]).startswith(b"tor"), cmdline(pid))
        t0 = time.monotonic()
        published = server.published_count()
        os.kill(pid, signal.SIGKILL)
        await server.wait_until(lambda: server.events("tor.exited"), 15, "tor.exited")

        # Tor is down; the web service is not.
        self.assertIsNone(server.proc.poll())
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/generate", timeout=10) as response:
            self.assertEqual(response.status, 200)
        exited = server.events("tor.exited")[-1]
        self.assertEqual(exited["reason"], "signal_9")

        back = await server.wait_published(published, timeout=60)
        TIMINGS["recovery (SIGKILL -> descriptor uploaded again)"] = time.monotonic() - t0
        self.assertEqual(back, address)
        self.assertNotIn(server.tor_pid(), (None, pid))
        self.assertTrue(server.events("tor.restart"))
        await self.reach(browser, tor, fresh=True)
        TIMINGS["recovery (SIGKILL -> page served)"] = time.monotonic() - t0
        await browser.create_source()  # the flow, not only the index, works again
        self.assertEqual(self.events_named(server, "tor.fatal"), [])
        await server.stop()

    def test_attach_to_a_running_tor_over_its_control_socket(self):
        return ensureDeferred(self._attach())

    async def _attach(self):
        t0 = time.monotonic()
        system_tor, control = await self.system_tor()
        tor = await self.client_tor()
        server = self.server(tor=f"control:unix:{control}")
        t1 = time.monotonic()
        server.start()
        address = await server.wait_published(0)
        TIMINGS["attached: onion published"] = time.monotonic() - t1
        self.assertEqual(server.onion_file(), address)
        self.assertEqual(server.tor_pid(), None)  # nothing launched
        self.assertFalse(os.path.exists(os.path.join(server.data_dir, "tor", "torrc")))
        browser = self.browser(address, tor)
        await self.reach(browser, tor)
        await browser.create_source()
        await server.stop()
        self.assertIsNone(system_tor.poll())  # a Tor we attached to is not ours to stop
        TIMINGS["attached: whole test incl. system Tor start"] = time.monotonic() - t0

    def events_named(self, server: OnionServer, name: str) -> list[dict]:
        return server.events(name)


_NAMES.update(
    f"{OnionSourceVisitTests.__module__}.{OnionSourceVisitTests.__name__}.{name}"
    for name in dir(OnionSourceVisitTests)
    if name.startswith("test_")
)
