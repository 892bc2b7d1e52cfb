"""``DATA/status.json``: what the running server tells ``deaddrop-admin status``.

No network listener and no socket: the server rewrites one small file atomically at start-up
and every ``INTERVAL`` seconds, and removes it when it stops. Whether the server really runs is
decided by the data-dir lock it holds (``DATA/server.lock``), not by this file, so a crashed
server's stale file is never mistaken for a live one.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from twisted.application.internet import TimerService

import deaddrop
from deaddrop.durable import write_atomically

STATUS_FILE = "status.json"
INTERVAL = 15.0


def status_path(data_dir: str) -> str:
    return os.path.join(data_dir, STATUS_FILE)


class StatusFile(TimerService):
    """Writes the snapshot ``describe()`` returns, plus pid, version and start time."""

    def __init__(self, reactor: Any, data_dir: str, describe: Callable[[], dict[str, Any]],
                 io_pool: Any, clock: Callable[[], float] = time.time) -> None:
        super().__init__(INTERVAL, self._write)
        self.clock = reactor
        self._path = status_path(data_dir)
        self._describe = describe
        self._io_pool = io_pool
        self._now = clock
        self._started_at = clock()

    def snapshot(self) -> dict[str, Any]:
        return dict(self._describe(), pid=os.getpid(), version=deaddrop.__version__,
                    started_at=round(self._started_at), updated_at=round(self._now()))

    def _write(self) -> Any:
        data = json.dumps(self.snapshot(), sort_keys=True).encode() + b"\n"
        # fsync is blocking work: off the reactor thread, like every other write.
        return self._io_pool.run(write_atomically, self._path, data, mode=0o600).addErrback(lambda f: None)

    def stopService(self) -> Any:
        def remove(result: Any) -> Any:
            try:
                os.remove(self._path)
            except FileNotFoundError:
                pass
            return result

        # After the last write in flight, or it would bring the file back.
        d = super().stopService()
        if d is None:
            return remove(None)
        return d.addBoth(remove)
