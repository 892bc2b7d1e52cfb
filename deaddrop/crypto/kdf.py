"""Argon2id derivations from a codename: the filesystem id and the source key's passphrase.

Both are deterministic (a source logs in from anywhere with only the codename) and use
different per-instance peppers, so knowing one output says nothing about the other. The
peppers live in the data dir (0600); without them, a stolen database cannot be attacked
offline with a dictionary of codenames.
"""
from __future__ import annotations

import base64
import os
from dataclasses import dataclass

import nacl.pwhash.argon2id as argon2id

from deaddrop.crypto.pool import forbid_reactor_thread
from deaddrop.store._atomic import write_atomically

PEPPER_BYTES = argon2id.SALTBYTES  # 16


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

    @classmethod
    def load_or_create(cls, directory: str) -> "Peppers":
        """Read the peppers from ``directory``, making them on first start."""
        return cls(
            _load_or_create_pepper(os.path.join(directory, "pepper-filesystem-id")),
            _load_or_create_pepper(os.path.join(directory, "pepper-key-passphrase")),
        )


def _load_or_create_pepper(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            pepper = f.read()
    except FileNotFoundError:
        pepper = os.urandom(PEPPER_BYTES)
        write_atomically(path, pepper, mode=0o600)
        return pepper
    if len(pepper) != PEPPER_BYTES:
        raise ValueError(f"{path} is damaged: expected {PEPPER_BYTES} bytes, found {len(pepper)}")
    return pepper


class CodenameKdf:
    """The two derivations. Call from a worker thread; each call costs one Argon2id run."""

    def __init__(self, peppers: Peppers, cost: KdfCost) -> None:
        self._peppers = peppers
        self._cost = cost

    def filesystem_id(self, codename: str) -> str:
        forbid_reactor_thread("Argon2id")
        digest = argon2id.kdf(
            32, codename.encode("utf-8"), self._peppers.filesystem_id,
            opslimit=self._cost.opslimit, memlimit=self._cost.memlimit,
        )
        return base64.b32encode(digest).decode("ascii").rstrip("=").lower()

    def key_passphrase(self, codename: str) -> str:
        forbid_reactor_thread("Argon2id")
        digest = argon2id.kdf(
            32, codename.encode("utf-8"), self._peppers.key_passphrase,
            opslimit=self._cost.opslimit, memlimit=self._cost.memlimit,
        )
        return digest.hex()
