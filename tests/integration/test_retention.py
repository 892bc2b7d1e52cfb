"""Retention (issue 12): old submissions and replies, then idle empty sources, deleted like a
manual delete; counts only in the security log; set by option or by an admin on the web."""
from __future__ import annotations

import json
import os
import sqlite3
import time

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom.retention import DAY
from tests._support import (
    Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events,
    start_journalist_server,
)


def db(server):
    return sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))


def execute(server, sql, *args):
    conn = db(server)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def stored_files(server) -> set[str]:
    found = set()
    for root, _dirs, files in os.walk(os.path.join(server.data_dir, "store")):
        found.update(files)
    return found


def secret_keys(server) -> set[str]:
    import subprocess

    import time as _time

    # gpg asks the home's agent which keys have a secret half; on a loaded machine a first
    # connection to it can fail (seen once in CI: an empty list). Asked again, with what gpg
    # said kept for the failure message.
    for attempt in range(3):
        done = subprocess.run(["gpg", "--homedir", os.path.join(server.data_dir, "gnupg"), "--batch",
                               "--with-colons", "--list-secret-keys"], capture_output=True)
        found = {line.split(":")[9] for line in done.stdout.decode().splitlines() if line.startswith("fpr:")}
        if found or (done.returncode == 0 and b"agent" not in done.stderr):
            return found
        _time.sleep(1.0)
    raise AssertionError(f"gpg --list-secret-keys failed: rc {done.returncode}: {done.stderr.decode()[-300:]}")


class RetentionTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def source(self, server, message, files=()):
        b = Browser(server.source_url)
        self.addCleanup(b.close)
        codename = yield b.create_source()
        response, html = yield b.submit(message, list(files))
        self.assertEqual(response.code, 200)
        [(source_id,)] = execute(server, "SELECT id FROM sources ORDER BY id DESC LIMIT 1")
        return b, codename, source_id

    @inlineCallbacks
    def test_old_items_and_idle_empty_sources_go_new_ones_stay(self):
        server = yield start_journalist_server(self, retention_days=30)
        self.assertEqual(server.service.retention_timer.step, DAY)
        old_browser, old_codename, old = yield self.source(server, "OLD-MESSAGE", [("old.txt", b"o" * 500)])
        yield server.service.newsroom.replies.add(old, "OLD-REPLY")
        mixed_browser, mixed_codename, mixed = yield self.source(server, "MIXED-OLD")
        yield server.service.newsroom.replies.add(mixed, "MIXED-OLD-REPLY")
        new_browser, new_codename, new = yield self.source(server, "NEW-MESSAGE")
        idle = Browser(server.source_url)  # created an account, never submitted
        self.addCleanup(idle.close)
        yield idle.create_source()
        [(idle_id,)] = execute(server, "SELECT id FROM sources WHERE pending = 1")

        long_ago = time.time() - 40 * DAY
        for table in ("submissions", "replies"):
            execute(server, f"UPDATE {table} SET created_at = ? WHERE source_id IN (?, ?)", long_ago, old, mixed)
        execute(server, "UPDATE sources SET last_updated = ? WHERE id IN (?, ?)", long_ago, old, idle_id)
        # "mixed" had old items but recent activity: its items go, the source stays.
        yield server.service.newsroom.replies.key_ready(old)
        [(old_key,)] = execute(server, "SELECT key_fingerprint FROM sources WHERE id = ?", old)
        self.assertIn(old_key, secret_keys(server))
        files_before = stored_files(server)

        counts = yield server.service.retention.run_once()
        self.assertEqual(counts, {"submissions": 3, "replies": 2, "sources": 2})
        remaining = {r[0] for r in execute(server, "SELECT id FROM sources")}
        self.assertEqual(remaining, {mixed, new})
        self.assertEqual(execute(server, "SELECT COUNT(*) FROM submissions"), [(1,)])
        self.assertEqual(execute(server, "SELECT COUNT(*) FROM replies"), [(0,)])
        self.assertEqual(len(stored_files(server)), 1)
        self.assertEqual(len(files_before - stored_files(server)), 5)
        self.assertNotIn(old_key, secret_keys(server))  # deleted with its key

        # The deleted source's codename no longer works; the others still do.
        response, html = yield Browser(server.source_url).login(old_codename)
        self.assertEqual(response.code, 403)
        response, html = yield new_browser.get("/lookup")
        self.assertEqual(response.code, 200)
        response, html = yield mixed_browser.get("/lookup")
        self.assertNotIn("MIXED-OLD-REPLY", html)

        # Counts only in the security log: no name, id or file of a source.
        [event] = [e for e in security_events(server) if e["event"] == "retention.deleted"]
        self.assertEqual(set(event) - {"timestamp", "program"}, {"event", "count", "submissions", "replies", "sources"})
        self.assertEqual((event["submissions"], event["replies"], event["sources"], event["count"]), (3, 2, 2, 30))
        # A second pass finds nothing more.
        counts = yield server.service.retention.run_once()
        self.assertEqual(counts, {"submissions": 0, "replies": 0, "sources": 0})

    @inlineCallbacks
    def test_off_by_default_and_an_admin_turns_it_on_in_the_journalist_interface(self):
        server = yield start_journalist_server(self)
        self.assertIsNone(server.service.settings.retention_days)
        browser, codename, source_id = yield self.source(server, "KEPT")
        execute(server, "UPDATE submissions SET created_at = ?", time.time() - 4000 * DAY)
        counts = yield server.service.retention.run_once()
        self.assertIsNone(counts)
        self.assertEqual(execute(server, "SELECT COUNT(*) FROM submissions"), [(1,)])

        admin = yield add_journalist(server, "alice", admin=True)
        b = JournalistBrowser(server, issue_client_cert(server, "alice"))
        self.addCleanup(b.close)
        yield b.log_in(admin, TotpDevice(server, admin.totp_secret))
        response, html = yield b.get("/admin/settings")
        self.assertIn('name="retention_days"', html)
        form = {"csrf_token": b.csrf(html), "organisation_name": "DeadDrop", "max_upload_mb": "500"}
        response, html = yield b.post("/admin/settings", data=dict(form, retention_days="0"))
        self.assertEqual(response.code, 400)
        response, html = yield b.get("/admin/settings")
        response, html = yield b.post("/admin/settings", data=dict(form, csrf_token=b.csrf(html), retention_days="90"))
        self.assertIn("Settings saved", html)
        self.assertEqual(server.service.settings.retention_days, 90)
        self.assertEqual(dict(execute(server, "SELECT key, value FROM settings"))["retention_days"], "90")
        counts = yield server.service.retention.run_once()
        self.assertEqual(counts, {"submissions": 1, "replies": 0, "sources": 0})
        events = [e["event"] for e in security_events(server)]
        self.assertIn("retention.deleted", events)
        self.assertNotIn(json.dumps(codename), open(os.path.join(server.data_dir, "logs", "security.jsonl")).read())
