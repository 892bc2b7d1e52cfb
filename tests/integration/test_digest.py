"""The encrypted digest mail, end to end: a real server, a real SMTP server process (aiosmtpd,
with and without STARTTLS), real gpg on both sides. Time is a ``Clock`` wherever the test
would otherwise wait for a schedule or a back-off."""
from __future__ import annotations

import email
import email.utils
import os
import re
import sqlite3
import subprocess

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.digest import mail as digest_mail
from deaddrop.digest.smtp import SmtpTarget
from deaddrop.admin import cli as admin_cli
from deaddrop.admin._status_commands import format_status, instance_status
from deaddrop.config import Config, ConfigError
from deaddrop.digest.schedule import DigestService
from tests._smtp_server import SmtpServer, throwaway_certificate
from tests._support import (
    Browser, add_journalist, kill_gpg_agent, security_events, short_tempdir, start_server, test_svs, wait_until,
)

DAY = 86400.0
SLOT = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a daily slot


def journalist_key(testcase: unittest.TestCase, name: str) -> tuple[str, str]:
    """A journalist's personal key pair: -> (their gnupg home, armored public key file)."""
    home = short_tempdir("dd-jk-")
    testcase.addCleanup(kill_gpg_agent, home)
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key", f"{name} personal",
                    "future-default", "default", "never"], check=True, capture_output=True)
    path = os.path.join(home, "public.asc")
    with open(path, "wb") as f:
        f.write(subprocess.run(["gpg", "--homedir", home, "--armor", "--export"], check=True,
                               capture_output=True).stdout)
    return home, path


def admin(*argv: str):
    return deferToThread(admin_cli.main, list(argv))


class ReadDigest:
    """One received mail, checked for RFC 3156's shape and decrypted with the journalist's key."""

    def __init__(self, testcase: unittest.TestCase, raw: bytes, gnupg_home: str) -> None:
        self.raw = raw
        msg = email.message_from_bytes(raw)
        self.headers = msg
        testcase.assertEqual(msg.get_content_type(), "multipart/encrypted")
        testcase.assertEqual(msg.get_param("protocol"), "application/pgp-encrypted")
        control, payload = msg.get_payload()
        testcase.assertEqual(control.get_content_type(), "application/pgp-encrypted")
        testcase.assertEqual(control.get_payload().strip(), "Version: 1")
        testcase.assertEqual(payload.get_content_type(), "application/octet-stream")
        self.armored = payload.get_payload().encode()
        testcase.assertTrue(self.armored.startswith(b"-----BEGIN PGP MESSAGE-----"))
        opened = subprocess.run(["gpg", "--homedir", gnupg_home, "--batch", "--decrypt"], input=self.armored,
                                capture_output=True)
        testcase.assertEqual(opened.returncode, 0, opened.stderr)
        inner = email.message_from_bytes(opened.stdout)
        testcase.assertEqual(inner.get_content_type(), "text/plain")
        self.text = inner.get_payload()

    def count(self, what: str) -> int:
        return int(re.search(rf"new {what}:\s+(\d+)", self.text).group(1))


class _DigestCase(unittest.TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.work = short_tempdir("dd-dg-")
        self.cert, self.key = throwaway_certificate(self.work)
        self.home, self.pub = journalist_key(self, "alice")

    def smtp(self, tls: bool = True, name: str = "mail") -> SmtpServer:
        server = SmtpServer(os.path.join(self.work, name), *((self.cert, self.key) if tls else (None, None)))
        server.start()
        self.addCleanup(server.stop)
        return server

    @inlineCallbacks
    def server_with_alice(self, **overrides):
        server = yield start_server(self, **overrides)
        yield add_journalist(server, "alice")
        code = yield admin("journalist", "notify", "alice", "--data-dir", server.data_dir,
                           "--email", "alice@example.org", "--key", self.pub)
        self.assertEqual(code, 0)
        return server

    def digest_for(self, server, target: SmtpTarget, clock=None) -> DigestService:
        """A digest service on the running server's database, pool and log (``clock`` for time)."""
        service = server.service
        return DigestService(reactor=reactor, clock=clock or Clock(), db=service.db,
                             pool=service.newsroom.crypto_pool, events=service.events, target=target,
                             interval_minutes=1440, gpg_binary="gpg", homedir=os.path.join(self.work, "dg"))


class DigestDeliveryTests(_DigestCase):
    @inlineCallbacks
    def test_starttls_digest_counts_the_submission_and_only_alice_can_read_it(self):
        mail = self.smtp(tls=True)
        server = yield self.server_with_alice(
            smtp_server=f"localhost:{mail.port}", smtp_from="digest@newsroom.example",
            smtp_tls="starttls", smtp_tls_ca=self.cert)
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("the files are in the usual place")
        yield server.service.digest.run_slot(SLOT)
        [(raw, envelope)] = mail.messages()
        self.assertTrue(envelope["tls"])
        self.assertEqual(envelope["rcpt_tos"], ["alice@example.org"])
        self.assertEqual(envelope["mail_from"], "digest@newsroom.example")
        self.assertEqual(envelope["helo"], "newsroom.example")  # never this machine's host name
        first = ReadDigest(self, raw, self.home)
        self.assertEqual((first.count("submissions"), first.count("sources")), (1, 1))
        self.assertIn("January 1, 2026", first.text)  # Babel's English day (issue 31 item 3)
        # Headers: constant subject, the slot as Date (not the moment of sending), a random id.
        self.assertEqual(first.headers["Subject"], digest_mail.SUBJECT)
        self.assertEqual(email.utils.parsedate_to_datetime(first.headers["Date"]).timestamp(), SLOT)
        self.assertRegex(first.headers["Message-ID"], r"^<[0-9a-f]{32}@newsroom\.example>$")
        # Nothing about the source: not its designation, not a uuid, no time finer than the day.
        conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        designation, uuid = conn.execute("SELECT designation, uuid FROM sources").fetchone()
        conn.close()
        for secret in (designation, designation.replace("_", " "), uuid):
            self.assertNotIn(secret.encode(), raw)
            self.assertNotIn(secret, first.text)
        self.assertIsNone(re.search(r"\d\d:\d\d", first.text))
        # The next slot, nothing new: the digest still comes, the same size, counting zero.
        yield server.service.digest.run_slot(SLOT + DAY)
        self.assertEqual(len(mail.messages()), 2)
        second = ReadDigest(self, mail.messages()[1][0], self.home)
        self.assertEqual((second.count("submissions"), second.count("sources")), (0, 0))
        self.assertEqual(len(second.armored), len(first.armored))
        # Only alice's key opens it.
        refused = subprocess.run(["gpg", "--homedir", test_svs().homedir, "--batch", "--decrypt"],
                                 input=second.armored, capture_output=True)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("digest.sent", [e["event"] for e in security_events(server)])

    @inlineCallbacks
    def test_plain_smtp_to_a_loopback_relay(self):
        mail = self.smtp(tls=False)
        server = yield self.server_with_alice(smtp_server=f"127.0.0.1:{mail.port}", smtp_from="dd@example.org",
                                              smtp_tls="none")
        yield server.service.digest.run_slot(SLOT)
        [(raw, envelope)] = mail.messages()
        self.assertFalse(envelope["tls"])
        self.assertEqual(ReadDigest(self, raw, self.home).count("submissions"), 0)

    @inlineCallbacks
    def test_the_schedule_sends_at_every_slot_boundary(self):
        mail = self.smtp(tls=True)
        server = yield self.server_with_alice()
        clock = Clock()
        clock.advance(SLOT - 3600)  # an hour before midnight UTC
        digest = self.digest_for(server, SmtpTarget("localhost", mail.port, "starttls", "dd@example.org", self.cert),
                                 clock)
        digest.startService()
        self.addCleanup(digest.stopService)
        clock.advance(3599)
        self.assertEqual(digest.last_slot, None)  # not before the boundary
        clock.advance(1)
        self.assertEqual(digest.last_slot, SLOT)
        yield wait_until(lambda: len(mail.messages()) == 1, timeout=30)
        clock.advance(DAY)
        yield wait_until(lambda: len(mail.messages()) == 2, timeout=30)
        dates = [email.message_from_bytes(raw)["Date"] for raw, _ in mail.messages()]
        self.assertEqual(dates, [email.utils.formatdate(SLOT, usegmt=True),
                                 email.utils.formatdate(SLOT + DAY, usegmt=True)])

    @inlineCallbacks
    def test_smtp_down_then_back_a_retry_succeeds(self):
        mail = self.smtp(tls=True)
        mail.stop()  # its port is now refused
        server = yield self.server_with_alice()
        clock = Clock()
        clock.advance(SLOT + 5)
        digest = self.digest_for(server, SmtpTarget("localhost", mail.port, "starttls", "dd@example.org", self.cert),
                                 clock)
        done = digest.run_slot(SLOT)
        yield wait_until(lambda: "alice" in digest.failing, timeout=30)
        self.assertEqual(digest.failing["alice"]["reason"], "connection_refused")
        failed = [e for e in security_events(server) if e["event"] == "digest.send_failed"]
        self.assertEqual([(e["username"], e["reason"], e["delay"]) for e in failed],
                         [("alice", "connection_refused", 60)])
        self.assertFalse(done.called)
        mail.start()  # back, on the same port
        clock.advance(60)
        yield done
        self.assertEqual(len(mail.messages()), 1)
        self.assertEqual(ReadDigest(self, mail.messages()[0][0], self.home).count("submissions"), 0)
        self.assertEqual(digest.failing, {})
        sent = [e for e in security_events(server) if e["event"] == "digest.sent"]
        self.assertEqual(sent[-1]["count"], 2)  # took two attempts

    @inlineCallbacks
    def test_starttls_is_required_and_the_certificate_verified(self):
        plain = self.smtp(tls=False, name="plain")
        server = yield self.server_with_alice()
        digest = self.digest_for(server, SmtpTarget("localhost", plain.port, "starttls", "dd@example.org", self.cert))
        digest.run_slot(SLOT)
        yield wait_until(lambda: "alice" in digest.failing, timeout=30)
        self.assertEqual(digest.failing["alice"]["reason"], "no_starttls")
        self.assertEqual(plain.messages(), [])
        # A server whose certificate this instance does not trust gets nothing either.
        other_cert, other_key = throwaway_certificate(short_tempdir("dd-oc-"), "localhost")
        tls = self.smtp(tls=True, name="tls")
        digest2 = self.digest_for(server, SmtpTarget("localhost", tls.port, "starttls", "dd@example.org", other_cert))
        digest2.run_slot(SLOT)
        yield wait_until(lambda: "alice" in digest2.failing, timeout=30)
        self.assertEqual(digest2.failing["alice"]["reason"], "tls")
        self.assertEqual(tls.messages(), [])
        for d in (digest, digest2):
            d.stopService()

    @inlineCallbacks
    def test_status_shows_a_failing_digest(self):
        mail = self.smtp(tls=True)
        mail.stop()
        server = yield self.server_with_alice(smtp_server=f"localhost:{mail.port}", smtp_from="dd@example.org",
                                              smtp_tls_ca=self.cert)
        server.service.digest.run_slot(SLOT)
        yield wait_until(lambda: "alice" in server.service.digest.failing, timeout=30)
        yield server.service.status_file._write()
        status = yield deferToThread(instance_status, server.data_dir)
        text = format_status(status)
        self.assertIn(f"Digest mail:      every 1440 min via localhost:{mail.port} (starttls); 1 journalist(s)", text)
        self.assertIn("FAILING for alice (connection_refused)", text)
        self.assertIn("digest", [c["name"] for c in status["checks"] if not c["ok"]])


def expired_key(testcase: unittest.TestCase) -> str:
    """An armored public key that expired in 2020 (made with gpg's clock set back)."""
    home = short_tempdir("dd-ek-")
    testcase.addCleanup(kill_gpg_agent, home)
    subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--faked-system-time", "20200101T000000",
                    "--quick-gen-key", "old key", "future-default", "default", "1d"], check=True, capture_output=True)
    return subprocess.run(["gpg", "--homedir", home, "--armor", "--export"], check=True,
                          capture_output=True).stdout.decode()


class ExpiredKeyTests(_DigestCase):
    @inlineCallbacks
    def test_an_expired_key_is_refused_and_an_expiring_one_reported_without_retries(self):
        old = expired_key(self)
        with self.assertRaises(digest_mail.KeyProblem) as e:
            digest_mail.check_key(old)
        self.assertIn("cannot encrypt", str(e.exception))
        mail = self.smtp(tls=True)
        server = yield self.server_with_alice()
        # Registered while valid, expired since: the digest cannot be encrypted, and says so once.
        conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        conn.execute("UPDATE digest_recipients SET public_key = ?", (old,))
        conn.commit()
        conn.close()
        digest = self.digest_for(server, SmtpTarget("localhost", mail.port, "starttls", "dd@example.org", self.cert))
        yield digest.run_slot(SLOT)  # fires: no retry is pending
        self.assertEqual(digest.failing["alice"]["reason"], "key_unusable")
        self.assertIsNone(digest.failing["alice"]["next_retry"])
        self.assertEqual(mail.messages(), [])
        [event] = [e for e in security_events(server) if e["event"] == "digest.send_failed"]
        self.assertEqual((event["reason"], "delay" in event), ("key_unusable", False))


class NotifyCommandTests(_DigestCase):
    @inlineCallbacks
    def test_register_change_and_turn_off(self):
        mail = self.smtp(tls=True)
        server = yield self.server_with_alice(smtp_server=f"localhost:{mail.port}", smtp_from="dd@example.org",
                                              smtp_tls_ca=self.cert)
        yield add_journalist(server, "bob")
        data = ("--data-dir", server.data_dir)
        # Bad inputs are one-line errors and change nothing.
        secret = os.path.join(self.work, "secret.asc")
        with open(secret, "wb") as f:
            f.write(subprocess.run(["gpg", "--homedir", self.home, "--armor", "--export-secret-keys"],
                                   capture_output=True, check=True).stdout)
        for argv in (("--email", "bob@example.org", "--key", secret),
                     ("--email", "bob@example.org", "--key", os.path.join(self.work, "none.asc")),
                     ("--email", "bob@example.org\r\nBcc: x@y.z", "--key", self.pub),
                     ("--email", "bob@example.org"),
                     ("--off", "--email", "bob@example.org")):
            code = yield admin("journalist", "notify", "bob", *data, *argv)
            self.assertEqual(code, 1, argv)
        code = yield admin("journalist", "notify", "nobody", *data, "--email", "n@example.org", "--key", self.pub)
        self.assertEqual(code, 1)
        bob_home, bob_pub = journalist_key(self, "bob")
        code = yield admin("journalist", "notify", "bob", *data, "--email", "bob@example.org", "--key", bob_pub)
        self.assertEqual(code, 0)
        yield server.service.digest.run_slot(SLOT)
        received = {env["rcpt_tos"][0]: raw for raw, env in mail.messages()}
        self.assertEqual(sorted(received), ["alice@example.org", "bob@example.org"])
        ReadDigest(self, received["bob@example.org"], bob_home)  # each to their own key
        ReadDigest(self, received["alice@example.org"], self.home)
        code = yield admin("journalist", "notify", "alice", *data, "--off")
        self.assertEqual(code, 0)
        yield server.service.digest.run_slot(SLOT + DAY)
        self.assertEqual([env["rcpt_tos"] for _, env in mail.messages()[2:]], [["bob@example.org"]])
        events = [e["event"] for e in security_events(server)]
        self.assertIn("admin.journalist.notify_on", events)
        self.assertIn("admin.journalist.notify_off", events)
        # Deleting the account deletes its registration.
        code = yield admin("journalist", "delete", "bob", *data)
        self.assertEqual(code, 0)
        conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
        self.assertEqual(conn.execute("SELECT COUNT(*) FROM digest_recipients").fetchone()[0], 0)
        conn.close()


class CountingTests(unittest.TestCase):
    def test_counting_keeps_no_time_and_logs_nothing(self):
        from deaddrop.store import migrations

        conn = sqlite3.connect(":memory:")
        migrations.upgrade(conn)
        columns = {row[1]: row[2] for row in conn.execute("PRAGMA table_info(digest_recipients)")}
        self.assertEqual(set(columns), {"journalist_id", "email", "public_key", "fingerprint", "new_submissions",
                                        "new_sources"})
        self.assertNotIn("REAL", columns.values())  # no timestamp of any kind
        triggers = " ".join(r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'"))
        self.assertNotRegex(triggers.lower(), r"\b(time|date|datetime|julianday|strftime|created_at|last_updated)\b")


class OptionTests(unittest.TestCase):
    def config(self, **kw) -> Config:
        key = test_svs().public_key_path
        return Config(submission_key=key, tor="none", **kw).validated()

    def test_plain_smtp_only_to_loopback(self):
        for host in ("127.0.0.1", "localhost", "[::1]"):
            self.config(smtp_server=f"{host}:25", smtp_from="a@b.org", smtp_tls="none")
        with self.assertRaises(ConfigError) as e:
            self.config(smtp_server="mail.example.org:25", smtp_from="a@b.org", smtp_tls="none")
        self.assertIn("--smtp-tls none is refused", str(e.exception))

    def test_bad_settings_are_one_line_errors(self):
        for kw, says in ((dict(smtp_server="mail.example.org"), "HOST:PORT"),
                         (dict(smtp_server="mail.example.org:587"), "--smtp-from"),
                         (dict(smtp_server="mail.example.org:587", smtp_from="not an address"), "plain address"),
                         (dict(smtp_from="a@b.org"), "needs --smtp-server"),
                         (dict(smtp_tls="ssl"), "starttls, tls or none"),
                         (dict(notify_interval_minutes=0), "--notify-interval-minutes")):
            with self.assertRaises(ConfigError) as e:
                self.config(**kw)
            self.assertIn(says, str(e.exception), kw)

    def test_options_reach_the_config(self):
        from deaddrop.tap import Options

        options = Options()
        options.parseOptions(["--submission-key", test_svs().public_key_path, "--tor", "none",
                              "--smtp-server", "mail.example.org:587", "--smtp-from", "dd@example.org",
                              "--notify-interval-minutes", "60"])
        c = options.config
        self.assertEqual((c.smtp_server, c.smtp_from, c.smtp_tls, c.notify_interval_minutes),
                         ("mail.example.org:587", "dd@example.org", "starttls", 60))
        self.assertEqual(Options()["notify-interval-minutes"], 1440)


class MailShapeTests(unittest.TestCase):
    def test_padded_to_one_size_whatever_the_counts(self):
        sizes = {len(digest_mail.plaintext(SLOT, n, m)) for n, m in ((0, 0), (1, 1), (10 ** 9, 10 ** 6))}
        self.assertEqual(sizes, {digest_mail.PLAINTEXT_SIZE})
