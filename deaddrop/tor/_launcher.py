"""Launching one Tor (``--tor launch``): the torrc, the child process, its control connection.

Before the first launch: a Tor left running by a crashed server is stopped (found through
``DATA/tor/tor.pid``), and ``tor --list-modules`` says whether PoW is there. Each launch then
rewrites ``DATA/tor/torrc`` (the source onion in it, so that no SETCONF is ever needed), spawns
``tor -f DATA/tor/torrc`` and, once Tor prints that its control listener is open, connects to
it (retrying a little: the socket may lag the line). See docs/tor.md for why this is not
``txtorcon.launch``.
"""
from __future__ import annotations

import os
import signal
from typing import Callable

from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.internet.utils import getProcessOutputAndValue
from twisted.logger import Logger

from deaddrop.tor import keys
from deaddrop.tor._attempt import Attempt, Tuning, one_line
from deaddrop.tor._config import ControlEndpoint, resolve_target
from deaddrop.tor._process import (
    TorFiles,
    TorProcessProtocol,
    TorStartError,
    describe_exit,
    find_tor_binary,
    read_control_port_file,
    remove_stale_files,
    stale_tor_pid,
    tor_args,
    tor_owner_pid,
    write_torrc,
)
from deaddrop.tor.defences import Defences, has_pow_module, hidden_service_lines

_log = Logger(namespace="deaddrop.tor")


class TorLauncher:
    """Runs ``tor`` for one attempt after another; the supervisor decides when."""

    def __init__(
        self,
        reactor,
        *,
        data_dir: str,
        tor_binary: str | None,
        tor_options: list[tuple[str, str]],
        source_target: str | Callable[[], str],
        source_proxy_target: str | Callable[[], str] | None,
        defences: Defences,
        events,
        tuning: Tuning,
        say: Callable[[str], None],
        count_line: Callable[[str, str], None] | None,
        connect: Callable[[ControlEndpoint], Deferred],
        fail: Callable[..., None],
    ) -> None:
        self._reactor = reactor
        self._data_dir = data_dir
        self._tor_binary = tor_binary
        self._tor_options = tor_options
        self._source_target = source_target
        # Tor connects here, each connection prefixed with a PROXY header naming its circuit.
        self._source_proxy_target = source_proxy_target
        self._defences = defences
        self._events = events
        self._tuning = tuning
        self._say = say
        # What Tor prints once bootstrapped, counted per day instead of logged (see
        # TorProcessProtocol._line): count_line(level, kind).
        self._count_line = count_line
        self._connect = connect
        self._fail = fail  # the supervisor's: end the attempt, maybe try again
        self._pow_available: bool | None = None  # from `tor --list-modules`, once

    def _now(self) -> float:
        return self._reactor.seconds()

    # -- before a launch ----------------------------------------------------------------------

    async def kill_stale_tor(self) -> None:
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

    async def check_pow_module(self) -> None:
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
        """The torrc block of the source onion."""
        proxied = self._source_proxy_target is not None
        target = resolve_target(self._source_proxy_target if proxied else self._source_target, keys.SOURCE)
        lines = hidden_service_lines(
            keys.service_dir(self._data_dir, keys.SOURCE), target, self._defences, bool(self._pow_available)
        )
        if not proxied:  # a plain listener would take the PROXY header for a broken request
            lines.remove("HiddenServiceExportCircuitID haproxy")
        return lines

    # -- the launch ---------------------------------------------------------------------------

    def spawn(
        self,
        attempt: Attempt,
        on_ended: Callable[[str, str | None], None],
        fold_line: Callable[[str], bool],
    ) -> int | None:
        """Write the torrc and start Tor; ``attempt.connected`` fires with its control
        connection. Returns Tor's pid."""
        binary = find_tor_binary(self._tor_binary)
        tor_dir = keys.tor_dir(self._data_dir)
        keys.ensure_private_dir(tor_dir)
        files = TorFiles(tor_dir)
        remove_stale_files(files)
        write_torrc(files, self._tor_options, os.getpid(), self._source_service_lines())
        proto = TorProcessProtocol(
            on_control_listener=lambda: self._control_listener_up(attempt),
            on_ended=on_ended,
            count_line=self._count_line,
            fold_line=fold_line,
        )
        attempt.files = files
        attempt.process = proto
        self._reactor.spawnProcess(proto, binary, args=tor_args(binary, files), env={"HOME": tor_dir}, path=tor_dir)
        self._events.emit("tor.launching", detail=f"attempt {attempt.number}")
        _log.info("launched Tor (pid {pid}) with DataDirectory {dir}", pid=proto.pid, dir=tor_dir)
        return proto.pid

    def _control_listener_up(self, attempt: Attempt) -> None:
        if not attempt.alive or attempt.connected.called:
            return
        files = attempt.files
        assert files is not None  # (a launched Tor's attempt has its files)
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
            self._retry_control(attempt, one_line(f.getErrorMessage()))

        d.addCallbacks(connected, failed)

    def _retry_control(self, attempt: Attempt, why: str) -> None:
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

    # -- after ----------------------------------------------------------------------------

    @staticmethod
    def why_it_ended(attempt: Attempt, exit_reason: str, summary: str | None) -> tuple[str, bool]:
        """The line for an exit of the attempt's Tor, and whether a relaunch may mend it."""
        how = describe_exit(exit_reason)
        if attempt.ready:
            message = f"Tor exited unexpectedly ({how})" + (f": {summary}" if summary else "")
        else:
            why = summary or "it printed no error; see its log lines above"
            message = f"Tor exited during startup ({how}): {why}"
        # Killed, or ended after it was up and running: relaunch. Exited by itself before even
        # opening its control port: it refused its configuration, which a relaunch repeats.
        running = exit_reason.startswith("signal_") or (attempt.process is not None and attempt.process.saw_listener)
        return message, running
