"""The streaming multipart parser, fed byte by byte and chunk by chunk, with in-memory sinks."""
from twisted.internet.defer import succeed
from twisted.trial import unittest

from deaddrop.web._common.upload import REASON_TOO_MANY_FILES, MultipartUpload, UploadError, UploadLimits

BOUNDARY = b"----xyzBOUNDARY"


class MemorySink:
    def __init__(self, name):
        self.name, self.data, self.out_path, self.plaintext_size = name, bytearray(), f"/nonexistent/{name}", 0
        self.aborted = self.finished = False

    def write(self, data):
        self.data += data
        self.plaintext_size += len(data)

    def finish(self):
        self.finished = True
        return succeed(len(self.data))

    def abort(self):
        self.aborted = True


def body(parts, boundary=BOUNDARY, close=True):
    out = b""
    for headers, content in parts:
        out += b"--" + boundary + b"\r\n" + headers + b"\r\n\r\n" + content + b"\r\n"
    return out + (b"--" + boundary + b"--\r\n" if close else b"")


def field(name, value):
    return (b'Content-Disposition: form-data; name="' + name + b'"', value)


def file(name, filename, content):
    return (b'Content-Disposition: form-data; name="' + name + b'"; filename="' + filename + b'"\r\n'
            b"Content-Type: application/octet-stream", content)


class UploadTests(unittest.TestCase):
    limits = UploadLimits(max_file_bytes=10_000, text_fields={"csrf_token": 100, "msg": 1000},
                          file_fields=frozenset({"fh"}), max_parts=8)

    def run_upload(self, raw, chunk=None, limits=None):
        sinks, paused = [], []

        def open_sink(name, pause, resume):
            sinks.append(MemorySink(name))
            return sinks[-1]

        upload = MultipartUpload(BOUNDARY, limits or self.limits, open_sink, lambda: paused.append(1), lambda: None)
        step = chunk or len(raw) or 1
        for i in range(0, len(raw), step):
            upload.feed(raw[i:i + step])
        upload.end()
        results = []
        upload.result.addBoth(results.append)
        return results[0], sinks

    def test_fields_and_files_arrive_whatever_the_chunking(self):
        raw = body([field(b"csrf_token", b"tok"), field(b"msg", "héllo\r\n--not a boundary".encode()),
                    file(b"fh", b"../../a.txt", b"\r\n--" + b"A" * 3000), file(b"fh", b"b.bin", b"\x00\xff" * 100)])
        for chunk in (1, 7, 64, 4096, None):
            result, sinks = self.run_upload(raw, chunk)
            self.assertFalse(hasattr(result, "value"), getattr(result, "value", None))
            self.assertEqual(result.fields, {"csrf_token": "tok", "msg": "héllo\r\n--not a boundary"})
            self.assertEqual([s.name for s in sinks], ["a.txt", "b.bin"])
            self.assertEqual(bytes(sinks[0].data), b"\r\n--" + b"A" * 3000)
            self.assertEqual(bytes(sinks[1].data), b"\x00\xff" * 100)
            self.assertTrue(all(s.finished and not s.aborted for s in sinks))
            self.assertEqual([f.plaintext_size for f in result.files], [3004, 200])

    def test_empty_file_part_is_no_file(self):
        result, sinks = self.run_upload(body([field(b"msg", b"hi"), file(b"fh", b"", b"")]))
        self.assertEqual((result.fields, result.files, sinks), ({"msg": "hi"}, [], []))

    def assertRefused(self, raw, status, limits=None):
        result, sinks = self.run_upload(raw, 13, limits)
        self.assertIsInstance(result.value, UploadError, result)
        self.assertEqual(result.value.status, status, result.value.message)
        self.assertTrue(all(s.aborted for s in sinks))
        return result.value

    def test_hostile_bodies_get_clear_4xx_and_abort_every_sink(self):
        self.assertRefused(body([file(b"fh", b"a", b"x" * 10_001)]), 413)
        self.assertRefused(body([field(b"msg", b"x" * 1001)]), 413)
        self.assertRefused(body([field(b"evil", b"x")]), 400)
        self.assertRefused(body([field(b"msg", b"a"), field(b"msg", b"b")]), 400)
        self.assertRefused(body([file(b"other", b"a", b"x")]), 400)
        self.assertRefused(body([field(b"msg", b"\xff\xfe")]), 400)
        self.assertRefused(body([field(b"msg", b"a\x00b")]), 400)
        self.assertRefused(body([file(b"fh", b"a", b"x" * 100), field(b"csrf_token", b"t")], close=False), 400)
        self.assertRefused(b"garbage without any boundary", 400)
        self.assertRefused(body([file(b"fh", b"a", b"x")] * 10), 413)
        self.assertRefused(body([(b"X-Junk: " + b"a" * 10000, b"x")]), 413)

    def test_one_file_over_the_count_is_refused_for_that_reason_before_its_first_byte(self):
        limits = UploadLimits(max_file_bytes=10_000, text_fields={"msg": 1000}, file_fields=frozenset({"fh"}),
                              max_files=3, max_parts=8)
        result, sinks = self.run_upload(body([file(b"fh", b"%d" % i, b"x") for i in range(3)]), limits=limits)
        self.assertEqual(len(result.files), 3)
        error = self.assertRefused(body([file(b"fh", b"%d" % i, b"x") for i in range(4)]), 413, limits)
        self.assertEqual(error.reason, REASON_TOO_MANY_FILES)
        result, sinks = self.run_upload(body([file(b"fh", b"%d" % i, b"x") for i in range(4)]), limits=limits)
        self.assertEqual(len(sinks), 3)  # the fourth was never opened

    def test_refused_upload_drops_the_body_without_opening_sinks(self):
        sinks = []
        upload = MultipartUpload(BOUNDARY, self.limits, lambda *a: sinks.append(1), lambda: None, lambda: None,
                                 refused=UploadError(403, "expired"))
        upload.feed(body([file(b"fh", b"a", b"x" * 100)]))
        upload.end()
        failures = []
        upload.result.addErrback(failures.append)
        self.assertEqual((sinks, failures[0].value.status), ([], 403))


class EarlyCsrfTests(unittest.TestCase):
    def run_with_token(self, raw):
        sinks = []

        def open_sink(name, pause, resume):
            sinks.append(MemorySink(name))
            return sinks[-1]

        upload = MultipartUpload(BOUNDARY, UploadTests.limits, open_sink, lambda: None, lambda: None, csrf_token="good")
        upload.feed(raw)
        upload.end()
        outcome = []
        upload.result.addBoth(outcome.append)
        return outcome[0], sinks

    def test_wrong_or_late_token_refuses_before_any_file_byte_is_encrypted(self):
        for raw in [body([field(b"csrf_token", b"bad"), file(b"fh", b"a", b"secret")]),
                    body([file(b"fh", b"a", b"secret"), field(b"csrf_token", b"good")]),
                    body([file(b"fh", b"a", b"secret")])]:
            outcome, sinks = self.run_with_token(raw)
            self.assertEqual(outcome.value.status, 403)
            self.assertEqual(sinks, [])

    def test_right_token_first_is_accepted(self):
        outcome, sinks = self.run_with_token(body([field(b"csrf_token", b"good"), file(b"fh", b"a", b"data")]))
        self.assertEqual(bytes(sinks[0].data), b"data")


class KeepTheMessageTests(unittest.TestCase):
    """Issue 11: a refused upload still gives back its text fields, and fails at the first file byte."""

    limits = UploadTests.limits

    def start(self, **kw):
        self.sinks, self.failures = [], []

        def open_sink(name, pause, resume):
            self.sinks.append(MemorySink(name))
            return self.sinks[-1]

        return MultipartUpload(BOUNDARY, self.limits, open_sink, lambda: None, lambda: None,
                               on_fail=self.failures.append, **kw)

    def test_files_refused_reads_the_message_then_fails_at_the_first_file_byte(self):
        refusal = UploadError(413, "too large", "files-too-large")
        upload = self.start(files_refused=refusal)
        head = body([field(b"csrf_token", b"tok"), field(b"msg", "kept ✓".encode())], close=False)
        upload.feed(head + b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="fh"; filename="a"\r\n\r\n')
        self.assertEqual(self.failures, [])  # a file part has started, but no byte of it yet
        upload.feed(b"x")
        self.assertEqual(self.failures, [refusal])
        self.assertEqual(upload.fields_so_far(), {"csrf_token": "tok", "msg": "kept ✓"})
        self.assertEqual(self.sinks, [])  # nothing was opened, let alone encrypted
        upload.feed(b"y" * 5000)
        self.assertEqual(len(self.failures), 1)

    def test_files_refused_without_a_file_fails_at_the_end_with_the_fields(self):
        upload = self.start(files_refused=UploadError(403, "expired", "expired"))
        upload.feed(body([field(b"msg", b"hello"), file(b"fh", b"", b"")]))
        upload.end()
        results = []
        upload.result.addErrback(results.append)
        self.assertEqual(results[0].value.reason, "expired")
        self.assertEqual(upload.fields_so_far(), {"msg": "hello"})
        self.assertEqual(self.failures, [])  # at the end, the route answers: no early answer

    def test_a_stale_token_keeps_reading_text_but_no_file(self):
        upload = self.start(csrf_token="right")
        upload.feed(body([field(b"csrf_token", b"wrong"), field(b"msg", b"still here"), file(b"fh", b"a", b"data")]))
        self.assertEqual([f.reason for f in self.failures], ["stale-form"])
        self.assertEqual(upload.fields_so_far()["msg"], "still here")
        self.assertEqual(self.sinks, [])

    def test_too_large_files_fail_once_with_the_message_kept(self):
        upload = self.start()
        upload.feed(body([field(b"msg", b"mine"), file(b"fh", b"big", b"z" * 20_000)]))
        self.assertEqual([f.reason for f in self.failures], ["files-too-large"])
        self.assertEqual(upload.fields_so_far(), {"msg": "mine"})
        self.assertTrue(all(s.aborted for s in self.sinks))  # if one was opened at all

    def test_an_upload_ended_while_its_bytes_are_counted_reads_no_further(self):
        # Counting a chunk's bytes may end this very upload (to keep the disk's reserve, see
        # source_uploads): the chunk is then dropped, not parsed into a new file.
        class Counter:
            def received(self, n):
                upload.cancel(UploadError(503, "busy", "busy"))

            def ended(self):
                pass

        upload = self.start(progress=Counter())
        upload.feed(body([field(b"msg", b"mine"), file(b"fh", b"a", b"data")]))
        self.assertEqual([f.status for f in self.failures], [503])
        self.assertEqual(self.sinks, [])
