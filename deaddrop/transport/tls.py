"""Server-side TLS for the journalist listener: a client certificate from our CA is required.

``JournalistTLS`` is the connection creator handed to ``TLSMemoryBIOFactory``. Every new
connection uses ``self._context``; reloading the CRL builds a *new* context (pyOpenSSL forbids
changing one that is in use) and swaps it in, so new handshakes see the new CRL while
established connections are checked against it too: every open connection whose client
certificate the new CRL revokes is closed at once. Connections also have a maximum age, and
one whose certificate expires is closed. Refusals are reported as ``tls.client_cert.refused``
security events; CRL problems never take the listener down, they keep the last good CRL. A CRL
that expires within ``CRL_WARNING`` is reported (``crl.expires_soon``) before the listener fails
closed at its expiry.

With ``explain_missing_certificate`` the handshake lets a browser without a certificate in, and
``CertificateGate`` (the journalist site's root) answers it with one static page and nothing
else: no route of the application ever sees a request without a verified certificate.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import signal
from pathlib import Path
from typing import Any, Callable, Iterable, cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import SSL
from OpenSSL.crypto import X509, X509StoreFlags
from twisted.internet.protocol import connectionDone
from twisted.application.internet import TimerService
from twisted.application.service import IService
from twisted.internet.interfaces import IHandshakeListener, IOpenSSLServerConnectionCreator, IProtocolFactory
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from deaddrop.transport.certificates import SERVER_CERT_WARNING, crl_expires_soon, expires_within, is_pem, load_crl
from deaddrop.durable import write_atomically
from deaddrop.events import SecurityEvents

REFUSED = "tls.client_cert.refused"
CRL_LOADED, CRL_RELOADED, CRL_RELOAD_FAILED = "crl.loaded", "crl.reloaded", "crl.reload_failed"
CRL_EXPIRES_SOON, CRL_EXPIRED = "crl.expires_soon", "crl.expired"
CLOSED = "tls.connection.closed"
POLL_SECONDS = 2.0
MAX_CONNECTION_AGE = 3600.0
# A certificate the server makes for itself (self-signed, or from a CA in DATA/ca) lives as long
# as Mozilla's "modern" profile allows and is made again at a start within SERVER_CERT_WARNING of
# its end.
SERVER_CERT_DAYS = 90
# Mozilla's "modern" TLS profile: TLS 1.3 only (its suites are all AEAD with forward secrecy),
# key exchange on these groups only (no X448, P-521, finite-field or hybrid groups).
TLS_GROUPS = b"X25519:P-256:P-384"
SERVER_CERT_EXPIRES_SOON, SERVER_CERT_EXPIRED = "tls.server_cert.expires_soon", "tls.server_cert.expired"
SERVER_CERT_RELOADED, SERVER_CERT_RELOAD_FAILED = "tls.server_cert.reloaded", "tls.server_cert.reload_failed"

# OpenSSL X509_V_ERR_* codes -> the event's short reason.
_REASONS = {
    2: "unknown_ca", 7: "unknown_ca", 18: "unknown_ca", 19: "unknown_ca", 20: "unknown_ca", 21: "unknown_ca",
    9: "not_yet_valid", 10: "expired", 23: "revoked", 26: "wrong_purpose",
    3: "crl_unavailable", 8: "crl_invalid", 11: "crl_not_yet_valid", 12: "crl_expired",
}
_NO_CERT_ERRORS = ("peer did not return a certificate", "certificate required")

_log = Logger(namespace="deaddrop.web.journalist.tls")  # the name its log lines carried before the module moved


def ensure_server_certificate(data_dir: str, hostnames: Iterable[str] = ("localhost",)) -> tuple[str, str]:
    """``DATA/tls/server.key`` + ``server.pem``: created (self-signed P-256) unless present, and
    made again for the same key when it is self-signed and within ``SERVER_CERT_WARNING`` of its end."""
    tls_dir = os.path.join(data_dir, "tls")
    key_path, cert_path = os.path.join(tls_dir, "server.key"), os.path.join(tls_dir, "server.pem")
    if os.path.isfile(key_path) and os.path.isfile(cert_path):
        # Only a certificate this function made (self-signed) is renewed; a CA's is the admin's.
        if not expires_within(cert_path, SERVER_CERT_WARNING) or not signed_by(cert_path, cert_path):
            return key_path, cert_path
    os.makedirs(tls_dir, mode=0o700, exist_ok=True)
    key: CertificateIssuerPrivateKeyTypes
    if os.path.isfile(key_path):  # keep an existing key: journalists may have pinned it (one that signs)
        key = cast(CertificateIssuerPrivateKeyTypes,
                   serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None))
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    names = list(dict.fromkeys(["localhost", "127.0.0.1", *hostnames]))
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SERVER_CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    write_atomically(key_path, key_pem, 0o600)
    write_atomically(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return key_path, cert_path


def signed_by(cert_path: str, ca_path: str) -> bool:
    """Whether the first certificate in ``cert_path`` was issued by the CA in ``ca_path``."""
    try:
        cert = x509.load_pem_x509_certificates(Path(cert_path).read_bytes())[0]
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(Path(ca_path).read_bytes()))
    except (OSError, ValueError, TypeError, IndexError, InvalidSignature):
        return False
    return True


@implementer(IOpenSSLServerConnectionCreator)
class JournalistTLS:
    """Client-certificate TLS with a hot-reloadable CRL (``crl_path=None``: no revocation check)."""

    def __init__(self, key_path: str, cert_path: str, ca_path: str, crl_path: str | None,
                 events: SecurityEvents, reactor: Any = None, poll_interval: float = POLL_SECONDS, *,
                 max_connection_age: float = MAX_CONNECTION_AGE, explain_missing_certificate: bool = False) -> None:
        self._key_path, self._cert_path = key_path, cert_path
        self._server_stat = (_stat(key_path), _stat(cert_path))
        self._key, self._cert, self._chain, self._server_bytes = _read_server_pair(key_path, cert_path)
        self._warned_server: tuple[int, str] | None = None
        self._max_age = max_connection_age
        self.explain_missing_certificate = explain_missing_certificate
        self._factories: list[_ObservingFactory] = []
        self._warned_crl: tuple[int, str] | None = None
        cas = x509.load_pem_x509_certificates(Path(ca_path).read_bytes())
        if len(cas) != 1:
            raise ValueError(f"{ca_path} must hold exactly one CA certificate, not {len(cas)}")
        self._ca = cas[0]
        self._crl_path = crl_path
        self._events = events
        if reactor is None:
            from twisted.internet import reactor  # type: ignore[no-redef]
        self._reactor = reactor
        self._crl: x509.CertificateRevocationList | None = None
        self._crl_stat: tuple[int, int, int] | None = None
        if crl_path is not None:
            self._crl_stat = _stat(crl_path)
            crl, problem = self._read_crl()
            if crl is None:
                # Fail closed: CRL checking stays on with no CRL, so every client is refused
                # ("crl_unavailable") until a good CRL appears; the poll picks it up.
                self._emit(CRL_RELOAD_FAILED, reason=problem)
            else:
                self._crl = crl
                self._emit(CRL_LOADED, count=len(crl), expires=_iso(crl.next_update_utc))
        self._context = self._build_context(self._crl)
        self._check_crl_expiry()
        self._check_server_cert_expiry()
        self.service: IService = TimerService(poll_interval, self._poll)
        self.service.clock = reactor  # type: ignore[attr-defined]

    # -- IOpenSSLServerConnectionCreator

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        # Read self._context per connection: that is what makes a CRL reload take effect.
        return SSL.Connection(self._context, None)

    # -- public API

    def wrap_factory(self, factory: IProtocolFactory) -> IProtocolFactory:
        """Wrap an application factory (e.g. a ``Site``) in server-side TLS."""
        observing = _ObservingFactory(factory, self)
        self._factories.append(observing)
        return TLSMemoryBIOFactory(self, False, observing)

    def open_connections(self) -> list["_ObservingProtocol"]:
        return [p for f in self._factories for p in list(f.live)]

    def reload_crl(self) -> bool:
        """Re-read the CRL; on any problem keep the previous one. True if a new CRL is in use."""
        if self._crl_path is None:
            return False
        try:
            self._crl_stat = _stat(self._crl_path)
            crl, problem = self._read_crl()
            if crl is None:
                self._emit(CRL_RELOAD_FAILED, reason=problem)
                return False
            context = self._build_context(crl)
        except Exception:
            _log.failure("reloading the CRL from {path}", path=self._crl_path)
            self._emit(CRL_RELOAD_FAILED, reason="error")
            return False
        self._crl, self._context = crl, context
        self._emit(CRL_RELOADED, count=len(crl), expires=_iso(crl.next_update_utc))
        self._close_revoked(crl)
        self._check_crl_expiry()
        return True

    def server_names(self) -> list[str]:
        """The host names (DNS entries, not addresses) of the server certificate in force."""
        try:
            names = self._cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return []
        return names.get_values_for_type(x509.DNSName)

    def revoked_serials(self) -> set[str] | None:
        """Lower-case hex serials the CRL in force revokes (ca.py's spelling); None without a CRL."""
        if self._crl_path is None:
            return None
        return {format(r.serial_number, "x") for r in self._crl} if self._crl is not None else set()

    def install_sighup(self) -> Callable[[], None]:
        """Reload the CRL on SIGHUP (main thread only); returns a function that uninstalls it."""
        previous = signal.getsignal(signal.SIGHUP)

        def handler(signum: int, frame: Any) -> None:
            # A signal can interrupt the reactor anywhere: do the work on its next turn.
            self._reactor.callFromThread(self.reload_crl)
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGHUP, handler)

        def uninstall() -> None:
            signal.signal(signal.SIGHUP, previous)

        return uninstall

    # -- internals

    def reload_server_certificate(self) -> bool:
        """Re-read the listener's key and certificate (a renewed ``cert server`` copied over them);
        on any problem keep the pair in use. True if the new pair serves new handshakes."""
        self._server_stat = (_stat(self._key_path), _stat(self._cert_path))
        previous = self._key, self._cert, self._chain, self._server_bytes
        try:
            self._key, self._cert, self._chain, self._server_bytes = _read_server_pair(self._key_path, self._cert_path)
            context = self._build_context(self._crl)
        except Exception as e:
            self._key, self._cert, self._chain, self._server_bytes = previous
            # Often a copy in progress (key and certificate do not match yet): the next poll retries.
            reason = ("unreadable" if isinstance(e, OSError) else "key_mismatch" if isinstance(e, SSL.Error)
                      else "corrupt" if isinstance(e, (ValueError, TypeError, IndexError)) else "error")
            self._emit(SERVER_CERT_RELOAD_FAILED, reason=reason)
            return False
        self._context = context
        self._emit(SERVER_CERT_RELOADED, serial=format(self._cert.serial_number, "x"),
                   expires=_iso(self._cert.not_valid_after_utc))
        self._check_server_cert_expiry()
        return True

    def _poll(self) -> None:
        if self._crl_path is not None and _stat(self._crl_path) != self._crl_stat:
            if self._same_crl_as_in_force():
                # Only its times changed (the daily file-time normalisation): nothing to reload.
                self._crl_stat = _stat(self._crl_path)
            else:
                self.reload_crl()
        if (_stat(self._key_path), _stat(self._cert_path)) != self._server_stat:
            if self._same_server_pair_as_in_force():
                self._server_stat = (_stat(self._key_path), _stat(self._cert_path))
            else:
                self.reload_server_certificate()
        self._check_crl_expiry()
        self._check_server_cert_expiry()
        self._close_old_and_expired()

    def _now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self._reactor.seconds(), datetime.timezone.utc)

    def _close_revoked(self, crl: x509.CertificateRevocationList) -> None:
        # A new CRL stops new handshakes; an open keep-alive connection must not outlive it.
        for connection in self.open_connections():
            serial = connection.peer_serial
            if serial is not None and crl.get_revoked_certificate_by_serial_number(serial) is not None:
                connection.close("revoked")

    def _close_old_and_expired(self) -> None:
        now, clock = self._now(), self._reactor.seconds()
        for connection in self.open_connections():
            if connection.peer_not_after is not None and connection.peer_not_after <= now:
                connection.close("expired")
            elif clock - connection.opened_at >= self._max_age:
                # Abort, not a TLS close: that would wait on the HTTP channel, which holds the
                # transport as its producer for as long as the client keeps the connection.
                connection.close("max_age")

    def _check_crl_expiry(self) -> None:
        """One security event per CRL when it comes within ``CRL_WARNING`` of expiry, one at expiry."""
        if self._crl is None:
            return
        next_update, now = self._crl.next_update_utc, self._now()
        if not crl_expires_soon(next_update, now):
            return
        state = CRL_EXPIRED if next_update is None or next_update <= now else CRL_EXPIRES_SOON
        key = (_crl_number(self._crl), state)
        if self._warned_crl == key:
            return
        self._warned_crl = key
        days = 0 if next_update is None else max(0, (next_update - now).days)
        self._emit(state, expires=_iso(next_update), days_left=days,
                   detail="write a new CRL on the CA machine (deaddrop-admin crl) and copy it to the server")

    def _same_crl_as_in_force(self) -> bool:
        assert self._crl_path is not None
        if self._crl is None:
            return False
        try:
            data = Path(self._crl_path).read_bytes()
        except OSError:
            return False
        in_force = self._crl.public_bytes(serialization.Encoding.PEM if is_pem(data) else serialization.Encoding.DER)
        return data.strip() == in_force.strip()

    def _same_server_pair_as_in_force(self) -> bool:
        """Whether the key and certificate files still hold the pair in use (only times changed)."""
        try:
            return (Path(self._key_path).read_bytes(), Path(self._cert_path).read_bytes()) == self._server_bytes
        except OSError:
            return False

    def _check_server_cert_expiry(self) -> None:
        """One security event per server certificate when it comes within 30 days of its end
        (journalists' browsers then refuse the listener), one at its end."""
        not_after, now = self._cert.not_valid_after_utc, self._now()
        if not_after - now > SERVER_CERT_WARNING:
            return
        state = SERVER_CERT_EXPIRED if not_after <= now else SERVER_CERT_EXPIRES_SOON
        key = (self._cert.serial_number, state)
        if self._warned_server == key:
            return
        self._warned_server = key
        self._emit(state, serial=format(self._cert.serial_number, "x"), expires=_iso(not_after),
                   days_left=max(0, (not_after - now).days),
                   detail="issue a new one on the CA machine (deaddrop-admin cert server) and copy it over "
                          "the server's certificate and key; the server picks it up without a restart")

    def _read_crl(self) -> tuple[x509.CertificateRevocationList | None, str]:
        assert self._crl_path is not None
        try:
            data = Path(self._crl_path).read_bytes()
        except FileNotFoundError:
            return None, "missing"
        except OSError:
            return None, "unreadable"
        try:
            crl = load_crl(data)
        except ValueError:
            return None, "corrupt"  # includes a half-copied file; the next poll retries
        if crl.issuer != self._ca.subject:
            return None, "wrong_issuer"
        if not crl.is_signature_valid(self._ca.public_key()):  # type: ignore[arg-type]
            return None, "bad_signature"
        if self._crl is not None and _crl_number(crl) < _crl_number(self._crl):
            return None, "older"  # an old copy must not un-revoke anyone
        return crl, ""

    def _build_context(self, crl: x509.CertificateRevocationList | None) -> SSL.Context:
        ctx = SSL.Context(SSL.TLS_METHOD)
        ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
        _set_groups(ctx)
        # No session resumption: a resumed session skips certificate verification, so a
        # session from before a revocation would outlive it.
        ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE | SSL.OP_NO_TICKET)
        ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
        ctx.use_certificate(self._cert)
        for extra in self._chain:
            ctx.add_extra_chain_cert(X509.from_cryptography(extra))
        ctx.use_privatekey(self._key)  # type: ignore[arg-type]
        ctx.check_privatekey()
        store = ctx.get_cert_store()
        assert store is not None
        store.add_cert(X509.from_cryptography(self._ca))
        if self._crl_path is not None:
            if crl is not None:
                store.add_crl(crl)
            store.set_flags(X509StoreFlags.CRL_CHECK)
        ctx.add_client_ca(self._ca)  # tells browsers which certificate to offer
        # A certificate that is sent is always verified; a missing one is let through only to
        # reach the explanation page (CertificateGate), when the admin asked for it.
        flags = SSL.VERIFY_PEER | SSL.VERIFY_CLIENT_ONCE
        if not self.explain_missing_certificate:
            flags |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        ctx.set_verify(flags, self._verify)
        return ctx

    def _verify(self, connection: SSL.Connection, cert: X509, errno: int, depth: int, ok: int) -> bool:
        if ok:
            return True
        # Called once per failing handshake: OpenSSL aborts as soon as we return False.
        c = cert.to_cryptography()
        self._emit(REFUSED, reason=_REASONS.get(errno, f"verify_error_{errno}"),
                   subject=common_name(c), serial=format(c.serial_number, "x"))
        return False

    def _missing_certificate(self, explained: bool = False) -> None:
        if explained:
            self._emit(REFUSED, reason="no_certificate", detail="explanation page served")
        else:
            self._emit(REFUSED, reason="no_certificate")

    def _emit(self, event: str, **fields: Any) -> None:
        # Runs inside OpenSSL callbacks and timers: an exception here must not escape.
        try:
            self._events.emit(event, **fields)
        except Exception:
            _log.failure("emitting security event {event}", event=event)


def peer_certificate(transport: Any) -> x509.Certificate | None:
    """The verified client certificate on ``transport`` (e.g. ``request.transport``), or None."""
    get_handle = getattr(transport, "getHandle", None)
    connection = get_handle() if callable(get_handle) else None
    if not isinstance(connection, SSL.Connection):
        return None
    chain = connection.get_verified_chain(as_cryptography=True)
    return chain[0] if chain else None


def peer_common_name(transport: Any) -> str | None:
    """The CN of the verified client certificate on ``transport`` (e.g. ``request.transport``)."""
    cert = peer_certificate(transport)
    return common_name(cert) if cert is not None else None


def common_name(cert: x509.Certificate) -> str | None:
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    # An unknown client chooses its own CN: bound what ends up in the log.
    return str(cns[0].value)[:64] if cns else None


@implementer(IHandshakeListener)
class _ObservingProtocol(ProtocolWrapper):
    """Sits between TLS and the application: knows each connection's age and certificate.

    OpenSSL never calls the verify callback when the client sends no certificate; the only
    trace is the handshake error handed to ``connectionLost``.
    """

    # The TCP transport under TLS: it can be cut (abortConnection).
    transport: Any
    peer_serial: int | None = None
    peer_not_after: datetime.datetime | None = None
    opened_at = 0.0

    def makeConnection(self, transport: Any) -> None:
        self.opened_at = self.factory.owner._reactor.seconds()
        self.factory.live.add(self)
        super().makeConnection(transport)

    def handshakeCompleted(self) -> None:
        cert = peer_certificate(self)
        if cert is not None:
            self.peer_serial, self.peer_not_after = cert.serial_number, cert.not_valid_after_utc
        else:  # only possible with explain_missing_certificate
            self.factory.owner._missing_certificate(explained=True)
        if IHandshakeListener.providedBy(self.wrappedProtocol):
            self.wrappedProtocol.handshakeCompleted()

    def close(self, reason: str) -> None:
        self.factory.live.discard(self)
        serial = None if self.peer_serial is None else format(self.peer_serial, "x")
        self.factory.owner._emit(CLOSED, reason=reason, serial=serial)
        self.transport.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.factory.live.discard(self)
        if isinstance(reason.value, SSL.Error) and _is_missing_certificate(reason.value):
            self.factory.owner._missing_certificate()
        super().connectionLost(reason)


class _ObservingFactory(WrappingFactory):
    protocol = _ObservingProtocol

    def __init__(self, wrapped: IProtocolFactory, owner: JournalistTLS) -> None:
        super().__init__(wrapped)
        self.owner = owner
        self.live: set[_ObservingProtocol] = set()

    def buildProtocol(self, addr: Any) -> Any:
        inner = self.wrappedFactory.buildProtocol(addr)
        # (Twisted types this factory as WrappingFactory[_ObservingProtocol]; subscripting the base
        # at run time needs a newer Twisted than setup.cfg asks for.)
        return None if inner is None else self.protocol(self, inner)  # type: ignore[arg-type]


def _set_groups(ctx: SSL.Context) -> None:
    """Limit key exchange to ``TLS_GROUPS``. pyOpenSSL has no public call for a group list; its
    binding of ``SSL_CTX_set1_curves_list`` does it (without it: P-256 alone, still "modern")."""
    from OpenSSL._util import lib  # type: ignore[attr-defined]

    set_list = getattr(lib, "SSL_CTX_set1_curves_list", None)
    if set_list is None:
        ctx.set_tmp_ecdh(ec.SECP256R1())
        return
    if set_list(ctx._context, TLS_GROUPS) != 1:  # type: ignore[attr-defined]
        raise ValueError(f"OpenSSL refused the TLS groups {TLS_GROUPS.decode()}")


def _is_missing_certificate(error: SSL.Error) -> bool:
    text = repr(error.args).lower()
    return any(marker in text for marker in _NO_CERT_ERRORS)


def _read_server_pair(key_path: str, cert_path: str) -> tuple[Any, x509.Certificate, list[x509.Certificate],
                                                              tuple[bytes, bytes]]:
    """The key, the certificate, any chain after it (``cert server`` writes the CA after it), and
    the two files' bytes."""
    key_pem, cert_pem = Path(key_path).read_bytes(), Path(cert_path).read_bytes()
    key = serialization.load_pem_private_key(key_pem, password=None)
    cert, *chain = x509.load_pem_x509_certificates(cert_pem)
    return key, cert, chain, (key_pem, cert_pem)


def _crl_number(crl: x509.CertificateRevocationList) -> int:
    try:
        return crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number
    except x509.ExtensionNotFound:
        return 0


def _iso(when: datetime.datetime | None) -> str | None:
    if when is None:  # a CRL without a next update
        return None
    return when.astimezone(datetime.timezone.utc).isoformat()


def _stat(path: str) -> tuple[int, int, int] | None:
    # Inode too: an atomic rename can keep size and (coarse) mtime identical.
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
