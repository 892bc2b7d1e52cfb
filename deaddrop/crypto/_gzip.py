"""A streaming gzip (RFC 1952) framer that keeps the original file name in FNAME.

``gzip.GzipFile`` drops names that are not Latin-1; sources name files in every script, so the
name is written as UTF-8 (the SVS tool reads it back the same way).
"""
from __future__ import annotations

import struct
import zlib

_FLAG_FNAME = 0x08
_OS_UNKNOWN = 255


class GzipFramer:
    def __init__(self, filename: str, level: int = 0) -> None:
        self._name = filename.encode("utf-8").replace(b"\x00", b"")
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._crc = 0
        self._size = 0

    def header(self) -> bytes:
        # mtime 0: the upload time must not travel inside the envelope either.
        fixed = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, _FLAG_FNAME if self._name else 0, 0, 0, _OS_UNKNOWN)
        return fixed + (self._name + b"\x00" if self._name else b"")

    def compress(self, chunk: bytes) -> bytes:
        self._crc = zlib.crc32(chunk, self._crc)
        self._size += len(chunk)
        return self._deflate.compress(chunk)

    def trailer(self) -> bytes:
        return self._deflate.flush() + struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF)
