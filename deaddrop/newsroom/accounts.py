# -*- test-case-name: tests.test_journalists,tests.test_hotp -*-
"""Journalist accounts: passphrases, two-factor codes, login throttling and API tokens.

* Passphrases are generated (7 diceware words), never chosen, and stored as Argon2id hashes
  (libsodium's encoded string, so each hash carries its own cost). Input longer than
  ``MAX_PASSPHRASE_CHARS`` is refused before any hashing: nobody can make the server spend
  Argon2id time on a megabyte.
* Two-factor codes are RFC 6238 TOTP (30 s, 6 digits, SHA-1: what every authenticator app
  speaks) accepted one step either side, and never twice: the last accepted time step is kept
  per account in the database and only a later step is accepted (RFC 6238 section 5.2). An
  account with a YubiKey in HOTP mode uses RFC 4226 codes instead (``second_factor.hotp``).
* Login failures are throttled per account name (``FailureThrottle``: 5 a minute); an attempt
  is counted before any credential is looked at, at most one per account is checked at a time,
  and a throttled attempt is refused without looking at any.
* Every session and API token records the account's ``auth_epoch``; a new passphrase, a new
  two-factor secret or deletion bumps it (even from ``deaddrop-admin`` in another process), so
  old sessions and tokens stop working on their next request.

Security events carry the account name only when the account exists: a name that is not an
account may be a passphrase typed into the wrong field.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

import nacl.exceptions
import nacl.pwhash.argon2id as argon2id
import pyotp
from twisted.internet.defer import Deferred, inlineCallbacks, succeed
from twisted.internet.task import deferLater

from deaddrop.newsroom import codenames
from deaddrop.newsroom.languages import JOURNALIST_LANGUAGES
from deaddrop.crypto.kdf import KdfCost
from deaddrop.crypto.pool import WorkerPool, forbid_reactor_thread
from deaddrop.events import EventGate, SecurityEvents
from deaddrop.second_factor import api_codes, hotp, policy
from deaddrop.second_factor.codes import accept_hotp
from deaddrop.store import factor_queries as fq
from deaddrop.store import journalist_queries as jq
from deaddrop.store.db import Database
from deaddrop.admission.throttle import FailureThrottle

MAX_PASSPHRASE_CHARS = 128  # generated ones are ~50; longer input is never hashed
PASSPHRASE_WORDS = 7
TOTP_INTERVAL = 30
TOTP_VALID_WINDOW = 1
LOGIN_FAILURES_PER_MINUTE = 5
# A refused (throttled) login is answered this many seconds late.
THROTTLED_PAUSE = 2.0
TOKEN_LIFETIME = 8 * 3600.0
HOTP_RESYNC_SECONDS = 300.0  # from a YubiKey code far ahead to the next code that completes the resync
USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CODE_RE = re.compile(r"[0-9]{6}")


class AccountError(ValueError):
    """An expected, one-line problem with an account operation (shown to admins as is)."""


class DuplicateUsername(AccountError):
    pass


class UnknownJournalist(AccountError):
    pass


class LoginFailed(Exception):
    """``reason`` is for the event log only: the user sees one generic message."""

    def __init__(self, reason: str, throttled: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.throttled = throttled


class SecurityKeyNeeded(LoginFailed):
    """The passphrase was right and the account logs in with a security key: the login goes on
    with a touch of one (``key_login``). A caller that cannot ask for one (a
    re-check with a code) sees it as the ``LoginFailed`` it is."""

    def __init__(self, journalist: "Journalist") -> None:
        super().__init__("security_key_needed")
        self.journalist = journalist


@dataclass(frozen=True)
class Journalist:
    id: int
    uuid: str
    username: str
    is_admin: bool
    auth_epoch: int
    created_at: float
    last_login_at: float | None
    # The language chosen for the journalist interface and the digest (``JOURNALIST_LANGUAGES``);
    # None: not chosen (the browser's language on pages, English in the digest).
    language: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "Journalist":
        language = row["language"] if "language" in row.keys() else None
        return cls(row["id"], row["uuid"], row["username"], bool(row["is_admin"]), int(row["auth_epoch"]),
                   float(row["created_at"]), row["last_login_at"],
                   language if language in JOURNALIST_LANGUAGES else None)


@dataclass(frozen=True)
class Credentials:
    """What an admin hands to a journalist once: never stored in the clear, never shown again."""

    journalist: Journalist
    passphrase: str | None = None
    totp_secret: str | None = None
    totp_uri: str | None = None


# -- primitives (blocking where they hash; usable from the admin CLI) -----------------------

def valid_username(username: Any) -> bool:
    return isinstance(username, str) and USERNAME_RE.fullmatch(username) is not None


def generate_passphrase(words: int = PASSPHRASE_WORDS) -> str:
    """Diceware: ``words`` words drawn uniformly from the 7776-word codename list (~90 bits)."""
    wordlist = codenames.codename_words()
    return " ".join(secrets.choice(wordlist) for _ in range(words))


def hash_passphrase(passphrase: str, cost: KdfCost) -> str:
    forbid_reactor_thread("Argon2id")
    if len(passphrase) > MAX_PASSPHRASE_CHARS:
        raise AccountError(f"passphrases are limited to {MAX_PASSPHRASE_CHARS} characters")
    return argon2id.str(passphrase.encode("utf-8"), opslimit=cost.opslimit, memlimit=cost.memlimit).decode("ascii")


def verify_passphrase(stored_hash: str, passphrase: Any) -> bool:
    """Constant work for any input that may be a passphrase; none at all for over-long input."""
    if not isinstance(passphrase, str) or not passphrase or len(passphrase) > MAX_PASSPHRASE_CHARS:
        return False
    forbid_reactor_thread("Argon2id")
    try:
        return argon2id.verify(stored_hash.encode("ascii"), passphrase.encode("utf-8"))
    except (nacl.exceptions.InvalidkeyError, nacl.exceptions.RuntimeError, ValueError):
        return False


def new_totp_secret() -> str:
    return pyotp.random_base32(32)  # 160 bits, RFC 4226's recommended key size


def totp_uri(secret: str, username: str, issuer: str) -> str:
    return pyotp.TOTP(secret, interval=TOTP_INTERVAL).provisioning_uri(name=username, issuer_name=issuer)


def totp_code(secret: str, step: int) -> str:
    """The code for a 30-second time step (tests and the admin pages use it)."""
    return pyotp.TOTP(secret, interval=TOTP_INTERVAL).generate_otp(step)


TOTP_BAD = -1
TOTP_REUSED = -2


def match_totp(secret: str, code: Any, now: float, last_step: int) -> int:
    """The time step ``code`` belongs to (within ``TOTP_VALID_WINDOW``), ``TOTP_BAD`` or ``TOTP_REUSED``."""
    if not isinstance(code, str):
        return TOTP_BAD
    code = code.replace(" ", "").strip()
    if not _CODE_RE.fullmatch(code):
        return TOTP_BAD
    totp = pyotp.TOTP(secret, interval=TOTP_INTERVAL)
    current = int(now // TOTP_INTERVAL)
    matched = TOTP_BAD
    for step in range(current - TOTP_VALID_WINDOW, current + TOTP_VALID_WINDOW + 1):
        if hmac.compare_digest(totp.generate_otp(step).encode(), code.encode()):
            matched = step
    if matched == TOTP_BAD:
        return TOTP_BAD
    return matched if matched > last_step else TOTP_REUSED


def token_hash(token: str) -> str:
    return hashlib.blake2b(token.encode("ascii", "replace"), digest_size=32, person=b"dd-api-token").hexdigest()


def create_account_blocking(conn: sqlite3.Connection, username: str, is_admin: bool, cost: KdfCost,
                            issuer: str, now: float | None = None, hotp_secret: bytes | None = None) -> Credentials:
    """For ``deaddrop-admin``: hash, then one transaction. (The server uses ``Accounts.create``.)

    With ``hotp_secret`` the account logs in with that YubiKey's HOTP codes: no TOTP secret is
    shown (the one stored is never used)."""
    from deaddrop.store.db import transaction

    check_new_username(username)
    passphrase, secret = generate_passphrase(), new_totp_secret()
    password_hash = hash_passphrase(passphrase, cost)

    def insert(conn: sqlite3.Connection) -> int:
        jid = jq.insert_journalist(conn, str(uuidlib.uuid4()), username, password_hash, secret, is_admin,
                                   time.time() if now is None else now)
        if hotp_secret is not None:
            fq.reset_to_hotp(conn, jid, secret, hotp_secret.hex())
        policy.grant_grace(conn, jid, time.time() if now is None else now)
        return jid

    try:
        jid = transaction(conn, insert)
    except sqlite3.IntegrityError:
        raise DuplicateUsername(f"a journalist named {username!r} already exists") from None
    row = transaction(conn, jq.journalist_by_id, jid)
    if hotp_secret is not None:
        return Credentials(Journalist.from_row(row), passphrase)
    return Credentials(Journalist.from_row(row), passphrase, secret, totp_uri(secret, username, issuer))


def check_new_username(username: Any) -> None:
    if not valid_username(username):
        raise AccountError("invalid username: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")


# -- the server's account service ---------------------------------------------------------

class Accounts:
    """Account use cases for the journalist interface and API; blocking work runs in pools."""

    def __init__(self, db: Database, crypto_pool: WorkerPool, events: SecurityEvents, cost: KdfCost,
                 issuer: Callable[[], str] = lambda: "DeadDrop", clock: Callable[[], float] = time.time,
                 throttle: FailureThrottle | None = None, token_lifetime: float = TOKEN_LIFETIME,
                 reactor: Any = None, throttled_pause: float = THROTTLED_PAUSE) -> None:
        self.db = db
        self.crypto_pool = crypto_pool
        self.events = events
        self.cost = cost
        self.issuer = issuer
        self.clock = clock
        self.throttle = throttle or FailureThrottle(LOGIN_FAILURES_PER_MINUTE, 60.0)
        self.token_lifetime = token_lifetime
        self._in_flight: set[str] = set()  # account keys with an attempt being checked
        self._dummy_hash: str | None = None
        self._dummy_lock = threading.Lock()
        self._reactor = reactor
        self.throttled_pause = throttled_pause
        # One "throttled" event per account a minute: a sustained attack still shows as one a
        # minute (the IDS's "again and again" rule), not as hundreds of lines a second.
        self.throttled_events = EventGate(60.0)
        # A YubiKey's code too far ahead to accept alone: account id -> (its counter, until when
        # the key's next code completes the resynchronisation). Set only after a right passphrase.
        self._hotp_resync: dict[int, tuple[int, float]] = {}

    def _pause(self, seconds: float) -> Deferred:
        if seconds <= 0:
            return succeed(None)
        if self._reactor is None:
            from twisted.internet import reactor as default_reactor
            self._reactor = default_reactor
        return deferLater(self._reactor, seconds, lambda: None)

    # -- lookups

    @inlineCallbacks
    def get(self, journalist_id: int):
        row = yield self.db.run(jq.journalist_by_id, journalist_id)
        return Journalist.from_row(row) if row is not None else None

    @inlineCallbacks
    def by_uuid(self, uuid: str):
        row = yield self.db.run(jq.journalist_by_uuid, uuid)
        return Journalist.from_row(row) if row is not None else None

    @inlineCallbacks
    def list(self):
        rows = yield self.db.run(jq.list_journalists)
        return [Journalist.from_row(r) for r in rows]

    # -- login

    def _verify(self, stored_hash: str | None, passphrase: Any) -> bool:
        """Runs in the crypto pool. An unknown account costs what a known one does."""
        if stored_hash is None:
            with self._dummy_lock:
                if self._dummy_hash is None:
                    self._dummy_hash = hash_passphrase(generate_passphrase(), self.cost)
            verify_passphrase(self._dummy_hash, passphrase)
            return False
        return verify_passphrase(stored_hash, passphrase)

    def authenticate(self, username: Any, passphrase: Any, code: Any, api: bool = False) -> Deferred:
        """-> ``Journalist``; raises ``LoginFailed``. All three factors, every time.

        An account with security keys raises ``SecurityKeyNeeded`` once its passphrase is right
        (the web login goes on to a key); for the API (``api``) its code must be a one-time API
        code from its account page instead.
        """
        return self.attempt(username, lambda key: self._check(key, passphrase, code, api))

    @inlineCallbacks
    def attempt(self, username: Any, check: Callable[[str], Deferred]):
        """Run ``check(account key)`` as one login attempt of ``username``: -> what it returns.

        The attempt is counted, and marked in flight, before anything is looked at and in the
        same reactor turn as the check: concurrent attempts on one account cannot race the
        limit, and only one at a time is ever checked (sixty logins sent at once with a known
        passphrase check one code, not sixty). A check that raises counts as a failure, except
        ``SecurityKeyNeeded``, which is half a login.
        """
        key = username.strip().lower() if isinstance(username, str) else ""
        if not valid_username(key):
            key = ""  # names that can never be an account share one throttle bucket
        reservation = None
        if key not in self._in_flight:
            reservation = self.throttle.reserve(key)
        if reservation is None:
            folded = self.throttled_events.admit(key)
            if folded is not None:
                row = (yield self.db.run(jq.journalist_by_username, key)) if key else None
                self.events.emit("journalist.login.throttled", username=row["username"] if row is not None else None,
                                 repeated=folded or None)
            # Answered after a pause that costs us nothing but a timer: a client with the
            # account's certificate sending refused logins as fast as it can would otherwise
            # get hundreds of answers a second, and the journalists' own requests would wait.
            yield self._pause(self.throttled_pause)
            raise LoginFailed("throttled", throttled=True)
        self._in_flight.add(key)
        try:
            journalist = yield check(key)
        except SecurityKeyNeeded:
            reservation.cancel()
            raise
        except BaseException:
            reservation.failed()
            raise
        finally:
            self._in_flight.discard(key)
        reservation.cancel()
        self.throttle.reset(key)
        return journalist

    @inlineCallbacks
    def _check(self, key: str, passphrase: Any, code: Any, api: bool):
        row = (yield self.db.run(jq.journalist_by_username, key)) if key else None
        name = row["username"] if row is not None else None
        if isinstance(passphrase, str) and len(passphrase) > MAX_PASSPHRASE_CHARS:
            ok = False  # refused before any hashing: not even the crypto pool sees it
        else:
            ok = yield self.crypto_pool.run(self._verify, row["password_hash"] if row is not None else None, passphrase)
        if not ok or row is None:  # (no row is never ok)
            self._failed(name, "unknown_user" if row is None else "bad_passphrase")
        name = row["username"]
        has_keys = yield self.db.run(fq.key_count, row["id"])
        if has_keys and api:  # its clients cannot touch a key: a one-time code from the account page
            used = yield self.db.run(api_codes.use, row["id"], code, self.clock())
            if not used:
                self._failed(name, "bad_api_code")
            self.events.emit("journalist.api_code.used", username=name)
            return (yield self.logged_in(row["id"], name))
        if has_keys:
            raise SecurityKeyNeeded(Journalist.from_row(row))
        keys = yield self.db.run(policy.load)
        if keys.code_login_refused(bool(row["is_admin"]), row["keys_enrol_by"], self.clock()):
            self._failed(name, "keys_required")
        if row["hotp_secret"]:
            yield self._check_hotp(row, name, code)
        else:
            yield self._check_totp(row, name, code)
        return (yield self.logged_in(row["id"], name))

    @inlineCallbacks
    def logged_in(self, journalist_id: int, name: str):
        """Every factor was right: record it. -> the account as it is now."""
        yield self.db.run(jq.record_login, journalist_id, self.clock())
        self.events.emit("journalist.login.ok", username=name)
        fresh = yield self.db.run(jq.journalist_by_id, journalist_id)
        return Journalist.from_row(fresh)

    @inlineCallbacks
    def _check_totp(self, row: Any, name: str, code: Any):
        step = match_totp(row["totp_secret"], code, self.clock(), int(row["last_totp_step"]))
        if step == TOTP_BAD:
            self._failed(name, "bad_totp")
        if step != TOTP_REUSED:
            accepted = yield self.db.run(jq.accept_totp_step, row["id"], step)
            if not accepted:  # a concurrent login used it first
                step = TOTP_REUSED
        if step == TOTP_REUSED:
            self.events.emit("journalist.totp.reused", username=name)
            self._failed(name, "totp_reused")

    @inlineCallbacks
    def _check_hotp(self, row: Any, name: str, code: Any):
        """A YubiKey's HOTP code: matched and used up in one transaction (see ``second_factor.codes``).
        A code far ahead is refused as ``hotp_next_code``, and the key's next code then logs in
        (RFC 4226's resynchronisation with two consecutive codes)."""
        first, until = self._hotp_resync.pop(row["id"], (None, 0.0))
        matched = yield self.db.run(accept_hotp, row["id"], code, first if until > self.clock() else None)
        if matched.ahead:
            self._hotp_resync[row["id"]] = (matched.counter, self.clock() + HOTP_RESYNC_SECONDS)
            self._failed(name, "hotp_next_code")
        if matched.counter == hotp.HOTP_BAD:
            self._failed(name, "bad_hotp")
        if matched.counter == hotp.HOTP_REUSED:
            self.events.emit("journalist.hotp.reused", username=name)
            self._failed(name, "hotp_reused")

    def refuse(self, name: str | None, reason: str) -> NoReturn:
        """Log the failed login and raise ``LoginFailed``."""
        self.events.emit("journalist.login.fail", username=name, reason=reason)
        raise LoginFailed(reason)

    _failed = refuse

    # -- account management

    @inlineCallbacks
    def create(self, username: str, is_admin: bool = False):
        """-> ``Credentials`` with the new passphrase and two-factor secret (shown once)."""
        check_new_username(username)
        passphrase, secret = generate_passphrase(), new_totp_secret()
        password_hash = yield self.crypto_pool.run(hash_passphrase, passphrase, self.cost)
        try:
            jid = yield self.db.run(jq.insert_journalist, str(uuidlib.uuid4()), username, password_hash, secret,
                                    is_admin, self.clock())
        except sqlite3.IntegrityError:
            raise DuplicateUsername(f"a journalist named {username!r} already exists") from None
        yield self.db.run(policy.grant_grace, jid, self.clock())
        journalist = yield self.get(jid)
        return Credentials(journalist, passphrase, secret, totp_uri(secret, username, self.issuer()))

    @inlineCallbacks
    def reset_passphrase(self, journalist_id: int):
        """A new generated passphrase; every session and token of the account ends."""
        passphrase = generate_passphrase()
        password_hash = yield self.crypto_pool.run(hash_passphrase, passphrase, self.cost)
        epoch = yield self.db.run(jq.set_password_hash, journalist_id, password_hash, self.clock())
        if epoch is None:
            raise UnknownJournalist("no such journalist")
        journalist = yield self.get(journalist_id)
        return Credentials(journalist, passphrase=passphrase)

    @inlineCallbacks
    def reset_totp(self, journalist_id: int):
        secret = new_totp_secret()
        epoch = yield self.db.run(fq.reset_to_totp, journalist_id, secret)
        if epoch is None:
            raise UnknownJournalist("no such journalist")
        yield self.db.run(policy.grant_grace, journalist_id, self.clock())
        journalist = yield self.get(journalist_id)
        return Credentials(journalist, totp_secret=secret,
                           totp_uri=totp_uri(secret, journalist.username, self.issuer()))

    def delete(self, journalist_id: int):
        return self.db.run(jq.delete_journalist, journalist_id)

    def set_language(self, journalist_id: int, code: str) -> Deferred:
        """The account's language from now on (``JOURNALIST_LANGUAGES``); -> Deferred[bool]: the
        account exists. Not a credential: sessions and tokens go on."""
        if code not in JOURNALIST_LANGUAGES:
            raise AccountError(f"not a journalist language: {code!r}")
        return self.db.run(jq.set_language, journalist_id, code)

    @inlineCallbacks
    def verify_again(self, journalist: Journalist, passphrase: Any, code: Any):
        """Re-authentication for sensitive changes (own passphrase): same rules as login."""
        result = yield self.authenticate(journalist.username, passphrase, code)
        return result.id == journalist.id

    # -- API tokens

    @inlineCallbacks
    def issue_token(self, journalist: Journalist):
        token = secrets.token_urlsafe(32)
        now = self.clock()
        expires = now + self.token_lifetime
        yield self.db.run(jq.insert_token, token_hash(token), journalist.id, journalist.auth_epoch, now, expires)
        return token, expires

    @inlineCallbacks
    def journalist_for_token(self, token: str | None):
        if not token or len(token) > 128:
            return None
        row = yield self.db.run(jq.journalist_for_token, token_hash(token), self.clock())
        return Journalist.from_row(row) if row is not None else None

    def revoke_token(self, token: str):
        return self.db.run(jq.delete_token, token_hash(token))

    def purge_tokens(self):
        return self.db.run(jq.purge_expired_tokens, self.clock())
