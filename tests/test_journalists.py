"""Journalist accounts: Argon2id passphrases, diceware, TOTP without replay, throttling, tokens."""
from __future__ import annotations

import json
import os

import nacl.pwhash.argon2id as argon2id
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock, deferLater
from twisted.trial import unittest

from deaddrop.newsroom import accounts, codenames
from deaddrop.crypto.kdf import KdfCost
from deaddrop.crypto.pool import WorkerPool
from deaddrop.events import EventGate, SecurityEvents
from deaddrop.newsroom.accounts import (
    TOTP_BAD, TOTP_INTERVAL, TOTP_REUSED, Accounts, AccountError, DuplicateUsername, LoginFailed, match_totp,
    totp_code,
)
from deaddrop.store.db import Database
from deaddrop.admission.throttle import FailureThrottle

FAST = KdfCost.parse("insecure-fast")


class PassphraseTests(unittest.TestCase):
    def test_diceware_passphrases_are_seven_words_from_the_list(self):
        words = set(codenames.codename_words())
        self.assertEqual(len(words), 7776)
        seen = set()
        for _ in range(50):
            passphrase = accounts.generate_passphrase()
            parts = passphrase.split(" ")
            self.assertEqual(len(parts), 7)
            self.assertTrue(set(parts) <= words)
            seen.add(passphrase)
        self.assertEqual(len(seen), 50)

    def test_hash_is_argon2id_and_verifies_only_the_right_passphrase(self):
        stored = accounts.hash_passphrase("correct horse battery staple", FAST)
        self.assertTrue(stored.startswith("$argon2id$"))
        self.assertTrue(accounts.verify_passphrase(stored, "correct horse battery staple"))
        for wrong in ["correct horse battery stapl", "", None, 42, "Correct horse battery staple"]:
            self.assertFalse(accounts.verify_passphrase(stored, wrong), wrong)
        self.assertFalse(accounts.verify_passphrase("not a hash", "x"))

    def test_over_long_input_is_refused_without_hashing(self):
        stored = accounts.hash_passphrase("p" * 128, FAST)
        self.assertTrue(accounts.verify_passphrase(stored, "p" * 128))
        calls = []
        self.patch(argon2id, "verify", lambda *a: calls.append(a) or True)
        self.patch(argon2id, "str", lambda *a, **kw: calls.append(a) or b"$argon2id$")
        self.assertFalse(accounts.verify_passphrase(stored, "p" * 129))
        self.assertFalse(accounts.verify_passphrase(stored, "p" * 10_000_000))
        with self.assertRaises(AccountError):
            accounts.hash_passphrase("p" * 129, FAST)
        self.assertEqual(calls, [])

    def test_usernames(self):
        for good in ["alice", "Bob.Smith", "a", "x" * 64, "j-1_2"]:
            self.assertTrue(accounts.valid_username(good), good)
        for bad in ["", " alice", "-alice", "x" * 65, "al ice", "élise", "a/b", None, 3]:
            self.assertFalse(accounts.valid_username(bad), bad)


class TotpTests(unittest.TestCase):
    secret = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"

    def test_rfc6238_codes_within_one_step_are_accepted_once(self):
        now = 1_700_000_015.0
        step = int(now // TOTP_INTERVAL)
        for offset in (-1, 0, 1):
            self.assertEqual(match_totp(self.secret, totp_code(self.secret, step + offset), now, 0), step + offset)
        for offset in (-2, 2, 10):
            self.assertEqual(match_totp(self.secret, totp_code(self.secret, step + offset), now, 0), TOTP_BAD)
        # Once a step was accepted, neither it nor an earlier one is accepted again.
        self.assertEqual(match_totp(self.secret, totp_code(self.secret, step), now, step), TOTP_REUSED)
        self.assertEqual(match_totp(self.secret, totp_code(self.secret, step - 1), now, step), TOTP_REUSED)
        self.assertEqual(match_totp(self.secret, totp_code(self.secret, step + 1), now, step), step + 1)
        code = totp_code(self.secret, step)
        self.assertEqual(match_totp(self.secret, f"{code[:3]} {code[3:]}", now, 0), step)  # as apps show it

    def test_matches_an_independent_implementation(self):
        import pyotp

        now = 1_234_567_890
        self.assertEqual(totp_code(self.secret, now // 30), pyotp.TOTP(self.secret).at(now))

    def test_malformed_codes(self):
        for code in ["", "12345", "1234567", "abcdef", None, 123456, "１２３４５６"]:
            self.assertEqual(match_totp(self.secret, code, 1e9, 0), TOTP_BAD, code)


class AccountsTests(unittest.TestCase):
    """``Accounts`` over a real SQLite database and real thread pools."""

    def setUp(self):
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        self.db = Database(reactor, os.path.join(self.dir, "db.sqlite"))
        self.db.open()
        self.addCleanup(self.db.close)
        self.pool = WorkerPool(reactor, "test-crypto", max_threads=2)
        self.addCleanup(self.pool.stop)
        self.events_path = os.path.join(self.dir, "security.jsonl")
        self.events = SecurityEvents(self.events_path)
        self.addCleanup(self.events.close)
        self.now = 1_800_000_000.0
        self.throttle_clock = Clock()
        self.accounts = Accounts(self.db, self.pool, self.events, FAST, clock=lambda: self.now,
                                 throttle=FailureThrottle(5, 60.0, clock=self.throttle_clock.seconds),
                                 throttled_pause=0)

    def events_named(self, name):
        with open(self.events_path) as f:
            return [json.loads(line) for line in f if json.loads(line)["event"] == name]

    def code(self, secret, ahead=0):
        return totp_code(secret, int(self.now // TOTP_INTERVAL) + ahead)

    @inlineCallbacks
    def test_login_requires_all_factors_and_never_reuses_a_code(self):
        creds = yield self.accounts.create("alice")
        secret, passphrase = creds.totp_secret, creds.passphrase
        with self.assertRaises(LoginFailed):
            yield self.accounts.authenticate("alice", passphrase, "000000" if self.code(secret) != "000000" else "111111")
        with self.assertRaises(LoginFailed):
            yield self.accounts.authenticate("alice", passphrase + "x", self.code(secret))
        journalist = yield self.accounts.authenticate("ALICE ", passphrase, self.code(secret))
        self.assertEqual(journalist.username, "alice")
        self.assertIsNotNone(journalist.last_login_at)
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("alice", passphrase, self.code(secret))
        self.assertEqual(ctx.exception.reason, "totp_reused")
        self.assertEqual([e["username"] for e in self.events_named("journalist.totp.reused")], ["alice"])
        yield self.accounts.authenticate("alice", passphrase, self.code(secret, ahead=1))
        self.now += TOTP_INTERVAL  # the step just used is now the current one: still refused
        with self.assertRaises(LoginFailed):
            yield self.accounts.authenticate("alice", passphrase, self.code(secret))
        self.now += TOTP_INTERVAL
        yield self.accounts.authenticate("alice", passphrase, self.code(secret))

    @inlineCallbacks
    def test_five_failures_a_minute_per_account(self):
        creds = yield self.accounts.create("alice")
        yield self.accounts.create("bob")
        for _ in range(5):
            with self.assertRaises(LoginFailed) as ctx:
                yield self.accounts.authenticate("alice", "wrong", self.code(creds.totp_secret))
            self.assertFalse(ctx.exception.throttled)
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("Alice", creds.passphrase, self.code(creds.totp_secret))
        self.assertTrue(ctx.exception.throttled)
        self.assertEqual([e.get("username") for e in self.events_named("journalist.login.throttled")], ["alice"])
        # Throttled attempts do not consume the code: it still works once the minute is over.
        self.throttle_clock.advance(61)
        yield self.accounts.authenticate("alice", creds.passphrase, self.code(creds.totp_secret))

    @inlineCallbacks
    def test_throttled_attempts_are_answered_late_and_logged_once_a_minute(self):
        timer = Clock()
        self.accounts.throttled_pause = 2.0
        self.accounts._reactor = timer
        self.accounts.throttled_events = EventGate(60.0, clock=timer.seconds)
        creds = yield self.accounts.create("alice")
        for _ in range(5):
            with self.assertRaises(LoginFailed):
                yield self.accounts.authenticate("alice", "wrong", self.code(creds.totp_secret))
        attempts = [self.accounts.authenticate("alice", "wrong", "000000") for _ in range(10)]
        yield deferLater(reactor, 0.3, lambda: None)  # the account's name is looked up for the event
        for d in attempts:
            self.assertNoResult(d)  # nothing is answered before the pause is over
        timer.advance(2.0)
        for d in attempts:
            self.assertTrue(self.failureResultOf(d, LoginFailed).value.throttled)
        self.assertEqual([(e["username"], e.get("repeated")) for e in self.events_named("journalist.login.throttled")],
                         [("alice", None)])
        timer.advance(60)
        late = self.accounts.authenticate("alice", "wrong", "000000")
        yield deferLater(reactor, 0.3, lambda: None)
        timer.advance(2.0)
        self.failureResultOf(late, LoginFailed)
        self.assertEqual([e.get("repeated") for e in self.events_named("journalist.login.throttled")], [None, 9])

    @inlineCallbacks
    def test_concurrent_logins_check_one_attempt_at_a_time_per_account(self):
        """60 logins at once with a known passphrase: one code is checked, not sixty."""
        from twisted.internet.defer import DeferredList

        creds = yield self.accounts.create("alice")
        yield self.accounts.create("bob")
        checked = []
        real = accounts.match_totp
        self.patch(accounts, "match_totp", lambda *a: checked.append(a[1]) or real(*a))
        attempts = [self.accounts.authenticate("alice", creds.passphrase, f"{n:06d}") for n in range(60)]
        results = yield DeferredList(attempts, consumeErrors=True)
        self.assertEqual(len(checked), 1)
        throttled = [r for ok, r in results if not ok and r.value.throttled]
        self.assertEqual(len(throttled), 59)

    @inlineCallbacks
    def test_attempts_are_counted_before_they_are_checked(self):
        """Five attempts in flight use up the minute's budget before any of them failed."""
        creds = yield self.accounts.create("alice")
        reservations = [self.accounts.throttle.reserve("alice") for _ in range(5)]
        self.assertNotIn(None, reservations)
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("alice", creds.passphrase, self.code(creds.totp_secret))
        self.assertTrue(ctx.exception.throttled)
        for r in reservations:
            r.cancel()
        yield self.accounts.authenticate("alice", creds.passphrase, self.code(creds.totp_secret))

    @inlineCallbacks
    def test_unknown_names_are_not_logged_and_cost_a_hash(self):
        verified = []
        real = accounts.verify_passphrase
        self.patch(accounts, "verify_passphrase", lambda h, p: verified.append(h) or real(h, p))
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("my secret passphrase", "x", "123456")
        with self.assertRaises(LoginFailed):
            yield self.accounts.authenticate("nobody", "x", "123456")
        self.assertEqual(ctx.exception.reason, "unknown_user")
        self.assertEqual(len(verified), 2)  # the dummy hash, as for a real account
        failures = self.events_named("journalist.login.fail")
        self.assertEqual([(e.get("username"), e["reason"]) for e in failures],
                         [(None, "unknown_user"), (None, "unknown_user")])

    @inlineCallbacks
    def test_credential_changes_end_tokens(self):
        creds = yield self.accounts.create("alice", is_admin=True)
        self.assertTrue(creds.journalist.is_admin)
        self.assertTrue(creds.totp_uri.startswith("otpauth://totp/DeadDrop:alice?secret="))
        with self.assertRaises(DuplicateUsername):
            yield self.accounts.create("Alice")
        with self.assertRaises(AccountError):
            yield self.accounts.create("not valid!")
        token, expires = yield self.accounts.issue_token(creds.journalist)
        self.assertEqual(expires, self.now + accounts.TOKEN_LIFETIME)
        self.assertEqual((yield self.accounts.journalist_for_token(token)).username, "alice")
        self.assertIsNone((yield self.accounts.journalist_for_token(token + "x")))
        new = yield self.accounts.reset_passphrase(creds.journalist.id)
        self.assertNotEqual(new.passphrase, creds.passphrase)
        self.assertIsNone((yield self.accounts.journalist_for_token(token)))
        token, _ = yield self.accounts.issue_token(new.journalist)
        yield self.accounts.reset_totp(creds.journalist.id)
        self.assertIsNone((yield self.accounts.journalist_for_token(token)))
        fresh = yield self.accounts.get(creds.journalist.id)
        token, _ = yield self.accounts.issue_token(fresh)
        self.now += accounts.TOKEN_LIFETIME
        self.assertIsNone((yield self.accounts.journalist_for_token(token)))
        self.assertEqual((yield self.accounts.purge_tokens()), 1)
