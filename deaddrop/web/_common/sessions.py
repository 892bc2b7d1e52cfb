"""Server-side sessions kept in memory, keyed by the hash of a random cookie token.

The process never keeps a usable token: a memory dump shows only hashes. Secrets a session
must hold (a source's key passphrase, for reading replies) are sealed with a key derived from
the token, so they are readable only while the source's browser presents its cookie.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import nacl.exceptions
import nacl.secret

_TOKEN_BYTES = 32
# Session data keys that mean "logged in" (source and journalist interfaces).
LOGGED_IN_KEYS = frozenset({"source", "journalist_id"})


def _token_hash(token: str) -> bytes:
    return hashlib.blake2b(token.encode("ascii"), digest_size=32, person=b"dd-session-id").digest()


def _sealing_box(token: str) -> nacl.secret.SecretBox:
    key = hashlib.blake2b(token.encode("ascii"), digest_size=32, person=b"dd-session-key").digest()
    return nacl.secret.SecretBox(key)


@dataclass
class Session:
    token_hash: bytes
    csrf_token: str
    created: float
    last_seen: float
    # What the interface needs between requests; never a codename.
    data: dict[str, Any] = field(default_factory=dict)
    flashes: list[tuple[str, str]] = field(default_factory=list)
    sealed: dict[str, bytes] = field(default_factory=dict)

    def flash(self, message: str, category: str = "info") -> None:
        self.flashes.append((category, message))
        del self.flashes[:-5]

    def pop_flashes(self) -> list[tuple[str, str]]:
        flashes, self.flashes = self.flashes, []
        return flashes

    def check_csrf(self, presented: str | bytes | None) -> bool:
        if isinstance(presented, bytes):
            presented = presented.decode("ascii", "replace")
        return bool(presented) and hmac.compare_digest(presented.encode(), self.csrf_token.encode())


class SessionStore:
    def __init__(
        self,
        cookie_name: str,
        idle_timeout: float,
        absolute_timeout: float,
        clock: Callable[[], float] = time.time,
        max_sessions: int = 100_000,
    ) -> None:
        self.cookie_name = cookie_name
        self.idle_timeout = idle_timeout
        self.absolute_timeout = absolute_timeout
        self._clock = clock
        self._max = max_sessions
        # Least recently seen first: idle expiry and eviction work from the front, in O(1)
        # per session dropped, never by scanning the table on the reactor thread.
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()
        # Sessions that were anonymous when made, least recently seen first: under a flood of
        # anonymous visitors these go first, never a logged-in source's or journalist's.
        self._anonymous: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> tuple[str, Session]:
        if len(self._sessions) >= self._max:
            self._drop_idle()
        if len(self._sessions) >= self._max:
            self._evict_one()
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        now = self._clock()
        session = Session(_token_hash(token), secrets.token_urlsafe(32), now, now)
        self._sessions[session.token_hash] = session
        self._anonymous[session.token_hash] = None
        return token, session

    def _evict_one(self) -> None:
        # Each entry leaves the anonymous order once (dropped here or destroyed), so this loop
        # is O(1) amortised.
        while self._anonymous:
            key, _ = self._anonymous.popitem(last=False)
            session = self._sessions.get(key)
            if session is None:
                continue
            if session.data.keys() & LOGGED_IN_KEYS:
                continue  # logged in since: no longer anonymous
            self.destroy(session)
            return
        if self._sessions:  # nothing anonymous left: the least recently seen goes
            self.destroy(next(iter(self._sessions.values())))

    def _drop_idle(self) -> int:
        now = self._clock()
        dropped = 0
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_seen <= self.idle_timeout:
                break
            self.destroy(oldest)
            dropped += 1
        return dropped

    def lookup(self, token: str | None) -> Session | None:
        if not token or len(token) > 128:
            return None
        try:
            key = _token_hash(token)
        except UnicodeEncodeError:
            return None
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > self.idle_timeout or now - session.created > self.absolute_timeout:
            self.destroy(session)
            return None
        session.last_seen = now
        self._sessions.move_to_end(key)
        if key in self._anonymous:
            self._anonymous.move_to_end(key)
        return session

    def destroy(self, session: Session) -> None:
        session.sealed.clear()
        session.data.clear()
        self._sessions.pop(session.token_hash, None)
        self._anonymous.pop(session.token_hash, None)

    def where(self, predicate: Callable[[Session], bool]) -> list[Session]:
        return [s for s in self._sessions.values() if predicate(s)]

    def destroy_where(self, predicate: Callable[[Session], bool]) -> int:
        doomed = [s for s in self._sessions.values() if predicate(s)]
        for session in doomed:
            self.destroy(session)
        return len(doomed)

    def sweep(self) -> int:
        """Drop idle sessions (from the front: O(dropped)); a session past its absolute
        lifetime but recently seen is refused at its next lookup."""
        return self._drop_idle()

    @staticmethod
    def seal(session: Session, token: str, name: str, secret: str) -> None:
        session.sealed[name] = _sealing_box(token).encrypt(secret.encode("utf-8"))

    @staticmethod
    def unseal(session: Session, token: str, name: str) -> str | None:
        sealed = session.sealed.get(name)
        if sealed is None:
            return None
        try:
            return _sealing_box(token).decrypt(sealed).decode("utf-8")
        except nacl.exceptions.CryptoError:
            return None
