"""A command run in a terminal of its own, as an admin types it: whatever it asks (a password
prompt through /dev/tty, a question on standard input) is answered by ``answer``, the way a
person at the keyboard would, and nothing is added to its command line."""
from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from dataclasses import dataclass
from typing import Callable

# The last line of what a command printed, when it ends as a question does ("...: ", "...? ").
_PROMPT = re.compile(r"[^\n]*[:?]\s*$")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r(?!\n)")
ROWS, COLUMNS = 40, 160  # a terminal window of a common size: pagers (git's less -F) see all fits
SILENCE = 180  # seconds without output: the command waits for something, or hangs


@dataclass
class Finished:
    status: int
    output: str  # standard output and error as the terminal showed them, "\r\n" made "\n"
    prompts: list[str]  # the questions it asked, in order


class Unanswered(Exception):
    """The command waits for an answer that ``answer`` does not know."""


def run_in_terminal(argv: list[str], cwd: str, env: dict[str, str], answer: Callable[[str], str | None],
                    timeout: float) -> Finished:
    """Run ``argv`` with a new pseudo-terminal as its controlling terminal and its standard
    streams. ``answer(prompt)`` gives the line to type for a prompt (``None``: not a prompt it
    knows; after 20 s of silence that fails as :class:`Unanswered`)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: never returns
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    output, prompts, answered_at = bytearray(), [], 0
    deadline, quiet_since = time.monotonic() + timeout, time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError as e:  # EIO: the child closed the terminal's last end
                    if e.errno != errno.EIO:
                        raise
                    chunk = b""
                if not chunk:
                    break
                output += chunk
                quiet_since = time.monotonic()
                pending = _ESCAPES.sub("", output[answered_at:].decode("utf-8", "replace").replace("\r\n", "\n"))
                prompt = _PROMPT.search(pending.rsplit("\n", 1)[-1]) if pending and not pending.endswith("\n") else None
                if prompt:
                    reply = answer(prompt.group(0).strip())
                    if reply is not None:
                        prompts.append(prompt.group(0).strip())
                        os.write(fd, reply.encode() + b"\n")
                        answered_at = len(output)
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"still running after {timeout:.0f} s")
            if not ready and now - quiet_since > 20 and output[answered_at:].strip():
                last = output[answered_at:].decode("utf-8", "replace").rstrip("\r\n").rsplit("\n", 1)[-1]
                if _PROMPT.search(last):
                    raise Unanswered(f"it waits for an answer to {last.strip()!r}")
            if not ready and now - quiet_since > SILENCE:
                last = output.decode("utf-8", "replace").rstrip().rsplit("\n", 1)[-1]
                raise Unanswered(f"nothing for {SILENCE} s after {last.strip()!r}: it waits for something")
        # Before the terminal closes: closing it hangs up on a child still on its way out.
        _, status = os.waitpid(pid, 0)
    except BaseException:
        _kill(pid)
        raise
    finally:
        os.close(fd)
    text = _ESCAPES.sub("", output.decode("utf-8", "replace").replace("\r\n", "\n"))
    return Finished(os.waitstatus_to_exitcode(status), text, prompts)


def _kill(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)  # the child leads a session of its own (pty.fork)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
