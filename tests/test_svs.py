"""Tests for ``deaddrop-svs`` (the offline Secure Viewing Station tool), with the real gpg."""
from __future__ import annotations

import gzip
import io
import os
import socket
import stat
import subprocess
import tracemalloc
import zipfile

from twisted.trial import unittest

from deaddrop.svs import _gzip
from deaddrop.svs._gnupg import Gpg, parse_colons
from deaddrop.svs._gzip import GzipFormatError, GzipReader
from deaddrop.svs._names import MAX_NAME_BYTES, numbered, parse_submission_name, sanitise_filename, split_ext
from deaddrop.svs._outdir import OutDir
from deaddrop.svs.decrypt import run_decrypt
from deaddrop.svs.home import Home
from tests._svs_helpers import (
    gpg_decrypt,
    gpg_encrypt,
    make_gzip,
    run_cli,
    scratch_gpg_home,
    short_tempdir,
    tree,
)

MB = 1024 * 1024


# -- pure name handling ------------------------------------------------------------------------


class SubmissionNameTests(unittest.SynchronousTestCase):
    def test_parses_the_three_kinds(self) -> None:
        for raw, kind in [("1-brave_otter-msg.gpg", "msg"), ("3-brave_otter-doc.gz.gpg", "doc.gz"),
                          ("14-brave_otter-reply.gpg", "reply")]:
            name = parse_submission_name(raw)
            assert name is not None, raw
            self.assertEqual((name.designation, name.kind), ("brave_otter", kind))
        self.assertEqual(parse_submission_name("14-brave_otter-reply.gpg").number, 14)

    def test_three_word_designations_and_the_two_word_ones_made_before(self) -> None:
        for raw, designation in [("1-amber_quiet_lantern-msg.gpg", "amber_quiet_lantern"),
                                 ("2-amber_quiet_lantern-doc.gz.gpg", "amber_quiet_lantern"),
                                 ("3-amber_lantern-reply.gpg", "amber_lantern"),
                                 ("zips/amber_quiet_lantern/4-amber_quiet_lantern-msg.gpg", "amber_quiet_lantern")]:
            name = parse_submission_name(raw)
            assert name is not None, raw
            self.assertEqual(name.designation, designation)

    def test_only_the_last_component_counts(self) -> None:
        for raw in ["../../1-brave_otter-msg.gpg", "/abs/1-brave_otter-msg.gpg", "..\\..\\1-brave_otter-msg.gpg",
                    "x/../1-brave_otter-msg.gpg"]:
            name = parse_submission_name(raw)
            assert name is not None, raw
            self.assertEqual(name.designation, "brave_otter")

    def test_rejects_anything_else(self) -> None:
        for raw in ["1-brave_otter-msg.gpg\n", "0-brave_otter-msg.gpg", "1-Brave_otter-msg.gpg",
                    "1-brave-otter-msg.gpg", "1-brave_otter-doc.gpg", "1-../x-msg.gpg", "1-a_b_c_d-msg.gpg",
                    "1-amber__lantern-msg.gpg", "1-_amber_lantern-msg.gpg", "1-amber-" + "quiet_lantern-msg.gpg",
                    "1-amber_quiet_" + "a" * 41 + "-msg.gpg",
                    "1-brave_otter-msg.gpg.txt", "1-brave_otter-msg", "-1-brave_otter-msg.gpg",
                    "1-" + "a" * 41 + "_otter-msg.gpg", ".1-brave_otter-msg.gpg", "1-brave_otter-msg.gpg\x00"]:
            self.assertIsNone(parse_submission_name(raw), repr(raw))

    def test_default_output_names(self) -> None:
        self.assertEqual(parse_submission_name("1-brave_otter-msg.gpg").default_output_name(), "1-msg.txt")
        self.assertEqual(parse_submission_name("4-brave_otter-reply.gpg").default_output_name(), "4-reply.txt")
        self.assertEqual(parse_submission_name("3-brave_otter-doc.gz.gpg").default_output_name(), "3-document")


class SanitiseTests(unittest.SynchronousTestCase):
    def check(self, raw: str | bytes, expected: str) -> None:
        self.assertEqual(sanitise_filename(raw, "FALLBACK"), expected, repr(raw))

    def test_paths_collapse_into_one_component(self) -> None:
        self.check("../../etc/passwd", "etc_passwd")
        self.check("/abs", "abs")
        self.check("/dev/sda", "dev_sda")
        self.check("..\\..\\windows\\system32", "windows_system32")
        self.check("a/./b", "a_b")

    def test_nothing_left_falls_back(self) -> None:
        for raw in ["", "..", ".", "/", "../..", "...", " . ", None]:
            self.assertEqual(sanitise_filename(raw, "FALLBACK"), "FALLBACK", repr(raw))

    def test_controls_nul_and_bidi_are_replaced(self) -> None:
        self.check("a\x00b", "a_b")
        self.check("a\nb\r.txt", "a_b_.txt")
        self.check("invoice\u202egpj.exe", "invoice_gpj.exe")
        self.check('what?<>:"|*.txt', "what_______.txt")

    def test_no_dot_files_dash_options_or_device_names(self) -> None:
        self.check(".bashrc", "bashrc")
        self.check("-rf", "_-rf")
        self.check("CON", "_CON")
        self.check("con.txt", "_con.txt")
        self.check("LPT1", "_LPT1")
        self.check("trailing. ", "trailing")
        self.check("CONTRACT.pdf", "CONTRACT.pdf")

    def test_utf8_bytes_are_decoded_and_kept(self) -> None:
        self.check("Отчёт 2024 — 東京.pdf".encode(), "Отчёт 2024 — 東京.pdf")
        self.check(b"bad\xffutf8.txt", "bad\ufffdutf8.txt")

    def test_long_names_are_cut_keeping_the_extension(self) -> None:
        out = sanitise_filename("x" * 296 + ".pdf", "F")
        self.assertEqual(out, "x" * (MAX_NAME_BYTES - 4) + ".pdf")
        out = sanitise_filename("é" * 300 + ".txt", "F")
        self.assertLessEqual(len(out.encode()), MAX_NAME_BYTES)
        self.assertTrue(out.endswith("é.txt"))
        out.encode("utf-8")  # never a split multi-byte character
        out = sanitise_filename("y" * 300, "F")
        self.assertEqual(out, "y" * MAX_NAME_BYTES)

    def test_numbered_copies(self) -> None:
        self.assertEqual(numbered("report.pdf", 1), "report.pdf")
        self.assertEqual(numbered("report.pdf", 2), "report (2).pdf")
        self.assertEqual(numbered("archive.tar.gz", 3), "archive (3).tar.gz")
        self.assertEqual(numbered("README", 2), "README (2)")
        self.assertEqual(split_ext(".hidden"), (".hidden", ""))


# -- streaming gzip ----------------------------------------------------------------------------


class GzipReaderTests(unittest.SynchronousTestCase):
    def read(self, data: bytes, **kw: int) -> tuple[bytes | None, bytes]:
        reader = GzipReader(io.BytesIO(data), **kw)
        name = reader.read_header()
        return name, b"".join(reader.chunks())

    def test_helper_writes_real_gzip(self) -> None:
        self.assertEqual(gzip.decompress(make_gzip(b"hello", "Отчёт.pdf".encode())), b"hello")

    def test_utf8_fname_and_both_levels(self) -> None:
        payload = os.urandom(200_000) + b"a" * 200_000
        for level in (0, 6):
            name, data = self.read(make_gzip(payload, "Отчёт — 東京.pdf".encode(), level))
            self.assertEqual(name, "Отчёт — 東京.pdf".encode())
            self.assertEqual(data, payload)

    def test_absent_fname_and_optional_fields(self) -> None:
        name, data = self.read(make_gzip(b"x" * 1000, None))
        self.assertIsNone(name)
        self.assertEqual(data, b"x" * 1000)
        blob = make_gzip(b"body", b"n.txt", extra=b"\x01" * 300, comment=b"c" * 5000, header_crc=True)
        self.assertEqual(self.read(blob), (b"n.txt", b"body"))
        self.assertEqual(self.read(gzip.compress(b"stdlib")), (None, b"stdlib"))

    def test_header_crc_is_checked(self) -> None:
        blob = bytearray(make_gzip(b"body", b"n.txt", header_crc=True))
        blob[12] ^= 0xFF  # inside FNAME
        self.assertRaises(GzipFormatError, self.read, bytes(blob))

    def test_output_is_bounded_even_for_a_bomb(self) -> None:
        bomb = make_gzip(b"\0" * (8 * MB), b"zeros", 9)
        reader = GzipReader(io.BytesIO(bomb), read_size=4096, max_chunk=64 * 1024)
        reader.read_header()
        total = 0
        for chunk in reader.chunks():
            self.assertLessEqual(len(chunk), 64 * 1024)
            total += len(chunk)
        self.assertEqual(total, 8 * MB)

    def test_concatenated_members(self) -> None:
        self.assertEqual(self.read(make_gzip(b"one", b"a") + make_gzip(b"two", b"b")), (b"a", b"onetwo"))

    def test_corruption_is_detected(self) -> None:
        good = make_gzip(os.urandom(5000), b"f.bin", 0)
        bad_crc = bytearray(good)
        bad_crc[-6] ^= 1
        cases = {
            "not gzip": b"PK\x03\x04" + good[4:],
            "truncated body": good[: len(good) // 2],
            "truncated trailer": good[:-3],
            "bad crc": bytes(bad_crc),
            "trailing garbage": good + b"junk",
            "reserved flag": good[:3] + bytes([good[3] | 0x80]) + good[4:],
            "empty": b"",
        }
        for what, blob in cases.items():
            with self.assertRaises(GzipFormatError, msg=what):
                self.read(blob)

    def test_reads_what_the_server_writes(self) -> None:
        # The server's framer is the other half of this format: keep the two in step.
        from deaddrop.crypto._gzip import GzipFramer

        payload = os.urandom(200_000)
        framer = GzipFramer("Отчёт «final».pdf")
        body = b"".join(bytes(b) for chunk in (payload[:5], payload[5:]) for b in framer.frame(chunk))
        blob = framer.header() + body + framer.trailer()
        self.assertEqual(self.read(blob), ("Отчёт «final».pdf".encode(), payload))

    def test_long_fname_is_capped_but_still_parsed(self) -> None:
        name, data = self.read(make_gzip(b"ok", b"n" * 100_000))
        self.assertEqual(len(name or b""), _gzip.MAX_FNAME)
        self.assertEqual(data, b"ok")


# -- with gpg ------------------------------------------------------------------------------------


class _StationCase(unittest.TestCase):
    """A fresh SVS home (curve25519 key) per test, plus helpers to build server files."""

    def setUp(self) -> None:
        self.base = short_tempdir(self)
        self.home = os.path.join(self.base, "home")
        code, out, err = run_cli("--home", self.home, "init")
        self.assertEqual(code, 0, err)
        self.pub = os.path.join(self.home, "submission-public.asc")
        self.scratch = scratch_gpg_home(self)
        self.inbox = os.path.join(self.base, "in")
        os.mkdir(self.inbox)
        self.out = os.path.join(self.base, "out")

    def other_key(self, label: str) -> tuple[str, str]:
        """Another key pair (source key, journalist's personal key): (gnupg home, public key)."""
        home = Home(os.path.join(self.base, label))
        home.init("curve25519", None)
        return home.gnupg, home.public_key

    def server_file(self, name: str, plaintext: bytes, recipients: list[str] | None = None) -> str:
        return gpg_encrypt(self.scratch, plaintext, recipients or [self.pub], os.path.join(self.inbox, name))

    def document(self, number: int, data: bytes, fname: bytes | None, level: int = 6,
                 designation: str = "brave_otter") -> str:
        return self.server_file(f"{number}-{designation}-doc.gz.gpg", make_gzip(data, fname, level))

    def decrypt(self, *inputs: str, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
        return run_cli("--home", self.home, "decrypt", *inputs, "--out", self.out, *extra)

    def read_out(self, *parts: str) -> bytes:
        with open(os.path.join(self.out, *parts), "rb") as f:
            return f.read()


class InitTests(_StationCase):
    def test_init_makes_a_private_home_and_a_usable_curve25519_key(self) -> None:
        for path in (self.home, os.path.join(self.home, "gnupg")):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o700, path)
        with open(self.pub) as f:
            self.assertIn("BEGIN PGP PUBLIC KEY BLOCK", f.read())
        keys = Gpg(self.scratch).show_keys(self.pub)
        self.assertEqual(len(keys), 1)
        self.assertEqual(keys[0].algorithm, 22)  # EdDSA (ed25519) primary
        self.assertEqual(keys[0].subkey_algorithms, [18])  # ECDH (cv25519) encryption subkey
        self.assertTrue(keys[0].can_encrypt)
        # Usable: what is encrypted to the exported key decrypts on the station.
        self.server_file("1-brave_otter-msg.gpg", b"usable")
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), b"usable")

    def test_init_prints_the_fingerprint(self) -> None:
        code, out, err = run_cli("--home", os.path.join(self.base, "h2"), "init")
        self.assertEqual(code, 0)
        fpr = Gpg(self.scratch).show_keys(os.path.join(self.base, "h2", "submission-public.asc"))[0].fingerprint
        self.assertIn(" ".join(fpr[i:i + 4] for i in range(0, 40, 4)), out)

    def test_init_refuses_to_overwrite(self) -> None:
        with open(self.pub, "rb") as f:
            before = f.read()
        code, out, err = run_cli("--home", self.home, "init")
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("refusing to overwrite", err)
        with open(self.pub, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(len(Gpg(os.path.join(self.home, "gnupg")).secret_keys()), 1)

    def test_init_refuses_a_stray_public_key_file(self) -> None:
        other = os.path.join(self.base, "h3")
        os.mkdir(other)
        with open(os.path.join(other, "submission-public.asc"), "w") as f:
            f.write("keep me")
        code, _, err = run_cli("--home", other, "init")
        self.assertEqual(code, 1)
        self.assertIn("refusing to overwrite", err)

    def test_passphrase_protected_key(self) -> None:
        home = os.path.join(self.base, "pp")
        pfile = os.path.join(self.base, "pass")
        with open(pfile, "w") as f:
            f.write("correct horse\n")
        code, _, err = run_cli("--home", home, "init", "--passphrase-file", pfile)
        self.assertEqual(code, 0, err)
        gpg_encrypt(self.scratch, b"secret", [os.path.join(home, "submission-public.asc")],
                    os.path.join(self.inbox, "1-brave_otter-msg.gpg"))
        code, _, err = run_cli("--home", home, "decrypt", self.inbox, "--out", self.out)
        self.assertEqual(code, 1)
        self.assertIn("passphrase-protected", err)
        wrong = os.path.join(self.base, "wrong")
        with open(wrong, "w") as f:
            f.write("battery staple\n")
        code, _, err = run_cli("--home", home, "decrypt", self.inbox, "--out", self.out, "--passphrase-file", wrong)
        self.assertEqual(code, 1)
        self.assertIn("wrong passphrase", err)
        self.assertFalse(os.path.exists(os.path.join(self.out, "brave_otter", "1-msg.txt")))
        # A passphrase-encrypted (symmetric) file is this file's failure, not a wrong passphrase.
        subprocess.run(["gpg", "--batch", "--homedir", self.scratch, "--pinentry-mode", "loopback",
                        "--passphrase", "other", "--yes", "-o", os.path.join(self.inbox, "2-brave_otter-msg.gpg"),
                        "-c"], input=b"sym", check=True, capture_output=True)
        code, _, err = run_cli("--home", home, "decrypt", self.inbox, "--out", self.out, "--passphrase-file", pfile)
        self.assertEqual(code, 1, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("2-brave_otter-msg.gpg: encrypted with a passphrase", err)
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), b"secret")

    def test_missing_home_and_missing_key_are_one_line_errors(self) -> None:
        self.server_file("1-brave_otter-msg.gpg", b"x")
        code, _, err = run_cli("--home", os.path.join(self.base, "nope"), "decrypt", self.inbox, "--out", self.out)
        self.assertEqual(code, 1)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertIn("no SVS home", err)
        empty = os.path.join(self.base, "empty")
        os.makedirs(os.path.join(empty, "gnupg"), 0o700)
        code, _, err = run_cli("--home", empty, "decrypt", self.inbox, "--out", self.out)
        self.assertEqual(code, 1)
        self.assertIn("no submission key", err)
        self.assertFalse(os.path.exists(self.out))

    def test_usage_errors_exit_2(self) -> None:
        self.assertEqual(run_cli("--home", self.home, "decrypt", self.inbox)[0], 2)  # no --out
        self.assertEqual(run_cli("--home", self.home, "decrypt", "--out", self.out)[0], 2)  # no INPUT
        self.assertEqual(run_cli("--home", self.home, "frobnicate")[0], 2)
        self.assertEqual(run_cli("--home", self.home, "init", "--algorithm", "dsa")[0], 2)
        self.assertEqual(run_cli("--home", self.home, "export", self.pub, "--out", self.out)[0], 2)


class DecryptTests(_StationCase):
    def test_messages_replies_and_documents(self) -> None:
        source_home, source_pub = self.other_key("source")
        big = os.urandom(5 * MB)
        self.server_file("1-brave_otter-msg.gpg", "Grüße, 東京\n".encode())
        self.server_file("2-brave_otter-reply.gpg", b"thanks", recipients=[source_pub, self.pub])
        self.document(3, b"%PDF stored", "Отчёт 2024.pdf".encode(), level=0)
        self.document(4, big, b"big.bin", level=6)
        self.document(5, b"no name here", None)
        self.document(6, os.urandom(3000), b"stored.bin", level=0)
        self.server_file("1-calm_heron-msg.gpg", b"another source")
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), "Grüße, 東京\n".encode())
        self.assertEqual(self.read_out("brave_otter", "2-reply.txt"), b"thanks")
        self.assertEqual(self.read_out("brave_otter", "Отчёт 2024.pdf"), b"%PDF stored")
        self.assertEqual(self.read_out("brave_otter", "big.bin"), big)
        self.assertEqual(self.read_out("brave_otter", "5-document"), b"no name here")
        self.assertEqual(self.read_out("calm_heron", "1-msg.txt"), b"another source")
        self.assertEqual(sorted(os.listdir(self.out)), ["brave_otter", "calm_heron"])
        self.assertEqual(len(os.listdir(os.path.join(self.out, "brave_otter"))), 6)  # no temp files left
        mode = stat.S_IMODE(os.stat(os.path.join(self.out, "brave_otter", "big.bin")).st_mode)
        self.assertEqual(mode, 0o600)
        self.assertIn("Decrypted 7 of 7 files", out.splitlines()[-1])
        self.assertIn("2 messages, 1 reply, 4 documents", out)
        # The reply really is readable by the source key too (it is a proper reply fixture).
        self.assertEqual(gpg_decrypt(source_home, os.path.join(self.inbox, "2-brave_otter-reply.gpg")).stdout,
                         b"thanks")

    def test_zip_from_the_journalist_interface_is_streamed(self) -> None:
        self.server_file("1-brave_otter-msg.gpg", b"zipped msg")
        self.document(2, b"zipped doc" * 1000, b"doc.txt", level=0)
        zpath = os.path.join(self.base, "download.zip")
        with zipfile.ZipFile(zpath, "w") as zf:
            zf.write(os.path.join(self.inbox, "1-brave_otter-msg.gpg"), "brave_otter/1-brave_otter-msg.gpg",
                     compress_type=zipfile.ZIP_DEFLATED)
            zf.write(os.path.join(self.inbox, "2-brave_otter-doc.gz.gpg"), "brave_otter/2-brave_otter-doc.gz.gpg",
                     compress_type=zipfile.ZIP_STORED)

        def no_extract(*a: object, **kw: object) -> None:
            raise AssertionError("the zip must not be extracted to disk")

        self.patch(zipfile.ZipFile, "extract", no_extract)
        self.patch(zipfile.ZipFile, "extractall", no_extract)
        code, out, err = self.decrypt(zpath)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), b"zipped msg")
        self.assertEqual(self.read_out("brave_otter", "doc.txt"), b"zipped doc" * 1000)

    def test_decrypting_the_same_files_again_adds_no_copies(self) -> None:
        # A new user decrypted the same zip twice and found "1-msg (2).txt" copies.
        self.server_file("1-brave_otter-msg.gpg", b"once")
        self.document(2, b"doc once", b"doc.txt")
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(sorted(tree(self.out)), ["brave_otter", "brave_otter/1-msg.txt", "brave_otter/doc.txt"])
        self.assertIn("brave_otter/1-msg.txt: already there, identical (skipped, not copied)", out)
        self.assertIn("brave_otter/doc.txt: already there, identical (skipped, not copied)", out)
        self.assertIn("Decrypted 0 of 2 files", out.splitlines()[-1])
        self.assertIn("2 were already there, identical (skipped)", out.splitlines()[-1])
        # Different bytes under the name (edited since): a copy beside it, as before.
        with open(os.path.join(self.out, "brave_otter", "1-msg.txt"), "ab") as f:
            f.write(b" edited")
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_out("brave_otter", "1-msg (2).txt"), b"once")
        self.assertEqual(sorted(os.listdir(os.path.join(self.out, "brave_otter"))),
                         ["1-msg (2).txt", "1-msg.txt", "doc.txt"])  # no temp file left either

    def test_a_zip_entry_with_a_bad_crc_is_reported(self) -> None:
        # The ciphertext itself is intact (gpg alone would accept it); only the zip's own
        # checksum says the entry is not what was zipped. That must not pass silently.
        self.server_file("1-brave_otter-msg.gpg", b"crc")
        zpath = os.path.join(self.base, "bad.zip")
        with zipfile.ZipFile(zpath, "w") as zf:
            zf.write(os.path.join(self.inbox, "1-brave_otter-msg.gpg"), "brave_otter/1-brave_otter-msg.gpg")
        with open(zpath, "r+b") as f:
            data = f.read()
            central = data.index(b"PK\x01\x02")
            f.seek(central + 16)  # CRC-32 field of the central directory entry
            f.write(bytes(b ^ 0xFF for b in data[central + 16:central + 20]))
        code, _, err = self.decrypt(zpath)
        self.assertEqual(code, 1)
        self.assertIn("cannot read input", err)
        self.assertIn("CRC", err)
        self.assertFalse(os.path.exists(os.path.join(self.out, "brave_otter", "1-msg.txt")))

    def test_hostile_document_names_stay_inside_outdir(self) -> None:
        hostile = {
            "../../etc/passwd": "etc_passwd",
            "/abs": "abs",
            "/dev/null": "dev_null",
            "CON": "_CON",
            ".bashrc": "bashrc",
            "..": "6-document",
            "a\nb": "a_b",
            "x" * 296 + ".pdf": "x" * (MAX_NAME_BYTES - 4) + ".pdf",
            "../" * 100 + "deep": "deep",
        }
        for n, fname in enumerate(hostile, start=1):
            self.document(n, f"content {n}".encode(), fname.encode(), level=n % 2 * 6)
        outside_before = tree(self.base)
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        produced = tree(self.base) - outside_before
        for path in produced:
            self.assertTrue(path.startswith("out" + os.sep) or path == "out", path)
        self.assertEqual(sorted(os.listdir(os.path.join(self.out, "brave_otter"))), sorted(hostile.values()))
        for n, expected in enumerate(hostile.values(), start=1):
            self.assertEqual(self.read_out("brave_otter", expected), f"content {n}".encode())
        self.assertFalse(os.path.lexists("/abs"))

    def test_hostile_zip_entry_names_cannot_escape(self) -> None:
        ciphertext = self.server_file("1-brave_otter-msg.gpg", b"from a hostile zip")
        with open(ciphertext, "rb") as f:
            blob = f.read()
        os.unlink(ciphertext)
        zpath = os.path.join(self.base, "hostile.zip")
        entries = [
            "../../1-brave_otter-msg.gpg",
            "/abs/2-brave_otter-msg.gpg",
            "..\\..\\3-brave_otter-msg.gpg",
            "brave_otter/../../../../tmp/4-brave_otter-msg.gpg",
            "5-../../x-msg.gpg",
            "../../evil.txt",
            ".hidden",
            "brave_otter/6-brave_otter-msg.gpg\x1b[2J",
        ]
        with zipfile.ZipFile(zpath, "w") as zf:
            for e in entries:
                zf.writestr(zipfile.ZipInfo(e), blob)
        outside_before = tree(self.base)
        code, out, err = self.decrypt(zpath)
        self.assertEqual(code, 1)
        self.assertEqual(sorted(os.listdir(os.path.join(self.out, "brave_otter"))),
                         ["1-msg.txt", "2-msg.txt", "3-msg.txt", "4-msg.txt"])
        for path in tree(self.base) - outside_before:
            self.assertTrue(path.startswith("out" + os.sep) or path == "out", path)
        failed = [line for line in err.splitlines() if line.startswith("FAILED")]
        self.assertEqual(len(failed), 4, err)
        self.assertNotIn("\x1b", err)  # hostile names are escaped before printing

    def test_collisions_never_overwrite(self) -> None:
        os.makedirs(os.path.join(self.out, "brave_otter"))
        with open(os.path.join(self.out, "brave_otter", "1-msg.txt"), "wb") as f:
            f.write(b"journalist's notes")
        self.server_file("1-brave_otter-msg.gpg", b"new message")
        self.document(2, b"first", b"report.pdf")
        self.document(3, b"second", b"report.pdf")
        code, _, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), b"journalist's notes")
        self.assertEqual(self.read_out("brave_otter", "1-msg (2).txt"), b"new message")
        self.assertEqual({self.read_out("brave_otter", "report.pdf"), self.read_out("brave_otter", "report (2).pdf")},
                         {b"first", b"second"})
        # Running again replaces nothing, and adds no copy of what is already there.
        code, out, _ = self.decrypt(self.inbox)
        self.assertEqual(code, 0)
        self.assertEqual(out.count("already there, identical (skipped, not copied)"), 3)
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), b"journalist's notes")
        self.assertEqual(len(os.listdir(os.path.join(self.out, "brave_otter"))), 4)

    def test_outdir_inside_the_input_folder_is_not_read_back(self) -> None:
        self.out = os.path.join(self.inbox, "decrypted")
        self.document(1, b"looks like a server file", b"9-brave_otter-msg.gpg")
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_out("brave_otter", "9-brave_otter-msg.gpg"), b"looks like a server file")
        self.assertIn("Decrypted 1 of 1 file ", out)

    def test_a_planted_symlink_folder_is_refused(self) -> None:
        elsewhere = os.path.join(self.base, "elsewhere")
        os.mkdir(elsewhere)
        os.makedirs(self.out)
        os.symlink(elsewhere, os.path.join(self.out, "brave_otter"))
        self.server_file("1-brave_otter-msg.gpg", b"must not leave OUTDIR")
        code, _, err = self.decrypt(self.inbox)
        self.assertEqual(code, 1)
        self.assertIn("not a real directory", err)
        self.assertEqual(os.listdir(elsewhere), [])

    def test_failures_are_reported_and_the_rest_still_decrypt(self) -> None:
        _, stranger_pub = self.other_key("stranger")
        self.server_file("1-brave_otter-msg.gpg", b"good one")
        self.document(2, b"good doc", b"good.txt")
        good_big = self.document(3, os.urandom(300_000), b"tampered.bin", level=0)
        with open(good_big, "r+b") as f:  # flip a byte in the middle: the MDC must catch it
            f.seek(150_000)
            byte = f.read(1)
            f.seek(150_000)
            f.write(bytes([byte[0] ^ 0x01]))
        truncated = self.document(4, os.urandom(300_000), b"truncated.bin", level=0)
        with open(truncated, "r+b") as f:
            f.truncate(120_000)
        with open(os.path.join(self.inbox, "5-brave_otter-msg.gpg"), "wb") as f:
            f.write(b"this is not OpenPGP\n" * 100)  # (random bytes may parse as a packet)
        self.server_file("6-brave_otter-msg.gpg", b"not for us", recipients=[stranger_pub])
        self.server_file("7-brave_otter-doc.gz.gpg", b"encrypted fine, but not gzip inside")
        open(os.path.join(self.inbox, "8-brave_otter-msg.gpg"), "wb").close()
        subprocess.run(["gpg", "--batch", "--homedir", self.scratch, "--yes", "--store", "-o",
                        os.path.join(self.inbox, "10-brave_otter-msg.gpg")], input=b"plain", check=True)
        self.server_file("9-brave_otter-msg.gpg", b"another good one")
        code, out, err = self.decrypt(self.inbox, os.path.join(self.base, "missing.gpg"))
        self.assertEqual(code, 1)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 8, err)
        for number in (3, 4, 5, 6, 7, 8, 10):
            self.assertEqual(sum(f"/{number}-brave_otter-" in line for line in lines), 1, (number, err))
        self.assertIn("integrity", next(line for line in lines if "/3-" in line))
        stranger = next(line for line in lines if "/6-" in line)
        self.assertIn("not encrypted to this station", stranger)
        # Without desks too (a newcomer's second demo, a replaced key): not only "another desk".
        self.assertIn("another instance, or a key this instance has since replaced", stranger)
        self.assertIn("not an OpenPGP", next(line for line in lines if "/5-" in line))
        self.assertIn("not encrypted", next(line for line in lines if "/10-" in line))
        self.assertIn("missing.gpg", lines[-1])
        self.assertEqual(sorted(os.listdir(os.path.join(self.out, "brave_otter"))),
                         ["1-msg.txt", "9-msg.txt", "good.txt"])  # no partial plaintext, no temp files
        self.assertIn("Decrypted 3 of 11 files", out)
        self.assertIn("8 FAILED", out)

    def test_progress_only_when_asked_or_on_a_tty(self) -> None:
        self.document(1, os.urandom(5 * MB), b"big.bin", level=0)
        code, _, err = self.decrypt(self.inbox)
        self.assertEqual((code, err), (0, ""))
        code, _, err = self.decrypt(self.inbox, extra=("--progress",))
        self.assertEqual(code, 0)
        self.assertIn("100%", err)
        self.assertIn("1-brave_otter-doc.gz.gpg", err)

    def test_memory_stays_bounded_for_a_large_document(self) -> None:
        size = 6 * MB
        self.document(1, os.urandom(size), b"big.bin", level=0)
        gpg = Home(self.home).open()
        tracemalloc.start()
        try:
            summary = run_decrypt(gpg, [self.inbox], OutDir(self.out), io.StringIO(), io.StringIO())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            gpg.kill_agent()
        self.assertTrue(summary.ok)
        self.assertEqual(os.path.getsize(os.path.join(self.out, "brave_otter", "big.bin")), size)
        self.assertLess(peak, 2 * MB, f"peak Python memory {peak} bytes for a {size}-byte document")

    def test_bad_inputs(self) -> None:
        self.server_file("1-brave_otter-msg.gpg", b"fine")
        text = os.path.join(self.base, "notes.txt")
        with open(text, "w") as f:
            f.write("not a submission")
        misnamed = os.path.join(self.inbox, "sub", "brave-otter.gpg")
        os.mkdir(os.path.dirname(misnamed))
        with open(misnamed, "wb") as f:
            f.write(b"x")
        readme = os.path.join(self.inbox, "readme.md")
        with open(readme, "w") as f:
            f.write("named and skipped: not a .gpg")
        code, out, err = self.decrypt(self.inbox, text, os.path.join(self.base, "nope"))
        self.assertEqual(code, 1)
        self.assertEqual(len(err.splitlines()), 4, err)
        self.assertIn(f"skipped {readme}: not a server file", err)
        self.assertIn("Decrypted 1 of 5 files", out)
        self.assertIn("unrecognised name", err)
        self.assertIn("no such file", err)
        self.assertEqual(self.read_out("brave_otter", "1-msg.txt"), b"fine")


class ExportTests(_StationCase):
    def setUp(self) -> None:
        super().setUp()
        self.personal_home, self.personal_pub = self.other_key("journalist")

    def export(self, *files: str, key: str | None = None) -> tuple[int, str, str]:
        return run_cli("--home", self.home, "export", *files, "--to-key", key or self.personal_pub,
                       "--out", os.path.join(self.base, "export"))

    def test_exports_decrypt_with_the_personal_key_only(self) -> None:
        server_msg = self.server_file("1-brave_otter-msg.gpg", b"re-encrypt me")
        self.server_file("2-brave_otter-doc.gz.gpg", make_gzip(b"doc body", b"d.txt"))
        self.server_file("3-brave_otter-doc.gz.gpg", make_gzip(b"x", b"tampered.txt"))
        with open(os.path.join(self.inbox, "3-brave_otter-doc.gz.gpg"), "r+b") as f:
            f.seek(-5, os.SEEK_END)
            f.write(b"\0\0\0\0\0")
        code, _, err = self.decrypt(self.inbox)
        self.assertEqual(code, 1)
        plain = os.path.join(self.out, "brave_otter", "d.txt")
        code, out, err = self.export(server_msg, plain, os.path.join(self.inbox, "3-brave_otter-doc.gz.gpg"),
                                     os.path.join(self.out, "brave_otter"))
        self.assertEqual(code, 1, err)  # the tampered server file
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        exp = os.path.join(self.base, "export")
        # d.txt was named twice (itself, and inside the folder): exported once.
        self.assertEqual(sorted(tree(exp)), ["1-brave_otter-msg.gpg", "brave_otter", "brave_otter/1-msg.txt.gpg",
                                             "d.txt.gpg"])
        submission_gnupg = os.path.join(self.home, "gnupg")
        for rel, expected in [("1-brave_otter-msg.gpg", b"re-encrypt me"), ("d.txt.gpg", b"doc body"),
                              ("brave_otter/1-msg.txt.gpg", b"re-encrypt me")]:
            path = os.path.join(exp, rel)
            ok = gpg_decrypt(self.personal_home, path)
            self.assertEqual((ok.returncode, ok.stdout), (0, expected), ok.stderr)
            denied = gpg_decrypt(submission_gnupg, path)
            self.assertNotEqual(denied.returncode, 0)
            self.assertIn(b"NO_SECKEY", denied.stderr)
            self.assertEqual(denied.stdout, b"")
        # Collision: exporting again numbers before the .gpg suffix.
        code, _, _ = self.export(plain)
        self.assertEqual(code, 0)
        self.assertTrue(os.path.exists(os.path.join(exp, "d (2).txt.gpg")))

    def test_the_journalist_interfaces_zip_is_exported_as_decrypt_reads_it(self) -> None:
        # A new user exported the downloaded zip: cleaned as a plain zip, mat2 failed on its
        # encrypted entries ("doc.gz.gpg's format (None) isn't supported").
        self.server_file("1-brave_otter-msg.gpg", b"zipped msg")
        self.document(2, b"zipped doc", b"doc.txt")
        zpath = os.path.join(self.base, "brave_otter.zip")
        with zipfile.ZipFile(zpath, "w") as zf:
            for name in ("1-brave_otter-msg.gpg", "2-brave_otter-doc.gz.gpg"):
                zf.write(os.path.join(self.inbox, name), f"brave_otter/{name}")
        other = os.path.join(self.base, "photos.zip")  # a zip that is not the server's is a file
        with zipfile.ZipFile(other, "w") as zf:
            zf.writestr("notes.txt", "plain")
        code, out, err = self.export(zpath, other)
        self.assertEqual((code, err), (0, ""), out)
        exp = os.path.join(self.base, "export")
        self.assertEqual(sorted(tree(exp)), ["1-brave_otter-msg.gpg", "2-brave_otter-doc.gz.gpg", "photos.zip.gpg"])
        msg = gpg_decrypt(self.personal_home, os.path.join(exp, "1-brave_otter-msg.gpg"))
        self.assertEqual((msg.returncode, msg.stdout), (0, b"zipped msg"), msg.stderr)
        doc = gpg_decrypt(self.personal_home, os.path.join(exp, "2-brave_otter-doc.gz.gpg"))
        self.assertEqual(gzip.decompress(doc.stdout), b"zipped doc")

    def test_refuses_the_submission_key_and_secret_keys(self) -> None:
        plain = os.path.join(self.base, "p.txt")
        with open(plain, "w") as f:
            f.write("x")
        code, _, err = self.export(plain, key=self.pub)  # nothing of --home is read, this neither
        self.assertEqual(code, 1)
        self.assertIn("inside the SVS home", err)
        own_copy = os.path.join(self.base, "copy.asc")
        with open(self.pub, "rb") as src, open(own_copy, "wb") as dst:
            dst.write(src.read())
        code, _, err = self.export(plain, key=own_copy)
        self.assertEqual(code, 1)
        self.assertIn("own submission key", err)
        secret = os.path.join(self.base, "secret.asc")
        with open(secret, "wb") as f:
            f.write(subprocess.run(["gpg", "--batch", "--homedir", self.personal_home, "--armor",
                                    "--export-secret-keys"], capture_output=True, check=True).stdout)
        code, _, err = self.export(plain, key=secret)
        self.assertEqual(code, 1)
        self.assertIn("SECRET key", err)
        self.assertFalse(os.path.exists(os.path.join(self.base, "export")))


class NoNetworkTests(_StationCase):
    def test_a_full_run_opens_no_socket(self) -> None:
        attempts: list[object] = []

        class NoSocket:
            def __init__(self, *a: object, **kw: object) -> None:
                attempts.append(a)
                raise AssertionError("deaddrop-svs must never open a socket")

        def no_connection(*a: object, **kw: object) -> None:
            attempts.append(a)
            raise AssertionError("deaddrop-svs must never connect")

        self.patch(socket, "socket", NoSocket)
        self.patch(socket, "create_connection", no_connection)
        self.patch(socket, "getaddrinfo", no_connection)
        _, personal_pub = self.other_key("journalist")  # goes through init as well
        self.server_file("1-brave_otter-msg.gpg", b"offline")
        self.document(2, b"offline doc", b"o.txt")
        zpath = os.path.join(self.base, "dl.zip")
        with zipfile.ZipFile(zpath, "w") as zf:
            zf.write(os.path.join(self.inbox, "1-brave_otter-msg.gpg"), "brave_otter/1-brave_otter-msg.gpg")
        code, _, err = run_cli("--home", os.path.join(self.base, "h2"), "init")
        self.assertEqual(code, 0, err)
        code, _, err = self.decrypt(self.inbox, zpath, extra=("--progress",))
        self.assertEqual(code, 0, err)
        code, _, err = run_cli("--home", self.home, "export", os.path.join(self.inbox, "1-brave_otter-msg.gpg"),
                               os.path.join(self.out, "brave_otter", "o.txt"), "--to-key", personal_pub,
                               "--out", os.path.join(self.base, "export"))
        self.assertEqual(code, 0, err)
        self.assertEqual(attempts, [])
        self.assertEqual(self.read_out("brave_otter", "o.txt"), b"offline doc")


class ParseColonsTests(unittest.SynchronousTestCase):
    def test_revoked_or_sign_only_keys_cannot_encrypt(self) -> None:
        revoked = parse_colons("pub:r:255:22:AAAA:1::::::sc:::::ed25519:::0:\nfpr:::::::::F1:\n")
        self.assertFalse(revoked[0].can_encrypt)
        sign_only = parse_colons("pub:u:255:22:AAAA:1::::::scSC:::::ed25519:::0:\nfpr:::::::::F2:\n")
        self.assertFalse(sign_only[0].can_encrypt)
        good = parse_colons("pub:u:255:22:AAAA:1::::::scESC:::::ed25519:::0:\nfpr:::::::::F3:\n"
                            "sub:u:255:18:BBBB:1::::::e:::::cv25519::\nfpr:::::::::F4:\n")
        self.assertEqual((good[0].fingerprint, good[0].can_encrypt, good[0].subkey_algorithms), ("F3", True, [18]))
