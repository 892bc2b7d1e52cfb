"""Real TLS handshakes on a loopback port against the journalist listener's TLS wrapper."""
from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import ssl
import stat
from pathlib import Path
from typing import Any, Callable

import treq
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from OpenSSL import SSL
from OpenSSL.crypto import X509
from twisted.internet import defer, reactor, task
from twisted.internet.endpoints import TCP4ClientEndpoint, wrapClientTLS
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.threads import deferToThread
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.trial import unittest
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IPolicyForHTTPS
from twisted.web.resource import Resource
from twisted.web.server import Site
from zope.interface import implementer

from deaddrop.transport import ca
from deaddrop.events import SecurityEvents
from deaddrop.transport import tls
from tests._support import client_pems


@implementer(IOpenSSLClientConnectionCreator)
class _ClientCreator:
    def __init__(self, context: SSL.Context) -> None:
        self._context = context

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return SSL.Connection(self._context, None)


@implementer(IPolicyForHTTPS)
class _ClientPolicy:
    """Pins the server's self-signed certificate and offers an optional client certificate."""

    def __init__(self, server_cert: str, client: tuple[str, str] | None, max_version: int | None = None) -> None:
        ctx = SSL.Context(SSL.TLS_METHOD)
        if max_version is not None:
            ctx.set_max_proto_version(max_version)
        ctx.get_cert_store().add_cert(X509.from_cryptography(_load_cert(server_cert)))
        ctx.set_verify(SSL.VERIFY_PEER, lambda conn, cert, errno, depth, ok: bool(ok))
        if client is not None:
            key_path, cert_path = client
            ctx.use_certificate(_load_cert(cert_path))
            ctx.use_privatekey(serialization.load_pem_private_key(Path(key_path).read_bytes(), None))
        self._creator = _ClientCreator(ctx)

    def creatorForNetloc(self, hostname: bytes, port: int) -> _ClientCreator:
        return self._creator


class _WhoAmI(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        # isSecure: later code sets Secure cookies from it, so the TLS wrapper must keep it true.
        return f"{tls.peer_common_name(request.transport) or '-'} {request.isSecure()}".encode()


def _load_cert(path: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


def _write_cert_pair(directory: str, name: str, key: Any, cert: x509.Certificate) -> tuple[str, str]:
    key_path, cert_path = os.path.join(directory, f"{name}.key.pem"), os.path.join(directory, f"{name}.cert.pem")
    Path(key_path).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    Path(cert_path).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


class _KeptOpen(Protocol):
    """One HTTP/1.1 keep-alive connection: send requests, see replies and the end."""

    def __init__(self) -> None:
        self.received = b""
        self.lost = defer.Deferred()
        self.closed = False

    def get(self) -> None:
        self.transport.write(b"GET / HTTP/1.1\r\nHost: journalist\r\n\r\n")

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Any) -> None:
        self.closed = True
        self.lost.callback(None)


def _handshake(port: int, server_cert: str, client: tuple[str, str], *, max_version: ssl.TLSVersion | None = None,
               group: str | None = None) -> tuple[str | None, bytes]:
    """A blocking stdlib (system OpenSSL) client, as a browser would be: (protocol, response)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(server_cert)
    ctx.load_cert_chain(client[1], client[0])
    if max_version is not None:
        ctx.maximum_version = max_version
    if group is not None:
        ctx.set_ecdh_curve(group)  # the only group this client offers
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: journalist\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return conn.version(), received


class JournalistTLSTests(unittest.TestCase):
    algorithm = "p256"
    client_max_version: int | None = None  # None: the client negotiates TLS 1.3

    def setUp(self) -> defer.Deferred | None:
        self.tmp = os.path.abspath(self.mktemp())
        os.makedirs(self.tmp)
        self.ca_dir = os.path.join(self.tmp, "ca")
        ca.init_ca(self.ca_dir, self.algorithm)
        self.crl_path = os.path.join(self.ca_dir, ca.CA_CRL)
        self.alice = self.issue("alice")
        self.data_dir = os.path.join(self.tmp, "data")
        self.server_key, self.server_cert = tls.ensure_server_certificate(self.data_dir)
        self.events_path = os.path.join(self.data_dir, "logs", "security.jsonl")
        self.events = SecurityEvents(self.events_path)
        self.addCleanup(self.events.close)
        self.clock = task.Clock()
        self.tls = self.start_server(self.crl_path)
        return None

    # -- helpers

    def issue(self, name: str, ca_dir: str | None = None) -> tuple[str, str]:
        r = ca.issue_client_cert(ca_dir or self.ca_dir, name, os.path.join(self.tmp, f"{name}.p12"), b"pw")
        return client_pems(r["p12"], b"pw")

    def start_server(self, crl_path: str | None, clock: Any = None, **options: Any) -> tls.JournalistTLS:
        journalist_tls = tls.JournalistTLS(self.server_key, self.server_cert, os.path.join(self.ca_dir, ca.CA_CERT),
                                           crl_path, self.events, reactor=clock or self.clock, **options)
        self.factory = journalist_tls.wrap_factory(Site(_WhoAmI()))
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.addCleanup(self._stop, self.port, self.factory)
        return journalist_tls

    @defer.inlineCallbacks
    def _stop(self, port: Any, factory: Any) -> Any:
        yield port.stopListening()
        # Trial fails a test that leaves sockets behind: wait for the server side to close.
        yield self.wait_until(lambda: not factory.protocols)

    @defer.inlineCallbacks
    def fetch(self, client: tuple[str, str] | None) -> Any:
        """(status, body) on success, or the failure if the request could not complete."""
        pool = HTTPConnectionPool(reactor, persistent=False)
        agent = Agent(reactor, contextFactory=_ClientPolicy(self.server_cert, client, self.client_max_version), pool=pool)
        url = f"https://127.0.0.1:{self.port.getHost().port}/"
        try:
            response = yield treq.get(url, agent=agent, timeout=5)
            body = yield treq.content(response)
        except Exception as e:
            return e
        finally:
            yield pool.closeCachedConnections()
        return response.code, body.decode()

    def read_events(self, name: str | None = None) -> list[dict[str, Any]]:
        with open(self.events_path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        return [r for r in records if name is None or r["event"] == name]

    @defer.inlineCallbacks
    def wait_until(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        # Some events are emitted when the server notices the connection is gone, which can
        # be a reactor turn after the client saw the failure: poll briefly, never sleep blind.
        for _ in range(int(timeout / 0.01)):
            if predicate():
                return
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.fail("timed out waiting for a condition")

    @defer.inlineCallbacks
    def assert_refused(self, client: tuple[str, str] | None, reason: str, cert_path: str | None = None) -> Any:
        before = len(self.read_events(tls.REFUSED))
        result = yield self.fetch(client)
        self.assertIsInstance(result, Exception, f"expected the handshake to fail, got {result!r}")
        yield self.wait_until(lambda: len(self.read_events(tls.REFUSED)) > before)
        events = self.read_events(tls.REFUSED)[before:]
        self.assertEqual(len(events), 1, events)
        event = events[0]
        self.assertEqual(event["reason"], reason)
        if cert_path is None:
            self.assertNotIn("subject", event)
            self.assertNotIn("serial", event)
        else:
            cert = _load_cert(cert_path)
            self.assertEqual(event["subject"], tls.common_name(cert))
            self.assertEqual(event["serial"], format(cert.serial_number, "x"))
        return event

    @defer.inlineCallbacks
    def revoke_alice_and_publish(self) -> Any:
        ca.revoke(self.ca_dir, "alice")
        ca.write_crl(self.ca_dir, self.crl_path)
        yield None

    # -- Mozilla's "modern" profile: TLS 1.3 only; key exchange on X25519, P-256 and P-384 only

    def handshake(self, **kw: Any) -> defer.Deferred:
        return deferToThread(_handshake, self.port.getHost().port, self.server_cert, self.alice, **kw)

    @defer.inlineCallbacks
    def test_tls12_clients_are_refused(self) -> Any:
        with self.assertRaises(ssl.SSLError) as caught:
            yield self.handshake(max_version=ssl.TLSVersion.TLSv1_2)
        self.assertIn("VERSION", str(caught.exception).upper())
        version, response = yield self.handshake()
        self.assertEqual(version, "TLSv1.3")
        self.assertIn(b"alice True", response)

    @defer.inlineCallbacks
    def test_key_exchange_only_on_the_modern_groups(self) -> Any:
        for group in ("X25519", "prime256v1", "secp384r1"):
            version, response = yield self.handshake(group=group)
            self.assertEqual(version, "TLSv1.3", group)
            self.assertIn(b"alice True", response, group)
        for group in ("X448", "secp521r1", "ffdhe2048", "ffdhe4096"):
            with self.assertRaises(ssl.SSLError, msg=group):
                yield self.handshake(group=group)

    # -- tests

    @defer.inlineCallbacks
    def test_valid_certificate_gets_200_and_its_common_name(self) -> Any:
        result = yield self.fetch(self.alice)
        self.assertEqual(result, (200, "alice True"))
        self.assertEqual(self.read_events(tls.REFUSED), [])
        self.assertEqual([e.get("count") for e in self.read_events(tls.CRL_LOADED)], [0])

    @defer.inlineCallbacks
    def test_no_certificate_is_refused(self) -> Any:
        yield self.assert_refused(None, "no_certificate")

    @defer.inlineCallbacks
    def test_certificate_from_another_ca_is_refused(self) -> Any:
        other = os.path.join(self.tmp, "other-ca")
        ca.init_ca(other)
        mallory = self.issue("mallory", ca_dir=other)
        yield self.assert_refused(mallory, "unknown_ca", mallory[1])

    @defer.inlineCallbacks
    def test_expired_certificate_is_refused(self) -> Any:
        ca_key, ca_cert = ca.load_ca(self.ca_dir)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = ca.make_client_certificate(ca_key, ca_cert, "bob", key.public_key(),
                                          now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
        bob = _write_cert_pair(self.tmp, "bob", key, cert)
        yield self.assert_refused(bob, "expired", bob[1])

    @defer.inlineCallbacks
    def test_revocation_takes_effect_on_the_next_poll_without_restart(self) -> Any:
        self.tls.service.startService()
        self.addCleanup(self.tls.service.stopService)
        self.assertEqual((yield self.fetch(self.alice)), (200, "alice True"))
        yield self.revoke_alice_and_publish()
        # The file changed but nobody looked yet: the old CRL is still the one in use.
        self.assertEqual((yield self.fetch(self.alice)), (200, "alice True"))
        self.clock.advance(tls.POLL_SECONDS)
        self.assertEqual([e["count"] for e in self.read_events(tls.CRL_RELOADED)], [1])
        yield self.assert_refused(self.alice, "revoked", self.alice[1])
        # An unchanged file is not reloaded again on later polls.
        self.clock.advance(tls.POLL_SECONDS * 3)
        self.assertEqual(len(self.read_events(tls.CRL_RELOADED)), 1)

    @defer.inlineCallbacks
    def keep_open(self, client: tuple[str, str]) -> Any:
        """A keep-alive connection that has completed one request: -> the protocol."""
        endpoint = wrapClientTLS(_ClientPolicy(self.server_cert, client, self.client_max_version)
                                 .creatorForNetloc(b"127.0.0.1", 0),
                                 TCP4ClientEndpoint(reactor, "127.0.0.1", self.port.getHost().port))
        proto = yield endpoint.connect(Factory.forProtocol(_KeptOpen))
        self.addCleanup(lambda: None if proto.closed else (proto.transport.abortConnection(), proto.lost)[1])
        proto.get()
        name = tls.common_name(_load_cert(client[1])).encode()
        yield self.wait_until(lambda: proto.received.endswith(name + b" True"))
        return proto

    @defer.inlineCallbacks
    def test_revocation_closes_open_keep_alive_connections_of_that_certificate(self) -> Any:
        self.tls.service.startService()
        self.addCleanup(self.tls.service.stopService)
        bob = self.issue("bob")
        alice_conn = yield self.keep_open(self.alice)
        bob_conn = yield self.keep_open(bob)
        yield self.revoke_alice_and_publish()
        self.clock.advance(tls.POLL_SECONDS)
        yield self.wait_until(lambda: alice_conn.closed)
        closed = self.read_events(tls.CLOSED)
        self.assertEqual([(e["reason"], e["serial"]) for e in closed],
                         [("revoked", format(_load_cert(self.alice[1]).serial_number, "x"))])
        # Bob's connection is untouched and still serves requests.
        self.assertFalse(bob_conn.closed)
        bob_conn.received = b""
        bob_conn.get()
        yield self.wait_until(lambda: bob_conn.received.endswith(b"bob True"))

    @defer.inlineCallbacks
    def test_connections_have_a_maximum_age(self) -> Any:
        self.port.stopListening()
        journalist_tls = self.start_server(self.crl_path, max_connection_age=60.0)
        journalist_tls.service.startService()
        self.addCleanup(journalist_tls.service.stopService)
        conn = yield self.keep_open(self.alice)
        self.clock.advance(58.0)
        self.assertFalse(conn.closed)
        self.clock.advance(tls.POLL_SECONDS)
        yield self.wait_until(lambda: conn.closed)
        self.assertEqual([e["reason"] for e in self.read_events(tls.CLOSED)], ["max_age"])

    @defer.inlineCallbacks
    def test_crl_expiry_is_reported_seven_days_ahead_then_at_expiry(self) -> Any:
        self.tls.service.startService()
        self.addCleanup(self.tls.service.stopService)
        next_update = x509.load_pem_x509_crl(Path(self.crl_path).read_bytes()).next_update_utc
        self.clock.advance((next_update - datetime.timedelta(days=8)).timestamp())
        self.clock.advance(tls.POLL_SECONDS)
        self.assertEqual(self.read_events(tls.CRL_EXPIRES_SOON), [])
        self.clock.advance(datetime.timedelta(days=1, minutes=1).total_seconds())
        self.clock.advance(tls.POLL_SECONDS)
        soon = self.read_events(tls.CRL_EXPIRES_SOON)
        self.assertEqual([(e["expires"], e["days_left"]) for e in soon], [(next_update.isoformat(), 6)])
        self.clock.advance(3600)  # once per CRL, not on every poll
        self.assertEqual(len(self.read_events(tls.CRL_EXPIRES_SOON)), 1)
        self.clock.advance(datetime.timedelta(days=7).total_seconds())
        self.assertEqual([e["expires"] for e in self.read_events(tls.CRL_EXPIRED)], [next_update.isoformat()])
        self.assertEqual(len(self.read_events(tls.CRL_EXPIRES_SOON)), 1)
        yield None

    @defer.inlineCallbacks
    def test_a_renewed_server_certificate_is_picked_up_without_restart(self) -> Any:
        self.tls.service.startService()
        self.addCleanup(self.tls.service.stopService)
        old_serial = format(_load_cert(self.server_cert).serial_number, "x")
        renewed = os.path.join(self.tmp, "renewed.pem")
        r = ca.issue_server_cert(self.ca_dir, ["127.0.0.1"], renewed)
        # A half-done copy (the new key, the old certificate) is refused; the pair in use stays.
        os.replace(r["key"], self.server_key)
        self.clock.advance(tls.POLL_SECONDS)
        self.assertEqual([e["reason"] for e in self.read_events(tls.SERVER_CERT_RELOAD_FAILED)], ["key_mismatch"])
        version, response = yield self.handshake()
        self.assertIn(b"alice True", response)
        self.assertEqual((yield self._served_serial()), old_serial)
        os.replace(renewed, self.server_cert)
        self.clock.advance(tls.POLL_SECONDS)
        [reloaded] = self.read_events(tls.SERVER_CERT_RELOADED)
        # New file times alone (the daily normalisation) reload nothing.
        os.utime(self.server_cert, (0, 0))
        os.utime(self.server_key, (0, 0))
        self.clock.advance(tls.POLL_SECONDS)
        self.assertEqual(len(self.read_events(tls.SERVER_CERT_RELOADED)), 1)
        self.assertEqual(reloaded["serial"], r["serial"])
        self.assertEqual((yield self._served_serial()), r["serial"])

    @defer.inlineCallbacks
    def _served_serial(self) -> Any:
        # A blocking client: off the reactor thread, which serves the other end.
        pem = yield deferToThread(ssl.get_server_certificate, ("127.0.0.1", self.port.getHost().port))
        return format(x509.load_pem_x509_certificate(pem.encode()).serial_number, "x")

    @defer.inlineCallbacks
    def test_server_certificate_expiry_is_reported_30_days_ahead_then_at_expiry(self) -> Any:
        self.tls.service.startService()
        self.addCleanup(self.tls.service.stopService)
        not_after = _load_cert(self.server_cert).not_valid_after_utc
        self.clock.advance((not_after - datetime.timedelta(days=31)).timestamp())
        self.clock.advance(tls.POLL_SECONDS)
        self.assertEqual(self.read_events(tls.SERVER_CERT_EXPIRES_SOON), [])
        self.clock.advance(datetime.timedelta(days=1, minutes=1).total_seconds())
        soon = self.read_events(tls.SERVER_CERT_EXPIRES_SOON)
        self.assertEqual([(e["expires"], e["days_left"]) for e in soon], [(not_after.isoformat(), 29)])
        self.clock.advance(3600)  # once per certificate
        self.assertEqual(len(self.read_events(tls.SERVER_CERT_EXPIRES_SOON)), 1)
        self.clock.advance(datetime.timedelta(days=30).total_seconds())
        self.assertEqual([e["expires"] for e in self.read_events(tls.SERVER_CERT_EXPIRED)], [not_after.isoformat()])
        yield None

    @defer.inlineCallbacks
    def test_sighup_reloads_and_chains_the_previous_handler(self) -> Any:
        seen: list[int] = []
        original = signal.signal(signal.SIGHUP, lambda signum, frame: seen.append(signum))
        self.addCleanup(signal.signal, signal.SIGHUP, original)
        journalist_tls = self.start_server(self.crl_path, clock=reactor)
        self.addCleanup(journalist_tls.install_sighup())
        yield self.revoke_alice_and_publish()
        os.kill(os.getpid(), signal.SIGHUP)
        yield self.wait_until(lambda: self.read_events(tls.CRL_RELOADED))
        self.assertEqual(seen, [signal.SIGHUP])
        yield self.assert_refused(self.alice, "revoked", self.alice[1])

    @defer.inlineCallbacks
    def test_bad_crl_keeps_the_previous_one(self) -> Any:
        yield self.revoke_alice_and_publish()
        self.assertTrue(self.tls.reload_crl())
        other = os.path.join(self.tmp, "other-ca")
        ca.init_ca(other)
        bad = {
            "corrupt": lambda: Path(self.crl_path).write_bytes(b"-----BEGIN X509 CRL-----\nnope\n"),
            "wrong_issuer": lambda: Path(self.crl_path).write_bytes(Path(other, ca.CA_CRL).read_bytes()),
            "bad_signature": lambda: Path(self.crl_path).write_bytes(self.forged_crl()),
            "missing": lambda: os.remove(self.crl_path),
        }
        for reason, damage in bad.items():
            damage()
            self.assertFalse(self.tls.reload_crl())
            self.assertEqual(self.read_events(tls.CRL_RELOAD_FAILED)[-1]["reason"], reason)
        yield self.assert_refused(self.alice, "revoked", self.alice[1])

    def forged_crl(self) -> bytes:
        """A CRL naming our CA as issuer but signed by someone else's key."""
        now = datetime.datetime.now(datetime.timezone.utc)
        crl = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(_load_cert(os.path.join(self.ca_dir, ca.CA_CERT)).subject)
            .last_update(now)
            .next_update(now + datetime.timedelta(days=1))
            .add_extension(x509.CRLNumber(99), critical=False)
            .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
        )
        return crl.public_bytes(serialization.Encoding.PEM)

    @defer.inlineCallbacks
    def test_older_crl_cannot_unrevoke(self) -> Any:
        old = Path(self.crl_path).read_bytes()  # init's empty CRL, number 1
        yield self.revoke_alice_and_publish()
        self.assertTrue(self.tls.reload_crl())
        Path(self.crl_path).write_bytes(old)
        self.assertFalse(self.tls.reload_crl())
        self.assertEqual(self.read_events(tls.CRL_RELOAD_FAILED)[-1]["reason"], "older")
        yield self.assert_refused(self.alice, "revoked", self.alice[1])

    @defer.inlineCallbacks
    def test_missing_crl_at_start_fails_closed_until_one_appears(self) -> Any:
        crl_path = os.path.join(self.tmp, "not-yet.pem")
        journalist_tls = self.start_server(crl_path)
        self.assertEqual(self.read_events(tls.CRL_RELOAD_FAILED)[-1]["reason"], "missing")
        yield self.assert_refused(self.alice, "crl_unavailable", self.alice[1])
        ca.write_crl(self.ca_dir, crl_path)
        self.assertTrue(journalist_tls.reload_crl())
        self.assertEqual((yield self.fetch(self.alice)), (200, "alice True"))

    @defer.inlineCallbacks
    def test_without_crl_path_revocation_is_not_checked(self) -> Any:
        self.start_server(None)
        yield self.revoke_alice_and_publish()
        self.assertEqual((yield self.fetch(self.alice)), (200, "alice True"))


class Ed25519CATests(JournalistTLSTests):
    """The same behaviour with an Ed25519 CA (client keys stay P-256)."""

    algorithm = "ed25519"


class ServerCertificateTests(unittest.TestCase):
    def test_created_once_with_private_key_and_sans(self) -> None:
        data = self.mktemp()
        key_path, cert_path = tls.ensure_server_certificate(data, hostnames=("abc.onion", "10.0.0.1"))
        self.assertEqual(stat.S_IMODE(os.stat(key_path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(key_path)).st_mode), 0o700)
        cert = _load_cert(cert_path)
        self.assertIsInstance(cert.public_key(), ec.EllipticCurvePublicKey)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual(set(san.get_values_for_type(x509.DNSName)), {"localhost", "abc.onion"})
        self.assertEqual({str(ip) for ip in san.get_values_for_type(x509.IPAddress)}, {"127.0.0.1", "10.0.0.1"})
        before = Path(key_path).read_bytes(), Path(cert_path).read_bytes()
        self.assertEqual(tls.ensure_server_certificate(data), (key_path, cert_path))
        self.assertEqual((Path(key_path).read_bytes(), Path(cert_path).read_bytes()), before)

    def test_missing_certificate_is_remade_for_the_existing_key(self) -> None:
        data = self.mktemp()
        key_path, cert_path = tls.ensure_server_certificate(data)
        os.remove(cert_path)
        tls.ensure_server_certificate(data)
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), None)
        self.assertEqual(_load_cert(cert_path).public_key(), key.public_key())

    def test_lives_90_days_and_is_remade_in_its_last_30(self) -> None:
        data = self.mktemp()
        key_path, cert_path = tls.ensure_server_certificate(data)
        cert = _load_cert(cert_path)
        self.assertEqual((cert.not_valid_after_utc - cert.not_valid_before_utc).days, 90)
        # The same key, 31 days from its end: kept; 29 days from its end: made again.
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), None)
        for days_left, remade in ((31, False), (29, True)):
            _write_cert_pair_at(key_path, cert_path, key, _self_signed(key, days_left))
            before = Path(cert_path).read_bytes()
            tls.ensure_server_certificate(data)
            self.assertEqual(Path(cert_path).read_bytes() != before, remade, days_left)
        fresh = _load_cert(cert_path)
        self.assertEqual(fresh.public_key(), key.public_key())  # journalists may have pinned the key
        self.assertGreater(fresh.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc),
                           datetime.timedelta(days=89))

    def test_an_admins_certificate_is_never_replaced(self) -> None:
        # Issued by the newsroom's CA and nearly expired: status and an event warn; the server
        # must not swap it for a self-signed one that browsers would refuse.
        tmp = self.mktemp()
        ca_dir = os.path.join(tmp, "ca")
        ca.init_ca(ca_dir)
        data = os.path.join(tmp, "data")
        os.makedirs(os.path.join(data, "tls"))
        cert_path = os.path.join(data, "tls", "server.pem")
        ca.issue_server_cert(ca_dir, ["10.8.0.1"], cert_path, days=10)
        before = Path(cert_path).read_bytes()
        tls.ensure_server_certificate(data)
        self.assertEqual(Path(cert_path).read_bytes(), before)


def _self_signed(key: Any, days_left: int) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "localhost")])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days_left)).sign(key, hashes.SHA256()))


def _write_cert_pair_at(key_path: str, cert_path: str, key: Any, cert: x509.Certificate) -> None:
    Path(key_path).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    Path(cert_path).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
