"""The journalist listener on a real server: one CA for both sides, HSTS, and the optional
explanation page for a browser without a client certificate (issues 10 and 12)."""
from __future__ import annotations

import os

from cryptography import x509
from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.web.journalist import gate, tls
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
        from deaddrop.admin import ca
        from tests._support import client_pems

        yield self.start(journalist_explain_missing_cert=True)
        other = os.path.join(self.server.data_dir, "other-ca")
        ca.init_ca(other)
        r = ca.issue_client_cert(other, "mallory", os.path.join(other, "m.p12"), b"pw")
        with self.assertRaises(Exception):
            yield self.browser(client_pems(r["p12"], b"pw")).get("/")
        self.assertIn("unknown_ca", [e.get("reason") for e in security_events(self.server) if e["event"] == tls.REFUSED])
