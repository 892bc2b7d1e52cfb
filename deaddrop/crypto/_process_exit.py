"""Waiting for a process that is not our child (a daemon, such as gpg-agent) to exit."""
from __future__ import annotations

import os
import select
import signal
import time


class ProcessExit:
    """Waits for a process that is not our child to exit: through a pidfd (no pid reuse can
    fool it), or by polling where the kernel has none."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._fd: int | None = None
        self._gone = False
        try:
            self._fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._gone = True
        except (AttributeError, OSError):
            pass  # no pidfd here: poll

    def wait(self, timeout: float) -> bool:
        if self._gone:
            return True
        if self._fd is not None:
            readable, _, _ = select.select([self._fd], [], [], timeout)
            return bool(readable)
        deadline = time.monotonic() + timeout
        while running(self._pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def kill(self) -> None:
        try:
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
            elif not self._gone:
                os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has exited: its sockets are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
