"""The banner of scripts/demo tells the truth about the onion and its box lines up (issue 13)."""
from __future__ import annotations

import contextlib
import io
import os

from twisted.trial import unittest

from deaddrop.admin.demo_banner import banner, main


class DemoBannerTests(unittest.TestCase):
    def setUp(self):
        self.data = os.path.abspath(self.mktemp())
        os.makedirs(self.data)

    def box(self, text: str) -> list[str]:
        return [line for line in text.splitlines() if line.strip().startswith("*")]

    def test_the_box_lines_up_whatever_the_paths(self):
        for demo in ["./deaddrop-demo", "/a/much/longer/path/to/the/demo/folder/than/the/default/one"]:
            box = self.box(banner(self.data, demo, []))
            self.assertEqual(len(box), 5)
            self.assertEqual(len({len(line) for line in box}), 1, box)
            self.assertTrue(all(line.rstrip().endswith("*") for line in box))
            self.assertIn(demo + "/svs", "".join(box))

    def test_no_onion_file_is_named_with_tor_none(self):
        for argv in (["--tor", "none"], ["--tor=none"]):
            text = banner(self.data, "./demo", argv)
            self.assertNotIn("source-onion.txt", text)
            self.assertIn("not published (--tor none", text)

    def test_before_the_onion_file_exists_it_says_so_and_after_it_shows_the_address(self):
        text = banner(self.data, "./demo", [])
        self.assertIn("once Tor has published it", text)
        self.assertNotRegex(text, r"onion in \S+source-onion.txt\)")
        address = "a" * 56 + ".onion"
        with open(os.path.join(self.data, "source-onion.txt"), "w") as f:
            f.write(address + "\n")
        text = banner(self.data, "./demo", [])
        self.assertIn(f"Source onion:         http://{address}/", text)
        # Printed before this run's Tor has published it: the address is known, not yet reachable.
        self.assertIn("not reachable yet: Tor must first reach the Tor network, which needs Internet", text)
        self.assertIn("keeps serving on 127.0.0.1 and Tor keeps trying", text)

    def test_the_address_is_shown_as_soon_as_its_key_exists(self):
        # The key (tor.onion.key_created) is made before Tor has published anything: the address
        # is known then, and the banner shows it, saying it is not reachable yet.
        from deaddrop.tor import keys

        key, _ = keys.load_or_create_onion_key(keys.service_dir(self.data, keys.SOURCE))
        text = banner(self.data, "./demo", [])
        self.assertIn(f"Source onion:         http://{key.address}/\n", text)
        self.assertIn("(not reachable yet: Tor has not published it)", text)
        self.assertNotIn("once Tor has published it", text)
        self.assertIn("keeps serving on 127.0.0.1 and Tor keeps trying", text)

    def test_it_names_the_ca_to_trust_next_to_the_certificate(self):
        text = " ".join(banner(self.data, "./demo", []).split())
        self.assertIn("import ./demo/demo.p12 as your certificate", text)
        self.assertIn(f"import {self.data}/ca/ca.pem as an authority trusted to identify websites", text)
        self.assertIn("ERR_CERT_AUTHORITY_INVALID", text)

    def test_listen_options_are_reflected(self):
        text = banner(self.data, "./demo", ["--source-listen", "tcp:9080:interface=127.0.0.1",
                                            "--journalist-listen=tcp:9443:interface=10.8.0.1"])
        self.assertIn("Source interface:     http://127.0.0.1:9080", text)
        self.assertIn("Journalist interface: https://10.8.0.1:9443", text)

    def test_the_journalist_interface_on_loopback_is_shown_by_name(self):
        # The demo's certificate names localhost; security keys refuse https://127.0.0.1:8443.
        text = banner(self.data, "./demo", [])
        self.assertIn("Journalist interface: https://localhost:8443", text)
        self.assertNotIn("https://127.0.0.1", text)

    def test_the_printed_paths_hold_from_wherever_the_demo_was_started(self):
        # scripts/demo runs from the checkout and passes ./deaddrop-data; its user may have typed
        # deaddrop/scripts/demo from the folder above, where ./deaddrop-demo/demo.p12 is not.
        checkout = os.path.dirname(self.data)
        demo = os.path.join(checkout, "deaddrop-demo")
        os.makedirs(demo)
        out = io.StringIO()
        cwd = os.getcwd()
        os.chdir(checkout)
        try:
            with contextlib.redirect_stdout(out):
                self.assertEqual(main([f"./{os.path.basename(self.data)}", "./deaddrop-demo"]), 0)
        finally:
            os.chdir(cwd)
        text = " ".join(out.getvalue().split())
        self.assertIn(f"import {demo}/demo.p12 as your certificate", text)
        self.assertIn(f"import {self.data}/ca/ca.pem as an authority", text)
        self.assertNotIn(" ./", text)
