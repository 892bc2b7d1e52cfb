"""``deaddrop-admin backup`` while the server runs, ``restore`` into a fresh directory, and the
restored instance on the real stack: same onion key, the source logs in with its codename and
reads its reply, the journalist downloads the old submissions and they decrypt on the SVS."""
from __future__ import annotations

import calendar
import io
import json
import os
import re
import shlex
import shutil
import sqlite3
import stat
import subprocess
import tarfile
import time

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.admin import backup
from deaddrop.svs import cli as svs_cli
from deaddrop.tor import keys
from tests._support import (
    ApiClient, Browser, TotpDevice, add_journalist, issue_client_cert, kill_gpg_agent, short_tempdir,
    start_journalist_server, test_svs,
)
from tests.integration.test_admin_cli import run_cli


class AdminKey:
    """The newsroom's two backup keys, made as docs/deploy/install.md says: the backup key (its
    secret half stays off the server) and the backup-signing key (a sign-only key on the server,
    in a GnuPG home of its own)."""

    def __init__(self, testcase: unittest.TestCase) -> None:
        self.home = _gnupg_home(testcase, "dd-adm-")
        _gen_key(self.home, "DeadDrop backups", "future-default", "default")
        self.public = _export(self.home, os.path.join(self.home, "backup-key.asc"))
        self.fingerprint = backup.recipient_fingerprint(self.public)
        self.signing_home = _gnupg_home(testcase, "dd-sgn-")
        _gen_key(self.signing_home, "DeadDrop backup signing", "ed25519", "sign")
        self.signer = _export(self.signing_home, os.path.join(self.home, "backup-signing.asc"))
        self.signing_fingerprint = backup.public_key_fingerprint(self.signer, "s")

    def backup_args(self) -> list[str]:
        return ["--to-key", self.public, "--sign-key", self.signing_fingerprint, "--gnupg-home", self.signing_home]

    def restore_args(self) -> list[str]:
        return ["--gnupg-home", self.home, "--signer", self.signer]

    def decrypt(self, path: str) -> bytes:
        # The archive is signed by a key this home does not hold: read it without checking that.
        return subprocess.run(["gpg", "--homedir", self.home, "--batch", "-q", "--skip-verify", "-d", path], check=True,
                              capture_output=True).stdout


def _gnupg_home(testcase: unittest.TestCase, prefix: str) -> str:
    home = short_tempdir(prefix)
    os.chmod(home, 0o700)
    testcase.addCleanup(shutil.rmtree, home, True)
    testcase.addCleanup(kill_gpg_agent, home)
    return home


def _gen_key(home: str, uid: str, algorithm: str, usage: str) -> None:
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key", uid, algorithm,
                    usage, "never"], check=True, capture_output=True)


def _export(home: str, path: str) -> str:
    with open(path, "wb") as f:
        f.write(subprocess.run(["gpg", "--homedir", home, "--armor", "--export"], check=True,
                               capture_output=True).stdout)
    return path


def modes(data_dir: str) -> dict[str, int]:
    """Every file and folder a backup keeps, with its permission bits."""
    found = {}
    for kind, name in backup._walk(data_dir):
        found[name] = os.lstat(os.path.join(data_dir, name)).st_mode & 0o7777
    return found


class BackupRoundTripTests(unittest.TestCase):
    timeout = 240

    @inlineCallbacks
    def test_round_trip_into_a_fresh_directory(self):
        server = yield start_journalist_server(self)
        onion_key, _ = keys.load_or_create_onion_key(keys.service_dir(server.data_dir, keys.SOURCE))
        journalist_onion, _ = keys.load_or_create_onion_key(keys.service_dir(server.data_dir, keys.JOURNALIST))
        cert = issue_client_cert(server, "alice")
        account = yield add_journalist(server, "alice")
        device = TotpDevice(server, account.totp_secret)
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        codename = yield source.create_source()
        document = os.urandom(3 * 1024 * 1024)
        response, html = yield source.submit("BACKUP-MESSAGE-MARKER", [("evidence.pdf", document)])
        self.assertEqual(response.code, 200)
        conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        [(source_id,)] = conn.execute("SELECT id FROM sources").fetchall()
        conn.close()
        yield server.service.newsroom.replies.add(source_id, "BACKUP-REPLY-MARKER")

        admin = AdminKey(self)
        work = short_tempdir("dd-bkw-")
        self.addCleanup(shutil.rmtree, work, True)
        archive = os.path.join(work, "deaddrop.backup")
        started = time.monotonic()
        # An unusual mode must come back as it was, like store/ (0700) and everything else.
        os.chmod(os.path.join(server.data_dir, "tls", "server.pem"), 0o640)
        original_modes = modes(server.data_dir)
        code, out, err = yield deferToThread(run_cli, "backup", "--out", archive, *admin.backup_args(),
                                             "--data-dir", server.data_dir, "--json")
        backup_seconds = time.monotonic() - started
        self.assertEqual(code, 0, err)
        made = json.loads(out)
        self.assertEqual((made["recipient"], made["signer"]), (admin.fingerprint, admin.signing_fingerprint))
        # The restore line says everything restore needs.
        self.assertEqual(made["restore_command"], f"deaddrop-admin restore {archive} --data-dir NEW_DIR "
                                                  "--gnupg-home BACKUP_GNUPG_HOME --signer SIGNER.asc "
                                                  f"--not-older-than {made['instance'][:8]}:{made['sequence']}")
        self.assertEqual(made["keep"], f"{made['instance'][:8]}:{made['sequence']}")
        self.assertEqual(os.stat(archive).st_mode & 0o777, 0o600)
        self.assertFalse(os.path.exists(archive + ".part"))
        # Encrypted as a whole: no name, no byte of any stored file is readable in it.
        with open(archive, "rb") as f:
            raw = f.read()
        for secret in [b"db.sqlite", b"pepper", b"hs_ed25519", document[:64], b"MANIFEST"]:
            self.assertNotIn(secret, raw)
        yield source.close()
        yield server.stop()

        target = os.path.join(short_tempdir("dd-rst-"), "restored")
        self.addCleanup(shutil.rmtree, os.path.dirname(target), True)
        started = time.monotonic()
        code, out, err = yield deferToThread(run_cli, "restore", archive, "--data-dir", target,
                                             *admin.restore_args())
        restore_seconds = time.monotonic() - started
        self.assertEqual(code, 0, err)
        self.assertIn("every file matched the manifest", out)
        self.assertIn(f"signed by {admin.signing_fingerprint}", out)
        restored_modes = modes(target)
        self.assertEqual(restored_modes, original_modes)
        self.assertEqual((restored_modes["."], restored_modes["store"], restored_modes["tls/server.pem"]),
                         (0o700, 0o700, 0o640))
        self.assertEqual(keys.read_onion_key(keys.service_dir(target, keys.SOURCE)).address, onion_key.address)
        self.assertEqual(keys.read_onion_key(keys.service_dir(target, keys.JOURNALIST)).address,
                         journalist_onion.address)
        for name in ("pepper-filesystem-id", "pepper-key-passphrase", "tls/server.pem", "ca/ca.pem"):
            with open(os.path.join(server.data_dir, name), "rb") as a, open(os.path.join(target, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

        # No --submission-key: the restored data dir holds the instance's key.
        restored = yield start_journalist_server(self, data_dir=target, submission_key=None)
        # The source logs in with its codename and reads the reply (its key came back too).
        source = Browser(restored.source_url)
        self.addCleanup(source.close)
        response, html = yield source.login(codename)
        self.assertEqual(response.code, 200)
        self.assertIn("BACKUP-REPLY-MARKER", html)
        # The journalist logs in with the same account and downloads the old submissions...
        device.server = restored
        api = ApiClient(restored, cert)
        self.addCleanup(api.close)
        yield api.log_in(account, device)
        status, data = yield api.json("GET", "/api/v1/sources")
        [listed] = data["sources"]
        status, data = yield api.json("GET", f"/api/v1/sources/{listed['uuid']}/submissions")
        inbox = os.path.join(work, "inbox", "source")
        os.makedirs(inbox)
        for item in data["submissions"]:
            response, body = yield api.request("GET", item["download_url"])
            self.assertEqual(response.code, 200)
            with open(os.path.join(inbox, item["filename"]), "wb") as f:
                f.write(body)
        self.assertEqual(len(data["submissions"]), 2)
        # ... and they decrypt on the SVS.
        svs_home = short_tempdir("dd-svsb-")
        self.addCleanup(shutil.rmtree, svs_home, True)
        os.symlink(test_svs().homedir, os.path.join(svs_home, "gnupg"))
        plain = os.path.join(work, "plain")
        code = yield deferToThread(svs_cli.main, ["--home", svs_home, "decrypt", inbox, "--out", plain])
        self.assertEqual(code, 0)
        [folder] = os.listdir(plain)
        files = sorted(os.listdir(os.path.join(plain, folder)))
        with open(os.path.join(plain, folder, "evidence.pdf"), "rb") as f:
            self.assertEqual(f.read(), document)
        [msg] = [n for n in files if n.endswith("-msg.txt")]
        with open(os.path.join(plain, folder, msg)) as f:
            self.assertEqual(f.read(), "BACKUP-MESSAGE-MARKER")

        print(f"\nbackup round trip: backup {backup_seconds:.2f} s + restore {restore_seconds:.2f} s "
              f"({made['files']} files, {made['bytes'] / 1e6:.1f} MB)")


@inlineCallbacks
def _workspace(testcase: unittest.TestCase, prefix: str):
    """An initialised data dir, the newsroom's backup keys and a scratch folder, on ``testcase``."""
    from tests._support import initialised_data_dir

    testcase.data_dir = yield initialised_data_dir(testcase)
    testcase.admin = AdminKey(testcase)
    testcase.work = short_tempdir(prefix)
    testcase.addCleanup(shutil.rmtree, testcase.work, True)


class BackupArchiveTests(unittest.TestCase):
    """The archive itself: its content, and what restore refuses (nothing is left behind)."""

    timeout = 120

    @inlineCallbacks
    def setUp(self):
        yield _workspace(self, "dd-bka-")
        self.archive = os.path.join(self.work, "b.gpg")
        code, out, err = yield deferToThread(run_cli, "backup", "--out", self.archive, *self.admin.backup_args(),
                                             "--data-dir", self.data_dir)
        self.assertEqual(code, 0, err)

    def members(self, blob: bytes) -> list[str]:
        import io

        with tarfile.open(fileobj=io.BytesIO(blob), mode="r|") as tar:
            return [m.name for m in tar]

    def restore(self, archive: str, target: str):
        return deferToThread(run_cli, "restore", archive, "--data-dir", target, *self.admin.restore_args())

    def test_what_is_in_it(self):
        names = self.members(self.admin.decrypt(self.archive))
        self.assertEqual(names[0], "db.sqlite")
        self.assertEqual(names[-1], "MANIFEST.json")
        for expected in ["pepper-filesystem-id", "pepper-key-passphrase", "pepper-login-tag", "submission-key.asc"]:
            self.assertIn(expected, names)
        self.assertTrue(any(n.startswith("gnupg/") for n in names))
        for runtime in ["server.lock", "db.sqlite-wal", "db.sqlite-shm"]:
            self.assertNotIn(runtime, names)
        self.assertFalse(any(n.startswith(("tmp/", "backups/")) or "S.gpg-agent" in n for n in names), names)

    @inlineCallbacks
    def test_a_non_empty_directory_is_refused(self):
        target = os.path.join(self.work, "busy")
        os.makedirs(target)
        with open(os.path.join(target, "keep.txt"), "w") as f:
            f.write("mine")
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 1)
        self.assertEqual(err, f"deaddrop-admin: error: {target} is not empty (keep.txt): restore only into a new or "
                              "empty directory, or one holding nothing but the server certificate folder tls/\n")
        self.assertEqual(os.listdir(target), ["keep.txt"])

    def new_server_dir(self, name: str) -> tuple[str, dict[str, bytes]]:
        """A data dir as docs/deploy/install.md leaves a new server's before the restore: only
        tls/ with the new server's certificate and key (their own bytes, not the archive's)."""
        target = os.path.join(self.work, name)
        os.makedirs(os.path.join(target, "tls"), mode=0o700)
        mine = {"tls/server.pem": b"the new server's certificate\n", "tls/server.key": b"the new server's key\n"}
        for rel, data in mine.items():
            with open(os.path.join(target, rel), "wb") as f:
                f.write(data)
        return target, mine

    @inlineCallbacks
    def test_a_directory_holding_only_the_new_servers_tls_is_restored_into_and_tls_is_kept(self):
        # The old server had its pair in DATA/tls (step 3 of the guide): it is in the backup.
        os.makedirs(os.path.join(self.data_dir, "tls"), mode=0o700, exist_ok=True)
        for name in ("server.pem", "server.key"):
            with open(os.path.join(self.data_dir, "tls", name), "wb") as f:
                f.write(b"the old server's " + name.encode() + b"\n")
        archive = os.path.join(self.work, "with-tls.gpg")
        code, out, err = yield deferToThread(run_cli, "backup", "--out", archive, *self.admin.backup_args(),
                                             "--data-dir", self.data_dir)
        self.assertEqual(code, 0, err)
        archived = [n for n in self.members(self.admin.decrypt(archive)) if n.startswith("tls/")]
        self.assertEqual(archived, ["tls/server.key", "tls/server.pem"])
        target, mine = self.new_server_dir("new-server")
        code, out, err = yield self.restore(archive, target)
        self.assertEqual(code, 0, err)
        for rel, data in mine.items():  # never overwritten
            with open(os.path.join(target, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)
        self.assertEqual(sorted(os.listdir(os.path.join(target, "tls"))), ["server.key", "server.pem"])
        self.assertIn("kept this server's own tls/server.key, tls/server.pem (already in the data dir, unchanged); "
                      f"the archive's {', '.join(archived)} matched the manifest and were NOT restored", out)
        for restored in ["db.sqlite", "submission-key.asc", "pepper-login-tag"]:
            self.assertTrue(os.path.isfile(os.path.join(target, restored)), restored)
        code, out, err = yield deferToThread(run_cli, "--json", "restore", archive, "--data-dir",
                                             self.new_server_dir("new-server-json")[0], *self.admin.restore_args())
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["kept"], ["tls/server.key", "tls/server.pem"])
        self.assertEqual(report["not_restored"], archived)

    @inlineCallbacks
    def test_a_tls_folder_with_anything_else_or_a_failed_restore_leaves_the_new_servers_files_alone(self):
        target, mine = self.new_server_dir("tls-and-more")
        os.makedirs(os.path.join(target, "store"))
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 1)
        self.assertIn(f"{target} is not empty (store): restore only into a new or empty directory, or one holding "
                      "nothing but the server certificate folder tls/", err)
        target, mine = self.new_server_dir("tls-with-a-link")
        os.symlink("/etc/passwd", os.path.join(target, "tls", "ca.pem"))
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 1)
        self.assertIn("tls/ca.pem is not a plain file", err)
        # A truncated archive: everything restore wrote goes, the new server's tls/ stays as it was.
        with open(self.archive, "rb") as f:
            blob = f.read()
        bad = os.path.join(self.work, "cut.gpg")
        with open(bad, "wb") as f:
            f.write(blob[: len(blob) * 3 // 4])
        target, mine = self.new_server_dir("tls-then-failure")
        code, out, err = yield self.restore(bad, target)
        self.assertEqual(code, 1, out)
        self.assertEqual(os.listdir(target), ["tls"])
        for rel, data in mine.items():
            with open(os.path.join(target, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)

    @inlineCallbacks
    def test_kept_tls_files_must_be_the_owners_own_and_the_key_is_made_private(self):
        # Found in review: restore kept whatever plain files were in tls/, a hard link to a file
        # elsewhere or one another user placed there, and left the key's mode as it was.
        target, mine = self.new_server_dir("tls-hard-link")
        os.link(os.path.join(target, "tls", "server.key"), os.path.join(self.work, "elsewhere.key"))
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 1, out)
        self.assertIn("tls/server.key has 2 names (hard links)", err)
        self.assertEqual(os.listdir(target), ["tls"])
        # The new server's own pair with its key readable by all: kept, the key made 0600.
        target, mine = self.new_server_dir("tls-loose-key")
        key = os.path.join(target, "tls", "server.key")
        os.chmod(key, 0o644)
        os.chmod(os.path.join(target, "tls", "server.pem"), 0o644)
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 0, err)
        self.assertEqual(stat.S_IMODE(os.stat(key).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(target, "tls", "server.pem")).st_mode), 0o644)
        for rel, data in mine.items():
            with open(os.path.join(target, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)
        # A file of another owner than the data dir's.
        target, mine = self.new_server_dir("tls-other-owner")
        try:
            os.chown(os.path.join(target, "tls", "server.pem"), 65534, 65534)
        except PermissionError:
            raise unittest.SkipTest("OWNER CHECK NOT RUN: giving a file to another user needs root (CI runs as root)")
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 1, out)
        self.assertIn(f"tls/server.pem belongs to uid 65534, not to the data dir's owner (uid {os.getuid()})", err)
        self.assertEqual(os.listdir(target), ["tls"])

    @inlineCallbacks
    def test_a_tampered_or_truncated_archive_is_refused_and_nothing_is_left(self):
        with open(self.archive, "rb") as f:
            blob = f.read()
        cases = {"flipped": blob[:len(blob) // 2] + bytes([blob[len(blob) // 2] ^ 1]) + blob[len(blob) // 2 + 1:],
                 "truncated": blob[: len(blob) * 3 // 4]}
        for label, data in cases.items():
            bad = os.path.join(self.work, label)
            with open(bad, "wb") as f:
                f.write(data)
            target = os.path.join(self.work, "restore-" + label)
            code, out, err = yield self.restore(bad, target)
            self.assertEqual(code, 1, label)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertFalse(os.path.exists(target), label)

    @inlineCallbacks
    def test_an_unencrypted_archive_is_refused(self):
        # gpg --decrypt passes on literal data that was never encrypted: anyone could then
        # swap in an archive with their own peppers or CA (found by an adversarial review).
        plain = os.path.join(self.work, "plain.tar")
        with open(plain, "wb") as f:
            f.write(self.admin.decrypt(self.archive))
        stored = os.path.join(self.work, "stored.gpg")
        subprocess.run(["gpg", "--homedir", self.admin.home, "--batch", "--quiet", "--store", "-o", stored, plain],
                       check=True)
        target = os.path.join(self.work, "restore-stored")
        code, out, err = yield self.restore(stored, target)
        self.assertEqual(code, 1)
        self.assertIn("is not encrypted", err)
        self.assertFalse(os.path.exists(target))

    @inlineCallbacks
    def test_without_the_backup_key_gpg_says_why(self):
        other_home = os.path.join(self.work, "empty-home")
        os.makedirs(other_home, mode=0o700)
        target = os.path.join(self.work, "restore-nokey")
        code, out, err = yield deferToThread(run_cli, "restore", self.archive, "--data-dir", target,
                                             "--gnupg-home", other_home, "--signer", self.admin.signer)
        self.assertEqual(code, 1)
        self.assertIn("gpg could not decrypt", err)
        self.assertNotIn("empty file", err)
        self.assertFalse(os.path.exists(target))

    @inlineCallbacks
    def test_a_backup_key_must_be_a_public_encryption_key_and_the_out_file_new(self):
        secret = os.path.join(self.work, "secret.asc")
        with open(secret, "wb") as f:
            f.write(subprocess.run(["gpg", "--homedir", self.admin.home, "--batch", "--armor", "--export-secret-keys"],
                                   check=True, capture_output=True).stdout)
        signing = ["--sign-key", self.admin.signing_fingerprint, "--gnupg-home", self.admin.signing_home]
        code, out, err = yield deferToThread(run_cli, "backup", "--out", os.path.join(self.work, "x"), "--to-key",
                                             secret, *signing, "--data-dir", self.data_dir)
        self.assertEqual(code, 1)
        self.assertIn("holds a secret key", err)
        # The two keys mixed up: a sign-only key is not the backup key, and says so.
        code, out, err = yield deferToThread(run_cli, "backup", "--out", os.path.join(self.work, "x"), "--to-key",
                                             self.admin.signer, *signing, "--data-dir", self.data_dir)
        self.assertEqual(code, 1)
        self.assertIn("signs only: it is not the backup key", err)
        code, out, err = yield deferToThread(run_cli, "backup", "--out", self.archive, *self.admin.backup_args(),
                                             "--data-dir", self.data_dir)
        self.assertEqual(code, 1)
        self.assertIn("already exists", err)
        self.assertFalse(os.path.exists(os.path.join(self.work, "x")))


    def _forge(self, name: str, *sign_with: str) -> str:
        """What someone who can write where backups are kept can make: an archive encrypted to the
        backup key (here, today's own content), unsigned or signed by a key of their own."""
        plain = os.path.join(self.work, name + ".tar")
        with open(plain, "wb") as f:
            f.write(self.admin.decrypt(self.archive))
        forged = os.path.join(self.work, name + ".gpg")
        subprocess.run(["gpg", "--batch", "--quiet", "--trust-model", "always", "--recipient-file", self.admin.public,
                        *sign_with, "--encrypt", "-o", forged, plain], check=True, capture_output=True,
                       env=dict(os.environ, GNUPGHOME=self.forger_home))
        return forged

    @inlineCallbacks
    def test_an_unsigned_archive_or_one_signed_by_another_key_is_refused(self):
        self.forger_home = _gnupg_home(self, "dd-frg-")
        _gen_key(self.forger_home, "Not the newsroom", "ed25519", "sign")
        forger = subprocess.run(["gpg", "--homedir", self.forger_home, "--with-colons", "--list-keys"], check=True,
                                capture_output=True, text=True).stdout.split("fpr:::::::::")[1].split(":")[0]
        for label, forged, expected in [
            ("unsigned", self._forge("unsigned"), f"is not signed: restore accepts only archives signed by the "
                                                  f"backup-signing key {self.admin.signing_fingerprint}"),
            ("other key", self._forge("other", "--sign", "--local-user", forger),
             f"is signed by key {forger}, not by the backup-signing key {self.admin.signing_fingerprint}"),
        ]:
            target = os.path.join(self.work, "restore-" + label.replace(" ", "-"))
            code, out, err = yield self.restore(forged, target)
            self.assertEqual(code, 1, label)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertIn(expected, err, label)
            self.assertFalse(os.path.exists(target), label)
        # The newsroom's own archive restores.
        target = os.path.join(self.work, "restore-signed")
        code, out, err = yield self.restore(self.archive, target)
        self.assertEqual(code, 0, err)

    @inlineCallbacks
    def test_the_signing_key_must_be_a_secret_key_here_and_not_the_backup_key(self):
        out = os.path.join(self.work, "x")
        code, _, err = yield deferToThread(run_cli, "backup", "--out", out, "--to-key", self.admin.public,
                                           "--sign-key", self.admin.fingerprint, "--gnupg-home", self.admin.home,
                                           "--data-dir", self.data_dir)
        self.assertEqual(code, 1)
        self.assertIn("--sign-key is the backup key itself", err)
        code, _, err = yield deferToThread(run_cli, "backup", "--out", out, "--to-key", self.admin.public,
                                           "--sign-key", "0" * 40, "--gnupg-home", self.admin.signing_home,
                                           "--data-dir", self.data_dir)
        self.assertEqual(code, 1)
        self.assertIn("no secret key", err)
        self.assertFalse(os.path.exists(out))


_NUMBER_LINE = re.compile(r"^backup #(\d+) of instance ([0-9a-f]{8}), (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$")


class BackupWorkspace(unittest.TestCase):
    """A data dir, the backup keys, and ``backup``/``restore`` as the admin runs them."""

    timeout = 300

    def setUp(self):
        self.instances: dict[str, str] = {}
        return _workspace(self, "dd-bkn-")

    def cli(self, *argv: str):
        return deferToThread(run_cli, *argv, "--data-dir", self.data_dir)

    @inlineCallbacks
    def backup(self, name: str, data_dir: str | None = None) -> tuple[str, int, str]:
        """-> (archive, number, time), from the line ``backup`` prints first (its instance is in
        ``self.instances[archive]``)."""
        archive = os.path.join(self.work, name)
        code, out, err = yield deferToThread(run_cli, "backup", "--out", archive, *self.admin.backup_args(),
                                             "--data-dir", data_dir or self.data_dir)
        self.assertEqual(code, 0, err)
        match = _NUMBER_LINE.match(out.splitlines()[0])
        self.assertIsNotNone(match, out)
        self.instances[archive] = match.group(2)
        self.assertIn(f"--not-older-than {match.group(2)}:{match.group(1)}\n", out)
        return archive, int(match.group(1)), match.group(3)

    def restore(self, archive: str, target: str, *extra: str):
        return deferToThread(run_cli, "restore", archive, "--data-dir", target, *self.admin.restore_args(), *extra)


class BackupNumberTests(BackupWorkspace):
    """Issue 26 item 4: each backup carries its time and a number above every earlier one, and
    restore refuses to go back to an older one (by --not-older-than, or by what it remembers)."""

    @inlineCallbacks
    def test_the_signed_manifest_carries_a_growing_number_and_the_time_and_nothing_else_dates(self):
        first, one, _ = yield self.backup("first.gpg")
        before = time.time()
        second, two, created = yield self.backup("second.gpg")
        self.assertEqual((one, two), (1, 2))
        stamp = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
        self.assertLessEqual(abs(stamp - before), 5, created)  # UTC, to the second
        numbers = os.path.join(self.data_dir, "backup-sequence")
        self.assertEqual(stat.S_IMODE(os.stat(numbers).st_mode), 0o600)
        with open(numbers) as f:
            self.assertEqual(json.load(f)["sequence"], 2)
        blob = self.admin.decrypt(second)
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r|") as tar:
            members = []
            for member in tar:
                members.append((member.name, member.mtime))
                if member.name == "MANIFEST.json":
                    manifest = json.loads(tar.extractfile(member).read())
        # No member carries a time; the number file is not a member (the manifest carries it).
        self.assertEqual({mtime for _, mtime in members}, {0})
        self.assertNotIn("backup-sequence", [name for name, _ in members])
        self.assertEqual((manifest["format"], manifest["sequence"], manifest["created"]),
                         ("deaddrop-backup/3", 2, created))
        self.assertEqual(set(manifest), {"format", "deaddrop_version", "schema_version", "created", "instance",
                                         "sequence", "ancestry", "files", "folders", "start_options", "data_dir"})
        self.assertEqual((manifest["instance"][:8], manifest["ancestry"]), (self.instances[second], []))
        self.assertTrue(all(set(entry) == {"size", "mode", "sha256"} for entry in manifest["files"].values()))
        # Only "created" holds a date or a time of day.
        dated = re.compile(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|\d{8}T\d{6}")
        rest = json.dumps({k: v for k, v in manifest.items() if k != "created"})
        self.assertIsNone(dated.search(rest), rest)
        # restore says which backup it is before anything else, and the copy numbers on from it.
        target = os.path.join(self.work, "restored")
        code, out, err = yield self.restore(second, target)
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith(f"backup #2 of instance {self.instances[second]}, {created}: signed by the "
                                       "backup-signing key"), out)
        with open(os.path.join(target, "backup-sequence")) as f:
            copy = json.load(f)
        self.assertIn(f"its next backup will be #3 of instance {copy['instance'][:8]}, its own", out)
        # The copy is a line of its own, descending from backup #2.
        self.assertEqual(copy, {"instance": copy["instance"], "sequence": 2,
                                "ancestry": [{"instance": manifest["instance"], "sequence": 2}]})
        self.assertNotEqual(copy["instance"], manifest["instance"])
        third, three, _ = yield self.backup("third.gpg", data_dir=target)
        self.assertEqual((three, self.instances[third]), (3, copy["instance"][:8]))
        code, out, err = yield deferToThread(run_cli, "--json", "restore", second, "--data-dir",
                                             os.path.join(self.work, "restored-json"), *self.admin.restore_args())
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual((report["sequence"], report["created"], report["next_sequence"], report["ancestry"]),
                         (2, created, 3, []))
        self.assertEqual(report["instance"], manifest["instance"])
        self.assertNotIn(report["new_instance"], (manifest["instance"], copy["instance"]))

    @inlineCallbacks
    def test_restoring_an_older_backup_is_refused(self):
        # The review's scenario: a journalist with a certificate, backup A; the journalist
        # deleted and the certificate revoked, backup B; then A swapped in for B.
        for argv in (("ca", "init"), ("journalist", "add", "mallory"),
                     ("cert", "issue", "mallory", "--out", os.path.join(self.work, "mallory.p12"))):
            code, out, err = yield self.cli(*argv)
            self.assertEqual(code, 0, err)
        a, a_number, a_created = yield self.backup("a.gpg")
        for argv in (("journalist", "delete", "mallory"), ("cert", "revoke", "mallory"), ("crl",)):
            code, out, err = yield self.cli(*argv)
            self.assertEqual(code, 0, err)
        b, b_number, b_created = yield self.backup("b.gpg")
        self.assertEqual((a_number, b_number), (1, 2))

        # By the number the admin kept: refused, saying what it found, and nothing written.
        target = os.path.join(self.work, "from-a")
        code, out, err = yield self.restore(a, target, "--not-older-than", str(b_number))
        self.assertEqual(code, 1, out)
        instance = self.instances[a]
        self.assertEqual(err, f"deaddrop-admin: error: {a} is backup #1 of instance {instance}, {a_created}, older than "
                              "--not-older-than 2: an older backup brings back deleted accounts and sources, and an "
                              "older CRL; refused. Restore backup #2 or a newer one\n")
        self.assertTrue(out.startswith(f"backup #1 of instance {instance}, {a_created}: "), out)
        # The same, given as 'backup' printed it.
        code, out, err = yield self.restore(a, target, "--not-older-than", f"{instance}:{b_number}")
        self.assertEqual(code, 1, out)
        self.assertIn(f"older than --not-older-than {instance}:2: an older backup", err)
        self.assertFalse(os.path.exists(target))
        self.assertFalse(os.path.exists(target))

        # B restores, and this backup key's home remembers it...
        code, out, err = yield self.restore(b, os.path.join(self.work, "from-b"), "--not-older-than", str(b_number))
        self.assertEqual(code, 0, err)
        state = os.path.join(self.admin.home, "deaddrop-newest-backup")
        self.assertIn(f"{state} remembers backup #2 of instance {instance}, {b_created} as the newest of its instance",
                      out)
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--json", "--data-dir",
                                             os.path.join(self.work, "from-b"))
        self.assertNotIn("mallory", out)
        # ... so a plain restore of A is refused, and says how to go back deliberately.
        code, out, err = yield self.restore(a, target)
        self.assertEqual(code, 1, out)
        self.assertIn(f"{a} is backup #1 of instance {instance}, {a_created}, older than backup #2 of instance "
                      f"{instance}, {b_created} which a restore with this backup key already saw (remembered in "
                      f"{state})", err)
        self.assertIn("To go back to it deliberately, add --allow-older", err)
        self.assertFalse(os.path.exists(target))
        # Deliberately: A comes back with mallory, and its next backup is numbered above B.
        code, out, err = yield self.restore(a, target, "--allow-older")
        self.assertEqual(code, 0, err)
        self.assertIn("its next backup will be #3", out)
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--data-dir", target)
        self.assertIn("mallory", out)
        with open(state) as f:
            remembered = json.load(f)
        self.assertEqual({i[:8]: entry.get("sequence") for i, entry in remembered.items() if "sequence" in entry},
                         {instance: 2})

    @inlineCallbacks
    def test_an_unnumbered_backup_is_refused_unless_asked_for(self):
        # A deaddrop-backup/2 archive, as the previous release made them: signed, not numbered.
        archive, _, _ = yield self.backup("new.gpg")
        plain = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(self.admin.decrypt(archive)), mode="r|") as tar, \
                tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as out:
            for member in tar:
                data = tar.extractfile(member).read()
                if member.name == "MANIFEST.json":
                    manifest = json.loads(data)
                    for key in ("instance", "sequence", "ancestry", "data_dir"):
                        del manifest[key]
                    manifest.update(format="deaddrop-backup/2", created=manifest["created"][:10])
                    data = json.dumps(manifest).encode()
                    member.size = len(data)
                out.addfile(member, io.BytesIO(data))
        old = os.path.join(self.work, "old.gpg")
        subprocess.run(["gpg", "--homedir", self.admin.signing_home, "--batch", "--quiet", "--trust-model", "always",
                        "--compress-algo", "none", "--local-user", self.admin.signing_fingerprint, "--recipient-file",
                        self.admin.public, "--output", old, "--sign", "--encrypt"], input=plain.getvalue(), check=True)
        target = os.path.join(self.work, "from-old")
        code, out, err = yield self.restore(old, target)
        self.assertEqual(code, 1, out)
        self.assertIn(f"{old} is a backup of {manifest['created']} made before backups were numbered", err)
        self.assertIn("If you know it is the newest, add --allow-unnumbered", err)
        self.assertFalse(os.path.exists(target))
        code, out, err = yield self.restore(old, target, "--allow-unnumbered")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith(f"unnumbered backup of {manifest['created']}: "), out)
        self.assertFalse(os.path.exists(os.path.join(target, "backup-sequence")))  # its first backup starts a line

    @inlineCallbacks
    def test_an_archive_swapped_after_its_signature_was_checked_is_refused(self):
        from deaddrop.admin import restore

        small, _, _ = yield self.backup("small.gpg")
        with open(os.path.join(self.data_dir, "store", "extra-file"), "wb") as f:
            f.write(os.urandom(200_000))
        other, _, _ = yield self.backup("other.gpg")
        with open(other, "rb") as f:
            other_bytes = f.read()
        parse = restore._parse_manifest

        def swap_then_parse(*args):
            # Between the passes, whoever can write there rewrites the file in place (same inode).
            with open(small, "r+b") as f:
                f.write(other_bytes)
            return parse(*args)

        self.patch(restore, "_parse_manifest", swap_then_parse)
        target = os.path.join(self.work, "swapped")
        code, out, err = yield self.restore(small, target)
        self.assertEqual(code, 1, out)
        self.assertIn("changed after its signature was checked", err)
        self.assertFalse(os.path.exists(target))


class InflatedArchiveTests(unittest.TestCase):
    """Issue 26 item 4: restore writes nothing before the signature is checked. An unsigned
    archive of compressed zeros, encrypted to the backup key (398 KB in the review, 401 MB once
    decompressed), writes less than 64 MB before it is refused: measured as the bytes the restore
    process passed to write()."""

    timeout = 240

    def test_an_unsigned_archive_of_compressed_zeros_writes_almost_nothing(self):
        import sys

        admin = AdminKey(self)
        work = short_tempdir("dd-bkz-")
        self.addCleanup(shutil.rmtree, work, True)
        bomb = os.path.join(work, "zeros.gpg")
        gpg = subprocess.Popen(["gpg", "--batch", "--quiet", "--trust-model", "always", "--compress-algo", "zlib",
                                "-z", "9", "--recipient-file", admin.public, "--output", bomb, "--encrypt"],
                               stdin=subprocess.PIPE, env=dict(os.environ, GNUPGHOME=admin.home))
        size = 400 * 1024 * 1024
        with tarfile.open(fileobj=gpg.stdin, mode="w|") as tar:
            info = tarfile.TarInfo("store/zeros")
            info.size = size

            class Zeros:
                left = size

                def read(self, n: int = -1) -> bytes:
                    n = min(self.left, 1024 * 1024 if n < 0 else n)
                    self.left -= n
                    return bytes(n)

            tar.addfile(info, Zeros())
        gpg.stdin.close()
        self.assertEqual(gpg.wait(), 0)
        archive_size = os.path.getsize(bomb)
        self.assertLess(archive_size, 1024 * 1024)
        target = os.path.join(work, "target")
        # deaddrop-admin restore in a process of its own: the bytes it passed to write() (every
        # file it wrote and its output), and whether it refused.
        # The thread's own counter: /proc/self/io would add gpg's writes into the pipe it reads.
        measure = ("import sys, threading\nfrom deaddrop.admin.cli import main\n"
                   "def written():\n    io = open(f'/proc/self/task/{threading.get_native_id()}/io').read()\n"
                   "    return int(dict(l.split(': ') for l in io.splitlines())['wchar'])\n"
                   "before = written()\ncode = main(sys.argv[1:])\nprint('MEASURED', code, written() - before)\n")
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", measure, "restore", bomb, "--data-dir", target,
                               *admin.restore_args()], capture_output=True, text=True)
        seconds = time.monotonic() - started
        code, written = proc.stdout.split("MEASURED")[-1].split()
        self.assertEqual(code, "1", proc.stdout + proc.stderr)
        self.assertIn("refused", proc.stderr)
        self.assertLess(int(written), 64 * 1024 * 1024)
        self.assertFalse(os.path.exists(target))
        print(f"\ncompressed zeros: {archive_size} bytes of archive ({size // 2**20} MiB decompressed) wrote "
              f"{int(written)} bytes before being refused in {seconds:.1f} s: {proc.stderr.strip()}")


class BackupMemoryTests(unittest.TestCase):
    """The archive streams: backing up 160 MB does not take 160 MB of memory (nor does restoring)."""

    timeout = 240

    @inlineCallbacks
    def test_memory_stays_far_below_the_store_size(self):
        import sys

        from tests._support import initialised_data_dir

        data_dir = yield initialised_data_dir(self)
        folder = os.path.join(data_dir, "store", "A" * 32)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        for n in range(1, 3):  # 2 x 80 MB of incompressible bytes
            with open(os.path.join(folder, f"{n}-brave_otter-doc.gz.gpg"), "wb") as f:
                for _ in range(80):
                    f.write(os.urandom(1024 * 1024))
        admin = AdminKey(self)
        work = short_tempdir("dd-bkm-")
        self.addCleanup(shutil.rmtree, work, True)
        script = os.path.join(os.path.dirname(sys.executable), "deaddrop-admin")
        # Peak RSS of the command and of gpg (the children this wrapper waits for), in KiB.
        measure = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
                   "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")

        def run(*argv: str) -> int:
            proc = subprocess.run([sys.executable, "-c", measure, script, *argv], capture_output=True, text=True)
            code, peak = proc.stdout.split()[-2:]
            self.assertEqual(code, "0", proc.stderr)
            return int(peak)

        archive = os.path.join(work, "big.gpg")
        backup_peak = yield deferToThread(run, "backup", "--data-dir", data_dir, "--out", archive,
                                          *admin.backup_args())
        restore_peak = yield deferToThread(run, "restore", archive, "--data-dir", os.path.join(work, "restored"),
                                           *admin.restore_args())
        self.assertGreater(os.path.getsize(archive), 160 * 1024 * 1024)
        self.assertLess(backup_peak, 120 * 1024, f"backup peak RSS {backup_peak} KiB")
        self.assertLess(restore_peak, 120 * 1024, f"restore peak RSS {restore_peak} KiB")


# Run as ``python -c AUDITED REPORT ARGV...``: deaddrop-admin with an audit hook that records
# every file it opens for writing, every database it opens and every program it starts.
AUDITED = r"""
import json, os, sys
report, argv = sys.argv[1], sys.argv[2:]
seen = {"writes": [], "databases": [], "programs": []}
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def hook(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(path, (str, bytes)) and ((mode and any(c in str(mode) for c in "wax+")) or (flags or 0) & WRITE):
            seen["writes"].append(os.fsdecode(path))
    elif event == "sqlite3.connect":
        seen["databases"].append(str(args[0]))
    elif event == "subprocess.Popen":
        seen["programs"].append([os.fsdecode(a) for a in args[1]])
sys.addaudithook(hook)
from deaddrop.admin.cli import main
code = main(argv)
with open(report, "w") as f:
    json.dump(dict(seen, code=code), f)
"""


class BackupPlaintextTests(unittest.TestCase):
    """No unencrypted temporary file: the backup's plaintext (the database snapshot, the peppers,
    the keyring...) only ever goes to gpg's stdin; the one file written is gpg's ciphertext."""

    timeout = 120

    @inlineCallbacks
    def test_a_backup_writes_no_plaintext_to_any_file(self):
        import sys

        from tests._support import initialised_data_dir

        data_dir = yield initialised_data_dir(self)
        admin = AdminKey(self)
        work = short_tempdir("dd-bkp-")
        self.addCleanup(shutil.rmtree, work, True)
        archive, report = os.path.join(work, "b.gpg"), os.path.join(work, "report.json")
        scratch = os.path.join(work, "tmp")  # TMPDIR: anything tempfile makes lands here
        os.makedirs(scratch)
        env = dict(os.environ, TMPDIR=scratch)
        proc = yield deferToThread(subprocess.run, [
            sys.executable, "-c", AUDITED, report, "backup", "--data-dir", data_dir, "--out", archive,
            *admin.backup_args()], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(report) as f:
            seen = json.load(f)
        self.assertEqual(seen["code"], 0)

        # Files the command itself wrote: the security log's line, the report, /dev/null (gpg's
        # stdout), and one temporary file for gpg's error messages (unnamed where the file
        # system allows, else unlinked at once): nothing that could hold the backup.
        log = os.path.join(data_dir, "logs", "security.jsonl")
        # The backup's number, in the data dir (written atomically: a temporary file, renamed).
        numbers = os.path.join(data_dir, "backup-sequence")
        number_files = {path for path in seen["writes"]
                        if os.path.dirname(path) == data_dir and path.endswith("backup-sequence")}
        self.assertIn(numbers, {path.replace(os.path.basename(path), "backup-sequence") for path in number_files})
        written = sorted(set(seen["writes"]) - {log, report, report + ".tmp", os.devnull, scratch} - number_files)
        self.assertLessEqual(len(written), 1, written)
        self.assertTrue(all(os.path.dirname(path) == scratch for path in written), written)
        # The database: read in place and copied into memory, never into a file.
        opened = {name.removeprefix("file:").split("?")[0] for name in seen["databases"]}
        self.assertEqual(opened, {":memory:", os.path.join(data_dir, "db.sqlite")})
        # Programs: gpg, and the only one that writes a file encrypts to the admin's key.
        writers = [argv for argv in seen["programs"] if "--output" in argv]
        self.assertEqual(len(writers), 1, seen["programs"])
        [gpg] = writers
        self.assertIn("--encrypt", gpg)
        self.assertEqual(gpg[gpg.index("--output") + 1], archive + ".part")
        self.assertEqual(gpg[gpg.index("--recipient-file") + 1], admin.public)
        self.assertTrue(all(os.path.basename(argv[0]).startswith(("gpg", "gpgconf")) for argv in seen["programs"]),
                        seen["programs"])
        # Left behind: the archive (ciphertext), the report; TMPDIR empty.
        self.assertEqual(sorted(os.listdir(work)), ["b.gpg", "report.json", "tmp"])
        self.assertEqual(os.listdir(scratch), [])
        with open(archive, "rb") as f:
            blob = f.read()
        with open(os.path.join(data_dir, "pepper-filesystem-id"), "rb") as f:
            self.assertNotIn(f.read(), blob)
        self.assertNotIn(b"CREATE TABLE", blob)
        self.assertIn(b"CREATE TABLE", admin.decrypt(archive))  # the snapshot is in it, encrypted


class RestoredStartCommandTests(unittest.TestCase):
    """The command restore prints starts the restored instance as the original ran (real twistd),
    with the restored instance's own CA and CRL, the digest's options, and nothing for development
    only (issue 26 item 4, issue 27 items 6 and 12)."""

    timeout = 180

    def test_the_printed_command_starts_the_restored_instance(self):
        from tests._process import ConnectionBroke, ServerProcess, exchange, free_port

        work = short_tempdir("dd-bks-")
        self.addCleanup(shutil.rmtree, work, True)
        data = os.path.join(work, "data")
        os.makedirs(data, mode=0o700)
        code, out, err = run_cli("ca", "init", "--data-dir", data)  # the demo layout: the CA in DATA/ca
        self.assertEqual(code, 0, err)
        journalist_port = free_port()
        digest = ["--smtp-server", "127.0.0.1:2525", "--smtp-from", "deaddrop@example.org",
                  "--notify-interval-minutes", "60"]
        server = ServerProcess(data, workdir=work, extra_args=[
            "--journalist-listen", f"tcp:{journalist_port}:interface=127.0.0.1", "--source-session-minutes", "60",
            "--journalist-ca", os.path.join(data, "ca", "ca.pem"), "--journalist-crl", os.path.join(data, "ca", "crl.pem"),
            *digest, "--demo"])
        self.addCleanup(server.cleanup)
        server.start()
        admin = AdminKey(self)
        archive = os.path.join(work, "b.gpg")
        code, out, err = run_cli("backup", "--data-dir", data, "--out", archive, *admin.backup_args())
        self.assertEqual(code, 0, err)
        backed_up = _NUMBER_LINE.match(out.splitlines()[0])
        instance, created = backed_up.group(2), backed_up.group(3)
        server.stop()

        target = os.path.join(work, "restored")
        code, out, err = run_cli("--json", "restore", archive, "--data-dir", target, *admin.restore_args())
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        command = report["start_command"]
        self.assertEqual(command[1:6], ["-n", "--pidfile=", "deaddrop", "--data-dir", target])
        self.assertNotIn("--submission-key", command)  # the data dir holds the instance's key
        for option, value in (("--source-listen", f"tcp:{server.port}:interface=127.0.0.1"),
                              ("--journalist-listen", f"tcp:{journalist_port}:interface=127.0.0.1"),
                              ("--source-session-minutes", "60"),
                              # The restored instance's own CA and CRL, not the old data dir's.
                              ("--journalist-ca", os.path.join(target, "ca", "ca.pem")),
                              ("--journalist-crl", os.path.join(target, "ca", "crl.pem")),
                              *zip(digest[::2], digest[1::2])):
            self.assertEqual(command[command.index(option) + 1], value, option)
        self.assertNotIn(data + os.sep, " ".join(command))
        # Development only: left out, and said.
        self.assertNotIn("--demo", command)
        self.assertNotIn("--tor", command)
        self.assertEqual(report["dropped_options"], ["--tor", "none", "--demo"])
        again = os.path.join(work, "again")
        code, text, err = run_cli("restore", archive, "--data-dir", again, *admin.restore_args())
        self.assertEqual(code, 0, err)
        self.assertIn(f"start it with: {shlex.join(command).replace(target, again)}\n", text)
        self.assertIn(f"paths in the old data dir {data} now name this one; left out, for development only: "
                      "--tor none --demo;", text)
        self.assertIn(f"accounts, sources and the CRL are as they were at backup #1 of instance {instance}, {created}: "
                      "delete again any "
                      "account deleted since, and revoke again any certificate revoked since: the CA in "
                      f"{os.path.join(again, 'ca')} is the backup's too (deaddrop-admin cert revoke NAME --data-dir "
                      f"{again}, then deaddrop-admin crl --data-dir {again}, which rewrites "
                      f"{os.path.join(again, 'ca', 'crl.pem')})", text)

        # This machine has no Tor network: the test adds --tor none, as a developer would.
        with open(os.path.join(work, "restored.log"), "wb") as log:
            proc = subprocess.Popen([*command, "--tor", "none"], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=work, start_new_session=True)
        self.addCleanup(kill_gpg_agent, os.path.join(target, "gnupg"))
        self.addCleanup(_stop, proc)
        deadline = time.monotonic() + 60
        while True:
            self.assertIsNone(proc.poll(), open(os.path.join(work, "restored.log")).read())
            try:
                response = exchange(server.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5)
                break
            except (OSError, ConnectionBroke):
                self.assertLess(time.monotonic(), deadline, "the restored instance did not start")
                time.sleep(0.2)
        self.assertEqual(response.status, 200)


def _stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
