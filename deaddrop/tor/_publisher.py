"""Publishing the onions on an attempt's Tor, and checking that they stay published.

The source onion of a launched Tor is in its torrc (see :mod:`deaddrop.tor._launcher`): Tor
publishes it by itself once bootstrapped, and it is only recorded here. Every other onion (the
source onion of an attached Tor, the journalist onion) is added with ``ADD_ONION`` over the
attempt's control connection. ``HS_DESC`` events say when a descriptor was uploaded; the
periodic checks republish an onion Tor lost or stopped uploading, and follow the journalist
onion's authorised clients on disk.
"""
from __future__ import annotations

from typing import Callable

from twisted.internet import task
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from txtorcon import TorProtocolError

from deaddrop.durable import write_atomically
from deaddrop.tor import _control, keys
from deaddrop.tor._attempt import Attempt, Onion, Tuning, one_line
from deaddrop.tor._config import resolve_target
from deaddrop.tor._process import TorStartError
from deaddrop.tor.defences import Defences, add_onion_keywords

_log = Logger(namespace="deaddrop.tor")

SOURCE = keys.SOURCE
JOURNALIST = keys.JOURNALIST


class OnionPublisher:
    """The onions: their keys, their publication on the current attempt, their addresses."""

    def __init__(
        self,
        reactor,
        *,
        data_dir: str,
        in_torrc: bool,
        source_target: str | Callable[[], str],
        journalist_target: str | Callable[[], str] | None,
        journalist_onion_port: int,
        defences: Defences,
        events,
        tuning: Tuning,
        say: Callable[[str], None],
        current: Callable[[], Attempt | None],
        relaunch: Callable[..., None],
    ) -> None:
        self._reactor = reactor
        self._data_dir = data_dir
        self._in_torrc = in_torrc  # launch mode: the source onion is a torrc service
        self._source_target = source_target
        self._journalist_target = journalist_target
        self._journalist_onion_port = journalist_onion_port
        self._defences = defences
        self._events = events
        self._tuning = tuning
        self._say = say
        self._current = current
        self._relaunch = relaunch  # the supervisor's fail(): for a torrc onion Tor stopped uploading
        self.onion_address: str | None = None
        self.journalist_onion_address: str | None = None
        self.source_key: keys.OnionKey | None = None
        self._journalist_key: keys.OnionKey | None = None
        self.source_live = False
        self._ready_waiters: list[Deferred] = []
        self._loops: list[task.LoopingCall] = []

    def _now(self) -> float:
        return self._reactor.seconds()

    # -- the address --------------------------------------------------------------------------

    def when_ready(self) -> Deferred:
        if self.source_live and self.onion_address:
            return succeed(self.onion_address)
        d: Deferred[str] = Deferred()
        self._ready_waiters.append(d)
        return d

    def fail_waiters(self, error: Exception) -> None:
        waiters, self._ready_waiters = self._ready_waiters, []
        for d in waiters:
            d.errback(error)

    def load_source_key(self) -> keys.OnionKey:
        if self.source_key is None:
            self.source_key, created = keys.load_or_create_onion_key(keys.service_dir(self._data_dir, SOURCE))
            if created:
                self._events.emit("tor.onion.key_created", onion=self.source_key.address, detail=SOURCE)
        return self.source_key

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

    # -- publishing -----------------------------------------------------------------------

    def torrc_onion(self, attempt: Attempt) -> None:
        """A launched Tor has the source onion in its torrc: it publishes it by itself."""
        attempt.onions[SOURCE] = Onion(SOURCE, self.load_source_key(), added_at=self._now())

    def locked_publish(self, attempt: Attempt, which: str, reason: str | None = None) -> Deferred:
        if reason is None:
            return attempt.lock.run(lambda: ensureDeferred(self._publish(attempt, which)))
        return attempt.lock.run(lambda: ensureDeferred(self._republish(attempt, which, reason)))

    async def _publish(self, attempt: Attempt, which: str) -> None:
        """(Re)publish one onion on this attempt's Tor; the caller holds ``attempt.lock``."""
        if not attempt.alive:
            return
        clients: dict[str, str] = {}
        if which == SOURCE and self._in_torrc:
            self._source_added(self.load_source_key())  # in the torrc: Tor publishes it by itself
            return
        if which == SOURCE:
            key = self.load_source_key()  # (loaded at start: this only reads it)
        else:
            clients = await self._journalist_clients(attempt)
            if not clients:
                return
            if self._journalist_key is None:
                self._journalist_key, _ = keys.load_or_create_onion_key(keys.service_dir(self._data_dir, JOURNALIST))
            key = self._journalist_key
        target = resolve_target(self._source_target if which == SOURCE else self._journalist_target, which)
        await self._take_down(attempt, which)
        if which == JOURNALIST:
            command = _control.add_onion_command(key, target, list(clients.values()), self._journalist_onion_port)
        else:
            command = _control.add_onion_command(key, target, extra=add_onion_keywords(self._defences))
        onion = Onion(which, key, clients=dict(clients), added_at=self._now())
        attempt.onions[which] = onion  # before the reply: upload events may follow at once
        _log.debug("control: {command}", command=_control.redact(command))
        try:
            reply = await attempt.control.queue_command(command)
        except TorProtocolError as e:
            if which != SOURCE or not self._defences.pow or "pow" not in str(e).lower():
                raise
            # An attached Tor without the pow module refuses the PoW keywords: say so, go on.
            self._warn_no_pow_attached(one_line(str(e)))
            command = _control.add_onion_command(
                key, target, extra=add_onion_keywords(Defences(**{**self._defences.__dict__, "pow": False}))
            )
            reply = await attempt.control.queue_command(command)
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

    async def _journalist_clients(self, attempt: Attempt) -> dict[str, str]:
        """The authorised clients; none (the onion taken down) if there are none or a client
        file cannot be read."""
        try:
            clients = keys.list_clients(self._data_dir)
        except keys.OnionKeyError as e:
            # Fail closed: a client file we cannot read may be a revocation we would miss.
            await self._take_down(attempt, JOURNALIST)
            if attempt.journalist_status != str(e):
                attempt.journalist_status = str(e)
                self._events.emit("tor.journalist.clients_invalid", detail=one_line(str(e)))
            return {}
        if not clients:
            await self._take_down(attempt, JOURNALIST)
            if attempt.journalist_status != "no_clients":
                attempt.journalist_status = "no_clients"
                self._events.emit(
                    "tor.journalist.waiting",
                    count=0,
                    detail="no authorised clients: journalist onion not published",
                )
        return clients

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

    async def _take_down(self, attempt: Attempt, which: str) -> None:
        onion = attempt.onions.pop(which, None)
        if onion is None or not attempt.alive:
            return
        try:
            await attempt.control.queue_command(f"DEL_ONION {onion.key.service_id}")
        except TorProtocolError:
            pass  # already gone
        if which == JOURNALIST:
            self.journalist_onion_address = None

    async def _republish(self, attempt: Attempt, which: str, reason: str) -> None:
        onion = attempt.onions.get(which)
        public = onion.key.address if onion is not None and which == SOURCE else None
        self._events.emit("tor.onion.republish", onion=public, detail=which, reason=reason)
        await self._publish(attempt, which)

    # -- what Tor tells us ------------------------------------------------------------------

    def hs_desc(self, attempt: Attempt, text: str) -> None:
        """An ``HS_DESC`` event: a descriptor of one of our onions was uploaded (or not)."""
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
                if onion.which != SOURCE:
                    _log.info("{which} onion service published: {address}", which=onion.which, address=onion.key.address)
                else:
                    _log.info("Source onion service published: http://{address}/", address=onion.key.address)
                    self._say(f"Source onion service published: http://{onion.key.address}/")
                    self.source_live = True
                    waiters, self._ready_waiters = self._ready_waiters, []
                    for d in waiters:
                        d.callback(onion.key.address)
        elif event["action"] == "FAILED" and not onion.published and not onion.failure_reported:
            onion.failure_reported = True
            self._events.emit("tor.onion.upload_failed", onion=public, detail=onion.which, reason=event["reason"])

    # -- periodic checks --------------------------------------------------------------------

    def start_checks(self) -> None:
        checks = [(self._tuning.check_interval, self._check_descriptors)]
        if self._journalist_target is not None:
            checks.append((self._tuning.clients_interval, self._check_clients))
        for period, func in checks:
            loop = task.LoopingCall(func)
            loop.clock = self._reactor
            loop.start(period, now=False).addErrback(self._loop_failed)
            self._loops.append(loop)

    def stop_checks(self) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops = []

    def _loop_failed(self, failure: Failure) -> None:
        _log.failure("Tor periodic check stopped", failure)

    def _check_descriptors(self):
        attempt = self._current()
        if attempt is None or not attempt.alive or not attempt.ready or attempt.lock.locked:
            return None
        d = attempt.lock.run(lambda: ensureDeferred(self._verify_descriptors(attempt)))
        return d.addErrback(self._check_error, attempt)

    async def _verify_descriptors(self, attempt: Attempt) -> None:
        reply = await attempt.control.get_info_raw("onions/current")
        current = set(reply.split("=", 1)[-1].split()) if "=" in reply else set()
        now = self._now()
        for which, onion in list(attempt.onions.items()):
            if not attempt.alive:
                return
            in_torrc = which == SOURCE and self._in_torrc
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
                self._relaunch(attempt, reason, "the source onion's descriptor was not uploaded; relaunching Tor",
                               event="tor.onion.republish")
                return
            await self._republish(attempt, which, reason)

    def _check_clients(self):
        """Re-read the authorised clients; republish the journalist onion if they changed."""
        attempt = self._current()
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
        d = self.locked_publish(attempt, JOURNALIST)
        return d.addErrback(self._check_error, attempt)

    def _check_error(self, failure: Failure, attempt: Attempt) -> None:
        if not attempt.alive:
            return None  # the connection went away; supervision handles it
        if failure.check(TorProtocolError, TorStartError, ValueError, keys.OnionKeyError):
            self._events.emit("tor.onion.publish_failed", detail=one_line(failure.getErrorMessage()))
            return None
        _log.failure("Tor periodic check failed", failure)
        return None
