"""Reading the SVS's inputs without following links into its own secrets.

Inputs come from sources: an archive extracted on the SVS can hold symbolic links (or, with
tar, hard links) to ``DIR/gnupg/private-keys-v1.d/<keygrip>.key``, whose names anyone can
compute from the public key. Exporting such a folder would encrypt the SVS's secret key to a
journalist, who then carries it to a networked machine. So every input is:

* ``lstat``-ed, never ``stat``-ed: a symbolic link is refused (at the top level) or skipped
  with a FAILED line (inside a folder), never followed;
* opened with ``O_NOFOLLOW`` and checked with ``fstat`` to be the same regular file that was
  ``lstat``-ed (no swap between the walk and the open);
* refused if it lies inside ``--home`` (by path) or *is* one of its files (same device and
  inode: a hard link planted by an archive).
"""
from __future__ import annotations

import os
import stat
from typing import BinaryIO

from deaddrop.svs._errors import ItemError

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
# A public key file is a few KiB; anything bigger is not what --to-key should be.
MAX_KEY_FILE = 1024 * 1024


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class InputGuard:
    """What the SVS may read: regular files, reached without links, outside ``home``."""

    def __init__(self, home: str | None) -> None:
        self.home = os.path.realpath(home) if home else None
        self._home_inodes: set[tuple[int, int]] | None = None

    def _inodes(self) -> set[tuple[int, int]]:
        if self._home_inodes is None:
            found: set[tuple[int, int]] = set()
            if self.home is not None:
                for dirpath, dirnames, filenames in os.walk(self.home):
                    for name in dirnames + filenames:
                        try:
                            st = os.lstat(os.path.join(dirpath, name))
                        except OSError:
                            continue
                        found.add((st.st_dev, st.st_ino))
            self._home_inodes = found
        return self._home_inodes

    def refusal(self, path: str, st: os.stat_result | None = None) -> str | None:
        """Why ``path`` must not be read, or ``None``. ``st`` is its ``lstat`` if known."""
        if st is None:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return "no such file or directory"
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link (not followed)"
        if self.home is not None:
            if _inside(os.path.realpath(path), self.home):
                return "is inside the SVS home (--home): refused"
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in self._inodes():
                return "is a link to a file of the SVS home (--home): refused"
        return None

    def open(self, path: str, expected: os.stat_result | None = None) -> BinaryIO:
        """Open ``path`` for reading, or raise :class:`ItemError` saying why not.

        ``expected`` is the ``lstat`` taken when the input was found: the opened file must
        be that very file, so nothing swapped in meanwhile is read.
        """
        reason = self.refusal(path, None)
        if reason is not None:
            raise ItemError(reason)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as e:
            if e.errno == getattr(os, "ELOOP", 40):
                raise ItemError("is a symbolic link (not followed)") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ItemError("not a regular file")
            if expected is not None and (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
                raise ItemError("changed while being read (replaced?)")
            if self.home is not None and (st.st_dev, st.st_ino) in self._inodes():
                raise ItemError("is a link to a file of the SVS home (--home): refused")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")

    def read_small(self, path: str, limit: int = MAX_KEY_FILE) -> bytes:
        """The whole of a small input (a key file), read the same careful way."""
        with self.open(path) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ItemError(f"larger than {limit} bytes")
        return data
