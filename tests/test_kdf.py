import os
import stat

from twisted.internet.threads import deferToThread
from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.crypto.kdf import CodenameKdf, KdfCost, Peppers
from deaddrop.crypto.pool import BlockingCallOnReactorThread
from deaddrop.crypto.gpg import Keyring
from deaddrop.store.db import Database
from tests._support import short_tempdir, kill_gpg_agent

CODENAME = "abacus abdomen abdominal abide abiding ability ablaze"


class KdfTests(unittest.TestCase):
    def setUp(self):
        self.dir = short_tempdir()
        self.kdf = CodenameKdf(Peppers.load_or_create(self.dir), KdfCost.parse("insecure-fast"))

    @inlineCallbacks
    def test_derivations_are_deterministic_distinct_and_shaped(self):
        one = yield deferToThread(self.kdf.derive, CODENAME)
        again = yield deferToThread(self.kdf.derive, CODENAME)
        other = yield deferToThread(self.kdf.derive, CODENAME + " x")
        self.assertEqual(one, again)
        self.assertRegex(one.filesystem_id, r"^[a-z2-7]{52}$")
        self.assertRegex(one.key_passphrase, r"^[0-9a-f]{64}$")
        self.assertNotEqual(one.filesystem_id, other.filesystem_id)
        self.assertNotEqual(one.key_passphrase, other.key_passphrase)
        self.assertNotIn(one.filesystem_id, one.key_passphrase)
        self.assertNotIn(CODENAME, repr(one))

    @inlineCallbacks
    def test_both_outputs_come_from_one_argon2id_run(self):
        import deaddrop.crypto.kdf as kdf_module

        runs = []
        real = kdf_module.argon2id.kdf

        def counting(*args, **kwargs):
            runs.append(1)
            return real(*args, **kwargs)

        self.patch(kdf_module.argon2id, "kdf", counting)
        yield deferToThread(self.kdf.derive, CODENAME)
        self.assertEqual(len(runs), 1)

    @inlineCallbacks
    def test_each_output_depends_on_its_own_pepper(self):
        base = yield deferToThread(self.kdf.derive, CODENAME)
        peppers = Peppers.load_or_create(self.dir)
        for changed in (Peppers(b"\x01" * 16, peppers.key_passphrase, peppers.login_tag),
                        Peppers(peppers.filesystem_id, b"\x01" * 16, peppers.login_tag)):
            other = yield deferToThread(CodenameKdf(changed, KdfCost.parse("insecure-fast")).derive, CODENAME)
            self.assertNotEqual(other, base)
        # Salted by both peppers: even the output whose own pepper is unchanged differs.
        self.assertNotEqual(other.filesystem_id, base.filesystem_id)

    @inlineCallbacks
    def test_legacy_derivations_are_those_of_the_first_scheme(self):
        import nacl.pwhash.argon2id as argon2id
        import base64

        peppers = Peppers.load_or_create(self.dir)
        cost = KdfCost.parse("insecure-fast")
        expected_fid = base64.b32encode(argon2id.kdf(32, CODENAME.encode(), peppers.filesystem_id,
                                                     opslimit=cost.opslimit, memlimit=cost.memlimit)).decode().rstrip("=").lower()
        expected_pass = argon2id.kdf(32, CODENAME.encode(), peppers.key_passphrase,
                                     opslimit=cost.opslimit, memlimit=cost.memlimit).hex()
        fid = yield deferToThread(self.kdf.legacy_filesystem_id, CODENAME)
        passphrase = yield deferToThread(self.kdf.legacy_key_passphrase, CODENAME)
        self.assertEqual((fid, passphrase), (expected_fid, expected_pass))

    @inlineCallbacks
    def test_wrapped_passphrase_opens_only_with_its_derivation(self):
        from nacl.exceptions import CryptoError

        from deaddrop.crypto.kdf import unwrap_passphrase, wrap_passphrase

        mine = yield deferToThread(self.kdf.derive, CODENAME)
        other = yield deferToThread(self.kdf.derive, CODENAME + " x")
        wrapped = wrap_passphrase(mine, "ab" * 32)
        self.assertEqual(unwrap_passphrase(mine, wrapped), "ab" * 32)
        self.assertRaises(CryptoError, unwrap_passphrase, other, wrapped)

    def test_kdf_imports_nothing_of_the_store(self):
        import subprocess
        import sys

        code = ("import sys, deaddrop.crypto.kdf, deaddrop.admission.queues; "
                "print(sorted(m for m in sys.modules if m.startswith('deaddrop.store') or m.startswith('deaddrop.web')))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.strip(), "[]")

    @inlineCallbacks
    def test_peppers_are_private_persistent_and_instance_specific(self):
        for name in ("pepper-filesystem-id", "pepper-key-passphrase", "pepper-login-tag"):
            mode = stat.S_IMODE(os.stat(os.path.join(self.dir, name)).st_mode)
            self.assertEqual(mode, 0o600)
        again = CodenameKdf(Peppers.load_or_create(self.dir), KdfCost.parse("insecure-fast"))
        elsewhere = CodenameKdf(Peppers.load_or_create(short_tempdir()), KdfCost.parse("insecure-fast"))
        a = yield deferToThread(self.kdf.derive, CODENAME)
        b = yield deferToThread(again.derive, CODENAME)
        c = yield deferToThread(elsewhere.derive, CODENAME)
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_login_tags_are_short_keyed_and_cost_no_argon2id_run(self):
        import deaddrop.crypto.kdf as kdf_module

        self.patch(kdf_module.argon2id, "kdf", lambda *a, **k: self.fail("a login tag must not run Argon2id"))
        # On the reactor thread (this test's): a tag is checked before any queue or thread.
        tag = self.kdf.login_tag(CODENAME)
        self.assertEqual(tag, self.kdf.login_tag(CODENAME))
        self.assertTrue(0 <= tag < 2 ** kdf_module.LOGIN_TAG_BITS)
        tags = {self.kdf.login_tag(f"{CODENAME} {i}") for i in range(2000)}
        self.assertGreater(len(tags), 1990)  # 24 bits: a collision among 2,000 is rare
        # Keyed with the third pepper: another instance (or a thief without it) gets other tags.
        elsewhere = CodenameKdf(Peppers.load_or_create(short_tempdir()), KdfCost.parse("insecure-fast"))
        self.assertNotEqual([elsewhere.login_tag(f"{CODENAME} {i}") for i in range(8)],
                            [self.kdf.login_tag(f"{CODENAME} {i}") for i in range(8)])
        with open(os.path.join(self.dir, "pepper-login-tag"), "rb") as f:
            self.assertEqual(len(f.read()), 16)
        short = CodenameKdf(Peppers.load_or_create(self.dir), KdfCost.parse("insecure-fast"), tag_bits=4)
        self.assertEqual({short.login_tag(f"{CODENAME} {i}") for i in range(500)}, set(range(16)))

    def test_damaged_pepper_is_refused(self):
        with open(os.path.join(self.dir, "pepper-filesystem-id"), "wb") as f:
            f.write(b"short")
        self.assertRaises(ValueError, Peppers.load_or_create, self.dir)

    def test_cost_parsing(self):
        self.assertEqual(KdfCost.parse("3:1048576"), KdfCost(3, 1048576))
        self.assertRaises(ValueError, KdfCost.parse, "fast")
        self.assertRaises(ValueError, KdfCost.parse, "0:1")


def on_running_reactor(test):
    """Run a test body from inside the running reactor, as a request handler would be."""
    from functools import wraps

    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    @wraps(test)
    def wrapper(self):
        return deferLater(reactor, 0, test, self)

    return wrapper


class ReactorThreadGuardTests(unittest.TestCase):
    """Every blocking call refuses to run on the reactor thread while the reactor runs."""

    @on_running_reactor
    def test_kdf_refuses_the_reactor_thread(self):
        kdf = CodenameKdf(Peppers.load_or_create(short_tempdir()), KdfCost.parse("insecure-fast"))
        self.assertRaises(BlockingCallOnReactorThread, kdf.derive, CODENAME)
        self.assertRaises(BlockingCallOnReactorThread, kdf.legacy_filesystem_id, CODENAME)

    @on_running_reactor
    def test_gpg_refuses_the_reactor_thread(self):
        home = os.path.join(short_tempdir(), "g")
        keyring = Keyring(home)
        self.addCleanup(kill_gpg_agent, home)
        self.assertRaises(BlockingCallOnReactorThread, keyring.generate_source_key, "x" * 64)
        self.assertRaises(BlockingCallOnReactorThread, keyring.decrypt, b"", "x")
        self.assertRaises(BlockingCallOnReactorThread, keyring.encrypt, b"", [])

    @on_running_reactor
    def test_sqlite_refuses_the_reactor_thread(self):
        from twisted.internet import reactor

        db = Database(reactor, os.path.join(short_tempdir(), "db.sqlite"))
        self.assertRaises(BlockingCallOnReactorThread, db.run_blocking, lambda conn: None)
        self.addCleanup(db.close)

    @inlineCallbacks
    def test_database_runs_work_off_the_reactor_thread(self):
        from twisted.internet import reactor
        from twisted.python import threadable

        db = Database(reactor, os.path.join(short_tempdir(), "db.sqlite"))
        yield deferToThread(db.open)
        self.addCleanup(db.close)
        on_io_thread = yield db.run(lambda conn: threadable.isInIOThread())
        self.assertFalse(on_io_thread)
