"""The whole loop on the real stack: source → server → `deaddrop-journalist sync` over mutual TLS
→ `deaddrop-svs decrypt` → `export` to a personal key; and `deaddrop-journalist reply` → source."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.svs import cli as svs_cli
from deaddrop.workstation import cli as ws_cli
from deaddrop.workstation.api import JournalistApi
from deaddrop.workstation.sync import Syncer, Progress
from deaddrop.workstation.tls import NewsroomTLSPolicy, load_client_certificate, load_trust_root
from tests._support import (Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, kill_gpg_agent,
                            short_tempdir, start_journalist_server, test_svs, wait_until)
from tests._terminal import Terminal

JOURNALIST_SCRIPT = os.path.join(os.path.dirname(sys.executable), "deaddrop-journalist")


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class WorkstationTests(unittest.TestCase):
    timeout = 180

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.account = yield add_journalist(self.server, "dana")
        self.device = TotpDevice(self.server, self.account.totp_secret)
        self.key_pem, self.cert_pem = issue_client_cert(self.server, "dana")
        self.p12 = os.path.join(self.server.data_dir, "clients", "dana.p12")
        self.work = short_tempdir("dd-ws-")
        self.password_file = self._write("password", self.account.passphrase)
        self.p12_password_file = self._write("p12password", "test-password")
        self.session_file = os.path.join(self.work, "session.json")
        self.source = Browser(self.server.source_url)
        self.addCleanup(self.source.close)

    def _write(self, name: str, text: str) -> str:
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(text + "\n")
        return path

    def cli(self, *command: str, use_p12: bool = True):
        cert = ["--cert", self.p12, "--cert-password-file", self.p12_password_file] if use_p12 else \
            ["--cert", self.cert_pem, "--key", self.key_pem]
        argv = ["--url", self.server.journalist_url, "--ca", self.server.server_cert, *cert,
                "--username", "dana", "--password-file", self.password_file, "--totp", self.device.code(),
                "--session-file", self.session_file, *command]
        out = io.StringIO()
        d = ws_cli.run(reactor, ws_cli.build_parser().parse_args(argv), out=out)
        return d.addCallback(lambda status: (status, out.getvalue()))

    def api(self) -> JournalistApi:
        policy = NewsroomTLSPolicy(load_trust_root(self.server.server_cert), load_client_certificate(self.cert_pem, self.key_pem))
        api = JournalistApi(reactor, self.server.journalist_url, policy, session_file=self.session_file)
        self.addCleanup(api.close)
        return api

    @inlineCallbacks
    def submit(self, message: str, files: list[tuple[str, bytes]]):
        yield self.source.create_source()
        response, html = yield self.source.submit(message, files)
        self.assertEqual(response.code, 200, html[:300])

    def designation_dir(self, out: str) -> str:
        [name] = os.listdir(out)
        return os.path.join(out, name)

    @inlineCallbacks
    def test_round_trip_sync_decrypt_export_and_reply(self):
        document = os.urandom(5 * 1024 * 1024)
        yield self.submit("WS-MESSAGE-MARKER hello", [("rapport été.pdf", document), ("../../escape.txt", b"hostile")])
        out = os.path.join(self.work, "download")
        status, text = yield self.cli("sync", "--out", out)
        self.assertEqual(status, 0)
        self.assertIn("3 downloaded", text)
        folder = self.designation_dir(out)
        names = sorted(os.listdir(folder))
        self.assertEqual(len(names), 3)
        store = os.path.join(self.server.data_dir, "store")
        [fid] = os.listdir(store)
        for name in names:  # byte-identical to what the server stores: still encrypted
            self.assertEqual(sha256_file(os.path.join(folder, name)), sha256_file(os.path.join(store, fid, name)))

        # Marked seen only once on disk; a second run is a no-op.
        status, text = yield self.cli("sync", "--out", out)
        self.assertIn("0 downloaded", text)
        self.assertIn("0 marked seen", text)
        status, text = yield self.cli("sources")
        self.assertIn(os.path.basename(folder).replace("_", " "), text)
        # The day only, as the web shows it: the server keeps no time of day for a source.
        [row] = [line for line in text.splitlines() if os.path.basename(folder).replace("_", " ") in line]
        self.assertRegex(row, r"\s\d{4}-\d\d-\d\d$")

        # On the SVS: decrypt (also straight from the folder), byte-identical, names kept, nothing escapes.
        svs_home = short_tempdir("dd-svsh-")
        os.symlink(test_svs().homedir, os.path.join(svs_home, "gnupg"))
        plain = os.path.join(self.work, "plain")
        code = yield deferToThread(svs_cli.main, ["--home", svs_home, "decrypt", out, "--out", plain])
        self.assertEqual(code, 0)
        decrypted = os.path.join(plain, os.path.basename(folder))
        files = sorted(os.listdir(decrypted))
        self.assertIn("rapport été.pdf", files)
        with open(os.path.join(decrypted, "rapport été.pdf"), "rb") as f:
            self.assertEqual(f.read(), document)
        [msg] = [n for n in files if n.endswith("-msg.txt")]
        with open(os.path.join(decrypted, msg)) as f:
            self.assertEqual(f.read(), "WS-MESSAGE-MARKER hello")
        self.assertIn("escape.txt", files)  # "../../escape.txt" was neutralised to a plain name
        escaped = [root for root, _dirs, entries in os.walk(self.work) if "escape.txt" in entries]
        self.assertEqual(escaped, [decrypted])

        # Export to a journalist's personal key: only that key opens it.
        personal = short_tempdir("dd-pers-")
        self.addCleanup(kill_gpg_agent, personal)
        subprocess.run(["gpg", "--homedir", personal, "--batch", "--passphrase", "", "--quick-gen-key", "Dana personal",
                        "future-default", "default", "never"], check=True, capture_output=True)
        personal_key = os.path.join(self.work, "dana.asc")
        with open(personal_key, "wb") as f:
            f.write(subprocess.run(["gpg", "--homedir", personal, "--armor", "--export"], check=True, capture_output=True).stdout)
        exported = os.path.join(self.work, "exported")
        # Random bytes named .pdf: mat2 cannot clean them, so they leave only when named as kept.
        document_path = os.path.join(decrypted, "rapport été.pdf")
        code = yield deferToThread(svs_cli.main, ["--home", svs_home, "export", document_path, "--to-key", personal_key,
                                                  "--out", exported, "--keep-metadata", document_path])
        self.assertEqual(code, 0)
        [blob_name] = os.listdir(exported)
        with open(os.path.join(exported, blob_name), "rb") as f:
            blob = f.read()
        opened = subprocess.run(["gpg", "--homedir", personal, "--batch", "-q", "-d"], input=blob, capture_output=True)
        self.assertEqual(opened.stdout, document)
        refused = subprocess.run(["gpg", "--homedir", test_svs().homedir, "--batch", "-q", "-d"], input=blob, capture_output=True)
        self.assertNotEqual(refused.returncode, 0)

        # A reply encrypted on the workstation reaches the source.
        reply_file = self._write("reply.txt", "WS-REPLY-MARKER thank you")
        status, text = yield self.cli("reply", os.path.basename(folder), "--message-file", reply_file, use_p12=False)
        self.assertEqual(status, 0, text)
        response, html = yield self.source.get("/lookup")
        self.assertIn("WS-REPLY-MARKER thank you", html)

    @inlineCallbacks
    def test_two_word_designations_made_before_and_three_word_ones_go_through_the_whole_loop(self):
        """Issue 17 §4: new designations have three words; one made before ("amber lantern")
        keeps working in the API, file names, sync folders, the SVS and replies by designation."""
        from deaddrop.newsroom import codenames

        legacy = Browser(self.server.source_url)
        self.addCleanup(legacy.close)
        drawn = codenames.generate_designation
        codenames.generate_designation = lambda: "amber lantern"  # what the two-word lists drew
        try:
            yield legacy.create_source()
        finally:
            codenames.generate_designation = drawn
        response, html = yield legacy.submit("LEGACY-MARKER", [("old.txt", b"OLD-FILE")])
        yield self.submit("NEW-MARKER", [("new.txt", b"NEW-FILE")])
        status, text = yield self.cli("sources")
        self.assertIn("amber lantern", text)
        out = os.path.join(self.work, "download")
        status, text = yield self.cli("sync", "--out", out)
        self.assertEqual(status, 0, text)
        folders = sorted(os.listdir(out))
        self.assertEqual(len(folders), 2)
        self.assertIn("amber_lantern", folders)
        [new] = [f for f in folders if f != "amber_lantern"]
        self.assertRegex(new, r"^[a-z]+_[a-z]+_[a-z]+$")
        status, listed = yield self.cli("sources")
        self.assertIn(new.replace("_", " "), listed)
        self.assertEqual(sorted(os.listdir(os.path.join(out, "amber_lantern"))),
                         ["1-amber_lantern-msg.gpg", "2-amber_lantern-doc.gz.gpg"])
        self.assertEqual(sorted(os.listdir(os.path.join(out, new))), [f"1-{new}-msg.gpg", f"2-{new}-doc.gz.gpg"])
        svs_home = short_tempdir("dd-svsh-")
        os.symlink(test_svs().homedir, os.path.join(svs_home, "gnupg"))
        plain = os.path.join(self.work, "plain")
        code = yield deferToThread(svs_cli.main, ["--home", svs_home, "decrypt", out, "--out", plain])
        self.assertEqual(code, 0)
        for folder, marker, name, content in (("amber_lantern", "LEGACY-MARKER", "old.txt", b"OLD-FILE"),
                                              (new, "NEW-MARKER", "new.txt", b"NEW-FILE")):
            with open(os.path.join(plain, folder, "1-msg.txt")) as f:
                self.assertEqual(f.read(), marker)
            with open(os.path.join(plain, folder, name), "rb") as f:
                self.assertEqual(f.read(), content)
        # Replies by designation, either spelling, reach each source (once its key pair, made
        # after its first submission, exists).
        def keys_made() -> bool:
            db = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
            try:
                return db.execute("SELECT COUNT(*) FROM sources WHERE key_fingerprint IS NOT NULL").fetchone()[0] == 2
            finally:
                db.close()
        yield wait_until(keys_made, timeout=60)
        for designation, browser, marker in (("amber lantern", legacy, "REPLY-OLD-4c"), (new, self.source, "REPLY-NEW-7e")):
            status, text = yield self.cli("reply", designation, "--message-file", self._write("r.txt", marker),
                                          use_p12=False)
            self.assertEqual(status, 0, text)
            response, html = yield browser.get("/lookup")
            self.assertIn(marker, html)

    @inlineCallbacks
    def _sync_with_existing_part(self, make_part):
        payload = os.urandom(2 * 1024 * 1024)
        yield self.submit("", [("a.bin", payload)])
        store = os.path.join(self.server.data_dir, "store")
        [fid] = os.listdir(store)
        [name] = os.listdir(os.path.join(store, fid))
        with open(os.path.join(store, fid, name), "rb") as f:
            stored = f.read()
        out = os.path.join(self.work, "download")
        designation = name.split("-")[1]
        os.makedirs(os.path.join(out, designation))
        with open(os.path.join(out, designation, name + ".part"), "wb") as f:
            f.write(make_part(stored))
        api = self.api()
        yield api.log_in(lambda: ws_cli.Credentials("dana", self.account.passphrase, self.device.code))
        report = yield Syncer(api, out, Progress(io.StringIO(), False)).run()
        with open(os.path.join(out, designation, name), "rb") as f:
            self.assertEqual(f.read(), stored)
        self.assertFalse(os.path.exists(os.path.join(out, designation, name + ".part")))
        return report

    @inlineCallbacks
    def test_an_interrupted_sync_resumes_with_a_range_request(self):
        report = yield self._sync_with_existing_part(lambda stored: stored[: len(stored) // 2])
        self.assertEqual(len(report.resumed), 1)
        self.assertEqual(report.partial_responses, 1)
        self.assertEqual(report.refetched, [])
        self.assertEqual(report.marked_seen, 1)

    @inlineCallbacks
    def test_a_corrupted_download_is_detected_and_fetched_again(self):
        report = yield self._sync_with_existing_part(lambda stored: b"\x00" * 1000 + stored[1000: len(stored) // 2])
        self.assertEqual(len(report.refetched), 1)
        self.assertEqual(len(report.downloaded), 1)

    @inlineCallbacks
    def test_bad_credentials_and_wrong_server_certificate_fail_clearly(self):
        wrong = self._write("wrong", "not the passphrase")
        argv = ["--url", self.server.journalist_url, "--ca", self.server.server_cert, "--cert", self.cert_pem,
                "--key", self.key_pem, "--username", "dana", "--password-file", wrong, "--totp", self.device.code(),
                "--session-file", self.session_file, "sources"]
        with self.assertRaises(ws_cli.ApiError) as e:
            yield ws_cli.run(reactor, ws_cli.build_parser().parse_args(argv), out=io.StringIO())
        self.assertEqual(e.exception.status, 403)
        from deaddrop.transport import ca

        other_ca = os.path.join(self.server.data_dir, "other-ca")  # not the CA that signed the server's certificate
        ca.init_ca(other_ca)
        argv[argv.index("--ca") + 1] = os.path.join(other_ca, "ca.pem")
        with self.assertRaises(Exception) as e:
            yield ws_cli.run(reactor, ws_cli.build_parser().parse_args(argv), out=io.StringIO())
        self.assertNotIsInstance(e.exception, ws_cli.ApiError)

    # -- issue 27, item 5: the journalist's tools as a newcomer meets them --------------------

    def argv(self, *command: str, cert_password: bool = True) -> list[str]:
        """The console script's own command line (the p12 with or without its password file)."""
        return [JOURNALIST_SCRIPT, "--url", self.server.journalist_url, "--ca", self.server.server_cert,
                "--cert", self.p12, *(["--cert-password-file", self.p12_password_file] if cert_password else []),
                "--username", "dana", "--password-file", self.password_file, "--totp", self.device.code(),
                "--session-file", self.session_file, *command]

    @inlineCallbacks
    def test_the_p12_import_password_is_asked_at_the_terminal(self):
        terminal = Terminal.run(self.argv("sources", cert_password=False))
        yield terminal.expect("Import password for dana.p12: ")
        terminal.type("WRONG-PASSWORD-1f")
        yield terminal.expect("Wrong password, try again.")
        yield terminal.expect("Import password for dana.p12: ")
        terminal.type("test-password")
        yield terminal.expect("SOURCE")
        status = yield terminal.ended
        self.assertEqual(status, 0, terminal.screen)
        self.assertNotIn("WRONG-PASSWORD-1f", terminal.screen)  # typed with echo off
        self.assertNotIn("test-password", terminal.screen)
        # Without a terminal and with nothing on standard input: said what to do, no traceback.
        proc = yield deferToThread(subprocess.run, self.argv("sources", cert_password=False),
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True, start_new_session=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("needs its import password: type it when asked, or give --cert-password-file FILE", proc.stderr)

    @inlineCallbacks
    def test_reply_says_to_install_gnupg_before_asking_for_anything(self):
        bare = short_tempdir("dd-path-")  # a PATH without GnuPG
        only_gpg = short_tempdir("dd-path-")
        os.symlink(shutil.which("gpg"), os.path.join(only_gpg, "gpg"))
        message = self._write("r.txt", "a reply")
        for path, missing in ((bare, "gpg and gpgconf not found"), (only_gpg, "gpgconf not found")):
            proc = yield deferToThread(
                subprocess.run, self.argv("reply", "amber quiet lantern", "--message-file", message, cert_password=False),
                env=dict(os.environ, PATH=path), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                start_new_session=True)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertIn(f"deaddrop-journalist: error: {missing}: a reply is encrypted on this workstation with "
                          "GnuPG; install it (on Debian or Ubuntu: sudo apt install gnupg)", proc.stderr)
            self.assertNotIn("password", proc.stderr.lower())  # nothing was asked first

    @inlineCallbacks
    def test_sync_fetches_what_this_workstation_has_not_downloaded_even_if_read_in_the_browser(self):
        yield self.submit("READ-IN-THE-BROWSER", [("a.txt", b"a document")])
        browser = JournalistBrowser(self.server, (self.key_pem, self.cert_pem))
        self.addCleanup(browser.close)
        response, html = yield browser.log_in(self.account, self.device)
        self.assertEqual(response.code, 200, html[:300])
        [source_uuid] = re.findall(r'href="/sources/([0-9a-f-]{36})"', html)
        response, html = yield browser.get(f"/sources/{source_uuid}")
        response, html = yield browser.post(f"/sources/{source_uuid}/download-unread", data={"csrf_token": browser.csrf(html)})
        self.assertIn("Download all unread (0)", html)  # both read now

        out = os.path.join(self.work, "inbox")
        status, text = yield self.cli("sync", "--out", out)
        self.assertEqual(status, 0, text)
        self.assertIn("2 downloaded, 0 already present", text)
        self.assertIn("2 of the files fetched had been read already (in the browser, or by a colleague): sync fetches "
                      "what this workstation has not downloaded, read or not", text)
        self.assertEqual(len(os.listdir(self.designation_dir(out))), 2)
        ledger = os.path.join(self.work, "downloaded.json")  # beside the session file
        self.assertEqual(os.stat(ledger).st_mode & 0o777, 0o600)
        # Again: nothing new, and the line says why nothing came.
        status, text = yield self.cli("sync", "--out", out)
        self.assertIn("0 downloaded", text)
        self.assertIn("2 downloaded here before", text)
        # Moved to the SVS (the inbox emptied): still not fetched again.
        shutil.rmtree(out)
        status, text = yield self.cli("sync", "--out", out)
        self.assertIn("0 downloaded", text)
        # A submission deleted on the server leaves the ledger at the next sync.
        with open(ledger) as f:
            self.assertEqual(len(json.load(f)["downloaded"]), 2)
        api = self.api()
        yield api.log_in(lambda: ws_cli.Credentials("dana", self.account.passphrase, self.device.code))
        listing = yield api.get_json(f"/sources/{source_uuid}/submissions")
        first = listing["submissions"][0]
        yield api.request_json("DELETE", f"/sources/{source_uuid}/submissions/{first['uuid']}")
        status, text = yield self.cli("sync", "--out", out)
        self.assertIn("1 downloaded here before", text)
        with open(ledger) as f:
            self.assertEqual(json.load(f)["downloaded"], [listing["submissions"][1]["uuid"]])
