"""Encrypt a stream to the submission keys while it arrives, so plaintext never reaches disk.

The reactor hands plaintext chunks to ``StreamEncryption.write``; a worker thread pumps them
(optionally through a gzip framer) into a ``gpg --encrypt`` process that writes ciphertext
straight to a temp file. Memory is bounded: past ``high_water`` buffered bytes the producer is
asked to pause, and resumed once the pump has drained below ``low_water``.
"""
from __future__ import annotations

import errno
import fcntl
import os
import queue
import subprocess
import tempfile
import threading
from typing import IO, Any, Callable, cast

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from deaddrop.crypto._gzip import GzipFramer
from deaddrop.crypto.gpg import gpg_base_argv
from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread

_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20
_IOV_MAX = 512  # below Linux's 1024
# Every this many plaintext bytes, gpg's output so far is sent to disk and dropped from the page
# cache (see _Writeback).
_WRITEBACK_EVERY = 32 << 20
# Chunks written to gpg in one writev at most (each a read of the socket, 256 KiB at most).
_BATCH = 8
_EOF = object()
_ABORT = object()


class EncryptionFailed(Exception):
    """gpg could not encrypt the stream; ``disk_full`` tells the source what went wrong."""

    def __init__(self, message: str, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


class EncryptionTarget:
    """Where and how to encrypt: the recipients' key files and the gpg to use.

    Several key files make one ciphertext that each of their secret keys opens (a desk each,
    issue 29): the data is encrypted once, under one session key wrapped for every recipient."""

    def __init__(self, gpg_binary: str, homedir: str, recipient_files: str | list[str]) -> None:
        self.gpg_binary = gpg_binary
        self.homedir = homedir
        self.recipient_files = [recipient_files] if isinstance(recipient_files, str) else list(recipient_files)
        if not self.recipient_files:
            raise ValueError("no recipient: a submission must be encrypted to at least one key")

    def to(self, recipient_files: list[str]) -> "EncryptionTarget":
        """The same gpg, encrypting to these key files instead."""
        return EncryptionTarget(self.gpg_binary, self.homedir, recipient_files)

    def argv(self, out_path: str, compress: bool) -> list[str]:
        recipients = [arg for path in self.recipient_files for arg in ("--recipient-file", path)]
        # No keyring: the recipients are files, and a keyring would be locked at every start.
        return gpg_base_argv(self.gpg_binary, self.homedir) + ["--no-default-keyring"] + recipients + [
            "--compress-algo", "zlib" if compress else "none",
            "--output", out_path,
            "--encrypt",
        ]


class StreamEncryption:
    def __init__(
        self,
        reactor: Any,
        pool: WorkerPool,
        target: EncryptionTarget,
        out_path: str,
        *,
        gzip_name: str | None = None,
        compress: bool = False,
        on_pause: Callable[[], None] = lambda: None,
        on_resume: Callable[[], None] = lambda: None,
        high_water: int = 1 << 20,
        low_water: int = 256 << 10,
    ) -> None:
        self._reactor = reactor
        self.out_path = out_path
        self._argv = target.argv(out_path, compress)
        self._homedir = target.homedir
        self._framer = GzipFramer(gzip_name) if gzip_name is not None else None
        self._on_pause = on_pause
        self._on_resume = on_resume
        self._high = high_water
        self._low = low_water
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._buffered = 0
        self._paused = False
        self._closed = False
        self.plaintext_size = 0
        self._outcome: Any = None  # ciphertext size, or a Failure
        self._waiters: list[Deferred] = []
        pool.call_in_thread(self._pump)

    # -- reactor side ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closed or not data:
            return
        self.plaintext_size += len(data)
        with self._lock:
            self._buffered += len(data)
            pause = self._buffered > self._high and not self._paused
            if pause:
                self._paused = True
        self._queue.put(data)
        if pause:
            self._on_pause()

    def finish(self) -> "Deferred[int]":
        """No more input. Fires with the ciphertext size once it is written and fsynced."""
        if not self._closed:
            self._closed = True
            self._queue.put(_EOF)
        d: Deferred[int] = Deferred()
        if self._outcome is None:
            self._waiters.append(d)
        else:
            self._fire(d)
        return d

    def abort(self) -> None:
        """Stop, kill gpg, and remove whatever ciphertext was written."""
        if not self._closed:
            self._closed = True
            self._queue.put(_ABORT)
        elif self._outcome is None:
            # Input complete but gpg still writing (the upload failed or was cut off after
            # this part ended): remove the ciphertext when it lands, or it outlives the request.
            self._abandoned = True
        elif not isinstance(self._outcome, Failure):
            _remove_quietly(self.out_path)  # finished already: its ciphertext has no owner now
            if self.on_gone is not None:
                self.on_gone()

    _abandoned = False
    # Called on the reactor once the ciphertext is gone (failed, aborted or abandoned): its
    # owner forgets it.
    on_gone: Callable[[], None] | None = None

    def _settle(self, outcome: Any) -> None:
        self._outcome = outcome
        if self._abandoned and not isinstance(outcome, Failure):
            _remove_quietly(self.out_path)
        if (self._abandoned or isinstance(outcome, Failure)) and self.on_gone is not None:
            self.on_gone()
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            self._fire(d)

    def _fire(self, d: Deferred) -> None:
        if isinstance(self._outcome, Failure):
            d.errback(self._outcome)
        else:
            d.callback(self._outcome)

    # -- worker thread ---------------------------------------------------------------------

    def _pump(self) -> None:
        forbid_reactor_thread("gpg")
        try:
            size = self._run_gpg()
        except BaseException as e:  # report every failure to the reactor, never lose it
            _remove_quietly(self.out_path)
            error = e if isinstance(e, EncryptionFailed) else EncryptionFailed(f"encryption failed: {e!r}")
            self._reactor.callFromThread(self._settle, Failure(error))
        else:
            self._reactor.callFromThread(self._settle, size)

    def _run_gpg(self) -> int:
        with tempfile.TemporaryFile() as stderr:
            # gpg creates the .gpg.part file under its umask: 077 makes it 0600 from its first
            # byte, whatever the server's umask (022 outside systemd would leave it 0644).
            proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
                                    bufsize=0, umask=0o077)
            stdin = cast(IO[bytes], proc.stdin)  # (stdin=PIPE)
            try:
                fcntl.fcntl(stdin.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
            except OSError:
                pass  # a smaller pipe only costs speed
            stdin_fd = stdin.fileno()
            aborted = False
            writeback = _Writeback(self.out_path)
            fed = 0
            try:
                if self._framer is not None:
                    _write_all(stdin_fd, [self._framer.header()])
                while True:
                    # What the reactor has queued meanwhile goes in the same writev: fewer
                    # system calls and thread hand-offs per byte, on a machine where gpg and
                    # the reactor compete for two cores.
                    items = [self._queue.get()]
                    while items[-1] is not _EOF and items[-1] is not _ABORT and len(items) < _BATCH:
                        try:
                            items.append(self._queue.get_nowait())
                        except queue.Empty:
                            break
                    end = items.pop() if items[-1] is _EOF or items[-1] is _ABORT else None
                    if items:
                        size = sum(map(len, items))
                        self._drained(size)
                        buffers: list = []
                        for item in items:
                            buffers += self._framer.frame(item) if self._framer else [item]
                        _write_all(stdin_fd, buffers)
                        fed += size
                        writeback.fed(fed)
                    if end is _EOF:
                        break
                    if end is _ABORT:
                        aborted = True
                        break
                if not aborted and self._framer is not None:
                    _write_all(stdin_fd, [self._framer.trailer()])
            except BrokenPipeError:
                pass  # gpg died; its exit status and stderr say why
            finally:
                writeback.close()
                if aborted:
                    # SIGTERM, not SIGKILL: gpg's handler then removes its dot-lock files.
                    proc.terminate()
                try:
                    stdin.close()
                except BrokenPipeError:
                    pass
                try:
                    returncode = proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    returncode = proc.wait()
            if aborted:
                _remove_quietly(self.out_path)
                _remove_lock_files_of(self._homedir, proc.pid)
                raise EncryptionFailed("upload aborted")
            if returncode != 0:
                stderr.seek(0)
                text = stderr.read(4096).decode("utf-8", "replace")
                raise EncryptionFailed(
                    f"gpg exited with status {returncode}", disk_full="No space left" in text
                )
        try:
            fd = os.open(self.out_path, os.O_RDONLY)
        except FileNotFoundError:
            raise EncryptionFailed("gpg wrote no output")
        try:
            os.fsync(fd)
            return os.fstat(fd).st_size
        except OSError as e:
            raise EncryptionFailed(f"fsync failed: {e}", disk_full=e.errno == errno.ENOSPC)
        finally:
            os.close(fd)

    def _drained(self, n: int) -> None:
        with self._lock:
            self._buffered -= n
            resume = self._paused and self._buffered <= self._low
            if resume:
                self._paused = False
        if resume:
            self._reactor.callFromThread(self._on_resume)


class _Writeback:
    """Sends gpg's output to disk while it grows and drops it from the page cache.

    Left to the kernel, a large upload's ciphertext piles up as dirty pages: the writer (gpg) is
    throttled once they pass the dirty limit, and the final fsync, which the source waits for
    before being thanked, has to write all of them. Measured here on a 1 GB file: 3.6-8 s of
    writes and a 0.4 s fsync, against 0.7 s and 0.01 s with this. POSIX_FADV_DONTNEED starts the
    writeback without waiting for it (and what is written need not stay cached: nobody reads a
    submission back until a journalist downloads it).
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None
        self._due = _WRITEBACK_EVERY

    def fed(self, plaintext_bytes: int) -> None:
        if plaintext_bytes < self._due:
            return
        self._due = plaintext_bytes + _WRITEBACK_EVERY
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return  # gpg has not created it yet
        try:
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass  # only a hint

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_all(fd: int, buffers: list) -> None:
    """Write the buffers in order with as few system calls as the pipe allows (GIL released)."""
    start = 0
    while start < len(buffers):
        written = os.writev(fd, buffers[start:start + _IOV_MAX])
        while written:
            first = buffers[start]
            if written >= len(first):
                written -= len(first)
                start += 1
            else:
                buffers[start] = memoryview(first)[written:]
                written = 0
        while start < len(buffers) and not len(buffers[start]):
            start += 1


def _remove_lock_files_of(homedir: str, pid: int) -> None:
    """Dot-lock files a dead gpg left behind (``.#lk0x<addr>.<host>.<pid>``): they carry the host
    name and pid and an exact mtime, and one per aborted upload would pile up unbounded."""
    suffix = f".{pid}"
    try:
        names = os.listdir(homedir)
    except OSError:
        return
    for name in names:
        if name.startswith(".#lk") and name.endswith(suffix):
            _remove_quietly(os.path.join(homedir, name))


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
