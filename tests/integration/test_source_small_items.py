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


class EarlyRefusalLanguageTests(unittest.TestCase):
    """Refusals answered before any route runs speak the source's language (§7)."""

    timeout = 60

    @inlineCallbacks
    def setUp(self):
        from urllib.parse import urlparse

        self.server = yield start_server(self)
        self.port = urlparse(self.server.source_url).port

    def answer(self, *headers: str, method: str = "GET", extra: bytes = b"") -> "object":
        from tests._process import exchange

        head = [f"{method} / HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
        return exchange(self.port, ("\r\n".join(head) + "\r\n\r\n").encode() + extra)

    @inlineCallbacks
    def test_tor2web_413_and_431_in_the_menus_language_or_the_browsers(self):
        from twisted.internet.threads import deferToThread

        spanish = "Accept-Language: es-ES,es;q=0.9"
        response = yield deferToThread(self.answer, spanish, "X-tor2web: 1")
        self.assertEqual(response.status, 403)
        self.assertIn("Use Tor Browser", response.text)
        self.assertIn("Llegó a esta página a través de un servicio intermediario (tor2web)", response.text)
        self.assertIn('lang="es"', response.text)
        response = yield deferToThread(self.answer, "Cookie: dd_lang=ar", "Content-Length: 99999999",
                                       "Content-Type: application/x-www-form-urlencoded", method="POST")
        self.assertEqual(response.status, 413)
        self.assertIn("هذا الطلب كبير جدًا.", response.text)
        self.assertIn('dir="rtl"', response.text)
        response = yield deferToThread(self.answer, spanish, "X-Long: " + "a" * 70_000)
        self.assertEqual(response.status, 431)
        self.assertIn("Las cabeceras de la solicitud son demasiado grandes.", response.text)
        response = yield deferToThread(self.answer, "X-tor2web: 1")  # no language asked: English
        self.assertIn("Please use Tor Browser", response.text)
