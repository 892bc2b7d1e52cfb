"""OpenPGP ASCII armor (RFC 4880 section 6) for messages, without any armor header.

A client's armored reply may carry ``Comment:`` (or any other) header lines, which are stored
verbatim and are readable plaintext. The server therefore decodes the armor to the binary
message and armors it again itself, with no headers at all.
"""
from __future__ import annotations

import base64
import binascii

BEGIN = "-----BEGIN PGP MESSAGE-----"
END = "-----END PGP MESSAGE-----"
_LINE = 64


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def dearmor(text: str) -> bytes:
    """The binary OpenPGP message inside one armored ``PGP MESSAGE``; ``ValueError`` otherwise.

    Header lines are read past and dropped; the body must be clean base64 and, if a checksum
    line is there, match it.
    """
    lines = [line.rstrip(" \t\r") for line in text.strip().split("\n")]
    if len(lines) < 3 or lines[0] != BEGIN or lines[-1] != END:
        raise ValueError("not one armored PGP MESSAGE")
    inner = lines[1:-1]
    if "" in inner:  # headers (if any) end at the first blank line
        inner = inner[inner.index("") + 1:]
    elif any(":" in line for line in inner):
        raise ValueError("armor headers without the blank line after them")
    checksum = None
    if inner and inner[-1].startswith("="):
        checksum = inner.pop()[1:]
    try:
        data = base64.b64decode("".join(inner), validate=True)
        expected = base64.b64decode(checksum, validate=True) if checksum is not None else None
    except (binascii.Error, ValueError):
        raise ValueError("the armor's body is not base64") from None
    if not data:
        raise ValueError("empty armored message")
    if expected is not None and expected != _crc24(data).to_bytes(3, "big"):
        raise ValueError("the armor's checksum does not match")
    return data


def armor(data: bytes) -> str:
    """``data`` as an armored ``PGP MESSAGE`` with no header lines, ending in a newline."""
    body = base64.b64encode(data).decode("ascii")
    lines = [BEGIN, ""] + [body[i:i + _LINE] for i in range(0, len(body), _LINE)]
    lines += ["=" + base64.b64encode(_crc24(data).to_bytes(3, "big")).decode("ascii"), END]
    return "\n".join(lines) + "\n"
