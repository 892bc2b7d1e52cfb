"""What a visitor without a session typed on the login page, carried across a language switch.

The login page's language menu posts the page's own form (see ``SourceInterface.carry_language``):
the codename being typed, and a message carried there from a session that ended, come back on
the login page in the new language after a redirect. A codename is held here as a codename is
anywhere: in memory only, never logged, sealed (XSalsa20-Poly1305) under a key derived from the
browser's binding cookie, which the server does not keep, and a key of this process; found only
by a keyed hash of that cookie; handed back once, and forgotten after ``LIFETIME`` seconds if
never asked for. What is held is bounded (``MAX_BYTES`` in all, the oldest dropped first), and it
is a budget of its own: anonymous visitors cannot push out a logged-in source's kept drafts.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from typing import Callable

import nacl.exceptions
import nacl.secret
import nacl.utils

# From the language menu's POST to the GET it redirects to is a moment; a few minutes cover a
# slow circuit. Never longer: it is a codename.
LIFETIME = 300.0
MAX_BYTES = 16 << 20
# What one entry costs beyond its sealed bytes (the dict slot, the key, the tuple).
_OVERHEAD = 256


class CarriedTexts:
    def __init__(self, lifetime: float = LIFETIME, max_bytes: int = MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lifetime = lifetime
        self.max_bytes = max_bytes
        self.used = 0
        self._clock = clock
        self._key = nacl.utils.random(nacl.secret.SecretBox.KEY_SIZE)
        # Oldest first: expiry and eviction work from the front.
        self._held: OrderedDict[bytes, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def keep(self, binding: str, codename: str, message: str) -> bool:
        """Hold what this browser typed (replacing what it had here); False if too large."""
        self._expire()
        slot = self._slot(binding)
        self._forget(slot)
        if not codename and not message:
            return True
        plain = json.dumps([codename, message], ensure_ascii=False).encode("utf-8")
        sealed = bytes(self._box(binding).encrypt(plain))
        size = len(sealed) + _OVERHEAD
        if size > self.max_bytes:
            return False
        while self._held and self.used + size > self.max_bytes:
            self._forget(next(iter(self._held)))
        self._held[slot] = (self._clock() + self.lifetime, sealed)
        self.used += size
        return True

    def take(self, binding: str | None) -> tuple[str, str] | None:
        """(codename, message) this browser left here, once; None if nothing (or expired)."""
        self._expire()
        if not binding:
            return None
        slot = self._slot(binding)
        held = self._held.get(slot)
        if held is None:
            return None
        self._forget(slot)
        try:
            codename, message = json.loads(self._box(binding).decrypt(held[1]).decode("utf-8"))
        except (nacl.exceptions.CryptoError, ValueError, TypeError):
            return None
        return str(codename), str(message)

    def _expire(self) -> None:
        now = self._clock()
        while self._held:
            slot, (expires, _sealed) = next(iter(self._held.items()))
            if expires > now:
                break
            self._forget(slot)

    def _forget(self, slot: bytes) -> None:
        held = self._held.pop(slot, None)
        if held is not None:
            self.used -= len(held[1]) + _OVERHEAD

    def _slot(self, binding: str) -> bytes:
        return hashlib.blake2b(binding.encode("utf-8", "replace"), key=self._key, digest_size=32,
                               person=b"dd-carry-slot").digest()

    def _box(self, binding: str) -> nacl.secret.SecretBox:
        key = hashlib.blake2b(binding.encode("utf-8", "replace"), key=self._key, digest_size=32,
                              person=b"dd-carry-key").digest()
        return nacl.secret.SecretBox(key)
