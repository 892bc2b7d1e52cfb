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
        fid1 = yield deferToThread(self.kdf.filesystem_id, CODENAME)
        fid2 = yield deferToThread(self.kdf.filesystem_id, CODENAME)
        passphrase = yield deferToThread(self.kdf.key_passphrase, CODENAME)
        other = yield deferToThread(self.kdf.filesystem_id, CODENAME + " x")
        self.assertEqual(fid1, fid2)
        self.assertRegex(fid1, r"^[a-z2-7]{52}$")
        self.assertRegex(passphrase, r"^[0-9a-f]{64}$")
        self.assertNotEqual(fid1, other)
        self.assertNotIn(fid1, passphrase)

    @inlineCallbacks
    def test_peppers_are_private_persistent_and_instance_specific(self):
        for name in ("pepper-filesystem-id", "pepper-key-passphrase"):
            mode = stat.S_IMODE(os.stat(os.path.join(self.dir, name)).st_mode)
            self.assertEqual(mode, 0o600)
        again = CodenameKdf(Peppers.load_or_create(self.dir), KdfCost.parse("insecure-fast"))
        elsewhere = CodenameKdf(Peppers.load_or_create(short_tempdir()), KdfCost.parse("insecure-fast"))
        a = yield deferToThread(self.kdf.filesystem_id, CODENAME)
        b = yield deferToThread(again.filesystem_id, CODENAME)
        c = yield deferToThread(elsewhere.filesystem_id, CODENAME)
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

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
        self.assertRaises(BlockingCallOnReactorThread, kdf.filesystem_id, CODENAME)
        self.assertRaises(BlockingCallOnReactorThread, kdf.key_passphrase, CODENAME)

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
