"""A security key in software, for tests that need no browser: it answers WebAuthn options as a
CTAP2 key without a resident key would (ES256, attestation ``none``, a signature counter), and
the browser's part (client data with the origin) is done here too, for any origin asked."""
from __future__ import annotations

import hashlib
import json
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fido2.cose import ES256
from fido2.utils import websafe_decode, websafe_encode
from fido2.webauthn import AttestationObject, AttestedCredentialData, AuthenticatorData

_UP, _AT = 0x01, 0x40


class SoftKey:
    def __init__(self, origin: str, aaguid: bytes = bytes(range(16))) -> None:
        self.origin = origin
        self.aaguid = aaguid
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(32)
        self.counter = 0

    def _client_data(self, kind: str, options: dict, origin: str | None) -> bytes:
        return json.dumps({"type": kind, "challenge": options["challenge"],
                           "origin": origin or self.origin, "crossOrigin": False}).encode()

    def create(self, options: dict, origin: str | None = None) -> dict:
        client_data = self._client_data("webauthn.create", options, origin)
        rp_hash = hashlib.sha256(options["rp"]["id"].encode()).digest()
        credential = AttestedCredentialData.create(self.aaguid, self.credential_id,
                                                   ES256.from_cryptography_key(self.private.public_key()))
        auth_data = AuthenticatorData.create(rp_hash, _UP | _AT, self.counter, credential)
        attestation = AttestationObject.create("none", auth_data, {})
        return {"id": websafe_encode(self.credential_id), "rawId": websafe_encode(self.credential_id),
                "type": "public-key", "clientExtensionResults": {},
                "response": {"clientDataJSON": websafe_encode(client_data),
                             "attestationObject": websafe_encode(bytes(attestation))}}

    def get(self, options: dict, origin: str | None = None, counter: int | None = None) -> dict:
        allowed = [websafe_decode(c["id"]) for c in options.get("allowCredentials") or []]
        assert self.credential_id in allowed, "this key is not one the server asked for"
        self.counter = self.counter + 1 if counter is None else counter
        client_data = self._client_data("webauthn.get", options, origin)
        auth_data = AuthenticatorData.create(hashlib.sha256(options["rpId"].encode()).digest(), _UP, self.counter)
        signature = self.private.sign(bytes(auth_data) + hashlib.sha256(client_data).digest(),
                                      ec.ECDSA(hashes.SHA256()))
        return {"id": websafe_encode(self.credential_id), "rawId": websafe_encode(self.credential_id),
                "type": "public-key", "clientExtensionResults": {},
                "response": {"clientDataJSON": websafe_encode(client_data),
                             "authenticatorData": websafe_encode(bytes(auth_data)),
                             "signature": websafe_encode(signature)}}


def page_options(html: str) -> dict:
    """The WebAuthn options a security key page carries for its script."""
    import html as htmllib
    import re

    return json.loads(htmllib.unescape(re.search(r'data-options="([^"]*)"', html).group(1)))


def by_name(browser, port: int) -> dict:
    """Headers that make a test client ask for the journalist interface by its name, as a browser
    must for security keys (the certificate of the demo layout names ``localhost``)."""
    return {"Host": [f"localhost:{port}"], "User-Agent": [browser.USER_AGENT]}


def enrol(browser, port: int, key: "SoftKey", name: str = "soft key"):
    """Register ``key`` from the account page of the logged-in ``browser`` (a JournalistBrowser)."""
    from twisted.internet.defer import inlineCallbacks

    @inlineCallbacks
    def run():
        response, html = yield browser.get("/account/keys/new", headers=by_name(browser, port))
        response, html = yield browser.post("/account/keys/new", headers=by_name(browser, port), data={
            "csrf_token": browser.csrf(html), "name": name, "credential": json.dumps(key.create(page_options(html)))})
        return response, html

    return run()


def log_in_with_key(browser, port: int, username: str, passphrase: str, key: "SoftKey"):
    """Passphrase, then the key step: -> the last (response, html)."""
    from twisted.internet.defer import inlineCallbacks

    @inlineCallbacks
    def run():
        response, html = yield browser.get("/login", headers=by_name(browser, port))
        response, html = yield browser.post("/login", follow=False, headers=by_name(browser, port), data={
            "csrf_token": browser.csrf(html), "username": username, "passphrase": passphrase, "one_time_code": ""})
        if response.headers.getRawHeaders(b"location") != [b"/login/key"]:
            return response, html
        response, html = yield browser.get("/login/key", headers=by_name(browser, port))
        response, html = yield browser.post("/login/key", headers=by_name(browser, port), data={
            "csrf_token": browser.csrf(html), "credential": json.dumps(key.get(page_options(html)))})
        return response, html

    return run()
