"""Logo checks: only real, small PNGs, rebuilt from the chunks that draw them."""
from __future__ import annotations

import struct
import zlib

from twisted.trial import unittest

from deaddrop.newsroom import png


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def image(width: int, height: int, data: bytes, extra: bytes = b"", colour: int = 2, depth: int = 8) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return png.SIGNATURE + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", data) + chunk(b"IEND", b"")


class CleanPngTests(unittest.TestCase):
    def test_a_real_png_is_kept_pixel_for_pixel(self):
        original = png.tiny_png(5, 3)
        self.assertEqual(png.clean_png(original), original)

    def test_metadata_and_trailing_bytes_are_dropped(self):
        row = b"\x00" + b"\x10\x20\x30" * 2
        dirty = image(2, 2, zlib.compress(row * 2), extra=chunk(b"tEXt", b"Author\x00Eve Source")
                      + chunk(b"eXIf", b"MM\x00*GPS")) + b"<html>polyglot</html>"
        clean = png.clean_png(dirty)
        self.assertNotIn(b"Eve Source", clean)
        self.assertNotIn(b"GPS", clean)
        self.assertNotIn(b"polyglot", clean)
        self.assertEqual(clean, image(2, 2, zlib.compress(row * 2)))

    def test_refusals(self):
        good = png.tiny_png(4, 4)
        bomb = image(1024, 1024, zlib.compress(b"\x00" * 50_000_000))  # inflates far past the header's size
        cases = {
            "not a PNG image": b"GIF89a" + b"\x00" * 40,
            "cut short": good[:-6],
            "checksum": good[:20] + bytes([good[20] ^ 1]) + good[21:],
            "pixels": png.tiny_png(1025, 1),
            "does not match its size": image(2, 2, zlib.compress(b"\x00" * 5)),
            "larger than": good + b"\x00" * png.MAX_BYTES,
            "no end marker": good[:-12],
        }
        for why, data in cases.items():
            with self.assertRaises(png.NotAPng, msg=why) as caught:
                png.clean_png(data)
            self.assertIn(why, str(caught.exception))
        with self.assertRaises(png.NotAPng):
            png.clean_png(bomb, max_bytes=10_000_000)
