"""Issue 28, item 3: a source's submission is one use case, stored whole or not at all.

``Submissions.submit`` encrypts the message, commits it with the files that were encrypted as
they streamed in, and discards every part on every failure; /submit answers each outcome through
the source interface's one table. Here every way a submission can fail is made to happen, once
through the newsroom itself and once through /submit, and DATA/tmp is empty after each: no
ciphertext of a submission that was not stored outlives its answer.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from typing import Any

from twisted.internet.defer import fail, inlineCallbacks
from twisted.trial import unittest

from deaddrop.admission.queues import Busy
from deaddrop.crypto.streaming import EncryptionFailed, EncryptionTarget
from deaddrop.newsroom import codenames
from deaddrop.newsroom.identity import SourceNotFound
from deaddrop.newsroom.submissions import StorageFailed, Stored
from deaddrop.web._common.upload import UploadedFile
from deaddrop.web.source import _answers, pages, uploads
from tests._support import Browser, multipart_body, short_tempdir, start_server, wait_until
from tests.integration.test_large_uploads import status_and_html, throttled_upload
from tests.integration.test_source_flow import stored_files

TYPED = "TYPED-MARKER-3c1d"
NOT_STORED = "The server could not store your submission. Nothing was stored."
OUT_OF_SPACE = "The server has run out of space. Nothing was stored."
CLOSED = "The newsroom has closed the conversation for this codename"


def gpg_that_fails(testcase: unittest.TestCase, on: str, no_space: bool = False) -> str:
    """A gpg that writes a little ciphertext-to-be and then dies (SIGKILL) when it is asked for
    ``--compress-algo on`` ("zlib": a message; "none": a file as it streams in), or says the disk
    is full and exits 2 with ``no_space``. Any other call is the real gpg. -> its path."""
    work = short_tempdir("dd-fake-gpg-")
    testcase.addCleanup(shutil.rmtree, work, True)
    path = os.path.join(work, "gpg")
    last_words = ('echo "gpg: writing to output failed: No space left on device" >&2; exit 2' if no_space
                  else "kill -9 $$")
    with open(path, "w") as f:
        f.write(f"""#!/bin/sh
out= algo= prev=
for a in "$@"; do
  case "$prev" in --output) out=$a ;; --compress-algo) algo=$a ;; esac
  prev=$a
done
if [ "$algo" = "{on}" ]; then
  head -c 65536 /dev/zero > "$out"
  {last_words}
fi
exec {shutil.which("gpg")} "$@"
""")
    os.chmod(path, stat.S_IRWXU)
    return path


def use_gpg(testcase: unittest.TestCase, submissions: Any, gpg: str) -> None:
    real = submissions.encrypting.target
    testcase.patch(submissions.encrypting, "target", EncryptionTarget(gpg, real.homedir, real.recipient_files))


def full_disk(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@inlineCallbacks
def tmp_emptied(testcase: unittest.TestCase, data_dir: str):
    """DATA/tmp is empty (an aborted encryption removes its file from its gpg thread: a moment)."""
    tmp = os.path.join(data_dir, "tmp")
    try:
        yield wait_until(lambda: not os.listdir(tmp), timeout=10)
    except AssertionError:
        testcase.fail(f"ciphertext left in DATA/tmp: {os.listdir(tmp)}")


class _ServerTestCase(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def setUp(self):
        self.server = yield start_server(self)
        self.newsroom = self.server.service.newsroom
        self.submissions = self.newsroom.submissions


class SubmitTests(_ServerTestCase):
    """``Submissions.submit`` itself: all of a submission, or none of it."""

    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.identity, self.passphrase = yield self.newsroom.create_source(codenames.generate_codename(7))

    @inlineCallbacks
    def streamed(self, count: int = 2):
        """Files encrypted as an upload body's are, waiting in DATA/tmp for their submission."""
        files = []
        for n in range(count):
            stream = self.submissions.encrypt_stream(gzip_name=f"f{n}.bin", compress=False,
                                                     on_pause=lambda: None, on_resume=lambda: None)
            stream.write(os.urandom(50_000))
            size = yield stream.finish()
            files.append(UploadedFile(f"f{n}.bin", stream.out_path, 50_000, size))
        self.assertEqual(len(os.listdir(os.path.join(self.server.data_dir, "tmp"))), count)
        return files

    @inlineCallbacks
    def fails_with(self, error: type[BaseException]):
        """Submit a message and two files: ``error`` is raised, and nothing is left anywhere."""
        files = yield self.streamed()
        raised = yield self.assertFailure(self.submissions.submit(self.identity, TYPED, files, self.passphrase), error)
        yield tmp_emptied(self, self.server.data_dir)
        self.assertEqual(stored_files(self.server.data_dir), [])
        return raised

    @inlineCallbacks
    def test_a_submission_is_stored_whole(self):
        files = yield self.streamed()
        stored = yield self.submissions.submit(self.identity, TYPED, files, self.passphrase)
        self.assertEqual(stored, Stored(message=True, documents=2))
        self.assertEqual(len(stored_files(self.server.data_dir)), 3)
        yield tmp_emptied(self, self.server.data_dir)

    @inlineCallbacks
    def test_gpg_dying_while_it_encrypts_the_message(self):
        use_gpg(self, self.submissions, gpg_that_fails(self, on="zlib"))
        raised = yield self.fails_with(EncryptionFailed)
        self.assertFalse(raised.disk_full)

    @inlineCallbacks
    def test_a_disk_too_full_for_gpg_to_write_the_message(self):
        use_gpg(self, self.submissions, gpg_that_fails(self, on="zlib", no_space=True))
        raised = yield self.fails_with(EncryptionFailed)
        self.assertTrue(raised.disk_full)

    @inlineCallbacks
    def test_a_disk_full_when_it_is_committed(self):
        self.patch(self.submissions.store, "place", full_disk)
        raised = yield self.fails_with(StorageFailed)
        self.assertTrue(raised.disk_full)

    @inlineCallbacks
    def test_a_source_deleted_meanwhile(self):
        yield self.newsroom.delete_source(self.identity.source_id)
        yield self.fails_with(SourceNotFound)

    @inlineCallbacks
    def test_a_full_message_queue(self):
        def busy(*args: object) -> None:
            raise Busy("messages")
        self.patch(self.submissions.encrypting.messages, "admit", busy)
        yield self.fails_with(Busy)

    @inlineCallbacks
    def test_anything_unexpected(self):
        self.patch(self.submissions, "encrypt_message", lambda *args, **kwargs: fail(RuntimeError("a bug")))
        yield self.fails_with(RuntimeError)


class SubmitRouteTests(_ServerTestCase):
    """/submit: each failure is answered as before, and leaves nothing in DATA/tmp."""

    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.browser = Browser(self.server.source_url)
        self.addCleanup(self.browser.close)
        yield self.browser.create_source()

    @inlineCallbacks
    def answered(self, status: int, says: str, files=(("memo.bin", b"x" * 300_000),), message: str = TYPED):
        """Submit ``message`` and ``files``: the page (after its redirect) has ``status`` and says
        ``says``, and DATA/tmp is empty."""
        response, html = yield self.browser.submit(message, list(files))
        self.assertEqual(response.code, status, html[:500])
        self.assertIn(says, html)
        yield tmp_emptied(self, self.server.data_dir)
        self.assertEqual(stored_files(self.server.data_dir), [])
        return response, html

    @inlineCallbacks
    def test_a_file_gpg_cannot_encrypt_as_it_streams_in(self):
        use_gpg(self, self.submissions, gpg_that_fails(self, on="none"))
        yield self.answered(500, NOT_STORED)

    @inlineCallbacks
    def test_gpg_dying_on_the_message_after_the_files_arrived(self):
        use_gpg(self, self.submissions, gpg_that_fails(self, on="zlib"))
        response, html = yield self.answered(500, NOT_STORED)
        self.assertIn(TYPED, html)  # the message stays in the form

    @inlineCallbacks
    def test_a_disk_too_full_for_gpg(self):
        use_gpg(self, self.submissions, gpg_that_fails(self, on="zlib", no_space=True))
        yield self.answered(507, OUT_OF_SPACE)

    @inlineCallbacks
    def test_a_disk_full_at_commit(self):
        self.patch(self.submissions.store, "place", full_disk)
        yield self.answered(507, OUT_OF_SPACE)

    @inlineCallbacks
    def test_a_source_deleted_after_its_body_arrived(self):
        encrypt = self.submissions.encrypt_message

        @inlineCallbacks
        def deleted_first(identity, *args, **kwargs):
            yield self.newsroom.delete_source(identity.source_id)
            part = yield encrypt(identity, *args, **kwargs)
            return part
        self.patch(self.submissions, "encrypt_message", deleted_first)
        response, html = yield self.answered(403, CLOSED)
        self.assertIn(TYPED, html)  # to copy

    @inlineCallbacks
    def test_a_full_message_queue(self):
        def busy(*args: object) -> None:
            raise Busy("messages")
        self.patch(self.submissions.encrypting.messages, "admit", busy)
        response, html = yield self.answered(503, "The drop box is busy")
        self.assertEqual(response.headers.getRawHeaders(b"retry-after"), [b"60"])

    @inlineCallbacks
    def test_anything_unexpected(self):
        self.patch(self.submissions, "encrypt_message", lambda *args, **kwargs: fail(RuntimeError("a bug")))
        yield self.answered(500, "Something went wrong")

    @inlineCallbacks
    def test_too_many_files(self):
        self.patch(uploads, "MAX_FILES", 2)
        self.patch(_answers, "MAX_FILES", 2)
        yield self.answered(413, "You chose too many files", files=[(f"{n}.bin", b"x" * 100_000) for n in range(3)])

    @inlineCallbacks
    def test_files_while_uploads_are_turned_off(self):
        self.server.service.settings.allow_uploads = False
        yield self.answered(400, "This drop box does not accept files at the moment")

    @inlineCallbacks
    def test_a_form_that_cannot_be_read(self):
        response, html = yield self.browser.get("/lookup")
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)), ("msg", TYPED)],
                                            [("memo.bin", b"x" * 300_000)])
        cut = body[:body.rindex(b"\r\n--")]  # no closing boundary
        response, html = yield self.browser.post("/submit", data=cut, headers={
            "User-Agent": Browser.USER_AGENT, "Content-Type": content_type})
        self.assertEqual(response.code, 400, html[:500])
        self.assertIn("The form could not be read", html)
        yield tmp_emptied(self, self.server.data_dir)
        self.assertEqual(stored_files(self.server.data_dir), [])

    @inlineCallbacks
    def test_a_form_sent_again_after_it_was_stored(self):
        response, html = yield self.browser.get("/lookup")
        token = re.search(rf'name="{pages.FORM_TOKEN_FIELD}" value="([^"]+)"', html).group(1)
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(html)), (pages.FORM_TOKEN_FIELD, token),
                                             ("msg", TYPED)], [("memo.bin", b"x" * 300_000)])
        headers = {"User-Agent": Browser.USER_AGENT, "Content-Type": content_type}
        response, first = yield self.browser.post("/submit", data=body, headers=headers)
        self.assertIn("Thank you. We received your message and 1 document", first)
        stored = stored_files(self.server.data_dir)
        response, again = yield self.browser.post("/submit", data=body, headers=headers)
        self.assertEqual(response.code, 200)
        self.assertIn("Thank you. We received your message and 1 document", again)
        yield tmp_emptied(self, self.server.data_dir)
        self.assertEqual(stored_files(self.server.data_dir), stored)  # stored once

    @inlineCallbacks
    def test_a_message_that_fills_the_box_with_line_breaks_is_stored_and_given_back_whole(self):
        # The box (maxlength) counts a line break as one character; the browser sends it as CRLF.
        full_box = ("x" * 99 + "\r\n") * (pages.MAX_MESSAGE_CHARS // 100)
        self.assertEqual(pages.message_chars(full_box), pages.MAX_MESSAGE_CHARS)
        response, html = yield self.browser.submit(full_box)
        self.assertEqual(response.code, 200, html[:500])
        self.assertIn("Thank you. We received your message", html)
        # Given back (its session ended meanwhile): every line of it in the login page's box.
        response, lookup = yield self.browser.get("/lookup")
        yield self.browser.get("/logout")
        body, content_type = multipart_body([("csrf_token", self.browser.csrf(lookup)), ("msg", full_box)],
                                            [("", b"")])
        response, html = yield self.browser.post("/submit", data=body, headers={
            "User-Agent": Browser.USER_AGENT, "Content-Type": content_type})
        self.assertIn("Nothing was stored yet: your message is kept below.", html)
        self.assertEqual(html.count("x" * 99 + "\n"), pages.MAX_MESSAGE_CHARS // 100)
        self.assertEqual(len(stored_files(self.server.data_dir)), 1)

    @inlineCallbacks
    def test_a_session_that_ended_while_the_body_arrived_and_a_form_refused(self):
        response, html = yield self.browser.get("/lookup")
        too_long = TYPED + "x" * pages.MAX_MESSAGE_CHARS
        d = throttled_upload(self.browser, html, too_long, [("memo.bin", os.urandom(2_000_000))], rate=1_000_000)
        tmp = os.path.join(self.server.data_dir, "tmp")
        yield wait_until(lambda: os.listdir(tmp))  # its file is being encrypted
        yield self.browser.get("/logout")
        upload = yield d
        status, html = status_and_html(upload.answer)
        # The login page, the message in it (nothing typed is kept on the server to redirect to).
        self.assertEqual(status, 403, html[:500])
        self.assertIn("Nothing was stored yet: your message is kept below.", html)
        self.assertIn(TYPED, html)
        yield tmp_emptied(self, self.server.data_dir)
        self.assertEqual(stored_files(self.server.data_dir), [])

    @inlineCallbacks
    def test_a_client_hanging_up_mid_body(self):
        response, html = yield self.browser.get("/lookup")
        protocols: list = []
        d = throttled_upload(self.browser, html, TYPED, [("memo.bin", os.urandom(2_000_000))], rate=400_000,
                             protocols=protocols)
        tmp = os.path.join(self.server.data_dir, "tmp")
        yield wait_until(lambda: os.listdir(tmp))  # its file is being encrypted
        protocols[0].transport.abortConnection()
        yield d
        yield tmp_emptied(self, self.server.data_dir)
        self.assertEqual(stored_files(self.server.data_dir), [])
