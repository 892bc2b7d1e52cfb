# -*- test-case-name: tests.test_security_keys -*-
"""WebAuthn security keys for journalist accounts (issue 30, item 1), with python-fido2.

The relying party is the journalist interface's own origin: a host name the server's
certificate (``cert server --host``) names, reached over https on the listener's own port. The
browser binds every signature to the origin it talked to, and the server checks that origin on
every registration and every assertion: a page on any other origin (a phishing copy, a relay on
another port) gets signatures the server refuses.

Attestation is not asked for (``none``), but the key's AAGUID (its model) is recorded and shown.
User presence (a touch) is required; user verification (a PIN) preferred, not required. Keys
are non-resident: the server lists the account's keys after the passphrase.

Each key's signature counter is kept; an assertion whose counter is not above it (a key that
counts, going backwards: a clone) is refused and reported. Keys that never count (counter 0
every time) are accepted as such.

The functions here are blocking but cheap (one signature check); the store's part runs on the
database thread inside one transaction, so two logins cannot both pass with one counter value.
"""
from __future__ import annotations

import sqlite3
import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any, Mapping

from fido2.server import Fido2Server
from fido2.webauthn import (
    AttestationConveyancePreference, AttestedCredentialData, AuthenticationResponse, AuthenticatorData,
    PublicKeyCredentialRpEntity, PublicKeyCredentialUserEntity, RegistrationResponse, ResidentKeyRequirement, UserVerificationRequirement,
)

from deaddrop.store import factor_queries as fq

MAX_KEYS = 10  # per account
MAX_NAME_CHARS = 64
MAX_RESPONSE_CHARS = 16_384  # a browser's JSON for one key; anything longer is refused unread
CEREMONY_SECONDS = 300  # a challenge is good this long


class KeyRefused(ValueError):
    """``reason`` is for the security log: ``wrong_origin``, ``bad_key``, ``unknown_key``,
    ``counter_regression``, ``expired``, ``duplicate``, ``too_many``, ``malformed``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RelyingParty:
    """Who the browser must believe it is talking to: ``id`` (a host name) and ``origin``."""

    id: str
    origin: str

    @classmethod
    def for_host(cls, host: str, port: int) -> "RelyingParty":
        host = host.lower()
        return cls(host, f"https://{host}" if port == 443 else f"https://{host}:{port}")

    def server(self, name: str) -> Fido2Server:
        return Fido2Server(PublicKeyCredentialRpEntity(id=self.id, name=name),
                           attestation=AttestationConveyancePreference.NONE,
                           verify_origin=lambda origin: origin == self.origin)


@dataclass(frozen=True)
class SecurityKey:
    id: int
    name: str
    aaguid: str
    rp_id: str
    created_at: float
    last_used_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> "SecurityKey":
        return cls(row["id"], row["name"], row["aaguid"], row["rp_id"], row["created_at"], row["last_used_at"])


def key_name(text: Any) -> str:
    """The name a journalist gives a key ("blue YubiKey"); raises ``ValueError`` with a line for them."""
    name = " ".join(str(text or "").split())
    if not name or len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise ValueError(f"Give the key a name of 1 to {MAX_NAME_CHARS} characters, such as \"blue YubiKey\".")
    return name


def _state(raw: Any) -> dict[str, Any]:
    """The ceremony's state as kept in the session: challenge, user verification, when it began."""
    return {"challenge": raw["challenge"], "user_verification": str(raw["user_verification"] or ""),
            "started": time.time()}


def _check_fresh(state: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``state``, if it is a ceremony's begun in the last ``CEREMONY_SECONDS``."""
    if not state or time.time() - float(state.get("started", 0)) > CEREMONY_SECONDS:
        raise KeyRefused("expired")
    return state


def _fido2_refusal(error: Exception) -> KeyRefused:
    text = str(error)
    if "origin" in text:
        return KeyRefused("wrong_origin")
    if "signature" in text.lower():
        return KeyRefused("bad_key")
    if "Unknown credential" in text:
        return KeyRefused("unknown_key")
    return KeyRefused("malformed")


def _parse(cls: Any, response: Any) -> Any:
    if not isinstance(response, Mapping):
        raise KeyRefused("malformed")
    try:
        return cls.from_dict(response)
    except Exception:  # fido2 raises many kinds for malformed input
        raise KeyRefused("malformed") from None


# -- registration ---------------------------------------------------------------------------

def begin_registration(rp: RelyingParty, site_name: str, journalist_uuid: str, username: str,
                       existing: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    """-> (the options for ``navigator.credentials.create``, as JSON; the state to keep)."""
    options, state = rp.server(site_name).register_begin(
        PublicKeyCredentialUserEntity(name=username, id=uuidlib.UUID(journalist_uuid).bytes, display_name=username),
        credentials=[AttestedCredentialData(c) for c in existing],
        resident_key_requirement=ResidentKeyRequirement.DISCOURAGED,
        user_verification=UserVerificationRequirement.PREFERRED)
    return dict(options)["publicKey"], _state(state)


@dataclass(frozen=True)
class NewKey:
    credential_data: bytes  # AttestedCredentialData: AAGUID, credential id, COSE public key
    credential_id: bytes
    aaguid: str
    sign_count: int


def finish_registration(rp: RelyingParty, site_name: str, state: Mapping[str, Any] | None, response: Any) -> NewKey:
    state = _check_fresh(state)
    registration = _parse(RegistrationResponse, response)
    try:
        auth_data = rp.server(site_name).register_complete(dict(state), registration)
    except ValueError as e:
        raise _fido2_refusal(e) from None
    credential = auth_data.credential_data
    if credential is None:  # (a registration's authenticator data always carries it)
        raise KeyRefused("malformed")
    return NewKey(bytes(credential), bytes(credential.credential_id), str(uuidlib.UUID(bytes=bytes(credential.aaguid))),
                  int(auth_data.counter))


def store_key(conn: sqlite3.Connection, journalist_id: int, rp_id: str, key: NewKey, name: str, now: float) -> int:
    """Raises ``KeyRefused("duplicate")`` for a key already registered (to anyone)."""
    if fq.key_count(conn, journalist_id) >= MAX_KEYS:
        raise KeyRefused("too_many")
    try:
        return fq.insert_key(conn, journalist_id, key.credential_id, rp_id, key.credential_data, key.sign_count,
                             key.aaguid, name, now)
    except sqlite3.IntegrityError:
        raise KeyRefused("duplicate") from None


# -- assertion ------------------------------------------------------------------------------

def begin_assertion(rp: RelyingParty, site_name: str, credentials: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    """-> (the options for ``navigator.credentials.get``, as JSON; the state to keep)."""
    options, state = rp.server(site_name).authenticate_begin(
        [AttestedCredentialData(c) for c in credentials], user_verification=UserVerificationRequirement.PREFERRED)
    return dict(options)["publicKey"], _state(state)


@dataclass(frozen=True)
class UsedKey:
    id: int
    name: str


def verify_assertion(conn: sqlite3.Connection, rp: RelyingParty, site_name: str, journalist_id: int,
                     state: Mapping[str, Any] | None, response: Any, now: float) -> UsedKey:
    """On the database thread, in one transaction: check the signature against the account's
    keys for this relying party, then the counter, then record it. Raises ``KeyRefused``."""
    state = _check_fresh(state)
    assertion = _parse(AuthenticationResponse, response)
    rows = fq.keys_for_login(conn, journalist_id, rp.id)
    by_id = {bytes(r["credential_id"]): r for r in rows}
    row = by_id.get(bytes(assertion.raw_id))
    if row is None:
        raise KeyRefused("unknown_key")
    try:
        rp.server(site_name).authenticate_complete(dict(state), [AttestedCredentialData(row["public_key"])], assertion)
    except ValueError as e:
        raise _fido2_refusal(e) from None
    counter = int(AuthenticatorData(bytes(assertion.response.authenticator_data)).counter)
    stored = int(row["sign_count"])
    if (counter or stored) and counter <= stored:
        raise KeyRefused("counter_regression")
    fq.key_used(conn, row["id"], counter, now)
    return UsedKey(row["id"], row["name"])
