"""Metadata leaves no SVS: ``deaddrop-svs export`` and ``scrub`` clean files with the real mat2.

The fixtures are made here: a JPEG (Pillow) with EXIF camera, owner and GPS fields, and a PDF
written by hand with Author and Creator in its Info dictionary. What comes out is decrypted
with the journalist's key (real gpg) and searched for every one of those values.
"""
from __future__ import annotations

import io
import os
import stat

from PIL import Image
from twisted.trial import unittest

from deaddrop.svs import _mat2, _sandbox
from deaddrop.svs._gzip import GzipReader
from deaddrop.svs._findings import parse_show
from deaddrop.svs._mat2 import RAM_FILESYSTEMS, content_mismatch, filesystem_type
from tests._svs_helpers import gpg_decrypt, let_spy_report, real_mat2, run_cli, spy_mat2, tree
from tests.test_svs import _StationCase

# Every value the fixtures carry: none may come out.
SECRETS = [b"CanonMakeX", b"EOS SecretModel", b"Jane Whistle", b"Jane Owner", b"SN123456",
           b"SecretWriter", b"LeakPDF"]


def jpeg_with_exif() -> bytes:
    exif = Image.Exif()
    exif[0x010F] = "CanonMakeX"  # Make
    exif[0x0110] = "EOS SecretModel"  # Model
    exif[0x013B] = "Jane Whistle"  # Artist
    camera = exif.get_ifd(0x8769)
    camera[0xA430] = "Jane Owner"  # CameraOwnerName
    camera[0xA431] = "SN123456"  # BodySerialNumber
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2], gps[3], gps[4] = "N", (48.0, 51.0, 29.0), "E", (2.0, 17.0, 40.0)
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 40)).save(buf, "JPEG", exif=exif)
    return buf.getvalue()


def pdf_with_info() -> bytes:
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
        b"<< /Author (Jane Whistle) /Creator (SecretWriter 9) /Producer (LeakPDF) >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj %s endobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer << /Size %d /Root 1 0 R /Info 4 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


class _MetadataCase(_StationCase):
    def setUp(self) -> None:
        super().setUp()
        self.personal_home, self.personal_pub = self.other_key("journalist")
        self.files = os.path.join(self.base, "files")
        os.mkdir(self.files)
        self.exp = os.path.join(self.base, "export")

    def put(self, name: str, data: bytes) -> str:
        path = os.path.join(self.files, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def export(self, *files: str, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
        return run_cli("--home", self.home, "export", *files, "--to-key", self.personal_pub, "--out", self.exp, *extra)

    def decrypted(self, rel: str) -> bytes:
        res = gpg_decrypt(self.personal_home, os.path.join(self.exp, rel))
        self.assertEqual(res.returncode, 0, res.stderr)
        return res.stdout

    def assertClean(self, data: bytes) -> None:
        for secret in SECRETS:
            self.assertNotIn(secret, data)


class ExportCleansTests(_MetadataCase):
    def test_fixtures_carry_what_they_should(self) -> None:
        # Without this, a clean result could just mean a fixture that never had metadata.
        jpeg, pdf = jpeg_with_exif(), pdf_with_info()
        for value in SECRETS[:5]:
            self.assertIn(value, jpeg)
        for value in (b"Jane Whistle", b"SecretWriter"):
            self.assertIn(value, pdf)
        self.assertIn(34853, Image.open(io.BytesIO(jpeg)).getexif())  # the GPS IFD

    def test_jpeg_and_pdf_leave_without_their_metadata(self) -> None:
        photo = self.put("photo.jpg", jpeg_with_exif())
        paper = self.put("paper.pdf", pdf_with_info())
        code, out, err = self.export(photo, paper)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(tree(self.exp)), ["paper.pdf.gpg", "photo.jpg.gpg"])
        jpeg = self.decrypted("photo.jpg.gpg")
        self.assertClean(jpeg)
        image = Image.open(io.BytesIO(jpeg))
        self.assertEqual(image.size, (32, 24))  # still the picture
        self.assertEqual(dict(image.getexif()), {})
        pdf = self.decrypted("paper.pdf.gpg")
        self.assertTrue(pdf.startswith(b"%PDF-"))
        self.assertClean(pdf)
        # One line per file says what kinds were removed (names of fields, never their values).
        photo_line = next(line for line in out.splitlines() if line.startswith(photo))
        for kind in ("Make", "Model", "Artist", "OwnerName", "GPSLatitude", "GPSLongitude"):
            self.assertIn(kind, photo_line)
        paper_line = next(line for line in out.splitlines() if line.startswith(paper))
        self.assertIn("author", paper_line)
        self.assertIn("creator", paper_line)
        self.assertNotIn("Jane", out + err)

    def test_a_server_document_is_cleaned_inside_its_gzip(self) -> None:
        self.document(2, jpeg_with_exif(), "Ferienfoto Ü.JPG".encode())
        code, out, err = self.export(os.path.join(self.inbox, "2-brave_otter-doc.gz.gpg"))
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(tree(self.exp)), ["2-brave_otter-doc.gz.gpg"])
        reader = GzipReader(io.BytesIO(self.decrypted("2-brave_otter-doc.gz.gpg")))
        self.assertEqual(reader.read_header(), "Ferienfoto Ü.JPG".encode())  # same name, raw bytes
        jpeg = b"".join(reader.chunks())
        self.assertClean(jpeg)
        self.assertEqual(Image.open(io.BytesIO(jpeg)).size, (32, 24))
        self.assertIn("GPSPosition", out)

    def test_a_message_goes_through_unchanged(self) -> None:
        msg = self.server_file("1-brave_otter-msg.gpg", b"meet at noon")
        code, out, err = self.export(msg)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.decrypted("1-brave_otter-msg.gpg"), b"meet at noon")
        self.assertIn("no file metadata", out)

    def test_a_type_mat2_cannot_clean_is_refused_unless_named(self) -> None:
        blob = self.put("recording.xyz", b"\x00\x01binary with who-knows-what inside")
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, out, err = self.export(blob, photo)
        self.assertEqual(code, 1)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn(f"FAILED {blob}: mat2 cannot clean this type", lines[0])
        self.assertIn("--keep-metadata", lines[0])
        self.assertEqual(sorted(tree(self.exp)), ["photo.jpg.gpg"])  # the rest still went
        # Named with --keep-metadata (any spelling of the same file): it leaves unchanged.
        code, out, err = self.export(blob, extra=("--keep-metadata", os.path.join(self.files, ".", "recording.xyz")))
        self.assertEqual(code, 0, err)
        self.assertIn("metadata KEPT", out)
        self.assertEqual(self.decrypted("recording.xyz.gpg"), b"\x00\x01binary with who-knows-what inside")

    def test_kept_metadata_is_listed(self) -> None:
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, out, err = self.export(photo, extra=("--keep-metadata", photo))
        self.assertEqual(code, 0, err)
        self.assertIn("KEPT", out)
        self.assertIn("GPSPosition", out)
        self.assertIn(b"Jane Owner", self.decrypted("photo.jpg.gpg"))

    def test_a_file_named_for_another_type_is_refused(self) -> None:
        # mat2 goes by the name: a JPEG called .txt would pass as "harmless text", EXIF and all.
        disguised = self.put("notes.txt", jpeg_with_exif())
        code, _, err = self.export(disguised)
        self.assertEqual(code, 1)
        self.assertIn("named .txt but it is a JPEG image", err)
        self.assertFalse(os.path.exists(os.path.join(self.exp, "notes.txt.gpg")))

    def test_a_damaged_file_is_refused(self) -> None:
        broken = self.put("broken.pdf", b"%PDF-1.4\nnot really\n")
        code, _, err = self.export(broken)
        self.assertEqual(code, 1)
        self.assertIn(f"FAILED {broken}: mat2", err)
        self.assertEqual(tree(self.exp), set())


class ScrubTests(_MetadataCase):
    def test_scrub_writes_clean_plaintext_without_a_key(self) -> None:
        photo = self.put("photo.jpg", jpeg_with_exif())
        paper = self.put("paper.pdf", pdf_with_info())
        blob = self.put("data.bin", b"\x00" * 10)
        out_dir = os.path.join(self.base, "publish")
        code, out, err = run_cli("--home", self.home, "scrub", photo, paper, blob, "--out", out_dir)
        self.assertEqual(code, 1)
        self.assertIn("FAILED", err)
        self.assertIn("data.bin", err)
        self.assertEqual(sorted(tree(out_dir)), ["paper.pdf", "photo.jpg"])
        for name in ("paper.pdf", "photo.jpg"):
            path = os.path.join(out_dir, name)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            with open(path, "rb") as f:
                self.assertClean(f.read())
        self.assertIn("Scrubbed 2 of 3 files", out)

    def test_scrub_refuses_server_files_and_keeps_named_ones(self) -> None:
        msg = self.server_file("1-brave_otter-msg.gpg", b"x")
        blob = self.put("data.bin", b"\x00" * 10)
        out_dir = os.path.join(self.base, "publish")
        code, _, err = run_cli("--home", self.home, "scrub", msg, blob, "--out", out_dir, "--keep-metadata", blob)
        self.assertEqual(code, 1)
        self.assertIn("decrypt it first", err)
        self.assertEqual(sorted(tree(out_dir)), ["data.bin"])


class IsolationTests(_MetadataCase):
    """mat2 runs offline, on a copy in RAM, with nothing of the operator's environment."""

    def setUp(self) -> None:
        super().setUp()
        self.record = os.path.join(self.base, "seen")
        os.mkfifo(self.record)  # mat2 sees none of our folders (bwrap): this FIFO, bound in, carries its notes out
        self.reader = os.open(self.record, os.O_RDWR | os.O_NONBLOCK)
        self.addCleanup(os.close, self.reader)
        real = real_mat2(self)
        # Stands in front of the real mat2 on PATH: notes where and how it was run, then runs it.
        spy_mat2(self, self.base,
                 f"{{ echo \"netns $(readlink /proc/self/ns/net)\"; echo \"cwd $(pwd)\"; "
                 "echo \"ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\"; "
                 f"env | sed 's/^/env /'; }} >> {self.record}\n"
                 f"exec {real} \"$@\"\n")
        self.patch(_sandbox, "_isolation", None)
        let_spy_report(self, self.record)
        os.environ["http_proxy"] = os.environ["HTTPS_PROXY"] = "http://127.0.0.1:9/"
        self.addCleanup(self._restore_env)

    def _restore_env(self) -> None:
        os.environ.pop("http_proxy", None)
        os.environ.pop("HTTPS_PROXY", None)

    def test_mat2_has_no_network_no_proxy_and_works_in_ram(self) -> None:
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, _, err = self.export(photo)
        self.assertEqual(code, 0, err)
        seen = os.read(self.reader, 65536).decode().splitlines()
        self.assertGreaterEqual(len([s for s in seen if s.startswith("netns ")]), 3)  # show, clean, show
        own_netns = os.readlink("/proc/self/ns/net")
        for line in seen:
            if line.startswith("netns "):
                self.assertNotEqual(line.split()[1], own_netns, "mat2 must not share our network namespace")
            if line.startswith("ifaces "):
                self.assertEqual(line.split()[1:], ["lo"])
            if line.startswith("env "):
                self.assertNotIn("proxy", line.lower())
            if line.startswith("cwd "):
                cwd = line[4:]
                self.assertIn(filesystem_type(cwd), RAM_FILESYSTEMS)  # the copy never touched a disk
                self.assertFalse(cwd.startswith(self.base))
                self.assertFalse(os.path.exists(cwd), "the RAM copy must be gone")
        self.assertIn(f"env TMPDIR={cwd}", seen)
        # Nothing but ciphertext was ever written to OUTDIR (the USB stick that leaves).
        self.assertEqual(sorted(tree(self.exp)), ["photo.jpg.gpg"])

    def test_no_ram_folder_means_no_copy(self) -> None:
        photo = self.put("photo.jpg", jpeg_with_exif())
        self.patch(_mat2, "ram_folder_candidates", lambda: [self.base])  # a disk: refused
        code, _, err = self.export(photo)
        self.assertEqual(code, 1)
        self.assertIn("no RAM-backed folder", err)
        self.assertFalse(os.path.exists(self.exp))


class ParsingTests(unittest.SynchronousTestCase):
    def test_show_output(self) -> None:
        found = parse_show("[+] Metadata for in.jpg:\n    Make: X\n    GPSPosition: 1, 2\n")
        self.assertEqual((found.supported, found.kinds), (True, ["GPSPosition", "Make"]))
        nested = parse_show("[+] Metadata for in.zip:\n[++] Metadata for a.jpg:\n      Artist: Y\n"
                            "      date_time: 2020\n")
        self.assertEqual(nested.kinds, ["Artist", "date_time"])
        self.assertEqual(parse_show("  No metadata found in in.txt.\n").kinds, [])
        refused = parse_show("[-] in.bin's format (application/octet-stream) is not supported\n")
        self.assertFalse(refused.supported)
        self.assertIn("application/octet-stream", refused.problem or "")
        self.assertFalse(parse_show("[-] something went wrong when processing in.jpg: \n").supported)
        hostile = parse_show("[+] Metadata for in.png:\n    \x1b[2Jevil: x\n")
        self.assertNotIn("\x1b", hostile.kinds[0])

    def test_content_against_extension(self) -> None:
        jpeg = b"\xff\xd8\xff\xe0" + b"\0" * 20
        self.assertIsNone(content_mismatch(".jpg", jpeg))
        self.assertIsNone(content_mismatch(".JPEG", jpeg))
        self.assertIn("JPEG", content_mismatch(".txt", jpeg) or "")
        self.assertIn("without an extension", content_mismatch("", jpeg) or "")
        self.assertIsNone(content_mismatch(".docx", b"PK\x03\x04rest"))
        self.assertIn("binary", content_mismatch(".txt", b"text\0more") or "")
        self.assertIsNone(content_mismatch(".txt", "plain words ü".encode()))
