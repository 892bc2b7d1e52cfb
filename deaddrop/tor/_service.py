"""The Tor service: launch or attach, bootstrap, publish the onions, supervise, republish.

One *attempt* (:mod:`deaddrop.tor._attempt`) is one Tor process (``launch``) or one control
connection (``control:``) from start to end. When an attempt ends, whether during the first
bootstrap or long after, the failure is logged as a security event and a new attempt is started
with exponential back-off, reusing the same onion keys; the web listeners are never touched by
any of this. Only two things are fatal (``on_fatal`` with one line, once), and only before Tor
was ever ready: the bootstrap timeout (no bootstrap within ``bootstrap_timeout`` seconds of the
service's start, however many attempts that took), and a failure that no relaunch can mend (a
missing binary, a torrc Tor refuses, a control port that is not there when attaching, an onion
Tor refuses).

This module is that supervision: the attempts, their ends, the back-off and the deadlines. Its
parts each do one job on the attempt they are handed: :class:`~deaddrop.tor._launcher.TorLauncher`
runs ``tor``, :class:`~deaddrop.tor._bootstrap.BootstrapWatch` follows the bootstrap and explains
a stall, :class:`~deaddrop.tor._publisher.OnionPublisher` publishes the onions and keeps them
published.
"""
from __future__ import annotations

import os
from functools import partial
from typing import Callable

from twisted.application import service
from twisted.internet.defer import Deferred, ensureDeferred, gatherResults, succeed
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.logger import Logger
from twisted.python.failure import Failure
from txtorcon import TorProtocolError
from txtorcon.torcontrolprotocol import TorDisconnectError

from deaddrop.tor import _control, keys
from deaddrop.tor._attempt import Aborted, Attempt, Tuning, cancel, one_line
from deaddrop.tor._bootstrap import BootstrapWatch
from deaddrop.tor._config import ControlEndpoint
from deaddrop.tor._launcher import TorLauncher
from deaddrop.tor._process import TorStartError, describe_exit
from deaddrop.tor._publisher import OnionPublisher
from deaddrop.tor.defences import Defences

_log = Logger(namespace="deaddrop.tor")

SOURCE = keys.SOURCE
JOURNALIST = keys.JOURNALIST


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
        data_dir = os.path.abspath(data_dir)
        self._mode = mode  # "launch" or "control"
        self._control_endpoint = control_endpoint
        self._events = events
        self._on_fatal = on_fatal
        self._bootstrap_timeout = bootstrap_timeout
        self._report = report
        self._tuning = tuning
        self._connect = connect or partial(_control.connect_control, reactor)
        self._source_proxy_target = source_proxy_target
        self._defences = defences
        self._journalist_target = journalist_target

        self.tor_pid: int | None = None
        self.state = "stopped"
        self._attempt: Attempt | None = None
        self._attempts = 0
        self._failures = 0
        self._ever_ready = False
        self._fatal_called = False
        self._startup_deadline = None  # the bootstrap timeout, from the start until first ready
        self._last_exit: str | None = None
        self._stopping = False
        self._retry_call = None
        self._previous_gone: Deferred | None = None

        self._launcher = TorLauncher(
            reactor, data_dir=data_dir, tor_binary=tor_binary, tor_options=list(tor_options),
            source_target=source_target, source_proxy_target=source_proxy_target, defences=defences,
            events=events, tuning=tuning, say=self._say, count_line=count_line,
            connect=lambda endpoint: self._connect(endpoint), fail=self._fail,
        )
        self._bootstrap = BootstrapWatch(
            reactor, events=events, tuning=tuning, say=self._say, bootstrap_timeout=bootstrap_timeout,
            ever_ready=lambda: self._ever_ready, current=lambda: self._attempt,
        )
        self._publisher = OnionPublisher(
            reactor, data_dir=data_dir, in_torrc=mode == "launch", source_target=source_target,
            journalist_target=journalist_target, journalist_onion_port=journalist_onion_port,
            defences=defences, events=events, tuning=tuning, say=self._say,
            current=lambda: self._attempt, relaunch=self._fail,
        )

    # -- public ---------------------------------------------------------------------------

    @property
    def onion_address(self) -> str | None:
        """The source onion's ``xxxx.onion`` once recorded as published."""
        return self._publisher.onion_address

    @property
    def journalist_onion_address(self) -> str | None:
        return self._publisher.journalist_onion_address

    def when_onion_ready(self) -> Deferred:
        """Fires with ``xxxx.onion`` once the source onion's descriptor is uploaded.

        If Tor is being relaunched right now, fires when it is published again. Fails with
        ``TorStartError`` (the ``on_fatal`` message) if Tor cannot be started at all.
        """
        return self._publisher.when_ready()

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
        self._publisher.start_checks()
        if not self._ever_ready and self._bootstrap_timeout is not None:
            self._startup_deadline = self._reactor.callLater(self._bootstrap_timeout, self._startup_timed_out)
        self._start_attempt()

    def stopService(self):
        self._stopping = True
        self.state = "stopped"
        super().stopService()
        self._publisher.stop_checks()
        cancel(self._retry_call)
        self._retry_call = None
        self._cancel_startup_deadline()
        self._bootstrap.end_folding()
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
        attempt = Attempt(self._attempts)
        self._attempt = attempt
        self.state = "starting"
        d = ensureDeferred(self._run(attempt))
        d.addErrback(self._internal_error, attempt)

    def _internal_error(self, failure: Failure, attempt: Attempt) -> None:
        _log.failure("unexpected error in the Tor service", failure)
        self._fail(attempt, "internal_error", f"internal error: {failure.getErrorMessage()}")

    async def _run(self, attempt: Attempt) -> None:
        try:
            self._publisher.load_source_key()
            if self._previous_gone is not None:
                await self._previous_gone  # the old Tor still holds the data directory lock
                self._previous_gone = None
            if not attempt.alive:
                return
            if self._mode == "launch":
                control = await self._launch(attempt)
            else:
                self._arm_deadline(attempt)
                self._events.emit("tor.connecting", detail=f"attempt {attempt.number}")
                control = await self._connect_attached()
            if control is None:
                return
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
            await control.add_event_listener("STATUS_CLIENT", partial(self._bootstrap.status_client, attempt))
            await control.add_event_listener("HS_DESC", partial(self._publisher.hs_desc, attempt))
            self._bootstrap.arm_stall_timer(attempt)
            phase = await control.get_info_raw("status/bootstrap-phase")
            self._bootstrap.progress(attempt, _control.parse_bootstrap(phase))
            await attempt.bootstrapped
            cancel(attempt.deadline)
            self._bootstrap.bootstrapped(attempt)
            self.state = "publishing"
            await self._publisher.locked_publish(attempt, SOURCE)
            if self._journalist_target is not None:
                await self._publisher.locked_publish(attempt, JOURNALIST)
            if attempt.alive:
                self._became_ready(attempt)
        except Aborted:
            return
        except TorStartError as e:
            # A launched Tor whose control port never answered may only have hung: try again.
            self._fail(attempt, e.reason, str(e), retry=e.reason == "control_unreachable" and self._mode == "launch")
        except keys.OnionKeyError as e:
            self._fail(attempt, "onion_key", str(e))
        except TorProtocolError as e:
            self._fail(attempt, "tor_refused", f"Tor refused a command: {one_line(str(e))}")
        except ValueError as e:
            self._fail(attempt, "bad_config", str(e))
        except Exception as e:
            if not attempt.alive:
                return  # the connection closed under us because the attempt ended
            if isinstance(e, (TorDisconnectError, ConnectionDone, ConnectionLost)):
                # Tor went away in the middle of a command (killed while bootstrapping): its
                # exit, or the lost control connection, ends the attempt and it is tried again.
                return
            self._fail(attempt, "error", f"{type(e).__name__}: {one_line(str(e))}")

    async def _launch(self, attempt: Attempt):
        """Start this attempt's Tor; its control connection, or None if the attempt ended."""
        await self._launcher.kill_stale_tor()
        if not attempt.alive:
            return None
        await self._launcher.check_pow_module()
        if not attempt.alive:
            return None
        self._arm_deadline(attempt)
        self.tor_pid = self._launcher.spawn(attempt, partial(self._process_ended, attempt), self._bootstrap.fold)
        self._publisher.torrc_onion(attempt)
        return await attempt.connected

    async def _connect_attached(self):
        endpoint = self._control_endpoint
        assert endpoint is not None  # (attaching: --tor names the control endpoint)
        try:
            return await self._connect(endpoint)
        except Exception as e:
            why = one_line(str(e)) or type(e).__name__
            raise TorStartError(
                f"cannot connect to the Tor control port {endpoint.describe()}: {why}", "control_unreachable"
            ) from None

    # -- deadlines ------------------------------------------------------------------------

    def _arm_deadline(self, attempt: Attempt) -> None:
        """A relaunch (Tor was ready before) must bootstrap within the timeout, or it is ended
        and tried again. Until Tor was first ready, the service's own deadline applies."""
        if not self._ever_ready or self._bootstrap_timeout is None:
            return
        attempt.deadline = self._reactor.callLater(self._bootstrap_timeout, self._bootstrap_timed_out, attempt)
        attempt.timers.append(attempt.deadline)

    def _cancel_startup_deadline(self) -> None:
        cancel(self._startup_deadline)
        self._startup_deadline = None

    def _startup_timed_out(self) -> None:
        """No attempt bootstrapped within the timeout of the start: the one fatal failure of a
        Tor that keeps dying or never connects."""
        self._startup_deadline = None
        if self._ever_ready or self._stopping:
            return
        message = self._bootstrap.startup_timeout_message(self._failures, self._last_exit)
        cancel(self._retry_call)
        self._retry_call = None
        attempt = self._attempt
        if attempt is not None:
            self._end_attempt(attempt, message)
        self._fatal("bootstrap_timeout", one_line(message))

    def _bootstrap_timed_out(self, attempt: Attempt) -> None:
        """A relaunch did not bootstrap in time: end it, try again."""
        self._fail(attempt, "bootstrap_timeout", self._bootstrap.relaunch_timeout_message(attempt), retry=True)

    # -- how attempts end -----------------------------------------------------------------

    def _process_ended(self, attempt: Attempt, exit_reason: str, summary: str | None) -> None:
        if self._attempt is attempt:
            self.tor_pid = None
        if not attempt.alive:
            return
        self._last_exit = describe_exit(exit_reason)
        message, running = self._launcher.why_it_ended(attempt, exit_reason, summary)
        self._fail(attempt, exit_reason, message, event="tor.exited", retry=running)

    def _control_lost(self, attempt: Attempt) -> None:
        if not attempt.alive or self._stopping:
            return
        if attempt.process is not None and not attempt.process.ended:
            # Usually Tor died: let its exit status arrive so the event names the real cause.
            grace = self._tuning.control_grace
            attempt.timers.append(self._reactor.callLater(grace, self._control_lost_confirmed, attempt))
            return
        self._control_lost_confirmed(attempt)

    def _control_lost_confirmed(self, attempt: Attempt) -> None:
        if attempt.alive:
            self._last_exit = "control connection lost"
            self._fail(attempt, "control_lost", "the Tor control connection was lost", event="tor.control.lost",
                       retry=True)

    def _end_attempt(self, attempt: Attempt, why: str) -> None:
        """Stop everything the attempt holds; its process goes away (TERM, then KILL)."""
        if not attempt.alive:
            return
        attempt.alive = False
        attempt.cancel_timers()
        for d in (attempt.connected, attempt.bootstrapped):
            if not d.called:
                d.errback(Failure(Aborted(why)))
                d.addErrback(lambda _: None)
        self._publisher.source_live = False
        if attempt.control is not None and attempt.control.transport is not None:
            attempt.control.transport.loseConnection()
        process = attempt.process
        if process is not None and not process.ended:
            process.signal("TERM")
            kill = self._reactor.callLater(self._tuning.stop_timeout, process.signal, "KILL")
            gone = process.when_ended()

            def cancel_kill(result):
                cancel(kill)
                return result

            self._previous_gone = gone.addBoth(cancel_kill)

    def _fail(self, attempt: Attempt, reason: str, message: str, event: str | None = None,
              retry: bool = False) -> None:
        """End ``attempt`` and try again with back-off; fatal only if Tor was never ready and
        ``retry`` is False (a failure no relaunch mends)."""
        if not attempt.alive:
            return
        message = one_line(message)
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
        self._publisher.fail_waiters(TorStartError(message, reason))
        self._on_fatal(message)

    def _schedule_retry(self, attempt: Attempt) -> None:
        if attempt.ready_at is not None and self._now() - attempt.ready_at >= self._tuning.stable_after:
            self._failures = 0
        self._failures += 1
        delay = min(self._tuning.retry_initial * 2 ** (self._failures - 1), self._tuning.retry_max)
        self.state = "restarting"
        self._events.emit("tor.restart", delay=delay, detail="relaunch" if self._mode == "launch" else "reconnect")
        _log.info("Tor is down; trying again in {delay:g} s", delay=delay)
        self._say(f"Tor is down; trying again in {delay:g} s")
        self._retry_call = self._reactor.callLater(delay, self._start_attempt)

    def _became_ready(self, attempt: Attempt) -> None:
        attempt.ready = True
        attempt.ready_at = self._now()
        self._ever_ready = True
        self._cancel_startup_deadline()
        self.state = "ready"
        self._events.emit("tor.ready", detail=f"attempt {attempt.number}")

    # -- console --------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        if self._report is not None:
            try:
                self._report(line)
            except Exception:
                _log.failure("Tor progress report failed")


__all__ = ["TorOnionService", "Tuning"]
