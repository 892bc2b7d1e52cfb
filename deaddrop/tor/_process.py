"""Running the ``tor`` binary: the torrc we write, the child process and what it prints."""
from __future__ import annotations

import collections
import os
import re
import shutil
import signal
from typing import Callable

from twisted.internet import error as ierror
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger

from deaddrop.durable import write_atomically

_log = Logger(namespace="deaddrop.tor.process")

# sockaddr_un.sun_path is 108 bytes with the NUL; stay clear of it.
MAX_UNIX_SOCKET_PATH = 100
_UNSAFE_PATH_CHARS = set('"\\#\r\n\x00')
_LOG_LINE_RE = re.compile(r"\[(debug|info|notice|warn|err)\]\s*(.*)$")
# What varies between lines of one kind: onion addresses, relay fingerprints and nicknames, hex
# ids, addresses, numbers (circuit ids, counts, seconds). A kind keeps Tor's words only.
_VARYING = [
    (re.compile(r"\b[a-z2-7]{56}(?:\.onion)?\b", re.IGNORECASE), "<onion>"),
    (re.compile(r"\$[0-9A-F]{40}(?:[~=][A-Za-z0-9]{1,19})?", re.IGNORECASE), "<relay>"),
    (re.compile(r"\b[0-9A-F]{16,}\b", re.IGNORECASE), "<hex>"),
    (re.compile(r"\[[0-9a-f:.]*:[0-9a-f:.]*\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?", re.IGNORECASE),
     "<address>"),
    (re.compile(r"'[^']{0,200}'|\"[^\"]{0,200}\""), "<quoted>"),
    (re.compile(r"\d+"), "#"),
]
_MAX_KIND_CHARS = 200


def line_kind(message: str) -> str:
    """A Tor log line with what varies taken out: "Giving up on launching a rendezvous circuit to
    <relay> for v# service <onion>". Counted per day, it says what Tor complained of, and how
    often, without any circuit, relay or moment."""
    for pattern, placeholder in _VARYING:
        message = pattern.sub(placeholder, message)
    return " ".join(message.split())[:_MAX_KIND_CHARS]


class TorStartError(Exception):
    """Tor could not be started; ``str()`` is one line for the operator."""

    def __init__(self, message: str, reason: str = "start_failed") -> None:
        super().__init__(message)
        self.reason = reason


def find_tor_binary(tor_binary: str | None) -> str:
    """The executable to run, or TorStartError with a clear message."""
    if tor_binary is None:
        found = shutil.which("tor") or next(
            (p for p in ("/usr/sbin/tor", "/usr/bin/tor", "/usr/local/bin/tor") if os.access(p, os.X_OK)), None
        )
        if found is None:
            raise TorStartError(
                "Tor binary not found: install the 'tor' package or pass --tor-binary PATH", "binary_missing"
            )
        return found
    path = tor_binary if os.sep in tor_binary else shutil.which(tor_binary)
    if path is None or not os.path.isfile(path):
        raise TorStartError(f"Tor binary not found: {tor_binary} (check --tor-binary)", "binary_missing")
    if not os.access(path, os.X_OK):
        raise TorStartError(f"Tor binary is not executable: {path} (check --tor-binary)", "binary_missing")
    return os.path.abspath(path)


class TorFiles:
    """Paths of one launched Tor under ``DATA/tor``."""

    def __init__(self, tor_dir: str) -> None:
        self.tor_dir = os.path.abspath(tor_dir)
        if any(c in _UNSAFE_PATH_CHARS for c in self.tor_dir):
            raise TorStartError(f"the data directory path {self.tor_dir!r} contains a quote, '#', '\\' or newline")
        self.torrc = os.path.join(self.tor_dir, "torrc")
        self.control_socket = os.path.join(self.tor_dir, "control.sock")
        self.control_port_file = os.path.join(self.tor_dir, "control-port.txt")
        self.pid_file = os.path.join(self.tor_dir, "tor.pid")
        self.use_unix_socket = len(self.control_socket.encode()) <= MAX_UNIX_SOCKET_PATH


def torrc_text(
    files: TorFiles, tor_options: list[tuple[str, str]], owner_pid: int, services: list[str] | None = None
) -> str:
    user_keys = {k.lower() for k, _ in tor_options}
    lines = [
        "# Written by DeadDrop at every launch: edits are lost. Use --tor-option KEY=VALUE.",
        f"DataDirectory {files.tor_dir}",
    ]
    if files.use_unix_socket:
        lines.append(f'ControlPort unix:"{files.control_socket}"')
    else:
        # The socket path would be too long for sockaddr_un: loopback TCP on a port Tor picks
        # and writes to a file (no race); the cookie still guards it.
        lines.append("ControlPort 127.0.0.1:auto")
        lines.append(f"ControlPortWriteToFile {files.control_port_file}")
    lines += [
        "CookieAuthentication 1",
        # Tor exits by itself if this process dies without closing the control connection.
        f"__OwningControllerProcess {owner_pid}",
        f"PidFile {files.pid_file}",
        # Launch needs the notices on stdout (control listener, errors); keep it whatever else.
        "Log notice stdout",
    ]
    if "socksport" not in user_keys:
        lines.append("SocksPort 0")
    if tor_options:
        lines.append("# --tor-option")
        lines += [f"{k} {v}" for k, v in tor_options]
    if services:
        # Last: every HiddenService* line belongs to the HiddenServiceDir above it.
        lines.append("# onion services (torrc, not ADD_ONION: circuit ids, and no SETCONF ever resets PoW)")
        lines += services
    return "\n".join(lines) + "\n"


def write_torrc(
    files: TorFiles, tor_options: list[tuple[str, str]], owner_pid: int, services: list[str] | None = None
) -> None:
    text = torrc_text(files, tor_options, owner_pid, services)
    write_atomically(files.torrc, text.encode("utf-8"), 0o600, durable=False)


def tor_args(binary: str, files: TorFiles) -> list[str]:
    # A defaults torrc that does not exist: nothing from /etc/tor leaks into our Tor.
    return [binary, "-f", files.torrc, "--defaults-torrc", os.path.join(files.tor_dir, "torrc-defaults.none")]


def remove_stale_files(files: TorFiles) -> None:
    for path in (files.control_socket, files.control_port_file):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def stale_tor_pid(files: TorFiles) -> int | None:
    """PID of a Tor still running on this torrc (left over by a crash), if any."""
    try:
        with open(files.pid_file) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    if files.torrc.encode() in cmdline and pid != os.getpid():
        return pid
    return None


def tor_owner_pid(files: TorFiles, tor_pid: int) -> int | None:
    """The server that launched the running Tor ``tor_pid``, if that server is still running.

    That is the ``__OwningControllerProcess`` of the torrc on disk (read before it is
    rewritten) if it is still Tor's parent: a Tor whose server died has been reparented. A live
    owner other than us means another server uses this data directory, not a crash.
    """
    try:
        with open(files.torrc) as f:
            match = re.search(r"^__OwningControllerProcess (\d+)\s*$", f.read(), re.M)
        with open(f"/proc/{tor_pid}/stat", "rb") as f:
            parent = int(f.read().rsplit(b")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
    if match is None or int(match.group(1)) != parent:
        return None
    return parent


def read_control_port_file(files: TorFiles) -> tuple[str, int] | None:
    try:
        with open(files.control_port_file) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    match = re.search(r"PORT=([0-9.]+):(\d+)", text)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


class TorProcessProtocol(ProcessProtocol):
    """Watches one Tor child: its log lines, when its control listener is up, how it ended."""

    def __init__(
        self,
        on_control_listener: Callable[[], None],
        on_ended: Callable[[str, str | None], None],
        on_line: Callable[[str, str], None] | None = None,
        count_line: Callable[[str, str], None] | None = None,
        fold_line: Callable[[str], bool] | None = None,
    ) -> None:
        """``count_line(level, kind)`` hears of each line Tor prints once bootstrapped, instead
        of the log (see ``_line``); None: those lines are kept in memory only (``lines``).
        ``fold_line(message)`` is asked about each [warn] before bootstrap: True, it was counted
        instead of logged (Tor repeating a bootstrap problem that was already explained)."""
        self._on_control_listener = on_control_listener
        self._on_ended = on_ended
        self._on_line = on_line
        self._count_line = count_line
        self._fold_line = fold_line
        # Bootstrapped: from here on Tor serves the onion, and what it says may be about a visitor.
        self.bootstrapped = False
        self._buffer = b""
        self._saw_listener = False
        self.lines: collections.deque[tuple[str, str]] = collections.deque(maxlen=200)
        self.ended = False
        self.exit_reason: str | None = None
        self._exit_waiters: list = []

    @property
    def saw_listener(self) -> bool:
        """Tor opened its control port: it accepted its configuration and was running."""
        return self._saw_listener

    @property
    def pid(self) -> int | None:
        return getattr(self.transport, "pid", None)

    def outReceived(self, data: bytes) -> None:
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for raw in complete:
            self._line(raw.decode("utf-8", "replace").rstrip("\r"))

    def errReceived(self, data: bytes) -> None:
        for raw in data.split(b"\n"):
            text = raw.decode("utf-8", "replace").strip()
            if text:
                self.lines.append(("err", text))
                _log.warn("tor stderr: {line}", line=text)

    def _line(self, text: str) -> None:
        match = _LOG_LINE_RE.search(text)
        level, message = (match.group(1), match.group(2).strip()) if match else ("notice", text.strip())
        if not message:
            return
        self.lines.append((level, message))
        if self.bootstrapped and level != "err":
            # Once the onion is up, a line of Tor's may be about a visitor: a rendezvous that
            # failed, a circuit over its stream limit, the heartbeat's count of introductions.
            # Written now, it would date a source's visit (twistd's log has the second). So it is
            # counted per day by its kind, for the day's report (tor.log.daily); what Tor's
            # health needs at once comes from the supervision's own events (exited, restart,
            # republish), and an [err] (Tor about to stop) is still written when it happens.
            if self._count_line is not None:
                self._count_line(level, line_kind(message))
        elif level == "warn" and self._fold_line is not None and self._fold_line(message):
            pass
        elif level in ("warn", "err"):
            _log.warn("tor: [{tor_level}] {tor_says}", tor_level=level, tor_says=message)
        else:
            _log.debug("tor: [{tor_level}] {tor_says}", tor_level=level, tor_says=message)
        if message.startswith("Bootstrapped 100%"):
            self.bootstrapped = True
        if self._on_line is not None:
            self._on_line(level, message)
        if not self._saw_listener and message.startswith("Opened Control listener"):
            self._saw_listener = True
            self._on_control_listener()

    def processEnded(self, reason) -> None:
        if self._buffer:
            self._line(self._buffer.decode("utf-8", "replace"))
            self._buffer = b""
        self.ended = True
        value = reason.value
        if getattr(value, "signal", None):
            exit_reason = f"signal_{value.signal}"
        else:
            exit_reason = f"exit_{getattr(value, 'exitCode', None) or 0}"
        self.exit_reason = exit_reason
        waiters, self._exit_waiters = self._exit_waiters, []
        self._on_ended(exit_reason, self.error_summary())
        for d in waiters:
            d.callback(exit_reason)

    def when_ended(self):
        from twisted.internet.defer import Deferred, succeed

        if self.ended:
            return succeed(self.exit_reason)
        d: Deferred[str | None] = Deferred()
        self._exit_waiters.append(d)
        return d

    def signal(self, name: str) -> None:
        if self.ended or self.transport is None:
            return
        try:
            self.transport.signalProcess(name)
        except (ierror.ProcessExitedAlready, OSError):
            pass

    def error_summary(self) -> str | None:
        """The line that best explains why Tor stopped, from what it printed."""
        lines = list(self.lines)
        for i, (level, message) in enumerate(lines):
            if level == "err" and "see warnings above" in message.lower():
                warns = [m for lvl, m in lines[:i] if lvl == "warn"]
                if warns:
                    last = warns[-1]
                    if "see logs for details" in last.lower() and len(warns) > 1:
                        return f"{warns[-2]} {last}"
                    return last
        errs = [m for lvl, m in lines if lvl == "err"]
        if errs:
            return errs[-1]
        return None


def describe_exit(reason: str | None) -> str:
    if reason is None:
        return "ended"
    kind, _, value = reason.partition("_")
    if kind == "signal":
        try:
            name = signal.Signals(int(value)).name
        except ValueError:
            name = value
        return f"killed by {name}"
    return f"exit status {value}"
