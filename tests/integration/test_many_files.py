"""Issue 27, item 1: one submission carries any number of files, each stored and decryptable.

The form's file field has ``multiple``: a browser sends every chosen file as a part of one
body. That body takes one upload slot, whatever the number of its files; a bound on the number
of files (which keeps one body's work bounded) is refused with its own true reason and counted
for the admin's day report.
"""
from __future__ import annotations

import os

from twisted.internet.defer import inlineCallbacks

from deaddrop.web.source.pages import MAX_FILES
from tests._support import wait_until
from tests.integration.test_large_uploads import decrypt_documents
from tests.integration.test_source_flow import stored_files
from tests.integration.test_source_pages import _SourceServerTest


def files_named(prefix: str, count: int) -> list[tuple[str, bytes]]:
    """``count`` files of different sizes and contents (the first two bytes only, as reported)."""
    return [(f"{prefix}-{i}.txt", b"%d" % i if i < 2 else os.urandom(1000 * i)) for i in range(count)]


class ManyFilesTests(_SourceServerTest):
    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        yield self.browser.create_source()

    @inlineCallbacks
    def test_three_and_ten_files_in_one_body_are_all_stored_and_decrypt(self):
        sent: list[tuple[str, bytes]] = []
        for count in (3, 10):
            files = files_named(f"set{count}", count)
            response, html = yield self.browser.submit(f"with {count} files", files)
            self.assertEqual(response.code, 200, html[:800])
            self.assertIn(f"We received your message and {count} documents", html)
            sent += files
        self.assertEqual(sorted(decrypt_documents(self.server.data_dir)), sorted(sent))
        self.assertEqual(len([p for p in stored_files(self.server.data_dir) if p.endswith("-msg.gpg")]), 2)
        # Each body held one slot while it arrived, and gave it back.
        uploads = self.server.service.newsroom.queues.uploads
        self.assertEqual(uploads.admission.running, 0)

    @inlineCallbacks
    def test_more_files_than_one_submission_takes_is_refused_with_that_reason_and_counted(self):
        # Parts with nothing chosen count as files too (a browser sends one when no file is
        # chosen): the bound is met without encrypting a thousand files.
        files = [("a.txt", b"a")] + [("", b"")] * MAX_FILES
        response, html = yield self.browser.submit("KEPT-TOO-MANY", files)
        self.assertEqual(response.code, 413, html[:800])
        self.assertIn(f"This drop box takes at most {MAX_FILES:,} files in one submission", html)
        self.assertIn("KEPT-TOO-MANY", html)
        self.assertNotIn("could not be read", html)
        self.assertNotIn("still being received", html)
        self.assertEqual(stored_files(self.server.data_dir), [])
        # The first file's encryption was stopped; its pump removes what it wrote.
        yield wait_until(lambda: not os.listdir(os.path.join(self.server.data_dir, "tmp")))
        activity = self.server.service.newsroom.activity.today
        self.assertEqual(activity.not_stored, 1)
        self.assertEqual(activity.failures["not stored: too_many_files"], 1)
        # As many as it takes are taken.
        response, html = yield self.browser.submit("", files[:MAX_FILES])
        self.assertEqual(response.code, 200, html[:800])
        self.assertEqual(decrypt_documents(self.server.data_dir), [("a.txt", b"a")])

    @inlineCallbacks
    def test_a_form_that_cannot_be_read_says_so_and_is_counted(self):
        response, html = yield self.browser.submit("KEPT-BAD-FORM", [("a.txt", b"a")], extra=[("unknown", "x")])
        self.assertEqual(response.code, 400, html[:800])
        self.assertIn("The form could not be read", html)
        self.assertIn("KEPT-BAD-FORM", html)
        self.assertEqual(self.server.service.newsroom.activity.today.failures["not stored: bad_form"], 1)
