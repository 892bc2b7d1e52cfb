"""A streaming gzip (RFC 1952) framer that keeps the original file name in FNAME.

``gzip.GzipFile`` drops names that are not Latin-1; sources name files in every script, so the
name is written as UTF-8 (the SVS tool reads it back the same way).

The payload travels in deflate "stored" blocks (RFC 1951 §3.2.4): what sources upload is
mostly compressed already, and a stored block is a 5-byte header in front of the bytes as they
came. So the framer never copies the payload: ``frame`` returns the headers and views of the
chunk for one ``writev``. Only the CRC-32 reads it. zlib at level 0 made the same stream but
copied every byte through its window, a quarter of the server's CPU on a large upload.
"""
from __future__ import annotations

import struct
import zlib

_FLAG_FNAME = 0x08
_OS_UNKNOWN = 255
_MAX_STORED = 0xFFFF  # LEN is 16 bits
_LAST_EMPTY_BLOCK = b"\x01\x00\x00\xff\xff"  # BFINAL=1, BTYPE=00, LEN=0, NLEN=0xffff


def _stored_header(length: int) -> bytes:
    # BFINAL=0, BTYPE=00; stored blocks end byte-aligned, so every header starts on a byte.
    return struct.pack("<BHH", 0, length, length ^ 0xFFFF)


_FULL_HEADER = _stored_header(_MAX_STORED)


class GzipFramer:
    def __init__(self, filename: str) -> None:
        self._name = filename.encode("utf-8").replace(b"\x00", b"")
        self._crc = 0
        self._size = 0

    def header(self) -> bytes:
        # mtime 0: the upload time must not travel inside the envelope either.
        fixed = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, _FLAG_FNAME if self._name else 0, 0, 0, _OS_UNKNOWN)
        return fixed + (self._name + b"\x00" if self._name else b"")

    def frame(self, chunk: bytes) -> list[bytes | memoryview]:
        """The deflate blocks carrying ``chunk``: headers and zero-copy views, in order."""
        self._crc = zlib.crc32(chunk, self._crc)
        self._size += len(chunk)
        view = memoryview(chunk)
        out: list[bytes | memoryview] = []
        for start in range(0, len(view), _MAX_STORED):
            piece = view[start:start + _MAX_STORED]
            out.append(_FULL_HEADER if len(piece) == _MAX_STORED else _stored_header(len(piece)))
            out.append(piece)
        return out

    def trailer(self) -> bytes:
        return _LAST_EMPTY_BLOCK + struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF)
