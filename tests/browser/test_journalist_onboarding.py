"""A journalist's first visit in a real Chromium (issue 12, "Certificates and onboarding").

The browser gets exactly what the README tells a journalist to import: their ``NAME.p12``
(Your Certificates) and the newsroom CA (Authorities, trusted to identify websites). Nothing
about the server's own certificate, no ``--ignore-certificate-errors``, no insecure-certs
switch. Because the same offline CA signed the server's certificate, the login page loads with
no warning. Without the CA, the same browser shows Chromium's certificate warning (the control
that shows this test can fail). With ``--journalist-explain-missing-cert``, a browser without
the ``.p12`` gets the one static explanation page.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from tests._support import add_journalist, issue_client_cert, start_journalist_server
from tests.browser._chromium import DESKTOP, quit_driver, require_chromium, screenshot, start_driver
from tests.browser.test_journalist_browser import AUTO_SELECT_PREF, ca_common_name, make_nss_home, require_nss_tools


class OnboardingTests(unittest.TestCase):
    timeout = 90

    @inlineCallbacks
    def start(self, **overrides):
        require_chromium()
        require_nss_tools()
        self.server = yield start_journalist_server(self, **overrides)
        self.url = self.server.journalist_url
        self.ca_pem = os.path.join(self.server.ca_dir, "ca.pem")
        issue_client_cert(self.server, "alice")
        self.p12 = os.path.join(self.server.data_dir, "clients", "alice.p12")
        yield add_journalist(self.server, "alice")
        self.tempdir = tempfile.mkdtemp(prefix="dd-onboard-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)

    @inlineCallbacks
    def visit(self, *, ca: bool, p12: bool, shot: str) -> tuple[str, str]:
        """A fresh Chromium with only what is asked for imported: -> (title, page source) of GET /."""
        home = make_nss_home(self.tempdir, self.ca_pem if ca else None, self.p12 if p12 else None)
        rule = {"pattern": self.url, "filter": {"ISSUER": {"CN": ca_common_name(self.ca_pem)}}}
        driver = yield deferToThread(start_driver, DESKTOP, extra_prefs={AUTO_SELECT_PREF: [json.dumps(rule)]},
                                     env=dict(os.environ, HOME=home), page_load_timeout=15,
                                     accept_insecure_certs=False)
        self.addCleanup(deferToThread, quit_driver, driver)

        def load() -> tuple[str, str]:
            driver.get(self.url + "/")
            screenshot(driver, shot)
            return driver.title, driver.page_source

        return (yield deferToThread(load))

    @inlineCallbacks
    def test_the_p12_and_the_ca_are_all_a_browser_needs(self):
        yield self.start()
        title, html = yield self.visit(ca=True, p12=True, shot="journalist-onboarding-login")
        self.assertNotIn("Privacy error", title)
        self.assertNotRegex(html, r"ERR_CERT_[A-Z_]+")
        self.assertIn("Journalist log in", html)
        # The control: the same browser without the CA gets Chromium's warning.
        title, html = yield self.visit(ca=False, p12=True, shot="journalist-onboarding-no-ca")
        self.assertEqual(title, "Privacy error")
        self.assertIn("ERR_CERT_AUTHORITY_INVALID", html)
        self.assertNotIn("Journalist log in", html)

    @inlineCallbacks
    def test_explanation_page_without_a_certificate_when_enabled(self):
        yield self.start(journalist_explain_missing_cert=True)
        title, html = yield self.visit(ca=True, p12=False, shot="journalist-missing-certificate")
        self.assertEqual(title, "Newsroom certificate needed")
        self.assertIn("This interface needs your newsroom certificate; ask your admin.", html)
        self.assertIsNone(re.search(r"<form|csrf_token", html))
