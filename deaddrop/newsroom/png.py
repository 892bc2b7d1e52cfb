# -*- test-case-name: tests.test_png -*-
"""Checking that an uploaded logo is a real, small PNG, and keeping only what draws it.

Every chunk's CRC is checked, the image data must inflate to exactly the size the header
announces (inflated with a bound, so a decompression bomb costs nothing), and the result is
rebuilt from the chunks that draw the image (IHDR, PLTE, tRNS, IDAT, IEND): text, EXIF, time
and any bytes after IEND are dropped, so a logo carries no metadata and is no polyglot.
"""
from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_BYTES = 50_000
MAX_SIDE = 1024
_KEEP = (b"IHDR", b"PLTE", b"tRNS", b"IDAT", b"IEND")
# colour type -> channels
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


class NotAPng(ValueError):
    """Why the file was refused, in words an admin can act on."""


def _chunks(data: bytes):
    pos = len(SIGNATURE)
    while pos < len(data):
        if pos + 12 > len(data):
            raise NotAPng("the file is cut short")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 8 + length
        if end + 4 > len(data):
            raise NotAPng("the file is cut short")
        body = data[pos + 8:end]
        (crc,) = struct.unpack(">I", data[end:end + 4])
        if zlib.crc32(kind + body) != crc:
            raise NotAPng("the file is damaged (checksum error)")
        yield kind, body
        if kind == b"IEND":
            return
        pos = end + 4
    raise NotAPng("the file has no end marker")


def _expected_raw_size(width: int, height: int, depth: int, colour: int, interlaced: bool) -> int:
    bits = _CHANNELS[colour] * depth
    if not interlaced:
        return height * (1 + (width * bits + 7) // 8)
    total = 0  # Adam7: seven reduced images, each row with its filter byte
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        w = (width - x0 + dx - 1) // dx
        h = (height - y0 + dy - 1) // dy
        if w and h:
            total += h * (1 + (w * bits + 7) // 8)
    return total


def clean_png(data: bytes, max_bytes: int = MAX_BYTES, max_side: int = MAX_SIDE) -> bytes:
    """-> the PNG rebuilt from its drawing chunks; raises ``NotAPng`` saying why not."""
    if len(data) > max_bytes:
        raise NotAPng(f"the file is larger than {max_bytes:,} bytes")
    if not data.startswith(SIGNATURE):
        raise NotAPng("the file is not a PNG image")
    chunks = list(_chunks(data))
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise NotAPng("the file does not start with a PNG header")
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if not (0 < width <= max_side and 0 < height <= max_side):
        raise NotAPng(f"the image must be at most {max_side} x {max_side} pixels")
    if colour not in _DEPTHS or depth not in _DEPTHS[colour] or compression or filtering or interlace > 1:
        raise NotAPng("the PNG header is not valid")
    if colour == 3 and not any(kind == b"PLTE" for kind, _ in chunks):
        raise NotAPng("the image has no palette")
    compressed = b"".join(body for kind, body in chunks if kind == b"IDAT")
    expected = _expected_raw_size(width, height, depth, colour, bool(interlace))
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(compressed, expected + 1)
    except zlib.error:
        raise NotAPng("the image data is damaged") from None
    if len(raw) != expected or not inflater.eof:
        raise NotAPng("the image data does not match its size")
    kept = [(kind, body) for kind, body in chunks if kind in _KEEP]
    return SIGNATURE + b"".join(
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)) for kind, body in kept
    )


def tiny_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (47, 93, 138)) -> bytes:
    """A valid RGB PNG (for tests and demos)."""
    row = b"\x00" + bytes(rgb) * width
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b"")
