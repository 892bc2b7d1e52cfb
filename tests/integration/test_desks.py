"""Desks (issue 29): an instance with desks A and B, each with its own SVS key (made by
``deaddrop-svs init``) and one journalist. What a source sends to A is encrypted, as it
streams, to A's key only; B's journalist never lists, counts, downloads or deletes it; a source
that adds B later is read by B from then on, and only from then on."""
from __future__ import annotations

import io
import os
import sqlite3
import zipfile

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.newsroom import codenames
from deaddrop.newsroom.desks import DeskNotChosen
from deaddrop.newsroom.encryption import EncryptedPart
from tests._support import (
    ApiClient, add_journalist, issue_client_cert, kill_gpg_agent, security_events, short_tempdir,
    start_journalist_server,
)
from tests._svs_helpers import run_cli as run_svs
from tests.integration.test_admin_cli import run_cli as run_admin

FIVE_MB = 5 * 1000 * 1000


def db_rows(server, sql: str, *args):
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
    try:
        with conn:
            return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


class Station:
    """A desk's own SVS (``deaddrop-svs --home H init``), and what its ``decrypt`` makes of files."""

    def __init__(self, testcase: unittest.TestCase) -> None:
        self.home = short_tempdir("dd-desk-svs-")
        os.rmdir(self.home)  # init makes it, private
        testcase.addCleanup(kill_gpg_agent, os.path.join(self.home, "gnupg"))
        code, out, err = run_svs("--home", self.home, "init")
        assert code == 0, err
        self.public_key = os.path.join(self.home, "submission-public.asc")

    def decrypt(self, files: dict[str, bytes]) -> tuple[dict[str, bytes], str]:
        """``files`` (server names -> ciphertext) decrypted: -> (plaintexts by output name, stderr)."""
        inbox, out = short_tempdir("dd-inbox-"), short_tempdir("dd-plain-")
        os.rmdir(out)
        folder = os.path.join(inbox, "source")
        os.mkdir(folder)
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        code, _, err = run_svs("--home", self.home, "decrypt", inbox, "--out", out)
        found = {}
        for dirpath, _, names in os.walk(out):
            for name in names:
                with open(os.path.join(dirpath, name), "rb") as f:
                    found[name] = f.read()
        return found, err


class TwoDesks(unittest.TestCase):
    timeout = 240

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_journalist_server(self)
        self.newsroom = self.server.service.newsroom
        self.desk = self.server.service.desk
        self.a, self.b = yield deferToThread(lambda: (Station(self), Station(self)))
        data = ("--data-dir", self.server.data_dir)
        for name, station in (("A", self.a), ("B", self.b)):
            code, out, err = yield deferToThread(run_admin, "desk", "add", name, "--key", station.public_key, *data)
            self.assertEqual(code, 0, err)
        self.alice = yield add_journalist(self.server, "alice")
        self.bob = yield add_journalist(self.server, "bob")
        for desk, member in (("A", "alice"), ("B", "bob")):
            code, _, err = yield deferToThread(run_admin, "desk", "members", desk, "--add", member, *data)
            self.assertEqual(code, 0, err)
        code, _, err = yield deferToThread(run_admin, "desk", "members", "Newsroom", "--remove", "alice",
                                           "--remove", "bob", *data)
        self.assertEqual(code, 0, err)
        yield self.newsroom.desks.reload()  # the server re-reads desks every few seconds; now
        self.desk_a = next(d for d in self.newsroom.desks.all() if d.name == "A")
        self.desk_b = next(d for d in self.newsroom.desks.all() if d.name == "B")
        self.alice_id = (yield self.server.service.accounts.by_uuid(self.alice.uuid)).id
        self.bob_id = (yield self.server.service.accounts.by_uuid(self.bob.uuid)).id

    @inlineCallbacks
    def new_source(self, *desks):
        codename = codenames.generate_codename(7)
        identity, passphrase = yield self.newsroom.create_source(codename)
        identity = yield self.newsroom.add_desks(identity, [d.uuid for d in desks])
        return identity, passphrase

    @inlineCallbacks
    def send(self, identity, passphrase, message: str, document: bytes | None = None):
        """A submission as /submit makes it: the message and the file encrypted as they stream."""
        parts = [(yield self.newsroom.submissions.encrypt_message(identity, message))]
        if document is not None:
            stream = self.newsroom.submissions.encrypt_stream(gzip_name="report.bin", compress=False,
                                                              on_pause=lambda: None, on_resume=lambda: None,
                                                              identity=identity)
            for offset in range(0, len(document), 1 << 20):
                stream.write(document[offset:offset + (1 << 20)])
            size = yield stream.finish()
            parts.append(EncryptedPart("doc", stream.out_path, size))
        names = yield self.newsroom.submissions.commit(identity, parts, passphrase)
        return names

    @inlineCallbacks
    def downloads(self, reader: int, uuid: str):
        """Every submission of source ``uuid`` that ``reader`` may download: name -> ciphertext."""
        source = yield self.desk.source(reader, uuid)
        found = {}
        for item in (yield self.desk.submissions(source)):
            download = yield self.desk.open_submission(source, item, reader)
            try:
                found[item.filename] = download.file.read()
            finally:
                download.close()
        return found

    def uuid_of(self, identity) -> str:
        return db_rows(self.server, "SELECT uuid FROM sources WHERE id = ?", identity.source_id)[0][0]


class ChosenDeskTests(TwoDesks):
    @inlineCallbacks
    def test_a_source_choosing_a_is_read_by_a_alone(self):
        # The digest counts per journalist what their desks receive.
        for journalist in (self.alice_id, self.bob_id):
            db_rows(self.server, "INSERT INTO digest_recipients(journalist_id, email, public_key, fingerprint)"
                                 " VALUES (?, 'x@example.org', 'k', 'f')", journalist)
        identity, passphrase = yield self.new_source(self.desk_a)
        document = os.urandom(FIVE_MB)
        yield self.send(identity, passphrase, "for desk A only", document)
        uuid = self.uuid_of(identity)

        # A's journalist lists it and downloads both; A's SVS decrypts both, B's cannot.
        listed, total = yield self.desk.sources(self.alice_id)
        self.assertEqual(([s.uuid for s in listed], total), ([uuid], 1))
        self.assertEqual((listed[0].messages, listed[0].documents, listed[0].unread), (1, 1, 2))
        files = yield self.downloads(self.alice_id, uuid)
        self.assertEqual(len(files), 2)
        plain, err = yield deferToThread(self.a.decrypt, files)
        self.assertEqual(plain, {"1-msg.txt": b"for desk A only", "report.bin": document}, err)
        plain, err = yield deferToThread(self.b.decrypt, files)
        self.assertEqual(plain, {})
        self.assertEqual(err.count("belongs to another desk"), 2, err)
        self.assertRegex(err, r"encrypted to key [0-9A-F]{16}\): it belongs to another desk, .*; decrypt it on the "
                              r"SVS that holds that key")

        # B's journalist: no such source, nothing listed, counted or downloadable.
        self.assertIsNone((yield self.desk.source(self.bob_id, uuid)))
        self.assertEqual((yield self.desk.sources(self.bob_id)), ([], 0))
        self.assertEqual((yield self.desk.all_submissions(self.bob_id)), [])
        self.assertEqual((yield self.desk.sources_among(self.bob_id, [uuid])), [])
        self.assertEqual((yield self.desk.sources_by_id(self.bob_id, 0, 100)), [])
        submission = (yield self.desk.all_submissions(self.alice_id))[0]
        with self.assertRaises(Exception):
            yield self.desk.mark_seen(self.bob_id, [submission.uuid], [])
        # The digest: A's journalist counts one new source and two submissions, B's nothing.
        counts = dict((j, (s, n)) for j, s, n in db_rows(
            self.server, "SELECT journalist_id, new_submissions, new_sources FROM digest_recipients"))
        self.assertEqual(counts, {self.alice_id: (2, 1), self.bob_id: (0, 0)})

        # A zip for A holds both, still encrypted to A's key.
        source = yield self.desk.source(self.alice_id, uuid)
        chosen = [i.uuid for i in (yield self.desk.submissions(source))]
        download = yield self.desk.zip_submissions(source, chosen, self.alice_id)
        with zipfile.ZipFile(io.BytesIO(download.file.read())) as z:
            self.assertEqual(len(z.namelist()), 2)
        download.close()

    @inlineCallbacks
    def test_over_the_api_b_gets_404_for_a_s_source_exactly_as_for_none(self):
        identity, passphrase = yield self.new_source(self.desk_a)
        yield self.send(identity, passphrase, "for A over the API")
        uuid = self.uuid_of(identity)
        [submission] = yield self.desk.all_submissions(self.alice_id)
        answers = {}
        for name, account in (("alice", self.alice), ("bob", self.bob)):
            api = ApiClient(self.server, issue_client_cert(self.server, name))
            self.addCleanup(api.close)
            yield api.log_in(account)
            answers[name] = {}
            for path in (f"/api/v1/sources/{uuid}", f"/api/v1/sources/{uuid}/submissions",
                         f"/api/v1/sources/{uuid}/submissions/{submission.uuid}/download"):
                response, body = yield api.request("GET", path)
                other = path.replace(uuid, "00000000-0000-4000-8000-000000000000")
                none_response, none_body = yield api.request("GET", other)
                answers[name][path] = (response.code, body, none_response.code, none_body)
            status, listed = yield api.json("GET", "/api/v1/sources")
            answers[name]["list"] = [s["uuid"] for s in listed["sources"]]
            status, listed = yield api.json("GET", "/api/v1/submissions")
            answers[name]["submissions"] = len(listed["submissions"])
        for path, answer in answers["bob"].items():
            if path.startswith("/"):
                code, body, none_code, none_body = answer
                self.assertEqual((code, body), (none_code, none_body), path)
                self.assertEqual(code, 404)
        self.assertEqual((answers["bob"]["list"], answers["bob"]["submissions"]), ([], 0))
        self.assertEqual((answers["alice"]["list"], answers["alice"]["submissions"]), ([uuid], 1))
        self.assertEqual(answers["alice"][f"/api/v1/sources/{uuid}"][0], 200)

    @inlineCallbacks
    def test_with_two_desks_a_source_must_choose_before_it_sends(self):
        codename = codenames.generate_codename(7)
        identity, _ = yield self.newsroom.create_source(codename)
        with self.assertRaises(DeskNotChosen):
            yield self.newsroom.submissions.encrypt_message(identity, "to whom?")
        with self.assertRaises(DeskNotChosen):
            self.newsroom.submissions.encrypt_stream(gzip_name="x", compress=False, on_pause=lambda: None,
                                                     on_resume=lambda: None, identity=identity)


class AddedDeskTests(TwoDesks):
    @inlineCallbacks
    def test_a_desk_added_later_reads_what_comes_after_and_nothing_before(self):
        identity, passphrase = yield self.new_source(self.desk_a)
        [before] = yield self.send(identity, passphrase, "before B")
        identity = yield self.newsroom.add_desks(identity, [self.desk_b.uuid])
        self.assertEqual(identity.desks, (self.desk_a.id, self.desk_b.id))
        [after] = yield self.send(identity, passphrase, "after B")
        uuid = self.uuid_of(identity)

        for_alice = yield self.downloads(self.alice_id, uuid)
        for_bob = yield self.downloads(self.bob_id, uuid)
        self.assertEqual(sorted(for_alice), sorted([before, after]))
        self.assertEqual(sorted(for_bob), [after])  # what was sent before stays with A
        plain, _ = yield deferToThread(self.a.decrypt, for_alice)
        self.assertEqual(sorted(plain.values()), [b"after B", b"before B"])
        plain, _ = yield deferToThread(self.b.decrypt, for_alice)
        self.assertEqual(list(plain.values()), [b"after B"])  # the older one: A's key only

        # Replies: from the desks the journalist shares with the source, and read by them alone.
        yield self.newsroom.replies.key_ready(identity.source_id)
        yield self.desk.reply_plaintext((yield self.desk.source(self.alice_id, uuid)), "from A", self.alice_id)
        self.assertEqual(len((yield self.desk.replies((yield self.desk.source(self.alice_id, uuid))))), 1)
        self.assertEqual((yield self.desk.replies((yield self.desk.source(self.bob_id, uuid)))), [])
        self.assertEqual(len((yield self.newsroom.replies.for_source(identity, passphrase))), 1)

    @inlineCallbacks
    def test_deleting_is_per_desk_what_another_desk_was_sent_stays(self):
        identity, passphrase = yield self.new_source(self.desk_a)
        [before] = yield self.send(identity, passphrase, "before B")
        identity = yield self.newsroom.add_desks(identity, [self.desk_b.uuid])
        [after] = yield self.send(identity, passphrase, "after B")
        uuid = self.uuid_of(identity)
        fid = identity.filesystem_id
        store = self.newsroom.store

        # B deletes the source: it leaves B; A keeps it and all it sent, files included.
        self.assertTrue((yield self.desk.delete_source((yield self.desk.source(self.bob_id, uuid)))))
        self.assertIsNone((yield self.desk.source(self.bob_id, uuid)))
        self.assertEqual(sorted((yield self.downloads(self.alice_id, uuid))), sorted([before, after]))
        self.assertTrue(os.path.exists(store.path_of(fid, after)))
        # A deletes what it was sent: no desk is left for the file, so it goes.
        source = yield self.desk.source(self.alice_id, uuid)
        items = yield self.desk.submissions(source)
        self.assertEqual((yield self.desk.delete_submissions(source, [i.uuid for i in items])), 2)
        self.assertFalse(os.path.exists(store.path_of(fid, after)))
        self.assertFalse(os.path.exists(store.path_of(fid, before)))
        # A deletes the source, now on no other desk: it goes whole, with its key and folder.
        self.assertTrue((yield self.desk.delete_source(source)))
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM sources WHERE uuid = ?", uuid), [(0,)])
        self.assertFalse(os.path.exists(store.source_dir(fid)))

    @inlineCallbacks
    def test_b_deleting_a_shared_conversation_leaves_a_s_copy(self):
        identity, passphrase = yield self.new_source(self.desk_a, self.desk_b)
        [shared] = yield self.send(identity, passphrase, "to both")
        uuid = self.uuid_of(identity)
        self.assertEqual((yield self.desk.delete_conversation((yield self.desk.source(self.bob_id, uuid)))), 1)
        self.assertEqual((yield self.downloads(self.bob_id, uuid)), {})
        self.assertEqual(list((yield self.downloads(self.alice_id, uuid))), [shared])
        self.assertTrue(os.path.exists(self.newsroom.store.path_of(identity.filesystem_id, shared)))


class DeskCommandTests(TwoDesks):
    def admin(self, *argv: str):
        return deferToThread(run_admin, "desk", *argv, "--data-dir", self.server.data_dir)

    @inlineCallbacks
    def test_list_rename_describe_and_members(self):
        code, out, err = yield self.admin("list")
        self.assertEqual(code, 0, err)
        self.assertIn(f"Newsroom (default): key {self.newsroom.submission_fingerprint}, 0 member(s)", out)
        self.assertIn(f"A: key {self.desk_a.fingerprint}, 1 member(s) (alice), 0 source(s)", out)
        code, _, err = yield self.admin("rename", "A", "B")
        self.assertEqual((code, err.strip()), (1, "deaddrop-admin: error: there is already a desk named 'B'"))
        code, out, err = yield self.admin("rename", "A", "Investigations")
        self.assertEqual(code, 0, err)
        code, out, err = yield self.admin("describe", "Investigations", "--lang", "es", "--title", "Investigación",
                                          "--description", "Para documentos.")
        self.assertEqual(code, 0, err)
        code, _, err = yield self.admin("describe", "Investigations", "--lang", "xx", "--title", "?")
        self.assertEqual(code, 1)
        yield self.newsroom.desks.reload()
        desk = next(d for d in self.newsroom.desks.all() if d.id == self.desk_a.id)
        self.assertEqual((desk.name, desk.text("es", "name"), desk.text("es", "description"), desk.text("fr", "name")),
                         ("Investigations", "Investigación", "Para documentos.", "Investigations"))
        code, out, _ = yield self.admin("members", "B", "--add", "alice")
        self.assertEqual(out.strip(), "B: alice, bob")
        # A name given with a line separator (kept as a space) finds its desk as it was given.
        code, out, err = yield self.admin("rename", "B", "Local\u2028News")
        self.assertEqual(code, 0, err)
        code, out, err = yield self.admin("members", "Local\u2028News")
        self.assertEqual((code, out.strip()), (0, "Local News: alice, bob"), err)
        code, out, err = yield self.admin("rename", "Local  News", "B")
        self.assertEqual(code, 0, err)
        code, _, err = yield self.admin("members", "B", "--add", "nobody")
        self.assertEqual(code, 1)
        events = [e["event"] for e in security_events(self.server)]
        for event in ("admin.desk.added", "admin.desk.renamed", "admin.desk.described", "admin.desk.member_added",
                      "admin.desk.member_removed"):
            self.assertIn(event, events)

    @inlineCallbacks
    def test_a_desk_key_is_replaced_only_with_the_flag_and_never_shared(self):
        other = yield deferToThread(Station, self)
        code, _, err = yield self.admin("key", "A", "--key", other.public_key)
        self.assertEqual(code, 1)
        self.assertIn("refusing to replace it", err)
        self.assertIn(f"has key {self.desk_a.fingerprint}", err)
        code, _, err = yield self.admin("key", "A", "--key", self.b.public_key, "--replace-key")
        self.assertEqual(code, 1)
        self.assertIn("is already desk 'B''s", err)
        code, _, err = yield self.admin("add", "C", "--key", os.path.join(other.home, "gnupg", "pubring.kbx"))
        self.assertEqual(code, 1)
        code, _, err = yield self.admin("key", "Newsroom", "--key", other.public_key, "--replace-key")
        self.assertIn("--replace-submission-key", err)
        code, out, err = yield self.admin("key", "A", "--key", other.public_key, "--replace-key")
        self.assertEqual(code, 0, err)
        [event] = [e for e in security_events(self.server) if e["event"] == "admin.desk.key_replaced"]
        self.assertEqual(event["target"], "A")
        self.assertIn(self.desk_a.fingerprint, event["detail"])
        # New submissions to A go to the new key at once the server has re-read desks.
        yield self.newsroom.desks.reload()
        identity, passphrase = yield self.new_source(self.newsroom.desks.by_id(self.desk_a.id))
        [name] = yield self.send(identity, passphrase, "after the new key")
        files = yield self.downloads(self.alice_id, self.uuid_of(identity))
        plain, _ = yield deferToThread(other.decrypt, files)
        self.assertEqual(list(plain.values()), [b"after the new key"])

    @inlineCallbacks
    def test_a_desk_with_sources_or_the_default_desk_is_not_removed(self):
        identity, passphrase = yield self.new_source(self.desk_b)
        yield self.send(identity, passphrase, "keep my desk")
        code, _, err = yield self.admin("remove", "B")
        self.assertEqual(code, 1)
        self.assertIn("still has 1 source(s)", err)
        code, _, err = yield self.admin("remove", "Newsroom")
        self.assertIn("is the default desk", err)
        code, out, err = yield self.admin("remove", "A")
        self.assertEqual((code, out.strip()), (0, "removed desk A"), err)
        yield self.newsroom.desks.reload()
        self.assertEqual([d.name for d in self.newsroom.desks.all()], ["Newsroom", "B"])

    @inlineCallbacks
    def test_status_lists_each_desk_s_key_and_members(self):
        from deaddrop.admin._status_commands import format_status, instance_status

        status = yield deferToThread(instance_status, self.server.data_dir)
        self.assertEqual([(d["name"], d["fingerprint"], d["members"]) for d in status["desks"]], [
            ("Newsroom", self.newsroom.submission_fingerprint, 0), ("A", self.desk_a.fingerprint, 1),
            ("B", self.desk_b.fingerprint, 1)])
        self.assertIn(f"A: key {self.desk_a.fingerprint}, 1 member(s), 0 source(s)", format_status(status))


class RetentionTests(TwoDesks):
    @inlineCallbacks
    def test_a_desk_s_own_retention_deletes_what_it_alone_keeps(self):
        code, _, err = yield deferToThread(run_admin, "desk", "set", "B", "--retention-days", "30",
                                           "--data-dir", self.server.data_dir)
        self.assertEqual(code, 0, err)
        only_a, p1 = yield self.new_source(self.desk_a)
        only_b, p2 = yield self.new_source(self.desk_b)
        both, p3 = yield self.new_source(self.desk_a, self.desk_b)
        for identity, passphrase in ((only_a, p1), (only_b, p2), (both, p3)):
            yield self.send(identity, passphrase, "old news")
        old = self.server.service.newsroom.clock() - 40 * 86400
        db_rows(self.server, "UPDATE submissions SET created_at = ?", old)
        db_rows(self.server, "UPDATE sources SET last_updated = ?", old)
        self.assertIsNone(self.server.service.settings.retention_days)  # the instance keeps everything
        counts = yield self.server.service.retention.run_once()
        # B's alone went, and its source with it; what A keeps (A's alone, and A's and B's) stays.
        self.assertEqual(counts, {"submissions": 1, "replies": 0, "sources": 1})
        left = {r[0] for r in db_rows(self.server, "SELECT source_id FROM submissions")}
        self.assertEqual(left, {only_a.source_id, both.source_id})
        self.assertEqual(db_rows(self.server, "SELECT COUNT(*) FROM sources WHERE id = ?", only_b.source_id), [(0,)])
