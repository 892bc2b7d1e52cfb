"""A real SMTP server (aiosmtpd) in a process of its own, for the digest tests.

    python -m tests._smtp_server --dir MAILDIR [--port N] [--cert CERT.pem --key KEY.pem]
        [--mode starttls|tls|inject] [--auth USER:PASSWORD [--auth-mechanism PLAIN|LOGIN]]

Listens on 127.0.0.1 (port 0: the kernel picks; the first line printed is ``PORT n``). With a
certificate it offers STARTTLS and refuses mail before it (``--mode starttls``), or speaks TLS
from the first byte (``tls``, port 465 style), or plays a man in the middle without the
certificate's key (``inject``): it answers STARTTLS with ``220`` and, in the same write, the
replies a client would wait for next (EHLO, MAIL, RCPT, DATA, the message), and never starts
TLS. With ``--auth`` it refuses mail until the client logs in with those credentials (inside
TLS only). Each message accepted becomes ``MAILDIR/N.eml`` (the DATA as received) and
``MAILDIR/N.json`` (envelope, whether TLS was on, the EHLO name, the login), written atomically
so a test never reads half a file.

``SmtpServer`` starts and stops it from a test.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
from typing import Any


class _Saver:
    def __init__(self, maildir: str) -> None:
        self.maildir = maildir
        self.n = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.n += 1
        base = os.path.join(self.maildir, str(self.n))
        tls = session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None
        login = session.login_data.decode() if isinstance(session.login_data, bytes) else session.login_data
        meta = {"mail_from": envelope.mail_from, "rcpt_tos": envelope.rcpt_tos, "tls": tls,
                "helo": session.host_name, "login": login}
        for suffix, data in ((".eml", envelope.original_content or envelope.content),
                             (".json", json.dumps(meta).encode())):
            tmp = base + suffix + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.rename(tmp, base + suffix)
        return "250 OK"


def _injecting_class() -> Any:
    from aiosmtpd.smtp import SMTP

    class Injecting(SMTP):
        async def smtp_STARTTLS(self, arg: str) -> None:
            await self.push("220 Ready to start TLS\r\n250-localhost\r\n250 HELP\r\n250 OK\r\n250 OK\r\n"
                            "354 End data with <CR><LF>.<CR><LF>\r\n250 OK queued")

    return Injecting


def _authenticator(credentials: str) -> Any:
    from aiosmtpd.smtp import AuthResult, LoginPassword

    user, _, password = credentials.partition(":")

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (user.encode(), password.encode())
        return AuthResult(success=ok, handled=False, auth_data=data if ok else None)  # refused: 535

    return authenticate


async def _serve(args: argparse.Namespace) -> None:
    from aiosmtpd.smtp import SMTP

    context = None
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
    saver = _Saver(args.dir)
    implicit = args.mode == "tls"
    kind = _injecting_class() if args.mode == "inject" else SMTP
    auth: dict[str, Any] = {}
    if args.auth:
        excluded = [m for m in ("PLAIN", "LOGIN") if args.auth_mechanism and m != args.auth_mechanism]
        # With implicit TLS aiosmtpd does not know the session is encrypted: it is, from the first byte.
        auth = dict(auth_required=True, auth_require_tls=not implicit, authenticator=_authenticator(args.auth),
                    auth_exclude_mechanism=excluded)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: kind(saver, hostname="localhost", tls_context=None if implicit else context,
                     require_starttls=context is not None and not implicit, **auth),
        "127.0.0.1", args.port, reuse_address=True, ssl=context if implicit else None)
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--mode", choices=("starttls", "tls", "inject"), default="starttls")
    parser.add_argument("--auth", metavar="USER:PASSWORD")
    parser.add_argument("--auth-mechanism", choices=("PLAIN", "LOGIN"))
    asyncio.run(_serve(parser.parse_args()))


class SmtpServer:
    """The server above as a child process: ``start()`` -> port; ``stop()``; ``messages()``."""

    def __init__(self, maildir: str, cert: str | None = None, key: str | None = None, *, mode: str = "starttls",
                 auth: str | None = None, auth_mechanism: str | None = None) -> None:
        self.maildir = maildir
        self.cert, self.key = cert, key
        self.mode, self.auth, self.auth_mechanism = mode, auth, auth_mechanism
        self.port = 0
        self.proc: subprocess.Popen | None = None
        os.makedirs(maildir, exist_ok=True)

    def start(self) -> int:
        argv = [sys.executable, "-m", "tests._smtp_server", "--dir", self.maildir, "--port", str(self.port)]
        if self.cert:
            argv += ["--cert", self.cert, "--key", self.key or "", "--mode", self.mode]
        if self.auth:
            argv += ["--auth", self.auth] + (["--auth-mechanism", self.auth_mechanism] if self.auth_mechanism else [])
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=root)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the SMTP server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self.port

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def messages(self) -> list[tuple[bytes, dict[str, Any]]]:
        found = []
        n = 1
        while os.path.exists(os.path.join(self.maildir, f"{n}.json")):
            with open(os.path.join(self.maildir, f"{n}.eml"), "rb") as f:
                data = f.read()
            with open(os.path.join(self.maildir, f"{n}.json")) as f:
                found.append((data, json.load(f)))
            n += 1
        return found


def throwaway_certificate(directory: str, name: str = "localhost") -> tuple[str, str]:
    """A self-signed certificate for ``name`` and 127.0.0.1: -> (cert PEM path, key PEM path)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, f"{name}-cert.pem"), os.path.join(directory, f"{name}-key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


if __name__ == "__main__":
    main()
