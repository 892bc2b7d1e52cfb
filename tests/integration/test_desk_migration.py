"""An instance upgraded from the release before desks keeps working unchanged, with one
default desk (issue 29): a data dir that release made (``tests/fixtures/release-schema9.tar.gz``,
see ``tests/fixtures/make_release_datadir.py``) is started by today's server."""
from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
import subprocess
import tarfile

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.store import migrations
from tests._support import (
    Browser, JournalistAccount, JournalistBrowser, issue_client_cert, kill_gpg_agent, short_tempdir,
    start_journalist_server,
)

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "release-schema9.tar.gz")


def _rows(data_dir: str, sql: str, *args):
    conn = sqlite3.connect(os.path.join(data_dir, "db.sqlite"))
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


class UpgradedInstanceTests(unittest.TestCase):
    timeout = 180

    def unpack(self) -> tuple[str, str, dict]:
        """-> (the data dir, the SVS's GnuPG home, fixture.json), in a fresh folder."""
        root = short_tempdir()
        with tarfile.open(FIXTURE) as tar:
            tar.extractall(root, filter="data")
        svs = os.path.join(root, "svs")
        os.chmod(svs, 0o700)
        self.addCleanup(kill_gpg_agent, svs)
        with open(os.path.join(root, "fixture.json"), encoding="utf-8") as f:
            return os.path.join(root, "data"), svs, json.load(f)

    def svs_decrypt(self, svs: str, ciphertext: bytes) -> bytes:
        proc = subprocess.run(["gpg", "--homedir", svs, "--batch", "--quiet", "--decrypt"], input=ciphertext,
                              capture_output=True, check=True)
        return proc.stdout

    @inlineCallbacks
    def test_the_previous_release_s_data_dir_works_unchanged_with_one_default_desk(self):
        data_dir, svs, fixture = self.unpack()
        self.assertEqual(fixture["schema_version"], 9)
        self.assertEqual(_rows(data_dir, "SELECT value FROM meta WHERE key = 'schema_version'"), [("9",)])
        server = yield start_journalist_server(self, data_dir=data_dir,
                                               submission_key=os.path.join(svs, "submission-public.asc"))
        self.assertEqual(_rows(data_dir, "SELECT value FROM meta WHERE key = 'schema_version'"),
                         [(str(migrations.CURRENT),)])

        # One desk, the default, whose key is the instance's; every source, submission, reply and
        # journalist is on it.
        [(desk, fingerprint, default)] = _rows(data_dir, "SELECT id, key_fingerprint, is_default FROM desks")
        self.assertEqual((fingerprint, default), (fixture["svs_fingerprint"], 1))
        for table, column in (("sources", "source"), ("submissions", "submission"), ("replies", "reply"),
                              ("journalists", "journalist")):
            link = "desk_members" if table == "journalists" else f"{column}_desks"
            self.assertEqual(_rows(data_dir, f"SELECT COUNT(*) FROM {table} WHERE id NOT IN"
                                             f" (SELECT {column}_id FROM {link} WHERE desk_id = ?)", desk), [(0,)])
        self.assertEqual(_rows(data_dir, "SELECT COUNT(*) FROM submissions"), [(2,)])

        # The source logs in with its codename, reads the reply, sees no desk anywhere, and sends more.
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        response, html = yield source.login(fixture["codename"])
        self.assertIn(fixture["reply"], html)
        self.assertNotIn("go to", html)
        self.assertNotIn('name="desk"', html)
        response, html = yield source.submit("after the upgrade MARKER-MSG-10")
        self.assertEqual(response.code, 200)
        self.assertNotIn("go to", html)

        # The journalist of before logs in, lists the source and downloads what it sent, old and
        # new: the SVS of before decrypts all of it.
        j = fixture["journalist"]
        account = JournalistAccount(j["username"], j["passphrase"], j["totp_secret"], "", True)
        browser = JournalistBrowser(server, issue_client_cert(server, account.username))
        self.addCleanup(browser.close)
        response, html = yield browser.log_in(account)
        [source_uuid] = set(re.findall(r'href="/sources/([0-9a-f-]{36})"', html))
        response, html = yield browser.get(f"/sources/{source_uuid}")
        links = sorted(set(re.findall(r'href="(/sources/[0-9a-f-]{36}/submissions/[0-9a-f-]{36})/fetch"', html)))
        self.assertEqual(len(links), 3)
        plain = []
        for link in links:
            response, body = yield browser.get_bytes(f"{link}/download")
            self.assertEqual(response.code, 200)
            text = self.svs_decrypt(svs, body)
            plain.append(gzip.decompress(text) if text[:2] == b"\x1f\x8b" else text)  # a document's envelope
        self.assertIn(fixture["message"].encode(), plain)
        self.assertIn(b"after the upgrade MARKER-MSG-10", plain)
        self.assertIn(fixture["file_bytes"].encode(), plain)
