"""Issue 31 item 3: the digest mail in the journalist's language, at one size whatever the counts."""
from __future__ import annotations

import email
import os
import sqlite3
import subprocess

from twisted.internet.defer import inlineCallbacks
from twisted.trial import unittest

from deaddrop.digest import mail
from deaddrop.i18n import journalist
from deaddrop.newsroom.languages import JOURNALIST_LANGUAGES
from deaddrop.store import digest_queries as dq
from deaddrop.store import migrations
from tests._support import Browser
from tests.integration import test_digest

SLOT = 1_767_225_600.0  # 2026-01-01T00:00:00Z
COUNTS = ((0, 0), (1, 1), (2, 3), (21, 5), (10 ** 9, 10 ** 6))


def _text(entity: bytes) -> str:
    return email.message_from_bytes(entity).get_payload(decode=True).decode("utf-8")


class DigestLanguageTests(unittest.TestCase):
    def test_the_digest_speaks_the_account_s_language_at_one_size_whatever_the_counts(self):
        desks = [("Investigations", 0, 0), ("Politik", 0, 0)]
        for code in JOURNALIST_LANGUAGES:
            say = journalist.speech(code)
            for per_desk in ((), desks):
                sizes = {len(mail.plaintext(SLOT, n, m, [(d, n, m) for d, _s, _r in per_desk], say))
                         for n, m in COUNTS}
                self.assertEqual(len(sizes), 1, f"{code}: {sizes}")
        farsi = _text(mail.plaintext(SLOT, 3, 2, (), journalist.speech("fa")))
        self.assertIn("خلاصه DeadDrop، ۱۱ دی ۱۴۰۴ (UTC)", farsi)  # 1 January 2026, Solar Hijri, Persian digits
        self.assertIn("ارسالی‌های تازه: ۳", farsi)
        german = _text(mail.plaintext(SLOT, 0, 0, desks, journalist.speech("de")))
        self.assertIn("Digest von DeadDrop, 1. Januar 2026 (UTC)", german)
        self.assertIn("Nichts Neues.", german)
        self.assertIn("Politik: neue Einsendungen: 0, neue Quellen: 0", german)
        english = _text(mail.plaintext(SLOT, 1, 1))
        self.assertIn("DeadDrop digest, January 1, 2026 (UTC)", english)
        test_mail = _text(mail.test_plaintext(SLOT, journalist.speech("ru")))
        self.assertIn("Проверка сводки DeadDrop", test_mail)

    def test_each_recipient_carries_the_account_s_language(self):
        path = os.path.join(self.mktemp() + ".sqlite")
        conn = sqlite3.connect(path, isolation_level=None)
        migrations.upgrade(conn)
        for n, (name, language) in enumerate((("alice", "ru"), ("bob", None)), 1):
            conn.execute("INSERT INTO journalists(id, uuid, username, password_hash, totp_secret, created_at,"
                         " password_changed_at, language) VALUES (?, ?, ?, 'h', 'S', 1.0, 1.0, ?)",
                         (n, f"u-{n}", name, language))
            conn.execute("INSERT INTO digest_recipients(journalist_id, email, public_key, fingerprint)"
                         " VALUES (?, ?, 'KEY', 'FPR')", (n, f"{name}@example.org"))
        self.assertEqual([(r.username, r.language) for r in dq.recipients(conn)], [("alice", "ru"), ("bob", None)])
        self.assertEqual(dq.recipient(conn, 1).language, "ru")
        conn.close()


class DigestLanguageDeliveryTests(test_digest._DigestCase):
    @inlineCallbacks
    def test_the_server_sends_each_journalist_the_digest_in_their_account_s_language(self):
        smtp = self.smtp(tls=True)
        server = yield self.server_with_alice(smtp_server=f"localhost:{smtp.port}", smtp_from="digest@newsroom.example",
                                              smtp_tls="starttls", smtp_tls_ca=self.cert)
        yield server.service.accounts.set_language(
            (yield server.service.accounts.list())[0].id, "ru")  # as the account page does
        source = Browser(server.source_url)
        self.addCleanup(source.close)
        yield source.create_source()
        yield source.submit("the files are in the usual place")
        yield server.service.digest.run_slot(test_digest.SLOT)
        [(raw, _envelope)] = smtp.messages()
        read = test_digest.ReadDigest(self, raw, self.home)
        self.assertEqual(read.headers["Subject"], mail.SUBJECT)  # the subject says nothing, not even a language
        text = email.message_from_bytes(_decrypted(self, read, self.home)).get_payload(decode=True).decode("utf-8")
        self.assertIn("Сводка DeadDrop, 1 января 2026\u202fг. (UTC)", text)  # CLDR's narrow space before "г."
        self.assertIn("новых материалов: 1", text)


def _decrypted(testcase: unittest.TestCase, read: "test_digest.ReadDigest", home: str) -> bytes:
    """The inner entity, as bytes (``ReadDigest.text`` reads it as text, which 8-bit UTF-8 is not)."""
    opened = subprocess.run(["gpg", "--homedir", home, "--batch", "--decrypt"], input=read.armored, capture_output=True)
    testcase.assertEqual(opened.returncode, 0, opened.stderr)
    return opened.stdout
