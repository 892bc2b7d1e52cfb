"""Create a small secret file once, crash-safely, without importing anything above ``crypto``."""
from __future__ import annotations

import os
import secrets


def create_secret_file(path: str, data: bytes) -> None:
    """Write ``data`` to a new 0600 file at ``path``: whole or not at all, never replacing one.

    Temp file, fsync, then ``link`` (which fails if ``path`` exists, so two starting processes
    cannot end up with different secrets), then fsync the directory.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".tmp-{secrets.token_hex(8)}-{os.path.basename(path)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    finally:
        os.remove(tmp)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
