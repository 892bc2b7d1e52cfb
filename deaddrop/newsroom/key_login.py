# -*- test-case-name: tests.browser.test_security_keys,tests.integration.test_key_policy -*-
"""Security keys as an account's second factor: enrolling, removing, and the key half of a login.

The web layer says who the relying party is (``security_keys.RelyingParty``, from the request's
host and the server's certificate) and carries each ceremony's state in the journalist's
session; everything else is here. A key login is one login attempt of the account
(``Accounts.attempt``): counted and throttled as a code login is, one at a time per account.
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import inlineCallbacks

from deaddrop.events import SecurityEvents
from deaddrop.newsroom.accounts import Accounts, Journalist
from deaddrop.second_factor import api_codes, policy, recovery_codes
from deaddrop.second_factor.security_keys import (
    KeyRefused, RelyingParty, SecurityKey, begin_assertion, begin_registration, finish_registration, key_name,
    store_key, verify_assertion,
)
from deaddrop.store import factor_queries as fq

# What a refused key is logged as (``journalist.login.fail``'s reason).
_LOGIN_REASONS = {"wrong_origin": "wrong_origin", "counter_regression": "key_counter_regression"}


class KeyRemovalRefused(ValueError):
    """Removing this key would leave an account that must have one without any."""


class SecurityKeys:
    def __init__(self, accounts: Accounts, events: SecurityEvents, site_name: Callable[[], str]) -> None:
        self.accounts = accounts
        self.db = accounts.db
        self.events = events
        self.site_name = site_name

    @inlineCallbacks
    def keys(self, journalist_id: int):
        """-> [``SecurityKey``] of the account, oldest first."""
        rows = yield self.db.run(fq.keys_of, journalist_id)
        return [SecurityKey.from_row(r) for r in rows]

    @inlineCallbacks
    def enrol_before(self, journalist: Journalist):
        """For an account without keys that must have some: the deadline; else None."""
        count = yield self.db.run(fq.key_count, journalist.id)
        if count:
            return None
        keys, row = yield self.db.run(_policy_and_row, journalist.id)
        return keys.enrol_before(journalist.is_admin, row["keys_enrol_by"]) if row is not None else None

    # -- enrolment

    @inlineCallbacks
    def begin_enrolment(self, journalist: Journalist, rp: RelyingParty):
        existing = yield self.db.run(fq.credential_ids, journalist.id, rp.id)
        return begin_registration(rp, self.site_name(), journalist.uuid, journalist.username, existing)

    @inlineCallbacks
    def finish_enrolment(self, journalist: Journalist, rp: RelyingParty, state: Any, response: Any, name: Any):
        """-> the new key's id. Raises ``ValueError`` (a bad name) or ``KeyRefused``."""
        name = key_name(name)
        new = finish_registration(rp, self.site_name(), state, response)
        now = self.accounts.clock()
        key_id = yield self.db.run(store_key, journalist.id, rp.id, new, name, now)
        count = yield self.db.run(fq.key_count, journalist.id)
        self.events.emit("journalist.key.registered", username=journalist.username, count=count)
        return key_id

    @inlineCallbacks
    def remove(self, journalist: Journalist, key_id: int):
        """-> the removed key's name (None: no such key of this account). The last key of an
        account that must have keys is kept (``KeyRemovalRefused``)."""
        keys, _row = yield self.db.run(_policy_and_row, journalist.id)
        must_keep = keys.applies_to(journalist.is_admin)
        name = yield self.db.run(fq.remove_key, journalist.id, key_id, must_keep)
        count = yield self.db.run(fq.key_count, journalist.id)
        if name is None and must_keep and count == 1:
            raise KeyRemovalRefused("This is your account's last security key, and your newsroom requires one: "
                                    "register another key before removing this one.")
        if name is not None:
            self.events.emit("journalist.key.removed", username=journalist.username, count=count)
        return name

    # -- logging in

    @inlineCallbacks
    def begin_login(self, journalist_id: int, rp: RelyingParty):
        """-> (options, state), or None when the account has no key for this relying party."""
        credentials = yield self.db.run(fq.credential_ids, journalist_id, rp.id)
        if not credentials:
            return None
        return begin_assertion(rp, self.site_name(), credentials)

    def finish_login(self, journalist: Journalist, rp: RelyingParty, state: Any, response: Any) -> Any:
        """-> Deferred[``Journalist``]; raises ``LoginFailed`` (throttled, or the key refused)."""

        @inlineCallbacks
        def check(_key: str):
            try:
                yield self.db.run(verify_assertion, rp, self.site_name(), journalist.id, state, response,
                                  self.accounts.clock())
            except KeyRefused as refused:
                if refused.reason == "counter_regression":
                    self.events.emit("journalist.key.counter_regression", username=journalist.username)
                self.accounts.refuse(journalist.username, _LOGIN_REASONS.get(refused.reason, "bad_key"))
            return (yield self.accounts.logged_in(journalist.id, journalist.username))

        return self.accounts.attempt(journalist.username, check)


    # -- codes for an account with keys (after a key login)

    @inlineCallbacks
    def issue_api_code(self, journalist: Journalist):
        """-> (the code, shown once; when it expires)."""
        code = api_codes.new_code()
        expires = yield self.db.run(api_codes.issue, journalist.id, code, self.accounts.clock())
        self.events.emit("journalist.api_code.issued", username=journalist.username)
        return code, expires

    @inlineCallbacks
    def make_recovery_codes(self, journalist: Journalist):
        """-> ten new recovery codes (shown once); the old ones stop working."""
        codes = recovery_codes.make()
        hashes = yield self.accounts.crypto_pool.run(lambda: [recovery_codes.hash_code(c) for c in codes])
        yield self.db.run(recovery_codes.replace, journalist.id, hashes, self.accounts.clock())
        self.events.emit("journalist.recovery_codes.made", username=journalist.username, count=len(codes))
        return codes

    def recovery_codes_left(self, journalist_id: int) -> Any:
        return self.db.run(lambda conn: len(recovery_codes.stored(conn, journalist_id)))

    def recover(self, journalist: Journalist, typed: Any) -> Any:
        """A recovery code in place of a key: -> Deferred[``Journalist``]; raises ``LoginFailed``.
        One throttled login attempt, as a key's is; the code is spent and the use reported."""

        @inlineCallbacks
        def check(_key: str):
            stored = yield self.db.run(recovery_codes.stored, journalist.id)
            found = (yield self.accounts.crypto_pool.run(recovery_codes.matching, stored, typed)) if stored else None
            left = (yield self.db.run(recovery_codes.use, journalist.id, found)) if found is not None else None
            if left is None:
                self.accounts.refuse(journalist.username, "bad_recovery_code")
            self.events.emit("journalist.recovery_code.used", username=journalist.username, count=left)
            return (yield self.accounts.logged_in(journalist.id, journalist.username))

        return self.accounts.attempt(journalist.username, check)


def _policy_and_row(conn: Any, journalist_id: int) -> tuple[policy.KeyPolicy, Any]:
    return policy.load(conn), conn.execute("SELECT keys_enrol_by FROM journalists WHERE id = ?",
                                           (journalist_id,)).fetchone()
