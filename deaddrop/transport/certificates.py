"""Facts about the journalist CA's files that both the server and ``deaddrop-admin`` read: the one
place that reads a CRL's or a certificate's expiry and says when it is near.

Kept free of Twisted and pyOpenSSL so ``deaddrop-admin status`` can use it on any machine.
"""
from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cryptography import x509

# The server logs a security event, and ``status`` warns, this long before the CRL expires:
# at expiry the journalist listener fails closed and refuses everyone.
CRL_WARNING = datetime.timedelta(days=7)
# The same for the journalist listener's own certificate: browsers refuse it once it has expired.
SERVER_CERT_WARNING = datetime.timedelta(days=30)


def is_pem(data: bytes) -> bool:
    """Whether a CRL file's bytes are PEM (else DER): both are accepted everywhere."""
    return data.lstrip().startswith(b"-----BEGIN")


def load_crl(data: bytes) -> x509.CertificateRevocationList:
    """A CRL from its file's bytes, PEM or DER; ``ValueError`` if it is neither."""
    return x509.load_pem_x509_crl(data) if is_pem(data) else x509.load_der_x509_crl(data)


def crl_next_update(path: str) -> datetime.datetime | None:
    """When the CRL at ``path`` expires (its nextUpdate, UTC); ``OSError`` or ``ValueError`` if unreadable."""
    return load_crl(Path(path).read_bytes()).next_update_utc


def crl_expires_soon(next_update: datetime.datetime | None, now: datetime.datetime | None = None) -> bool:
    """True when the CRL is missing, expired, or expires within ``CRL_WARNING``."""
    if next_update is None:
        return True
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return next_update - now <= CRL_WARNING


def certificate_expiry(path: str) -> datetime.datetime:
    """When the first certificate in the PEM file ``path`` ends (UTC); ``OSError`` or ``ValueError``."""
    return x509.load_pem_x509_certificate(Path(path).read_bytes()).not_valid_after_utc


def expires_within(cert_path: str, margin: datetime.timedelta) -> bool:
    """Whether the first certificate in ``cert_path`` ends within ``margin`` from now (False if unreadable)."""
    try:
        expiry = certificate_expiry(cert_path)
    except (OSError, ValueError):
        return False  # not ours to judge: loading it says what is wrong
    return expiry - datetime.datetime.now(datetime.timezone.utc) <= margin


# The CA's list of every certificate it issued (``deaddrop-admin`` writes it beside ca.pem).
STATE_FILE = "state.json"

# The users page calls a client certificate "expiring" this long before its end, as
# ``deaddrop-admin status`` lists it among the certificates expiring soon.
CERT_EXPIRY_WARNING = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertificateStatus:
    """An account's client certificate as the server can know it.

    ``state``: ``valid``, ``expiring`` (within ``CERT_EXPIRY_WARNING``), ``expired``,
    ``revoked``, ``revoked_not_published`` (revoked on the CA, but the CRL in force does not
    list it yet: the server still lets it in), ``none`` (the CA never issued one for this name)
    or ``unknown`` (the server has no copy of the CA's issued list).
    """

    state: str
    serial: str | None = None
    not_after: datetime.datetime | None = None
    revoked_at: str | None = None


def read_issued_list(path: str) -> list[dict[str, Any]] | None:
    """The client certificates a CA's ``state.json`` lists, or None if there is no usable one."""
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("certs"), list):
        return None
    return [e for e in state["certs"] if isinstance(e, dict) and isinstance(e.get("name"), str)]


def certificate_statuses(issued: list[dict[str, Any]] | None, revoked_serials: set[str] | None,
                         now: datetime.datetime) -> Callable[[str], CertificateStatus]:
    """-> username -> the status of that account's newest certificate.

    ``issued``: the CA's issued list (``read_issued_list``); ``revoked_serials``: lower-case hex
    serials the CRL in force revokes (None: no CRL checking). A certificate counts as revoked
    when either says so; the newest certificate that still works wins over older ones.
    """
    def status(username: str) -> CertificateStatus:
        if issued is None:
            return CertificateStatus("unknown")
        mine = [e for e in issued if e["name"].casefold() == username.casefold()]
        if not mine:
            return CertificateStatus("none")
        judged = [_judge(e, revoked_serials, now) for e in mine]
        working = [s for s in judged if s.state in ("valid", "expiring", "revoked_not_published")]
        pool = working or judged
        return max(pool, key=lambda s: s.not_after or datetime.datetime.min.replace(tzinfo=datetime.timezone.utc))

    return status


def _judge(entry: dict[str, Any], revoked_serials: set[str] | None, now: datetime.datetime) -> CertificateStatus:
    serial = str(entry.get("serial", "")).lower()
    try:
        not_after: datetime.datetime | None = datetime.datetime.fromisoformat(str(entry.get("not_after")))
    except ValueError:
        not_after = None
    in_crl = revoked_serials is not None and serial in revoked_serials
    if in_crl:
        return CertificateStatus("revoked", serial, not_after, entry.get("revoked_at"))
    if entry.get("revoked"):
        return CertificateStatus("revoked_not_published", serial, not_after, entry.get("revoked_at"))
    if not_after is None or not_after <= now:
        return CertificateStatus("expired", serial, not_after)
    if not_after - now <= CERT_EXPIRY_WARNING:
        return CertificateStatus("expiring", serial, not_after)
    return CertificateStatus("valid", serial, not_after)
