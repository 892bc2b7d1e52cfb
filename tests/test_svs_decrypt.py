"""``deaddrop-svs decrypt`` as the install guide walks it (issue 27, items 2, 10 and 11): every
file of a download folder is decrypted or named, and the plaintext goes where ``export`` and
``scrub`` can take it on, never into the SVS home."""
from __future__ import annotations

import os
import shutil
import tempfile
import zipfile

from tests._svs_helpers import run_cli, tree
from tests.test_svs import _StationCase


class FolderTests(_StationCase):
    def test_every_file_of_a_download_folder_is_decrypted_or_named(self) -> None:
        self.server_file("1-brave_otter-msg.gpg", b"first")
        self.server_file("2-brave_otter-msg.gpg", b"second")
        self.document(3, b"a document", b"doc.txt")
        # The browser's "download all": a zip of server files, saved beside the others.
        zipped = {"4-calm_heron-msg.gpg": b"zipped one", "5-calm_heron-msg.gpg": b"zipped two"}
        staging = os.path.join(self.base, "staging")
        os.mkdir(staging)
        with zipfile.ZipFile(os.path.join(self.inbox, "calm_heron.zip"), "w") as zf:
            for name, text in zipped.items():
                path = self.server_file(name, text)
                zf.write(path, f"calm_heron/{name}")
                shutil.move(path, staging)
        with zipfile.ZipFile(os.path.join(self.inbox, "holiday.zip"), "w") as zf:
            zf.writestr("beach.txt", "not a submission")
        for name in ("notes.txt", "6-brave_otter-msg.gpg.crdownload"):
            with open(os.path.join(self.inbox, name), "w") as f:
                f.write("not a submission")
        code, out, err = self.decrypt(self.inbox)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.read_out("calm_heron", "4-msg.txt"), b"zipped one")
        self.assertEqual(self.read_out("calm_heron", "5-msg.txt"), b"zipped two")
        self.assertEqual(self.read_out("brave_otter", "doc.txt"), b"a document")
        skipped = sorted(line.split(":")[0] for line in err.splitlines())
        self.assertEqual(skipped, sorted(f"skipped {os.path.join(self.inbox, n)}"
                                         for n in ("holiday.zip", "notes.txt", "6-brave_otter-msg.gpg.crdownload")))
        self.assertIn("not a server file (N-designation-msg|doc.gz|reply.gpg) nor a zip holding any: skipped", err)
        # 5 decrypted + 3 named: all 8 accounted for.
        self.assertIn(f"Decrypted 5 of 8 files into {self.out} (4 messages, 1 document); 3 are not server files "
                      "(skipped, named above).", out)


class WhereToDecryptTests(_StationCase):
    def test_decrypting_into_the_home_is_refused_naming_a_place_that_reaches_publication(self) -> None:
        self.document(1, b"a page to publish", b"page.txt")
        inside = os.path.join(self.home, "plain")  # the guide's old /media/svs/plain
        before = tree(self.home)
        code, out, err = run_cli("--home", self.home, "decrypt", self.inbox, "--out", inside)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"--out {inside} is inside the SVS home ({self.home})", err)
        self.assertIn("export and scrub refuse it", err)
        self.assertIn("Decrypt into a folder outside it, e.g. --out /dev/shm/plain (RAM: never written to a disk, "
                      "gone at power-off)", err)
        self.assertEqual(tree(self.home), before)
        for command, extra in (("export", ("--to-key", self.pub)), ("scrub", ())):
            code, _, err = run_cli("--home", self.home, command, self.inbox, "--out", inside, *extra)
            self.assertEqual(code, 1, err)
            self.assertIn("is inside the SVS home", err)
        self.assertEqual(tree(self.home), before)
        # The place named reaches publication: export and scrub take what decrypt wrote there.
        ram = tempfile.mkdtemp(prefix="ddsvs-plain-", dir="/dev/shm")
        self.addCleanup(shutil.rmtree, ram, True)
        plain = os.path.join(ram, "plain")
        code, out, err = run_cli("--home", self.home, "decrypt", self.inbox, "--out", plain)
        self.assertEqual(code, 0, err)
        publish = os.path.join(self.base, "publish")
        code, out, err = run_cli("--home", self.home, "scrub", os.path.join(plain, "brave_otter", "page.txt"),
                                 "--out", publish)
        self.assertEqual(code, 0, err)
        with open(os.path.join(publish, "page.txt"), "rb") as f:
            self.assertEqual(f.read(), b"a page to publish")
