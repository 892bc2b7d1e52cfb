"""Sealed, expiring, cookie-bound form tokens: CSRF and pending state with no server state.

An anonymous visitor (the login form, a freshly generated codename) gets no server-side session:
a flood of anonymous GETs must cost us nothing we keep. What such a form needs between the GET
and its POST travels in the form itself, sealed (XSalsa20-Poly1305: encrypted and authenticated)
under a key that only this process holds, in memory, replaced every ``lifetime`` seconds.

The sealing key of each token is derived from that key, the token's purpose (a login token is no
creation token) and the visitor's binding cookie (random, SameSite=Strict, never stored here):
a token lifted into another browser or another site's form opens under no key. Neither is
carried in the token, which holds only a nonce, a MAC, an expiry and the optional secret (the
codename that ``/generate`` offered): about 60 characters, or 130 with a codename.

The secret is never in a cookie, on disk or in a log; it cannot be read from the page's token
without the in-memory key, and is gone for good once that key rotates out (after at most two
lifetimes).
"""
from __future__ import annotations

import base64
import hashlib
import secrets
import struct
import time
from typing import Callable

import nacl.exceptions
import nacl.secret
import nacl.utils

_EXPIRY = struct.Struct(">I")  # whole seconds since the epoch (good until 2106)
# A codename of any allowed length seals to far less; longer input is not ours.
_MAX_TOKEN_CHARS = 1024


def new_binding() -> str:
    """A fresh value for a visitor's binding cookie: random, carries nothing. The "a." prefix
    keeps it from looking like a session token (an expired session gets its own notice)."""
    return "a." + secrets.token_urlsafe(24)


class FormTokens:
    def __init__(self, lifetime: float, clock: Callable[[], float] = time.time) -> None:
        self.lifetime = lifetime
        self._clock = clock
        self._keys: list[bytes] = [nacl.utils.random(nacl.secret.SecretBox.KEY_SIZE)]
        self._rotate_at = clock() + lifetime

    def _current_keys(self) -> list[bytes]:
        now = self._clock()
        if now >= self._rotate_at:
            # The previous key stays one more period (tokens it sealed may be unexpired);
            # anything older can no longer be opened by anyone.
            fresh = nacl.utils.random(nacl.secret.SecretBox.KEY_SIZE)
            self._keys = [fresh] if now >= self._rotate_at + self.lifetime else [fresh, self._keys[0]]
            self._rotate_at = now + self.lifetime
        return self._keys

    def issue(self, purpose: str, binding: str, secret: str = "") -> str:
        """A token for a form of ``purpose``, opened only with the same ``binding``."""
        plain = _EXPIRY.pack(int(self._clock() + self.lifetime)) + secret.encode("utf-8")
        sealed = _box(self._current_keys()[0], purpose, binding).encrypt(plain)
        return base64.urlsafe_b64encode(bytes(sealed)).decode("ascii").rstrip("=")

    def open(self, token: str | None, purpose: str, binding: str | None) -> str | None:
        """The token's secret ("" if none) if we sealed it for ``purpose`` and ``binding`` and it
        has not expired; else None."""
        if not token or not binding or len(token) > _MAX_TOKEN_CHARS:
            return None
        try:
            sealed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, UnicodeEncodeError):
            return None
        for key in self._current_keys():
            try:
                plain = _box(key, purpose, binding).decrypt(sealed)
            except (nacl.exceptions.CryptoError, ValueError, TypeError):
                continue
            if len(plain) < _EXPIRY.size or self._clock() > _EXPIRY.unpack_from(plain)[0]:
                return None
            try:
                return plain[_EXPIRY.size:].decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None


def _box(key: bytes, purpose: str, binding: str) -> nacl.secret.SecretBox:
    # Purposes are fixed ASCII names without NUL, so purpose + NUL + binding is unambiguous.
    context = purpose.encode("ascii") + b"\0" + binding.encode("utf-8", "replace")
    derived = hashlib.blake2b(context, key=key, digest_size=nacl.secret.SecretBox.KEY_SIZE,
                              person=b"dd-form-token").digest()
    return nacl.secret.SecretBox(derived)
