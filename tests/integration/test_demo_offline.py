"""A demo without Internet access keeps serving and keeps trying Tor; production still stops.

The ten minutes offline are played on a clock in tests/test_tor.py
(``test_a_demo_offline_never_gives_up_and_says_so``); here, that the server gives the demo, and only
the demo, a Tor service that never gives up."""
from __future__ import annotations

import shutil

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.config import Config
from deaddrop.crypto.kdf import KdfCost
from deaddrop.service import build_service
from tests._support import kill_gpg_agent, short_tempdir, test_svs


class DemoTorPolicyTests(unittest.TestCase):
    @inlineCallbacks
    def test_only_a_demo_waits_for_the_tor_network_without_a_limit(self):
        for demo, limit in ((True, None), (False, 180.0)):
            data_dir = short_tempdir()
            self.addCleanup(shutil.rmtree, data_dir, True)
            self.addCleanup(kill_gpg_agent, f"{data_dir}/gnupg")
            config = Config(data_dir=data_dir, tor="launch", demo=demo, submission_key=test_svs().public_key_path,
                            source_listen="tcp:0:interface=127.0.0.1", journalist_listen="tcp:0:interface=127.0.0.1",
                            kdf_cost=KdfCost.parse("insecure-fast"))
            service = yield deferToThread(build_service, config, reactor)
            try:
                self.assertEqual(service.tor._bootstrap_timeout, limit, f"demo={demo}")
            finally:
                for close in reversed(service.closers):
                    close()
