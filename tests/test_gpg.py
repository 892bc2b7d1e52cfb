import os
import subprocess

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.crypto.gpg import Keyring
from tests._support import kill_gpg_agent, short_tempdir, test_svs


def _gpg(*args, data=b""):
    return subprocess.run(["gpg", "--homedir", test_svs().homedir, "--batch", "--trust-model", "always", *args],
                          input=data, capture_output=True, check=True).stdout


class RecipientsTests(unittest.TestCase):
    """The API stores a client-encrypted reply only if it is nothing but an encrypted message."""

    def setUp(self):
        home = os.path.join(short_tempdir(), "g")
        self.keyring = Keyring(home)
        self.addCleanup(kill_gpg_agent, home)

    @inlineCallbacks
    def test_an_encrypted_message_lists_its_recipient(self):
        armored = _gpg("--armor", "--recipient", test_svs().fingerprint, "--encrypt", data=b"hi").decode()
        ids = yield deferToThread(self.keyring.recipients_of, armored)
        self.assertEqual(len(ids), 1)
        self.assertRegex(ids[0], r"^[0-9A-F]{16}$")

    @inlineCallbacks
    def test_plaintext_smuggled_behind_a_session_key_packet_is_refused(self):
        raw = _gpg("--recipient", test_svs().fingerprint, "--encrypt", data=b"hi")
        pkesk_length = raw[1] + 2  # old-format header, one length byte (a Curve25519 PKESK)
        literal = _gpg("--store", "--compress-algo", "none", data=b"PLAINTEXT-SMUGGLED")
        forged = subprocess.run(["gpg", "--enarmor"], input=raw[:pkesk_length] + literal,
                                capture_output=True, check=True).stdout.decode().replace("ARMORED FILE", "MESSAGE")
        ids = yield deferToThread(self.keyring.recipients_of, forged)
        self.assertEqual(ids, [])
        plain = yield deferToThread(self.keyring.recipients_of, _gpg("--armor", "--store", data=b"x").decode())
        self.assertEqual(plain, [])
