"""The server's GnuPG keyring: the submission public key and every source's key pair.

All methods block (they run the ``gpg`` binary) and refuse to run on the reactor thread.
The keyring never holds the submission *secret* key: that lives on the offline SVS.

The keyring's files are in ``DATA/gnupg``; gpg runs in a home of its own outside the data dir
(``deaddrop.crypto.run_home``), so that what gpg and its agent write at every start (locks,
sockets, a compaction's temporary file) never dates a read such as a source opening a reply.
Only the runs that change the keyring write in ``DATA/gnupg``, and they cut its times after.
"""
from __future__ import annotations

import os
import time
import secrets
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import gnupg

from deaddrop.crypto._process_exit import ProcessExit
from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.crypto.run_home import KEYBOX, SECRET_KEYS, prepare_run_home, remove_run_home
from deaddrop.day_times import cut_times
from deaddrop.durable import fsync_directory, fsync_file

# No passphrase caching: a source's passphrase must not outlive the request that used it.
# s2k-count: the passphrase is already a 256-bit Argon2id output, so GnuPG's own iterated
# hashing adds nothing, and letting the agent calibrate it costs seconds per key.
# Fixed creation date (as SecureDrop does): a key must not reveal when its source arrived.
_KEY_CREATION_DATE = "20130514T000000"
# The agent stamps a secret key file with its own clock ("protected-at"), to the second, and a
# key pair is made at a source's first submission: its clock starts at the fixed date instead
# (it is restarted before each key generation, so it reads that date, give or take a second).
_AGENT_CONF = ("default-cache-ttl 0\nmax-cache-ttl 0\nallow-loopback-pinentry\ns2k-count 65536\n"
               f"faked-system-time {_KEY_CREATION_DATE}\n")


class GpgError(Exception):
    pass


class SubmissionKeyError(GpgError):
    """The admin's submission key file is unusable; the message says why, in one line."""


@dataclass(frozen=True)
class KeyInfo:
    fingerprint: str
    public_armored: str


# gpg writes a revocation certificate for every key it generates to openpgp-revocs.d/<FPR>.rev.
# For a source key that file would prove, after the source is deleted, that the key existed;
# and nobody ever needs to revoke a source key. A plain file in the directory's place makes
# gpg fail to write it (the key itself is made all the same), so it never touches the disk.
_REVOCS = "openpgp-revocs.d"


def _block_revocation_certificates(homedir: str) -> None:
    path = os.path.join(homedir, _REVOCS)
    if os.path.isdir(path) and not os.path.islink(path):
        for name in os.listdir(path):  # left by an older version: overwrite, then remove
            _wipe(os.path.join(path, name))
        os.rmdir(path)
    if not os.path.lexists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.close(fd)


def _wipe(path: str) -> None:
    """Overwrite a small file with zeros (in place, fsynced), then remove it."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return
    except OSError:
        os.remove(path)  # a link or something odd: just drop it
        return
    try:
        size = os.fstat(fd).st_size
        os.write(fd, b"\0" * size)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.remove(path)


def _wipe_all(new: str | None) -> None:
    """Remove a keybox built for nothing, and the backup gpg made of it."""
    if new is not None:
        _wipe(new)
        _wipe(new + "~")


def prepare_homedir(homedir: str) -> None:
    """A GnuPG home for gpg to run in (0700, no revocation certificates, the agent caching nothing)."""
    os.makedirs(homedir, mode=0o700, exist_ok=True)
    os.chmod(homedir, 0o700)
    _block_revocation_certificates(homedir)
    conf = os.path.join(homedir, "gpg-agent.conf")
    if not os.path.exists(conf) or open(conf).read() != _AGENT_CONF:
        with open(conf, "w") as f:
            f.write(_AGENT_CONF)
    # The agent socket lives in the homedir unless /run/user/UID exists; its path is limited.
    if len(os.path.join(os.path.abspath(homedir), "S.gpg-agent.browser")) > 107 and not os.path.isdir(
        f"/run/user/{os.getuid()}"
    ):
        raise GpgError(f"GnuPG home path is too long for gpg-agent's socket: {homedir}")


def _prepare_keyring_folder(homedir: str) -> None:
    """``DATA/gnupg``: the keyring's files only (gpg runs elsewhere, see ``run_home``)."""
    os.makedirs(os.path.join(homedir, SECRET_KEYS), mode=0o700, exist_ok=True)
    os.chmod(homedir, 0o700)
    _block_revocation_certificates(homedir)  # removes the certificates an older version let gpg write


class _ReadWriteLock:
    """Any number of readers, or one writer alone; a waiting writer holds off new readers.

    gpg replaces ``pubring.kbx`` by renaming files, so a gpg started while another one writes
    the keyring can find no keyring at all: it then fails to generate ("no writable public
    keyring found"), to decrypt ("no secret key"), to encrypt ("invalid recipient") or to list
    and export keys. Every gpg run on this home therefore takes this lock (in this process,
    the only one that uses the home).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


# Every gpg run would otherwise lock HOME/random_seed with fcntl on start and exit, and a run
# that finds it locked sleeps 0.25, 1.25, 2.25 ... up to 10.25 s between tries: under load
# (uploads, key generation and decryption at once) one run waited over a minute. The seed
# file only speeds up seeding; libgcrypt seeds from the kernel (getrandom) without it.
_NO_SEED_FILE = "--no-random-seed-file"


def _failure_line(stderr: bytes) -> str:
    """gpg's last line saying what failed (never a passphrase: gpg prints none)."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if "fail" in line]
    return lines[-1][:200] if lines else "gpg said nothing"


def gpg_base_argv(gpg_binary: str, homedir: str) -> list[str]:
    return [gpg_binary, "--homedir", homedir, "--batch", "--no-tty", "--quiet", "--yes", "--trust-model", "always",
            _NO_SEED_FILE]


# A stopped agent exits in milliseconds; on a loaded machine, in seconds.
_AGENT_EXIT_SECONDS = 60.0


class Keyring:
    def __init__(self, homedir: str, gpg_binary: str = "gpg") -> None:
        """The keyring whose files are in ``homedir``. Makes its run home (``run_home``): call
        ``close`` when done, which stops its agent and removes it."""
        _prepare_keyring_folder(homedir)
        self.homedir = homedir
        self.keybox = os.path.join(os.path.realpath(homedir), KEYBOX)
        self.run_home = prepare_run_home(homedir, _AGENT_CONF)
        self.gpg_binary = gpg_binary
        options = ["--trust-model", "always", _NO_SEED_FILE]
        self._gpg = gnupg.GPG(gpgbinary=gpg_binary, gnupghome=self.run_home, options=options)
        self._gpg.encoding = "utf-8"
        # Imports write the keybox itself (named), not through the run home's link.
        self._importer = gnupg.GPG(gpgbinary=gpg_binary, gnupghome=self.run_home, keyring=self.keybox,
                                   options=options)
        self._importer.encoding = "utf-8"
        self._lock = _ReadWriteLock()
        self._generation = 0  # bumped by every change of the key set (under the write lock)
        # One keyring rebuild at a time: a rebuild's import runs gpg on this home outside the
        # write lock, and another rebuild's swap removes the trust database that import writes
        # (several sources deleted at once failed with "import failed, gpg exit 2").
        self._rebuilding = threading.Lock()

    # -- the submission key -------------------------------------------------------------

    def fingerprint_of(self, armored: str) -> str:
        """The fingerprint of the one public key in ``armored``, read without importing it."""
        forbid_reactor_thread("gpg")
        if "PRIVATE KEY BLOCK" in armored:
            raise SubmissionKeyError("the submission key file contains a SECRET key; give the server only the public "
                                     "half (submission-public.asc) and keep the secret key on the SVS")
        with self._lock.reading():
            found = self._gpg.scan_keys_mem(armored)
        fingerprints = sorted({key["fingerprint"] for key in found})
        if len(fingerprints) != 1:
            raise SubmissionKeyError(f"the submission key file must hold exactly one key, found {len(fingerprints)}")
        return fingerprints[0]

    def import_submission_key(self, armored: str) -> str:
        """Import the SVS's public key; return its fingerprint. Refuses a secret key."""
        forbid_reactor_thread("gpg")
        if "PRIVATE KEY BLOCK" in armored:
            raise SubmissionKeyError(
                "the submission key file contains a SECRET key; give the server only the public "
                "half (submission-public.asc) and keep the secret key on the SVS"
            )
        if "BEGIN PGP PUBLIC KEY BLOCK" not in armored:
            raise SubmissionKeyError("the submission key file is not an ASCII-armored OpenPGP public key")
        with self._changing():
            result = self._importer.import_keys(armored)
        fingerprints = sorted(set(result.fingerprints))
        if len(fingerprints) != 1:
            raise SubmissionKeyError(f"the submission key file must hold exactly one key, found {len(fingerprints)}")
        fingerprint = fingerprints[0]
        with self._lock.reading():
            keys = self._gpg.list_keys(keys=[fingerprint])
        if not keys:
            raise SubmissionKeyError("the submission key could not be imported")
        key = keys[0]
        if key.get("expires") and float(key["expires"]) < __import__("time").time():
            raise SubmissionKeyError(f"the submission key {fingerprint} has expired")
        can_encrypt = "e" in key.get("cap", "") or "E" in key.get("cap", "")
        if not can_encrypt:
            raise SubmissionKeyError(f"the submission key {fingerprint} cannot encrypt")
        return fingerprint

    # -- source keys ---------------------------------------------------------------------

    def generate_source_key(self, passphrase: str) -> KeyInfo:
        forbid_reactor_thread("gpg")
        if not passphrase or any(c in passphrase for c in "\r\n\x00"):
            raise GpgError("unusable passphrase")
        params = (
            "Key-Type: EDDSA\nKey-Curve: ed25519\nKey-Usage: sign\n"
            "Subkey-Type: ECDH\nSubkey-Curve: cv25519\nSubkey-Usage: encrypt\n"
            "Name-Real: DeadDrop source\nExpire-Date: 0\n"
            f"Creation-Date: {_KEY_CREATION_DATE}\nPassphrase: {passphrase}\n%commit\n"
        )
        # The self-signature needs the new key unlocked again (the agent caches nothing), so
        # the passphrase also goes in through loopback, on a pipe: never in a file or argv.
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, passphrase.encode("ascii") + b"\n")
            os.close(write_end)
            write_end = -1
            with self._changing():
                # gpg's own clock frozen at the fixed date (the keyring's blob times), the
                # agent's freshly started there (the secret key files' "protected-at").
                self.stop_agent()
                proc = subprocess.run(
                    self._writing_argv()
                    + ["--faked-system-time", f"{_KEY_CREATION_DATE}!", "--pinentry-mode", "loopback",
                       "--passphrase-fd", str(read_end), "--status-fd", "1", "--gen-key"],
                    input=params.encode("ascii"), pass_fds=(read_end,), capture_output=True,
                )
        finally:
            os.close(read_end)
            if write_end != -1:
                os.close(write_end)
        fingerprint = ""
        for line in proc.stdout.decode("ascii", "replace").splitlines():
            if line.startswith("[GNUPG:] KEY_CREATED "):
                fingerprint = line.split()[-1]
        # gpg exits 2 because it could not write the revocation certificate (on purpose, see
        # _REVOCS): success is the key being there, with its secret half.
        if not fingerprint:
            # Exit 2 says nothing here (it is also success): say what gpg said went wrong.
            raise GpgError(f"source key generation failed: {_failure_line(proc.stderr)}")
        if proc.returncode != 0 and not self.has_secret_key(fingerprint):
            raise GpgError("source key generation failed: the new key has no secret half")
        return KeyInfo(fingerprint, self.export_public_key(fingerprint))

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """The write lock, for a run that changes the key set; its files' times cut after."""
        with self._lock.writing():
            try:
                yield
            finally:
                self._generation += 1
                self._cut_key_file_times()

    def _writing_argv(self) -> list[str]:
        """A gpg run that writes the keybox: named, so gpg writes it (and its lock and backup)
        in ``DATA/gnupg``, not through the run home's link, which it would replace."""
        return gpg_base_argv(self.gpg_binary, self.run_home) + ["--no-default-keyring", "--keyring", self.keybox]

    def _cut_key_file_times(self) -> None:
        """Every file of the keyring gets today's midnight (UTC) as its time: a key pair is made
        at a source's first submission, and an exact mtime would date it on a seized disk. The
        access time is left ahead (``deaddrop.day_times``): every gpg run reads the keybox and a
        source opening a reply the secret key file, which ``relatime`` would otherwise date to
        the second (a keybox gpg rewrote is a new file: its access time is its creation's).
        Call with the write lock held."""
        now = time.time_ns()
        secrets_dir = os.path.join(self.homedir, SECRET_KEYS)
        try:
            names = [os.path.join(secrets_dir, n) for n in os.listdir(secrets_dir)]
        except FileNotFoundError:
            names = []
        for path in names + [secrets_dir, self.keybox, self.keybox + "~"]:
            try:
                cut_times(path, now)
            except FileNotFoundError:
                pass

    def export_public_key(self, fingerprint: str) -> str:
        forbid_reactor_thread("gpg")
        with self._lock.reading():
            armored = self._gpg.export_keys(fingerprint)
        if "BEGIN PGP PUBLIC KEY BLOCK" not in armored:
            raise GpgError("public key export failed")
        return armored

    def has_secret_key(self, fingerprint: str) -> bool:
        forbid_reactor_thread("gpg")
        with self._lock.reading():
            keys = self._gpg.list_keys(secret=True, keys=[fingerprint])
        return any(k["fingerprint"] == fingerprint for k in keys)

    def delete_key_pair(self, fingerprint: str) -> None:
        forbid_reactor_thread("gpg")
        # python-gnupg insists on a passphrase for secret deletion; with --batch --yes and a
        # full fingerprint, gpg 2.2 deletes without one, so call it directly.
        argv = self._writing_argv() + ["--delete-secret-and-public-key", fingerprint]
        with self._changing():
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
            if proc.returncode != 0 and self._gpg.list_keys(keys=[fingerprint]):
                raise GpgError("could not delete a source key")
        self._rewrite_keyring()

    def _rewrite_keyring(self) -> None:
        """Rebuild ``pubring.kbx`` from the keys still in it; drop the trust database.

        gpg only marks a deleted key's blob as free: its packets (and fingerprint) stay in
        ``pubring.kbx`` and in the ``pubring.kbx~`` backup, and ``trustdb.gpg`` (in the run
        home; in ``DATA/gnupg`` before) keeps the fingerprint gpg gave ultimate trust at
        generation. Every run here uses ``--trust-model always``, so the trust database holds
        nothing we need.

        Rebuilding costs ~15 ms per key (gpg imports them one by one), so it is done beside
        the live keyring, blocking nobody; only the final swap takes the write lock, and only
        if no key was added or deleted meanwhile (else it starts again).
        """
        with self._rebuilding:
            self._rebuild_keybox()

    def _rebuild_keybox(self) -> None:
        for _ in range(3):
            with self._lock.reading():
                generation = self._generation
                exported = self._export_all()
            new = self._build_keybox(exported)
            with self._lock.writing():
                if generation == self._generation:
                    self._swap_keybox(new)
                    return
            _wipe_all(new)
        with self._lock.writing():  # keys keep changing: do it all in one go
            self._swap_keybox(self._build_keybox(self._export_all()))

    def _export_all(self) -> bytes:
        exported = subprocess.run(gpg_base_argv(self.gpg_binary, self.run_home) + ["--export"],
                                  stdin=subprocess.DEVNULL, capture_output=True)
        if exported.returncode != 0:
            raise GpgError("could not rewrite the keyring (export failed)")
        return exported.stdout

    def _build_keybox(self, exported: bytes) -> str | None:
        """A new keybox file holding ``exported`` (None if there is nothing to hold)."""
        if not exported:
            return None
        new = os.path.join(self.homedir, f"pubring.kbx.new-{secrets.token_hex(8)}")
        proc = subprocess.run(gpg_base_argv(self.gpg_binary, self.run_home)
                              + ["--no-default-keyring", "--keyring", new, "--import"],
                              input=exported, capture_output=True)
        if proc.returncode != 0 or not os.path.exists(new):
            _wipe_all(new)
            raise GpgError(f"could not rewrite the keyring (import failed, gpg exit {proc.returncode})")
        fsync_file(new)
        return new

    def _swap_keybox(self, new: str | None) -> None:
        """Put ``new`` in place of ``pubring.kbx``; remove its backups and the trust database.
        Call with the write lock held."""
        live = self.keybox
        if new is None:  # nothing left at all
            _wipe(live)
        else:
            os.replace(new, live)
            _wipe(new + "~")
        for stale in ("pubring.kbx~", "trustdb.gpg"):
            _wipe(os.path.join(self.homedir, stale))
        _wipe(os.path.join(self.run_home, "trustdb.gpg"))
        fsync_directory(self.homedir)  # the renames and removals above are durable
        self._cut_key_file_times()

    # -- encryption ----------------------------------------------------------------------

    def encrypt(self, plaintext: bytes, fingerprints: list[str], armor: bool = False) -> bytes:
        forbid_reactor_thread("gpg")
        with self._lock.reading():
            result = self._gpg.encrypt(plaintext, fingerprints, armor=armor, always_trust=True)
        if not result.ok:
            raise GpgError(f"encryption failed: {result.status}")
        return result.data

    def decrypt(self, ciphertext: bytes, passphrase: str) -> bytes:
        forbid_reactor_thread("gpg")
        with self._lock.reading():
            result = self._gpg.decrypt(ciphertext, passphrase=passphrase)
        if not result.ok:
            raise GpgError(f"decryption failed: {result.status}")
        return result.data

    def recipients_of(self, armored_message: str) -> list[str]:
        """Key ids an OpenPGP message is encrypted to; empty unless it is *only* that.

        The message must be public-key encrypted session keys followed by exactly one
        encrypted data packet (tag 18 or 20) and nothing else, so a plaintext literal packet
        smuggled after a session-key packet is refused.
        """
        forbid_reactor_thread("gpg")
        with self._lock.reading():
            proc = subprocess.run(
                gpg_base_argv(self.gpg_binary, self.run_home) + ["--list-packets", "--list-only"],
                input=armored_message.encode("utf-8"), capture_output=True,
            )
        ids: list[str] = []
        tags: list[int] = []
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            if line.startswith("# off=") and " tag=" in line:
                tags.append(int(line.split(" tag=", 1)[1].split()[0]))
            elif line.startswith(":pubkey enc packet:") and "keyid " in line:
                ids.append(line.split("keyid ", 1)[1].split()[0].upper())
        shape_ok = (
            proc.returncode == 0 and len(tags) >= 2 and tags[-1] in (18, 20)
            and all(tag == 1 for tag in tags[:-1]) and len(ids) == len(tags) - 1
        )
        return ids if shape_ok else []

    def subkey_ids(self, fingerprint: str) -> list[str]:
        forbid_reactor_thread("gpg")
        with self._lock.reading():
            keys = self._gpg.list_keys(keys=[fingerprint])
        if not keys:
            return []
        key = keys[0]
        return [key["keyid"].upper()] + [sub[0].upper() for sub in key.get("subkeys", [])]

    def start_agent(self) -> None:
        """Start the run home's gpg-agent now (the server, at start-up, before its first cut of
        file times): its start chmods the secret key folder, a change no cut can hide, which a
        source's first reply read would otherwise make."""
        try:
            subprocess.run(["gpg-connect-agent", "--homedir", self.run_home, "/bye"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=_AGENT_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            pass  # an agent that does not answer: the first run that needs one starts it

    def close(self) -> None:
        """Stop the agent and remove the run home."""
        self.stop_agent()
        remove_run_home(self.run_home)

    def stop_agent(self) -> None:
        """Stop the run home's gpg-agent; return once it has exited.

        ``gpgconf --kill`` returns as soon as the agent has acknowledged, and the agent only then
        removes its sockets and exits: on a loaded machine, long enough for the next client (the
        key generation that follows) to find it still listening. That client is dropped, and the
        agent it starts in its place finds the old one still there and quits: the client waits
        for the old agent to go (gpg), or gives up ("can't connect to the agent").
        """
        pid = self._agent_pid()
        gone = ProcessExit(pid) if pid is not None else None
        try:
            subprocess.run(
                ["gpgconf", "--homedir", self.run_home, "--kill", "gpg-agent"],
                stdin=subprocess.DEVNULL, capture_output=True,
            )
            if gone is not None and not gone.wait(_AGENT_EXIT_SECONDS):
                gone.kill()  # hung: it holds nothing we need (the key files are written)
                gone.wait(_AGENT_EXIT_SECONDS)
        finally:
            if gone is not None:
                gone.close()

    def _agent_pid(self) -> int | None:
        """The pid of the agent serving this home, if one answers (none is started)."""
        try:
            proc = subprocess.run(
                ["gpg-connect-agent", "--homedir", self.run_home, "--no-autostart", "GETINFO pid", "/bye"],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=_AGENT_EXIT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return None  # one that does not answer: gpgconf still tells it to go
        for line in proc.stdout.decode("ascii", "replace").splitlines():
            if line.startswith("D ") and line[2:].strip().isdigit():
                return int(line[2:])
        return None

