"""The journalist JSON API (``/api/v1``) end to end over mutual TLS, with real gpg on both ends."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import uuid as uuidlib

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from tests._support import (
    ApiClient, Browser, TotpDevice, add_journalist, issue_client_cert, kill_gpg_agent, security_events,
    short_tempdir, start_journalist_server, test_svs,
)


def db_rows(server, sql, *args):
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


class ClientKeyring:
    """What a journalist workstation does: import public keys, encrypt a reply to them."""

    def __init__(self, testcase) -> None:
        self.home = short_tempdir("dd-client-")
        os.chmod(self.home, 0o700)
        testcase.addCleanup(shutil.rmtree, self.home, True)
        testcase.addCleanup(kill_gpg_agent, self.home)

    def gpg(self, *args: str, data: bytes = b"") -> bytes:
        proc = subprocess.run(["gpg", "--homedir", self.home, "--batch", "--quiet", "--yes", "--trust-model", "always",
                               *args], input=data, capture_output=True)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout

    def encrypt(self, plaintext: str, public_keys: list[str], fingerprints: list[str]) -> str:
        for key in public_keys:
            self.gpg("--import", data=key.encode())
        recipients = [arg for fp in fingerprints for arg in ("--recipient", fp)]
        return self.gpg("--armor", "--encrypt", *recipients, data=plaintext.encode()).decode()


class JournalistApiTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.cert = issue_client_cert(self.server, "alice")
        self.account = yield add_journalist(self.server, "alice")
        self.device = TotpDevice(self.server, self.account.totp_secret)
        self.api = ApiClient(self.server, self.cert)
        self.addCleanup(self.api.close)
        self.token_response = yield self.api.log_in(self.account, self.device)
        # One source with a message and a document; one that never submitted (invisible).
        self.source = Browser(self.server.source_url)
        self.addCleanup(self.source.close)
        self.codename = yield self.source.create_source()
        self.file_bytes = os.urandom(200_000)
        response, html = yield self.source.submit("API-MESSAGE-MARKER", [("leak.bin", self.file_bytes)])
        self.assertEqual(response.code, 200)
        # Its key pair is made after this first submission: let it land before the tests look.
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources WHERE pending = 0")
        yield self.server.service.newsroom.replies.key_ready(source_id)
        idle = Browser(self.server.source_url)
        self.addCleanup(idle.close)
        self.idle_codename = yield idle.create_source()

    @inlineCallbacks
    def only_source(self):
        status, data = yield self.api.json("GET", "/api/v1/sources")
        self.assertEqual(status, 200)
        [source] = data["sources"]
        return source

    def forbidden_strings(self) -> list[str]:
        found = [self.codename, self.idle_codename]
        for (fid,) in db_rows(self.server, "SELECT filesystem_id FROM sources"):
            found.append(fid)
        return found

    def assert_no_source_secrets_in_responses(self):
        forbidden = [s.encode() for s in self.forbidden_strings()]
        for body in self.api.bodies:
            for secret in forbidden:
                self.assertNotIn(secret, body)
        for response in self.api.responses:
            self.assertIsNone(response.headers.getRawHeaders(b"set-cookie"))

    # -- tokens ------------------------------------------------------------------------------

    @inlineCallbacks
    def test_tokens_are_required_expire_on_logout_and_no_cookie_is_ever_set(self):
        self.assertEqual(set(self.token_response) >= {"token", "expiration", "journalist_uuid"}, True)
        self.assertEqual(self.token_response["journalist_uuid"], self.account.uuid)
        self.assertRegex(self.token_response["expiration"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
        status, data = yield self.api.json("GET", "/api/v1/user")
        self.assertEqual((status, data["username"], data["uuid"]), (200, "alice", self.account.uuid))

        anonymous = ApiClient(self.server, self.cert)
        self.addCleanup(anonymous.close)
        for headers in [None, {b"authorization": [b"Token not-a-token"]}, {b"authorization": [b"Bearer x"]}]:
            status, data = yield anonymous.json("GET", "/api/v1/sources", headers=headers)
            self.assertEqual(status, 403)
            self.assertEqual(set(data), {"error", "message"})
        status, data = yield anonymous.json("POST", "/api/v1/token", {
            "username": "alice", "passphrase": self.account.passphrase, "one_time_code": "123456"})
        self.assertEqual((status, data["error"]), (403, "Forbidden"))
        response, body = yield anonymous.request("POST", "/api/v1/token", raw=b"not json")
        self.assertEqual(response.code, 400)
        self.assertEqual(set(json.loads(body)), {"error", "message"})
        status, data = yield anonymous.json("GET", "/api/v1/no-such-thing")
        self.assertEqual((status, set(data)), (404, {"error", "message"}))

        status, data = yield self.api.json("POST", "/api/v1/logout")
        self.assertEqual(status, 200)
        status, data = yield self.api.json("GET", "/api/v1/user")
        self.assertEqual(status, 403)
        # Tokens are kept hashed: the database never holds a usable one.
        self.assertNotIn(self.token_response["token"],
                         str(db_rows(self.server, "SELECT token_hash FROM api_tokens")))
        for client in (self.api, anonymous):
            for response in client.responses:
                self.assertIsNone(response.headers.getRawHeaders(b"set-cookie"))

    @inlineCallbacks
    def test_tokens_expire(self):
        accounts = self.server.service.accounts
        real = accounts.clock
        accounts.clock = lambda: real() + accounts.token_lifetime + 1
        status, data = yield self.api.json("GET", "/api/v1/sources")
        self.assertEqual(status, 403)

    @inlineCallbacks
    def test_token_login_is_throttled(self):
        anonymous = ApiClient(self.server, self.cert)
        self.addCleanup(anonymous.close)
        for _ in range(5):
            status, _ = yield anonymous.json("POST", "/api/v1/token", {
                "username": "alice", "passphrase": "wrong", "one_time_code": self.device.code()})
            self.assertEqual(status, 403)
        status, data = yield anonymous.json("POST", "/api/v1/token", {
            "username": "alice", "passphrase": self.account.passphrase, "one_time_code": self.device.code()})
        self.assertEqual(status, 429)
        self.assertEqual(set(data), {"error", "message"})

    # -- sources -----------------------------------------------------------------------------

    @inlineCallbacks
    def test_sources_carry_no_codename_or_filesystem_id(self):
        source = yield self.only_source()
        [(designation, fingerprint, public_key)] = db_rows(
            self.server, "SELECT designation, key_fingerprint, public_key FROM sources WHERE pending = 0")
        self.assertEqual(source["journalist_designation"], designation)
        self.assertEqual(source["key"], {"type": "PGP", "public": public_key, "fingerprint": fingerprint})
        self.assertEqual(source["public_key"], public_key)
        self.assertEqual((source["number_of_messages"], source["number_of_documents"]), (1, 1))
        self.assertFalse(source["is_starred"])
        self.assertRegex(source["last_updated"], r"Z$")
        uuidlib.UUID(source["uuid"])
        status, data = yield self.api.json("GET", f"/api/v1/sources/{source['uuid']}")
        self.assertEqual((status, data), (200, source))
        status, data = yield self.api.json("GET", f"/api/v1/sources/{uuidlib.uuid4()}")
        self.assertEqual((status, data["error"]), (404, "Not Found"))

        status, _ = yield self.api.json("POST", f"/api/v1/sources/{source['uuid']}/add_star")
        self.assertEqual(status, 201)
        self.assertTrue((yield self.only_source())["is_starred"])
        status, _ = yield self.api.json("DELETE", f"/api/v1/sources/{source['uuid']}/remove_star")
        self.assertEqual(status, 200)
        self.assertFalse((yield self.only_source())["is_starred"])
        self.assert_no_source_secrets_in_responses()

    # -- submissions -------------------------------------------------------------------------

    @inlineCallbacks
    def submissions(self):
        source = yield self.only_source()
        status, data = yield self.api.json("GET", f"/api/v1/sources/{source['uuid']}/submissions")
        self.assertEqual(status, 200)
        return source, data["submissions"]

    def stored_bytes(self, filename: str) -> bytes:
        [(fid,)] = db_rows(self.server, "SELECT filesystem_id FROM sources WHERE pending = 0")
        with open(os.path.join(self.server.data_dir, "store", fid, filename), "rb") as f:
            return f.read()

    @inlineCallbacks
    def test_download_with_etag_and_ranges(self):
        source, items = yield self.submissions()
        self.assertEqual([(i["is_message"], i["is_read"]) for i in items], [(True, False), (False, False)])
        doc = items[1]
        self.assertEqual(set(doc) >= {"uuid", "filename", "size", "is_read", "download_url", "source_uuid"}, True)
        self.assertEqual(doc["source_uuid"], source["uuid"])
        stored = self.stored_bytes(doc["filename"])
        self.assertEqual(doc["size"], len(stored))
        self.assertEqual(db_rows(self.server, "SELECT sha256 FROM submissions WHERE uuid = ?", doc["uuid"]), [(None,)])

        response, body = yield self.api.request("GET", doc["download_url"])
        self.assertEqual(response.code, 200)
        self.assertEqual(body, stored)
        digest = hashlib.sha256(stored).hexdigest()
        self.assertEqual(response.headers.getRawHeaders(b"etag"), [f"sha256:{digest}".encode()])
        self.assertEqual(db_rows(self.server, "SELECT sha256 FROM submissions WHERE uuid = ?", doc["uuid"]), [(digest,)])
        self.assertEqual(test_svs().decrypt(body)[:3], b"\x1f\x8b\x08")  # the gzip envelope inside

        response, body = yield self.api.request("GET", doc["download_url"], headers={b"range": [b"bytes=1000-4999"]})
        self.assertEqual(response.code, 206)
        self.assertEqual(body, stored[1000:5000])
        self.assertEqual(response.headers.getRawHeaders(b"content-range"), [f"bytes 1000-4999/{len(stored)}".encode()])
        response, body = yield self.api.request("GET", doc["download_url"], headers={b"range": [b"bytes=-100"]})
        self.assertEqual((response.code, body), (206, stored[-100:]))
        response, body = yield self.api.request("GET", doc["download_url"], headers={b"range": [b"bytes=150000-"]})
        self.assertEqual((response.code, body), (206, stored[150000:]))
        response, body = yield self.api.request("GET", doc["download_url"],
                                                headers={b"range": [f"bytes={len(stored)}-".encode()]})
        self.assertEqual(response.code, 416)
        self.assertEqual(response.headers.getRawHeaders(b"content-range"), [f"bytes */{len(stored)}".encode()])
        self.assertEqual(set(json.loads(body)), {"error", "message"})
        response, body = yield self.api.request("GET", doc["download_url"], headers={
            b"range": [b"bytes=0-9"], b"if-range": [b"sha256:0000"]})
        self.assertEqual((response.code, body), (200, stored))  # another version: the whole file

        _, items = yield self.submissions()
        self.assertEqual([i["is_read"] for i in items], [False, True])
        self.assertEqual(items[1]["seen_by"], [self.account.uuid])
        status, data = yield self.api.json("GET", f"/api/v1/sources/{source['uuid']}/submissions/{uuidlib.uuid4()}/download")
        self.assertEqual(status, 404)
        self.assert_no_source_secrets_in_responses()

    @inlineCallbacks
    def test_seen_and_delete_submission(self):
        source, items = yield self.submissions()
        status, data = yield self.api.json("POST", "/api/v1/seen", {"files": [items[1]["uuid"]],
                                                                    "messages": [items[0]["uuid"]], "replies": []})
        self.assertEqual(status, 200)
        _, items = yield self.submissions()
        self.assertEqual([i["is_read"] for i in items], [True, True])
        for body, code in [({"files": [str(uuidlib.uuid4())]}, 404), ({"files": "x"}, 400), ({}, 400)]:
            status, data = yield self.api.json("POST", "/api/v1/seen", body)
            self.assertEqual(status, code, body)
        status, _ = yield self.api.json("DELETE", f"/api/v1/sources/{source['uuid']}/submissions/{items[0]['uuid']}")
        self.assertEqual(status, 200)
        _, remaining = yield self.submissions()
        self.assertEqual([i["uuid"] for i in remaining], [items[1]["uuid"]])
        [(fid,)] = db_rows(self.server, "SELECT filesystem_id FROM sources WHERE pending = 0")
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "store", fid)), [items[1]["filename"]])

    # -- replies -----------------------------------------------------------------------------

    @inlineCallbacks
    def test_client_encrypted_reply_reaches_the_source(self):
        source = yield self.only_source()
        # The source's key pair is made after its first submission; a client waits until it is public.
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources WHERE pending = 0")
        yield self.server.service.newsroom.replies.key_ready(source_id)
        source = yield self.only_source()
        client = ClientKeyring(self)
        svs = test_svs()
        with open(svs.public_key_path) as f:
            submission_key = f.read()
        armored = client.encrypt("API-REPLY-MARKER hello", [source["key"]["public"], submission_key],
                                 [source["key"]["fingerprint"], svs.fingerprint])
        reply_uuid = str(uuidlib.uuid4())
        url = f"/api/v1/sources/{source['uuid']}/replies"
        status, data = yield self.api.json("POST", url, {"reply": armored, "uuid": reply_uuid})
        self.assertEqual(status, 201, data)
        self.assertEqual(data["uuid"], reply_uuid)
        # The same uuid again: a conflict, nothing stored twice.
        status, data = yield self.api.json("POST", url, {"reply": armored, "uuid": reply_uuid})
        self.assertEqual((status, set(data)), (409, {"error", "message"}))
        # Plaintext, a message to someone else, and plaintext wrapped around a real message: refused.
        only_svs = client.encrypt("not for the source", [], [svs.fingerprint])
        for bad in ["API-PLAINTEXT-MARKER", only_svs, "API-PLAINTEXT-MARKER\n" + armored, armored + "\nPS plaintext",
                    42]:
            status, data = yield self.api.json("POST", url, {"reply": bad})
            self.assertEqual((status, set(data)), (400, {"error", "message"}), str(bad)[:40])
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM replies"), [(1,)])

        status, data = yield self.api.json("GET", url)
        [reply] = data["replies"]
        self.assertEqual((reply["uuid"], reply["journalist_username"], reply["is_deleted_by_source"]),
                         (reply_uuid, "alice", False))
        response, body = yield self.api.request("GET", reply["download_url"])
        self.assertEqual(response.code, 200)
        self.assertEqual(response.headers.getRawHeaders(b"etag"), [f"sha256:{hashlib.sha256(body).hexdigest()}".encode()])
        self.assertEqual(svs.decrypt(body), b"API-REPLY-MARKER hello")
        status, data = yield self.api.json("POST", "/api/v1/seen", {"replies": [reply_uuid]})
        self.assertEqual(status, 200)

        response, html = yield self.source.get("/lookup")
        self.assertIn("API-REPLY-MARKER hello", html)
        for root, _dirs, names in os.walk(self.server.data_dir):
            for name in names:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        content = f.read()
                    self.assertNotIn(b"API-PLAINTEXT-MARKER", content, path)
                    self.assertNotIn(b"API-REPLY-MARKER", content, path)
        self.assert_no_source_secrets_in_responses()

    # -- deletion and the log ----------------------------------------------------------------

    @inlineCallbacks
    def test_delete_source_and_the_security_log_stays_clean(self):
        source = yield self.only_source()
        # Its key pair is made after its first submission: let it land, so its deletion is seen.
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources WHERE pending = 0")
        yield self.server.service.newsroom.replies.key_ready(source_id)
        [(fid, fingerprint, designation)] = db_rows(
            self.server, "SELECT filesystem_id, key_fingerprint, designation FROM sources WHERE pending = 0")
        status, data = yield self.api.json("DELETE", f"/api/v1/sources/{source['uuid']}")
        self.assertEqual(status, 200)
        status, data = yield self.api.json("GET", "/api/v1/sources")
        self.assertEqual(data["sources"], [])
        self.assertFalse(os.path.exists(os.path.join(self.server.data_dir, "store", fid)))
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM submissions"), [(0,)])
        response, html = yield self.source.get("/lookup")
        # Issue 11: the source is logged out and told why, calmly.
        self.assertIn("The newsroom has closed the conversation for this codename", html)
        response, html = yield self.source.login(self.codename)
        self.assertEqual(response.code, 403)

        events = security_events(self.server)
        names = [e["event"] for e in events]
        for expected in ["crl.loaded", "journalist.login.ok", "journalist.source.deleted"]:
            self.assertIn(expected, names)
        self.assertEqual([e.get("username") for e in events if e["event"] == "journalist.login.ok"], ["alice"])
        log = open(os.path.join(self.server.data_dir, "logs", "security.jsonl")).read()
        for secret in [fid, fingerprint, designation, designation.replace(" ", "_"), self.codename,
                       self.idle_codename, source["uuid"]]:
            self.assertNotIn(secret, log)
        self.assert_no_source_secrets_in_responses()
