"""Hostile inputs on the Secure Viewing Station: links to its secret key, decompression bombs.

Real gpg, real files, a real tmpfs for the free-space case. The link attack is the one from
the review: an archive from a source, extracted on the SVS, holds links to
``DIR/gnupg/private-keys-v1.d/<keygrip>.key`` (keygrips are computable from the public key);
``export`` of that folder must never put those bytes into anything it writes.
"""
from __future__ import annotations

import os
import subprocess
import zipfile

from deaddrop.svs._limit import DEFAULT_MAX_OUTPUT
from tests._svs_helpers import gpg_decrypt, make_gzip, run_cli, tree
from tests.integration.test_disk_full import mount_tmpfs
from tests.test_svs import _StationCase

MiB = 1024 * 1024


def keygrips(public_key: str) -> list[str]:
    """The keygrips of every (sub)key in a public key file, as an attacker computes them."""
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--with-keygrip", "--show-keys", public_key],
                         capture_output=True, check=True, text=True).stdout
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("grp:")]


class LinkAttackTests(_StationCase):
    def setUp(self) -> None:
        super().setUp()
        self.personal_home, self.personal_pub = self.other_key("journalist")
        self.keydir = os.path.join(self.home, "gnupg", "private-keys-v1.d")
        self.grips = keygrips(self.pub)
        self.assertTrue(self.grips)
        self.secrets = []
        for grip in self.grips:
            with open(os.path.join(self.keydir, f"{grip}.key"), "rb") as f:
                self.secrets.append(f.read())
        # What a hostile archive leaves once extracted: one harmless file and many ways back
        # to the secret keys.
        self.archive = os.path.join(self.base, "archive")
        os.makedirs(os.path.join(self.archive, "sub"))
        with open(os.path.join(self.archive, "letter.txt"), "wb") as f:
            f.write(b"an innocent document")
        for i, grip in enumerate(self.grips):
            target = os.path.join(self.keydir, f"{grip}.key")
            os.symlink(target, os.path.join(self.archive, f"absolute-{i}.txt"))
            os.symlink(os.path.relpath(target, os.path.join(self.archive, "sub")),
                       os.path.join(self.archive, "sub", f"relative-{i}.txt"))
            os.link(target, os.path.join(self.archive, f"hardlink-{i}.txt"))  # tar can do this
        os.symlink(self.keydir, os.path.join(self.archive, "keys"))  # a link to the folder
        os.symlink(os.path.join(self.home, "gnupg"), os.path.join(self.archive, "sub", "gnupg"))

    def export(self, *inputs: str) -> tuple[int, str, str]:
        return run_cli("--home", self.home, "export", *inputs, "--to-key", self.personal_pub,
                       "--out", os.path.join(self.base, "export"))

    def exported_plaintexts(self) -> dict[str, bytes]:
        found = {}
        exp = os.path.join(self.base, "export")
        for rel in tree(exp):
            path = os.path.join(exp, rel)
            if os.path.isfile(path):
                res = gpg_decrypt(self.personal_home, path)
                self.assertEqual(res.returncode, 0, res.stderr)
                found[rel] = res.stdout
        return found

    def assert_no_secret_in(self, blobs: dict[str, bytes]) -> None:
        for rel, data in blobs.items():
            for secret in self.secrets:
                self.assertNotIn(secret, data, rel)

    def test_export_of_a_hostile_folder_never_reads_the_secret_key(self) -> None:
        code, out, err = self.export(self.archive)
        self.assertEqual(code, 1, (out, err))
        plaintexts = self.exported_plaintexts()
        self.assertEqual(plaintexts, {"archive/letter.txt.gpg": b"an innocent document"})
        self.assert_no_secret_in(plaintexts)
        failed = [line for line in err.splitlines() if line.startswith("FAILED ")]
        # Every link is named on its own FAILED line; nothing was silently skipped.
        self.assertEqual(len(failed), 3 * len(self.grips) + 2, err)
        self.assertEqual(sum("symbolic link" in line for line in failed), 2 * len(self.grips) + 2, err)
        self.assertEqual(sum("SVS home" in line for line in failed), len(self.grips), err)

    def test_links_given_directly_are_refused_too(self) -> None:
        inputs = [os.path.join(self.archive, f"absolute-{i}.txt") for i in range(len(self.grips))]
        inputs += [os.path.join(self.archive, f"hardlink-{i}.txt") for i in range(len(self.grips))]
        inputs += [os.path.join(self.archive, "keys"), self.keydir, os.path.join(self.keydir, f"{self.grips[0]}.key"),
                   os.path.join(self.home, "gnupg")]
        code, _, err = self.export(*inputs)
        self.assertEqual(code, 1)
        self.assertEqual(len(err.splitlines()), len(inputs), err)
        self.assertEqual(self.exported_plaintexts(), {})

    def test_a_folder_holding_the_home_skips_the_home(self) -> None:
        # `export /media` with the home at /media/svs: everything of the home is refused.
        code, _, err = self.export(self.base)
        self.assertEqual(code, 1)
        plaintexts = self.exported_plaintexts()
        self.assert_no_secret_in(plaintexts)
        self.assertFalse(any(rel.split("/")[1:2] == ["home"] for rel in plaintexts), sorted(plaintexts))
        self.assertIn(f"{self.base.rstrip('/').rsplit('/', 1)[1]}/archive/letter.txt.gpg", plaintexts)

    def test_to_key_must_not_be_a_link(self) -> None:
        link = os.path.join(self.base, "alice.asc")
        os.symlink(self.personal_pub, link)
        code, _, err = self.export(os.path.join(self.archive, "letter.txt"))
        self.assertEqual(code, 0, err)
        code, _, err = run_cli("--home", self.home, "export", os.path.join(self.archive, "letter.txt"),
                               "--to-key", link, "--out", os.path.join(self.base, "export2"))
        self.assertEqual(code, 1)
        self.assertIn("symbolic link", err)
        self.assertFalse(os.path.exists(os.path.join(self.base, "export2")))

    def test_decrypt_does_not_follow_links_either(self) -> None:
        real = self.server_file("1-brave_otter-msg.gpg", b"a real message")
        elsewhere = os.path.join(self.base, "elsewhere")
        os.mkdir(elsewhere)
        self.server_file("2-brave_otter-msg.gpg", b"outside the input root")
        os.rename(os.path.join(self.inbox, "2-brave_otter-msg.gpg"), os.path.join(elsewhere, "2-brave_otter-msg.gpg"))
        os.symlink(os.path.join(elsewhere, "2-brave_otter-msg.gpg"), os.path.join(self.inbox, "2-brave_otter-msg.gpg"))
        os.symlink(elsewhere, os.path.join(self.inbox, "more"))
        zpath = os.path.join(elsewhere, "brave_otter.zip")
        with zipfile.ZipFile(zpath, "w") as z:
            z.write(real, "1-brave_otter-msg.gpg")
        zlink = os.path.join(self.base, "linked.zip")
        os.symlink(zpath, zlink)
        code, _, err = self.decrypt(self.inbox, zlink, os.path.join(self.keydir, f"{self.grips[0]}.key"))
        self.assertEqual(code, 1)
        self.assertEqual(len(err.splitlines()), 4, err)
        self.assertEqual(sorted(tree(self.out)), ["brave_otter", "brave_otter/1-msg.txt"])


class BombTests(_StationCase):
    def compressed_message(self, number: int, size: int, designation: str = "brave_otter") -> str:
        """A server-named file whose OpenPGP compression expands ``size`` zero bytes."""
        path = os.path.join(self.inbox, f"{number}-{designation}-msg.gpg")
        subprocess.run(["gpg", "--batch", "--homedir", self.scratch, "--compress-algo", "zlib", "-z", "9",
                        "--recipient-file", self.pub, "--yes", "-o", path, "--encrypt"],
                       input=b"\0" * size, check=True, capture_output=True)
        return path

    def assert_nothing_written(self, *names: str) -> None:
        folder = os.path.join(self.out, "brave_otter")
        present = set(os.listdir(folder)) if os.path.isdir(folder) else set()
        for name in names:
            self.assertNotIn(name, present)
        self.assertFalse([n for n in present if n.startswith(".deaddrop-svs-")], present)

    def test_default_cap_is_twice_the_servers_largest_upload(self) -> None:
        self.assertEqual(DEFAULT_MAX_OUTPUT, 2 * 524288000)

    def test_an_openpgp_compression_bomb_fails_and_leaves_nothing(self) -> None:
        bomb = self.compressed_message(1, 64 * MiB)
        self.assertLess(os.path.getsize(bomb), 200 * 1024)  # ~1000:1 with zlib in OpenPGP
        self.server_file("2-brave_otter-msg.gpg", b"small and fine")
        code, out, err = self.decrypt(self.inbox, extra=("--max-output-size", str(4 * MiB)))
        self.assertEqual(code, 1, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertRegex(err, r"^FAILED .*1-brave_otter-msg\.gpg: decrypts to more than 4 MiB \(--max-output-size")
        self.assert_nothing_written("1-msg.txt")
        self.assertEqual(self.read_out("brave_otter", "2-msg.txt"), b"small and fine")
        self.assertIn("1 FAILED", out)

    def test_a_multi_member_gzip_bomb_fails_and_leaves_nothing(self) -> None:
        member = make_gzip(b"\0" * MiB, b"bomb.bin", level=9)
        self.assertLess(len(member), 2048)
        # Concatenated members (each valid on its own) make the output as large as one likes.
        self.server_file("1-brave_otter-doc.gz.gpg", b"".join([member] * 40))
        code, _, err = self.decrypt(self.inbox, extra=("--max-output-size", str(8 * MiB)))
        self.assertEqual(code, 1)
        self.assertIn("decrypts to more than 8 MiB", err)
        self.assertTrue(err.startswith("FAILED "), err)
        self.assertEqual(tree(self.out), set())  # not even an empty folder

    def test_files_up_to_the_cap_still_decrypt(self) -> None:
        self.server_file("1-brave_otter-doc.gz.gpg", make_gzip(b"x" * MiB, b"exact.bin"))
        code, _, err = self.decrypt(self.inbox, extra=("--max-output-size", str(MiB)))
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(len(self.read_out("brave_otter", "exact.bin")), MiB)

    def test_bad_max_output_size_is_a_usage_error(self) -> None:
        self.server_file("1-brave_otter-msg.gpg", b"x")
        for bad in ("0", "-1", "lots"):
            code, _, _ = self.decrypt(self.inbox, extra=("--max-output-size", bad))
            self.assertEqual(code, 2, bad)

    def test_free_space_is_checked_before_writing(self) -> None:
        mount_tmpfs(self, self.out, "48m")  # 48 MiB, 16 of them kept free: 32 MiB usable
        self.compressed_message(1, 40 * MiB)  # small ciphertext, too big once decrypted
        self.server_file("2-brave_otter-msg.gpg", os.urandom(36 * MiB))  # too big already encrypted
        self.server_file("3-brave_otter-msg.gpg", b"fits")
        code, _, err = self.decrypt(self.inbox)  # the default cap (1000 MiB) is not what stops them
        self.assertEqual(code, 1, err)
        lines = err.splitlines()
        self.assertEqual(len(lines), 2, err)
        self.assertTrue(all("not enough free space in OUTDIR" in line for line in lines), err)
        self.assertEqual(sorted(tree(self.out)), ["brave_otter", "brave_otter/3-msg.txt"])
        st = os.statvfs(self.out)
        self.assertGreater(st.f_bavail * st.f_frsize, 15 * MiB)
