"""Designations can run out only where the lists are too small, and that is never a 500."""
from __future__ import annotations

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.newsroom import codenames
from deaddrop.newsroom.codenames import WordListError
from tests._support import Browser, RunningServer, start_server


class DesignationSpaceTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_a_create_that_finds_no_free_designation_gets_a_calm_page_and_stores_nothing(self):
        server = yield start_server(self)
        self.patch(codenames, "generate_designation", lambda: "amber otter")
        first = Browser(server.source_url)
        self.addCleanup(first.close)
        yield first.create_source()
        second = Browser(server.source_url)
        self.addCleanup(second.close)
        response, html = yield second.get("/generate")
        response, html = yield second.post("/create", data={
            "codename": codenames.normalise_codename(html.split('id="codename"', 1)[1].split(">", 1)[1].split("<", 1)[0]),
            "csrf_token": second.csrf(html)})
        self.assertEqual(response.code, 503, html[:500])
        self.assertIn("No new codename can be made at the moment. Nothing was stored.", html)
        self.assertEqual(response.headers.getRawHeaders(b"retry-after"), [b"3600"])
        self.assertEqual([c.name for c in second.cookies if c.name == "dd_source" and len(c.value) > 43], [])
        failures = server.service.newsroom.activity.today.failures
        self.assertEqual(failures, {"no free designation: the designation lists are too small": 1})

    @inlineCallbacks
    def test_the_server_refuses_to_start_with_lists_too_small_for_its_sources(self):
        server = RunningServer(self)
        self.addCleanup(server.cleanup)
        yield server.start()
        browser = Browser(server.source_url)
        yield browser.create_source()
        yield browser.close()
        yield server.stop()
        space = codenames.designation_space()
        self.patch(codenames, "DESIGNATIONS_PER_SOURCE", space + 1)  # one source needs more than there are
        again = RunningServer(self, data_dir=server.data_dir)
        with self.assertRaises(WordListError) as caught:
            yield again.start()
        self.assertIn(f"make {space:,} designations; this instance holds 1 sources and needs at least "
                      f"{space + 1:,}", str(caught.exception))
