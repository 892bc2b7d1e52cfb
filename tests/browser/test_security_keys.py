"""Security keys (issue 30) in a real headless Chromium, with WebDriver's virtual authenticator
(CTAP2 over USB, no resident keys, user verification available): enrol a key, log in with the
passphrase and a touch; a second key; removal; a clone (its counter going backwards) refused and
reported; a phishing page on another origin refused; an account with keys cannot log in with
TOTP; a browser without WebAuthn is told so. axe-core checks every new page at WCAG 2.1 AA.

Chromium reaches the journalist listener as ``https://localhost:PORT``: WebAuthn needs a host
name (never an IP address), and the demo layout's server certificate names ``localhost``. The
client certificate and the CA come from a private NSS database, as in ``test_journalist_browser``.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import tempfile

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest
from twisted.web.resource import Resource
from twisted.web.server import Site

from deaddrop.web.journalist import key_pages
from tests._support import (
    ApiClient, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events,
    start_journalist_server, wait_until,
)
from tests.browser import test_journalist_browser as jb
from tests.browser import test_source_browser as sb
from tests.browser._chromium import DESKTOP, follow, quit_driver, require_chromium, screenshot, start_driver

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.virtual_authenticator import Credential, VirtualAuthenticatorOptions
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # require_chromium() skips with the reason
    pass


def _key_options() -> "VirtualAuthenticatorOptions":
    return VirtualAuthenticatorOptions(protocol="ctap2", transport="usb", has_resident_key=False,
                                       has_user_verification=True, is_user_consenting=True, is_user_verified=True)


def _copy(credential: "Credential", sign_count: int) -> "Credential":
    """A key's secret as another authenticator would hold it, its counter at ``sign_count``."""
    def raw(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return Credential.create_non_resident_credential(raw(credential.id), credential.rp_id,
                                                     raw(credential.private_key), sign_count)


def _text(driver, selector: str = "main") -> str:
    return driver.find_element(By.CSS_SELECTOR, selector).text


def _path(driver) -> str:
    return "/" + driver.current_url.split("/", 3)[3]


class _PhishingPage(Resource):
    """A page on another origin (``http://localhost:OTHER``: WebAuthn allows ``localhost`` as the
    relying party there too) that asks the victim's key for an assertion with options relayed
    from the real server, and shows the answer for the attacker to post."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.options = "{}"

    def render_GET(self, request):
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return f"""<!DOCTYPE html><title>phish</title><pre id=out></pre><button id=go>go</button><script>
const o = {self.options};
const dec = s => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((s.length + 3) % 4)),
                                 c => c.charCodeAt(0));
const enc = b => btoa(String.fromCharCode(...new Uint8Array(b))).replace(/\\+/g, '-').replace(/\\//g, '_')
                 .replace(/=+$/, '');
document.getElementById('go').onclick = () => {{
  o.challenge = dec(o.challenge);
  o.allowCredentials.forEach(c => c.id = dec(c.id));
  navigator.credentials.get({{publicKey: o}}).then(c => {{
    document.getElementById('out').textContent = JSON.stringify({{id: c.id, rawId: enc(c.rawId), type: c.type,
      clientExtensionResults: {{}}, response: {{clientDataJSON: enc(c.response.clientDataJSON),
      authenticatorData: enc(c.response.authenticatorData), signature: enc(c.response.signature)}}}});
  }}, e => document.getElementById('out').textContent = 'error ' + e.name);
}};
</script>""".encode()


class SecurityKeyBrowserTests(unittest.TestCase):
    timeout = 240

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        jb.require_nss_tools()
        self.server = yield start_journalist_server(self)
        self.port = int(self.server.journalist_url.rsplit(":", 1)[1])
        self.url = f"https://localhost:{self.port}"
        self.client = issue_client_cert(self.server, "alice")
        self.p12 = os.path.join(self.server.data_dir, "clients", "alice.p12")
        self.alice = yield add_journalist(self.server, "alice", admin=True)
        self.device = TotpDevice(self.server, self.alice.totp_secret)
        self.tempdir = tempfile.mkdtemp(prefix="dd-keys-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)
        self.violations: dict[str, list] = {}

    @inlineCallbacks
    def _driver(self, before_pages: str | None = None):
        home = jb.make_nss_home(self.tempdir, self.server.server_cert, self.p12)
        rule = {"pattern": self.url, "filter": {"ISSUER": {"CN": jb.ca_common_name(
            os.path.join(self.server.ca_dir, "ca.pem"))}}}
        driver = yield deferToThread(start_driver, DESKTOP, javascript=True,
                                     extra_prefs={jb.AUTO_SELECT_PREF: [json.dumps(rule)]},
                                     env=dict(os.environ, HOME=home), page_load_timeout=20)
        self.addCleanup(deferToThread, quit_driver, driver)
        if before_pages:
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": before_pages})
        return driver

    def _events(self, name: str) -> list[dict]:
        return [e for e in security_events(self.server) if e["event"] == name]

    # -- blocking steps (run in a thread) ----------------------------------------------------

    def _page(self, driver, name: str) -> str:
        """Screenshot, axe at WCAG 2.1 AA, no script but the one named by the page's CSP nonce."""
        screenshot(driver, f"journalist-keys-{name}")
        self.violations[name] = [v["id"] for v in sb._axe_violations(driver)]
        return _text(driver)

    def _password_step(self, driver, code: str = "") -> None:
        driver.get(self.url + "/login")
        driver.find_element(By.ID, "username").send_keys("alice")
        driver.find_element(By.ID, "passphrase").send_keys(self.alice.passphrase)
        if code:
            driver.find_element(By.ID, "one_time_code").send_keys(code)
        follow(driver, "form[action='/login'] button[type=submit]")

    def _touch(self, driver) -> None:
        """Press the page's key button; the script sends the form once the key answered."""
        follow(driver, "[data-webauthn-start]")

    def _enrol(self, driver, name: str, shot: str | None = None) -> str:
        driver.get(self.url + "/account/keys/new")
        if shot:
            self._page(driver, shot)
        driver.find_element(By.ID, "key-name").send_keys(name)
        self._touch(driver)
        self.assertEqual(_path(driver), "/account")
        return _text(driver)

    def _log_out(self, driver) -> None:
        follow(driver, "header form[action='/logout'] button")
        self.assertEqual(_path(driver), "/login")

    def _key_login(self, driver, shot: str | None = None) -> None:
        self._password_step(driver)
        self.assertEqual(_path(driver), "/login/key")
        if shot:
            self._page(driver, shot)
        self._touch(driver)

    # -- the tests -------------------------------------------------------------------------------

    @inlineCallbacks
    def test_enrol_log_in_second_key_removal_and_a_clone(self):
        driver = yield self._driver()
        code = self.device.code()

        def first_key() -> dict:
            driver.add_virtual_authenticator(_key_options())
            self._password_step(driver, code)
            self.assertEqual(_path(driver), "/sources")
            driver.get(self.url + "/account")
            self._page(driver, "account-without-keys")
            text = self._enrol(driver, "blue YubiKey", shot="enrol")
            self.assertIn("Registered blue YubiKey", text)
            [row] = driver.find_elements(By.CSS_SELECTOR, "#security-keys tbody tr")
            self.assertIn("blue YubiKey", row.text)
            self.assertRegex(row.text, r"[0-9a-f]{8}-[0-9a-f]{4}-")  # the AAGUID, shown
            self._page(driver, "account-with-a-key")
            self._log_out(driver)
            self._key_login(driver, shot="login-key")
            self.assertEqual(_path(driver), "/sources")
            # After a key login: recovery codes and an API code, each shown once.
            driver.get(self.url + "/account")
            follow(driver, "form[action='/account/recovery-codes'] button")
            self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "#codes li")), 10)
            self._page(driver, "recovery-codes")
            driver.get(self.url + "/account")
            follow(driver, "form[action='/account/api-code'] button")
            self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "#codes li")), 1)
            self._page(driver, "api-code")
            [blue] = driver.get_credentials()
            return blue

        blue = yield deferToThread(first_key)
        self.assertEqual([e.get("count") for e in self._events("journalist.key.registered")], [1])
        self.assertEqual(len(self._events("journalist.login.ok")), 2)

        def second_key_and_removal() -> Credential:
            driver.remove_virtual_authenticator()
            driver.add_virtual_authenticator(_key_options())  # another key: the backup
            self.assertIn("Registered backup key", self._enrol(driver, "backup key"))
            self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "#security-keys tbody tr")), 2)
            self._log_out(driver)
            self._key_login(driver)
            self.assertEqual(_path(driver), "/sources")
            driver.get(self.url + "/account")
            follow(driver, "#security-keys tbody tr:first-child button.danger")  # blue YubiKey
            self.assertEqual(_text(driver, "h1"), "Remove blue YubiKey?")
            self._page(driver, "remove-confirm")
            follow(driver, "main form button.danger")
            self.assertIn("Removed blue YubiKey. Your other sessions have ended.", _text(driver, ".flashes"))
            self.assertEqual([r.text.split("\n")[0] for r in
                              driver.find_elements(By.CSS_SELECTOR, "#security-keys tbody tr td.lead")],
                             ["backup key"])
            self._log_out(driver)
            [backup] = driver.get_credentials()
            # The removed key is no longer one the server asks for: the browser has nothing to sign.
            driver.remove_virtual_authenticator()
            driver.add_virtual_authenticator(_key_options())
            driver.add_credential(_copy(blue, blue.sign_count))
            self._password_step(driver)
            driver.find_element(By.CSS_SELECTOR, "[data-webauthn-start]").click()
            WebDriverWait(driver, 20).until(lambda d: "not touched in time" in _text(d, "#webauthn-status"))
            self.assertEqual(_path(driver), "/login/key")
            return backup

        backup = yield deferToThread(second_key_and_removal)
        self.assertEqual([e.get("count") for e in self._events("journalist.key.removed")], [1])

        def a_clone() -> str:
            # The backup key's secret, copied into another authenticator whose counter starts
            # again from where it was when copied (earlier than the original's uses since).
            driver.remove_virtual_authenticator()
            driver.add_virtual_authenticator(_key_options())
            driver.add_credential(_copy(backup, 0))
            self._key_login(driver)
            return _text(driver)

        text = yield deferToThread(a_clone)
        self.assertIn(key_pages.KEY_LOGIN_ERROR, text)
        self.assertEqual([e["username"] for e in self._events("journalist.key.counter_regression")], ["alice"])
        self.assertIn("key_counter_regression", [e.get("reason") for e in self._events("journalist.login.fail")])

        # An account with keys cannot log in with TOTP: a right code only leads to the key step,
        # on the web, and the API refuses it.
        def totp() -> str:
            driver.delete_all_cookies()
            self._password_step(driver, self.device.code())
            path = _path(driver)
            driver.get(self.url + "/sources")
            return path + " then " + _path(driver)

        self.assertEqual((yield deferToThread(totp)), "/login/key then /login")
        api = ApiClient(self.server, self.client)
        self.addCleanup(api.close)
        status, data = yield api.json("POST", "/api/v1/token", {
            "username": "alice", "passphrase": self.alice.passphrase, "one_time_code": self.device.code()})
        self.assertEqual(status, 403)
        self.assertEqual({name: found for name, found in self.violations.items() if found}, {})
        self.assertEqual(len(self.violations), 7)

    @inlineCallbacks
    def test_an_assertion_made_on_another_origin_is_refused(self):
        driver = yield self._driver()
        code = self.device.code()

        def enrol() -> None:
            driver.add_virtual_authenticator(_key_options())
            self._password_step(driver, code)
            self._enrol(driver, "blue YubiKey")

        yield deferToThread(enrol)
        # The attacker has alice's passphrase (and a certificate to reach the server): the
        # server's key step hands out a challenge, which a phishing page relays to alice's browser.
        attacker = JournalistBrowser(self.server, self.client)
        self.addCleanup(attacker.close)
        response, html = yield attacker.get("/login")
        response, html = yield attacker.post("/login", data={
            "csrf_token": attacker.csrf(html), "username": "alice", "passphrase": self.alice.passphrase,
            "one_time_code": ""})
        # The attacker's client reaches the server by its address: ask for the key step by name.
        response, html = yield attacker.get("/login/key", headers={"Host": [f"localhost:{self.port}"]})
        self.assertEqual(response.code, 200, html[:500])
        options = re.search(r'data-options="([^"]+)"', html).group(1).replace("&quot;", '"')
        phishing = _PhishingPage()
        phishing.options = options
        port = reactor.listenTCP(0, Site(phishing), interface="127.0.0.1")
        self.addCleanup(port.stopListening)

        def phish() -> str:
            driver.get(f"http://localhost:{port.getHost().port}/")
            driver.find_element(By.ID, "go").click()
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "out").text)
            return driver.find_element(By.ID, "out").text

        relayed = yield deferToThread(phish)
        self.assertTrue(relayed.startswith("{"), relayed)  # the key signed, for the phishing origin
        self.assertIn(f'"origin":"http://localhost:{port.getHost().port}"',
                      base64.urlsafe_b64decode(
                          json.loads(relayed)["response"]["clientDataJSON"] + "==").decode())
        response, html = yield attacker.post("/login/key", data={
            "csrf_token": attacker.csrf(html), "credential": relayed}, headers={"Host": [f"localhost:{self.port}"]})
        self.assertEqual(response.code, 403)
        self.assertIn(key_pages.KEY_LOGIN_ERROR, html)
        response, html = yield attacker.get("/sources")
        self.assertNotIn("<h1>Sources</h1>", html)
        yield wait_until(lambda: self._events("journalist.login.fail"))
        self.assertEqual([e.get("reason") for e in self._events("journalist.login.fail")], ["wrong_origin"])

    @inlineCallbacks
    def test_a_browser_without_webauthn_is_told_so(self):
        driver = yield self._driver(before_pages="delete window.PublicKeyCredential;")
        code = self.device.code()

        def visit() -> tuple[bool, bool]:
            self._password_step(driver, code)
            driver.get(self.url + "/account/keys/new")
            missing = driver.find_element(By.ID, "webauthn-missing")
            self._page(driver, "enrol-without-webauthn")
            return missing.is_displayed(), driver.find_element(By.CSS_SELECTOR, "[data-webauthn-start]").is_enabled()

        shown, enabled = yield deferToThread(visit)
        self.assertEqual((shown, enabled), (True, False))
        self.assertEqual(self.violations, {"enrol-without-webauthn": []})
