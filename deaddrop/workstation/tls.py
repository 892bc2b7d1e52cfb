"""Mutual TLS for the workstation: our client certificate, and trust only the newsroom's server."""
from __future__ import annotations

import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from twisted.internet import ssl
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer


class ClientTLSError(Exception):
    pass


class WrongCertificatePassword(ClientTLSError):
    """The bundle or key needs a password, and the one given (or none) does not open it."""


def load_client_certificate(cert_path: str, key_path: str | None = None, password: bytes | None = None) -> ssl.PrivateCertificate:
    """A PKCS#12 bundle (``NAME.p12``) or a PEM certificate plus its PEM key."""
    try:
        with open(cert_path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ClientTLSError(f"cannot read client certificate {cert_path}: {e.strerror}")
    if cert_path.endswith((".p12", ".pfx")):
        try:
            key, cert, _extra = pkcs12.load_key_and_certificates(data, password)
        except ValueError:
            raise WrongCertificatePassword(f"cannot open {cert_path}: wrong password or not PKCS#12")
        if key is None or cert is None:
            raise ClientTLSError(f"{cert_path} holds no client certificate and key")
        pem = cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    else:
        key_path = key_path or _guess_key_path(cert_path)
        try:
            with open(key_path, "rb") as f:
                key_pem = f.read()
        except OSError as e:
            raise ClientTLSError(f"cannot read client key {key_path}: {e.strerror} (use --key)")
        if b"ENCRYPTED" in key_pem:
            # `cert issue --pem` encrypts the key with the .p12's password.
            try:
                key_pem = serialization.load_pem_private_key(key_pem, password).private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            except (TypeError, ValueError):
                raise WrongCertificatePassword(f"cannot open {key_path}: wrong password")
        pem = data + b"\n" + key_pem
    try:
        return ssl.PrivateCertificate.loadPEM(pem)
    except Exception:
        raise ClientTLSError(f"{cert_path} does not hold a usable certificate and key")


def _guess_key_path(cert_path: str) -> str:
    if cert_path.endswith(".cert.pem"):
        return cert_path[: -len(".cert.pem")] + ".key.pem"
    return os.path.splitext(cert_path)[0] + ".key.pem"


def load_trust_root(ca_path: str) -> ssl.Certificate:
    try:
        with open(ca_path, "rb") as f:
            return ssl.Certificate.loadPEM(f.read())
    except OSError as e:
        raise ClientTLSError(f"cannot read {ca_path}: {e.strerror}")
    except Exception:
        raise ClientTLSError(f"{ca_path} is not a PEM certificate")


@implementer(IPolicyForHTTPS)
class NewsroomTLSPolicy:
    """Verifies the server against ``--ca`` only, and presents the journalist's certificate."""

    def __init__(self, trust_root: ssl.Certificate, client: ssl.PrivateCertificate) -> None:
        self._trust_root = trust_root
        self._client = client

    def creatorForNetloc(self, hostname: bytes, port: int):
        return ssl.optionsForClientTLS(
            hostname.decode("ascii"), trustRoot=self._trust_root, clientCertificate=self._client,
        )


