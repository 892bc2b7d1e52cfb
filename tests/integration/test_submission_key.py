"""The submission key is the instance's identity: kept from the first start, a different one
refused unless --replace-submission-key, which is a security event and a line of status."""
from __future__ import annotations

import json
import os
import subprocess

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.config import ConfigError
from tests._support import RunningServer, kill_gpg_agent, security_events, short_tempdir, test_svs
from tests.integration.test_admin_cli import run_cli


def another_svs_key(testcase: unittest.TestCase) -> tuple[str, str]:
    """A second SVS key pair's public key: (path, fingerprint)."""
    home = short_tempdir("dd-svs2-")
    testcase.addCleanup(kill_gpg_agent, home)
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key", "Another SVS",
                    "future-default", "default", "never"], check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--homedir", home, "--with-colons", "--list-keys"], check=True,
                             capture_output=True, text=True).stdout
    fingerprint = listing.split("fpr:::::::::")[1].split(":")[0]
    path = os.path.join(home, "new-public.asc")
    with open(path, "wb") as f:
        f.write(subprocess.run(["gpg", "--homedir", home, "--armor", "--export", fingerprint], check=True,
                               capture_output=True).stdout)
    return path, fingerprint


def keyring_fingerprints(data_dir: str) -> str:
    return subprocess.run(["gpg", "--homedir", os.path.join(data_dir, "gnupg"), "--with-colons", "--list-keys"],
                          capture_output=True, text=True).stdout


class SubmissionKeyIdentityTests(unittest.TestCase):
    timeout = 120

    @inlineCallbacks
    def start(self, data_dir: str, **overrides):
        server = RunningServer(self, data_dir=data_dir, **overrides)
        yield server.start()
        self.addCleanup(server.stop)
        return server

    @inlineCallbacks
    def test_kept_from_the_first_start_and_a_different_key_refused_unless_replaced(self):
        first = yield self.start(short_tempdir())
        data_dir = first.data_dir
        self.addCleanup(first.cleanup)
        yield first.stop()

        # No --submission-key needed once the data dir holds one.
        again = yield self.start(data_dir, submission_key=None)
        self.assertEqual(again.service.status_file.snapshot()["submission_key_fingerprint"], test_svs().fingerprint)
        yield again.stop()

        # A different key: refused, and it never reaches the keyring.
        other, other_fingerprint = another_svs_key(self)
        refused = RunningServer(self, data_dir=data_dir, submission_key=other)
        with self.assertRaises(ConfigError) as caught:
            yield refused.start()
        message = str(caught.exception)
        for part in (other_fingerprint, test_svs().fingerprint, "refusing to replace it", "--replace-submission-key"):
            self.assertIn(part, message)
        self.assertNotIn(other_fingerprint, keyring_fingerprints(data_dir))
        kill_gpg_agent(os.path.join(data_dir, "gnupg"))
        self.assertEqual([e for e in security_events(again) if e["event"] == "admin.submission_key.replaced"], [])

        # With the flag: replaced, logged as a security event, shown by status, and kept from then on.
        replaced = yield self.start(data_dir, submission_key=other, replace_submission_key=True)
        [event] = [e for e in security_events(replaced) if e["event"] == "admin.submission_key.replaced"]
        self.assertEqual(event["fingerprint"], other_fingerprint)
        self.assertIn(f"replaced {test_svs().fingerprint}", event["detail"])
        code, out, err = yield deferToThread(run_cli, "--json", "status", "--data-dir", data_dir)
        self.assertEqual(code, 0, [c for c in json.loads(out)["checks"] if not c["ok"]])
        [entry] = json.loads(out)["submission_key_replacements"]
        self.assertEqual((entry["previous"], entry["fingerprint"]), (test_svs().fingerprint, other_fingerprint))
        code, out, err = yield deferToThread(run_cli, "status", "--data-dir", data_dir)
        self.assertIn(f"Key replaced:     {entry['date']}, was {test_svs().fingerprint}", out)
        yield replaced.stop()
        kept = yield self.start(data_dir, submission_key=None)
        self.assertEqual(kept.service.status_file.snapshot()["submission_key_fingerprint"], other_fingerprint)
        with open(os.path.join(data_dir, "submission-key.asc")) as a, open(other) as b:
            self.assertEqual(a.read(), b.read())

    def test_the_flag_needs_a_key(self):
        from deaddrop.config import Config

        with self.assertRaises(ConfigError) as caught:
            Config(data_dir=short_tempdir(), tor="none", replace_submission_key=True).validated()
        self.assertIn("--replace-submission-key needs --submission-key", str(caught.exception))
