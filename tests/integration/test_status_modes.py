"""``deaddrop-admin status`` checks every secret and private path at its mode and owner.

A populated instance is made once (a running server with its CA and TLS key, a source whose
submission made a key pair and a store folder, a journalist, a schema-upgrade copy, onion keys
and a client); each test copies it, makes one drift, and expects ``[FAIL]`` naming the path and
exit status 1. The fresh copy passes.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import stat

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.transport import ca
from deaddrop.admin._file_checks import private_path_checks
from deaddrop.store import db
from deaddrop.tor import keys
from tests._support import Browser, add_journalist, kill_gpg_agent, short_tempdir, start_journalist_server
from tests.integration.test_admin_cli import run_cli

_template: str | None = None

# Every check a populated instance must have (and pass).
EXPECTED_CHECKS = {
    "data_dir", "store", "tmp", "pepper", "database", "keyring", "secret_keys", "logs", "security_log", "tls",
    "tls_key", "ca", "ca_key", "ca_state", "backups", "store_entries", "secret_key_files", "backup_files",
    "tor_dir", "source_key", "client:alice",
}


def _no_sockets(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if stat.S_ISSOCK(os.lstat(os.path.join(directory, n)).st_mode)]


@inlineCallbacks
def populated_template(testcase):
    global _template
    if _template is not None:
        return _template
    server = yield start_journalist_server(testcase)
    yield add_journalist(server, "alice")
    source = Browser(server.source_url)
    yield source.create_source()
    response, _ = yield source.submit("hello", [("a.txt", b"x" * 1000)])
    yield source.close()
    assert response.code == 200
    yield server.stop()
    data = server.data_dir
    # What the server makes on other occasions: a schema-upgrade copy, onion keys and a client.
    conn = db.connect(os.path.join(data, "db.sqlite"))
    os.makedirs(os.path.join(data, "backups"), mode=0o700)
    db.backup_to(conn, os.path.join(data, "backups", "db-schema1-20240101T000000Z.sqlite"))
    conn.close()
    keys.load_or_create_onion_key(keys.service_dir(data, keys.SOURCE))
    keys.add_client(data, "alice")
    kill_gpg_agent(os.path.join(data, "gnupg"))
    _template = short_tempdir("dd-modes-")
    shutil.rmtree(_template)
    shutil.copytree(data, _template, symlinks=True, ignore=_no_sockets)
    atexit.register(shutil.rmtree, _template, True)
    return _template


class StatusModeTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        template = yield populated_template(self)
        self.data = os.path.join(short_tempdir("dd-drift-"), "data")
        self.addCleanup(shutil.rmtree, os.path.dirname(self.data), True)
        shutil.copytree(template, self.data, symlinks=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.data, *parts)

    @inlineCallbacks
    def status(self):
        code, out, err = yield deferToThread(run_cli, "--json", "status", "--data-dir", self.data)
        return code, json.loads(out)

    @inlineCallbacks
    def assert_drift_fails(self, name: str, path: str, mode: int):
        os.chmod(path, mode)
        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", self.data)
        self.assertEqual(code, 1, out)
        failed = [line.strip() for line in out.splitlines() if line.strip().startswith("[FAIL]")]
        # Only this check fails (SQLite gives the WAL files it makes the database's mode: they
        # fail with it), and names the path.
        self.assertEqual([f for f in failed if not f.startswith(f"[FAIL] {name}: ")], [], out)
        self.assertIn(f"[FAIL] {name}: {path} has mode {mode:04o}; expected", out)

    @inlineCallbacks
    def test_a_fresh_instance_passes(self):
        code, data = yield self.status()
        self.assertEqual([c for c in data["checks"] if not c["ok"]], [])
        self.assertEqual(code, 0)
        self.assertEqual(EXPECTED_CHECKS - {c["name"] for c in data["checks"]}, set())
        [entries] = [c for c in data["checks"] if c["name"] == "store_entries"]
        self.assertRegex(entries["detail"], r"^[1-9]\d* entries in ")  # the source's folder and files

    def test_data_dir(self):
        return self.assert_drift_fails("data_dir", self.data, 0o755)

    def test_store(self):
        return self.assert_drift_fails("store", self.path("store"), 0o755)

    def test_a_source_folder_in_the_store(self):
        [folder] = os.listdir(self.path("store"))
        return self.assert_drift_fails("store_entries", self.path("store", folder), 0o750)

    def test_a_stored_file(self):
        [folder] = os.listdir(self.path("store"))
        name = sorted(os.listdir(self.path("store", folder)))[0]
        return self.assert_drift_fails("store_entries", self.path("store", folder, name), 0o640)

    def test_tmp(self):
        return self.assert_drift_fails("tmp", self.path("tmp"), 0o755)

    def test_pepper_filesystem_id(self):
        return self.assert_drift_fails("pepper", self.path("pepper-filesystem-id"), 0o644)

    def test_pepper_key_passphrase(self):
        return self.assert_drift_fails("pepper", self.path("pepper-key-passphrase"), 0o604)

    def test_database(self):
        return self.assert_drift_fails("database", self.path("db.sqlite"), 0o644)

    def test_keyring(self):
        return self.assert_drift_fails("keyring", self.path("gnupg"), 0o755)

    def test_secret_keys_folder(self):
        return self.assert_drift_fails("secret_keys", self.path("gnupg", "private-keys-v1.d"), 0o755)

    def test_a_secret_key_file(self):
        folder = self.path("gnupg", "private-keys-v1.d")
        name = sorted(os.listdir(folder))[0]
        return self.assert_drift_fails("secret_key_files", os.path.join(folder, name), 0o644)

    def test_logs(self):
        return self.assert_drift_fails("logs", self.path("logs"), 0o755)

    def test_security_log(self):
        return self.assert_drift_fails("security_log", self.path("logs", "security.jsonl"), 0o644)

    def test_tls_key(self):
        return self.assert_drift_fails("tls_key", self.path("tls", "server.key"), 0o644)

    def test_ca_key(self):
        return self.assert_drift_fails("ca_key", self.path("ca", "ca.key"), 0o640)

    def test_a_schema_upgrade_copy(self):
        [name] = os.listdir(self.path("backups"))
        return self.assert_drift_fails("backup_files", self.path("backups", name), 0o644)

    def test_tor_dir(self):
        return self.assert_drift_fails("tor_dir", self.path("tor"), 0o755)

    def test_onion_key(self):
        path = os.path.join(keys.service_dir(self.data, keys.SOURCE), keys.SECRET_KEY_FILE)
        return self.assert_drift_fails("source_key", path, 0o644)

    @inlineCallbacks
    def test_a_link_in_place_of_a_pepper(self):
        pepper = self.path("pepper-filesystem-id")
        moved = os.path.join(os.path.dirname(self.data), "pepper")
        os.rename(pepper, moved)
        os.symlink(moved, pepper)
        code, data = yield self.status()
        self.assertEqual(code, 1)
        [failed] = [c for c in data["checks"] if not c["ok"]]
        self.assertEqual(failed["detail"], f"{pepper} is a symbolic link; expected a file of mode 0600")

    @inlineCallbacks
    def test_another_owner(self):
        pepper = self.path("pepper-key-passphrase")
        if os.geteuid() == 0:  # as root, make the drift itself (a file left by a command run as root
            os.chown(pepper, 65534, 65534)  # is the common case; here the other way round)
            code, data = yield self.status()
            self.assertEqual(code, 1)
            [failed] = [c for c in data["checks"] if not c["ok"]]
            self.assertEqual(failed["path"], pepper)
            self.assertIn(f"{pepper} is owned by uid 65534, not by uid 0", failed["detail"])
        # Whoever runs this: every path owned by someone other than the server's user fails.
        checks = private_path_checks(self.data, owner=os.geteuid() + 1)
        self.assertTrue(checks)
        self.assertEqual([c["name"] for c in checks if c["ok"]], [])
        self.assertTrue(all("is owned by uid" in c["detail"] for c in checks if c["name"] == "data_dir"))

    @inlineCallbacks
    def test_a_tls_key_outside_the_data_dir_as_the_running_server_reports_it(self):
        base = short_tempdir("dd-tls-")
        self.addCleanup(shutil.rmtree, base, True)
        ca_dir = os.path.join(base, "ca")
        ca.init_ca(ca_dir)
        issued = ca.issue_server_cert(ca_dir, ["127.0.0.1"], os.path.join(base, "server.pem"))
        server = yield start_journalist_server(
            self, journalist_ca=os.path.join(ca_dir, "ca.pem"), journalist_crl=os.path.join(ca_dir, "crl.pem"),
            journalist_tls_cert=issued["cert"], journalist_tls_key=issued["key"])
        yield server.service.status_file._write()
        self.data = server.data_dir
        code, data = yield self.status()
        self.assertEqual(code, 0, [c for c in data["checks"] if not c["ok"]])
        self.assertIn(issued["key"], [c.get("path") for c in data["checks"] if c["name"] == "tls_key"])
        yield self.assert_drift_fails("tls_key", issued["key"], 0o644)
