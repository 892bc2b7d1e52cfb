"""Server-side sessions kept in memory, keyed by the hash of a random cookie token.

Each interface has its own store, so nothing done on one can evict the other's sessions. The
source side makes a session only at login (anonymous forms carry ``form_tokens``), so an
anonymous flood cannot fill its table. Every operation is O(1) in the table's size: sessions
are kept least recently seen first, and each owner's (a source's or journalist's) are indexed,
so expiry, eviction and logging someone out never scan the table on the reactor thread.

The process never keeps a usable token: a memory dump shows only hashes. Secrets a session
must hold (a source's key passphrase, for reading replies) are sealed with a key derived from
the token, so they are readable only while the source's browser presents its cookie.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import nacl.exceptions
import nacl.secret

_TOKEN_BYTES = 32
# How often idle sessions are swept (the composition's timer), and how much faster than timed
# at start-up Argon2id may run before logins could fill the table (``make_room_for_logins``).
SWEEP_EVERY = 60.0
REACH_MARGIN = 2.0


def _token_hash(token: str) -> bytes:
    return hashlib.blake2b(token.encode("ascii"), digest_size=32, person=b"dd-session-id").digest()


def _sealing_box(token: str) -> nacl.secret.SecretBox:
    key = hashlib.blake2b(token.encode("ascii"), digest_size=32, person=b"dd-session-key").digest()
    return nacl.secret.SecretBox(key)


@dataclass(eq=False)
class Session:
    token_hash: bytes
    csrf_token: str
    created: float
    last_seen: float
    # What the interface needs between requests; never a codename.
    data: dict[str, Any] = field(default_factory=dict)
    flashes: list[tuple[str, str]] = field(default_factory=list)
    sealed: dict[str, bytes] = field(default_factory=dict)
    owner: Hashable = None  # whose login this is (SessionStore.bind); None: anonymous

    def flash(self, message: str, category: str = "info") -> None:
        self.flashes.append((category, message))
        del self.flashes[:-5]

    def pop_flashes(self) -> list[tuple[str, str]]:
        flashes, self.flashes = self.flashes, []
        return flashes

    def check_csrf(self, presented: str | bytes | None) -> bool:
        if isinstance(presented, bytes):
            presented = presented.decode("ascii", "replace")
        if not presented:
            return False
        return hmac.compare_digest(presented.encode(), self.csrf_token.encode())


class SessionStore:
    def __init__(
        self,
        cookie_name: str,
        idle_timeout: float,
        absolute_timeout: float,
        clock: Callable[[], float] = time.time,
        max_sessions: int = 100_000,
        max_per_owner: int = 8,
    ) -> None:
        self.cookie_name = cookie_name
        self.idle_timeout = idle_timeout
        self.absolute_timeout = absolute_timeout
        self._clock = clock
        self._max = max_sessions
        # Logging in again and again with one codename (or account) must not fill the table.
        self._max_per_owner = max_per_owner
        # Least recently seen first: idle expiry and eviction work from the front, in O(1)
        # per session dropped, never by scanning the table on the reactor thread.
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()
        # Sessions nobody is logged in to, least recently seen first: under a flood of anonymous
        # visitors these go first, never a logged-in source's or journalist's.
        self._anonymous: OrderedDict[bytes, None] = OrderedDict()
        self._owners: dict[Hashable, dict[bytes, None]] = {}  # owner -> their sessions, oldest first

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

    def make_room_for_logins(self, run_seconds: float, parallel: int) -> int:
        """Raise the cap above every session logins can make within a session's lifetime, each
        login (or new codename) an Argon2id run of ``run_seconds`` done ``parallel`` at a time,
        with a margin of ``REACH_MARGIN`` for runs faster than timed. Sessions then never push
        out a live one to make room: which one went (the least recently seen) would tell its
        owner, who can keep all the others seen, that someone else had just logged in
        (docs/threat-model.md, "Shared stores"). What they hold in all stays bounded by the
        logins the server can run in a lifetime. -> the cap."""
        lifetime = max(self.absolute_timeout, self.idle_timeout) + SWEEP_EVERY
        self._max = max(self._max, math.ceil(REACH_MARGIN * lifetime * max(1, parallel) / max(run_seconds, 1e-3)))
        return self._max

    def _evict_one(self) -> None:
        # ``bind`` and ``destroy`` keep ``_anonymous`` exact: its first entry is the one to go.
        if self._anonymous:
            self.destroy(self._sessions[next(iter(self._anonymous))])
        elif self._sessions:  # nothing anonymous left: the least recently seen goes
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

    def is_live(self, session: Session) -> bool:
        """Whether ``session`` is still in the store and within its timeouts (seeing it does not
        count as activity)."""
        now = self._clock()
        return (self._sessions.get(session.token_hash) is session
                and now - session.last_seen <= self.idle_timeout and now - session.created <= self.absolute_timeout)

    def bind(self, session: Session, owner: Hashable) -> None:
        """Record whose login ``session`` is (None: nobody's any more). An owner keeps at most
        ``max_per_owner`` sessions: their oldest ends to make room."""
        self._unindex(session)
        session.owner = owner
        if session.token_hash not in self._sessions:
            return  # already destroyed
        if owner is None:
            self._anonymous[session.token_hash] = None
            return
        self._anonymous.pop(session.token_hash, None)
        mine = self._owners.setdefault(owner, {})
        mine[session.token_hash] = None
        while len(mine) > self._max_per_owner:
            self.destroy(self._sessions[next(iter(mine))])

    def owned_by(self, owner: Hashable) -> list[Session]:
        return [self._sessions[key] for key in self._owners.get(owner, ())]

    def destroy_owner(self, owner: Hashable, keep: Session | None = None) -> int:
        """End every session of ``owner`` but ``keep``."""
        doomed = [s for s in self.owned_by(owner) if s is not keep]
        for session in doomed:
            self.destroy(session)
        return len(doomed)

    def destroy(self, session: Session) -> None:
        session.sealed.clear()
        session.data.clear()
        self._sessions.pop(session.token_hash, None)
        self._anonymous.pop(session.token_hash, None)
        self._unindex(session)

    def _unindex(self, session: Session) -> None:
        mine = self._owners.get(session.owner)
        if mine is not None:
            mine.pop(session.token_hash, None)
            if not mine:
                del self._owners[session.owner]

    def where(self, predicate: Callable[[Session], bool]) -> list[Session]:
        """A full scan: for tests and rare administrative actions, never per request."""
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
    def unseal(session: Session, token: str | None, name: str) -> str | None:
        """The secret ``name`` sealed with the cookie's ``token``; None if there is none, or no
        cookie to open it with."""
        sealed = session.sealed.get(name)
        if sealed is None or token is None:
            return None
        try:
            return _sealing_box(token).decrypt(sealed).decode("utf-8")
        except nacl.exceptions.CryptoError:
            return None
