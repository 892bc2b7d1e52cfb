"""The banner ``scripts/demo`` prints: what is where, true for this run, in a box that lines up.

``python -m deaddrop.admin.demo_banner DATA DEMO [twistd deaddrop arguments...]``
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

from deaddrop.admin._tor_commands import NOT_PUBLISHED
from deaddrop.tor.keys import SOURCE, OnionKeyError, read_onion_key, service_dir

WARNING = [
    "DEMO INSTANCE. The submission key ({demo}/svs) and the journalist",
    "CA ({data}/ca) are throwaways on this machine: nothing sent here is",
    "protected. Never give this address to a real source.",
]


def _option(argv: Sequence[str], name: str, default: str) -> str:
    """The last value of ``--name VALUE`` or ``--name=VALUE`` (as twistd reads it)."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _tor_mode(argv: Sequence[str]) -> str:
    return _option(argv, "--tor", "launch")


def _url(scheme: str, endpoint: str) -> str:
    """``tcp:8080:interface=127.0.0.1`` -> ``http://127.0.0.1:8080``; anything else as given."""
    parts = endpoint.split(":")
    if len(parts) >= 2 and parts[0] == "tcp" and parts[1].isdigit():
        host = next((p.split("=", 1)[1] for p in parts[2:] if p.startswith("interface=")), "0.0.0.0")
        return f"{scheme}://{host}:{parts[1]}"
    return endpoint


def _journalist_url(endpoint: str) -> str:
    """The journalist interface by name where it listens on 127.0.0.1: the demo's certificate
    names ``localhost``, and security keys (WebAuthn) refuse a page opened by an IP address."""
    url = _url("https", endpoint)
    return url.replace("https://127.0.0.1:", "https://localhost:", 1)


def _boxed(lines: list[str]) -> list[str]:
    width = max(len(line) for line in lines)
    edge = "*" * (width + 6)
    return [edge] + [f"*  {line.ljust(width)}  *" for line in lines] + [edge]


# Printed before the server starts: whatever an earlier run published, the onion is not reachable
# until this run's Tor has reached the Tor network and published it again.
NOT_YET = [
    "not reachable yet: Tor must first reach the Tor network, which needs Internet",
    "access. The log below says when the onion is published, or why it is not;",
    "without Internet access the demo keeps serving on 127.0.0.1 and Tor keeps trying.",
]


def onion_lines(data_dir: str, argv: Sequence[str]) -> list[str]:
    if _tor_mode(argv) == "none":
        return ["not published (--tor none: this machine serves it on 127.0.0.1 only)"]
    path = os.path.join(data_dir, "source-onion.txt")
    try:
        with open(path) as f:
            address = f.read().strip()
    except OSError:
        address = ""
    if not address:
        # Not published by any run yet, but the address is its key's (tor.onion.key_created).
        try:
            key = read_onion_key(service_dir(data_dir, SOURCE))
        except OnionKeyError:
            key = None
        if key is not None:
            return [f"http://{key.address}/", NOT_PUBLISHED, f"Its key is kept in {data_dir}/tor/. Tor must first",
                    "reach the Tor network, which needs Internet access. The log below says when",
                    "the onion is published, or why it is not; without Internet access the demo",
                    "keeps serving on 127.0.0.1 and Tor keeps trying."]
    if address:
        return [f"http://{address}/ (its key is kept in {data_dir}/tor/)", *NOT_YET]
    return [*NOT_YET, f"Its address is shown there once Tor has published it, then kept in {path}."]


def onion_line(data_dir: str, argv: Sequence[str]) -> str:
    return " ".join(onion_lines(data_dir, argv))


def banner(data_dir: str, demo_dir: str, argv: Sequence[str]) -> str:
    warning = [line.format(demo=demo_dir, data=data_dir) for line in WARNING]
    indent = " " * 24
    onion = onion_lines(data_dir, argv)
    lines = [""] + ["  " + line for line in _boxed(warning)] + [
        f"  Source interface:     {_url('http', _option(argv, '--source-listen', 'tcp:8080:interface=127.0.0.1'))}",
        f"  Source onion:         {onion[0]}",
        *(f"{indent}{line}" for line in onion[1:]),
        f"  Journalist interface: {_journalist_url(_option(argv, '--journalist-listen', 'tcp:8443:interface=127.0.0.1'))}",
        f"{indent}In the browser: import {demo_dir}/demo.p12 as your certificate (password",
        f"{indent}in {demo_dir}/certificate.txt) AND import {data_dir}/ca/ca.pem as an",
        f"{indent}authority trusted to identify websites (without it the browser refuses the",
        f"{indent}server: ERR_CERT_AUTHORITY_INVALID). Log in as \"demo\" with the passphrase",
        f"{indent}and code from {demo_dir}/journalist.txt",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        sys.stderr.write("usage: python -m deaddrop.admin.demo_banner DATA DEMO [twistd arguments...]\n")
        return 2
    # Absolute: scripts/demo runs from the checkout, its user may stand anywhere (deaddrop/scripts/demo).
    sys.stdout.write(banner(os.path.abspath(args[0]), os.path.abspath(args[1]), args[2:]) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
