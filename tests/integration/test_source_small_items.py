"""Smaller source-side items of issue 17 §7."""
from __future__ import annotations

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from tests._support import Browser, start_server


class SmallItemTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_favicon_is_an_empty_answer_not_an_error_page(self):
        server = yield start_server(self)
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        response, body = yield browser.get("/favicon.ico")
        self.assertEqual((response.code, body), (204, ""))
        self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"no-store"])
