import os
import re
import struct
import subprocess
import time

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


def _folder_state(path: str) -> dict[str, tuple[int, int]]:
    """Each entry under ``path`` (itself too): (mtime, ctime) in nanoseconds."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [""] + dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            found[os.path.relpath(os.path.join(dirpath, name), path)] = (st.st_mtime_ns, st.st_ctime_ns)
    return found


class RunHomeTests(unittest.TestCase):
    """gpg runs in a home outside the keyring's folder (``deaddrop/crypto/run_home.py``): what it
    writes at every start (a lock, a compaction of the keybox, its agent's sockets) never dates a
    read, such as a source opening a reply, in ``DATA/gnupg``."""

    def setUp(self):
        self.home = os.path.join(short_tempdir(), "gnupg")
        self.keyring = Keyring(self.home)
        self.addCleanup(kill_gpg_agent, self.home)

    @inlineCallbacks
    def test_a_read_writes_nothing_in_the_keyring_folder_even_when_gpg_would_compact_the_keybox(self):
        key = yield deferToThread(self.keyring.generate_source_key, "p" * 40)
        other = yield deferToThread(self.keyring.generate_source_key, "q" * 40)
        ciphertext = yield deferToThread(self.keyring.encrypt, b"a reply", [key.fingerprint])
        # gpg only flags a deleted key's blob; its next compaction (three hours after the
        # keybox's last one, at any gpg start) rewrites the keybox with that second in its header.
        subprocess.run(["gpg", "--homedir", self.keyring.run_home, "--batch", "--yes", "--no-default-keyring",
                        "--keyring", self.keyring.keybox, "--delete-secret-and-public-key", other.fingerprint],
                       capture_output=True, check=True)
        with open(self.keyring.keybox, "r+b") as f:
            f.seek(20)  # the header blob's "last maintenance" time
            f.write(struct.pack(">I", int(time.time()) - 4 * 3600))
        with open(self.keyring.keybox, "rb") as f:
            keybox = f.read()
        before = _folder_state(self.home)
        time.sleep(0.05)  # file times come from a coarse clock: a change now would show

        plaintext = yield deferToThread(self.keyring.decrypt, ciphertext, "p" * 40)
        self.assertEqual(plaintext, b"a reply")
        yield deferToThread(self.keyring.encrypt, b"another", [key.fingerprint])
        self.assertTrue((yield deferToThread(self.keyring.has_secret_key, key.fingerprint)))

        self.assertEqual(_folder_state(self.home), before)
        with open(self.keyring.keybox, "rb") as f:
            self.assertEqual(f.read(), keybox)
        # Nor did it compact through the run home's link, replacing it with a keybox of its own.
        self.assertEqual(os.readlink(os.path.join(self.keyring.run_home, "pubring.kbx")), self.keyring.keybox)
        self.assertNotIn("pubring.kbx~", os.listdir(self.keyring.run_home))

    @inlineCallbacks
    def test_changes_are_written_in_the_keyring_folder_and_the_run_home_goes_at_close(self):
        run_home = self.keyring.run_home
        self.assertFalse(run_home.startswith(os.path.dirname(self.home)))
        key = yield deferToThread(self.keyring.generate_source_key, "p" * 40)
        grips = subprocess.run(["gpg", "--homedir", run_home, "--batch", "--with-colons", "--with-keygrip",
                                "--list-keys", key.fingerprint], capture_output=True, text=True, check=True).stdout
        for grip in [line.split(":")[9] for line in grips.splitlines() if line.startswith("grp:")]:
            self.assertTrue(os.path.isfile(os.path.join(self.home, "private-keys-v1.d", f"{grip}.key")))
        yield deferToThread(self.keyring.delete_key_pair, key.fingerprint)
        self.assertFalse((yield deferToThread(self.keyring.has_secret_key, key.fingerprint)))
        # gpg wrote the keybox itself, never through the link (which it would have replaced).
        self.assertEqual(os.readlink(os.path.join(run_home, "pubring.kbx")), self.keyring.keybox)
        self.assertFalse(os.path.islink(self.keyring.keybox))
        self.assertFalse(any(n.startswith("S.gpg-agent") for n in os.listdir(self.home)))
        pid = yield deferToThread(self.keyring._agent_pid)
        self.assertIsNotNone(pid)
        yield deferToThread(self.keyring.close)
        self.assertFalse(os.path.exists(run_home))
        self.assertFalse(running(pid))

    def test_a_run_home_left_behind_is_replaced_and_one_anyone_else_made_is_left_alone(self):
        run_home = self.keyring.run_home
        with open(os.path.join(run_home, "left-by-a-crash"), "w"):
            pass
        again = Keyring(self.home)
        self.addCleanup(again.close)
        self.assertNotEqual(again.run_home, run_home)
        self.assertFalse(os.path.exists(os.path.dirname(run_home)))
        self.assertEqual(os.listdir(os.path.dirname(again.run_home)), ["home"])

    def test_a_local_user_can_neither_stop_the_start_nor_see_a_read(self):
        """/dev/shm is every user's. A folder made at the name derived from the data dir (what an
        older version used, and anyone can work out) stopped the server's start; the run home's
        own times, which anyone could stat, moved at every gpg run, to the nanosecond."""
        entry = self.keyring.run_home  # the entry of /dev/shm (anyone's) that holds it
        while not os.path.basename(entry).startswith("deaddrop-gnupg-"):
            entry = os.path.dirname(entry)
        parent = os.path.dirname(entry)
        derived = re.match(r"deaddrop-gnupg-[0-9a-f]{16}", os.path.basename(entry)).group(0)
        self.keyring.close()
        squatted = os.path.join(parent, derived)
        os.mkdir(squatted)
        os.chmod(squatted, 0o755)  # (this test's user: one that is not private counts as someone else's)
        self.addCleanup(os.rmdir, squatted)
        self.keyring = Keyring(self.home)
        self.addCleanup(self.keyring.close)
        self.assertTrue(os.path.isdir(squatted))

        # The entry of /dev/shm anyone can stat is a private folder, whose times a read leaves alone.
        entry = self.keyring.run_home
        while os.path.dirname(entry) != parent:
            entry = os.path.dirname(entry)
        self.assertEqual(os.lstat(entry).st_mode & 0o777, 0o700)
        self.keyring._gpg.list_keys()  # (the agent's start, too, is behind it)
        before = os.lstat(entry)
        time.sleep(0.05)
        self.keyring._gpg.list_keys()
        after = os.lstat(entry)
        self.assertEqual((after.st_mtime_ns, after.st_ctime_ns), (before.st_mtime_ns, before.st_ctime_ns))
