"""Facts about the journalist CA's files that both the server and ``deaddrop-admin`` read.

Kept free of Twisted and pyOpenSSL so ``deaddrop-admin status`` can use it on any machine.
"""
from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509

# The server logs a security event, and ``status`` warns, this long before the CRL expires:
# at expiry the journalist listener fails closed and refuses everyone.
CRL_WARNING = datetime.timedelta(days=7)
# The same for the journalist listener's own certificate: browsers refuse it once it has expired.
SERVER_CERT_WARNING = datetime.timedelta(days=30)


def crl_next_update(path: str) -> datetime.datetime | None:
    """When the CRL at ``path`` (PEM or DER) expires (UTC), or None if it is missing or unreadable."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return next_update_of(data)


def next_update_of(data: bytes) -> datetime.datetime | None:
    try:
        crl = x509.load_pem_x509_crl(data) if data.lstrip().startswith(b"-----BEGIN") else x509.load_der_x509_crl(data)
    except ValueError:
        return None
    return crl.next_update_utc


def crl_expires_soon(next_update: datetime.datetime | None, now: datetime.datetime | None = None) -> bool:
    """True when the CRL is missing, expired, or expires within ``CRL_WARNING``."""
    if next_update is None:
        return True
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return next_update - now <= CRL_WARNING
