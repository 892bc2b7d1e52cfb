"""The WebAuthn checks of ``deaddrop.second_factor.security_keys`` without a browser (issue 30):
a key in software answers as a CTAP2 key would; the relying party's origin, the challenge, the
signature and the counter are each checked, and a refused answer changes nothing."""
from __future__ import annotations

import sqlite3
import time
from unittest import mock

from twisted.trial import unittest

from deaddrop.second_factor import security_keys as sk
from deaddrop.store import migrations
from tests._soft_key import SoftKey

RP = sk.RelyingParty.for_host("Newsroom.Example", 8443)
SITE = "DeadDrop"


class SecurityKeyCheckTests(unittest.TestCase):
    def setUp(self):
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        migrations.upgrade(self.conn)
        self.conn.execute("INSERT INTO journalists(uuid, username, password_hash, totp_secret, created_at,"
                          " password_changed_at) VALUES ('u', 'alice', 'x', 'y', 0, 0)")
        self.key = SoftKey(RP.origin)
        options, state = sk.begin_registration(RP, SITE, "12345678-1234-5678-1234-567812345678", "alice", [])
        self.assertEqual((options["rp"]["id"], options["attestation"]), ("newsroom.example", "none"))
        self.assertEqual(options["authenticatorSelection"]["residentKey"], "discouraged")
        self.assertEqual(options["authenticatorSelection"]["userVerification"], "preferred")
        self.new = sk.finish_registration(RP, SITE, state, self.key.create(options))
        sk.store_key(self.conn, 1, RP.id, self.new, "blue YubiKey", 0)

    def assertion(self, **answer):
        options, state = sk.begin_assertion(RP, SITE, [self.new.credential_data])
        return state, self.key.get(options, **answer)

    def counter(self) -> int:
        return self.conn.execute("SELECT sign_count FROM security_keys").fetchone()[0]

    def refused(self, state, answer) -> str:
        with self.assertRaises(sk.KeyRefused) as ctx:
            sk.verify_assertion(self.conn, RP, SITE, 1, state, answer, 1)
        return ctx.exception.reason

    def test_the_origin_is_checked_at_registration_and_at_every_login(self):
        self.assertEqual(self.new.aaguid, "00010203-0405-0607-0809-0a0b0c0d0e0f")
        options, state = sk.begin_registration(RP, SITE, "12345678-1234-5678-1234-567812345678", "alice", [])
        with self.assertRaises(sk.KeyRefused) as ctx:
            sk.finish_registration(RP, SITE, state, SoftKey(RP.origin).create(options, origin="https://phish.example"))
        self.assertEqual(ctx.exception.reason, "wrong_origin")
        for origin in ("https://newsroom.example:8444", "http://newsroom.example:8443", "https://evil.example:8443"):
            self.assertEqual(self.refused(*self.assertion(origin=origin)), "wrong_origin", origin)
        self.assertEqual(self.counter(), 0)
        self.assertEqual(sk.verify_assertion(self.conn, RP, SITE, 1, *self.assertion(), 1).name, "blue YubiKey")

    def test_a_counter_that_does_not_go_up_is_a_clone(self):
        sk.verify_assertion(self.conn, RP, SITE, 1, *self.assertion(counter=5), 1)
        self.assertEqual(self.refused(*self.assertion(counter=5)), "counter_regression")
        self.assertEqual(self.refused(*self.assertion(counter=3)), "counter_regression")
        self.assertEqual(self.counter(), 5)
        sk.verify_assertion(self.conn, RP, SITE, 1, *self.assertion(counter=6), 1)
        self.assertEqual(self.counter(), 6)

    def test_a_key_that_never_counts_is_accepted_as_such(self):
        for _ in range(2):
            sk.verify_assertion(self.conn, RP, SITE, 1, *self.assertion(counter=0), 1)

    def test_challenges_signatures_and_strangers(self):
        state, answer = self.assertion()
        other_state, _ = self.assertion()
        self.assertEqual(self.refused(other_state, answer), "malformed")  # another challenge
        stranger = SoftKey(RP.origin)
        stranger.credential_id = self.key.credential_id  # same id, another secret: a forged signature
        options, state = sk.begin_assertion(RP, SITE, [self.new.credential_data])
        self.assertEqual(self.refused(state, stranger.get(options)), "bad_key")
        self.assertEqual(self.refused(state, {"id": "x"}), "malformed")
        self.assertEqual(self.refused(state, "not json"), "malformed")
        state, answer = self.assertion()
        with mock.patch.object(time, "time", return_value=time.time() + sk.CEREMONY_SECONDS + 1):
            self.assertEqual(self.refused(state, answer), "expired")
        self.assertEqual(self.refused(None, answer), "expired")

    def test_a_key_registers_once(self):
        with self.assertRaises(sk.KeyRefused) as ctx:
            sk.store_key(self.conn, 1, RP.id, self.new, "again", 0)
        self.assertEqual(ctx.exception.reason, "duplicate")
        self.assertEqual(sk.key_name("  blue   YubiKey "), "blue YubiKey")
        for bad in ("", " ", "x" * 65, "a\x00b"):
            with self.assertRaises(ValueError):
                sk.key_name(bad)
