"""What mat2 found, told truly (issue 27, item 10): a mat2 that fails is a failure, never "no
metadata found", and the kinds that name or date someone come first, in plain words."""
from __future__ import annotations

import io
import os
import warnings
import zipfile

from PIL import Image, PngImagePlugin
from twisted.trial import unittest

from deaddrop.svs import _sandbox
from deaddrop.svs._findings import describe, kind_of, parse_show
from tests._svs_helpers import real_mat2, run_cli, spy_mat2, tree
from tests.test_svs_archives import docx, plain
from tests.test_svs_metadata import SECRETS, _MetadataCase, jpeg_with_exif, pdf_with_info


def png_with_text() -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "Jane Whistle")
    info.add_text("Software", "SecretWriter 9")
    info.add_text("Comment", "for the LeakPDF desk")
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 30)).save(buf, "PNG", pnginfo=info)
    return buf.getvalue()


def docx_mat2_cannot_show() -> bytes:
    """A Word file naming its author, with one member stored twice: mat2 0.13.3's ``--show``
    unpacks members read-only, so the second copy cannot be written and it crashes (exit 1),
    while cleaning it succeeds."""
    with zipfile.ZipFile(io.BytesIO(docx())) as z:
        core = z.read("docProps/core.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate: it is the point
        return docx([plain("docProps/core.xml", core)])


class Mat2FailuresTests(_MetadataCase):
    def setUp(self) -> None:
        super().setUp()
        self.publish = os.path.join(self.base, "publish")

    def scrub(self, *files: str) -> tuple[int, str, str]:
        return run_cli("--home", self.home, "scrub", *files, "--out", self.publish)

    def test_a_crash_of_mat2_show_is_reported_never_no_metadata_found(self) -> None:
        report = self.put("report.docx", docx_mat2_cannot_show())
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, out, err = self.scrub(report, photo)
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("no metadata found", out + err)
        [line] = [line for line in err.splitlines() if line.startswith(f"FAILED {report}: ")]
        self.assertIn("mat2 could not read report.docx: PermissionError", line)
        self.assertIn("--keep-metadata FILE lets it leave unchanged", line)
        self.assertEqual(tree(self.publish), {"photo.jpg"})  # the others still go
        self.assertIn("Scrubbed 1 of 2 files", out)
        code, out, err = self.export(report)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"FAILED {report}: mat2 could not read report.docx", err)
        self.assertEqual(tree(self.exp), set())

    def test_a_crash_reading_the_cleaned_copy_is_reported(self) -> None:
        real = real_mat2(self)
        spy_mat2(self, self.base,
                 "case \"$*\" in *--show*in.cleaned.*) echo 'Traceback (most recent call last):' >&2; "
                 "echo 'RuntimeError: poppler gave up' >&2; exit 1;; esac\n"
                 f"exec {real} \"$@\"\n")
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, out, err = self.scrub(photo)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"FAILED {photo}: mat2 could not read its own cleaned copy (RuntimeError: poppler gave up)",
                      err)
        self.assertEqual(tree(self.publish), set())


class PlainWordsTests(_MetadataCase):
    def test_real_files_are_cleaned_through_the_walls_and_told_in_plain_words(self) -> None:
        self.patch(_sandbox, "_sandbox", None)
        self.assertIsNotNone(_sandbox.sandbox().bwrap, "bwrap is installed on this station and must be used")
        files = {"report.docx": docx(), "photo.jpg": jpeg_with_exif(), "chart.png": png_with_text(),
                 "paper.pdf": pdf_with_info()}
        paths = [self.put(name, data) for name, data in files.items()]
        publish = os.path.join(self.base, "publish")
        code, out, err = run_cli("--home", self.home, "scrub", *paths, "--out", publish)
        self.assertEqual(code, 0, err)
        self.assertEqual(tree(publish), set(files))
        for name in files:
            with open(os.path.join(publish, name), "rb") as f:
                cleaned = f.read()
            for secret in SECRETS:
                self.assertNotIn(secret, cleaned, name)
            if name == "report.docx":
                with zipfile.ZipFile(io.BytesIO(cleaned)) as z:
                    self.assertIn(b"Meeting notes", z.read("word/document.xml"))
        said = {name: next(line for line in out.splitlines() if line.startswith(os.path.join(self.files, name)))
                for name in files}
        # Who, where, which camera, what software, when, and comments, before anything else.
        self.assertIn("report.docx: removed author/creator (dc:creator), dates (date_time)", said["report.docx"])
        self.assertIn("photo.jpg: removed author/creator (Artist, OwnerName), GPS/location (GPSLatitude, "
                      "GPSLatitudeRef, GPSLongitude, GPSLongitudeRef, GPSPosition), camera make/model/serial "
                      "(Make, Model, SerialNumber), and 1 other kind", said["photo.jpg"])
        self.assertIn("chart.png: removed author/creator (Author), software (Software), comments (Comment)",
                      said["chart.png"])
        self.assertIn("paper.pdf: removed author/creator (author, creator), software (producer)", said["paper.pdf"])


class DescribeTests(unittest.TestCase):
    def test_a_word_file_names_its_author_first_and_counts_the_rest(self) -> None:
        # What mat2 lists for an ordinary Word file: the author among dozens of kinds.
        fields = sorted(["dc:creator", "cp:lastModifiedBy", "dcterms:created", "date_time", "Application",
                         "AppVersion", "Company", "cp:revision", "Pages", "Words", "Characters", "Lines",
                         "Paragraphs", "TotalTime", "Template", "DocSecurity", "ScaleCrop", "LinksUpToDate",
                         "SharedDoc", "HyperlinksChanged", "create_system", "create_version", "extract_version",
                         "comment", "dc:title", "cp:keywords"] + [f"vt:lpstr{n}" for n in range(52)], key=str.lower)
        self.assertEqual(len(fields), 78)
        told = describe(fields)
        self.assertTrue(told.startswith("author/creator (Company, cp:lastModifiedBy, dc:creator), "), told)
        self.assertIn("software (Application, AppVersion)", told)
        self.assertIn("dates (date_time, dcterms:created, TotalTime)", told)
        self.assertIn("comments (comment)", told)
        self.assertTrue(told.endswith(", and 69 other kinds"), told)
        self.assertEqual(describe(["ExifByteOrder", "format"]), "2 kinds of metadata")
        self.assertEqual(describe([f"GPSField{n}" for n in range(10)]),
                         "GPS/location (" + ", ".join(f"GPSField{n}" for n in range(8)) + " and 2 more)")
        self.assertEqual([kind_of(k) for k in ("ExposureTime", "UserComment", "BodySerialNumber", "CreatorTool")],
                         [None, "comments", "camera make/model/serial", "software"])

    def test_names_with_colons_are_whole_and_unreadable_output_is_no_finding(self) -> None:
        found = parse_show("[+] Metadata for in.docx:\n[++] Metadata for docProps/core.xml:\n"
                           "      dc:creator: Jane Whistle\n      date_time: 2020-01-01 00:00:00\n")
        self.assertEqual((found.supported, found.kinds), (True, ["date_time", "dc:creator"]))
        self.assertEqual(parse_show("  No metadata found in in.txt.\n").kinds, [])
        self.assertFalse(parse_show("").supported)
        self.assertFalse(parse_show("Traceback (most recent call last):\n  File \"x\", line 1: oops\n").supported)


class CleaningReportTests(unittest.TestCase):
    """scrub's line per file never says "no metadata found" beside what mat2 still reports
    (new-user walkthrough: "b.pdf: no metadata found; mat2 still reports dates")."""

    def test_each_outcome_reads_as_one_true_statement(self) -> None:
        from deaddrop.svs.scrub import cleaning_report

        kept = ["creation-date", "mod-date"]
        self.assertEqual(cleaning_report([], []), "no metadata found")
        self.assertEqual(cleaning_report(["dc:creator"], []), "removed author/creator (dc:creator)")
        said = cleaning_report([], kept)
        self.assertNotIn("no metadata found", said)
        self.assertTrue(said.startswith("mat2 could remove nothing, and still reports dates (creation-date, mod-date)"))
        self.assertIn("look before publishing", cleaning_report(["dc:creator"], kept))
