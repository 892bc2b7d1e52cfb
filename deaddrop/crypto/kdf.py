"""One Argon2id run per codename: the filesystem id and the source key's passphrase.

Both are deterministic (a source logs in from anywhere with only the codename). One Argon2id
run turns the codename into a 32-byte master secret; each output is then a BLAKE2b hash of it
keyed with its own per-instance pepper, so knowing one output says nothing about the other.
The Argon2id salt is itself derived from the peppers. The peppers live in the data dir (0600):
without them a stolen database cannot be attacked offline with a dictionary of codenames; with
them, a guess still costs one full Argon2id run, as it did when each output had its own run.

``legacy_*`` are the derivations of the first scheme (one Argon2id run per output, each salted
with its pepper): sources created under it are moved to the new one at their next login.

``login_tag`` is the cheap filter in front of all that: a few bits of BLAKE2b of the codename,
keyed with a third pepper, kept per source. A codename whose tag no source has cannot belong
to any source and is turned away without an Argon2id run (docs/threat-model.md weighs what the
tag gives a thief).
"""
from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass

import nacl.pwhash.argon2id as argon2id
import nacl.secret
import nacl.utils

from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.durable import create_exclusively

PEPPER_BYTES = argon2id.SALTBYTES  # 16
# Bits of a source's login tag. Fewer bits make more wrong codenames cost an Argon2id run (one in
# 2**24 / sources); more bits tell a thief holding the database and every pepper more of each
# codename (docs/threat-model.md).
LOGIN_TAG_BITS = 24


@dataclass(frozen=True)
class KdfCost:
    opslimit: int
    memlimit: int

    @classmethod
    def parse(cls, text: str) -> "KdfCost":
        """``"OPS:MEMBYTES"``, e.g. ``"12:67108864"``; or a preset name."""
        if text in PRESETS:
            return PRESETS[text]
        try:
            ops, mem = (int(part) for part in text.split(":"))
        except ValueError:
            raise ValueError(f"KDF cost must be OPS:MEMBYTES or one of {sorted(PRESETS)}, not {text!r}")
        if ops < argon2id.OPSLIMIT_MIN or mem < argon2id.MEMLIMIT_MIN:
            raise ValueError(f"KDF cost too low: opslimit >= {argon2id.OPSLIMIT_MIN}, memlimit >= {argon2id.MEMLIMIT_MIN}")
        return cls(ops, mem)


PRESETS = {
    # About 0.25 s on the 2-core machines this was tuned on; 64 MiB per running derivation.
    "default": KdfCost(opslimit=12, memlimit=64 * 1024 * 1024),
    # For tests only: microseconds, but still the real algorithm.
    "insecure-fast": KdfCost(opslimit=argon2id.OPSLIMIT_MIN, memlimit=argon2id.MEMLIMIT_MIN),
}


@dataclass(frozen=True)
class Peppers:
    filesystem_id: bytes
    key_passphrase: bytes
    # Keys the login tags. Never in the database: a copy of the database alone says nothing
    # about any codename through its tag. Made at the first start of a version that has tags.
    login_tag: bytes = b""

    @classmethod
    def load_or_create(cls, directory: str) -> "Peppers":
        """Read the peppers from ``directory``, making them on first start."""
        return cls(
            _load_or_create_pepper(os.path.join(directory, "pepper-filesystem-id")),
            _load_or_create_pepper(os.path.join(directory, "pepper-key-passphrase")),
            _load_or_create_pepper(os.path.join(directory, "pepper-login-tag")),
        )


def _load_or_create_pepper(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            pepper = f.read()
    except FileNotFoundError:
        # False when another process made it first: use theirs.
        create_exclusively(path, os.urandom(PEPPER_BYTES))
        return _load_or_create_pepper(path)
    if len(pepper) != PEPPER_BYTES:
        raise ValueError(f"{path} is damaged: expected {PEPPER_BYTES} bytes, found {len(pepper)}")
    return pepper


@dataclass(frozen=True)
class Derived:
    """What a codename yields: where the source's files are, and its key's passphrase."""

    filesystem_id: str
    key_passphrase: str

    def __repr__(self) -> str:  # never in a log line
        return "Derived(...)"


def _filesystem_id(digest: bytes) -> str:
    return base64.b32encode(digest).decode("ascii").rstrip("=").lower()


class CodenameKdf:
    """Codename derivations. Call from a worker thread; each call costs one Argon2id run."""

    def __init__(self, peppers: Peppers, cost: KdfCost, tag_bits: int = LOGIN_TAG_BITS) -> None:
        if not peppers.login_tag:
            raise ValueError("the login-tag pepper is missing")
        if not 1 <= tag_bits <= 32:
            raise ValueError("a login tag has 1 to 32 bits")
        self._peppers = peppers
        self._cost = cost
        self.tag_bits = tag_bits
        self._salt = hashlib.blake2b(peppers.filesystem_id + peppers.key_passphrase,
                                     digest_size=argon2id.SALTBYTES, person=b"dd-argon2-salt").digest()

    def _argon2id(self, codename: str, salt: bytes) -> bytes:
        forbid_reactor_thread("Argon2id")
        return argon2id.kdf(32, codename.encode("utf-8"), salt,
                            opslimit=self._cost.opslimit, memlimit=self._cost.memlimit)

    def derive(self, codename: str) -> Derived:
        """Both outputs from one Argon2id run."""
        master = self._argon2id(codename, self._salt)
        fid = hashlib.blake2b(master, key=self._peppers.filesystem_id, digest_size=32, person=b"dd-filesystem-id")
        passphrase = hashlib.blake2b(master, key=self._peppers.key_passphrase, digest_size=32, person=b"dd-key-pass")
        return Derived(_filesystem_id(fid.digest()), passphrase.hexdigest())

    def login_tag(self, codename: str) -> int:
        """The codename's login tag: microseconds, safe on the reactor thread (no Argon2id)."""
        digest = hashlib.blake2b(codename.encode("utf-8"), key=self._peppers.login_tag, digest_size=4,
                                 person=b"dd-login-tag").digest()
        return int.from_bytes(digest, "big") >> (32 - self.tag_bits)

    def legacy_filesystem_id(self, codename: str) -> str:
        return _filesystem_id(self._argon2id(codename, self._peppers.filesystem_id))

    def legacy_key_passphrase(self, codename: str) -> str:
        return self._argon2id(codename, self._peppers.key_passphrase).hex()


def _wrapping_box(derived: Derived) -> nacl.secret.SecretBox:
    key = hashlib.blake2b(bytes.fromhex(derived.key_passphrase), digest_size=32, person=b"dd-key-wrap").digest()
    return nacl.secret.SecretBox(key)


def wrap_passphrase(derived: Derived, passphrase: str) -> bytes:
    """Keep a migrated source's old key passphrase, readable only with its codename.

    A migrated source's key pair stays locked with the passphrase of the first scheme (its
    replies are encrypted to it); the record keeps that passphrase encrypted under a key only
    the new derivation gives.
    """
    return _wrapping_box(derived).encrypt(passphrase.encode("ascii"), nacl.utils.random(nacl.secret.SecretBox.NONCE_SIZE))


def unwrap_passphrase(derived: Derived, wrapped: bytes) -> str:
    return _wrapping_box(derived).decrypt(wrapped).decode("ascii")
