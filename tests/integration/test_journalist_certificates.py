"""The journalist listener on a real server: one CA for both sides, HSTS, and the optional
explanation page for a browser without a client certificate (issues 10 and 12)."""
from __future__ import annotations

import os

from cryptography import x509
from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.transport import tls
from deaddrop.web.journalist import gate
from tests._support import (
    ApiClient, JournalistBrowser, issue_client_cert, security_events, start_journalist_server,
)

EXPLANATION = "This interface needs your newsroom certificate; ask your admin."


class _Server:
    @inlineCallbacks
    def start(self, **overrides):
        self.server = yield start_journalist_server(self, **overrides)

    def browser(self, client) -> JournalistBrowser:
        b = JournalistBrowser(self.server, client)
        self.addCleanup(b.close)
        return b


class OneCATests(_Server, unittest.TestCase):
    @inlineCallbacks
    def test_demo_server_certificate_is_issued_by_the_journalists_ca(self):
        yield self.start()
        chain = x509.load_pem_x509_certificates(open(os.path.join(self.server.data_dir, "tls", "server.pem"), "rb").read())
        ca_cert = x509.load_pem_x509_certificate(open(os.path.join(self.server.ca_dir, "ca.pem"), "rb").read())
        chain[0].verify_directly_issued_by(ca_cert)
        self.assertTrue(tls.signed_by(os.path.join(self.server.data_dir, "tls", "server.pem"),
                                      os.path.join(self.server.ca_dir, "ca.pem")))
        # A client that trusts only the CA (tests._support: server.server_cert is ca.pem) gets through.
        response, html = yield self.browser(issue_client_cert(self.server, "alice")).get("/login")
        self.assertEqual(response.code, 200)

    @inlineCallbacks
    def test_every_response_carries_hsts(self):
        yield self.start()
        b = self.browser(issue_client_cert(self.server, "alice"))
        for path in ("/login", "/sources", "/no-such-page"):
            response, _ = yield b.get(path, follow=False)
            self.assertEqual(response.headers.getRawHeaders(b"strict-transport-security"), [gate.HSTS], path)
        api = ApiClient(self.server, issue_client_cert(self.server, "bob"))
        self.addCleanup(api.close)
        response, _ = yield api.request("GET", "/api/v1/sources")
        self.assertEqual(response.headers.getRawHeaders(b"strict-transport-security"), [gate.HSTS])


class ExplainMissingCertificateTests(_Server, unittest.TestCase):
    @inlineCallbacks
    def test_off_by_default_the_handshake_refuses(self):
        yield self.start()
        with self.assertRaises(Exception):
            yield self.browser(None).get("/")
        self.assertIn("no_certificate", [e.get("reason") for e in security_events(self.server)
                                         if e["event"] == tls.REFUSED])

    @inlineCallbacks
    def test_on_one_static_page_and_every_other_path_still_refuses(self):
        yield self.start(journalist_explain_missing_cert=True)
        b = self.browser(None)
        response, html = yield b.get("/", follow=False)
        self.assertEqual(response.code, 200)
        self.assertIn(EXPLANATION, html)
        self.assertEqual(response.headers.getRawHeaders(b"strict-transport-security"), [gate.HSTS])
        self.assertIsNone(response.headers.getRawHeaders(b"set-cookie"))
        self.assertNotIn("<form", html)
        for method, path in [("GET", "/login"), ("GET", "/sources"), ("POST", "/login"), ("GET", "/static/style.css"),
                             ("POST", "/api/v1/token"), ("GET", "/api/v1/sources"), ("GET", "/?next=/sources")]:
            response = yield b.client.request(method, b.url(path), allow_redirects=False)
            body = yield response.text()
            self.assertEqual(response.code, 200 if path.startswith("/?") else 403, (method, path))
            self.assertEqual(body, gate.MISSING_CERT_PAGE.decode(), (method, path))
            self.assertIsNone(response.headers.getRawHeaders(b"set-cookie"), (method, path))
        self.assertEqual(list(b.cookies), [])
        self.assertEqual(len(self.server.service.journalist_sessions), 0)  # no route ran
        refused = [e for e in security_events(self.server) if e["event"] == tls.REFUSED]
        self.assertTrue(refused)
        self.assertEqual({e["reason"] for e in refused}, {"no_certificate"})
        # With a certificate, the same server is the full interface.
        response, html = yield self.browser(issue_client_cert(self.server, "alice")).get("/login")
        self.assertEqual(response.code, 200)
        self.assertIn("passphrase", html.lower())
        self.assertNotIn(EXPLANATION, html)

    @inlineCallbacks
    def test_on_a_bad_certificate_is_still_refused_in_the_handshake(self):
        from deaddrop.transport import ca
        from tests._support import client_pems

        yield self.start(journalist_explain_missing_cert=True)
        other = os.path.join(self.server.data_dir, "other-ca")
        ca.init_ca(other)
        r = ca.issue_client_cert(other, "mallory", os.path.join(other, "m.p12"), b"pw")
        with self.assertRaises(Exception):
            yield self.browser(client_pems(r["p12"], b"pw")).get("/")
        self.assertIn("unknown_ca", [e.get("reason") for e in security_events(self.server) if e["event"] == tls.REFUSED])


def _padded(pem: bytes, size: int = 8192) -> bytes:
    assert len(pem) < size
    return pem + b"\n" * (size - len(pem))


def _keep_busy_until_closed(url: str, client: tuple[str, str], ca_pem: str, limit: float) -> tuple[float, int]:
    """One mutual-TLS keep-alive connection that asks for a page every half second until the
    server closes it. -> (seconds it stayed open, pages answered). Blocking: run in a thread."""
    import socket
    import ssl
    import time

    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca_pem)
    ctx.check_hostname = False
    ctx.load_cert_chain(client[1], client[0])
    raw = socket.create_connection((host, int(port)), timeout=10)
    conn = ctx.wrap_socket(raw)
    opened, answered = time.monotonic(), 0
    try:
        while time.monotonic() - opened < limit:
            try:
                conn.sendall(b"GET /login HTTP/1.1\r\nHost: journalists\r\n\r\n")
                data = b""
                while b"</html>" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return time.monotonic() - opened, answered
                    data += chunk
            except (ssl.SSLError, OSError):
                return time.monotonic() - opened, answered
            answered += 1
            time.sleep(0.5)
        raise AssertionError(f"the connection was still open after {limit} s")
    finally:
        conn.close()


class ServerOptionsTests(_Server, unittest.TestCase):
    """What the option table promises, on the server as ``twistd deaddrop`` builds it."""

    timeout = 60

    @inlineCallbacks
    def test_sighup_reloads_the_crl_and_closes_the_revoked_connections(self):
        import signal
        import time as _time

        from twisted.internet import reactor
        from twisted.internet.task import deferLater
        from twisted.internet.threads import deferToThread

        from deaddrop.transport import ca
        from tests._support import short_tempdir, wait_until

        data_dir = short_tempdir()
        ca_dir = os.path.join(data_dir, "ca")
        ca.init_ca(ca_dir)
        crl = os.path.join(ca_dir, "crl.pem")
        with open(crl, "rb") as f:  # fixed size: the next CRL fits the same file exactly
            padded = _padded(f.read())
        with open(crl, "wb") as f:
            f.write(padded)
        # Absorbs the signal should the server not handle it (the default would end this process).
        self.addCleanup(signal.signal, signal.SIGHUP, signal.signal(signal.SIGHUP, lambda signum, frame: None))
        yield self.start(data_dir=data_dir)
        alice = issue_client_cert(self.server, "alice")
        response, _ = yield self.browser(alice).get("/login")
        self.assertEqual(response.code, 200)
        reloads = lambda: len([e for e in security_events(self.server) if e["event"] == "crl.reloaded"])  # noqa: E731
        before = reloads()
        # New times on the same CRL (the daily file-time normalisation gives them) reload nothing.
        os.utime(crl, (86400.0 * 20000, 86400.0 * 20000))
        yield deferLater(reactor, tls.POLL_SECONDS + 1.0, lambda: None)
        self.assertEqual(reloads(), before)

        # Revoke alice; the new CRL goes into the same file, same size, same times: only a
        # SIGHUP can tell the server (its poll compares inode, size and mtime).
        open_connection = deferToThread(_keep_busy_until_closed, self.server.journalist_url, alice,
                                        self.server.server_cert, 40.0)
        ca.revoke(ca_dir, "alice")
        fresh = os.path.join(short_tempdir(), "crl.pem")
        ca.write_crl(ca_dir, fresh)
        st = os.stat(crl)
        with open(fresh, "rb") as f:
            new = _padded(f.read())
        with open(crl, "r+b") as f:
            f.write(new)
        os.utime(crl, ns=(st.st_atime_ns, st.st_mtime_ns))
        self.assertEqual((os.stat(crl).st_ino, os.stat(crl).st_size, os.stat(crl).st_mtime_ns),
                         (st.st_ino, st.st_size, st.st_mtime_ns))
        yield deferLater(reactor, tls.POLL_SECONDS + 1.0, lambda: None)
        self.assertEqual(reloads(), before)  # the poll did not see it
        response, _ = yield self.browser(alice).get("/login")
        self.assertEqual(response.code, 200)  # so alice still gets in

        sent = _time.monotonic()
        os.kill(os.getpid(), signal.SIGHUP)
        yield wait_until(lambda: reloads() > before, timeout=5)
        self.assertLess(_time.monotonic() - sent, tls.POLL_SECONDS)
        stayed_open, answered = yield open_connection
        self.assertGreater(answered, 2)
        self.assertLess(stayed_open, 30)
        closed = [e for e in security_events(self.server) if e["event"] == "tls.connection.closed"]
        self.assertEqual({e["reason"] for e in closed}, {"revoked"})  # ours, and the browsers' kept-alive ones
        with self.assertRaises(Exception):
            yield self.browser(alice).get("/login")

    @inlineCallbacks
    def test_journalist_connection_max_age(self):
        from twisted.internet.threads import deferToThread

        yield self.start(journalist_connection_max_age=10.0)
        alice = issue_client_cert(self.server, "alice")
        stayed_open, answered = yield deferToThread(
            _keep_busy_until_closed, self.server.journalist_url, alice, self.server.server_cert, 40.0)
        # Closed at its age (checked every POLL_SECONDS), however busy it was.
        self.assertGreaterEqual(stayed_open, 10.0)
        self.assertLess(stayed_open, 10.0 + tls.POLL_SECONDS + 3.0)
        self.assertGreaterEqual(answered, 15)
        closed = [e for e in security_events(self.server) if e["event"] == "tls.connection.closed"]
        self.assertEqual([e["reason"] for e in closed], ["max_age"])
