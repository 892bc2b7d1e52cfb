import os
import subprocess

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.crypto._process_exit import running
from deaddrop.crypto.gpg import GpgError, Keyring
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


class AgentTests(unittest.TestCase):
    """The keyring restarts its gpg-agent before each key generation (see generate_source_key)."""

    def setUp(self):
        self.home = os.path.join(short_tempdir(), "g")
        self.keyring = Keyring(self.home)
        self.addCleanup(kill_gpg_agent, self.home)

    @inlineCallbacks
    def test_stop_agent_returns_once_the_agent_has_exited(self):
        # gpgconf --kill returns while the agent is still shutting down, its socket still there
        # for a moment; on a loaded machine the next gpg reached it and waited, or gave up.
        yield deferToThread(self.keyring.generate_source_key, "p" * 40)
        pid = yield deferToThread(self.keyring._agent_pid)
        self.assertIsNotNone(pid)
        yield deferToThread(self.keyring.stop_agent)
        self.assertFalse(running(pid))
        self.assertIsNone((yield deferToThread(self.keyring._agent_pid)))

    @inlineCallbacks
    def test_key_generation_failing_says_why(self):
        # Exit 2 is also what a successful generation returns here; the message says the cause.
        self.patch(self.keyring, "gpg_binary", os.path.join(self.home, "failing-gpg"))
        with open(self.keyring.gpg_binary, "w") as f:
            f.write("#!/bin/sh\necho 'gpg: agent_genkey failed: No agent running' >&2\nexit 2\n")
        os.chmod(self.keyring.gpg_binary, 0o700)
        error = yield self.assertFailure(deferToThread(self.keyring.generate_source_key, "p" * 40), GpgError)
        self.assertIn("agent_genkey failed: No agent running", str(error))


class ConcurrentDeletionTests(unittest.TestCase):
    """Journalists may delete several sources at once: each deletion rewrites the keyring, and the
    rewrites must not trip over one another (one's swap removed the trust database another's
    import was writing: "could not rewrite the keyring (import failed, gpg exit 2)")."""

    def setUp(self):
        self.home = os.path.join(short_tempdir(), "g")
        self.keyring = Keyring(self.home)
        self.addCleanup(kill_gpg_agent, self.home)

    @inlineCallbacks
    def test_several_source_keys_deleted_at_once_all_go(self):
        from twisted.internet.defer import gatherResults

        keys = []
        for _ in range(13):
            keys.append((yield deferToThread(self.keyring.generate_source_key, "p" * 40)))
        yield gatherResults([deferToThread(self.keyring.delete_key_pair, key.fingerprint) for key in keys[:12]],
                            consumeErrors=True)
        for key in keys[:12]:
            self.assertFalse((yield deferToThread(self.keyring.has_secret_key, key.fingerprint)))
        self.assertTrue((yield deferToThread(self.keyring.has_secret_key, keys[12].fingerprint)))
        with open(os.path.join(self.home, "pubring.kbx"), "rb") as f:
            keybox = f.read()
        for key in keys[:12]:  # the rewrite dropped every deleted key's packets, not just the last
            self.assertNotIn(bytes.fromhex(key.fingerprint), keybox)
