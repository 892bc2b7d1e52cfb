"""File times on a seized disk: every file and folder of the data directory cut to the day.

A file's times date what last happened to it: a source folder's mtime its creation, the
keyring's the latest key pair (a first submission), the WAL's the latest write, and every
inode's ctime the latest change of any kind. Stored times are kept to the day, so the files
must be too. ``normalise_times`` sets each entry's modification time to the start (midnight
UTC) of its own day and its access time to the last nanosecond of today, newer than any time
today so that ``relatime`` records no read until the next run (see ``deaddrop.day_times``);
the kernel then sets its change time, which no call can set, to the moment of the
normalisation. Run at start-up and just after every midnight UTC, this leaves no time of day on
the disk for anything done before the last run, and none for a read after it.

``utime`` changes no content, so it cannot corrupt a file being written: a write in flight
(an upload in ``tmp/``, SQLite's WAL, gpg replacing its keybox) simply gives its file a newer
time again, which the next run cuts. Entries are reached through directory descriptors and
never through a symbolic link, so nothing outside the data directory is touched; an entry that
disappears meanwhile (a rename, a deletion) is skipped.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any, Callable

from twisted.application import service
from twisted.internet.defer import Deferred, DeferredLock
from twisted.logger import Logger

from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.day_times import cut_times
from deaddrop.delayed_calls import cancel

DAY = 86400.0

_log = Logger(namespace="deaddrop.file_times")  # the name its log lines carried before the module moved


@dataclass(frozen=True)
class NormaliseReport:
    entries: int  # files, folders, links and sockets given day times
    failed: int  # entries that could not be changed (not ours, or vanished mid-way)


def _cut(name: str, dir_fd: int, st: os.stat_result) -> bool:
    """Cut one entry's times (a link's own, never its target's)."""
    try:
        cut_times(name, st.st_mtime_ns, dir_fd=dir_fd)
        return True
    except OSError:
        # Removed or renamed meanwhile (activity after this run began), or not ours to change.
        return False


def _normalise_folder(dir_fd: int, counts: list[int]) -> None:
    st = os.fstat(dir_fd)
    try:
        names = os.listdir(dir_fd)
    except OSError:
        names = []
    for name in names:
        try:
            entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            counts[1] += 1  # gone meanwhile
            continue
        if stat.S_ISDIR(entry.st_mode):
            try:
                # O_NOFOLLOW: a folder swapped for a link meanwhile is not followed.
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError:
                counts[1] += 1
                continue
            try:
                _normalise_folder(sub, counts)
            finally:
                os.close(sub)
        else:
            counts[0 if _cut(name, dir_fd, entry) else 1] += 1
    try:
        cut_times(dir_fd, st.st_mtime_ns)
        counts[0] += 1
    except OSError:
        counts[1] += 1


def normalise_times(data_dir: str) -> NormaliseReport:
    """Give every file and folder under ``data_dir`` (and itself) day-precision times.

    Folders are entered through descriptors opened with ``O_NOFOLLOW``, and links are changed
    themselves, so nothing outside ``data_dir`` is ever touched."""
    forbid_reactor_thread("file time normalisation")
    counts = [0, 0]
    top = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _normalise_folder(top, counts)
    finally:
        os.close(top)
    return NormaliseReport(*counts)


def next_midnight(now: float) -> float:
    return (now // DAY + 1) * DAY


class FileTimeNormaliser(service.Service):
    """Runs ``normalise_times`` in ``pool`` at start-up and just after every midnight UTC."""

    name = "file-times"  # type: ignore[assignment]  # (Twisted types Service.name as None)

    def __init__(self, reactor: Any, data_dir: str, pool: Any,
                 clock: Callable[[], float] | None = None,
                 normalise: Callable[[str], NormaliseReport] = normalise_times) -> None:
        self._reactor = reactor
        self._data_dir = data_dir
        self._pool = pool
        self._clock = clock or reactor.seconds
        self._normalise = normalise
        self._call = None
        self._lock = DeferredLock()
        self.last_run: float | None = None  # when the last completed run began

    def startService(self) -> None:
        super().startService()
        self.run()

    def stopService(self) -> Any:
        super().stopService()
        self._cancel_call()
        # The pool is stopped after the services: let a run in flight finish first.
        return self.idle()

    def idle(self) -> Deferred:
        """Fires once no run is in flight (the start-up run, on a busy machine, may still be)."""
        return self._lock.acquire().addCallback(lambda lock: lock.release())

    def run(self) -> Deferred:
        """A whole normalisation that begins now (after one in flight, if any); then the next
        one is due at the coming midnight UTC. Fires with the ``NormaliseReport`` (None if it
        failed: the error is logged)."""
        self._cancel_call()
        return self._lock.run(self._run_once)

    def _run_once(self) -> Deferred:
        began = self._clock()

        def done(report: NormaliseReport) -> NormaliseReport:
            self.last_run = began
            _log.info("file times cut to the day: {entries} entries ({failed} not changed)",
                      entries=report.entries, failed=report.failed)
            return report

        def failed(f: Any) -> None:
            # Only the error's type: a message could carry a path, which may name a source.
            _log.error("file time normalisation failed: {error}", error=f.type.__name__)

        def schedule(result: Any) -> Any:
            self._cancel_call()
            if self.running:
                now = self._clock()
                self._call = self._reactor.callLater(max(0.0, next_midnight(now) - now), self.run)
            return result

        return self._pool.run(self._normalise, self._data_dir).addCallbacks(done, failed).addBoth(schedule)

    def _cancel_call(self) -> None:
        cancel(self._call)
        self._call = None
