"""YubiKeys in HOTP mode (issue 30, item 3): RFC 4226's codes, each accepted once, a window of
codes ahead that resynchronises, and the same throttling as TOTP."""
from __future__ import annotations


from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom import accounts
from deaddrop.newsroom.accounts import LoginFailed
from deaddrop.second_factor import hotp
from deaddrop.store import factor_queries as fq
from tests import test_journalists

# RFC 4226, Appendix D: the secret "12345678901234567890" and its codes for counters 0 to 9.
RFC4226_SECRET = b"12345678901234567890"
RFC4226_CODES = ["755224", "287082", "359152", "969429", "338314", "254676", "287922", "162583", "399871", "520489"]


class HotpCodeTests(unittest.TestCase):
    def test_rfc4226_test_vectors(self):
        self.assertEqual([hotp.code(RFC4226_SECRET, c) for c in range(10)], RFC4226_CODES)

    def test_a_window_ahead_resynchronises_and_codes_behind_are_reused(self):
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[0], 0), (0, False))
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[3], 1), (3, False))
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[4], 1), (4, False))  # 3 ahead: at once
        self.assertTrue(hotp.match(RFC4226_SECRET, " 338 314 ", 1).accepted)
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[0], 1), (hotp.HOTP_REUSED, False))
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[2], 4), (hotp.HOTP_REUSED, False))
        for bad in ("", "12345", "1234567", "abcdef", None, 755224):
            self.assertEqual(hotp.match(RFC4226_SECRET, bad, 0), (hotp.HOTP_BAD, False), bad)

    def test_further_ahead_only_two_consecutive_codes_resynchronise(self):
        # Issue 30: "a counter window of a few codes ahead with resynchronisation". 4 ahead of
        # the expected counter is not accepted alone: it is the first of a pair (RFC 4226, 7.4).
        first = hotp.match(RFC4226_SECRET, RFC4226_CODES[5], 1)
        self.assertEqual((first, first.accepted), ((5, True), False))
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[6], 1, first=5), (6, False))
        # Only the very next code completes it: not the same one again, not one further on.
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[5], 1, first=5), (5, True))
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[7], 1, first=5), (7, True))
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[9], 1, first=5), (9, True))
        # The window of 3 still takes codes at once while a pair is begun.
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[2], 1, first=5), (2, False))
        # The look-ahead ends RESYNC_AHEAD past the expected counter.
        edge, beyond = hotp.code(RFC4226_SECRET, hotp.RESYNC_AHEAD), hotp.code(RFC4226_SECRET, hotp.RESYNC_AHEAD + 1)
        self.assertEqual(hotp.match(RFC4226_SECRET, edge, 0), (hotp.RESYNC_AHEAD, True))
        self.assertEqual(hotp.match(RFC4226_SECRET, beyond, 0), (hotp.HOTP_BAD, False))
        self.assertEqual(hotp.match(RFC4226_SECRET, beyond, 0, first=hotp.RESYNC_AHEAD), (hotp.RESYNC_AHEAD + 1, False))
        # A pair begun before the counter moved past it completes nothing.
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[6], 8, first=5), (hotp.HOTP_REUSED, False))

    def test_a_guess_has_four_chances_in_a_million_at_once(self):
        # What one try of someone holding the passphrase and the certificate can hit at once.
        secret, expected = hotp.new_secret(), 1000
        at_once = {hotp.code(secret, c) for c in range(expected, expected + hotp.LOOK_AHEAD + 1)}
        self.assertEqual(hotp.LOOK_AHEAD, 3)
        self.assertLessEqual(len(at_once), 4)
        for typed in at_once:
            self.assertTrue(hotp.match(secret, typed, expected).accepted)
        ahead = [hotp.code(secret, c) for c in range(expected + 4, expected + hotp.RESYNC_AHEAD + 1)]
        self.assertFalse(any(hotp.match(secret, typed, expected).accepted for typed in ahead if typed not in at_once))

    def test_secrets_in_hex_as_the_yubikey_tool_shows_them(self):
        self.assertEqual(hotp.parse_secret("3132 3334 3536 3738 3930 3132 3334 3536 3738 3930"), RFC4226_SECRET)
        self.assertEqual(hotp.parse_secret(RFC4226_SECRET.hex().upper()), RFC4226_SECRET)
        for bad in ("xyz", "313", "31" * 15, "31" * 65, ""):
            with self.assertRaises(ValueError):
                hotp.parse_secret(bad)


class HotpAccountTests(unittest.TestCase):
    # The same accounts over a real database and pools as the TOTP tests, at the same instant.
    setUp = test_journalists.AccountsTests.setUp
    events_named = test_journalists.AccountsTests.events_named

    @inlineCallbacks
    def yubikey_account(self, name="yuki"):
        creds = yield self.accounts.create(name)
        yield self.db.run(fq.reset_to_hotp, creds.journalist.id, "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP", RFC4226_SECRET.hex())
        return creds

    @inlineCallbacks
    def test_rfc4226_codes_log_in_once_and_three_ahead_resynchronises(self):
        creds = yield self.yubikey_account()
        journalist = yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[0])
        self.assertEqual(journalist.username, "yuki")
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[0])
        self.assertEqual(ctx.exception.reason, "hotp_reused")
        self.assertEqual([e["username"] for e in self.events_named("journalist.hotp.reused")], ["yuki"])
        # The key was pressed three times where the server did not see it: the fourth code still
        # logs in, and the server's counter follows the key.
        yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[4])
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[2])  # skipped, now behind
        self.assertEqual(ctx.exception.reason, "hotp_reused")
        yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[5])
        [(counter,)] = yield self.db.run(lambda c: c.execute("SELECT hotp_counter FROM journalists").fetchall())
        self.assertEqual(counter, 6)
        # The right code with a wrong passphrase uses nothing up.
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("yuki", creds.passphrase + "x", RFC4226_CODES[6])
        self.assertEqual(ctx.exception.reason, "bad_passphrase")
        yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[6])

    @inlineCallbacks
    def test_a_code_further_ahead_logs_in_with_the_next_one_and_only_that(self):
        creds = yield self.yubikey_account()
        yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[0])

        @inlineCallbacks
        def refused(code, passphrase=creds.passphrase):
            with self.assertRaises(LoginFailed) as ctx:
                yield self.accounts.authenticate("yuki", passphrase, code)
            return ctx.exception.reason

        def counter():
            return self.db.run(lambda c: c.execute("SELECT hotp_counter FROM journalists").fetchone()[0])

        # Four presses the server never saw: the fifth code is 4 ahead, the first of a pair.
        self.assertEqual((yield refused(RFC4226_CODES[5])), "hotp_next_code")
        self.assertEqual((yield counter()), 1)  # nothing moved yet
        yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[6])
        self.assertEqual((yield counter()), 7)
        self.assertEqual((yield refused(RFC4226_CODES[6])), "hotp_reused")
        self.assertEqual([e["username"] for e in self.events_named("journalist.hotp.reused")], ["yuki"])
        self.assertEqual([e["reason"] for e in self.events_named("journalist.login.fail")],
                         ["hotp_next_code", "hotp_reused"])

        # A wrong passphrase begins nothing (13 after 12 is then a first code, not a second)...
        far = [hotp.code(RFC4226_SECRET, c) for c in range(7, 20)]
        self.assertEqual((yield refused(far[5], creds.passphrase + "x")), "bad_passphrase")
        self.assertEqual((yield refused(far[6])), "hotp_next_code")
        self.throttle_clock.advance(61)
        # ... and only the code right after the first completes the pair.
        self.assertEqual((yield refused(far[8])), "hotp_next_code")  # 15 is not 14: a new first code
        self.assertEqual((yield refused(far[8])), "hotp_next_code")  # nor is 15 again
        self.assertEqual((yield refused("000000")), "bad_hotp")  # and a wrong code ends the pair
        self.throttle_clock.advance(61)
        self.assertEqual((yield refused(far[9])), "hotp_next_code")
        self.assertEqual((yield counter()), 7)
        # The pair lasts five minutes.
        self.now += accounts.HOTP_RESYNC_SECONDS + 1
        self.throttle_clock.advance(61)
        self.assertEqual((yield refused(far[10])), "hotp_next_code")  # 17 after the pair begun at 16 expired
        yield self.accounts.authenticate("yuki", creds.passphrase, far[11])
        self.assertEqual((yield counter()), 19)

    @inlineCallbacks
    def test_a_hotp_account_takes_no_totp_code_and_is_throttled_as_totp_is(self):
        from deaddrop.newsroom.accounts import TOTP_INTERVAL, totp_code

        creds = yield self.yubikey_account()
        step = int(self.now // TOTP_INTERVAL)
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("yuki", creds.passphrase, totp_code("JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP", step))
        self.assertEqual(ctx.exception.reason, "bad_hotp")
        for _ in range(4):
            with self.assertRaises(LoginFailed):
                yield self.accounts.authenticate("yuki", creds.passphrase, "000000")
        with self.assertRaises(LoginFailed) as ctx:
            yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[0])
        self.assertTrue(ctx.exception.throttled)
        self.throttle_clock.advance(61)
        yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[0])  # not used up by the refusal

    @inlineCallbacks
    def test_resetting_to_totp_forgets_the_yubikey(self):
        from deaddrop.newsroom.accounts import TOTP_INTERVAL, totp_code

        creds = yield self.yubikey_account()
        new = yield self.accounts.reset_totp(creds.journalist.id)
        with self.assertRaises(LoginFailed):
            yield self.accounts.authenticate("yuki", creds.passphrase, RFC4226_CODES[0])
        yield self.accounts.authenticate("yuki", creds.passphrase,
                                         totp_code(new.totp_secret, int(self.now // TOTP_INTERVAL)))
