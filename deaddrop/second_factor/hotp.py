# -*- test-case-name: tests.test_hotp -*-
"""RFC 4226 HOTP, for YubiKeys programmed in OATH-HOTP mode.

The key holds a counter that moves on each press; the server keeps the counter value it expects
next. A press that never reached the server (the key touched in another window) puts the key
ahead. RFC 4226 section 7.4 resynchronises with a look-ahead window, and each code the window
takes is one more a guesser may hit: a window of 10 gave someone holding the passphrase and the
certificate 10 chances in a million per try, where TOTP's gives 3. So:

- a code up to ``LOOK_AHEAD`` past the expected one is accepted at once (4 chances per try);
- a code further ahead, up to ``RESYNC_AHEAD`` past it, is accepted only with the key's next
  code after it, typed at the next login (the RFC's "sequence of HOTP values" resynchronisation):
  a guess must hit two consecutive codes, about 46 in a million times one in a million;
- the server's counter then moves just past the code accepted, and a code behind it is never
  accepted again (one of the last ``LOOK_BEHIND`` is named as reused).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any, NamedTuple

DIGITS = 6  # what SecureDrop and the YubiKey's HOTP slot give
LOOK_AHEAD = 3  # codes past the expected one accepted at once (and resynchronised to)
RESYNC_AHEAD = 50  # codes past it accepted with the key's next code after them
LOOK_BEHIND = 10  # codes just used, recognised as reused rather than simply wrong
MIN_SECRET_BYTES = 16  # RFC 4226 section 4: at least 128 bits (a YubiKey's is 160)
MAX_SECRET_BYTES = 64

HOTP_BAD = -1
HOTP_REUSED = -2


class Matched(NamedTuple):
    """What a typed code is: ``counter`` is the counter value it was made at, or HOTP_BAD or
    HOTP_REUSED; ``ahead`` says it is a code too far ahead to accept alone, the first of a
    resynchronising pair (the next login must bring ``counter + 1``)."""

    counter: int
    ahead: bool = False

    @property
    def accepted(self) -> bool:
        return self.counter >= 0 and not self.ahead


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


def match(secret: bytes, typed: Any, expected: int, first: int | None = None) -> Matched:
    """``typed`` against the key whose next code the server expects at ``expected``: accepted if
    made at ``expected`` or up to ``LOOK_AHEAD`` past it, or right after ``first`` (the far code
    of a resynchronisation begun at the last login); ahead if made up to ``RESYNC_AHEAD`` past
    ``expected``; reused for one of the ``LOOK_BEHIND`` values before it; otherwise bad.

    Every candidate is compared (no early exit), so the time taken says nothing about where a
    code matched."""
    if not isinstance(typed, str):
        return Matched(HOTP_BAD)
    typed = typed.replace(" ", "").strip()
    if not _CODE_RE.fullmatch(typed):
        return Matched(HOTP_BAD)
    ahead_end = expected + RESYNC_AHEAD
    second = first + 1 if first is not None and expected <= first + 1 <= ahead_end + 1 else None
    found, far, reused = HOTP_BAD, HOTP_BAD, False
    for counter in range(max(0, expected - LOOK_BEHIND), ahead_end + 2):
        if hmac.compare_digest(code(secret, counter).encode(), typed.encode()):
            if counter < expected:
                reused = True
            elif counter <= expected + LOOK_AHEAD or counter == second:
                found = counter if found == HOTP_BAD else found
            elif counter <= ahead_end:
                far = counter if far == HOTP_BAD else far
    if found != HOTP_BAD:
        return Matched(found)
    if far != HOTP_BAD:
        return Matched(far, ahead=True)
    return Matched(HOTP_REUSED if reused else HOTP_BAD)
