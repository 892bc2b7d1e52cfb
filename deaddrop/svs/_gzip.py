"""A streaming gzip (RFC 1952) reader that also returns the FNAME header field.

The standard library's ``gzip`` module reads FNAME but throws it away (and would decode it as
Latin-1). Documents are named by that field, so this module parses the header itself and
inflates the body chunk by chunk with ``zlib``: memory stays bounded however large the
document is, and however well it compresses (a "zip bomb" only costs time and disk).
"""
from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Iterator

READ_SIZE = 64 * 1024
# Upper bound on one inflate output chunk: deflate can expand ~1000x, so without it one 64 KiB
# read could turn into 64 MiB in memory.
MAX_CHUNK = 1024 * 1024
# FNAME is kept up to this many bytes (the rest is skipped, still streaming); names get cut far
# shorter by the sanitiser anyway.
MAX_FNAME = 4096

_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 0x02, 0x04, 0x08, 0x10
_RESERVED = 0xE0


class GzipFormatError(Exception):
    """Not a gzip stream, or a corrupt/truncated one (bad header, CRC or length)."""


class GzipReader:
    """Pull-based reader: call :meth:`read_header` once, then iterate :meth:`chunks`.

    ``chunks`` handles concatenated members (as ``gunzip`` does) and checks every member's
    CRC-32 and length; trailing bytes that are not another member are an error, since they
    mean the stream is not what the server wrote.
    """

    def __init__(self, source: BinaryIO, read_size: int = READ_SIZE, max_chunk: int = MAX_CHUNK) -> None:
        self._src = source
        self._read_size = read_size
        self._max_chunk = max_chunk
        self._pending = b""  # read from the source but not consumed yet
        self._header_done = False

    # -- low-level input -------------------------------------------------------------------

    def _take(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        return self._src.read(self._read_size)

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            data = self._take()
            if not data:
                raise GzipFormatError("truncated gzip header or trailer")
            need = n - len(out)
            out += data[:need]
            self._pending = data[need:]
        return bytes(out)

    # -- header ----------------------------------------------------------------------------

    def _member_header(self) -> bytes | None:
        fixed = self._exact(10)
        if fixed[:2] != b"\x1f\x8b":
            raise GzipFormatError("not a gzip stream")
        if fixed[2] != 8:
            raise GzipFormatError("unknown gzip compression method")
        flags = fixed[3]
        if flags & _RESERVED:
            raise GzipFormatError("reserved gzip header flags set")
        crc = zlib.crc32(fixed)
        if flags & _FEXTRA:
            xlen_raw = self._exact(2)
            crc = zlib.crc32(xlen_raw, crc)
            (xlen,) = struct.unpack("<H", xlen_raw)
            # Skip in pieces: at most 64 KiB, but still no reason to hold it.
            while xlen:
                piece = self._exact(min(xlen, self._read_size))
                crc = zlib.crc32(piece, crc)
                xlen -= len(piece)
        name = None
        if flags & _FNAME:
            name, name_crc = self._zstring_crc(MAX_FNAME, crc)
            crc = name_crc
        if flags & _FCOMMENT:
            _, crc = self._zstring_crc(0, crc)
        if flags & _FHCRC:
            (hcrc,) = struct.unpack("<H", self._exact(2))
            if hcrc != crc & 0xFFFF:
                raise GzipFormatError("gzip header CRC mismatch")
        return name

    def _zstring_crc(self, keep: int, crc: int) -> tuple[bytes, int]:
        """Read a NUL-terminated field, keeping its first ``keep`` bytes; update the header CRC."""
        kept = bytearray()
        while True:
            data = self._take()
            if not data:
                raise GzipFormatError("truncated gzip header")
            nul = data.find(b"\0")
            part = data if nul < 0 else data[: nul + 1]
            if nul >= 0:
                self._pending = data[nul + 1 :]
            crc = zlib.crc32(part, crc)
            if len(kept) < keep:
                kept += part[: keep - len(kept)]
            if nul >= 0:
                return bytes(kept).split(b"\0", 1)[0], crc

    def read_header(self) -> bytes | None:
        """Parse the first member's header; return its raw FNAME bytes, or ``None`` if absent."""
        name = self._member_header()
        self._header_done = True
        return name

    # -- body ------------------------------------------------------------------------------

    def _member_body(self) -> Iterator[bytes]:
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        crc = 0
        size = 0
        while not inflater.eof:
            data = inflater.unconsumed_tail or self._take()
            if data:
                out = inflater.decompress(data, self._max_chunk)
            else:
                # Input is exhausted, but inflate may still hold output back (a long match
                # cut by max_length): drain it before calling the stream truncated.
                out = inflater.decompress(b"", self._max_chunk)
                if not out and not inflater.eof:
                    raise GzipFormatError("truncated gzip stream")
            if out:
                crc = zlib.crc32(out, crc)
                size += len(out)
                yield out
        self._pending = inflater.unused_data + self._pending
        want_crc, want_size = struct.unpack("<II", self._exact(8))
        if want_crc != crc:
            raise GzipFormatError("gzip CRC mismatch (corrupt document)")
        if want_size != size & 0xFFFFFFFF:
            raise GzipFormatError("gzip length mismatch (corrupt document)")

    def chunks(self) -> Iterator[bytes]:
        """Yield the decompressed data; raise :class:`GzipFormatError` on any corruption."""
        if not self._header_done:
            self.read_header()
        try:
            while True:
                yield from self._member_body()
                data = self._take()
                if not data:
                    return
                self._pending = data
                if data[:1] != b"\x1f" or (len(data) > 1 and data[1:2] != b"\x8b"):
                    raise GzipFormatError("unexpected data after the gzip stream")
                self._member_header()
        except zlib.error as e:
            raise GzipFormatError(f"corrupt gzip stream ({e})") from None
