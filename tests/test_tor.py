"""Unit tests for deaddrop.tor: no real Tor. A fake Tor speaks the control protocol to
txtorcon's real TorControlProtocol over an in-memory pump; processes are fakes; time is a Clock.
"""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import stat
import tempfile

from twisted.internet import error as ierror
from twisted.internet.defer import Deferred, fail
from twisted.internet.testing import MemoryReactorClock
from twisted.protocols.basic import LineReceiver
from twisted.python.failure import Failure
from twisted.test import iosim
from twisted.trial import unittest
from txtorcon import TorControlProtocol

from deaddrop.admin import cli
from deaddrop.tor import (
    Tuning,
    is_loopback_endpoint,
    keys,
    make_tor_service,
    parse_tor_mode,
    parse_tor_option,
)
from deaddrop.tor._config import normalise_target
from deaddrop.tor._process import TorProcessProtocol, describe_exit

# -- fakes ------------------------------------------------------------------------------------


class RecordingEvents:
    def __init__(self):
        self.records = []

    def emit(self, event, **fields):
        from deaddrop.events import ALLOWED_FIELDS

        from tests._event_catalogue import check

        unknown = set(fields) - ALLOWED_FIELDS
        assert not unknown, f"fields not allowed: {unknown}"
        self.records.append((event, {k: v for k, v in fields.items() if v is not None}))
        check(dict(self.records[-1][1], event=event))  # as SecurityEvents does: listed in docs/monitoring.md

    def named(self, name):
        return [fields for event, fields in self.records if event == name]

    def names(self):
        return [event for event, _ in self.records]


class FakeProcess:
    """The transport of a spawned 'tor'."""

    def __init__(self, proto, pid, executable, args, env, path):
        self.proto, self.pid, self.executable, self.args, self.env, self.path = proto, pid, executable, args, env, path
        self.signals = []

    def signalProcess(self, name):
        if self.pid is None:
            raise ierror.ProcessExitedAlready()
        self.signals.append(name)

    def closeStdin(self):
        pass

    def loseConnection(self):
        pass

    def say(self, *lines):
        for line in lines:
            self.proto.outReceived(f"Dec 03 09:43:41.956 {line}\n".encode())

    def exit(self, code=None, sig=None):
        self.pid = None
        if code == 0 and sig is None:
            reason = Failure(ierror.ProcessDone(0))
        else:
            reason = Failure(ierror.ProcessTerminated(exitCode=code, signal=sig))
        self.proto.processEnded(reason)


TOR_MODULES = "relay: yes\ndirauth: yes\ndircache: yes\npow: yes\n"


class FakeReactor(MemoryReactorClock):
    def __init__(self):
        super().__init__()
        self.processes = []
        self.module_queries = []
        self.modules_output = TOR_MODULES  # what `tor --list-modules` prints
        self._next_pid = 4000

    def spawnProcess(self, proto, executable, args=(), env=None, path=None, **kw):
        self._next_pid += 1
        process = FakeProcess(proto, self._next_pid, executable, list(args), env, path)
        proto.makeConnection(process)
        if "--list-modules" in args:  # answered and ended at once
            self.module_queries.append(process)
            proto.childDataReceived(1, self.modules_output.encode())
            process.exit(0)
            return process
        self.processes.append(process)
        return process


class FakeTor(LineReceiver):
    """The Tor side of a control connection: enough of control-spec for our service."""

    delimiter = b"\r\n"

    def __init__(self, bootstrap=(100, "done", "Done")):
        self.commands = []
        self.bootstrap = bootstrap
        self.onions = []
        self.circuits = ["155", "70000", "48879"]  # open rendezvous circuits, by id
        self.add_onion_error = None
        self.unanswered: set[str] = set()  # commands Tor never answers (it is about to die)

    def reply(self, *lines):
        for line in lines[:-1]:
            self.sendLine(b"250-" + line.encode())
        self.sendLine(b"250 " + lines[-1].encode())

    def event(self, text):
        self.sendLine(b"650 " + text.encode())

    def lineReceived(self, line):
        text = line.decode()
        self.commands.append(text)
        if text in self.unanswered:
            return
        word = text.split(" ", 1)[0]
        if word == "PROTOCOLINFO":
            self.reply("PROTOCOLINFO 1", "AUTH METHODS=NULL", 'VERSION Tor="0.4.9.11"', "OK")
        elif word == "GETINFO":
            key = text.split(" ", 1)[1]
            if key == "signal/names":
                self.reply("signal/names=RELOAD SHUTDOWN NEWNYM", "OK")
            elif key == "version":
                self.reply("version=0.4.9.11", "OK")
            elif key == "events/names":
                self.reply("events/names=CIRC STREAM STATUS_CLIENT HS_DESC NOTICE", "OK")
            elif key == "status/bootstrap-phase":
                p, tag, summary = self.bootstrap
                self.reply(f'status/bootstrap-phase=NOTICE BOOTSTRAP PROGRESS={p} TAG={tag} SUMMARY="{summary}"', "OK")
            elif key == "onions/current":
                self.reply("onions/current=" + " ".join(self.onions), "OK")
            else:
                self.sendLine(b'552 Unrecognized key "' + key.encode() + b'"')
        elif word == "ADD_ONION":
            if self.add_onion_error:
                self.sendLine(self.add_onion_error.encode())
                return
            blob = text.split(" ")[1]
            service_id = keys.key_from_control_blob(blob).service_id
            self.onions.append(service_id)
            self.reply(f"ServiceID={service_id}", "OK")
        elif word == "DEL_ONION":
            service_id = text.split(" ")[1]
            if service_id in self.onions:
                self.onions.remove(service_id)
                self.reply("OK")
            else:
                self.sendLine(b"552 Unknown Onion Service id")
        elif word == "CLOSECIRCUIT":
            circuit = text.split(" ")[1]
            if circuit in self.circuits:
                self.circuits.remove(circuit)
                self.reply("OK")
            else:
                self.sendLine(f'552 Unknown circuit "{circuit}"'.encode())
        elif word in ("AUTHENTICATE", "USEFEATURE", "SETEVENTS", "TAKEOWNERSHIP", "RESETCONF"):
            self.reply("OK")
        else:
            self.sendLine(b"510 Unrecognized command")

    def sent(self, word):
        return [c for c in self.commands if c.split(" ", 1)[0] == word]


class Harness:
    """A service under test plus the fakes around it."""

    def __init__(self, case, *, mode="launch", data_dir=None, journalist=False, bootstrap=(100, "done", "Done"),
                 tor_binary=None, tuning=None, tor_options=(), journalist_onion_port=80,
                 source_proxy_target=None, pow=True, bootstrap_timeout=180.0):
        self.case = case
        self.reactor = FakeReactor()
        self.events = RecordingEvents()
        self.fatal = []
        self.lines = []
        self.pumps = []
        self.tors = []
        self.bootstrap = bootstrap
        self.refuse = None
        self.endpoints = []
        # short: a control socket path must fit in sockaddr_un (long paths are tested apart)
        self.data_dir = data_dir or case.shortdir()
        os.makedirs(self.data_dir, exist_ok=True)
        if tor_binary is None:
            tor_binary = os.path.join(self.data_dir, "fake-tor")
            with open(tor_binary, "w") as f:
                f.write("#!/bin/sh\nexit 1\n")
            os.chmod(tor_binary, 0o755)
        self.service = make_tor_service(
            self.reactor,
            data_dir=self.data_dir,
            mode=mode,
            tor_binary=tor_binary,
            tor_options=list(tor_options),
            source_target="127.0.0.1:8080",
            journalist_target="127.0.0.1:9090" if journalist else None,
            events=self.events,
            bootstrap_timeout=bootstrap_timeout,
            on_fatal=self.fatal.append,
            report=self.lines.append,
            journalist_onion_port=journalist_onion_port,
            tuning=tuning or Tuning(),
            source_proxy_target=source_proxy_target,
            pow=pow,
            _connect=self.connect,
        )

    def connect(self, endpoint):
        self.endpoints.append(endpoint)
        if self.refuse is not None:
            return fail(self.refuse)
        client = TorControlProtocol()
        server = FakeTor(self.bootstrap)
        pump = iosim.connect(
            server, iosim.makeFakeServer(server), client, iosim.makeFakeClient(client), greet=False, clock=self.reactor
        )
        self.pumps.append(pump)
        self.tors.append(server)
        d = Deferred()

        def ready(proto):
            d.callback(proto)
            return proto

        client.post_bootstrap.addCallback(ready)
        return d

    @property
    def tor(self):
        return self.tors[-1]

    @property
    def process(self):
        return self.reactor.processes[-1]

    def settle(self):
        for _ in range(50):
            moved = False
            self.reactor.advance(0)
            for pump in self.pumps:
                moved = pump.flush(advanceClock=False) or moved
            if not moved:
                return

    def advance(self, seconds):
        self.reactor.advance(seconds)
        self.settle()

    def start(self):
        self.service.startService()
        self.settle()

    def listener_up(self):
        self.process.say("[notice] Opened Control listener connection (ready) on /x/control.sock")
        self.settle()

    def launch_ready(self):
        """Start, the fake Tor prints its control listener line; bootstrapped and published."""
        self.start()
        self.listener_up()

    def uploaded(self, address, action="UPLOADED", extra=""):
        host = address[: -len(".onion")]
        self.tor.event(f"HS_DESC {action} {host} UNKNOWN $AAAA~relay {extra}".strip())
        self.settle()

    def stop(self):
        d = self.service.stopService()
        self.settle()
        return d


def add_onion_commands(tor):
    return tor.sent("ADD_ONION")


def torrc_lines(h):
    with open(os.path.join(os.path.abspath(h.data_dir), "tor", "torrc")) as f:
        return f.read().splitlines()


def source_added(h):
    """How many times the source onion was (re)published: ADD_ONION when attached, the torrc
    when launched (then the service only records it once Tor is bootstrapped)."""
    return len([e for e in h.events.named("tor.onion.added") if e.get("detail") == "source"])


def expected_blob(data_dir, which):
    key = keys.read_onion_key(keys.service_dir(data_dir, which))
    return key, "ED25519-V3:" + base64.b64encode(key.expanded).decode()


class _Base(unittest.TestCase):
    def shortdir(self):
        path = tempfile.mkdtemp(prefix="dd-tor-test-")
        self.addCleanup(shutil.rmtree, path, True)
        return os.path.join(path, "data")

    def harness(self, **kw):
        h = Harness(self, **kw)
        self.addCleanup(self._cleanup, h)
        return h

    def _cleanup(self, h):
        if h.service.running:
            h.service.stopService()
            for p in h.reactor.processes:
                if p.pid is not None:
                    p.exit(sig=15)
            h.settle()


# -- launch, progress, publication ------------------------------------------------------------


class LaunchTests(_Base):
    def test_spawns_tor_with_persistent_data_dir_and_torrc(self):
        h = self.harness(tor_options=[("TestingTorNetwork", "1"), ("DirAuthority", "a orport=1 127.0.0.1:2 AAAA")])
        h.start()
        p = h.process
        tor_dir = os.path.join(os.path.abspath(h.data_dir), "tor")
        self.assertEqual(p.args[:3], [p.executable, "-f", os.path.join(tor_dir, "torrc")])
        self.assertEqual(p.env, {"HOME": tor_dir})
        self.assertEqual(stat.S_IMODE(os.stat(tor_dir).st_mode), 0o700)
        with open(os.path.join(tor_dir, "torrc")) as f:
            torrc = f.read().splitlines()
        self.assertIn(f"DataDirectory {tor_dir}", torrc)
        self.assertIn("CookieAuthentication 1", torrc)
        self.assertIn("Log notice stdout", torrc)
        self.assertIn("SocksPort 0", torrc)
        self.assertIn(f"__OwningControllerProcess {os.getpid()}", torrc)
        self.assertIn("TestingTorNetwork 1", torrc)
        self.assertIn("DirAuthority a orport=1 127.0.0.1:2 AAAA", torrc)
        self.assertTrue([l for l in torrc if l.startswith("ControlPort ")])
        self.assertEqual(h.service.tor_pid, p.pid)

    def test_progress_reported_as_events_and_lines(self):
        h = self.harness(bootstrap=(10, "conn_done", "Connected to a relay"))
        h.launch_ready()
        self.assertEqual(h.tor.sent("TAKEOWNERSHIP"), ["TAKEOWNERSHIP"])
        fifty = 'STATUS_CLIENT NOTICE BOOTSTRAP PROGRESS=50 TAG=loading_descriptors SUMMARY="Loading relay descriptors"'
        h.tor.event(fifty)
        h.tor.event(fifty)
        h.settle()
        self.assertEqual(source_added(h), 0)  # not before 100%
        h.tor.event('STATUS_CLIENT NOTICE BOOTSTRAP PROGRESS=100 TAG=done SUMMARY="Done"')
        h.settle()
        self.assertEqual(
            h.events.named("tor.bootstrap"),
            [
                {"progress": 10, "summary": "Connected to a relay"},
                {"progress": 50, "summary": "Loading relay descriptors"},
                {"progress": 100, "summary": "Done"},
            ],
        )
        self.assertIn("Tor bootstrap 50%: Loading relay descriptors", h.lines)
        self.assertEqual(source_added(h), 1)
        self.assertEqual(h.service.state, "ready")

    def test_source_onion_is_a_torrc_service_with_the_defences(self):
        h = self.harness(source_proxy_target="unix:/srv/dd/tor/source.sock")
        h.launch_ready()
        key = keys.read_onion_key(keys.service_dir(h.data_dir, keys.SOURCE))
        hs_dir = keys.service_dir(os.path.abspath(h.data_dir), keys.SOURCE)
        torrc = torrc_lines(h)
        block = torrc[torrc.index(f"HiddenServiceDir {hs_dir}"):]
        self.assertEqual(
            block,
            [
                f"HiddenServiceDir {hs_dir}",
                'HiddenServicePort 80 unix:"/srv/dd/tor/source.sock"',
                "HiddenServiceExportCircuitID haproxy",
                "HiddenServiceMaxStreams 16",
                "HiddenServiceMaxStreamsCloseCircuit 1",
                "HiddenServiceEnableIntroDoSDefense 1",
                "HiddenServiceEnableIntroDoSRatePerSec 25",
                "HiddenServiceEnableIntroDoSBurstPerSec 200",
                "HiddenServicePoWDefensesEnabled 1",
                "HiddenServicePoWQueueRate 5",
                "HiddenServicePoWQueueBurst 50",
            ],
        )
        # Nothing through the control port: no ADD_ONION, and never a SETCONF (it resets PoW).
        self.assertEqual(add_onion_commands(h.tor), [])
        self.assertEqual([c for c in h.tor.commands if c.split(" ")[0] in ("SETCONF", "RESETCONF")], [])
        self.assertEqual(h.service.onion_address, key.address)
        self.assertEqual(h.events.named("tor.onion.added"), [{"onion": key.address, "detail": "source"}])
        with open(keys.source_onion_file(h.data_dir)) as f:
            self.assertEqual(f.read(), key.address + "\n")

    def test_source_target_callable_resolved_at_launch(self):
        port = []
        h = self.harness(source_proxy_target=lambda: f"127.0.0.1:{port[0]}")
        port.append(43210)
        h.launch_ready()
        self.assertIn("HiddenServicePort 80 127.0.0.1:43210", torrc_lines(h))

    def test_without_a_proxy_listener_no_circuit_ids_are_exported(self):
        h = self.harness()  # source_target only: a plain listener must not get PROXY headers
        h.launch_ready()
        torrc = torrc_lines(h)
        self.assertIn("HiddenServicePort 80 127.0.0.1:8080", torrc)
        self.assertNotIn("HiddenServiceExportCircuitID haproxy", torrc)
        self.assertIn("HiddenServicePoWDefensesEnabled 1", torrc)

    def test_tor_pow_off(self):
        h = self.harness(pow=False)
        h.launch_ready()
        torrc = torrc_lines(h)
        self.assertFalse([line for line in torrc if line.startswith("HiddenServicePoW")])
        self.assertIn("HiddenServiceEnableIntroDoSDefense 1", torrc)  # the other defences stay
        self.assertIn("HiddenServiceMaxStreamsCloseCircuit 1", torrc)
        self.assertEqual(h.reactor.module_queries, [])  # no need to ask
        self.assertEqual(h.events.named("tor.pow.unavailable"), [])

    def test_tor_without_pow_module_warns_and_starts_anyway(self):
        h = self.harness()
        h.reactor.modules_output = "relay: yes\ndirauth: yes\ndircache: yes\npow: no\n"
        h.launch_ready()
        self.assertEqual(len(h.reactor.module_queries), 1)
        self.assertEqual(h.reactor.module_queries[0].args[1:], ["--list-modules"])
        torrc = torrc_lines(h)
        self.assertFalse([line for line in torrc if line.startswith("HiddenServicePoW")])
        self.assertIn("HiddenServiceEnableIntroDoSDefense 1", torrc)
        self.assertEqual(h.events.named("tor.pow.unavailable"), [{"detail": "tor --list-modules lacks pow"}])
        warning = [line for line in h.lines if "proof-of-work" in line]
        self.assertEqual(len(warning), 1)
        self.assertIn("WITHOUT Tor's PoW defence", warning[0])
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.service.state, "ready")
        # Asked once per server, not at every relaunch.
        h.process.exit(code=1)
        h.advance(1)
        h.listener_up()
        self.assertEqual(len(h.reactor.module_queries), 1)
        self.assertEqual(len(h.events.named("tor.pow.unavailable")), 1)

    def test_pow_module_detection(self):
        from deaddrop.tor.defences import has_pow_module

        self.assertTrue(has_pow_module(TOR_MODULES))
        self.assertFalse(has_pow_module("relay: yes\npow: no\n"))
        self.assertFalse(has_pow_module("relay: yes\ndirauth: yes\n"))  # Tor < 0.4.8
        self.assertFalse(has_pow_module(""))  # --list-modules unknown or failed

    def test_onion_ready_only_after_upload(self):
        h = self.harness()
        d = h.service.when_onion_ready()
        h.launch_ready()
        self.assertNoResult(d)
        address = h.service.onion_address
        h.uploaded(address, action="UPLOAD")
        self.assertNoResult(d)
        h.uploaded(address, action="FAILED", extra="REASON=UPLOAD_REJECTED")
        self.assertEqual(h.events.named("tor.onion.upload_failed"),
                         [{"onion": address, "detail": "source", "reason": "UPLOAD_REJECTED"}])
        h.uploaded(address)
        self.assertEqual(self.successResultOf(d), address)
        self.assertEqual(self.successResultOf(h.service.when_onion_ready()), address)
        self.assertEqual(h.events.named("tor.onion.published"), [{"onion": address, "detail": "source"}])
        self.assertIn(f"Source onion service published: http://{address}/", h.lines)

    def test_the_log_holds_every_console_line_so_a_server_needs_no_report(self):
        # The server passes no report (twistd's log is its console): whatever a report would
        # print must be in the log already, or an admin never sees it; with a report that also
        # logged, each line was printed twice.
        from twisted.logger import formatEvent, globalLogPublisher

        logged: list[str] = []
        observer = lambda event: logged.append(formatEvent(event) or "")  # noqa: E731
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        h = self.harness(bootstrap=(10, "conn_done", "Connected to a relay"),
                         tuning=Tuning(retry_initial=1.0, retry_max=60.0))
        h.launch_ready()
        h.tor.event('STATUS_CLIENT NOTICE BOOTSTRAP PROGRESS=100 TAG=done SUMMARY="Done"')
        h.settle()
        h.uploaded(h.service.onion_address)
        h.process.exit(sig=9)
        h.settle()
        self.assertIn(f"Source onion service published: http://{h.service.onion_address}/", h.lines)
        self.assertIn("Tor is down; trying again in 1 s", h.lines)
        for line in h.lines:
            self.assertIn(line, logged)

    def test_key_persisted_0600_and_reused_after_restart(self):
        data_dir = self.shortdir()
        first = self.harness(data_dir=data_dir)
        first.launch_ready()
        key, blob = expected_blob(data_dir, keys.SOURCE)
        key_file = os.path.join(keys.service_dir(data_dir, keys.SOURCE), keys.SECRET_KEY_FILE)
        self.assertEqual(stat.S_IMODE(os.stat(key_file).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(keys.service_dir(data_dir, keys.SOURCE)).st_mode), 0o700)
        d = first.stop()
        first.process.exit(0)
        first.settle()
        self.successResultOf(d)
        self.assertEqual(first.events.named("tor.onion.key_created"), [{"onion": key.address, "detail": "source"}])

        second = self.harness(data_dir=data_dir)
        second.launch_ready()
        self.assertIn(f"HiddenServiceDir {keys.service_dir(os.path.abspath(data_dir), keys.SOURCE)}",
                      torrc_lines(second))
        self.assertEqual(second.service.onion_address, key.address)
        self.assertEqual(second.events.named("tor.onion.key_created"), [])

    def test_stop_terminates_tor_and_waits(self):
        h = self.harness()
        h.launch_ready()
        d = h.stop()
        self.assertEqual(h.process.signals, ["TERM"])
        self.assertNoResult(d)
        h.advance(10)
        self.assertEqual(h.process.signals, ["TERM", "KILL"])
        h.process.exit(sig=9)
        h.settle()
        self.successResultOf(d)
        h.advance(120)
        self.assertEqual(len(h.reactor.processes), 1)  # no relaunch after stop
        self.assertIn("tor.stopped", h.events.names())
        self.assertEqual(h.fatal, [])

    def test_long_socket_path_uses_tcp_auto_port(self):
        long_dir = os.path.join(self.mktemp(), "d" * 90)
        h = self.harness(data_dir=long_dir)
        h.start()
        with open(os.path.join(long_dir, "tor", "torrc")) as f:
            torrc = f.read()
        self.assertIn("ControlPort 127.0.0.1:auto", torrc)
        with open(os.path.join(long_dir, "tor", "control-port.txt"), "w") as f:
            f.write("PORT=127.0.0.1:9876\n")
        h.listener_up()
        self.assertEqual((h.endpoints[-1].kind, h.endpoints[-1].host, h.endpoints[-1].port), ("tcp", "127.0.0.1", 9876))
        self.assertEqual(source_added(h), 1)


class BootstrapStallTests(_Base):
    """Issue 13: after a minute without bootstrap progress, say once why the onion is not up."""

    STUCK = ('STATUS_CLIENT WARN BOOTSTRAP PROGRESS=14 TAG=handshake SUMMARY="Handshaking with a relay" '
             'WARNING="No route to host" REASON=NOROUTE COUNT=3 RECOMMENDATION=warn')

    def stalled_lines(self, h):
        return [line for line in h.lines if line.startswith("The source onion is not reachable yet")]

    def test_says_once_after_a_minute_without_progress(self):
        h = self.harness(bootstrap=(5, "conn", "Connecting to a relay"))
        h.launch_ready()
        h.advance(30)
        h.tor.event(self.STUCK)  # progress: the minute starts again
        h.settle()
        h.advance(59)
        self.assertEqual(self.stalled_lines(h), [])
        h.tor.event(self.STUCK)  # the same percentage again is not progress
        h.settle()
        h.advance(1)
        lines = self.stalled_lines(h)
        self.assertEqual(len(lines), 1)
        self.assertIn("stuck at 14% (Handshaking with a relay", lines[0])
        self.assertIn("No route to host", lines[0])
        self.assertIn("Internet access", lines[0])
        self.assertIn("--tor none", lines[0])
        self.assertIn("DeadDrop stops", lines[0])  # a first start that never connects ends: say so
        self.assertEqual(h.events.named("tor.bootstrap.stalled"),
                         [{"progress": 14, "summary": "Handshaking with a relay", "detail": "No route to host"}])
        h.advance(60)
        self.assertEqual(len(self.stalled_lines(h)), 1)  # once, not every minute
        self.assertEqual(h.fatal, [])  # the bootstrap timeout (180 s) has not passed yet

    def test_a_demo_offline_never_gives_up_and_says_so(self):
        # bootstrap_timeout=None: what service.tor_side.add_tor gives a --demo instance.
        h = self.harness(bootstrap=(5, "conn", "Connecting to a relay"), bootstrap_timeout=None)
        h.launch_ready()
        h.tor.event(self.STUCK)
        h.settle()
        h.advance(600)  # ten minutes without the Tor network
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.process.signals, [])  # the same Tor keeps trying to connect
        [line] = self.stalled_lines(h)
        self.assertIn("keeps serving", line)
        self.assertNotIn("DeadDrop stops", line)
        h.process.exit(sig=9)  # and a Tor that dies meanwhile is started again
        h.settle()
        h.advance(h.events.named("tor.restart")[-1]["delay"])
        h.listener_up()
        h.advance(3600)
        self.assertEqual((len(h.reactor.processes), h.fatal), (2, []))

    def test_repeated_bootstrap_warnings_are_folded_after_the_explanation(self):
        # Offline, Tor repeats three [warn] lines every few seconds (151 in 6 minutes in a
        # review): after the explanation they are counted, and the count comes with the
        # explanation again every five minutes, so that it is not scrolled away.
        from twisted.logger import formatEvent, globalLogPublisher

        logged = []
        observer = lambda event: logged.append(formatEvent(event) or "")  # noqa: E731
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        problem = ["[warn] Problem bootstrapping. Stuck at 14% (handshake): Handshaking with a relay. "
                   "(No route to host; NOROUTE; count {n}; recommendation warn; host "
                   "AAAABBBBCCCCDDDDEEEEFFFF0000111122223333 at 192.0.2.{n}:443)",
                   "[warn] {n} connections have failed:",
                   "[warn]  {n} connections died in state connect()ing with SSL state (No SSL object)"]

        def tor_warns(n):
            h.process.say(*(line.format(n=n) for line in problem))

        def tor_lines():
            return [line for line in logged if line.startswith("tor: [warn]")]

        h = self.harness(bootstrap=(5, "conn", "Connecting to a relay"), bootstrap_timeout=None)
        h.launch_ready()
        h.tor.event(self.STUCK)
        h.settle()
        for n in range(1, 7):  # before the explanation every line is logged, as it comes
            tor_warns(n)
            h.advance(10)
        self.assertEqual(len(tor_lines()), 18)
        self.assertEqual(len(self.stalled_lines(h)), 1)
        for n in range(7, 37):  # five minutes more: folded
            tor_warns(n)
            h.advance(10)
        h.process.say("[warn] Something new: Tor says it once")
        self.assertEqual(len(tor_lines()), 19)
        self.assertIn("Something new", tor_lines()[-1])
        lines = self.stalled_lines(h)
        self.assertEqual(len(lines), 2)
        self.assertIn("--tor none", lines[1])
        self.assertIn("Tor repeated its warnings 90 times in the last 5 minutes", lines[1])
        self.assertIn("connections died", lines[1])
        self.assertEqual(len([line for line in logged if "Tor repeated its warnings" in line]), 1)
        h.advance(300)  # a quiet Tor: no reminder
        self.assertEqual(len(self.stalled_lines(h)), 2)
        tor_warns(40)
        h.tor.event('STATUS_CLIENT NOTICE BOOTSTRAP PROGRESS=100 TAG=done SUMMARY="Done"')
        h.settle()
        h.advance(600)  # bootstrapped: no reminder, and Tor's lines are counted per day instead
        self.assertEqual(len(self.stalled_lines(h)), 2)
        self.assertEqual(len(tor_lines()), 19)

    def test_silent_when_bootstrap_progresses(self):
        h = self.harness(bootstrap=(5, "conn", "Connecting to a relay"))
        h.launch_ready()
        for progress in (10, 14, 50, 75, 90):
            h.advance(50)
            h.tor.event(f'STATUS_CLIENT NOTICE BOOTSTRAP PROGRESS={progress} TAG=x SUMMARY="step"')
            h.settle()
        h.tor.event('STATUS_CLIENT NOTICE BOOTSTRAP PROGRESS=100 TAG=done SUMMARY="Done"')
        h.settle()
        h.advance(120)
        self.assertEqual(self.stalled_lines(h), [])
        self.assertEqual(h.events.named("tor.bootstrap.stalled"), [])


class CircuitCloserTests(_Base):
    def closer(self, **kw):
        from deaddrop.tor import TorCircuitCloser

        h = self.harness(**kw)
        h.launch_ready() if kw.get("mode", "launch") == "launch" else h.start()
        return h, TorCircuitCloser(h.service)

    def test_closecircuit_through_the_control_port(self):
        from deaddrop.transport.circuits import Circuit

        h, closer = self.closer()
        d = closer.close(Circuit(155))
        h.settle()
        self.assertIs(self.successResultOf(d), True)
        self.assertEqual(h.tor.sent("CLOSECIRCUIT"), ["CLOSECIRCUIT 155"])
        d = closer.close(Circuit(70000))  # above 16 bits (the PROXY address's HI:LO)
        h.settle()
        self.assertIs(self.successResultOf(d), True)
        d = closer.close(Circuit(155))  # already gone: 552 Unknown circuit
        h.settle()
        self.assertIs(self.successResultOf(d), False)
        self.assertEqual(closer.closed, 2)

    def test_nothing_to_close(self):
        from deaddrop.transport.circuits import LOCAL, Circuit, NoCloser

        h, closer = self.closer()
        self.assertIs(self.successResultOf(closer.close(LOCAL)), False)
        self.assertIs(self.successResultOf(NoCloser().close(Circuit(155))), False)
        self.assertEqual(h.tor.sent("CLOSECIRCUIT"), [])
        # An attached Tor's onion connections carry no ids; a stray one is not sent to it.
        h2, attached = self.closer(mode="control:9051")
        self.assertIs(self.successResultOf(attached.close(Circuit(155))), False)
        self.assertEqual(h2.tor.sent("CLOSECIRCUIT"), [])

    def test_circuit_id_never_logged(self):
        from twisted.logger import globalLogPublisher

        from deaddrop.transport.circuits import Circuit

        seen = []
        globalLogPublisher.addObserver(seen.append)
        self.addCleanup(globalLogPublisher.removeObserver, seen.append)
        h, closer = self.closer()
        for circuit in (Circuit(48879), Circuit(48879)):  # closed, then unknown
            closer.close(circuit)
            h.settle()
        from twisted.logger import formatEvent

        text = " ".join(formatEvent(e) + repr(e) for e in seen) + repr(h.events.records) + " ".join(h.lines)
        self.assertNotIn("48879", text)
        self.assertNotIn("beef", text.lower().replace("dead:beef", ""))


# -- journalist onion with client authorisation -----------------------------------------------


class JournalistOnionTests(_Base):
    def test_add_onion_with_client_auth(self):
        h = self.harness(journalist=True)
        addr1, alice = keys.add_client(h.data_dir, "alice")
        addr2, bob = keys.add_client(h.data_dir, "bob")
        self.assertEqual(addr1, addr2)
        h.launch_ready()
        _, source_blob = expected_blob(h.data_dir, keys.SOURCE)
        jkey, journalist_blob = expected_blob(h.data_dir, keys.JOURNALIST)
        auth = " ".join(f"ClientAuthV3={k}" for k in sorted([alice.public_b32, bob.public_b32]))
        self.assertEqual(
            add_onion_commands(h.tor),
            [
                f"ADD_ONION {journalist_blob} Flags=V3Auth Port=80,127.0.0.1:9090 {auth}",
            ],
        )
        self.assertEqual(h.service.journalist_onion_address, jkey.address)
        self.assertEqual(jkey.address, addr1)
        # the journalist address is not written to the security log
        self.assertEqual(h.events.named("tor.onion.added")[1], {"detail": "journalist", "count": 2})

    def test_journalist_virtual_port(self):
        h = self.harness(journalist=True, journalist_onion_port=443)
        _, alice = keys.add_client(h.data_dir, "alice")
        h.launch_ready()
        _, blob = expected_blob(h.data_dir, keys.JOURNALIST)
        self.assertEqual(add_onion_commands(h.tor)[-1],
                         f"ADD_ONION {blob} Flags=V3Auth Port=443,127.0.0.1:9090 ClientAuthV3={alice.public_b32}")

    def test_no_clients_means_not_published_then_revocation_republishes(self):
        h = self.harness(journalist=True)
        h.launch_ready()
        self.assertEqual(len(add_onion_commands(h.tor)), 0)  # never publish without auth
        self.assertEqual(len(h.events.named("tor.journalist.waiting")), 1)
        self.assertIsNone(h.service.journalist_onion_address)

        _, alice = keys.add_client(h.data_dir, "alice")
        h.advance(10)
        jkey, blob = expected_blob(h.data_dir, keys.JOURNALIST)
        self.assertEqual(add_onion_commands(h.tor)[-1],
                         f"ADD_ONION {blob} Flags=V3Auth Port=80,127.0.0.1:9090 ClientAuthV3={alice.public_b32}")
        _, bob = keys.add_client(h.data_dir, "bob")
        h.advance(10)
        self.assertEqual(h.tor.sent("DEL_ONION"), [f"DEL_ONION {jkey.service_id}"])
        self.assertIn(f"ClientAuthV3={bob.public_b32}", add_onion_commands(h.tor)[-1])

        keys.remove_client(h.data_dir, "alice")
        h.advance(10)
        last = add_onion_commands(h.tor)[-1]
        self.assertNotIn(alice.public_b32, last)
        self.assertIn(bob.public_b32, last)
        self.assertEqual(len(h.tor.sent("DEL_ONION")), 2)
        h.advance(10)  # nothing changed: nothing sent
        self.assertEqual(len(h.tor.sent("DEL_ONION")), 2)

        keys.remove_client(h.data_dir, "bob")
        h.advance(10)
        self.assertEqual(len(h.tor.sent("DEL_ONION")), 3)
        self.assertEqual(len(add_onion_commands(h.tor)), 3)
        self.assertIsNone(h.service.journalist_onion_address)
        self.assertEqual([f["count"] for f in h.events.named("tor.journalist.clients")], [1, 2, 1, 0])

    def test_malformed_client_file_fails_closed(self):
        h = self.harness(journalist=True)
        keys.add_client(h.data_dir, "alice")
        h.launch_ready()
        self.assertEqual(len(add_onion_commands(h.tor)), 1)
        with open(os.path.join(keys.clients_dir(h.data_dir), "eve.auth"), "w") as f:
            f.write("garbage\n")
        h.advance(10)
        self.assertEqual(len(h.tor.sent("DEL_ONION")), 1)
        self.assertEqual(len(h.events.named("tor.journalist.clients_invalid")), 1)
        h.advance(10)
        self.assertEqual(len(h.events.named("tor.journalist.clients_invalid")), 1)
        self.assertEqual(len(add_onion_commands(h.tor)), 1)


# -- descriptor check -------------------------------------------------------------------------


ATTACHED_SOURCE_KEYWORDS = (
    "MaxStreams=16 Flags=MaxStreamsCloseCircuit PoWDefensesEnabled=1 PoWQueueRate=5 PoWQueueBurst=50"
)


class DescriptorCheckTests(_Base):
    """ADD_ONION services (attached Tor) are republished by DEL_ONION + ADD_ONION; the torrc
    source onion of a launched Tor by relaunching that Tor (a SETCONF would reset PoW)."""

    def tuning(self):
        return Tuning(check_interval=60.0, publish_grace=120.0)

    def attached(self):
        h = self.harness(mode="control:9051", tuning=self.tuning())
        h.start()
        return h

    def test_republishes_when_no_upload_seen(self):
        h = self.attached()
        key, blob = expected_blob(h.data_dir, keys.SOURCE)
        h.advance(60)
        self.assertEqual(len(add_onion_commands(h.tor)), 1)  # still within the grace period
        h.advance(60)
        self.assertEqual(h.tor.sent("DEL_ONION"), [f"DEL_ONION {key.service_id}"])
        self.assertEqual(add_onion_commands(h.tor),
                         [f"ADD_ONION {blob} {ATTACHED_SOURCE_KEYWORDS} Port=80,127.0.0.1:8080"] * 2)
        self.assertEqual(h.events.named("tor.onion.republish"),
                         [{"onion": key.address, "detail": "source", "reason": "not_uploaded"}])
        self.assertIn("GETINFO onions/current", h.tor.commands)

    def test_launched_tor_relaunched_when_no_upload_seen(self):
        h = self.harness(tuning=self.tuning())
        h.launch_ready()
        key = keys.read_onion_key(keys.service_dir(h.data_dir, keys.SOURCE))
        h.advance(60)
        self.assertEqual(len(h.reactor.processes), 1)
        h.advance(60)
        self.assertEqual(h.events.named("tor.onion.republish")[0]["reason"], "not_uploaded")
        self.assertEqual(h.process.signals, ["TERM"])
        self.assertEqual([c for c in h.tor.commands if c.split(" ")[0] in ("SETCONF", "ADD_ONION")], [])
        h.process.exit(0)
        h.advance(1)
        self.assertEqual(len(h.reactor.processes), 2)
        h.listener_up()
        self.assertEqual(h.service.onion_address, key.address)
        self.assertEqual(source_added(h), 2)

    def test_no_republish_after_upload(self):
        h = self.attached()
        h.uploaded(h.service.onion_address)
        h.advance(60)
        h.advance(60)
        h.advance(60)
        self.assertEqual(len(add_onion_commands(h.tor)), 1)
        self.assertEqual(h.events.named("tor.onion.republish"), [])

    def test_republishes_when_onion_missing_from_tor(self):
        h = self.attached()
        h.uploaded(h.service.onion_address)
        h.tor.onions.clear()  # e.g. someone else's DEL_ONION
        h.advance(60)
        self.assertEqual(len(add_onion_commands(h.tor)), 2)
        self.assertEqual(h.events.named("tor.onion.republish")[0]["reason"], "missing")
        d = h.service.when_onion_ready()
        self.successResultOf(d)


# -- supervision ------------------------------------------------------------------------------


class SupervisionTests(_Base):
    def test_relaunch_with_backoff_and_same_key_after_exit(self):
        h = self.harness(tuning=Tuning(retry_initial=1.0, retry_max=60.0))
        h.launch_ready()
        _, blob = expected_blob(h.data_dir, keys.SOURCE)
        first = h.process
        first.exit(sig=9)
        h.settle()
        self.assertEqual(h.events.named("tor.exited"),
                         [{"reason": "signal_9", "detail": "Tor exited unexpectedly (killed by SIGKILL)"}])
        self.assertEqual(h.events.named("tor.restart")[-1], {"delay": 1.0, "detail": "relaunch"})
        self.assertEqual(h.service.state, "restarting")
        self.assertFalse(h.fatal)
        h.advance(0.9)
        self.assertEqual(len(h.reactor.processes), 1)
        h.advance(0.1)
        self.assertEqual(len(h.reactor.processes), 2)
        # the relaunch fails at startup: back-off doubles
        h.process.say("[warn] Could not bind to 127.0.0.1:9999: Address already in use",
                      "[err] Failed to open listeners")
        h.process.exit(1)
        h.settle()
        failed = h.events.named("tor.restart.failed")
        self.assertEqual(failed[-1]["reason"], "exit_1")
        self.assertIn("Failed to open listeners", failed[-1]["detail"])
        self.assertEqual(h.events.named("tor.restart")[-1]["delay"], 2.0)
        h.advance(2)
        self.assertEqual(len(h.reactor.processes), 3)
        h.listener_up()
        self.assertEqual(add_onion_commands(h.tor), [])  # the torrc names the same key directory
        self.assertIn(f"HiddenServiceDir {keys.service_dir(os.path.abspath(h.data_dir), keys.SOURCE)}",
                      torrc_lines(h))
        self.assertEqual(source_added(h), 2)
        self.assertEqual(h.service.state, "ready")
        self.assertEqual(h.service.tor_pid, h.process.pid)
        self.assertFalse(h.fatal)

    def test_backoff_is_capped_and_resets_after_stable_period(self):
        h = self.harness(tuning=Tuning(retry_initial=1.0, retry_max=4.0, stable_after=60.0))
        h.launch_ready()
        delays = []
        for _ in range(4):
            h.process.exit(1)
            h.settle()
            delays.append(h.events.named("tor.restart")[-1]["delay"])
            h.advance(delays[-1])
        self.assertEqual(delays, [1.0, 2.0, 4.0, 4.0])
        h.listener_up()
        self.assertEqual(h.service.state, "ready")
        h.advance(61)
        h.process.exit(sig=11)
        h.settle()
        self.assertEqual(h.events.named("tor.restart")[-1]["delay"], 1.0)

    def test_control_connection_lost_while_tor_runs(self):
        h = self.harness(tuning=Tuning(control_grace=2.0))
        h.launch_ready()
        h.tor.transport.loseConnection()
        h.settle()
        self.assertEqual(h.events.named("tor.control.lost"), [])
        h.advance(2)
        self.assertEqual(h.events.named("tor.control.lost"),
                         [{"reason": "control_lost", "detail": "the Tor control connection was lost"}])
        self.assertEqual(h.process.signals, ["TERM"])
        h.process.exit(0)
        h.advance(1)
        self.assertEqual(len(h.reactor.processes), 2)

    def test_tor_death_reported_as_exit_not_control_loss(self):
        h = self.harness()
        h.launch_ready()
        h.tor.transport.loseConnection()  # the socket closes first...
        h.settle()
        h.process.exit(sig=9)  # ...then the exit status arrives
        h.settle()
        self.assertEqual(h.events.named("tor.control.lost"), [])
        self.assertEqual(h.events.named("tor.exited")[0]["reason"], "signal_9")
        h.advance(5)
        self.assertEqual(h.events.named("tor.control.lost"), [])

    def test_when_onion_ready_waits_for_republication_after_relaunch(self):
        h = self.harness()
        h.launch_ready()
        address = h.service.onion_address
        h.uploaded(address)
        h.process.exit(sig=9)
        h.settle()
        d = h.service.when_onion_ready()
        self.assertNoResult(d)
        h.advance(1)
        h.listener_up()
        self.assertNoResult(d)
        h.uploaded(address)
        self.assertEqual(self.successResultOf(d), address)


class BootstrapSupervisionTests(_Base):
    """Tor dying before it was ever ready is relaunched too; only the bootstrap timeout, counted
    from the start, is fatal."""

    def test_killed_during_bootstrap_is_relaunched(self):
        h = self.harness(bootstrap=(45, "loading_keys", "Loading authority key certs"))
        h.launch_ready()
        self.assertEqual(h.service.state, "bootstrapping")
        h.process.exit(sig=9)
        h.settle()
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.events.named("tor.fatal"), [])
        self.assertEqual(h.events.named("tor.exited"), [
            {"reason": "signal_9", "detail": "Tor exited during startup (killed by SIGKILL): "
                                             "it printed no error; see its log lines above"}])
        self.assertEqual(h.events.named("tor.restart"), [{"delay": 1.0, "detail": "relaunch"}])
        self.assertEqual(h.service.state, "restarting")
        h.bootstrap = (100, "done", "Done")
        h.advance(1)
        self.assertEqual(len(h.reactor.processes), 2)
        h.listener_up()
        self.assertEqual(h.service.state, "ready")
        h.uploaded(h.service.onion_address)
        self.assertEqual(self.successResultOf(h.service.when_onion_ready()), h.service.onion_address)
        self.assertEqual(h.fatal, [])

    def test_killed_before_its_control_port_opened_is_relaunched(self):
        h = self.harness()
        h.start()
        h.process.exit(sig=15)
        h.settle()
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.events.named("tor.exited")[0]["reason"], "signal_15")
        h.advance(1)
        h.listener_up()
        self.assertEqual(h.service.state, "ready")

    def test_exit_after_its_control_port_opened_is_relaunched(self):
        h = self.harness(bootstrap=(10, "conn_done", "Connected to a relay"))
        h.launch_ready()
        h.process.say("[err] Assertion failed somewhere inside Tor")
        h.process.exit(1)
        h.settle()
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.events.named("tor.exited")[0]["reason"], "exit_1")
        h.advance(1)
        self.assertEqual(len(h.reactor.processes), 2)

    def test_control_connection_lost_during_bootstrap_is_relaunched(self):
        h = self.harness(bootstrap=(45, "loading_keys", "Loading authority key certs"),
                         tuning=Tuning(control_grace=2.0))
        h.launch_ready()
        h.tor.transport.loseConnection()
        h.settle()
        h.advance(2)
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.events.named("tor.control.lost")[0]["reason"], "control_lost")
        self.assertEqual(h.process.signals, ["TERM"])
        h.process.exit(0)
        h.bootstrap = (100, "done", "Done")
        h.advance(1)
        h.listener_up()
        self.assertEqual(h.service.state, "ready")

    def test_a_command_cut_off_by_tors_death_is_not_fatal(self):
        """Killed while a command was in flight: the command fails first (the control connection
        closes), then the exit status arrives. Neither is fatal."""
        h = self.harness()
        h.start()
        original = h.connect

        def connect(endpoint):
            d = original(endpoint)
            h.tor.unanswered = {"GETINFO status/bootstrap-phase"}
            return d

        h.service._connect = connect
        h.listener_up()
        self.assertEqual(h.tor.commands[-1], "GETINFO status/bootstrap-phase")
        h.tor.transport.loseConnection()
        h.settle()
        self.assertEqual(h.fatal, [])
        h.process.exit(sig=9)
        h.settle()
        self.assertEqual(h.fatal, [])
        self.assertEqual(h.events.named("tor.exited")[0]["reason"], "signal_9")
        h.service._connect = original
        h.advance(1)
        h.listener_up()
        self.assertEqual(h.service.state, "ready")

    def test_the_bootstrap_timeout_counts_from_the_start_across_relaunches(self):
        h = self.harness(bootstrap=(45, "loading_keys", "Loading authority key certs"),
                         tuning=Tuning(retry_initial=1.0, retry_max=60.0))
        h.launch_ready()
        for _ in range(3):  # killed three times: relaunched after 1, 2, 4 s
            h.advance(10)
            h.process.exit(sig=9)
            h.settle()
            h.advance(h.events.named("tor.restart")[-1]["delay"])
            h.listener_up()
        self.assertEqual(len(h.reactor.processes), 4)
        self.assertEqual(h.fatal, [])
        self.assertEqual([e["delay"] for e in h.events.named("tor.restart")], [1.0, 2.0, 4.0])
        self.assertEqual(len(h.events.named("tor.restart.failed")), 2)  # the relaunches that died
        h.advance(180 - 37 - 0.5)
        self.assertEqual(h.fatal, [])
        h.advance(0.5)
        self.assertEqual(h.fatal, [
            "Tor did not finish bootstrapping within 180 s (stuck at 45%: Loading authority key certs); "
            "Tor ended 3 times before it was ready (last: killed by SIGKILL)"])
        self.assertEqual(h.events.named("tor.fatal")[0]["reason"], "bootstrap_timeout")
        self.assertEqual(h.process.signals, ["TERM"])
        h.process.exit(0)
        h.advance(300)
        self.assertEqual(len(h.fatal), 1)
        self.assertEqual(len(h.reactor.processes), 4)

    def test_the_bootstrap_timeout_may_fall_while_waiting_to_relaunch(self):
        h = self.harness(tuning=Tuning(retry_initial=100.0, retry_max=100.0))
        h.start()
        h.advance(170)
        h.process.exit(sig=9)
        h.settle()
        h.advance(10)
        self.assertEqual(len(h.fatal), 1)
        self.assertEqual(h.fatal, ["Tor did not become ready within 180 s (no working control connection); "
                                   "Tor ended 1 time before it was ready (last: killed by SIGKILL)"])
        h.advance(200)
        self.assertEqual(len(h.reactor.processes), 1)  # the relaunch that was due never comes


# -- fatal errors -----------------------------------------------------------------------------


class FatalTests(_Base):
    def test_bad_option_is_fatal_once_with_tors_message(self):
        h = self.harness()
        h.start()
        h.process.say(
            "[notice] Read configuration file \"/x/torrc\".",
            "[warn] Failed to parse/validate config: Unknown option 'FooBar'.  Failing.",
            "[err] Reading config failed--see warnings above.",
        )
        h.process.exit(1)
        h.settle()
        self.assertEqual(
            h.fatal,
            ["Tor exited during startup (exit status 1): "
             "Failed to parse/validate config: Unknown option 'FooBar'. Failing."],
        )
        self.assertEqual(h.events.named("tor.fatal")[0]["reason"], "exit_1")
        h.advance(300)
        self.assertEqual(len(h.fatal), 1)
        self.assertEqual(len(h.reactor.processes), 1)  # no relaunch of a misconfigured Tor
        self.assertEqual(h.service.state, "failed")

    def test_binary_missing(self):
        h = self.harness(tor_binary="/nonexistent/tor")
        ready = h.service.when_onion_ready()
        h.start()
        message = "Tor binary not found: /nonexistent/tor (check --tor-binary)"
        self.assertEqual(str(self.failureResultOf(ready).value), message)
        self.assertEqual(h.fatal, ["Tor binary not found: /nonexistent/tor (check --tor-binary)"])
        self.assertEqual(h.reactor.processes, [])
        self.assertEqual(h.events.named("tor.fatal")[0]["reason"], "binary_missing")

    def test_tor_of_another_running_server_is_left_alone(self):
        import signal
        import subprocess
        import sys

        from deaddrop.tor._process import TorFiles, tor_owner_pid

        h = self.harness()
        files = TorFiles(keys.tor_dir(h.data_dir))
        os.makedirs(files.tor_dir, 0o700, exist_ok=True)
        # Another server on this data directory: its child runs on our torrc, as its Tor would.
        script = ("import subprocess, sys, time\n"
                  "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\n"
                  "print(p.pid, flush=True)\n"
                  "time.sleep(60)\n")
        server = subprocess.Popen([sys.executable, "-c", script, files.torrc], stdout=subprocess.PIPE)
        tor_pid = int(server.stdout.readline())

        def cleanup():
            for pid in (tor_pid, server.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            server.wait()
            server.stdout.close()

        self.addCleanup(cleanup)
        with open(files.torrc, "w") as f:
            f.write(f"DataDirectory {files.tor_dir}\n__OwningControllerProcess {server.pid}\n")
        with open(files.pid_file, "w") as f:
            f.write(f"{tor_pid}\n")
        h.start()
        self.assertEqual(h.fatal, [
            f"another DeadDrop server (pid {server.pid}) is running on this data directory "
            f"(its Tor is pid {tor_pid}); stop it first or use another --data-dir"])
        self.assertEqual(h.events.named("tor.fatal")[0]["reason"], "data_dir_in_use")
        self.assertEqual(h.events.named("tor.stale_killed"), [])
        self.assertEqual(h.reactor.processes, [])
        os.kill(tor_pid, 0)  # still running
        # Once that server is gone (its Tor reparented), the Tor counts as left over by a crash.
        server.kill()
        server.wait()
        self.assertIsNone(tor_owner_pid(files, tor_pid))

    def test_bootstrap_timeout(self):
        h = self.harness(bootstrap=(45, "loading_keys", "Loading authority key certs"))
        h.launch_ready()
        h.tor.event('STATUS_CLIENT WARN BOOTSTRAP PROGRESS=45 TAG=loading_keys SUMMARY="Loading authority key certs" '
                    'WARNING="Connection refused" REASON=CONNECTREFUSED COUNT=3 RECOMMENDATION=warn')
        h.settle()
        h.advance(179)
        self.assertEqual(h.fatal, [])
        h.advance(1)
        self.assertEqual(h.fatal, [
            "Tor did not finish bootstrapping within 180 s (stuck at 45%: Loading authority key certs); "
            "last problem: Connection refused"
        ])
        self.assertEqual(h.process.signals, ["TERM"])
        h.process.exit(0)  # the exit caused by our TERM is not a second fatal error
        h.settle()
        h.advance(300)
        self.assertEqual(len(h.fatal), 1)
        self.assertEqual(len(h.reactor.processes), 1)

    def test_add_onion_refused_is_fatal(self):
        h = self.harness(mode="control:9051")
        original = h.connect

        def connect(endpoint):
            d = original(endpoint)
            h.tor.add_onion_error = "512 Invalid VIRTPORT/TARGET"
            return d

        h.service._connect = connect
        h.start()
        self.assertEqual(h.fatal, ["Tor refused a command: 512 Invalid VIRTPORT/TARGET"])
        self.assertEqual(len(add_onion_commands(h.tor)), 1)  # not retried: nothing to do with PoW


# -- attaching to a running Tor ---------------------------------------------------------------


class ControlModeTests(_Base):
    def test_attach_publishes_without_launching(self):
        h = self.harness(mode="control:unix:/run/tor/control")
        h.start()
        self.assertEqual(h.reactor.processes, [])
        self.assertEqual(h.endpoints[0].describe(), "unix:/run/tor/control")
        self.assertEqual(h.tor.sent("TAKEOWNERSHIP"), [])
        _, blob = expected_blob(h.data_dir, keys.SOURCE)
        # The same defences as keywords (no circuit ids: ADD_ONION cannot export them).
        self.assertEqual(add_onion_commands(h.tor),
                         [f"ADD_ONION {blob} {ATTACHED_SOURCE_KEYWORDS} Port=80,127.0.0.1:8080"])

    def test_attached_tor_without_pow_publishes_without_it(self):
        h = self.harness(mode="control:9051")
        original = h.connect

        def connect(endpoint):
            d = original(endpoint)
            h.tor.add_onion_error = "512 PoWDefensesEnabled: the pow module is not available"
            return d

        h.service._connect = connect
        h.start()
        _, blob = expected_blob(h.data_dir, keys.SOURCE)
        self.assertEqual(add_onion_commands(h.tor)[-1],
                         f"ADD_ONION {blob} MaxStreams=16 Flags=MaxStreamsCloseCircuit Port=80,127.0.0.1:8080")
        self.assertEqual(len(h.events.named("tor.pow.unavailable")), 1)

    def test_attached_tor_with_pow_off(self):
        h = self.harness(mode="control:9051", pow=False)
        h.start()
        self.assertNotIn("PoW", add_onion_commands(h.tor)[0])

    def test_unreachable_control_port_is_fatal(self):
        h = self.harness(mode="control:9051")
        h.refuse = ierror.ConnectionRefusedError("Connection refused")
        h.start()
        self.assertEqual(len(h.fatal), 1)
        expected = "cannot connect to the Tor control port tcp:127.0.0.1:9051: "
        self.assertTrue(h.fatal[0].startswith(expected), h.fatal[0])

    def test_reconnect_with_backoff_after_control_lost(self):
        h = self.harness(mode="control:9051", tuning=Tuning(retry_initial=1.0))
        h.start()
        _, blob = expected_blob(h.data_dir, keys.SOURCE)
        h.tor.transport.loseConnection()
        h.settle()
        self.assertEqual(h.events.named("tor.control.lost")[0]["reason"], "control_lost")
        self.assertEqual(h.events.named("tor.restart")[-1], {"delay": 1.0, "detail": "reconnect"})
        h.refuse = ierror.ConnectionRefusedError("Connection refused")
        h.advance(1)
        self.assertEqual(h.events.named("tor.restart.failed")[-1]["reason"], "control_unreachable")
        self.assertEqual(h.events.named("tor.restart")[-1]["delay"], 2.0)
        h.refuse = None
        h.advance(2)
        self.assertEqual(add_onion_commands(h.tor), [f"ADD_ONION {blob} {ATTACHED_SOURCE_KEYWORDS} Port=80,127.0.0.1:8080"])
        self.assertFalse(h.fatal)


# -- pure helpers -----------------------------------------------------------------------------


class ConfigTests(unittest.TestCase):
    def test_parse_tor_mode(self):
        self.assertEqual(parse_tor_mode("launch"), "launch")
        self.assertEqual(parse_tor_mode("none"), "none")
        self.assertEqual(parse_tor_mode("control:9051"), "control:tcp:127.0.0.1:9051")
        self.assertEqual(parse_tor_mode("control:tcp:127.0.0.1:9151"), "control:tcp:127.0.0.1:9151")
        self.assertEqual(parse_tor_mode("control:[::1]:9051"), "control:tcp:[::1]:9051")
        self.assertEqual(parse_tor_mode("control:unix:/run/tor/control"), "control:unix:/run/tor/control")
        self.assertEqual(parse_tor_mode("control:/run/tor/control"), "control:unix:/run/tor/control")
        for bad in ("", "lunch", "control:", "control:tcp:10.0.0.1:9051", "control:unix:relative",
                    "control:tcp:localhost:99999", "control:example.org:9051"):
            with self.assertRaises(ValueError, msg=bad) as e:
                parse_tor_mode(bad)
            self.assertNotIn("\n", str(e.exception))

    def test_is_loopback_endpoint(self):
        yes = ["tcp:8080:interface=127.0.0.1", "tcp:port=8080:interface=127.0.0.2", "tcp:8080:127.0.0.1",
               r"tcp6:8080:interface=\:\:1", "tcp:8080:interface=localhost", "unix:/run/deaddrop/source.sock",
               "ssl:8443:privateKey=k.pem:interface=127.0.0.1", r"tcp6:8080:interface=\:\:ffff\:127.0.0.1"]
        no = ["tcp:8080", "tcp:8080:interface=0.0.0.0", "tcp:8080:interface=192.168.1.5", r"tcp6:8080:interface=\:\:",
              "systemd:domain=INET:index=0", "onion:80", "", "unix:", "8080", "tcp:8080:interface=127.0.0.1.example"]
        for description in yes:
            self.assertTrue(is_loopback_endpoint(description), description)
        for description in no:
            self.assertFalse(is_loopback_endpoint(description), description)

    def test_parse_tor_option(self):
        self.assertEqual(parse_tor_option("TestingTorNetwork=1"), ("TestingTorNetwork", "1"))
        self.assertEqual(parse_tor_option("DirAuthority=a orport=1 v3ident=AB 127.0.0.1:2 CD"),
                         ("DirAuthority", "a orport=1 v3ident=AB 127.0.0.1:2 CD"))
        for bad in ("NoEquals", "=1", "DataDirectory=/tmp/x", "controlport=9051", "HiddenServiceDir=/x",
                    "Foo=a\nControlPort 1", "Foo=a # b", "Foo=", "__OwningControllerProcess=1",
                    "HiddenServiceNonAnonymousMode=1", "hiddenservicesinglehopmode=1"):
            with self.assertRaises(ValueError, msg=bad):
                parse_tor_option(bad)

    def test_make_tor_service_validates_early(self):
        kw = dict(data_dir="x", tor_binary=None, tor_options=[], journalist_target=None, events=RecordingEvents(),
                  on_fatal=lambda m: None)
        with self.assertRaises(ValueError):
            make_tor_service(None, mode="none", source_target="127.0.0.1:1", **kw)
        with self.assertRaises(ValueError):
            make_tor_service(None, mode="launch", source_target="0.0.0.0:80", **kw)
        with self.assertRaises(ValueError):
            make_tor_service(None, mode="launch", source_target="127.0.0.1:1",
                             **dict(kw, tor_options=[("ControlPort", "1")]))

    def test_target_of_listening_ports(self):
        from twisted.internet import reactor
        from twisted.internet.protocol import Factory

        from deaddrop.tor import target_of

        port = reactor.listenTCP(0, Factory(), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.assertEqual(target_of(port), f"127.0.0.1:{port.getHost().port}")
        public = reactor.listenTCP(0, Factory(), interface="0.0.0.0")
        self.addCleanup(public.stopListening)
        with self.assertRaises(ValueError):
            target_of(public)  # never map an onion to a public listener
        path = os.path.join(tempfile.mkdtemp(prefix="dd-t-"), "s.sock")
        self.addCleanup(shutil.rmtree, os.path.dirname(path), True)
        unix = reactor.listenUNIX(path, Factory())
        self.addCleanup(unix.stopListening)
        self.assertEqual(target_of(unix), f"unix:{path}")

    def test_normalise_target(self):
        self.assertEqual(normalise_target("127.0.0.1:80"), "127.0.0.1:80")
        self.assertEqual(normalise_target("tcp:127.0.0.1:80"), "127.0.0.1:80")
        self.assertEqual(normalise_target("[::1]:80"), "[::1]:80")
        self.assertEqual(normalise_target("unix:/run/x.sock"), "unix:/run/x.sock")
        for bad in ("10.0.0.1:80", "localhost:80", "127.0.0.1", "127.0.0.1:0", "unix:rel"):
            with self.assertRaises(ValueError, msg=bad):
                normalise_target(bad)


class KeyTests(unittest.TestCase):
    def test_address_from_tor_generated_key(self):
        # ADD_ONION NEW:ED25519-V3 answered this ServiceID for this PrivateKey (tor 0.4.9.11)
        key = keys.key_from_control_blob(
            "ED25519-V3:sGbswe5itz7XNudZeoytQbYXb8v0oC5drbatA5bQUXvMeL1BIflTo2ri9R+kAik307rg62t3KEgveh/cLPDaFQ=="
        )
        self.assertEqual(key.address, "36ikrodmizovyxlos4tfir673j5syl6fe42wowdgnwyuicwhdhlalxqd.onion")
        self.assertNotIn("sGbswe", repr(key))

    def test_generated_key_matches_signing_key(self):
        key = keys.generate_onion_key()
        self.assertTrue(keys.is_valid_onion_address(key.address))
        tampered = key.address[:-7] + ("a" if key.address[-7] != "a" else "b") + ".onion"
        self.assertFalse(keys.is_valid_onion_address(tampered))

    def test_create_is_exclusive_and_files_are_tor_format(self):
        d = self.mktemp()
        k1, created1 = keys.load_or_create_onion_key(d)
        k2, created2 = keys.load_or_create_onion_key(d)
        self.assertEqual((created1, created2), (True, False))
        self.assertEqual(k1, k2)
        with open(os.path.join(d, keys.SECRET_KEY_FILE), "rb") as f:
            data = f.read()
        self.assertEqual(data[:32], keys.SECRET_KEY_HEADER)
        with open(os.path.join(d, "hostname")) as f:
            self.assertEqual(f.read(), k1.address + "\n")
        self.assertEqual([n for n in os.listdir(d) if n.startswith(".tmp")], [])

    def test_clients(self):
        d = self.mktemp()
        address, pair = keys.add_client(d, "alice")
        self.assertEqual(keys.list_clients(d), {"alice": pair.public_b32})
        line = keys.tor_browser_line(address, pair.private_b32)
        host, kind, alg, private = line.split(":")
        self.assertEqual((host + ".onion", kind, alg, private), (address, "descriptor", "x25519", pair.private_b32))
        self.assertEqual(len(pair.private_b32), 52)
        with self.assertRaises(keys.OnionKeyError):
            keys.add_client(d, "alice")
        for bad in ("../x", "", "a b", "x" * 65, ".hidden"):
            with self.assertRaises(keys.OnionKeyError):
                keys.add_client(d, bad)
        path = os.path.join(keys.clients_dir(d), "alice.auth")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        keys.remove_client(d, "alice")
        self.assertEqual(keys.list_clients(d), {})
        with self.assertRaises(keys.OnionKeyError):
            keys.remove_client(d, "alice")
        # the base64 form used by ONION_CLIENT_AUTH_ADD decodes to the same 32 bytes
        self.assertEqual(len(base64.b64decode(keys.client_private_b64(pair.private_b32))), 32)


class ProcessOutputTests(unittest.TestCase):
    def proto(self, *lines):
        ended = []
        p = TorProcessProtocol(lambda: None, lambda reason, summary: ended.append((reason, summary)))
        p.outReceived("".join(f"Dec 03 09:43:34.021 {l}\n" for l in lines).encode())
        return p

    def test_summary_of_bad_dirauthority(self):
        p = self.proto(
            "[warn] You have used DirAuthority or AlternateDirAuthority to specify alternate directory authorities.",
            "[warn] Too few arguments to DirAuthority line.",
            "[warn] Failed to parse/validate config: Directory authority/fallback line did not parse. "
            "See logs for details.",
            "[err] Reading config failed--see warnings above.",
        )
        self.assertEqual(
            p.error_summary(),
            "Too few arguments to DirAuthority line. Failed to parse/validate config: Directory authority/fallback "
            "line did not parse. See logs for details.",
        )

    def test_split_output_and_describe_exit(self):
        ended = []
        p = TorProcessProtocol(lambda: ended.append("listener"), lambda *a: None)
        p.outReceived(b"Dec 03 [notice] Opened Control list")
        self.assertEqual(ended, [])
        p.outReceived(b"ener connection (ready) on /x\n")
        self.assertEqual(ended, ["listener"])
        self.assertEqual(describe_exit("signal_9"), "killed by SIGKILL")
        self.assertEqual(describe_exit("exit_1"), "exit status 1")


# -- deaddrop-admin ---------------------------------------------------------------------------


class AdminTests(unittest.TestCase):
    def run_admin(self, *argv):
        import contextlib
        import sys

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
        sys.stdout.flush()
        return code, out.getvalue(), err.getvalue()

    def initialised(self, mode: int = 0o755) -> str:
        """A data dir with the server's database (deaddrop-admin refuses one without it)."""
        from deaddrop.store.db import connect, migrate

        d = self.mktemp()
        os.makedirs(d, mode=mode)
        conn = connect(os.path.join(d, "db.sqlite"))
        migrate(conn)
        conn.close()
        return d

    def test_onion_client_add_list_remove(self):
        d = self.initialised()
        code, out, _ = self.run_admin("onion-client", "add", "alice", "--data-dir", d)
        self.assertEqual(code, 0)
        line = next(l for l in out.splitlines() if ":descriptor:x25519:" in l).strip()
        host, _, _, private = line.split(":")
        address = keys.read_onion_key(keys.service_dir(d, keys.JOURNALIST)).address
        self.assertEqual(host + ".onion", address)
        self.assertNotIn(private, open(os.path.join(keys.clients_dir(d), "alice.auth")).read())

        code, out, _ = self.run_admin("onion-client", "list", "--data-dir", d, "--json")
        data = json.loads(out)
        self.assertEqual([c["name"] for c in data["clients"]], ["alice"])
        self.assertEqual(data["journalist_onion"], address)

        code, out, _ = self.run_admin("onion-client", "add", "bob", "--data-dir", d, "--json")
        data = json.loads(out)
        self.assertTrue(data["tor_browser_line"].startswith(address[:-6] + ":descriptor:x25519:"))

        code, out, _ = self.run_admin("onion-client", "remove", "alice", "--data-dir", d)
        self.assertEqual(code, 0)
        self.assertEqual(keys.list_clients(d).keys(), {"bob"})
        code, out, err = self.run_admin("onion-client", "remove", "alice", "--data-dir", d)
        self.assertEqual(code, 1)
        self.assertIn("no client named 'alice'", err)

    def test_status(self):
        TOR_CHECKS = {"tor_dir", "source_key", "source_onion", "journalist_key"}  # noqa: N806
        d = self.initialised(0o700)
        code, out, _ = self.run_admin("status", "--data-dir", d, "--json")
        data = json.loads(out)
        self.assertIsNone(data["source_onion"])
        self.assertFalse(data["journalist_onion"]["exists"])

        key, _ = keys.load_or_create_onion_key(keys.service_dir(d, keys.SOURCE))
        # The key exists (tor.onion.key_created), Tor has not published it: the address, said so.
        code, out, _ = self.run_admin("status", "--data-dir", d, "--json")
        data = json.loads(out)
        self.assertEqual((data["source_onion"], data["source_onion_address"]), (None, key.address))
        code, out, _ = self.run_admin("status", "--data-dir", d)
        self.assertIn(f"Source onion:     http://{key.address}/ (not reachable yet: Tor has not published it)", out)
        with open(keys.source_onion_file(d), "w") as f:
            f.write(key.address + "\n")
        keys.add_client(d, "alice")
        code, out, _ = self.run_admin("status", "--data-dir", d, "--json")
        data = json.loads(out)
        self.assertEqual(data["source_onion"], key.address)
        self.assertTrue(data["journalist_onion"]["exists"])
        self.assertEqual(data["journalist_onion"]["clients"], 1)
        # Only the Tor checks here: this data dir has nothing but a database (the whole
        # instance's checks are tests/integration/test_status_modes.py).
        tor_checks = [c for c in data["checks"] if c["name"] in TOR_CHECKS or c["name"].startswith("client:")]
        self.assertEqual(len(tor_checks), 5, data["checks"])
        self.assertTrue(all(c["ok"] for c in tor_checks), tor_checks)

        code, out, _ = self.run_admin("status", "--data-dir", d)
        self.assertIn(key.address, out)

        os.chmod(os.path.join(keys.service_dir(d, keys.SOURCE), keys.SECRET_KEY_FILE), 0o644)
        code, out, _ = self.run_admin("status", "--data-dir", d, "--json")
        self.assertEqual(code, 1)
        bad = [c for c in json.loads(out)["checks"] if not c["ok"] and c["name"] in TOR_CHECKS]
        self.assertEqual(len(bad), 1)
        self.assertIn("0644", bad[0]["detail"])
