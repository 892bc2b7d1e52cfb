"""The wall around mat2 hides what it must not read (issue 26, item 3).

A parser bug in what mat2 drives on a hostile file (exiftool, poppler, GdkPixbuf...) runs the
file's code as mat2. What such code could read, mat2 could write into its cleaned copy, which
``export`` encrypts to a journalist and ``scrub`` publishes: so under the very prefix mat2 runs
with, the SVS home's secret key files, the input folder beside the item, ``/root`` and the
operator's home must not exist at all.
"""
from __future__ import annotations

import glob
import os
import subprocess

from deaddrop.svs import _sandbox
from deaddrop.svs._mat2 import RamScratch
from tests._svs_helpers import run_cli, spy_mat2, tree
from tests.test_svs_metadata import _MetadataCase


class WallTests(_MetadataCase):
    def setUp(self) -> None:
        super().setUp()
        self.patch(_sandbox, "_sandbox", None)
        self.keys = glob.glob(os.path.join(self.home, "gnupg", "private-keys-v1.d", "*.key"))
        self.assertTrue(self.keys, "the SVS home must hold secret key files for this test to mean anything")
        with open(self.keys[0], "rb") as f:
            self.key_bytes = f.read()
        self.report = self.put("report.txt", b"a source's text\n")
        self.operator_home = os.path.expanduser("~")

    def _places(self, item_folder: str) -> list[str]:
        """Where mat2 must see nothing: but the folders above its own item folder (the sandbox
        makes those, empty, to reach it: $XDG_RUNTIME_DIR may be below /run)."""
        places = [self.files, self.home, os.path.join(self.home, "gnupg"), "/root", self.operator_home,
                  "/home", "/media", "/mnt", "/run", self.base]
        return [p for p in places if not item_folder.startswith(p.rstrip("/") + "/")]

    def _attempts(self, places: list[str]) -> str:
        """A shell reading every place it must not; each reports what it found."""
        reads = " ".join(f"'{k}'" for k in self.keys)
        return (f"cat {reads} 2>&1; cat '{self.report}' 2>&1; "
                + "; ".join(f"ls -a '{p}' 2>&1 | sed 's|^|{p}: |'" for p in places))

    def test_under_the_exact_prefix_nothing_secret_can_be_read(self) -> None:
        walls = _sandbox.sandbox()
        self.assertIsNotNone(walls.bwrap, "bwrap is installed on this station and must be used")
        with RamScratch() as scratch, scratch.item() as item:  # the folder mat2 gets, made as export makes it
            places = self._places(item.folder)
            command = walls.command(item.folder, ["/bin/sh", "-c", self._attempts(places)])
            inside = subprocess.run(command, cwd=item.folder, env=_sandbox.minimal_env(item.folder),
                                    capture_output=True, check=False).stdout
            outside = subprocess.run(["/bin/sh", "-c", self._attempts(places)], capture_output=True,
                                     check=False).stdout
        self.assertIn(self.key_bytes, outside)  # the same reads, unwalled, do find the key
        self.assertIn(b"a source's text", outside)
        self.assertNotIn(self.key_bytes, inside)
        self.assertNotIn(b"a source's text", inside)
        for name in (b"pubring.kbx", b"submission-public.asc"):  # what a listing of the home would show
            self.assertNotIn(name, inside)
        lines = inside.decode("utf-8", "replace").splitlines()
        for place in places:
            mine = [line for line in lines if line.startswith(f"{place}: ")]
            self.assertTrue(mine, place)
            self.assertTrue(all("No such file or directory" in line for line in mine), mine)

    def test_a_hijacked_mat2_cannot_ship_the_key_through_export(self) -> None:
        # The auditor's attack: code running as mat2 writes what it can read into its "cleaned"
        # copy, which export encrypts to the journalist.
        with RamScratch() as scratch:
            places = self._places(scratch.folder)
        spy_mat2(self, self.base,
                 "if [ \"$1\" = --show ]; then echo \"  No metadata found in $3.\"; exit 0; fi\n"
                 f"{{ echo hijacked; {self._attempts(places)}; }} > \"${{2%.*}}.cleaned.${{2##*.}}\"\n")
        code, out, err = self.export(self.report)
        self.assertEqual(code, 0, err)
        shipped = self.decrypted("report.txt.gpg")
        self.assertIn(b"hijacked", shipped)  # the spy did run, as mat2, inside the walls
        self.assertNotIn(self.key_bytes, shipped)
        self.assertNotIn(b"a source's text", shipped)
        self.assertIn(b"No such file or directory", shipped)

    def test_a_program_found_through_a_link_outside_the_system_folders_runs(self) -> None:
        # PATH may reach mat2 through a link in a folder the wall does not show (a folder of
        # links to /usr/bin, /usr/local/bin/mat2 -> /usr/bin/mat2 with /usr/local elsewhere):
        # the wall runs what the link names.
        links = os.path.join(self.base, "links")
        os.mkdir(links)
        os.symlink("/bin/echo", os.path.join(links, "echo"))
        with RamScratch() as scratch, scratch.item() as item:
            command = _sandbox.sandbox().command(item.folder, [os.path.join(links, "echo"), "ran inside"])
            inside = subprocess.run(command, cwd=item.folder, env=_sandbox.minimal_env(item.folder),
                                    capture_output=True, check=False)
        self.assertEqual(inside.stdout, b"ran inside\n", inside.stderr)


class ScrubNeedsTheHomeTests(_MetadataCase):
    def test_scrub_without_home_refuses_and_says_why(self) -> None:
        photo = self.put("photo.txt", b"words")
        publish = os.path.join(self.base, "publish")
        old = os.environ.pop("DEADDROP_SVS_HOME", None)
        if old is not None:
            self.addCleanup(os.environ.__setitem__, "DEADDROP_SVS_HOME", old)
        code, out, err = run_cli("scrub", photo, "--out", publish)
        self.assertEqual(code, 2, out + err)
        self.assertIn("--home DIR is required (or set $DEADDROP_SVS_HOME): scrub never reads the SVS home's "
                      "files, not even through a hard link", err)
        self.assertFalse(os.path.exists(publish))
        # Given the home, as every other command: a hard link to its secret key is refused.
        key = glob.glob(os.path.join(self.home, "gnupg", "private-keys-v1.d", "*.key"))[0]
        planted = os.path.join(self.files, "innocent.txt")
        os.link(key, planted)
        os.environ["DEADDROP_SVS_HOME"] = self.home
        self.addCleanup(os.environ.pop, "DEADDROP_SVS_HOME", None)
        code, out, err = run_cli("scrub", planted, photo, "--out", publish)
        self.assertEqual(code, 1, out + err)
        self.assertIn(f"FAILED {planted}: is a link to a file of the SVS home", err)
        self.assertEqual(tree(publish), {"photo.txt"})


class LinksLeftBehindTests(_MetadataCase):
    """Code running as mat2 cannot read the key, but it can leave a symbolic link to it (whose
    path it may guess) where its cleaned copy should be, after that copy was checked: the last
    ``--show`` runs on the cleaned copy itself. Read outside the walls with the operator's
    rights, the link would ship the key. Nor may a FIFO left there hang the run."""

    def setUp(self) -> None:
        super().setUp()
        self.patch(_sandbox, "_sandbox", None)
        self.key = glob.glob(os.path.join(self.home, "gnupg", "private-keys-v1.d", "*.key"))[0]
        with open(self.key, "rb") as f:
            self.key_bytes = f.read()
        self.report = self.put("report.txt", b"a source's text\n")

    def _hijack(self, leave: str, which: str = "*.cleaned.*") -> None:
        """mat2 cleans honestly, then, asked about a file named like ``which`` (its cleaned copy;
        with --keep-metadata the copy itself), leaves ``leave`` in its place."""
        spy_mat2(self, self.base,
                 f'case "$1 $3" in "--show "{which}) rm -f "$3"; {leave} "$3";; esac\n'
                 'if [ "$1" = --show ]; then echo "  No metadata found in $3."; exit 0; fi\n'
                 'cp "$2" "${2%.*}.cleaned.${2##*.}"\n')

    def _assert_nothing_left(self, code: int, err: str, out_dir: str) -> None:
        self.assertEqual(code, 1, err)
        self.assertIn("FAILED", err)
        self.assertIn("nothing leaves", err)
        self.assertEqual(tree(out_dir) if os.path.isdir(out_dir) else set(), set())

    def test_export_does_not_follow_a_link_left_for_the_cleaned_copy(self) -> None:
        self._hijack(f"ln -s '{self.key}'")
        code, out, err = self.export(self.report)
        self._assert_nothing_left(code, err, self.exp)

    def test_scrub_does_not_follow_a_link_left_for_the_cleaned_copy(self) -> None:
        self._hijack(f"ln -s '{self.key}'")
        publish = os.path.join(self.base, "publish")
        code, out, err = run_cli("--home", self.home, "scrub", self.report, "--out", publish)
        self._assert_nothing_left(code, err, publish)

    def test_a_kept_file_is_not_read_through_a_link(self) -> None:
        self._hijack(f"ln -s '{self.key}'", which="*")
        code, out, err = self.export(self.report, extra=("--keep-metadata", self.report))
        self._assert_nothing_left(code, err, self.exp)

    def test_a_fifo_left_for_the_cleaned_copy_does_not_hang_the_run(self) -> None:
        self._hijack("mkfifo")
        code, out, err = self.export(self.report)
        self._assert_nothing_left(code, err, self.exp)


class RefusalTests(_MetadataCase):
    def test_a_refusal_is_told_whole_with_its_link(self) -> None:
        # Debian's bwrap ends its refusal with a link to its README, past 200 characters.
        line = "bwrap: setting up uid map: Permission denied " + "x" * 200 + \
            " See <https://deb.li/bubblewrap> or <file:///usr/share/doc/bubblewrap/README.Debian.gz>."
        said = _sandbox.refusal(["sh", "-c", f"echo '{line}' >&2; exit 1"])
        self.assertEqual(said, line)
        self.assertIsNone(_sandbox.refusal(["true"]))
