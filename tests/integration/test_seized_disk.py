"""What a seized disk still tells, on the real server (real gpg keyring, SQLite WAL, store).

After a source with submissions and replies is deleted, no file of the data directory (database,
WAL, keyrings, trust database, store, logs), nor any file name, holds its filesystem id,
designation, key fingerprint, key id or keygrips, in text or binary form. While it exists, its
stored times are whole days and its files all share one mtime.
"""
from __future__ import annotations

import binascii
import os
import subprocess

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from tests._support import ApiClient, Browser, TotpDevice, add_journalist, issue_client_cert, start_journalist_server
from tests._time_traces import find_in_tree
from tests.integration.test_journalist_api import db_rows

DAY = 86400


def keygrips(gnupg_home: str, fingerprint: str) -> list[str]:
    out = subprocess.run(["gpg", "--homedir", gnupg_home, "--batch", "--with-colons", "--with-keygrip",
                          "--list-keys", fingerprint], capture_output=True, text=True, check=True).stdout
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("grp:")]


def needles_of(fid: str, designation: str, fingerprint: str, grips: list[str]) -> dict[str, bytes]:
    """Every form in which the source's identifiers could sit in a file."""
    found = {"filesystem id": fid.encode(), "designation": designation.encode(),
             "designation_": designation.replace(" ", "_").encode()}
    for label, hexa in [("fingerprint", fingerprint), ("key id", fingerprint[-16:])] + \
            [(f"keygrip {g}", g) for g in grips]:
        found[f"{label} (hex)"] = hexa.upper().encode()
        found[f"{label} (lower hex)"] = hexa.lower().encode()
        found[f"{label} (binary)"] = binascii.unhexlify(hexa)
    return found


# Every needle in a file's content or name under a directory (shared with the time searches).
search = find_in_tree


class SeizedDiskTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        cert = issue_client_cert(self.server, "alice")
        account = yield add_journalist(self.server, "alice")
        self.api = ApiClient(self.server, cert)
        self.addCleanup(self.api.close)
        yield self.api.log_in(account, TotpDevice(self.server, account.totp_secret))

    @inlineCallbacks
    def populate(self):
        """A source with two submissions (one with a document) and two replies. -> its identifiers."""
        source = Browser(self.server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        response, _ = yield source.submit("first message", [("a.txt", b"a document " * 1000)])
        self.assertEqual(response.code, 200)
        [(source_id, fid, designation)] = db_rows(
            self.server, "SELECT id, filesystem_id, designation FROM sources WHERE pending = 0")
        newsroom = self.server.service.newsroom
        yield newsroom.replies.key_ready(source_id)
        yield newsroom.replies.add(source_id, "a reply from the newsroom")
        response, _ = yield source.submit("second message")
        self.assertEqual(response.code, 200)
        yield newsroom.replies.add(source_id, "another reply")
        [(fingerprint,)] = db_rows(self.server, "SELECT key_fingerprint FROM sources WHERE id = ?", source_id)
        gnupg = os.path.join(self.server.data_dir, "gnupg")
        grips = keygrips(gnupg, fingerprint)
        self.assertEqual(len(grips), 2)
        return source_id, fid, needles_of(fid, designation, fingerprint, grips)

    @inlineCallbacks
    def test_times_are_whole_days_and_files_share_one_mtime(self):
        source_id, fid, _ = yield self.populate()
        for table in ("sources", "submissions", "replies"):
            for (created,) in db_rows(self.server, f"SELECT created_at FROM {table}"):
                self.assertEqual(created % DAY, 0, (table, created))
        [(last_updated,)] = db_rows(self.server, "SELECT last_updated FROM sources WHERE id = ?", source_id)
        self.assertEqual(last_updated % DAY, 0)
        folder = os.path.join(self.server.data_dir, "store", fid)
        names = sorted(os.listdir(folder))
        self.assertEqual(len(names), 5, names)  # 2 messages, 1 document, 2 replies
        mtimes = {os.stat(os.path.join(folder, n)).st_mtime for n in names} | {os.stat(folder).st_mtime}
        self.assertEqual(len(mtimes), 1, mtimes)
        self.assertEqual(mtimes.pop() % DAY, 0)

    @inlineCallbacks
    def test_a_deleted_source_leaves_no_trace_in_the_data_dir(self):
        source_id, fid, needles = yield self.populate()
        newsroom = self.server.service.newsroom
        gnupg = os.path.join(self.server.data_dir, "gnupg")
        # The search does find what is there.
        before = search(self.server.data_dir, needles)
        for label in ("filesystem id", "designation_", "fingerprint (binary)"):
            self.assertTrue(any(hit.startswith(label) for hit in before), (label, before))

        status, data = yield self.api.json("GET", "/api/v1/sources")
        [listed] = data["sources"]
        status, _ = yield self.api.json("DELETE", f"/api/v1/sources/{listed['uuid']}")
        self.assertEqual(status, 200)

        self.assertEqual(search(self.server.data_dir, needles), [])
        self.assertFalse(os.path.isdir(os.path.join(gnupg, "openpgp-revocs.d")))  # gpg could not write any
        # The keyring still works for everyone else: a new source gets a key, and a reply.
        other = Browser(self.server.source_url)
        self.addCleanup(other.close)
        yield other.create_source()
        response, _ = yield other.submit("after the deletion")
        self.assertEqual(response.code, 200)
        [(other_id,)] = db_rows(self.server, "SELECT id FROM sources WHERE pending = 0")
        yield newsroom.replies.key_ready(other_id)
        yield newsroom.replies.add(other_id, "REPLY-AFTER")
        response, html = yield other.get("/lookup")
        self.assertIn("REPLY-AFTER", html)
