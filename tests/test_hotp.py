"""YubiKeys in HOTP mode (issue 30, item 3): RFC 4226's codes, each accepted once, a window of
codes ahead that resynchronises, and the same throttling as TOTP."""
from __future__ import annotations


from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

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
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[0], 0), 0)
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[3], 1), 3)
        self.assertEqual(hotp.match(RFC4226_SECRET, " 969 429 ", 1), 3)
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[0], 1), hotp.HOTP_REUSED)
        self.assertEqual(hotp.match(RFC4226_SECRET, RFC4226_CODES[2], 4), hotp.HOTP_REUSED)
        far = hotp.code(RFC4226_SECRET, hotp.LOOK_AHEAD)
        self.assertEqual(hotp.match(RFC4226_SECRET, far, 0), hotp.HOTP_BAD)  # beyond the window
        self.assertEqual(hotp.match(RFC4226_SECRET, far, 1), hotp.LOOK_AHEAD)
        for bad in ("", "12345", "1234567", "abcdef", None, 755224):
            self.assertEqual(hotp.match(RFC4226_SECRET, bad, 0), hotp.HOTP_BAD, bad)

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
