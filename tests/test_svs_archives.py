"""Archives that try to reach outside mat2's folder: refused before mat2 unpacks them, and
mat2 walled in (bubblewrap) so that nothing outside its item folder is writable to it anyway.

mat2 0.13.3 (Debian bookworm) joins each raw member name onto its temp folder and chmods the
result, even for ``mat2 --show``: a member ``../../../../x`` made a file of the operator's
0400. Each crafted archive here aims at a "victim" file and folder of the test; after the run
their mode and contents must be what they were, the line must name the member, and nothing
of the archive may have reached a disk.
"""
from __future__ import annotations

import io
import os
import stat
import shutil
import tarfile
import tempfile
import zipfile

from twisted.trial import unittest

from deaddrop.svs import _archives, _mat2, _sandbox
from deaddrop.svs._archives import check_archive
from deaddrop.svs._errors import ItemError
from tests._svs_helpers import let_spy_report, real_mat2, run_cli, short_tempdir, spy_mat2, tree
from tests.test_svs_metadata import _MetadataCase, jpeg_with_exif, pdf_with_info

PAYLOAD = b"PAYLOAD-7c1e-not-for-disk"
UP = "../" * 16  # more than enough to climb out of /dev/shm/deaddrop-svs-*/f-*/tmp*/


def make_zip(members: list[tuple[str, bytes, int]]) -> bytes:
    """A zip with raw member names (stored, so the payload would be visible on a disk)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            z.writestr(info, data)
    return buf.getvalue()


def plain(name: str, data: bytes = PAYLOAD) -> tuple[str, bytes, int]:
    return (name, data, stat.S_IFREG | 0o644)


def docx(extra: list[tuple[str, bytes, int]] = ()) -> bytes:  # type: ignore[assignment]
    """A minimal Word document whose core properties name its author."""
    content_types = (b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
                     b'package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/>'
                     b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
                     b'relationships+xml"/><Override PartName="/word/document.xml" ContentType="application/'
                     b'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/><Override '
                     b'PartName="/docProps/core.xml" ContentType="application/vnd.openxmlformats-package.'
                     b'core-properties+xml"/></Types>')
    rels = (b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
            b'package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
            b'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>')
    document = (b'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
                b'wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>Meeting notes</w:t></w:r></w:p>'
                b'</w:body></w:document>')
    core = (b'<?xml version="1.0" encoding="UTF-8"?><cp:coreProperties xmlns:cp="http://schemas.openxmlformats.'
            b'org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">'
            b'<dc:creator>Jane Whistle</dc:creator></cp:coreProperties>')
    return make_zip([plain("[Content_Types].xml", content_types), plain("_rels/.rels", rels),
                     plain("word/document.xml", document), plain("docProps/core.xml", core), *extra])


class _VictimCase(_MetadataCase):
    def setUp(self) -> None:
        super().setUp()
        self.victims = os.path.join(self.base, "operator")
        os.mkdir(self.victims)
        self.victim = os.path.join(self.victims, "victim.txt")
        with open(self.victim, "wb") as f:
            f.write(b"the operator's own file\n")
        os.chmod(self.victim, 0o644)
        self.victim_dir = os.path.join(self.victims, "folder")
        os.mkdir(self.victim_dir, 0o755)
        os.chmod(self.victim_dir, 0o755)
        self.publish = os.path.join(self.base, "publish")

    def climbing(self, path: str) -> str:
        return UP + path.lstrip("/")

    def assertVictimsUntouched(self) -> None:
        self.assertEqual(stat.S_IMODE(os.stat(self.victim).st_mode), 0o644)
        self.assertEqual(stat.S_IMODE(os.stat(self.victim_dir).st_mode), 0o755)
        with open(self.victim, "rb") as f:
            self.assertEqual(f.read(), b"the operator's own file\n")
        self.assertEqual(os.listdir(self.victim_dir), [])

    def assertNoPlaintextOnDisk(self, *inputs: str) -> None:
        """The payload is only in the inputs: nowhere else below the test's (disk) folder."""
        for dirpath, _, filenames in os.walk(self.base):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if path in inputs or not stat.S_ISREG(os.lstat(path).st_mode):  # gpg-agent's sockets
                    continue
                with open(path, "rb") as f:
                    self.assertNotIn(PAYLOAD, f.read(), path)

    def scrub_refused(self, name: str, data: bytes, member: str) -> str:
        path = self.put(name, data)
        code, out, err = run_cli("--home", self.home, "scrub", path, "--out", self.publish)
        self.assertEqual(code, 1, out + err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith(f"FAILED {path}: archive member '{member}'"), lines[0])
        self.assertIn("refused before mat2 unpacked anything", lines[0])
        self.assertEqual(tree(self.publish), set())
        self.assertVictimsUntouched()
        self.assertNoPlaintextOnDisk(path)
        return lines[0]


class CraftedArchiveTests(_VictimCase):
    def test_members_climbing_out_to_a_file_and_a_folder(self) -> None:
        evil = make_zip([plain("a.txt", b"harmless"), plain(self.climbing(self.victim)),
                         plain(self.climbing(self.victim_dir))])
        line = self.scrub_refused("evil.zip", evil, self.climbing(self.victim))
        self.assertIn("has '..' in its path", line)

    def test_a_folder_alone_is_reached_no_more(self) -> None:
        self.scrub_refused("dir.zip", make_zip([plain(self.climbing(self.victim_dir))]),
                           self.climbing(self.victim_dir))

    def test_an_absolute_member_name(self) -> None:
        line = self.scrub_refused("abs.zip", make_zip([plain(self.victim)]), self.victim)
        self.assertIn("has an absolute name", line)

    def test_a_symlink_member(self) -> None:
        link = make_zip([plain("a.txt", b"harmless"), ("link", self.victim.encode(), stat.S_IFLNK | 0o777)])
        line = self.scrub_refused("link.zip", link, "link")
        self.assertIn("is a symbolic link", line)

    def test_a_traversal_inside_a_nested_archive(self) -> None:
        inner = make_zip([plain(self.climbing(self.victim))])
        outer = make_zip([plain("a.txt", b"harmless"), ("inner.zip", inner, stat.S_IFREG | 0o644)])
        line = self.scrub_refused("outer.zip", outer, self.climbing(self.victim))
        self.assertIn(f"'{self.climbing(self.victim)}' inside 'inner.zip'", line)

    def test_a_nested_zip_named_like_a_text_file(self) -> None:
        # Checked for its content whatever its name: mat2 may yet see it as the archive it is.
        inner = make_zip([plain(self.climbing(self.victim))])
        outer = make_zip([plain("a.txt", b"harmless"), ("notes.txt", inner, stat.S_IFREG | 0o644)])
        line = self.scrub_refused("outer.zip", outer, self.climbing(self.victim))
        self.assertIn(f"'{self.climbing(self.victim)}' inside 'notes.txt'", line)

    def test_export_takes_a_zip_as_the_servers_only_if_every_entry_is_a_server_file(self) -> None:
        # A decrypted document may be a zip holding a server file's name among others: it is a
        # plain zip, checked and cleaned as a whole, not read entry by entry (its msg entry
        # re-encrypted without a look, its other entries dropped).
        msg = self.server_file("1-brave_otter-msg.gpg", b"meet at noon")
        with open(msg, "rb") as f:
            encrypted = f.read()
        mixed = self.put("mixed.zip", make_zip([plain("1-brave_otter-msg.gpg", encrypted),
                                                plain(self.climbing(self.victim))]))
        code, out, err = self.export(mixed)
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("unexpected zip entry", err)
        self.assertIn(f"FAILED {mixed}: archive member '{self.climbing(self.victim)}' has '..' in its path", err)
        self.assertFalse(os.path.exists(self.exp) and os.listdir(self.exp))
        self.assertVictimsUntouched()
        self.assertNoPlaintextOnDisk(mixed)

    def test_a_docx_with_a_traversal_member(self) -> None:
        self.scrub_refused("report.docx", docx([plain(self.climbing(self.victim))]), self.climbing(self.victim))

    def test_export_refuses_a_document_from_the_server_the_same_way(self) -> None:
        # export decrypts into RAM, then hands the copy to mat2: the same check comes first.
        self.document(3, docx([plain(self.climbing(self.victim))]), b"report.docx")
        code, out, err = self.export(os.path.join(self.inbox, "3-brave_otter-doc.gz.gpg"))
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"archive member '{self.climbing(self.victim)}' has '..' in its path", err)
        self.assertFalse(os.path.exists(self.exp) and os.listdir(self.exp))
        self.assertVictimsUntouched()
        self.assertNoPlaintextOnDisk()

    def test_keep_metadata_does_not_show_it_to_mat2_either(self) -> None:
        path = self.put("evil.zip", make_zip([plain(self.climbing(self.victim))]))
        code, _, err = run_cli("--home", self.home, "scrub", path, "--out", self.publish, "--keep-metadata", path)
        self.assertEqual(code, 1)
        self.assertIn("archive member", err)
        self.assertVictimsUntouched()

    def test_a_tar_with_a_link_and_one_climbing_out(self) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            info = tarfile.TarInfo("link")
            info.type, info.linkname = tarfile.SYMTYPE, self.victim
            t.addfile(info)
        self.scrub_refused("l.tar", buf.getvalue(), "link")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            info = tarfile.TarInfo(self.climbing(self.victim))
            info.size = len(PAYLOAD)
            t.addfile(info, io.BytesIO(PAYLOAD))
        self.scrub_refused("up.tar", buf.getvalue(), self.climbing(self.victim))

    def test_ordinary_files_still_scrub(self) -> None:
        files = [self.put("report.docx", docx()), self.put("photo.jpg", jpeg_with_exif()),
                 self.put("paper.pdf", pdf_with_info())]
        code, out, err = run_cli("--home", self.home, "scrub", *files, "--out", self.publish)
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")
        self.assertEqual(sorted(tree(self.publish)), ["paper.pdf", "photo.jpg", "report.docx"])
        for name in ("paper.pdf", "photo.jpg"):
            with open(os.path.join(self.publish, name), "rb") as f:
                self.assertClean(f.read())
        with zipfile.ZipFile(os.path.join(self.publish, "report.docx")) as z:
            self.assertIn(b"Meeting notes", z.read("word/document.xml"))
            self.assertNotIn(b"Jane Whistle", b"".join(z.read(n) for n in z.namelist()))
        self.assertIn("report.docx: removed", out)


class SandboxTests(_VictimCase):
    """The second wall: mat2 can write nothing outside its item folder, checked or not."""

    def setUp(self) -> None:
        super().setUp()
        self.patch(_sandbox, "_sandbox", None)

    def test_bubblewrap_is_used_where_it_works(self) -> None:
        self.assertIsNotNone(_sandbox.sandbox().bwrap, "bwrap is installed on this station and must be used")

    def test_without_the_member_check_mat2_still_reaches_nothing(self) -> None:
        self.patch(_mat2, "check_archive", lambda path: False)  # the first wall down, to see the second
        evil = self.put("evil.zip", make_zip([plain(self.climbing(self.victim)), plain(self.climbing(self.victim_dir)),
                                              plain(self.victim)]))
        code, out, err = run_cli("--home", self.home, "scrub", evil, "--out", self.publish)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"FAILED {evil}: mat2", err)
        self.assertVictimsUntouched()
        self.assertNoPlaintextOnDisk(evil)

    def test_mat2_can_write_only_its_own_folder(self) -> None:
        real = real_mat2(self)
        # The RAM folder's parent is ours, to see afterwards what reached it.
        ram = tempfile.mkdtemp(prefix="ddsvs-ram-", dir="/dev/shm")
        self.addCleanup(shutil.rmtree, ram, True)
        self.patch(_mat2, "ram_folder_candidates", lambda: [ram])
        record = os.path.join(self.base, "seen")
        os.mkfifo(record)  # bound into the sandbox (let_spy_report): the spy can report out
        reader = os.open(record, os.O_RDWR | os.O_NONBLOCK)
        self.addCleanup(os.close, reader)
        let_spy_report(self, record)
        spy_mat2(self, self.base,
                 "try() { if ( : > \"$1\" ) 2>/dev/null; then echo \"wrote $2\"; else echo \"refused $2\"; fi; }\n"
                 f"{{ try {self.victims}/new outside; try {ram}/new ram; try ./new own-folder; rm -f ./new; "
                 f"chmod 0400 {self.victim} 2>/dev/null && echo chmod-outside; }} >> {record}\n"
                 f"exec {real} \"$@\"\n")
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, _, err = run_cli("--home", self.home, "scrub", photo, "--out", self.publish)
        self.assertEqual(code, 0, err)
        seen = os.read(reader, 65536).decode().splitlines()
        self.assertEqual(seen.count("refused outside"), 3, seen)  # show, clean, show
        self.assertEqual(seen.count("wrote own-folder"), 3, seen)
        self.assertNotIn("chmod-outside", seen)
        # Under /dev, mat2 sees a private /dev of its own: what it writes there reaches no RAM folder.
        self.assertEqual(os.listdir(ram), [])
        self.assertVictimsUntouched()

    def test_without_bubblewrap_the_run_says_so_once_and_still_checks(self) -> None:
        self.patch(_sandbox, "bwrap_binary", lambda: None)
        evil = self.put("evil.zip", make_zip([plain(self.climbing(self.victim))]))
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, out, err = run_cli("--home", self.home, "scrub", evil, photo, "--out", self.publish)
        self.assertEqual(code, 1, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 2, err)
        self.assertTrue(lines[0].startswith("note: bubblewrap (bwrap) not installed"), lines[0])
        self.assertIn("archives are still checked", lines[0])
        self.assertIn("predates 0.13.4", lines[0])  # Debian's mat2 here is 0.13.3
        self.assertIn("archive member", lines[1])
        self.assertEqual(sorted(tree(self.publish)), ["photo.jpg"])
        self.assertVictimsUntouched()

    def test_a_bubblewrap_that_cannot_run_is_named_in_its_own_words(self) -> None:
        # In a chroot bwrap makes its namespaces and then fails: the note said "it needs
        # unprivileged user namespaces", which were there (new-user walkthrough).
        fake = os.path.join(short_tempdir(self), "bwrap")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'bwrap: Failed to make / slave: Invalid argument' >&2\nexit 1\n")
        os.chmod(fake, 0o755)
        self.patch(_sandbox, "bwrap_binary", lambda: fake)
        photo = self.put("photo.jpg", jpeg_with_exif())
        code, out, err = run_cli("--home", self.home, "scrub", photo, "--out", self.publish)
        self.assertEqual(code, 0, err)
        self.assertTrue(err.startswith("note: bubblewrap (bwrap) cannot run here (bwrap: Failed to make / slave: "
                                       "Invalid argument): mat2 runs without its filesystem wall"), err)
        self.assertEqual(sorted(tree(self.publish)), ["photo.jpg"])

    def test_a_nested_archive_named_like_a_data_url_is_checked(self) -> None:
        # On its own "data:,evil.zip" reads as a data: URL (text/plain); mat2 guesses the type
        # of the path it unpacked it to, sees a zip and recurses. Without bubblewrap the member
        # check is the only wall.
        self.patch(_sandbox, "bwrap_binary", lambda: None)
        inner = make_zip([plain(self.climbing(self.victim))])
        evil = self.put("outer.zip", make_zip([("data:,evil.zip", inner, stat.S_IFREG | 0o644)]))
        code, out, err = run_cli("--home", self.home, "scrub", evil, "--out", self.publish)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"FAILED {evil}: archive member '{self.climbing(self.victim)}' inside 'data:,evil.zip' "
                      "has '..' in its path", err)
        self.assertEqual(tree(self.publish), set())
        self.assertVictimsUntouched()
        self.assertNoPlaintextOnDisk(evil)


class MemberCheckTests(unittest.SynchronousTestCase):
    """check_archive on its own: names, kinds and depths that are refused, and what passes."""

    def setUp(self) -> None:
        self.dir = short_tempdir(self)

    def put(self, name: str, data: bytes) -> str:
        path = os.path.join(tempfile.mkdtemp(dir=self.dir), name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def refused(self, name: str, data: bytes) -> str:
        path = self.put(name, data)
        with self.assertRaises(ItemError) as caught:
            check_archive(path)
        self.assertEqual(os.listdir(os.path.dirname(path)), [name])  # nested copies gone
        return str(caught.exception)

    def test_names(self) -> None:
        self.assertIn("'..' in its path", self.refused("a.zip", make_zip([plain("..\\..\\x")])))
        self.assertIn("'..' in its path", self.refused("b.zip", make_zip([plain("a/../../x")])))
        self.assertIn("absolute name", self.refused("c.zip", make_zip([plain("C:\\x")])))
        self.assertIn("absolute name", self.refused("d.zip", make_zip([plain("\\x")])))
        self.assertIn("special file", self.refused("e.zip", make_zip([("fifo", b"", stat.S_IFIFO | 0o644)])))
        # Dots that are not a component are a name like any other.
        self.assertTrue(check_archive(self.put("ok.zip", make_zip([plain("a..b/..c"), plain("dir/", b"")]))))

    def test_tar_links_and_devices(self) -> None:
        for kind in (tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as t:
                info = tarfile.TarInfo("m")
                info.type, info.linkname = kind, "x"
                t.addfile(info)
            self.assertIn("'m'", self.refused("t.tgz", buf.getvalue()))

    def test_depth_and_damage(self) -> None:
        data = make_zip([plain("x.txt", b"x")])
        for level in range(_archives.MAX_DEPTH + 1):
            data = make_zip([(f"l{level}.zip", data, stat.S_IFREG | 0o644)])
        self.assertIn("nested more than", self.refused("deep.zip", data))
        self.assertIn("cannot be read", self.refused("broken.docx", b"PK\x03\x04 not really a zip"))
        # Decided by name as mat2 decides, and by content whatever the name.
        self.assertFalse(check_archive(self.put("notes.txt", b"plain words")))
        self.assertIn("'..' in its path", self.refused("photo.bin", make_zip([plain("../x")])))
        # ... at any depth: a tar.gz named as a picture, inside a zip named as nothing mat2 unpacks.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            info = tarfile.TarInfo("link")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            t.addfile(info)
        self.assertIn("'link' inside 'p.png'",
                      self.refused("a.bin", make_zip([("p.png", buf.getvalue(), stat.S_IFREG | 0o644)])))
        data = make_zip([plain("x.txt", b"x")])  # the depth bound holds for them too
        for level in range(_archives.MAX_DEPTH + 1):
            data = make_zip([(f"l{level}.txt", data, stat.S_IFREG | 0o644)])
        self.assertIn("nested more than", self.refused("deep.bin", data))
