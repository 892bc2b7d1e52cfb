"""How a download is streamed to a journalist (web/journalist/_files.py), on a fake request."""
from __future__ import annotations

import io

from twisted.trial import unittest
from twisted.web.test.requesthelper import DummyRequest

from deaddrop.newsroom.desk import Download
from deaddrop.web.journalist._files import FileResponse


class DownloadTurnsTests(unittest.TestCase):
    def test_a_5_mb_download_needs_few_turns_of_the_reactor(self):
        """Each turn that asks for more gets a large piece: a download is not slowed to a
        crawl when every turn also serves a flood of source-side requests."""
        data = bytes(range(256)) * (5 * 4096 + 7)  # a little over 5 MiB
        request = DummyRequest([b""])  # pulls from the producer until it is done, as a transport would
        FileResponse(Download(io.BytesIO(data), len(data), "1-doc.gz.gpg")).render(request)
        self.assertEqual(request.finished, 1)
        self.assertEqual(b"".join(request.written), data)
        # One write per time the transport asked for more.
        self.assertLessEqual(len(request.written), 6)
