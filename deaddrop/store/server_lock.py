"""The data dir's exclusive lock, ``DATA/server.lock``: held by the running server for its
lifetime, and by ``deaddrop-admin migrate`` while it changes the schema, so that neither runs
on a database the other is changing. ``deaddrop-admin status`` finds the holder in the
kernel's lock table."""
from __future__ import annotations

import fcntl
import os
from typing import Callable

LOCK_NAME = "server.lock"


class DataDirBusy(Exception):
    """Another process (a server, or a migration) holds the data dir's lock."""


def lock_data_dir(data_dir: str) -> Callable[[], None]:
    """Take ``DATA/server.lock`` without waiting and write this pid into it. -> the release
    function; ``DataDirBusy`` (naming the lock file) if someone else holds it."""
    path = os.path.join(data_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DataDirBusy(path) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())

    def release() -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return release
