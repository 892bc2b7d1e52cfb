"""Validation of the ``--tor``, ``--tor-option`` and listener settings (pure functions)."""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Callable

_OPTION_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

# torrc keys DeadDrop sets itself (or that would publish something it does not manage).
# Compared case-insensitively, as Tor does.
MANAGED_OPTIONS = frozenset(
    k.lower()
    for k in (
        "DataDirectory",
        "ControlPort",
        "ControlSocket",
        "ControlPortWriteToFile",
        "CookieAuthentication",
        "CookieAuthFile",
        "CookieAuthFileGroupReadable",
        "HashedControlPassword",
        "RunAsDaemon",
        "PidFile",
        "HiddenServiceDir",
        "HiddenServicePort",
        "HiddenServiceVersion",
        "HiddenServiceAuthorizeClient",
    )
)


@dataclass(frozen=True)
class ControlEndpoint:
    """Where an already running Tor's control port is: ``kind`` is "unix" or "tcp"."""

    kind: str
    path: str | None = None
    host: str | None = None
    port: int | None = None

    def describe(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"tcp:{host}:{self.port}"


def parse_tor_mode(value: str) -> str:
    """Validate ``--tor``: ``launch``, ``none`` or ``control:ENDPOINT``; returns it normalised.

    ENDPOINT is ``unix:/abs/path`` (or just ``/abs/path``) or ``tcp:HOST:PORT`` (or ``HOST:PORT``
    or just ``PORT``, meaning 127.0.0.1). The control port must be on this machine: the control
    protocol is not encrypted and grants full control of that Tor.
    Raises ValueError with a message fit to show the operator.
    """
    if not isinstance(value, str):
        raise ValueError("--tor must be 'launch', 'none' or 'control:ENDPOINT'")
    text = value.strip()
    if text in ("launch", "none"):
        return text
    if text.startswith("control:"):
        return "control:" + parse_control_endpoint(text[len("control:") :]).describe()
    raise ValueError(
        f"--tor {value!r}: expected 'launch', 'none' or 'control:ENDPOINT' "
        "(e.g. control:unix:/run/tor/control or control:tcp:127.0.0.1:9051)"
    )


def parse_control_endpoint(text: str) -> ControlEndpoint:
    where = f"--tor control:{text}"
    if not text:
        raise ValueError(f"{where}: the control endpoint is missing (e.g. control:unix:/run/tor/control)")
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if path.startswith("path="):
            path = path[len("path=") :]
        return _unix_endpoint(where, path)
    if text.startswith("/"):
        return _unix_endpoint(where, text)
    if text.startswith("tcp:"):
        text = text[len("tcp:") :]
    host, port_text = "127.0.0.1", text
    if not text.isdigit():
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{where}: expected unix:/PATH, tcp:HOST:PORT or PORT")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
    port = _parse_port(where, port_text)
    if not _is_loopback_host(host):
        raise ValueError(
            f"{where}: the control port must be on this machine (127.0.0.1, ::1 or localhost); "
            "the Tor control protocol is not encrypted"
        )
    return ControlEndpoint("tcp", host=host, port=port)


def _unix_endpoint(where: str, path: str) -> ControlEndpoint:
    if not path.startswith("/"):
        raise ValueError(f"{where}: the control socket path must be absolute")
    return ControlEndpoint("unix", path=os.path.normpath(path))


def _parse_port(where: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{where}: {text!r} is not a port number (1-65535)")
    return int(text)


def _is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_loopback


def parse_tor_option(value: str) -> tuple[str, str]:
    """Validate one ``--tor-option KEY=VALUE``; returns ``(KEY, VALUE)``. Raises ValueError."""
    key, sep, option_value = value.partition("=")
    key, option_value = key.strip(), option_value.strip()
    if not sep:
        raise ValueError(f"--tor-option {value!r}: expected KEY=VALUE (e.g. --tor-option ConnectionPadding=1)")
    return check_tor_option(key, option_value)


def check_tor_option(key: str, value: str) -> tuple[str, str]:
    if not _OPTION_KEY_RE.match(key):
        raise ValueError(f"--tor-option {key!r}: not a torrc option name")
    if key.lower() in MANAGED_OPTIONS:
        raise ValueError(f"--tor-option {key}: DeadDrop sets this itself; it cannot be overridden")
    if key.lower().startswith("hiddenservice"):
        # HiddenServiceNonAnonymousMode/SingleHopMode would make the onions non-anonymous.
        raise ValueError(f"--tor-option {key}: DeadDrop manages its onion services; HiddenService* options are refused")
    if any(c in value for c in "\r\n\x00#"):
        raise ValueError(f"--tor-option {key}: the value may not contain a newline, NUL or '#'")
    if not value:
        raise ValueError(f"--tor-option {key}: the value is empty")
    return key, value


def check_tor_options(options) -> list[tuple[str, str]]:
    checked = []
    for item in options or ():
        if isinstance(item, str):
            checked.append(parse_tor_option(item))
        else:
            key, value = item
            checked.append(check_tor_option(str(key).strip(), str(value).strip()))
    return checked


def normalise_target(value: str) -> str:
    """A ``Port=80,TARGET`` target: ``IP:PORT`` on loopback, or ``unix:/abs/path``.

    Raises ValueError: an onion service must never forward to a public interface.
    """
    text = value.strip()
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path.startswith("/") or any(c in path for c in ' "\\\r\n'):
            raise ValueError(f"onion target {value!r}: expected unix:/absolute/path without spaces or quotes")
        return text
    if text.startswith("tcp:"):
        text = text[len("tcp:") :]
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"onion target {value!r}: expected 127.0.0.1:PORT")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"onion target {value!r}: the host must be a loopback IP address") from None
    if not address.is_loopback:
        raise ValueError(f"onion target {value!r}: the onion service must map to a loopback address")
    if address.version == 6:
        return f"[{address}]:{int(port_text)}"
    return f"{address}:{int(port_text)}"


def resolve_target(value: str | Callable[[], str] | None, which: str) -> str:
    """An onion target given as a string or a zero-argument callable (a listener's port is
    known only once it listens), normalised; ValueError with a line for the operator."""
    if callable(value):
        try:
            value = value()
        except Exception as e:
            raise ValueError(f"the {which} listener's address is not known: {type(e).__name__}: {e}") from None
    if not isinstance(value, str):
        raise ValueError(f"the {which} onion target must be a string like 127.0.0.1:PORT, not {value!r}")
    return normalise_target(value)


# -- server endpoint strings ------------------------------------------------------------------

# Positional arguments of Twisted's server endpoint parsers, after the type.
_POSITIONAL = {
    "tcp": ("port", "interface", "backlog"),
    "tcp6": ("port", "interface", "backlog"),
    "ssl": ("port", "privateKey", "certKey", "sslmethod", "interface", "backlog"),
}


def _split_escaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    out, escaped = [], False
    for ch in text:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append(ch)
    return "".join(out)


def is_loopback_endpoint(description: str) -> bool:
    """True if a Twisted *server* endpoint string listens on loopback only.

    ``tcp:8080:interface=127.0.0.1``, ``tcp6:8080:interface=\\:\\:1``, ``ssl:...:interface=...``
    with a loopback interface (or ``localhost``), and ``unix:/path`` are loopback; a missing
    interface (all interfaces), any other address and any other endpoint type (``systemd:``,
    ``onion:``...) are not: when in doubt, False.
    """
    if not isinstance(description, str) or not description.strip():
        return False
    parts = _split_escaped(description.strip(), ":")
    kind = _unescape(parts[0]).lower()
    if kind == "unix":
        return len(parts) > 1 and bool(_unescape(parts[1]))
    names = _POSITIONAL.get(kind)
    if names is None:
        return False
    args: dict[str, str] = {}
    positional = 0
    for part in parts[1:]:
        pieces = _split_escaped(part, "=")
        if len(pieces) > 1:
            args[_unescape(pieces[0])] = _unescape("=".join(pieces[1:]))
        else:
            if positional < len(names):
                args.setdefault(names[positional], _unescape(part))
            positional += 1
    interface = args.get("interface", "")
    if not interface:
        return False
    return _is_loopback_host(interface)
