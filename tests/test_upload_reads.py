"""A multipart upload is read from the socket in large gulps, and only while it arrives."""
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial import unittest
from twisted.web.resource import Resource

from deaddrop.web._common.site import UPLOAD_READ_BYTES, BodyPolicy, DeadDropSite
from deaddrop.web._common.upload import MultipartUpload, UploadLimits
from tests.test_upload import BOUNDARY, MemorySink, body, file


class SocketTransport(StringTransport):
    """What the reactor's TCP transport exposes: a socket and the size of one recv()."""

    socket = object()
    bufferSize = 1 << 16


class UploadReadSizeTests(unittest.TestCase):
    def setUp(self):
        limits = UploadLimits(max_file_bytes=1 << 20, text_fields={}, file_fields=frozenset({"fh"}))
        self.uploads = []

        def start_upload(request, boundary, length):
            self.uploads.append(MultipartUpload(boundary, limits, lambda name, p, r: MemorySink(name),
                                                request.pause_body, request.resume_body))
            return self.uploads[-1]

        site = DeadDropSite(Resource(), body_policy=BodyPolicy(), render_error_page=lambda *a: b"error",
                            start_upload=start_upload, multipart_limit=lambda: 1 << 20, reactor=Clock())
        self.channel = site.buildProtocol(None)
        self.transport = SocketTransport()
        self.channel.makeConnection(self.transport)

    def tearDown(self):
        self.channel.connectionLost(None)

    def test_reads_widen_during_an_upload_and_narrow_after_it(self):
        raw = body([file(b"fh", b"a.bin", b"x" * 5000)])
        head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=" + BOUNDARY
                + b"\r\nContent-Length: %d\r\n\r\n" % len(raw))
        self.channel.dataReceived(head + raw[:1000])
        self.assertEqual(len(self.uploads), 1)
        self.assertEqual(self.transport.bufferSize, UPLOAD_READ_BYTES)
        self.channel.dataReceived(raw[1000:])
        self.assertEqual(self.transport.bufferSize, 1 << 16)

    def test_a_form_post_keeps_small_reads(self):
        self.channel.dataReceived(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded"
                                  b"\r\nContent-Length: 10\r\n\r\ncodename=a")
        self.assertEqual(self.transport.bufferSize, 1 << 16)
