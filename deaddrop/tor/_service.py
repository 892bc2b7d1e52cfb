"""The Tor service: launch or attach, bootstrap, publish the onions, supervise, republish.

One *attempt* is one Tor process (``launch``) or one control connection (``control:``) from
start to end. When an attempt ends, whether during the first bootstrap or long after, the
failure is logged as a security event and a new attempt is started with exponential back-off,
reusing the same onion keys; the web listeners are never touched by any of this. Only two
things are fatal (``on_fatal`` with one line, once), and only before Tor was ever ready: the
bootstrap timeout (no bootstrap within ``bootstrap_timeout`` seconds of the service's start,
however many attempts that took), and a failure that no relaunch can mend (a missing binary, a
torrc Tor refuses, a control port that is not there when attaching, an onion Tor refuses).
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from twisted.application import service
from twisted.internet import task
from twisted.internet.defer import Deferred, DeferredLock, ensureDeferred, gatherResults, succeed
from twisted.internet.utils import getProcessOutputAndValue
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.internet.error import ConnectionDone, ConnectionLost
from txtorcon import TorProtocolError
from txtorcon.torcontrolprotocol import TorDisconnectError

from deaddrop.durable import write_atomically
from deaddrop.tor import _control, keys
from deaddrop.tor._config import ControlEndpoint, normalise_target
from deaddrop.tor._process import (
    TorFiles,
    TorProcessProtocol,
    TorStartError,
    describe_exit,
    find_tor_binary,
    line_kind,
    read_control_port_file,
    remove_stale_files,
    stale_tor_pid,
    tor_args,
    tor_owner_pid,
    write_torrc,
)
from deaddrop.tor.defences import Defences, add_onion_keywords, has_pow_module, hidden_service_lines

_log = Logger(namespace="deaddrop.tor")

SOURCE = keys.SOURCE
JOURNALIST = keys.JOURNALIST


class _Aborted(Exception):
    """The attempt ended while something was waiting on it."""


@dataclass(frozen=True)
class Tuning:
    """Timings; the defaults are for production, tests shrink them."""

    retry_initial: float = 1.0  # first relaunch delay, doubled per consecutive failure...
    retry_max: float = 60.0  # ...up to this
    stable_after: float = 60.0  # up this long after being ready: the back-off starts again
    check_interval: float = 60.0  # descriptor check period
    publish_grace: float = 120.0  # no UPLOADED this long after ADD_ONION: republish
    stale_after: float = 3 * 3600.0  # no UPLOADED for this long (Tor re-uploads <= 2 h): republish
    clients_interval: float = 10.0  # how often the journalist clients directory is re-read
    control_grace: float = 2.0  # control lost: wait this long for the exit status
    stop_timeout: float = 10.0  # SIGTERM, then SIGKILL after this
    connect_retry: float = 0.2  # launched Tor: control connection retry period...
    connect_tries: int = 50  # ...and count
    stall_warning: float = 60.0  # no bootstrap progress this long: say once why the onion is not up
    stall_reminder: float = 300.0  # meanwhile Tor's repeated warnings are folded: their count this often


@dataclass
class _Onion:
    which: str
    key: keys.OnionKey
    clients: dict[str, str] = field(default_factory=dict)
    added_at: float = 0.0
    uploaded_at: float | None = None
    published: bool = False
    failure_reported: bool = False


class _Attempt:
    def __init__(self, number: int) -> None:
        self.number = number
        self.alive = True
        self.process: TorProcessProtocol | None = None
        self.files: TorFiles | None = None
        self.control: Any = None
        self.connected: Deferred = Deferred()
        self.bootstrapped: Deferred = Deferred()
        self.timers: list = []
        self.deadline = None
        self.progress: int | None = None
        self.summary: str | None = None
        self.warning: str | None = None
        self.ready = False
        self.ready_at: float | None = None
        self.onions: dict[str, _Onion] = {}
        self.lock = DeferredLock()
        self.connect_tries = 0
        # journalist onion: None (not yet looked at), "published", "no_clients" or an error
        self.journalist_status: str | None = None
        self.stall_timer = None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class TorOnionService(service.Service):
    """See :func:`deaddrop.tor.make_tor_service`."""

    name = "tor"

    def __init__(
        self,
        reactor,
        *,
        data_dir: str,
        mode: str,
        control_endpoint: ControlEndpoint | None,
        tor_binary: str | None,
        tor_options: list[tuple[str, str]],
        source_target: str | Callable[[], str],
        journalist_target: str | Callable[[], str] | None,
        events,
        journalist_onion_port: int = 80,
        on_fatal: Callable[[str], None],
        bootstrap_timeout: float | None = 180.0,  # None: never give up (a demo, see service.tor_side.add_tor)
        report: Callable[[str], None] | None = None,
        tuning: Tuning = Tuning(),
        connect: Callable[[ControlEndpoint], Deferred] | None = None,
        source_proxy_target: str | Callable[[], str] | None = None,
        defences: Defences = Defences(),
        count_line: Callable[[str, str], None] | None = None,
    ) -> None:
        self._reactor = reactor
        # What a launched Tor prints once bootstrapped, counted per day instead of logged (see
        # TorProcessProtocol._line): count_line(level, kind).
        self._count_line = count_line
        self._data_dir = os.path.abspath(data_dir)
        self._mode = mode  # "launch" or "control"
        self._control_endpoint = control_endpoint
        self._tor_binary = tor_binary
        self._tor_options = list(tor_options)
        self._source_target = source_target
        self._journalist_target = journalist_target
        self._journalist_onion_port = journalist_onion_port
        self._events = events
        self._on_fatal = on_fatal
        self._bootstrap_timeout = bootstrap_timeout
        self._report = report
        self._tuning = tuning
        self._connect = connect or partial(_control.connect_control, reactor)
        # Launch mode: Tor connects here, each connection prefixed with a PROXY header.
        self._source_proxy_target = source_proxy_target
        self._defences = defences
        self._pow_available: bool | None = None  # launch: from `tor --list-modules`, once
        self._stall_reported = False
        # After the stall explanation, Tor's repeated bootstrap warnings (every few seconds
        # offline: "Problem bootstrapping. Stuck at 14%", "1 connections have failed") are
        # counted, not logged: they would scroll the explanation away. A new kind is still
        # logged once; the count comes with the explanation again every stall_reminder.
        self._warning_kinds: set[str] = set()
        self._folded = 0
        self._folded_last: str | None = None
        self._reminder = None

        self.onion_address: str | None = None
        self.journalist_onion_address: str | None = None
        self.tor_pid: int | None = None
        self.state = "stopped"

        self._attempt: _Attempt | None = None
        self._attempts = 0
        self._failures = 0
        self._ever_ready = False
        self._fatal_called = False
        self._startup_deadline = None  # the bootstrap timeout, from the start until first ready
        # The latest bootstrap state of any attempt, for the timeout's message.
        self._last_progress: tuple[int | None, str | None, str | None] = (None, None, None)
        self._last_exit: str | None = None
        self._stopping = False
        self._retry_call = None
        self._previous_gone: Deferred | None = None
        self._source_key: keys.OnionKey | None = None
        self._journalist_key: keys.OnionKey | None = None
        self._source_live = False
        self._ready_waiters: list[Deferred] = []
        self._loops: list[task.LoopingCall] = []

    # -- public ---------------------------------------------------------------------------

    def when_onion_ready(self) -> Deferred:
        """Fires with ``xxxx.onion`` once the source onion's descriptor is uploaded.

        If Tor is being relaunched right now, fires when it is published again. Fails with
        ``TorStartError`` (the ``on_fatal`` message) if Tor cannot be started at all.
        """
        if self._source_live and self.onion_address:
            return succeed(self.onion_address)
        d = Deferred()
        self._ready_waiters.append(d)
        return d

    def close_circuit(self, circuit_id: int) -> Deferred:
        """``CLOSECIRCUIT`` on the Tor whose PROXY headers carry ``circuit_id``; fires True if
        Tor closed it, False if there is nothing to close (not ready, attached Tor, gone).

        The id is never logged, not even in a failure."""
        attempt = self._attempt
        if (
            self._mode != "launch"
            or attempt is None
            or not attempt.alive
            or attempt.control is None
            or not isinstance(circuit_id, int)
            or not 0 < circuit_id < 2**32
        ):
            return succeed(False)
        d = attempt.control.queue_command(f"CLOSECIRCUIT {circuit_id}")

        def refused(failure: Failure) -> bool:
            # 552 Unknown circuit: already closed. Anything else: a lost control connection,
            # which supervision handles. Either way the message would quote the id.
            return False

        return d.addCallbacks(lambda _: True, refused)

    def startService(self) -> None:
        super().startService()
        self._stopping = False
        self.state = "starting"
        for period, func in ((self._tuning.check_interval, self._check_descriptors),
                             (self._tuning.clients_interval, self._check_clients)):
            if func == self._check_clients and self._journalist_target is None:
                continue
            loop = task.LoopingCall(func)
            loop.clock = self._reactor
            loop.start(period, now=False).addErrback(self._loop_failed)
            self._loops.append(loop)
        if not self._ever_ready and self._bootstrap_timeout is not None:
            self._startup_deadline = self._reactor.callLater(self._bootstrap_timeout, self._startup_timed_out)
        self._start_attempt()

    def stopService(self):
        self._stopping = True
        self.state = "stopped"
        super().stopService()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops = []
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None
        self._cancel_startup_deadline()
        self._end_folding()
        waits = []
        attempt = self._attempt
        if attempt is not None:
            self._end_attempt(attempt, "stopping")
            if attempt.control is not None:
                waits.append(attempt.control.when_disconnected().addErrback(lambda _: None))
        if self._previous_gone is not None:
            waits.append(self._previous_gone)
        self._events.emit("tor.stopped", detail=self._mode)
        return gatherResults(waits).addCallback(lambda _: None)

    # -- one attempt ----------------------------------------------------------------------

    def _now(self) -> float:
        return self._reactor.seconds()

    def _start_attempt(self) -> None:
        self._retry_call = None
        if self._stopping or self._fatal_called:
            return
        self._attempts += 1
        attempt = _Attempt(self._attempts)
        self._attempt = attempt
        self.state = "starting"
        d = ensureDeferred(self._run(attempt))
        d.addErrback(self._internal_error, attempt)

    def _internal_error(self, failure: Failure, attempt: _Attempt) -> None:
        _log.failure("unexpected error in the Tor service", failure)
        self._fail(attempt, "internal_error", f"internal error: {failure.getErrorMessage()}")

    async def _run(self, attempt: _Attempt) -> None:
        try:
            if self._source_key is None:
                self._source_key, created = keys.load_or_create_onion_key(keys.service_dir(self._data_dir, SOURCE))
                if created:
                    self._events.emit("tor.onion.key_created", onion=self._source_key.address, detail=SOURCE)
            if self._previous_gone is not None:
                await self._previous_gone  # the old Tor still holds the data directory lock
                self._previous_gone = None
            if not attempt.alive:
                return
            if self._mode == "launch":
                await self._kill_stale_tor()
                if not attempt.alive:
                    return
                await self._check_pow_module()
                if not attempt.alive:
                    return
                self._arm_deadline(attempt)
                self._spawn(attempt)
                # The torrc service: Tor publishes it by itself once bootstrapped.
                attempt.onions[SOURCE] = _Onion(SOURCE, self._source_key, added_at=self._now())
                control = await attempt.connected
            else:
                self._arm_deadline(attempt)
                self._events.emit("tor.connecting", detail=f"attempt {attempt.number}")
                control = await self._connect_attached()
            if not attempt.alive:
                if control.transport is not None:
                    control.transport.loseConnection()
                return
            attempt.control = control
            control.when_disconnected().addBoth(lambda _: self._control_lost(attempt))
            self.state = "bootstrapping"
            if self._mode == "launch":
                # Tor exits when this control connection closes, whatever happens to us.
                await control.queue_command("TAKEOWNERSHIP")
            await control.add_event_listener("STATUS_CLIENT", partial(self._status_client, attempt))
            await control.add_event_listener("HS_DESC", partial(self._hs_desc, attempt))
            self._arm_stall_timer(attempt)
            phase = await control.get_info_raw("status/bootstrap-phase")
            self._progress(attempt, _control.parse_bootstrap(phase))
            await attempt.bootstrapped
            if attempt.deadline is not None and attempt.deadline.active():
                attempt.deadline.cancel()
            if attempt.stall_timer is not None and attempt.stall_timer.active():
                attempt.stall_timer.cancel()
            self._stall_reported = False  # a later relaunch that stalls is worth saying again
            self._end_folding()
            self.state = "publishing"
            await self._locked_publish(attempt, SOURCE)
            if self._journalist_target is not None:
                await self._locked_publish(attempt, JOURNALIST)
            if attempt.alive:
                self._became_ready(attempt)
        except _Aborted:
            return
        except TorStartError as e:
            # A launched Tor whose control port never answered may only have hung: try again.
            self._fail(attempt, e.reason, str(e), retry=e.reason == "control_unreachable" and self._mode == "launch")
        except keys.OnionKeyError as e:
            self._fail(attempt, "onion_key", str(e))
        except TorProtocolError as e:
            self._fail(attempt, "tor_refused", f"Tor refused a command: {_one_line(str(e))}")
        except ValueError as e:
            self._fail(attempt, "bad_config", str(e))
        except Exception as e:
            if not attempt.alive:
                return  # the connection closed under us because the attempt ended
            if isinstance(e, (TorDisconnectError, ConnectionDone, ConnectionLost)):
                # Tor went away in the middle of a command (killed while bootstrapping): its
                # exit, or the lost control connection, ends the attempt and it is tried again.
                return
            self._fail(attempt, "error", f"{type(e).__name__}: {_one_line(str(e))}")

    def _arm_deadline(self, attempt: _Attempt) -> None:
        """A relaunch (Tor was ready before) must bootstrap within the timeout, or it is ended
        and tried again. Until Tor was first ready, the service's own deadline applies."""
        if not self._ever_ready or self._bootstrap_timeout is None:
            return
        attempt.deadline = self._reactor.callLater(self._bootstrap_timeout, self._bootstrap_timed_out, attempt)
        attempt.timers.append(attempt.deadline)

    def _cancel_startup_deadline(self) -> None:
        if self._startup_deadline is not None and self._startup_deadline.active():
            self._startup_deadline.cancel()
        self._startup_deadline = None

    def _startup_timed_out(self) -> None:
        """No attempt bootstrapped within the timeout of the start: the one fatal failure of a
        Tor that keeps dying or never connects."""
        self._startup_deadline = None
        if self._ever_ready or self._stopping:
            return
        limit = f"{self._bootstrap_timeout:g}"
        progress, summary, warning = self._last_progress
        if progress is None:
            message = f"Tor did not become ready within {limit} s (no working control connection)"
        else:
            message = f"Tor did not finish bootstrapping within {limit} s (stuck at {progress}%: {summary})"
            if warning:
                message += f"; last problem: {warning}"
        if self._last_exit is not None:
            ended = self._failures
            message += f"; Tor ended {ended} time{'s' if ended != 1 else ''} before it was ready (last: {self._last_exit})"
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None
        attempt = self._attempt
        if attempt is not None:
            self._end_attempt(attempt, message)
        self._fatal("bootstrap_timeout", _one_line(message))

    def _bootstrap_timed_out(self, attempt: _Attempt) -> None:
        """A relaunch did not bootstrap in time: end it, try again."""
        limit = f"{self._bootstrap_timeout:g}"
        if attempt.progress is None:
            message = f"Tor did not become ready within {limit} s (no working control connection)"
        else:
            message = (
                f"Tor did not finish bootstrapping within {limit} s "
                f"(stuck at {attempt.progress}%: {attempt.summary})"
            )
            if attempt.warning:
                message += f"; last problem: {attempt.warning}"
        self._fail(attempt, "bootstrap_timeout", message, retry=True)

    def _arm_stall_timer(self, attempt: _Attempt) -> None:
        if attempt.stall_timer is not None and attempt.stall_timer.active():
            attempt.stall_timer.cancel()
        if self._stall_reported or attempt.bootstrapped.called:
            return
        attempt.stall_timer = self._reactor.callLater(self._tuning.stall_warning, self._bootstrap_stalled, attempt)
        attempt.timers.append(attempt.stall_timer)

    def _bootstrap_stalled(self, attempt: _Attempt) -> None:
        """No bootstrap progress for a minute: say once, plainly, what it means."""
        if not attempt.alive or attempt.bootstrapped.called or self._stall_reported:
            return
        self._stall_reported = True
        self._events.emit(
            "tor.bootstrap.stalled", progress=attempt.progress, summary=attempt.summary, detail=attempt.warning
        )
        message = self._stall_message(attempt)
        _log.warn("{text}", text=message)
        self._say(message)
        self._reminder = self._reactor.callLater(self._tuning.stall_reminder, self._remind_stall)

    def _stall_message(self, attempt: _Attempt) -> str:
        minutes = self._tuning.stall_warning / 60
        where = f"stuck at {attempt.progress}% ({attempt.summary})" if attempt.progress is not None else "not started"
        # Tor sometimes puts only a bare reason code here ("DONE"), which tells an admin nothing.
        readable = attempt.warning and not attempt.warning.isupper()
        why = f"; Tor says: {attempt.warning}" if readable else ""
        message = (
            f"The source onion is not reachable yet: Tor has made no bootstrap progress for "
            f"{minutes:g} minute{'s' if minutes != 1 else ''} ({where}{why}). Tor needs to reach the "
            "Tor network over the Internet to publish the onion; check this machine's Internet "
            "access and firewall. On a machine without Internet access, start with --tor none "
            "(no onion; the source interface is then only on --source-listen, for development)."
        )
        if not self._ever_ready and self._bootstrap_timeout is None:
            message += (" Meanwhile DeadDrop keeps serving (the source interface on 127.0.0.1) and Tor keeps "
                        "trying; the onion is published as soon as Tor connects.")
        elif not self._ever_ready:
            message += (
                f" If Tor has still not connected {self._bootstrap_timeout:g} s after it started, "
                "DeadDrop stops, so that its supervisor can start it again."
            )
        return message

    def _fold_bootstrap_warning(self, message: str) -> bool:
        """A [warn] of Tor's before bootstrap: True if it is only counted (see _warning_kinds)."""
        kind = line_kind(message)
        if not self._stall_reported or kind not in self._warning_kinds:
            if len(self._warning_kinds) < 200:
                self._warning_kinds.add(kind)
            return False
        self._folded += 1
        self._folded_last = message
        return True

    def _remind_stall(self) -> None:
        """Every stall_reminder while Tor is stuck: the explanation again, with how many of
        Tor's warnings were folded meanwhile (none folded: Tor is quiet, so is this)."""
        self._reminder = None
        attempt = self._attempt
        if not self._stall_reported or self._stopping:
            return
        if self._folded and attempt is not None:
            minutes = self._tuning.stall_reminder / 60
            message = (
                f"{self._stall_message(attempt)} Tor repeated its warnings {self._folded} "
                f"time{'s' if self._folded != 1 else ''} in the last {minutes:g} minute{'s' if minutes != 1 else ''} "
                f"(not shown; the last: {_one_line(self._folded_last or '')})."
            )
            self._folded, self._folded_last = 0, None
            _log.warn("{text}", text=message)
            self._say(message)
        self._reminder = self._reactor.callLater(self._tuning.stall_reminder, self._remind_stall)

    def _end_folding(self) -> None:
        if self._reminder is not None and self._reminder.active():
            self._reminder.cancel()
        self._reminder = None
        self._folded, self._folded_last = 0, None

    async def _kill_stale_tor(self) -> None:
        files = TorFiles(keys.tor_dir(self._data_dir))
        pid = stale_tor_pid(files)
        if pid is None:
            return
        owner = tor_owner_pid(files, pid)
        if owner is not None and owner != os.getpid():
            # Not left over by a crash: another server runs on this data directory. Killing its
            # Tor would only start a tug of war (it relaunches and kills ours).
            raise TorStartError(
                f"another DeadDrop server (pid {owner}) is running on this data directory "
                f"(its Tor is pid {pid}); stop it first or use another --data-dir",
                "data_dir_in_use",
            )
        self._events.emit(
            "tor.stale_killed", reason="left_running", detail="a Tor from an earlier run was still running"
        )
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = self._now() + wait
            while self._now() < deadline:
                if not os.path.exists(f"/proc/{pid}"):
                    return
                await task.deferLater(self._reactor, 0.1, lambda: None)

    async def _check_pow_module(self) -> None:
        """Once per service: does this Tor have the ``pow`` module? If not, say so loudly and
        start anyway (the onion without PoW is still better than no onion)."""
        if self._pow_available is not None or not self._defences.pow:
            return
        binary = find_tor_binary(self._tor_binary)
        tor_dir = keys.tor_dir(self._data_dir)
        d = getProcessOutputAndValue(binary, ["--list-modules"], env={"HOME": tor_dir}, reactor=self._reactor)
        d.addTimeout(15, self._reactor)
        try:
            out, _err, _code = await d
            text = out.decode("utf-8", "replace")
        except Exception:
            text = ""
        self._pow_available = has_pow_module(text)
        if not self._pow_available:
            message = (
                f"WARNING: this Tor ({binary}) has no proof-of-work module ('tor --list-modules' lacks "
                "'pow: yes'): the source onion starts WITHOUT Tor's PoW defence against introduction "
                "floods. Install Tor 0.4.8 or later built with it (Debian's tor package is)."
            )
            self._events.emit("tor.pow.unavailable", detail="tor --list-modules lacks pow")
            _log.warn("{text}", text=message)
            self._say(message)

    def _source_service_lines(self) -> list[str]:
        """The torrc block of the source onion (launch mode)."""
        proxied = self._source_proxy_target is not None
        target = self._resolve(self._source_proxy_target if proxied else self._source_target, SOURCE)
        lines = hidden_service_lines(
            keys.service_dir(self._data_dir, SOURCE), target, self._defences, bool(self._pow_available)
        )
        if not proxied:  # a plain listener would take the PROXY header for a broken request
            lines.remove("HiddenServiceExportCircuitID haproxy")
        return lines

    def _spawn(self, attempt: _Attempt) -> None:
        binary = find_tor_binary(self._tor_binary)
        tor_dir = keys.tor_dir(self._data_dir)
        keys.ensure_private_dir(tor_dir)
        files = TorFiles(tor_dir)
        remove_stale_files(files)
        write_torrc(files, self._tor_options, os.getpid(), self._source_service_lines())
        proto = TorProcessProtocol(
            on_control_listener=partial(self._control_listener_up, attempt),
            on_ended=partial(self._process_ended, attempt),
            count_line=self._count_line,
            fold_line=self._fold_bootstrap_warning,
        )
        attempt.files = files
        attempt.process = proto
        self._reactor.spawnProcess(proto, binary, args=tor_args(binary, files), env={"HOME": tor_dir}, path=tor_dir)
        self.tor_pid = proto.pid
        self._events.emit("tor.launching", detail=f"attempt {attempt.number}")
        _log.info("launched Tor (pid {pid}) with DataDirectory {dir}", pid=proto.pid, dir=tor_dir)

    def _control_listener_up(self, attempt: _Attempt) -> None:
        if not attempt.alive or attempt.connected.called:
            return
        files = attempt.files
        if files.use_unix_socket:
            endpoint = ControlEndpoint("unix", path=files.control_socket)
        else:
            found = read_control_port_file(files)
            if found is None:
                return self._retry_control(attempt, "the control port file is not written yet")
            endpoint = ControlEndpoint("tcp", host=found[0], port=found[1])
        d = self._connect(endpoint)

        def connected(proto):
            if attempt.alive and not attempt.connected.called:
                attempt.connected.callback(proto)
            elif proto.transport is not None:
                proto.transport.loseConnection()

        def failed(f):
            self._retry_control(attempt, _one_line(f.getErrorMessage()))

        d.addCallbacks(connected, failed)

    def _retry_control(self, attempt: _Attempt, why: str) -> None:
        if not attempt.alive:
            return
        attempt.connect_tries += 1
        if attempt.connect_tries >= self._tuning.connect_tries:
            self._fail(
                attempt, "control_unreachable", f"cannot connect to the control port of the Tor we launched: {why}",
                retry=True,
            )
            return
        attempt.timers.append(
            self._reactor.callLater(self._tuning.connect_retry, self._control_listener_up, attempt)
        )

    async def _connect_attached(self):
        endpoint = self._control_endpoint
        try:
            return await self._connect(endpoint)
        except Exception as e:
            why = _one_line(str(e)) or type(e).__name__
            raise TorStartError(
                f"cannot connect to the Tor control port {endpoint.describe()}: {why}", "control_unreachable"
            ) from None

    # -- what Tor tells us ------------------------------------------------------------------

    def _status_client(self, attempt: _Attempt, text: str) -> None:
        self._progress(attempt, _control.parse_bootstrap(text))

    def _progress(self, attempt: _Attempt, info: dict | None) -> None:
        if info is None or not attempt.alive:
            return
        if info["warning"]:
            attempt.warning = _one_line(info["warning"])
        progress, summary = info["progress"], info["summary"]
        self._last_progress = (progress, summary, attempt.warning)
        if progress != attempt.progress:
            attempt.progress, attempt.summary = progress, summary
            self._arm_stall_timer(attempt)
            self._events.emit("tor.bootstrap", progress=progress, summary=summary)
            _log.info("Tor bootstrap {progress}%: {summary}", progress=progress, summary=summary)
            self._say(f"Tor bootstrap {progress}%: {summary}")
        if progress >= 100 and not attempt.bootstrapped.called:
            attempt.bootstrapped.callback(None)

    def _hs_desc(self, attempt: _Attempt, text: str) -> None:
        event = _control.parse_hs_desc(text)
        if event is None or not attempt.alive:
            return
        onion = next((o for o in attempt.onions.values() if o.key.service_id == event["address"]), None)
        if onion is None:
            return
        public = onion.key.address if onion.which == SOURCE else None
        if event["action"] == "UPLOADED":
            onion.uploaded_at = self._now()
            if not onion.published:
                onion.published = True
                self._events.emit("tor.onion.published", onion=public, detail=onion.which)
                _log.info("{which} onion service published: {address}", which=onion.which, address=onion.key.address)
                if onion.which == SOURCE:
                    self._say(f"Source onion service published: http://{onion.key.address}/")
                    self._source_live = True
                    waiters, self._ready_waiters = self._ready_waiters, []
                    for d in waiters:
                        d.callback(onion.key.address)
        elif event["action"] == "FAILED" and not onion.published and not onion.failure_reported:
            onion.failure_reported = True
            self._events.emit("tor.onion.upload_failed", onion=public, detail=onion.which, reason=event["reason"])

    def _process_ended(self, attempt: _Attempt, exit_reason: str, summary: str | None) -> None:
        if self._attempt is attempt:
            self.tor_pid = None
        if not attempt.alive:
            return
        how = describe_exit(exit_reason)
        self._last_exit = how
        if attempt.ready:
            message = f"Tor exited unexpectedly ({how})" + (f": {summary}" if summary else "")
        else:
            why = summary or "it printed no error; see its log lines above"
            message = f"Tor exited during startup ({how}): {why}"
        # Killed, or ended after it was up and running: relaunch. Exited by itself before even
        # opening its control port: it refused its configuration, which a relaunch repeats.
        running = exit_reason.startswith("signal_") or (attempt.process is not None and attempt.process.saw_listener)
        self._fail(attempt, exit_reason, message, event="tor.exited", retry=running)

    def _control_lost(self, attempt: _Attempt) -> None:
        if not attempt.alive or self._stopping:
            return
        if attempt.process is not None and not attempt.process.ended:
            # Usually Tor died: let its exit status arrive so the event names the real cause.
            grace = self._tuning.control_grace
            attempt.timers.append(self._reactor.callLater(grace, self._control_lost_confirmed, attempt))
            return
        self._control_lost_confirmed(attempt)

    def _control_lost_confirmed(self, attempt: _Attempt) -> None:
        if attempt.alive:
            self._last_exit = "control connection lost"
            self._fail(attempt, "control_lost", "the Tor control connection was lost", event="tor.control.lost",
                       retry=True)

    # -- ending attempts ------------------------------------------------------------------

    def _cancel_timers(self, attempt: _Attempt) -> None:
        for call in attempt.timers:
            if call.active():
                call.cancel()
        attempt.timers = []

    def _end_attempt(self, attempt: _Attempt, why: str) -> None:
        """Stop everything the attempt holds; its process goes away (TERM, then KILL)."""
        if not attempt.alive:
            return
        attempt.alive = False
        self._cancel_timers(attempt)
        for d in (attempt.connected, attempt.bootstrapped):
            if not d.called:
                d.errback(Failure(_Aborted(why)))
                d.addErrback(lambda _: None)
        if self._source_live:
            self._source_live = False
        if attempt.control is not None and attempt.control.transport is not None:
            attempt.control.transport.loseConnection()
        process = attempt.process
        if process is not None and not process.ended:
            process.signal("TERM")
            kill = self._reactor.callLater(self._tuning.stop_timeout, process.signal, "KILL")
            gone = process.when_ended()

            def cancel_kill(result):
                if kill.active():
                    kill.cancel()
                return result

            self._previous_gone = gone.addBoth(cancel_kill)

    def _fail(self, attempt: _Attempt, reason: str, message: str, event: str | None = None,
              retry: bool = False) -> None:
        """End ``attempt`` and try again with back-off; fatal only if Tor was never ready and
        ``retry`` is False (a failure no relaunch mends)."""
        if not attempt.alive:
            return
        message = _one_line(message)
        was_ready = attempt.ready
        self._end_attempt(attempt, message)
        if self._stopping or self._fatal_called:
            return
        if not self._ever_ready and not retry:
            self._fatal(reason, message)
            return
        if was_ready or self._failures == 0:
            # The first failure of a run says what happened; its failed retries say so in turn.
            self._events.emit(event or "tor.control.lost", reason=reason, detail=message)
        else:
            self._events.emit("tor.restart.failed", reason=reason, detail=message)
        _log.warn("Tor: {text}", text=message)
        self._schedule_retry(attempt)

    def _fatal(self, reason: str, message: str) -> None:
        self.state = "failed"
        if self._fatal_called:
            return
        self._fatal_called = True
        self._cancel_startup_deadline()
        self._events.emit("tor.fatal", reason=reason, detail=message)
        _log.error("Tor cannot be started: {text}", text=message)
        waiters, self._ready_waiters = self._ready_waiters, []
        for d in waiters:
            d.errback(TorStartError(message, reason))
        self._on_fatal(message)

    def _schedule_retry(self, attempt: _Attempt) -> None:
        if attempt.ready_at is not None and self._now() - attempt.ready_at >= self._tuning.stable_after:
            self._failures = 0
        self._failures += 1
        delay = min(self._tuning.retry_initial * 2 ** (self._failures - 1), self._tuning.retry_max)
        self.state = "restarting"
        self._events.emit("tor.restart", delay=delay, detail="relaunch" if self._mode == "launch" else "reconnect")
        self._say(f"Tor is down; trying again in {delay:g} s")
        self._retry_call = self._reactor.callLater(delay, self._start_attempt)

    def _became_ready(self, attempt: _Attempt) -> None:
        attempt.ready = True
        attempt.ready_at = self._now()
        self._ever_ready = True
        self._cancel_startup_deadline()
        self.state = "ready"
        self._events.emit("tor.ready", detail=f"attempt {attempt.number}")

    # -- onions ---------------------------------------------------------------------------

    def _target(self, which: str) -> str:
        return self._resolve(self._source_target if which == SOURCE else self._journalist_target, which)

    def _resolve(self, value: str | Callable[[], str] | None, which: str) -> str:
        if callable(value):
            try:
                value = value()
            except Exception as e:
                raise ValueError(f"the {which} listener's address is not known: {type(e).__name__}: {e}") from None
        if not isinstance(value, str):
            raise ValueError(f"the {which} onion target must be a string like 127.0.0.1:PORT, not {value!r}")
        return normalise_target(value)

    async def _publish(self, attempt: _Attempt, which: str) -> None:
        """(Re)publish one onion on this attempt's Tor; the caller holds ``attempt.lock``."""
        if not attempt.alive:
            return
        control = attempt.control
        clients: dict[str, str] = {}
        if which == SOURCE and self._mode == "launch":
            self._source_added(self._source_key)  # in the torrc: Tor publishes it by itself
            return
        if which == SOURCE:
            key = self._source_key
        else:
            try:
                clients = keys.list_clients(self._data_dir)
            except keys.OnionKeyError as e:
                # Fail closed: a client file we cannot read may be a revocation we would miss.
                await self._take_down(attempt, which)
                if attempt.journalist_status != str(e):
                    attempt.journalist_status = str(e)
                    self._events.emit("tor.journalist.clients_invalid", detail=_one_line(str(e)))
                return
            if not clients:
                await self._take_down(attempt, which)
                if attempt.journalist_status != "no_clients":
                    attempt.journalist_status = "no_clients"
                    self._events.emit(
                        "tor.journalist.waiting",
                        count=0,
                        detail="no authorised clients: journalist onion not published",
                    )
                return
            if self._journalist_key is None:
                self._journalist_key, _ = keys.load_or_create_onion_key(keys.service_dir(self._data_dir, JOURNALIST))
            key = self._journalist_key
        target = self._target(which)
        await self._take_down(attempt, which)
        if which == JOURNALIST:
            command = _control.add_onion_command(key, target, list(clients.values()), self._journalist_onion_port)
        else:
            command = _control.add_onion_command(key, target, extra=add_onion_keywords(self._defences))
        onion = _Onion(which, key, clients=dict(clients), added_at=self._now())
        attempt.onions[which] = onion  # before the reply: upload events may follow at once
        _log.debug("control: {command}", command=_control.redact(command))
        try:
            reply = await control.queue_command(command)
        except TorProtocolError as e:
            if which != SOURCE or not self._defences.pow or "pow" not in str(e).lower():
                raise
            # An attached Tor without the pow module refuses the PoW keywords: say so, go on.
            self._warn_no_pow_attached(_one_line(str(e)))
            command = _control.add_onion_command(
                key, target, extra=add_onion_keywords(Defences(**{**self._defences.__dict__, "pow": False}))
            )
            reply = await control.queue_command(command)
        service_id = _control.parse_keywords(reply).get("ServiceID")
        if service_id != key.service_id:
            raise TorStartError(f"Tor published {service_id}.onion but our key is for {key.address}", "key_mismatch")
        onion.added_at = self._now()
        if which == SOURCE:
            self._source_added(key)
        else:
            self.journalist_onion_address = key.address
            attempt.journalist_status = "published"
            self._events.emit("tor.onion.added", detail=JOURNALIST, count=len(clients))

    def _source_added(self, key: keys.OnionKey) -> None:
        self.onion_address = key.address
        self._write_source_onion_file(key.address)
        self._events.emit("tor.onion.added", onion=key.address, detail=SOURCE)

    def _warn_no_pow_attached(self, why: str) -> None:
        message = (
            "WARNING: the attached Tor refused the proof-of-work settings (no pow module, or older "
            f"than 0.4.8: {why}); the source onion is published WITHOUT Tor's PoW defence"
        )
        self._events.emit("tor.pow.unavailable", detail="ADD_ONION refused the PoW keywords")
        _log.warn("{text}", text=message)
        self._say(message)

    async def _take_down(self, attempt: _Attempt, which: str) -> None:
        onion = attempt.onions.pop(which, None)
        if onion is None or not attempt.alive:
            return
        try:
            await attempt.control.queue_command(f"DEL_ONION {onion.key.service_id}")
        except TorProtocolError:
            pass  # already gone
        if which == JOURNALIST:
            self.journalist_onion_address = None

    def _write_source_onion_file(self, address: str) -> None:
        path = keys.source_onion_file(self._data_dir)
        try:
            with open(path) as f:
                previous = f.read().strip()
        except FileNotFoundError:
            previous = None
        if previous == address:
            return
        if previous:
            self._events.emit("tor.onion.address_changed", onion=address, detail="the source onion key was replaced")
        write_atomically(path, (address + "\n").encode("ascii"), 0o644)

    async def _republish(self, attempt: _Attempt, which: str, reason: str) -> None:
        onion = attempt.onions.get(which)
        public = onion.key.address if onion is not None and which == SOURCE else None
        self._events.emit("tor.onion.republish", onion=public, detail=which, reason=reason)
        await self._publish(attempt, which)

    # -- periodic checks --------------------------------------------------------------------

    def _loop_failed(self, failure: Failure) -> None:
        _log.failure("Tor periodic check stopped", failure)

    def _locked_publish(self, attempt: _Attempt, which: str, reason: str | None = None) -> Deferred:
        if reason is None:
            return attempt.lock.run(lambda: ensureDeferred(self._publish(attempt, which)))
        return attempt.lock.run(lambda: ensureDeferred(self._republish(attempt, which, reason)))

    def _check_descriptors(self):
        attempt = self._attempt
        if attempt is None or not attempt.alive or not attempt.ready or attempt.lock.locked:
            return None
        d = attempt.lock.run(lambda: ensureDeferred(self._verify_descriptors(attempt)))
        return d.addErrback(self._check_error, attempt)

    async def _verify_descriptors(self, attempt: _Attempt) -> None:
        reply = await attempt.control.get_info_raw("onions/current")
        current = set(reply.split("=", 1)[-1].split()) if "=" in reply else set()
        now = self._now()
        for which, onion in list(attempt.onions.items()):
            if not attempt.alive:
                return
            in_torrc = which == SOURCE and self._mode == "launch"
            if onion.key.service_id not in current and not in_torrc:
                reason = "missing"
            elif onion.uploaded_at is None and now - onion.added_at >= self._tuning.publish_grace:
                reason = "not_uploaded"
            elif onion.uploaded_at is not None and now - onion.uploaded_at >= self._tuning.stale_after:
                reason = "stale"
            else:
                continue
            if in_torrc:
                # Re-adding a torrc service would need a SETCONF (it resets PoW): relaunch Tor.
                self._fail(attempt, reason, "the source onion's descriptor was not uploaded; relaunching Tor",
                           event="tor.onion.republish")
                return
            await self._republish(attempt, which, reason)

    def _check_clients(self):
        """Re-read the authorised clients; republish the journalist onion if they changed."""
        attempt = self._attempt
        if attempt is None or not attempt.alive or not attempt.ready or attempt.lock.locked:
            return None
        try:
            clients = keys.list_clients(self._data_dir)
        except keys.OnionKeyError as e:
            if attempt.journalist_status == str(e):
                return None
        else:
            published = attempt.onions.get(JOURNALIST)
            if not clients and attempt.journalist_status == "no_clients":
                return None
            if clients and published is not None and published.clients == clients:
                return None
            self._events.emit("tor.journalist.clients", count=len(clients), reason="changed")
        d = self._locked_publish(attempt, JOURNALIST)
        return d.addErrback(self._check_error, attempt)

    def _check_error(self, failure: Failure, attempt: _Attempt) -> None:
        if not attempt.alive:
            return None  # the connection went away; supervision handles it
        if failure.check(TorProtocolError, TorStartError, ValueError, keys.OnionKeyError):
            self._events.emit("tor.onion.publish_failed", detail=_one_line(failure.getErrorMessage()))
            return None
        _log.failure("Tor periodic check failed", failure)
        return None

    # -- console --------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        if self._report is not None:
            try:
                self._report(line)
            except Exception:
                _log.failure("Tor progress report failed")


__all__ = ["TorOnionService", "Tuning"]
