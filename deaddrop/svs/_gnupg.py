"""The only place that runs ``gpg``: key generation, listing, and streaming decrypt/encrypt.

We drive the real ``gpg`` binary with ``subprocess`` rather than python-gnupg because
decryption must stream: ciphertext is fed to gpg's stdin from a thread (it may come out of a
zip entry), plaintext is read from gpg's stdout pipe by the caller and written straight into
OUTDIR, so plaintext never lands in a temp file elsewhere and memory stays bounded.

Every call uses ``--batch --no-tty --pinentry-mode loopback`` so gpg never pops a pinentry
or waits on a terminal: a passphrase, if any, arrives on its own pipe (``--passphrase-fd``),
never on the command line or in a file gpg opens. Status lines (``--status-fd 2``) decide
success, not gpg's human messages.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator, Sequence

from deaddrop.svs._errors import ItemError, SvsError

ALGORITHMS = ("curve25519", "rsa4096")
MAX_PASSPHRASE = 4096  # must fit in a pipe buffer: it is written before gpg starts reading
FEED_SIZE = 64 * 1024
UID = "DeadDrop SVS submission key"

_KEY_PARAMS = {
    # ed25519 primary for certification, cv25519 subkey for encryption.
    "curve25519": [
        "Key-Type: eddsa",
        "Key-Curve: ed25519",
        "Key-Usage: sign",
        "Subkey-Type: ecdh",
        "Subkey-Curve: cv25519",
        "Subkey-Usage: encrypt",
    ],
    "rsa4096": [
        "Key-Type: RSA",
        "Key-Length: 4096",
        "Key-Usage: sign",
        "Subkey-Type: RSA",
        "Subkey-Length: 4096",
        "Subkey-Usage: encrypt",
    ],
}


_GPG_ERR_BAD_PASSPHRASE = 11  # libgpg-error code (low 16 bits of gpg's status error numbers)


class PassphraseError(SvsError):
    """The key is protected and no (or a wrong) passphrase was given: every file would fail."""


def gpg_binary() -> str:
    found = shutil.which("gpg") or shutil.which("gpg2")
    if found is None:
        raise SvsError("gpg not found: install GnuPG 2.2 or later")
    return found


def _env() -> dict[str, str]:
    # English messages so the one-line errors we pass through read the same everywhere.
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env.pop("GNUPGHOME", None)  # --homedir always wins, but don't let it confuse gpg-agent
    return env


def read_passphrase_file(path: str) -> bytes:
    """The first line of ``path`` (without its line ending), as gpg expects on passphrase-fd."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PASSPHRASE + 2)
    except OSError as e:
        raise SvsError(f"cannot read passphrase file {path}: {e.strerror}") from None
    line = data.split(b"\n", 1)[0].rstrip(b"\r")
    if len(line) > MAX_PASSPHRASE:
        raise SvsError(f"passphrase in {path} is too long (max {MAX_PASSPHRASE} bytes)")
    if not line or b"\0" in line:
        raise SvsError(f"passphrase file {path} is empty or holds a NUL byte")
    return line


def fingerprint_groups(fpr: str) -> str:
    """``ABCD EF01 ...``: the form people compare over the phone."""
    return " ".join(fpr[i : i + 4] for i in range(0, len(fpr), 4))


@dataclass
class Result:
    returncode: int
    stdout: bytes
    status: list[list[str]]  # each status line split into words, "[GNUPG:]" removed
    messages: list[str]  # gpg's human-readable stderr lines

    def has(self, keyword: str) -> bool:
        return any(s and s[0] == keyword for s in self.status)

    def last_message(self) -> str:
        for line in reversed(self.messages):
            if line.startswith("gpg: "):
                return line
        return self.messages[-1] if self.messages else ""


def _split_stderr(data: bytes) -> tuple[list[list[str]], list[str]]:
    status, messages = [], []
    for raw in data.decode("utf-8", "replace").splitlines():
        if raw.startswith("[GNUPG:] "):
            status.append(raw[9:].split())
        elif raw.strip():
            messages.append(raw.strip())
    return status, messages


@dataclass
class KeyInfo:
    """One primary key from ``--with-colons`` output."""

    fingerprint: str
    secret: bool
    algorithm: int
    validity: str  # "r" revoked, "e" expired, "i" invalid, ... (colons field 2)
    capabilities: str  # e.g. "scESC": upper-case letters are the whole key's usable caps
    uids: list[str] = field(default_factory=list)
    subkey_algorithms: list[int] = field(default_factory=list)

    @property
    def can_encrypt(self) -> bool:
        return "E" in self.capabilities and self.validity not in ("r", "e", "i", "d", "n")


def parse_colons(text: str) -> list[KeyInfo]:
    keys: list[KeyInfo] = []
    expect_fpr_for: KeyInfo | None = None
    for line in text.splitlines():
        f = line.split(":")
        if f[0] in ("pub", "sec"):
            key = KeyInfo("", f[0] == "sec", int(f[3] or 0), f[1], f[11] if len(f) > 11 else "")
            keys.append(key)
            expect_fpr_for = key
        elif f[0] == "fpr" and expect_fpr_for is not None:
            expect_fpr_for.fingerprint = f[9]
            expect_fpr_for = None
        elif f[0] in ("sub", "ssb") and keys:
            keys[-1].subkey_algorithms.append(int(f[3] or 0))
        elif f[0] == "uid" and keys:
            keys[-1].uids.append(f[9])
    return keys


@contextmanager
def _passphrase_args(passphrase: bytes | None) -> Iterator[tuple[list[str], tuple[int, ...]]]:
    """Loopback pinentry always; with a passphrase, give gpg the read end of a fresh pipe."""
    if passphrase is None:
        yield ["--pinentry-mode", "loopback"], ()
        return
    r, w = os.pipe()
    try:
        os.write(w, passphrase + b"\n")  # < MAX_PASSPHRASE, fits the pipe buffer: no deadlock
    finally:
        os.close(w)
    try:
        yield ["--pinentry-mode", "loopback", "--passphrase-fd", str(r)], (r,)
    finally:
        os.close(r)


class Gpg:
    """A GnuPG home directory (the SVS keyring, or a throwaway one)."""

    def __init__(self, homedir: str, passphrase: bytes | None = None) -> None:
        self.homedir = os.path.abspath(homedir)
        self.passphrase = passphrase

    def _base(self) -> list[str]:
        return [gpg_binary(), "--batch", "--no-tty", "--homedir", self.homedir, "--status-fd", "2"]

    def run(self, args: Sequence[str], input: bytes = b"", use_passphrase: bool = False) -> Result:
        """Run a small gpg command whose input and output fit in memory (keys, listings)."""
        with _passphrase_args(self.passphrase if use_passphrase else None) as (pargs, fds):
            proc = subprocess.run(
                self._base() + pargs + list(args),
                input=input,
                capture_output=True,
                pass_fds=fds,
                env=_env(),
                check=False,
            )
        status, messages = _split_stderr(proc.stderr)
        return Result(proc.returncode, proc.stdout, status, messages)

    # -- keys ------------------------------------------------------------------------------

    def secret_keys(self) -> list[KeyInfo]:
        res = self.run(["--with-colons", "--fixed-list-mode", "--list-secret-keys"])
        return [k for k in parse_colons(res.stdout.decode("utf-8", "replace")) if k.secret]

    def generate_key(self, algorithm: str, passphrase: bytes | None) -> str:
        """Create the submission key pair; return its fingerprint."""
        if algorithm not in _KEY_PARAMS:
            raise SvsError(f"unknown algorithm {algorithm!r} (choose from {', '.join(ALGORITHMS)})")
        lines = list(_KEY_PARAMS[algorithm]) + [f"Name-Real: {UID}", "Expire-Date: 0"]
        if passphrase is None:
            lines.append("%no-protection")
        else:
            if b"\n" in passphrase or b"\r" in passphrase:
                raise SvsError("the passphrase must be a single line")
            lines.append("Passphrase: " + passphrase.decode("utf-8", "surrogateescape"))
        lines.append("%commit")
        params = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
        res = self.run(["--gen-key"], input=params)
        created = [s for s in res.status if s[0] == "KEY_CREATED" and len(s) >= 3]
        if res.returncode != 0 or not created:
            raise SvsError(f"key generation failed: {res.last_message() or 'gpg exit ' + str(res.returncode)}")
        return created[-1][2]

    def export_public(self, fingerprint: str) -> bytes:
        res = self.run(["--armor", "--export", fingerprint])
        if res.returncode != 0 or b"BEGIN PGP PUBLIC KEY BLOCK" not in res.stdout:
            raise SvsError(f"cannot export the public key: {res.last_message()}")
        return res.stdout

    def show_keys(self, path: str) -> list[KeyInfo]:
        """What an on-disk key file holds, without importing it anywhere."""
        res = self.run(["--with-colons", "--fixed-list-mode", "--show-keys", path])
        if res.returncode != 0:
            raise SvsError(f"{path}: not an OpenPGP key file ({res.last_message()})")
        return parse_colons(res.stdout.decode("utf-8", "replace"))

    def kill_agent(self) -> None:
        """Stop this home's gpg-agent, so no unlocked key lingers after the command."""
        gpgconf = shutil.which("gpgconf")
        if gpgconf is None or not os.path.isdir(self.homedir):
            return
        subprocess.run(
            [gpgconf, "--homedir", self.homedir, "--kill", "gpg-agent"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_env(),
            check=False,
        )

    # -- streaming -------------------------------------------------------------------------

    def decrypt(self, source: BinaryIO, progress: Callable[[int], None] | None = None) -> "DecryptJob":
        return DecryptJob(self, source, progress)

    def encrypt_to_keyfile(self, keyfile: str, source: BinaryIO, dest: BinaryIO) -> None:
        """Encrypt ``source`` to the single key in ``keyfile``, writing ciphertext to ``dest``.

        ``--recipient-file`` uses the key without importing it into this home. Both ends are
        real files handed to gpg as stdin/stdout, so nothing passes through Python.
        """
        args = self._base() + [
            "--pinentry-mode", "loopback",
            "--no-auto-key-locate",
            "--recipient-file", keyfile,
            "--encrypt",
        ]  # fmt: skip
        proc = subprocess.run(args, stdin=source, stdout=dest, stderr=subprocess.PIPE, env=_env(), check=False)
        status, messages = _split_stderr(proc.stderr)
        res = Result(proc.returncode, b"", status, messages)
        if proc.returncode != 0 or not res.has("END_ENCRYPTION"):
            raise ItemError(f"encryption failed: {res.last_message() or 'gpg exit ' + str(proc.returncode)}")


class DecryptJob:
    """One running ``gpg --decrypt``: feed ciphertext in a thread, read plaintext from ``stdout``.

    Use as a context manager; after reading ``stdout`` to EOF call :meth:`finish`, which raises
    :class:`ItemError` unless gpg decrypted *and* integrity-checked the whole input. gpg writes
    plaintext before it has seen the end (and the MDC), so callers must keep output in a temp
    file until ``finish`` returns.
    """

    def __init__(self, gpg: Gpg, source: BinaryIO, progress: Callable[[int], None] | None) -> None:
        self._gpg = gpg
        self._source = source
        self._progress = progress
        self._feed_error: BaseException | None = None
        self._seen: set[str] = set()
        self._status: list[list[str]] = []
        self._messages: deque[str] = deque(maxlen=20)
        self._finished = False
        # The passphrase pipe's read end is closed again once gpg has its own copy.
        with _passphrase_args(gpg.passphrase) as (pargs, fds):
            self.proc = subprocess.Popen(
                gpg._base() + pargs + ["--decrypt"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=fds,
                env=_env(),
            )
        self.stdout: BinaryIO = self.proc.stdout  # type: ignore[assignment]
        self._feeder = threading.Thread(target=self._feed, name="svs-gpg-feed", daemon=True)
        self._reader = threading.Thread(target=self._read_stderr, name="svs-gpg-stderr", daemon=True)
        self._feeder.start()
        self._reader.start()

    def _feed(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        done = 0
        try:
            while True:
                try:
                    chunk = self._source.read(FEED_SIZE)
                except Exception as e:  # e.g. zipfile's "Bad CRC-32" at the end of an entry
                    self._feed_error = e
                    break
                if not chunk:
                    break
                try:
                    stdin.write(chunk)
                except (OSError, ValueError):
                    break  # gpg gave up early (or we aborted): its status says why
                done += len(chunk)
                if self._progress is not None:
                    self._progress(done)
        finally:
            try:
                stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def _read_stderr(self) -> None:
        # Bounded: a hostile file can make gpg print without end (say, thousands of
        # recipients). One entry per distinct status keyword is all _failure() needs.
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith(b"[GNUPG:] "):
                words = line[9:].decode("utf-8", "replace").split()
                if words and (words[0] not in self._seen or words[0] in ("DECRYPTION_INFO", "ERROR")):
                    self._seen.add(words[0])
                    if len(self._status) < 1000:
                        self._status.append(words)
            elif line.strip():
                self._messages.append(line.decode("utf-8", "replace").strip())

    def _wait(self, timeout: float | None = None) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._feeder.join()
        self._reader.join()
        self._finished = True

    def _result(self) -> Result:
        return Result(self.proc.returncode, b"", list(self._status), list(self._messages))

    def _failure(self, res: Result, own_failures_only: bool = False) -> str | None:
        """Why gpg failed, in words for the operator; ``None`` if it fully succeeded.

        With ``own_failures_only`` (we stopped gpg ourselves), only failures gpg found on its
        own count: being killed by our closing its stdout is not one.
        """
        if self._feed_error is not None:
            return f"cannot read input: {self._feed_error}"
        if res.has("NEED_PASSPHRASE_SYM") and not res.has("DECRYPTION_OKAY"):
            # Checked first: gpg tries our passphrase on it and reports a bad passphrase,
            # which must not be taken for ours being wrong (and stop the whole run).
            return "encrypted with a passphrase, not to a key: not a server file"
        if res.has("BAD_PASSPHRASE") or any(
            # gpg 2.2 with loopback pinentry reports it only as an error code.
            s[0] == "ERROR" and len(s) > 2 and s[2].isdigit() and int(s[2]) & 0xFFFF == _GPG_ERR_BAD_PASSPHRASE
            for s in res.status
        ):
            raise PassphraseError("wrong passphrase for the submission key")
        if res.has("NEED_PASSPHRASE") and not res.has("DECRYPTION_OKAY") and self._gpg.passphrase is None:
            raise PassphraseError("the submission key is passphrase-protected: use --passphrase-file")
        if res.has("NODATA") and not res.has("ENC_TO"):
            return "not an OpenPGP encrypted file"
        if res.has("NO_SECKEY") and not res.has("DECRYPTION_OKAY"):
            # With desks (issue 29) each desk has its own SVS: a file sent to another desk is
            # the usual case, not damage. Name the keys it is for, so the journalist knows which
            # station opens it. The station cannot tell a desk's key from another instance's or
            # from one this instance replaced (a newcomer's second demo): all three are said.
            keys = sorted({s[1] for s in res.status if s[0] == "ENC_TO" and len(s) > 1})
            return (f"not encrypted to this station's submission key (encrypted to key {', '.join(keys) or 'unknown'}): "
                    "it belongs to another desk, another instance, or a key this instance has since replaced; "
                    "decrypt it on the SVS that holds that key")
        if res.has("BADMDC"):
            return "integrity check failed (tampered with or damaged)"
        if own_failures_only:  # (we may have stopped it before it began decrypting)
            if res.has("DECRYPTION_FAILED"):
                return f"corrupt or truncated ({res.last_message()})"
            return None
        if not res.has("BEGIN_DECRYPTION"):
            # e.g. `gpg --store` or a signed message: OpenPGP, but nothing was decrypted.
            return "not encrypted (plain OpenPGP data): not a server file"
        integrity = res.has("GOODMDC") or any(
            s[0] == "DECRYPTION_INFO" and len(s) > 3 and s[3] != "0" for s in res.status  # AEAD
        )
        ok = res.returncode == 0 and res.has("DECRYPTION_OKAY") and not res.has("DECRYPTION_FAILED")
        if ok and not integrity:
            return "not integrity-protected (no MDC): refusing it"
        if not ok:
            return f"corrupt or truncated ({res.last_message() or 'gpg exit ' + str(res.returncode)})"
        return None

    def finish(self) -> None:
        """Wait for gpg after ``stdout`` hit EOF; raise :class:`ItemError` unless all went well."""
        self._wait()
        reason = self._failure(self._result())
        if reason is not None:
            raise ItemError(reason)

    def abort(self) -> str | None:
        """Stop gpg after the caller failed; return gpg's own failure reason if it had one.

        When our side fails (say, the gzip header is garbage) because gpg failed first
        (wrong key: empty output), gpg's reason is the one worth reporting.
        """
        if self._finished:
            return None
        try:
            self.stdout.close()  # gpg gets EPIPE and exits if it was still writing
        except OSError:
            pass
        self._wait(timeout=10)
        return self._failure(self._result(), own_failures_only=True)

    def __enter__(self) -> "DecryptJob":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._finished:
            if self.proc.poll() is None:
                self.proc.kill()
            self._wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def throwaway_home(prefix: str = "dd-svs-") -> str:
    """A fresh, private GnuPG home for one operation, under a short path.

    gpg-agent's socket lives in the home when /run/user is absent, and unix socket paths are
    limited to 108 bytes, hence /tmp rather than a possibly deep $TMPDIR. It only ever holds
    public keys: no plaintext goes there.
    """
    base = "/tmp" if os.path.isdir("/tmp") else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)
