"""The journalist desk's use cases (``deaddrop.newsroom.desk``), called directly on a real server's
newsroom: what a journalist sees of sources, opens, zips, marks, answers and deletes."""
from __future__ import annotations

import io
import os
import zipfile

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom.desk import NotEncryptedToSource, NotFound
from deaddrop.store import journalist_queries as jq
from tests._support import Browser, add_journalist, start_server, test_svs


class DeskTestCase(unittest.TestCase):
    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self)
        self.desk = self.server.service.desk
        self.browsers = []
        # Everything on the desk is seen through one journalist's desks (here: the default one).
        account = yield add_journalist(self.server, "reader")
        self.reader = (yield self.server.service.accounts.by_uuid(account.uuid)).id
        self.reader_name = account.username

    @inlineCallbacks
    def tearDown(self):
        for browser in self.browsers:
            yield browser.close()

    @inlineCallbacks
    def a_source_that_sent(self, message: str = "", files: list[tuple[str, bytes]] = ()):
        """A new source that submitted ``message`` and ``files``. -> its desk view."""
        before = {s.uuid for s in (yield self.desk.sources(self.reader))[0]}
        browser = Browser(self.server.source_url)
        self.browsers.append(browser)
        yield browser.create_source()
        response, _ = yield browser.submit(message, list(files))
        self.assertEqual(response.code, 200)
        [source] = [s for s in (yield self.desk.sources(self.reader))[0] if s.uuid not in before]
        return source

    @inlineCallbacks
    def stored(self, source_id: int, filename: str):
        """Whether the store holds ``filename`` of the source ``source_id``."""
        fid = yield self.server.service.db.run(jq.source_filesystem_id, source_id)
        return os.path.exists(self.server.service.newsroom.store.path_of(fid, filename))

    @inlineCallbacks
    def encrypted_to(self, fingerprints: list[str], plaintext: bytes):
        newsroom = self.server.service.newsroom
        armored = yield newsroom.crypto_pool.run(newsroom.keyring.encrypt, plaintext, fingerprints, armor=True)
        return armored.decode("ascii")

    @staticmethod
    def read(download) -> bytes:
        try:
            return download.file.read()
        finally:
            download.close()


class SourceListingTests(DeskTestCase):
    @inlineCallbacks
    def test_only_sources_that_submitted_are_on_the_desk_and_found_by_uuid(self):
        pending = Browser(self.server.source_url)
        self.browsers.append(pending)
        yield pending.create_source()  # made, nothing sent: not on the desk
        self.assertEqual((yield self.desk.sources(self.reader)), ([], 0))
        source = yield self.a_source_that_sent("hello desk")
        listed, total = yield self.desk.sources(self.reader)
        self.assertEqual(([s.uuid for s in listed], total), ([source.uuid], 1))
        self.assertEqual((yield self.desk.source(self.reader, source.uuid)).designation, source.designation)
        self.assertEqual(source.messages, 1)
        self.assertIsNone((yield self.desk.source(self.reader, "not a uuid")))
        self.assertIsNone((yield self.desk.source(self.reader, "00000000-0000-4000-8000-000000000000")))

    @inlineCallbacks
    def test_starring_and_deleting_a_source(self):
        source = yield self.a_source_that_sent("star me")
        yield self.desk.set_starred(source, True)
        self.assertTrue((yield self.desk.source(self.reader, source.uuid)).is_starred)
        yield self.desk.delete_source(source)
        self.assertIsNone((yield self.desk.source(self.reader, source.uuid)))
        self.assertEqual((yield self.desk.sources(self.reader)), ([], 0))


class SubmissionTests(DeskTestCase):
    @inlineCallbacks
    def test_opening_a_submission_streams_its_ciphertext_and_marks_it_read(self):
        source = yield self.a_source_that_sent("a message for the desk")
        [item] = yield self.desk.submissions(source)
        self.assertTrue(item.is_message)
        self.assertFalse(item.is_read)
        download = yield self.desk.open_submission(source, item, None)
        self.assertEqual((download.filename, download.size), (item.filename, item.size))
        self.assertEqual(len(download.sha256), 64)  # hashed once, for its ETag
        self.assertEqual(test_svs().decrypt(self.read(download)), b"a message for the desk")
        self.assertTrue((yield self.desk.submission(source, item.uuid)).is_read)
        self.assertIsNone((yield self.desk.submission(source, "no-such-uuid")))

    @inlineCallbacks
    def test_a_zip_holds_the_unread_submissions_still_encrypted_and_marks_them_read(self):
        source = yield self.a_source_that_sent("zip me", [("notes.txt", b"a document " * 100)])
        items = yield self.desk.submissions(source)
        self.assertEqual(sorted(i.kind for i in items), ["doc", "msg"])
        download = yield self.desk.zip_submissions(source, None, None)
        self.assertEqual(download.filename, f"{source.folder_name}.zip")
        with zipfile.ZipFile(io.BytesIO(self.read(download))) as z:
            self.assertEqual(sorted(z.namelist()), sorted(f"{source.folder_name}/{i.filename}" for i in items))
            [message] = [i for i in items if i.is_message]
            self.assertEqual(test_svs().decrypt(z.read(f"{source.folder_name}/{message.filename}")), b"zip me")
        self.assertEqual(os.listdir(self.server.service.newsroom.store.tmp), [])  # built, opened, unlinked
        self.assertIsNone((yield self.desk.zip_submissions(source, None, None)))  # nothing unread left

    @inlineCallbacks
    def test_marking_submissions_read_and_unread_again(self):
        account = yield add_journalist(self.server, "dana")
        journalist = (yield self.server.service.accounts.by_uuid(account.uuid)).id
        source = yield self.a_source_that_sent("mark me", [("a.txt", b"a")])
        items = yield self.desk.submissions(source)
        self.assertEqual((yield self.desk.mark_submissions(source, [i.uuid for i in items], journalist, True)), 2)
        self.assertEqual([(i.is_read, i.seen_by) for i in (yield self.desk.submissions(source))],
                         [(True, (account.uuid,))] * 2)
        self.assertEqual((yield self.desk.mark_sources([source], journalist, False)), 2)
        self.assertFalse(any(i.is_read for i in (yield self.desk.submissions(source))))
        with self.assertRaises(NotFound):  # all or nothing
            yield self.desk.mark_seen(journalist, [items[0].uuid, "no-such-uuid"], [])
        self.assertFalse(any(i.is_read for i in (yield self.desk.submissions(source))))

    @inlineCallbacks
    def test_deleting_submissions_removes_their_files_and_keeps_the_source(self):
        source = yield self.a_source_that_sent("delete me", [("a.txt", b"a")])
        message, document = sorted((yield self.desk.submissions(source)), key=lambda i: i.kind != "msg")
        self.assertEqual((yield self.desk.delete_submissions(source, [message.uuid, "not a uuid"])), 1)
        self.assertFalse((yield self.stored(source.id, message.filename)))
        self.assertEqual([i.uuid for i in (yield self.desk.submissions(source))], [document.uuid])
        self.assertEqual((yield self.desk.delete_conversation(source)), 1)
        self.assertFalse((yield self.stored(source.id, document.filename)))
        self.assertEqual((yield self.desk.submissions(source)), [])
        self.assertIsNotNone((yield self.desk.source(self.reader, source.uuid)))  # the conversation can start again


class ReplyTests(DeskTestCase):
    @inlineCallbacks
    def test_a_plaintext_reply_is_stored_encrypted_listed_and_deleted(self):
        source = yield self.a_source_that_sent("answer me")
        yield self.server.service.newsroom.replies.key_ready(source.id)
        yield self.desk.reply_plaintext(source, "REPLY-FROM-THE-DESK", self.reader)
        [reply] = yield self.desk.replies(source)
        self.assertEqual(reply.journalist_username, self.reader_name)
        ciphertext = self.read((yield self.desk.open_reply(source, reply, None)))
        self.assertNotIn(b"REPLY-FROM-THE-DESK", ciphertext)
        self.assertEqual(test_svs().decrypt(ciphertext), b"REPLY-FROM-THE-DESK")  # the submission key too
        self.assertTrue((yield self.desk.delete_reply(source, reply.uuid)))
        self.assertFalse((yield self.stored(source.id, reply.filename)))
        self.assertEqual((yield self.desk.replies(source)), [])
        self.assertFalse((yield self.desk.delete_reply(source, reply.uuid)))

    @inlineCallbacks
    def test_an_encrypted_reply_must_be_one_armored_message_to_the_source_s_key(self):
        source = yield self.a_source_that_sent("answer me encrypted")
        yield self.server.service.newsroom.replies.key_ready(source.id)
        source = yield self.desk.source(self.reader, source.uuid)  # now with its key
        for refused in ("plain words", "-----BEGIN PGP MESSAGE-----\n\nnot base64 !\n-----END PGP MESSAGE-----", 42):
            with self.assertRaises(NotEncryptedToSource):
                yield self.desk.reply_encrypted(source, refused, None, self.reader)
        # A real message, but to the submission key alone: not readable by the source.
        to_svs_only = yield self.encrypted_to([self.server.service.newsroom.submission_fingerprint], b"not for you")
        with self.assertRaises(NotEncryptedToSource):
            yield self.desk.reply_encrypted(source, to_svs_only, None, self.reader)
        self.assertEqual((yield self.desk.replies(source)), [])
        to_source = yield self.encrypted_to([source.key_fingerprint], b"for the source")
        row = yield self.desk.reply_encrypted(source, to_source, None, self.reader)
        [reply] = yield self.desk.replies(source)
        self.assertEqual(reply.filename, row["filename"])
