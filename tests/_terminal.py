"""A command run at a terminal of its own (a pseudo-terminal, its controlling tty), so a test can
answer its prompts as a person would: ``getpass`` reads from it with echo off."""
from __future__ import annotations

import os
from typing import Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol


class Terminal(ProcessProtocol):
    """``Terminal.run(argv)`` starts it; ``expect`` waits for text on the screen, ``type`` answers."""

    def __init__(self) -> None:
        self.screen = ""  # everything written to the terminal so far
        self._seen = 0  # where the next ``expect`` starts looking
        self._waiting: tuple[str, Deferred] | None = None
        self.ended: Deferred = Deferred()  # fires with the exit status

    @classmethod
    def run(cls, argv: Sequence[str], env: dict[str, str] | None = None) -> "Terminal":
        terminal = cls()
        reactor.spawnProcess(terminal, argv[0], list(argv), env=dict(os.environ if env is None else env),
                             usePTY=True)
        return terminal

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        self.screen += data.decode("utf-8", "replace").replace("\r\n", "\n")
        self._check()

    def _check(self) -> None:
        if self._waiting is None:
            return
        text, d = self._waiting
        at = self.screen.find(text, self._seen)
        if at >= 0:
            self._waiting = None
            self._seen = at + len(text)
            d.callback(self.screen)

    def expect(self, text: str, timeout: float = 30.0) -> Deferred:
        """Fires once ``text`` appears after what the last ``expect`` matched; fails on timeout."""
        d: Deferred = Deferred()
        self._waiting = (text, d)
        self._check()
        if not d.called:
            def too_late() -> None:
                if not d.called:
                    self._waiting = None
                    d.errback(AssertionError(f"{text!r} never appeared; the terminal shows:\n{self.screen}"))
            call = reactor.callLater(timeout, too_late)
            d.addBoth(lambda result: (call.cancel() if call.active() else None, result)[1])
        return d

    def type(self, line: str) -> None:
        self.transport.write(line.encode("utf-8") + b"\n")

    def processEnded(self, reason) -> None:
        self.ended.callback(reason.value.exitCode)
