"""Control-protocol pieces: connecting, the commands we send, parsing what Tor answers."""
from __future__ import annotations

import shlex

from twisted.internet.defer import inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, UNIXClientEndpoint
from txtorcon import TorProtocolFactory

from deaddrop.tor._config import ControlEndpoint
from deaddrop.tor.keys import OnionKey


def client_endpoint(reactor, endpoint: ControlEndpoint):
    if endpoint.kind == "unix":
        return UNIXClientEndpoint(reactor, endpoint.path, timeout=10)
    if endpoint.host and ":" in endpoint.host:
        return TCP6ClientEndpoint(reactor, endpoint.host, endpoint.port, timeout=10)
    host = "127.0.0.1" if endpoint.host in (None, "localhost") else endpoint.host
    assert endpoint.port is not None  # (a tcp endpoint has its port: _config parses both)
    return TCP4ClientEndpoint(reactor, host, endpoint.port, timeout=10)


@inlineCallbacks
def connect_control(reactor, endpoint: ControlEndpoint):
    """A ``txtorcon.TorControlProtocol``, authenticated (cookie, SAFECOOKIE or none) and ready."""
    proto = yield client_endpoint(reactor, endpoint).connect(TorProtocolFactory())
    try:
        yield proto.post_bootstrap
    except Exception:
        if proto.transport is not None:
            proto.transport.loseConnection()
        raise
    return proto


def add_onion_command(
    key: OnionKey,
    target: str,
    client_public_keys: list[str] | None = None,
    virtual_port: int = 80,
    extra: list[str] | None = None,
) -> str:
    """``ADD_ONION`` for a v3 service whose ``virtual_port`` (80) maps to ``target``.

    With client keys (base32 x25519 public keys) the service requires v3 client authorisation
    (``Flags=V3Auth`` plus one ``ClientAuthV3=`` per client). Not ``Detach``: the onion goes
    away with our control connection, so a Tor we merely attach to is left clean.
    """
    parts = ["ADD_ONION", key.control_blob()]
    if client_public_keys:
        parts.append("Flags=V3Auth")
    parts += extra or ()  # keywords such as PoWDefensesEnabled=1 (Tor accepts several Flags=)
    parts.append(f"Port={int(virtual_port)},{target}")
    for public in sorted(client_public_keys or ()):
        parts.append(f"ClientAuthV3={public}")
    return " ".join(parts)


def redact(command: str) -> str:
    """A command fit for logs: no key material."""
    return " ".join("ED25519-V3:<secret>" if p.startswith("ED25519-V3:") else p for p in command.split(" "))


def parse_keywords(reply: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in reply.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            found.setdefault(key, value)
    return found


def parse_bootstrap(text: str) -> dict | None:
    """From ``status/bootstrap-phase`` or a STATUS_CLIENT event: progress, tag, summary, warning."""
    if "=" in text.split(" ", 1)[0]:  # "status/bootstrap-phase=NOTICE BOOTSTRAP ..."
        text = text.split("=", 1)[1]
    try:
        words = shlex.split(text.strip())
    except ValueError:
        return None
    if len(words) < 2 or words[1] != "BOOTSTRAP":
        return None
    kw = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    try:
        progress = int(kw.get("PROGRESS", ""))
    except ValueError:
        return None
    return {
        "severity": words[0],
        "progress": progress,
        "tag": kw.get("TAG", ""),
        "summary": kw.get("SUMMARY", ""),
        "warning": kw.get("WARNING"),
        "reason": kw.get("REASON"),
    }


def parse_hs_desc(text: str) -> dict | None:
    """``UPLOAD|UPLOADED|FAILED|... <address> <auth> <hsdir> ... [REASON=...]``."""
    words = text.split()
    if len(words) < 2:
        return None
    kw = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    return {"action": words[0], "address": words[1], "reason": kw.get("REASON")}
