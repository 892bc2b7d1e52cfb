# -*- test-case-name: tests.test_hotp -*-
"""RFC 4226 HOTP, for YubiKeys programmed in OATH-HOTP mode.

The key holds a counter that moves on each press; the server keeps the counter value it expects
next. A code from the next ``LOOK_AHEAD`` counter values is accepted, and the server's counter
moves just past it: presses that never reached the server (the key pressed in another window)
are skipped over, which is RFC 4226's resynchronisation (section 7.4). A code behind the
server's counter is never accepted again; one of the last ``LOOK_BEHIND`` is named as reused.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

DIGITS = 6  # what SecureDrop and the YubiKey's HOTP slot give
LOOK_AHEAD = 10  # codes ahead of the expected one still accepted (and resynchronised to)
LOOK_BEHIND = 10  # codes just used, recognised as reused rather than simply wrong
MIN_SECRET_BYTES = 16  # RFC 4226 section 4: at least 128 bits (a YubiKey's is 160)
MAX_SECRET_BYTES = 64

HOTP_BAD = -1
HOTP_REUSED = -2

_CODE_RE = re.compile(r"[0-9]{6}")


def parse_secret(text: str) -> bytes:
    """The secret as the YubiKey personalisation tool shows it: hex, spaces allowed.
    Raises ``ValueError`` with a line for the admin."""
    cleaned = re.sub(r"\s+", "", text or "")
    if not re.fullmatch(r"[0-9A-Fa-f]*", cleaned) or len(cleaned) % 2:
        raise ValueError("the HOTP secret must be hexadecimal (spaces allowed), an even number of digits")
    secret = bytes.fromhex(cleaned)
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise ValueError(f"the HOTP secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes "
                         f"({2 * MIN_SECRET_BYTES} to {2 * MAX_SECRET_BYTES} hex digits); this one is {len(secret)}")
    return secret


def new_secret() -> bytes:
    """A 160-bit secret (for tests and for admins who program the key from it)."""
    return secrets.token_bytes(20)


def code(secret: bytes, counter: int) -> str:
    """RFC 4226 section 5.3: HMAC-SHA-1 of the 8-byte counter, dynamically truncated."""
    mac = hmac.new(secret, counter.to_bytes(8, "big"), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    binary = int.from_bytes(mac[offset:offset + 4], "big") & 0x7FFFFFFF
    return str(binary % 10 ** DIGITS).zfill(DIGITS)


def match(secret: bytes, typed: Any, expected: int) -> int:
    """-> the counter value ``typed`` was made at (``expected`` or up to ``LOOK_AHEAD - 1`` past
    it), ``HOTP_REUSED`` for one of the ``LOOK_BEHIND`` values before it, or ``HOTP_BAD``.

    Every candidate is compared (no early exit), so the time taken says nothing about where a
    code matched."""
    if not isinstance(typed, str):
        return HOTP_BAD
    typed = typed.replace(" ", "").strip()
    if not _CODE_RE.fullmatch(typed):
        return HOTP_BAD
    found, reused = HOTP_BAD, False
    for counter in range(max(0, expected - LOOK_BEHIND), expected + LOOK_AHEAD):
        if hmac.compare_digest(code(secret, counter).encode(), typed.encode()):
            if counter >= expected and found == HOTP_BAD:
                found = counter
            elif counter < expected:
                reused = True
    if found != HOTP_BAD:
        return found
    return HOTP_REUSED if reused else HOTP_BAD
