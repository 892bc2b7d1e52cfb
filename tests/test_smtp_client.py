"""The strict SMTP client's reading of replies, on an in-memory transport: one reply per request,
whole, and nothing after it (the real-server cases are in tests.integration.test_digest_smtp)."""
from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from deaddrop.digest.smtp_client import MAX_LINE, Reply, SmtpFailure, _Wire


class WireTests(unittest.TestCase):
    def wire(self, tls_required: bool = True) -> tuple[_Wire, StringTransport]:
        wire, transport = _Wire(Clock(), tls_required), StringTransport()
        wire.makeConnection(transport)
        return wire, transport

    def failure(self, d) -> SmtpFailure:
        return self.failureResultOf(d, SmtpFailure).value

    def test_a_multi_line_reply_is_one_reply(self):
        wire, transport = self.wire()
        d = wire.reply(b"EHLO example.org")
        self.assertEqual(transport.value(), b"EHLO example.org\r\n")
        wire.dataReceived(b"250-mail.example.org\r\n250-STARTTLS\r\n")
        self.assertNoResult(d)
        wire.dataReceived(b"250 SIZE 1000\r\n")
        self.assertEqual(self.successResultOf(d), Reply(250, ("mail.example.org", "STARTTLS", "SIZE 1000")))

    def test_bytes_after_a_reply_end_the_session_as_tls_before_tls_and_protocol_after(self):
        for secure, reason in ((False, "tls"), (True, "protocol")):
            wire, transport = self.wire()
            wire.secure = secure
            d = wire.reply(b"STARTTLS")
            wire.dataReceived(b"220 go ahead\r\n250 fake")
            self.assertEqual(self.failure(d).reason, reason)
            self.assertTrue(transport.disconnecting or transport.disconnected)
            # Whatever is asked next fails at once, with the same reason.
            self.assertEqual(self.failure(wire.reply(b"QUIT")).reason, reason)

    def test_a_reply_nobody_asked_for_ends_the_session(self):
        wire, _ = self.wire(tls_required=False)
        wire.dataReceived(b"250 unasked\r\n")
        self.assertEqual(self.failure(wire.reply(b"NOOP")).reason, "protocol")

    def test_what_is_not_a_reply_ends_the_session(self):
        for data in (b"hello\r\n", b"250-a\r\n251 b\r\n", b"2500 x\r\n", b"2" * (MAX_LINE + 1)):
            wire, _ = self.wire()
            d = wire.reply(b"NOOP")
            wire.dataReceived(data)
            self.assertEqual(self.failure(d).reason, "protocol", data[:20])

    def test_a_lost_connection_fails_what_waits(self):
        wire, _ = self.wire()
        d = wire.reply(b"NOOP")
        wire.connectionLost(None)
        self.assertEqual(self.failure(d).reason, "connection_failed")
        self.assertIsNone(self.successResultOf(wire.lost))
