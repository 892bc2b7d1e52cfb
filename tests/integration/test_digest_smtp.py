"""The digest's SMTP session against real SMTP server processes (aiosmtpd): STARTTLS all or
nothing (a man in the middle injecting replies after its ``220``, a certificate the client must
refuse), implicit TLS, AUTH inside TLS, the start-up check, and ``deaddrop-admin digest test``.

A failed digest is never counted as sent: it stays failing (event and status) and is retried.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread

from deaddrop.digest import smtp
from deaddrop.digest.smtp import SmtpTarget
from deaddrop.digest.smtp_client import SmtpFailure, data_block
from deaddrop.admin._status_commands import format_status, instance_status
from deaddrop.config import Config, ConfigError
from deaddrop.digest.schedule import DigestService
from tests._smtp_server import SmtpServer, throwaway_certificate
from tests._support import Browser, LogCapture, security_events, short_tempdir, test_svs, wait_until
from tests.integration.test_digest import SLOT, ReadDigest, _DigestCase

USER, PASSWORD = "digest@newsroom.example", "correct horse battery"


def counts(server) -> tuple[int, int]:
    conn = sqlite3.connect(os.path.join(server.data_dir, "db.sqlite"))
    try:
        return conn.execute("SELECT new_submissions, new_sources FROM digest_recipients").fetchone()
    finally:
        conn.close()


def events_named(server, name: str) -> list[dict]:
    return [e for e in security_events(server) if e["event"] == name]


class _SmtpCase(_DigestCase):
    def mail_server(self, name: str, mode: str = "starttls", cert: tuple[str, str] | None = None,
                    **kw) -> SmtpServer:
        cert_path, key_path = cert or (self.cert, self.key)
        server = SmtpServer(os.path.join(self.work, name), cert_path, key_path, mode=mode, **kw)
        server.start()
        self.addCleanup(server.stop)
        return server

    def password_file(self, text: str = PASSWORD, mode: int = 0o600, name: str = "smtp-password") -> str:
        path = os.path.join(self.work, f"{name}-{mode:o}")
        with open(path, "w") as f:
            f.write(text + "\n")
        os.chmod(path, mode)
        return path

    def server_using(self, mail: SmtpServer, login: bool = False, **kw):
        """A server with alice registered, sending through ``mail`` (logged in as USER)."""
        if login:
            kw.update(smtp_username=USER, smtp_password_file=self.password_file())
        return self.server_with_alice(smtp_server=f"localhost:{mail.port}", smtp_from="dd@example.org",
                                      smtp_tls_ca=self.cert, **kw)

    @inlineCallbacks
    def status(self, server):
        """``deaddrop-admin status`` as it reads the running server now: -> (dict, text)."""
        yield server.service.status_file._write()
        status = yield deferToThread(instance_status, server.data_dir)
        return status, format_status(status)

    def target(self, port: int, tls: str = "starttls", ca: str | None = None, timeout: float = 20,
               **kw) -> SmtpTarget:
        return SmtpTarget("localhost", port, tls, "dd@example.org", ca or self.cert, timeout=timeout, **kw)

    def digest(self, server, target: SmtpTarget, clock: Clock | None = None) -> DigestService:
        digest = self.digest_for(server, target, clock)
        self.addCleanup(digest.stopService)
        return digest

    @inlineCallbacks
    def failing(self, server, target: SmtpTarget, clock: Clock | None = None):
        """Run a slot that fails: -> (the service, its failure record for alice)."""
        digest = self.digest(server, target, clock)
        digest.run_slot(SLOT)
        yield wait_until(lambda: "alice" in digest.failing, timeout=30)
        return digest, digest.failing["alice"]


class StartTlsAllOrNothingTests(_SmtpCase):
    @inlineCallbacks
    def test_replies_injected_after_the_starttls_220_fail_the_digest_as_tls_and_it_is_retried(self):
        # A man in the middle without the certificate's key: 220 to STARTTLS and, in the same
        # write, fake replies to EHLO, MAIL, RCPT, DATA and the message. Twisted's ESMTP client
        # read them as answers and counted the digest as sent.
        mitm = self.mail_server("mitm", mode="inject")
        server = yield self.server_with_alice()
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("see the attached")
        self.assertEqual(counts(server), (1, 1))
        clock = Clock()
        clock.advance(SLOT + 5)
        digest, failure = yield self.failing(server, self.target(mitm.port), clock)
        self.assertEqual(failure["reason"], "tls")
        self.assertIsNotNone(failure["next_retry"])  # retried, not given up
        self.assertEqual(events_named(server, "digest.sent"), [])
        self.assertEqual(counts(server), (1, 1))  # not counted as reported
        self.assertEqual(mitm.messages(), [])
        # The retry meets the same man in the middle and fails the same way.
        clock.advance(60)
        yield wait_until(lambda: len(events_named(server, "digest.send_failed")) == 2, timeout=30)
        self.assertEqual([e["reason"] for e in events_named(server, "digest.send_failed")], ["tls", "tls"])
        self.assertEqual(counts(server), (1, 1))
        # And status says so.
        server.service.digest = digest
        _, text = yield self.status(server)
        self.assertIn("FAILING for alice (tls)", text)

    @inlineCallbacks
    def test_a_certificate_for_another_name_or_from_an_unknown_ca_is_tls(self):
        server = yield self.server_with_alice()
        # A certificate the instance's CA file trusts, but for another host name.
        other_dir = short_tempdir("dd-on-")
        wrong_name = throwaway_certificate(other_dir, "mail.example.net")
        misnamed = self.mail_server("misnamed", cert=wrong_name)
        _, failure = yield self.failing(server, self.target(misnamed.port, ca=wrong_name[0]))
        self.assertEqual(failure["reason"], "tls")
        # A certificate for the right name from a CA the instance does not trust; STARTTLS and
        # implicit TLS alike.
        unknown = throwaway_certificate(short_tempdir("dd-uk-"), "localhost")
        for mode in ("starttls", "tls"):
            untrusted = self.mail_server(f"untrusted-{mode}", mode=mode, cert=unknown)
            _, failure = yield self.failing(server, self.target(untrusted.port, tls=mode))
            self.assertEqual(failure["reason"], "tls", mode)
            self.assertEqual(untrusted.messages(), [])
        self.assertEqual(misnamed.messages(), [])
        self.assertEqual(events_named(server, "digest.sent"), [])


class ImplicitTlsTests(_SmtpCase):
    @inlineCallbacks
    def test_smtp_tls_tls_speaks_tls_from_the_first_byte(self):
        smtps = self.mail_server("smtps", mode="tls")
        server = yield self.server_using(smtps, smtp_tls="tls")
        yield server.service.digest.run_slot(SLOT)
        [(raw, envelope)] = smtps.messages()
        self.assertTrue(envelope["tls"])
        self.assertEqual(ReadDigest(self, raw, self.home).count("submissions"), 0)
        # A STARTTLS server reached with --smtp-tls tls does not speak TLS at first: refused as tls.
        starttls = self.mail_server("starttls")
        _, failure = yield self.failing(server, self.target(starttls.port, tls="tls"))
        self.assertEqual(failure["reason"], "tls")
        self.assertEqual(starttls.messages(), [])
        # And the other way round: the port 465 server waits, silent, for a TLS hello; the admin is told why.
        failure = yield self.assertFailure(smtp.check(reactor, self.target(smtps.port, timeout=1)), SmtpFailure)
        self.assertEqual(failure.reason, "timeout")
        self.assertIn("not even a greeting: a port 465 server wants --smtp-tls tls", failure.detail)


class AuthTests(_SmtpCase):
    @inlineCallbacks
    def test_login_with_plain_or_login_inside_tls_and_refused_credentials_are_auth(self):
        server = yield self.server_with_alice()
        secret = self.password_file()
        for mechanism, mode in (("PLAIN", "starttls"), ("LOGIN", "starttls"), ("PLAIN", "tls")):
            mail = self.mail_server(f"auth-{mechanism}-{mode}", mode=mode, auth=f"{USER}:{PASSWORD}",
                                    auth_mechanism=mechanism)
            target = SmtpTarget.from_settings(dict(self.target(mail.port, tls=mode, username=USER,
                                                               password_file=secret).settings()))
            digest = self.digest(server, target)
            yield digest.run_slot(SLOT)
            self.assertEqual(digest.failing, {}, (mechanism, mode))
            [(raw, envelope)] = mail.messages()
            self.assertEqual((envelope["login"], envelope["tls"]), (USER, True))
            ReadDigest(self, raw, self.home)
        mail = self.mail_server("auth-required", auth=f"{USER}:{PASSWORD}")
        # No login at all: the server wants one.
        _, failure = yield self.failing(server, self.target(mail.port))
        self.assertEqual(failure["reason"], "auth")
        # A wrong password.
        wrong = self.target(mail.port, username=USER, password="not it", password_file=None)
        digest = self.digest(server, wrong)
        digest.run_slot(SLOT)
        yield wait_until(lambda: "alice" in digest.failing, timeout=30)
        self.assertEqual(digest.failing["alice"]["reason"], "auth")
        self.assertIsNotNone(digest.failing["alice"]["next_retry"])
        self.assertEqual(mail.messages(), [])
        failure = yield self.assertFailure(smtp.check(reactor, wrong), SmtpFailure)
        self.assertIn(f"refused the login as '{USER}': 535", failure.detail)
        self.assertNotIn("not it", repr(wrong))

    def test_the_password_file_must_be_0600_and_the_login_only_inside_tls(self):
        key = test_svs().public_key_path
        base = dict(submission_key=key, tor="none", smtp_server="mail.example.org:587", smtp_from="a@b.org",
                    smtp_username=USER)
        Config(**base, smtp_password_file=self.password_file()).validated()
        for mode in (0o640, 0o604, 0o660):
            with self.assertRaises(ConfigError) as e:
                Config(**base, smtp_password_file=self.password_file(mode=mode)).validated()
            self.assertIn(f"can be read or written by group or others (mode 0{mode:o}): run chmod 600",
                          str(e.exception))
        for kw, says in ((dict(smtp_password_file=None), "go together"),
                         (dict(smtp_password_file=self.password_file(), smtp_server="127.0.0.1:25", smtp_tls="none"),
                          "only ever sent inside TLS"),
                         (dict(smtp_password_file=os.path.join(self.work, "none")), "No such file"),
                         (dict(smtp_password_file=self.password_file("", name="empty")), "on one line")):
            with self.assertRaises(ConfigError) as e:
                Config(**dict(base, **kw)).validated()
            self.assertIn(says, str(e.exception), kw)

    def test_dot_stuffing_and_line_ends(self):
        self.assertEqual(data_block(b"a\n.b\n..c\r\nd\n"), b"a\r\n..b\r\n...c\r\nd\r\n.")


class StartUpCheckTests(_SmtpCase):
    @inlineCallbacks
    def test_a_wrong_setting_shows_at_start_in_the_log_status_and_security_log(self):
        log = LogCapture().start()
        self.addCleanup(log.stop)
        unknown = throwaway_certificate(short_tempdir("dd-uk-"), "localhost")
        mail = self.mail_server("mail", cert=unknown)
        server = yield self.server_using(mail)
        yield wait_until(lambda: server.service.digest.smtp_check is not None, timeout=30)
        self.assertEqual(mail.messages(), [])  # a check sends nothing
        self.assertEqual([e.get("reason") for e in events_named(server, "digest.check_failed")], ["tls"])
        self.assertIn(f"digest mail: the check of the mail server localhost:{mail.port} (starttls) FAILED (tls): "
                      "the TLS handshake failed", log.text())
        status, text = yield self.status(server)
        self.assertIn("mail server check: FAILED (tls)", text)
        [check] = [c for c in status["checks"] if c["name"] == "digest_smtp"]
        self.assertIn("certificate verify failed", check["detail"])

    @inlineCallbacks
    def test_a_right_setting_with_a_login_checks_ok_without_mail(self):
        mail = self.mail_server("mail", auth=f"{USER}:{PASSWORD}")
        server = yield self.server_using(mail, login=True)
        yield wait_until(lambda: server.service.digest.smtp_check is not None, timeout=30)
        self.assertTrue(server.service.digest.smtp_check["ok"], server.service.digest.smtp_check)
        self.assertEqual(mail.messages(), [])
        status, text = yield self.status(server)
        self.assertIn(f"via localhost:{mail.port} (starttls, login {USER}); 1 journalist(s) registered; "
                      "mail server check: ok", text)
        self.assertNotIn("digest_smtp", [c["name"] for c in status["checks"]])
        with open(os.path.join(server.data_dir, "status.json")) as f:
            self.assertNotIn(PASSWORD, f.read())


def digest_test(data_dir: str, name: str, *more: str):
    """``deaddrop-admin digest test NAME`` as its own process (it runs a reactor of its own)."""
    return deferToThread(subprocess.run, [sys.executable, "-m", "deaddrop.admin.cli", "digest", "test", name,
                                          "--data-dir", data_dir, *more], capture_output=True, text=True, timeout=120)


class DigestTestCommandTests(_SmtpCase):
    @inlineCallbacks
    def test_sends_one_digest_now_and_says_what_happened(self):
        mail = self.mail_server("mail", auth=f"{USER}:{PASSWORD}")
        server = yield self.server_using(mail, login=True)
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("hello")
        yield server.service.status_file._write()
        done = yield digest_test(server.data_dir, "alice")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"sent: the mail server localhost:{mail.port} (starttls, login {USER}) accepted a test digest "
                      "for alice (alice@example.org)", done.stdout)
        [(raw, envelope)] = mail.messages()
        self.assertEqual((envelope["login"], envelope["rcpt_tos"]), (USER, ["alice@example.org"]))
        text = ReadDigest(self, raw, self.home).text
        self.assertIn("DeadDrop digest test", text)
        self.assertNotIn("new submissions", text)  # no counts at an admin's moment
        self.assertEqual(counts(server), (1, 1))  # they stay for the next digest
        [event] = events_named(server, "admin.digest.test")
        self.assertEqual((event["target"], "reason" in event), ("alice", False))
        done = yield digest_test(server.data_dir, "alice", "--json")
        self.assertEqual(json.loads(done.stdout)["sent"], True)
        done = yield digest_test(server.data_dir, "nobody")
        self.assertEqual(done.returncode, 1)
        self.assertIn("no journalist named 'nobody'", done.stderr)

    @inlineCallbacks
    def test_a_failure_says_its_class_and_why_and_exits_1(self):
        mitm = self.mail_server("mitm", mode="inject")
        server = yield self.server_using(mitm)
        yield wait_until(lambda: server.service.digest.smtp_check is not None, timeout=30)
        yield server.service.status_file._write()
        done = yield digest_test(server.data_dir, "alice")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("FAILED (tls): the mail server sent more than one reply before TLS", done.stdout)
        self.assertEqual(events_named(server, "admin.digest.test")[-1]["reason"], "tls")
        self.assertEqual(mitm.messages(), [])
        # Without a running server there are no settings to test with.
        yield server.stop()
        done = yield digest_test(server.data_dir, "alice")
        self.assertEqual(done.returncode, 1)
        self.assertIn("the server is not running", done.stderr)
