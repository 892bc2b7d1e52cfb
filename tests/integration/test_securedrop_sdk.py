"""SecureDrop's own client library (``securedrop-sdk``), unchanged, against our API (issue 22).

The SDK makes every HTTP call as ``requests.request(method, url, **kwargs)`` with nothing for a
client certificate. Its one hook is that name: the module looks ``requests`` up when it calls,
and a ``requests.Session`` has the same ``request(method, url, **kwargs)``. So the SDK's module
sees a session that presents the journalist's certificate and trusts the newsroom CA, as a
workstation's TLS proxy would; the SDK's own code, URLs, headers and parsing run as shipped.

The SDK blocks: each call runs in a thread while the reactor serves the real server.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import re
import shutil
import tempfile
import uuid as uuidlib

import requests
import sdclientapi
from sdclientapi import API, AuthError, Source, WrongUUIDError
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from tests._soft_key import SoftKey, enrol, log_in_with_key
from tests._support import (
    Browser, JournalistBrowser, TotpDevice, add_journalist, issue_client_cert, security_events, start_journalist_server, test_svs,
)
from tests.integration.test_journalist_api import ClientKeyring, db_rows
from tests.integration.test_source_pagination import seed_sources

# The SDK's calls that reach the server: every public method but the header helper. The
# ``*_from_string`` ones are the same calls with a uuid instead of an object.
NOT_A_CALL = {"update_auth_header"}
SDK_CALLS = {name for name, _ in inspect.getmembers(API, inspect.isfunction)
             if not name.startswith("_") and name not in NOT_A_CALL}


class _CertifiedRequests:
    """Stands in for the ``requests`` module inside ``sdclientapi``: the same call, over a
    session with the journalist's client certificate and the newsroom CA."""

    def __init__(self, session: requests.Session) -> None:
        self.request = session.request


def certify_the_sdk(testcase: unittest.TestCase, server, client: tuple[str, str]) -> None:
    """The SDK's ``requests``, for the rest of ``testcase``: a session with ``client``'s (key,
    certificate) that trusts the newsroom CA."""
    key_pem, cert_pem = client
    session = requests.Session()
    session.cert = (cert_pem, key_pem)
    session.verify = server.server_cert
    # Nothing from the environment: a CA bundle variable there would replace ``verify``.
    session.trust_env = False
    # One connection a call, closed by the server when it has answered: none outlives the test.
    session.headers["Connection"] = "close"
    testcase.addCleanup(session.close)
    testcase.patch(sdclientapi, "requests", _CertifiedRequests(session))


class SecureDropSdkTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.client = issue_client_cert(self.server, "alice")
        self.account = yield add_journalist(self.server, "alice")
        yield add_journalist(self.server, "bob")
        self.device = TotpDevice(self.server, self.account.totp_secret)
        certify_the_sdk(self, self.server, self.client)
        self.downloads = tempfile.mkdtemp(prefix="dd-sdk-")
        self.addCleanup(shutil.rmtree, self.downloads, True)
        self.called: set[str] = set()

    def sdk(self) -> API:
        return API(self.server.journalist_url + "/", self.account.username, self.account.passphrase,
                   self.device.code())

    def call(self, api: API, name: str, *args, **kwargs):
        """One SDK call, in a thread (it blocks); noted, so the test can say every call was made."""
        self.called.add(name)
        return deferToThread(getattr(api, name), *args, **kwargs)

    @inlineCallbacks
    def new_source(self, message: str, files=()):
        browser = Browser(self.server.source_url)
        self.addCleanup(browser.close)
        yield browser.create_source()
        response, html = yield browser.submit(message, list(files))
        self.assertEqual(response.code, 200, html[:300])
        [(source_id,)] = db_rows(self.server, "SELECT id FROM sources WHERE pending = 0 ORDER BY id DESC LIMIT 1")
        yield self.server.service.newsroom.replies.key_ready(source_id)
        return browser

    def stored(self, filename: str) -> bytes:
        [(fid,)] = db_rows(self.server, "SELECT s.filesystem_id FROM sources s JOIN submissions x ON x.source_id = s.id"
                                        " WHERE x.filename = ?", filename)
        with open(os.path.join(self.server.data_dir, "store", fid, filename), "rb") as f:
            return f.read()

    def test_every_call_of_the_sdk_works_over_mutual_tls(self):
        """A TOTP account: the SDK's one-time code is the app's."""
        return self.every_call(self.device.code())

    @inlineCallbacks
    def test_every_call_of_the_sdk_works_for_an_account_with_security_keys(self):
        """Issue 30: an account with keys takes a one-time API code from its account page, after
        a key login, and the SDK logs in with it, unchanged; the code works once."""
        port = int(self.server.journalist_url.rsplit(":", 1)[1])
        browser = JournalistBrowser(self.server, self.client)
        self.addCleanup(browser.close)
        yield browser.log_in(self.account, self.device)
        key = SoftKey(f"https://localhost:{port}")
        yield enrol(browser, port, key, "blue YubiKey")
        response, html = yield browser.post("/logout", data={"csrf_token": browser.csrf()})
        with self.assertRaises(AuthError):  # the app's codes no longer work for it
            yield deferToThread(API(self.server.journalist_url + "/", "alice", self.account.passphrase,
                                    self.device.code()).authenticate)
        response, html = yield log_in_with_key(browser, port, "alice", self.account.passphrase, key)
        response, html = yield browser.post("/account/api-code", data={"csrf_token": browser.csrf(html)})
        [code] = re.findall(r'<li class="codename">([A-Z2-7-]{19})</li>', html)
        yield self.every_call(code)
        events = [e["event"] for e in security_events(self.server) if e["event"].startswith("journalist.api_code")]
        self.assertEqual(events, ["journalist.api_code.issued", "journalist.api_code.used"])
        with self.assertRaises(AuthError):  # once only
            yield deferToThread(API(self.server.journalist_url + "/", "alice", self.account.passphrase, code).authenticate)

    @inlineCallbacks
    def every_call(self, one_time_code: str):
        document = os.urandom(150_000)
        first = yield self.new_source("SDK-MESSAGE-ONE", [("plans.pdf", document)])
        second = yield self.new_source("SDK-MESSAGE-TWO")
        api = API(self.server.journalist_url + "/", self.account.username, self.account.passphrase, one_time_code)
        self.assertTrue((yield self.call(api, "authenticate")))
        self.assertEqual(api.token_journalist_uuid, self.account.uuid)

        user = yield self.call(api, "get_current_user")
        self.assertEqual((user["username"], user["uuid"], user["is_admin"]), ("alice", self.account.uuid, False))
        users = yield self.call(api, "get_users")
        self.assertEqual(sorted(u.username for u in users), ["alice", "bob"])

        # -- sources
        sources = yield self.call(api, "get_sources")
        self.assertEqual(len(sources), 2)
        by_designation = {s.journalist_designation: s for s in sources}
        designations = dict(db_rows(self.server, "SELECT uuid, designation FROM sources WHERE pending = 0"))
        self.assertEqual(set(by_designation), set(designations.values()))
        one = next(s for s in sources if s.number_of_documents == 1)
        two = next(s for s in sources if s.number_of_documents == 0)
        self.assertEqual((one.number_of_messages, one.interaction_count, one.is_flagged), (1, 2, False))
        self.assertEqual(one.key["type"], "PGP")
        fetched = yield self.call(api, "get_source", Source(uuid=one.uuid))
        self.assertEqual(fetched.journalist_designation, one.journalist_designation)
        fetched = yield self.call(api, "get_source_from_string", two.uuid)
        self.assertEqual(fetched.uuid, two.uuid)
        with self.assertRaises(WrongUUIDError):
            yield self.call(api, "get_source", Source(uuid=str(uuidlib.uuid4())))

        self.assertTrue((yield self.call(api, "add_star", one)))
        self.assertEqual(db_rows(self.server, "SELECT is_starred FROM sources WHERE uuid = ?", one.uuid), [(1,)])
        self.assertTrue((yield self.call(api, "remove_star", one)))
        self.assertEqual(db_rows(self.server, "SELECT is_starred FROM sources WHERE uuid = ?", one.uuid), [(0,)])
        before = db_rows(self.server, "SELECT * FROM sources ORDER BY id")
        self.assertTrue((yield self.call(api, "flag_source", one)))  # accepted, changes nothing
        self.assertEqual(db_rows(self.server, "SELECT * FROM sources ORDER BY id"), before)

        # -- submissions
        items = yield self.call(api, "get_submissions", one)
        self.assertEqual(len(items), 2)
        message = next(i for i in items if i.filename.endswith("-msg.gpg"))
        doc = next(i for i in items if i.is_file())
        self.assertEqual(doc.source_uuid, one.uuid)
        again = yield self.call(api, "get_submission", doc)
        self.assertEqual((again.uuid, again.size, again.is_read), (doc.uuid, doc.size, False))
        again = yield self.call(api, "get_submission_from_string", message.uuid, one.uuid)
        self.assertEqual(again.filename, message.filename)
        everything = yield self.call(api, "get_all_submissions")
        self.assertEqual(len(everything), 3)

        etag, path = yield self.call(api, "download_submission", doc, self.downloads)
        with open(path, "rb") as f:
            downloaded = f.read()
        self.assertEqual(downloaded, self.stored(doc.filename))
        self.assertEqual(etag, "sha256:" + hashlib.sha256(downloaded).hexdigest())
        self.assertEqual(test_svs().decrypt(downloaded)[:2], b"\x1f\x8b")  # the gzip envelope
        self.assertTrue((yield self.call(api, "get_submission", doc)).is_read)
        yield self.call(api, "seen", [], [message.uuid], [])
        self.assertTrue((yield self.call(api, "get_submission", message)).is_read)
        with self.assertRaises(WrongUUIDError):
            yield self.call(api, "seen", [str(uuidlib.uuid4())], [], [])

        # -- replies, encrypted on the client to the source and to the submission key
        svs = test_svs()
        with open(svs.public_key_path) as f:
            submission_key = f.read()
        armored = ClientKeyring(self).encrypt("SDK-REPLY-MARKER", [one.key["public"], submission_key],
                                              [one.key["fingerprint"], svs.fingerprint])
        reply_uuid = str(uuidlib.uuid4())
        sent = yield self.call(api, "reply_source", one, armored, reply_uuid)
        self.assertEqual(sent.uuid, reply_uuid)
        replies = yield self.call(api, "get_replies_from_source", one)
        self.assertEqual([(r.uuid, r.journalist_username) for r in replies], [(reply_uuid, "alice")])
        reply = yield self.call(api, "get_reply_from_source", one, reply_uuid)
        self.assertEqual(reply.source_uuid, one.uuid)
        self.assertEqual([r.uuid for r in (yield self.call(api, "get_all_replies"))], [reply_uuid])
        etag, path = yield self.call(api, "download_reply", reply, self.downloads)
        with open(path, "rb") as f:
            downloaded = f.read()
        self.assertEqual(etag, "sha256:" + hashlib.sha256(downloaded).hexdigest())
        self.assertEqual(svs.decrypt(downloaded), b"SDK-REPLY-MARKER")
        response, html = yield first.get("/lookup")
        self.assertIn("SDK-REPLY-MARKER", html)
        self.assertTrue((yield self.call(api, "delete_reply", reply)))
        self.assertEqual((yield self.call(api, "get_all_replies")), [])

        # -- deleting one submission, then a whole conversation
        self.assertTrue((yield self.call(api, "delete_submission", message)))
        self.assertEqual([i.uuid for i in (yield self.call(api, "get_submissions", one))], [doc.uuid])
        # The SDK puts the source into ``source_url`` here but builds the URL from the (empty)
        # ``source_uuid``: the server finds no such route, and nothing is deleted.
        with self.assertRaises(WrongUUIDError):
            yield self.call(api, "delete_submission_from_string", doc.uuid, one.uuid)
        self.assertEqual(len((yield self.call(api, "get_submissions", one))), 1)

        armored = ClientKeyring(self).encrypt("to the second", [two.key["public"], submission_key],
                                              [two.key["fingerprint"], svs.fingerprint])
        yield self.call(api, "reply_source", two, armored)
        [(fid_two, key_two)] = db_rows(self.server, "SELECT filesystem_id, key_fingerprint FROM sources WHERE uuid = ?",
                                       two.uuid)
        self.assertEqual(len(os.listdir(os.path.join(self.server.data_dir, "store", fid_two))), 2)
        self.assertTrue((yield self.call(api, "delete_conversation", two.uuid)))
        kept = yield self.call(api, "get_source", two)  # the source stays, its conversation is gone
        self.assertEqual((kept.journalist_designation, kept.key["fingerprint"]), (two.journalist_designation, key_two))
        self.assertEqual((yield self.call(api, "get_submissions", two)), [])
        self.assertEqual((yield self.call(api, "get_replies_from_source", two)), [])
        self.assertEqual(os.listdir(os.path.join(self.server.data_dir, "store", fid_two)), [])
        response, html = yield second.get("/lookup")  # still logged in: its codename still works
        self.assertEqual(response.code, 200)
        self.assertNotIn("to the second", html)
        with self.assertRaises(WrongUUIDError):
            yield self.call(api, "delete_conversation", str(uuidlib.uuid4()))
        self.assertEqual(len((yield self.call(api, "get_submissions", one))), 1)  # the other source's untouched

        # -- deleting sources, and logging out
        self.assertTrue((yield self.call(api, "delete_source", one)))
        self.assertTrue((yield self.call(api, "delete_source_from_string", two.uuid)))
        self.assertEqual((yield self.call(api, "get_sources")), [])
        self.assertTrue((yield self.call(api, "logout")))
        with self.assertRaises(AuthError):
            yield deferToThread(api.get_sources)

        self.assertEqual(SDK_CALLS - self.called, set())
        self.assertGreaterEqual(len(SDK_CALLS), 23)
        events = [e["event"] for e in security_events(self.server)]
        self.assertIn("journalist.conversation.deleted", events)

    @inlineCallbacks
    def test_get_sources_returns_every_source_not_a_first_page(self):
        seeded = seed_sources(self.server, 260, starred_every=9)
        api = self.sdk()
        yield self.call(api, "authenticate")
        sources = yield self.call(api, "get_sources")
        self.assertEqual(sorted(s.uuid for s in sources), sorted(seeded))
        self.assertEqual(len({s.uuid for s in sources}), 260)
        self.assertTrue(all(isinstance(s, Source) and s.journalist_designation for s in sources))
