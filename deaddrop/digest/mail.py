# -*- test-case-name: tests.integration.test_digest -*-
"""The digest mail itself: its text, OpenPGP encryption to a journalist's key, PGP/MIME (RFC 3156).

Everything here blocks (gpg runs as a subprocess) and runs in a thread pool. What the mail
shows anyone but the journalist is fixed: the subject is constant, the Date header is the
sending slot (not the moment of sending), the Message-ID is random, and the encrypted part has
the same length whatever the counts (the text is padded, OpenPGP compression is off), so
neither the headers nor the size say whether anything arrived.

The text is in the journalist's language (the account's, English until one is chosen), through
the journalist catalogue (``scripts/i18n`` extracts this module's messages into it): a
``Speech`` is handed in. A language whose words are longer may take a larger multiple of
``PLAINTEXT_SIZE``, the same whatever the counts. The subject stays English and constant: mail
servers see it, and it must say nothing, not even a language.
"""
from __future__ import annotations

import email.utils
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from typing import Sequence

from deaddrop.crypto.gpg import gpg_base_argv
from deaddrop.i18n.speech import ENGLISH, Speech

SUBJECT = "Encrypted message"
PLAINTEXT_SIZE = 1024  # the inner MIME entity, padded to exactly this many bytes (or a multiple)
MAX_KEY_BYTES = 256 * 1024
# Sizes are computed with every count this long, so no count changes a mail's size.
_BIGGEST_COUNT = 10 ** 12 - 1


class KeyProblem(ValueError):
    """The armored key cannot be used for the digest (one line for the admin)."""


class EncryptionFailed(Exception):
    """gpg refused to encrypt to the registered key (expired or revoked since)."""


def day_of(slot: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(slot))


def plaintext(slot: float, submissions: int, sources: int, desks: Sequence[tuple[str, int, int]] = (),
              say: Speech = ENGLISH) -> bytes:
    """The inner MIME entity: counts and the day, in ``say``'s language, padded to
    ``PLAINTEXT_SIZE`` bytes (or a multiple of it, for a journalist on so many desks, or in a
    language so long, that their lines need more; the size follows from the desks' names and
    the language and never from the counts: no message here changes with a count but its
    digits). ``desks``: (name, submissions, sources) for each of the journalist's desks, on an
    instance with several (issue 29)."""
    _ = say._

    def lines(n: int, m: int, per_desk: Sequence[tuple[str, int, int]]) -> list[str]:
        said = [
            _("DeadDrop digest, {day} (UTC)", day=say.day(slot)),
            "",
            _("Since the last digest:"),
            "  " + _("new submissions: {n}", n=n),
            "  " + _("new sources: {n}", n=m),
        ]
        if per_desk:
            said += ["", _("Of those, each of your desks received:")]
            # TRANSLATORS: the same words for every count (a mail's size must not follow a count):
            # write it so that it reads for any number, as a label and its number if need be.
            said += ["  " + _("{desk}: {submissions} new submissions, {sources} new sources", desk=name,
                              submissions=s, sources=r) for name, s, r in per_desk]
        return said + [
            "",
            _("Log in to the journalist interface to read them.") if n else _("Nothing new."),
            "",
            _("This mail comes at every interval, also when nothing arrived: its coming says nothing."),
        ]

    largest = _BIGGEST_COUNT
    longest = max(len(_body(lines(count, largest, [(name, largest, largest) for name, _s, _r in desks])))
                  for count in (0, largest))  # with and without news: its last line differs
    size = PLAINTEXT_SIZE * max(1, -(-(longest + 2) // PLAINTEXT_SIZE))
    return _padded(lines(submissions, sources, desks), size)


def test_plaintext(now: float, say: Speech = ENGLISH) -> bytes:
    """The inner entity of ``deaddrop-admin digest test``'s mail: no counts at all (a count sent at
    an admin's moment would date arrivals more finely than the slots do), the same padded size."""
    _ = say._
    lines = [
        _("DeadDrop digest test, {day} (UTC)", day=say.day(now)),
        "",
        _("An admin sent this with deaddrop-admin digest test: the digest mail reaches this address, and only "
          "your key opens it."),
        "",
        _("It counts nothing: the next digest, at its usual time, counts what arrived."),
    ]
    return _padded(lines, PLAINTEXT_SIZE * max(1, -(-(len(_body(lines)) + 2) // PLAINTEXT_SIZE)))


def _body(lines: list[str]) -> bytes:
    # 8bit UTF-8 inside the encryption: the armour carries it; the mail itself stays ASCII.
    return ("Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
            + "\r\n".join(lines) + "\r\n").encode("utf-8")


def _padded(lines: list[str], size: int = PLAINTEXT_SIZE) -> bytes:
    body = _body(lines)
    if len(body) + 2 > size:
        raise ValueError("digest text longer than its padded size")
    # Padding: spaces on a last line (invisible), then the final line break.
    return body + b" " * (size - len(body) - 2) + b"\r\n"


def encrypt(gpg_binary: str, homedir: str, armored_key: str, data: bytes) -> bytes:
    """Armored OpenPGP message to the one key in ``armored_key``, imported nowhere."""
    fd, key_path = tempfile.mkstemp(prefix="recipient-", suffix=".asc", dir=homedir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(armored_key)
        proc = subprocess.run(
            gpg_base_argv(gpg_binary, homedir)
            + ["--armor", "--compress-algo", "none", "--no-auto-key-locate", "--recipient-file", key_path,
               "--status-fd", "2", "--encrypt"],
            input=data, capture_output=True, check=False, env=_gpg_env())
    finally:
        os.unlink(key_path)
    if proc.returncode != 0 or b"END_ENCRYPTION" not in proc.stderr:
        raise EncryptionFailed("gpg could not encrypt to the registered key (expired or revoked?)")
    return proc.stdout


def _gpg_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env.pop("GNUPGHOME", None)
    return env


def mime_message(from_addr: str, to_addr: str, slot: float, armored: bytes) -> bytes:
    """A multipart/encrypted message (RFC 3156), with LF line ends: the SMTP client sends each
    as CRLF (and dot-stuffs)."""
    domain = from_addr.rsplit("@", 1)[-1]
    boundary = "dd-" + secrets.token_hex(12)
    headers = [
        f"From: {from_addr}",
        f"To: {to_addr}",
        f"Subject: {SUBJECT}",
        # The slot, not now: a send delayed by retries must not date what it counts any finer.
        f"Date: {email.utils.formatdate(slot, usegmt=True)}",
        # Random: the usual time-and-host Message-ID would carry the exact time of sending.
        f"Message-ID: <{secrets.token_hex(16)}@{domain}>",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/encrypted; protocol="application/pgp-encrypted"; boundary="{boundary}"',
    ]
    armored_text = armored.decode("ascii").replace("\r\n", "\n").strip("\n")
    parts = [
        "\n".join(headers),
        "",
        "This is an OpenPGP/MIME encrypted message (RFC 3156).",
        f"--{boundary}",
        "Content-Type: application/pgp-encrypted",
        "Content-Description: PGP/MIME version identification",
        "",
        "Version: 1",
        "",
        f"--{boundary}",
        'Content-Type: application/octet-stream; name="encrypted.asc"',
        "Content-Description: OpenPGP encrypted message",
        'Content-Disposition: inline; filename="encrypted.asc"',
        "",
        armored_text,
        "",
        f"--{boundary}--",
        "",
    ]
    return "\n".join(parts).encode("ascii")


def compose(gpg_binary: str, homedir: str, from_addr: str, to_addr: str, armored_key: str, slot: float,
            submissions: int, sources: int, desks: Sequence[tuple[str, int, int]] = (),
            say: Speech = ENGLISH) -> bytes:
    """Blocking (thread pool): the whole mail, ready for SMTP ``DATA``."""
    return mime_message(from_addr, to_addr, slot, encrypt(gpg_binary, homedir, armored_key,
                                                         plaintext(slot, submissions, sources, desks, say)))


def compose_test(gpg_binary: str, homedir: str, from_addr: str, to_addr: str, armored_key: str,
                 now: float, say: Speech = ENGLISH) -> bytes:
    """Blocking: the test mail, the digest's shape, dated to the minute it was sent."""
    minute = now - now % 60
    return mime_message(from_addr, to_addr, minute, encrypt(gpg_binary, homedir, armored_key,
                                                            test_plaintext(now, say)))


def check_key(armored: str, gpg_binary: str = "gpg") -> str:
    """The fingerprint of the one usable public key in ``armored``; :class:`KeyProblem` if none."""
    if len(armored.encode("utf-8", "replace")) > MAX_KEY_BYTES:
        raise KeyProblem("the key file is larger than 256 KiB: not a public key")
    home = tempfile.mkdtemp(prefix="dd-key-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        # Not gpg_base_argv: with --trust-model always, gpg wants a trust database it never made
        # when it meets an expired key, and fails instead of listing it.
        proc = subprocess.run([gpg_binary, "--homedir", home, "--batch", "--no-tty", "--with-colons",
                               "--fixed-list-mode", "--show-keys"],
                              input=armored.encode("utf-8", "replace"), capture_output=True, check=False,
                              env=_gpg_env())
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if proc.returncode != 0:
        raise KeyProblem("not an OpenPGP key file")
    keys: list[dict[str, str]] = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        f = line.split(":")
        if f[0] in ("pub", "sec"):
            keys.append({"type": f[0], "validity": f[1], "caps": f[11] if len(f) > 11 else "", "fpr": ""})
        elif f[0] == "fpr" and keys and not keys[-1]["fpr"]:
            keys[-1]["fpr"] = f[9]
    if any(k["type"] == "sec" for k in keys):
        raise KeyProblem("the file holds a SECRET key: give only the journalist's public key")
    if len(keys) != 1:
        raise KeyProblem(f"the file must hold exactly one public key (found {len(keys)})")
    key = keys[0]
    if "E" not in key["caps"] or key["validity"] in ("r", "e", "i", "d", "n"):
        raise KeyProblem(f"key {key['fpr']} cannot encrypt (expired, revoked or sign-only)")
    return key["fpr"]
