"""An offline certificate authority for journalist client certificates.

The CA key is meant to live on an offline machine (or, for a demo, in ``DATA_DIR/ca``); the
server only ever needs ``ca.pem`` and a CRL. Layout of a CA directory (0700):

* ``ca.key``     the CA private key (0600, PEM PKCS#8)
* ``ca.pem``     the CA certificate, copied to the server
* ``crl.pem``    an initial, empty CRL written by ``init_ca`` so a server configured with a CRL
                 path has one from day one (``write_crl`` writes later ones wherever asked)
* ``state.json`` every certificate ever issued: name, serial, expiry, revoked flag and date

Serial numbers are lower-case hex strings everywhere (state, command output, security
events) so an admin can match a refused-certificate event to an issued certificate.
"""
from __future__ import annotations

import datetime
import fcntl
import ipaddress
import json
import os
import re
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deaddrop.newsroom.codenames import codename_words
from deaddrop.durable import write_atomically

ALGORITHMS = ("p256", "ed25519")
CA_KEY, CA_CERT, CA_CRL, STATE = "ca.key", "ca.pem", "crl.pem", "state.json"
CA_DAYS = 3650
# The journalist listener's certificate: Mozilla's "modern" profile allows 90 days; browsers take
# no more than 397 from any CA. ``deaddrop-admin status`` warns 30 days before the end.
SERVER_DAYS, SERVER_MAX_DAYS = 90, 397
# Backdate notBefore / lastUpdate: the offline machine's clock may run ahead of the server's,
# and a CRL that is "not yet valid" makes OpenSSL refuse every journalist.
CLOCK_SKEW = datetime.timedelta(minutes=5)
# Names end up in file names and in the certificate CN: keep them boring.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PASSWORD_WORDS = 7  # from a 7776-word list: ~90 bits, the .p12 may be attacked offline

CAKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class CAError(Exception):
    """A clear, one-line, expected failure of the CA (missing CA, duplicate name, bad path...)."""


def init_ca(ca_dir: str, algorithm: str = "p256") -> dict[str, Any]:
    """Create a new CA in ``ca_dir``; refuses to overwrite an existing one."""
    if algorithm not in ALGORITHMS:
        raise CAError(f"unknown algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")
    _make_private_dir(ca_dir)
    with _locked(ca_dir):
        existing = [f for f in (CA_KEY, CA_CERT, STATE) if os.path.exists(os.path.join(ca_dir, f))]
        if existing:
            raise CAError(f"a CA already exists in {ca_dir} ({', '.join(existing)}): "
                             "refusing to overwrite it")
        key: CAKey
        key = ec.generate_private_key(ec.SECP256R1()) if algorithm == "p256" else ed25519.Ed25519PrivateKey.generate()
        now = _now()
        # A unique name per CA: OpenSSL finds issuers and CRLs by name, so two instances' CAs
        # must never look alike (and admins can tell them apart).
        cn = f"DeadDrop journalist CA {secrets.token_hex(4)}"
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "DeadDrop"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            # path_length=0: this CA signs journalists only, never another CA.
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, _hash_for(key))
        )
        state = {"version": 1, "algorithm": algorithm, "crl_number": 1, "certs": []}
        crl = _build_crl(key, cert, [], 1, 30)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        # Key first: a crash before ca.pem/state.json leaves a directory init refuses to reuse,
        # rather than a certificate whose key was never stored.
        _write(os.path.join(ca_dir, CA_KEY), key_pem, 0o600)
        _write(os.path.join(ca_dir, CA_CERT), cert.public_bytes(serialization.Encoding.PEM), 0o644)
        _write(os.path.join(ca_dir, CA_CRL), crl.public_bytes(serialization.Encoding.PEM), 0o644)
        _save_state(ca_dir, state)
    return {
        "ca_dir": ca_dir,
        "algorithm": algorithm,
        "ca_cert": os.path.join(ca_dir, CA_CERT),
        "crl": os.path.join(ca_dir, CA_CRL),
        "serial": _hex(cert.serial_number),
        "not_after": _iso(cert.not_valid_after_utc),
    }


def issue_client_cert(ca_dir: str, name: str, out_p12: str, password: bytes | None,
                      days: int = 365, pem: bool = False) -> dict[str, Any]:
    """Issue a clientAuth certificate as ``out_p12`` (key, certificate and the CA certificate).

    With ``pem``, also ``STEM.key.pem`` (encrypted with the same password) and ``STEM.cert.pem``
    beside it, where STEM is ``out_p12`` without its extension. ``files`` lists every file written.
    """
    if not _NAME_RE.fullmatch(name):
        raise CAError(f"invalid name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if days < 1:
        raise CAError("--days must be at least 1")
    if password is not None and not password:
        raise CAError("the password is empty")
    ca_key, ca_cert = _load_ca(ca_dir)
    _check_out_dir(out_p12)
    stem = _stem(out_p12, (".p12", ".pfx"))
    key_path, cert_path = f"{stem}.key.pem", f"{stem}.cert.pem"
    generated = password is None
    if password is None:
        password = generate_password().encode("ascii")
    files = [out_p12, key_path, cert_path] if pem else [out_p12]
    with _locked(ca_dir):
        state = _load_state(ca_dir)
        now = _now()
        if any(e["name"] == name and _active(e, now) for e in state["certs"]):
            raise CAError(f"{name} already has an active certificate: revoke it first")
        _refuse_existing(files)
        # Browsers only reliably support ECDSA P-256 client keys, whatever the CA's algorithm.
        key = ec.generate_private_key(ec.SECP256R1())
        not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
        cert = make_client_certificate(ca_key, ca_cert, name, key.public_key(), now - CLOCK_SKEW, not_after)
        entry = {"name": name, "serial": _hex(cert.serial_number), "issued_at": _iso(now),
                 "not_after": _iso(not_after), "revoked": False, "revoked_at": None}
        # The CA rides along: importing the .p12 also brings the newsroom CA, which the
        # journalist then trusts for the server's certificate (same CA, see issue_server_cert).
        p12 = pkcs12.serialize_key_and_certificates(
            name.encode("utf-8"), key, cert, [ca_cert], serialization.BestAvailableEncryption(password)
        )
        contents = {out_p12: (p12, 0o600)}
        if pem:
            # Never an unprotected key on disk: the PEM key carries the .p12's password.
            contents[key_path] = (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.BestAvailableEncryption(password)), 0o600)
            contents[cert_path] = (cert.public_bytes(serialization.Encoding.PEM), 0o644)
        # Record the serial before handing the certificate out: a certificate missing from
        # the state could never be revoked by name.
        state["certs"].append(entry)
        _save_state(ca_dir, state)
        try:
            for path, (data, mode) in contents.items():
                _write(path, data, mode)
        except CAError:
            state["certs"].remove(entry)
            _save_state(ca_dir, state)
            for path in files:
                _remove_quietly(path)
            raise
    result: dict[str, Any] = dict(entry, p12=out_p12, files=files, password_generated=generated)
    if pem:
        result.update(key_pem=key_path, cert_pem=cert_path)
    if generated:
        result["password"] = password.decode("ascii")
    return result


def issue_server_cert(ca_dir: str, hosts: list[str], out_cert: str, days: int = SERVER_DAYS) -> dict[str, Any]:
    """Sign the journalist listener's TLS certificate with the same CA as the journalists'.

    Writes ``out_cert`` (the certificate followed by the CA's, PEM) and ``STEM.key`` (the
    server's key, unencrypted: the server reads it at start). A browser that trusts the CA,
    imported from the journalist's ``.p12``, then accepts the server without an exception.
    """
    if not hosts:
        raise CAError("give at least one --host (the address or name journalists use)")
    if not 1 <= days <= SERVER_MAX_DAYS:
        raise CAError(f"--days must be between 1 and {SERVER_MAX_DAYS}: browsers refuse a server certificate "
                         f"that lives longer (the default, {SERVER_DAYS}, is Mozilla's \"modern\" profile)")
    sans = [_host_name(h) for h in dict.fromkeys(hosts)]
    ca_key, ca_cert = _load_ca(ca_dir)
    _check_out_dir(out_cert)
    key_path = _stem(out_cert, (".pem", ".crt")) + ".key"
    files = [out_cert, key_path]
    if os.path.realpath(out_cert) in {os.path.realpath(os.path.join(ca_dir, f)) for f in (CA_KEY, CA_CERT, STATE)}:
        raise CAError(f"refusing to write the server certificate over the CA's own {os.path.basename(out_cert)}")
    with _locked(ca_dir):
        state = _load_state(ca_dir)
        _refuse_existing(files)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "DeadDrop"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            # serverAuth only: this key can never log in as a journalist.
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(_authority_key_id(ca_cert), critical=False)
            .sign(ca_key, _hash_for(ca_key))
        )
        entry = {"name": hosts[0], "hosts": list(dict.fromkeys(hosts)), "serial": _hex(cert.serial_number),
                 "issued_at": _iso(now), "not_after": _iso(not_after)}
        state.setdefault("servers", []).append(entry)
        _save_state(ca_dir, state)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        chain = cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
        try:
            _write(key_path, key_pem, 0o600)
            _write(out_cert, chain, 0o644)
        except CAError:
            for path in files:
                _remove_quietly(path)
            raise
    return dict(entry, cert=out_cert, key=key_path, files=files)


def list_certs(ca_dir: str) -> list[dict[str, Any]]:
    """Every certificate the CA issued, oldest first: kind, name, serial, not_after, revoked."""
    _load_ca(ca_dir)
    state = _load_state(ca_dir)
    found = [dict(kind="client", name=e["name"], serial=e["serial"], not_after=e["not_after"],
                  revoked=bool(e["revoked"]), revoked_at=e.get("revoked_at")) for e in state["certs"]]
    found += [dict(kind="server", name=e["name"], serial=e["serial"], not_after=e["not_after"],
                   revoked=False, revoked_at=None) for e in state.get("servers", [])]
    return found


def revoke(ca_dir: str, name: str) -> dict[str, Any]:
    """Mark every unrevoked certificate of ``name`` revoked; ``write_crl`` publishes it."""
    _load_ca(ca_dir)
    with _locked(ca_dir):
        state = _load_state(ca_dir)
        entries = [e for e in state["certs"] if e["name"] == name and not e["revoked"]]
        if not entries:
            raise CAError(f"no unrevoked certificate named {name!r} in {ca_dir}")
        now = _iso(_now())
        for e in entries:
            e["revoked"], e["revoked_at"] = True, now
        _save_state(ca_dir, state)
    return {"name": name, "serials": [e["serial"] for e in entries], "revoked_at": now}


def write_crl(ca_dir: str, out_path: str, next_update_days: int = 30) -> dict[str, Any]:
    """Write a CRL signed by the CA listing every revoked serial (atomically)."""
    if next_update_days < 1:
        raise CAError("--next-update-days must be at least 1")
    ca_key, ca_cert = _load_ca(ca_dir)
    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir):
        raise CAError(f"cannot write {out_path}: directory {out_dir} does not exist")
    if os.path.isdir(out_path):
        raise CAError(f"cannot write {out_path}: it is a directory")
    # A typo like --out D/ca.key must not destroy the CA.
    if os.path.realpath(out_path) in {os.path.realpath(os.path.join(ca_dir, f)) for f in (CA_KEY, CA_CERT, STATE)}:
        raise CAError(f"refusing to write the CRL over the CA's own {os.path.basename(out_path)}")
    with _locked(ca_dir):
        state = _load_state(ca_dir)
        # A fresh, increasing CRL number on every write lets relying parties order CRLs.
        state["crl_number"] = int(state.get("crl_number", 0)) + 1
        revoked = [e for e in state["certs"] if e["revoked"]]
        crl = _build_crl(ca_key, ca_cert, revoked, state["crl_number"], next_update_days)
        _save_state(ca_dir, state)
        _write(out_path, crl.public_bytes(serialization.Encoding.PEM), 0o644)
    return {"path": out_path, "count": len(revoked), "crl_number": state["crl_number"],
            "next_update": _iso(crl.next_update_utc)}


def make_client_certificate(ca_key: CAKey, ca_cert: x509.Certificate, name: str, public_key: Any,
                            not_before: datetime.datetime, not_after: datetime.datetime) -> x509.Certificate:
    """Sign a journalist certificate (exposed so tests can make expired ones)."""
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "DeadDrop"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        # clientAuth only: a stolen journalist certificate cannot impersonate a server.
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(_authority_key_id(ca_cert), critical=False)
        .sign(ca_key, _hash_for(ca_key))
    )


def load_ca(ca_dir: str) -> tuple[CAKey, x509.Certificate]:
    """The CA key and certificate, or ``CAError`` naming the fix."""
    return _load_ca(ca_dir)


def generate_password() -> str:
    """A diceware-style passphrase: easy to type into a browser's import dialog."""
    words = codename_words()
    return "-".join(secrets.choice(words) for _ in range(PASSWORD_WORDS))


# -- internals --------------------------------------------------------------------------


def _build_crl(ca_key: CAKey, ca_cert: x509.Certificate, revoked: list[dict[str, Any]],
               number: int, next_update_days: int) -> x509.CertificateRevocationList:
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - CLOCK_SKEW)
        .next_update(now + datetime.timedelta(days=next_update_days))
        .add_extension(x509.CRLNumber(number), critical=False)
        .add_extension(_authority_key_id(ca_cert), critical=False)
    )
    for e in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(int(e["serial"], 16))
            .revocation_date(datetime.datetime.fromisoformat(e["revoked_at"]))
            .build()
        )
    return builder.sign(ca_key, _hash_for(ca_key))


def _load_ca(ca_dir: str) -> tuple[CAKey, x509.Certificate]:
    key_path, cert_path = os.path.join(ca_dir, CA_KEY), os.path.join(ca_dir, CA_CERT)
    if not all(os.path.isfile(p) for p in (key_path, cert_path, os.path.join(ca_dir, STATE))):
        raise CAError(f"no CA in {ca_dir}: run deaddrop-admin ca init --ca-dir {ca_dir}")
    try:
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    except OSError as e:
        raise CAError(f"cannot read the CA in {ca_dir}: {e.strerror}") from None
    except (ValueError, TypeError) as e:
        raise CAError(f"the CA in {ca_dir} is damaged: {e}") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)):
        raise CAError(f"the CA key in {ca_dir} has an unsupported type")
    return key, cert


def _load_state(ca_dir: str) -> dict[str, Any]:
    path = os.path.join(ca_dir, STATE)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except OSError as e:
        raise CAError(f"cannot read {path}: {e.strerror}") from None
    except ValueError:
        raise CAError(f"{path} is not valid JSON") from None
    if not isinstance(state, dict) or not isinstance(state.get("certs"), list):
        raise CAError(f"{path} is not a DeadDrop CA state file")
    return state


def _save_state(ca_dir: str, state: dict[str, Any]) -> None:
    data = json.dumps(state, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    _write(os.path.join(ca_dir, STATE), data, 0o600)


def _write(path: str, data: bytes, mode: int) -> None:
    try:
        write_atomically(path, data, mode)
    except OSError as e:
        raise CAError(f"cannot write {path}: {e.strerror}") from None


@contextmanager
def _locked(ca_dir: str) -> Iterator[None]:
    # Serialises read-modify-write of state.json between concurrent admin commands.
    try:
        fd = os.open(os.path.join(ca_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise CAError(f"cannot use CA directory {ca_dir}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _make_private_dir(path: str) -> None:
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise CAError(f"{path} exists and is not a directory")
        mode = os.stat(path).st_mode & 0o777
        # Never chmod a directory the admin already had (it might be their home directory).
        if mode & 0o077:
            raise CAError(f"CA directory {path} is accessible by other users (mode {mode:o}): "
                             "chmod 700 it or choose a new directory")
        return
    try:
        os.makedirs(path, mode=0o700)
        os.chmod(path, 0o700)  # makedirs' mode is subject to the umask
    except OSError as e:
        raise CAError(f"cannot create CA directory {path}: {e.strerror}") from None


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=not cert_sign, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
                         crl_sign=cert_sign, encipher_only=False, decipher_only=False)


def _authority_key_id(ca_cert: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _hash_for(key: CAKey) -> hashes.SHA256 | None:
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _active(entry: dict[str, Any], now: datetime.datetime) -> bool:
    return not entry["revoked"] and datetime.datetime.fromisoformat(entry["not_after"]) > now


def _check_out_dir(path: str) -> None:
    out_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(out_dir):
        raise CAError(f"cannot write {path}: directory {out_dir} does not exist")


def _refuse_existing(paths: list[str]) -> None:
    for path in paths:
        if os.path.lexists(path):
            raise CAError(f"{path} already exists: refusing to overwrite it")


def _stem(path: str, extensions: tuple[str, ...]) -> str:
    root, ext = os.path.splitext(path)
    return root if ext.lower() in extensions else path


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not re.fullmatch(r"[A-Za-z0-9*]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*\.?", host):
        raise CAError(f"--host {host!r} is neither an IP address nor a DNS name")
    return x509.DNSName(host.rstrip("."))


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def _iso(when: datetime.datetime | None) -> str | None:
    if when is None:  # a CRL without a next update
        return None
    return when.astimezone(datetime.timezone.utc).isoformat()


def _hex(serial: int) -> str:
    return format(serial, "x")
