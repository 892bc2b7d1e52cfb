"""Desks through the journalists' own clients (issue 29): SecureDrop's SDK, unchanged, and
``deaddrop-journalist sync`` and ``reply`` over mutual TLS. B's journalist sees nothing of a
source that chose A; a reply A's journalist writes on the workstation is read by A's SVS."""
from __future__ import annotations

import io
import os

from sdclientapi import API, WrongUUIDError
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread

from deaddrop.workstation import cli as ws_cli
from tests._support import TotpDevice, issue_client_cert, short_tempdir
from tests.integration.test_desks import TwoDesks, db_rows
from tests.integration.test_securedrop_sdk import certify_the_sdk


class DeskClientTests(TwoDesks):
    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        self.identity, passphrase = yield self.new_source(self.desk_a)
        yield self.send(self.identity, passphrase, "DESK-A-ONLY", b"A's document")
        yield self.newsroom.replies.key_ready(self.identity.source_id)
        self.uuid = self.uuid_of(self.identity)
        self.work = short_tempdir("dd-desk-ws-")

    def sdk_as(self, account) -> API:
        certify_the_sdk(self, self.server, issue_client_cert(self.server, account.username))
        return API(self.server.journalist_url + "/", account.username, account.passphrase,
                   TotpDevice(self.server, account.totp_secret).code())

    @inlineCallbacks
    def test_the_securedrop_sdk_as_b_lists_no_such_source(self):
        api = self.sdk_as(self.bob)
        self.assertTrue((yield deferToThread(api.authenticate)))
        self.assertEqual((yield deferToThread(api.get_sources)), [])
        self.assertEqual((yield deferToThread(api.get_all_submissions)), [])
        self.assertEqual((yield deferToThread(api.get_all_replies)), [])
        with self.assertRaises(WrongUUIDError):
            yield deferToThread(api.get_source_from_string, self.uuid)
        # A's journalist, through the same SDK, has it.
        api = self.sdk_as(self.alice)
        self.assertTrue((yield deferToThread(api.authenticate)))
        self.assertEqual([s.uuid for s in (yield deferToThread(api.get_sources))], [self.uuid])

    def cli(self, account, *command: str):
        key_pem, cert_pem = issue_client_cert(self.server, account.username)
        password_file = os.path.join(self.work, f"{account.username}.password")
        with open(password_file, "w") as f:
            f.write(account.passphrase + "\n")
        argv = ["--url", self.server.journalist_url, "--ca", self.server.server_cert, "--cert", cert_pem,
                "--key", key_pem, "--username", account.username, "--password-file", password_file,
                "--totp", TotpDevice(self.server, account.totp_secret).code(),
                "--session-file", os.path.join(self.work, f"{account.username}.session"), *command]
        out = io.StringIO()
        d = ws_cli.run(reactor, ws_cli.build_parser().parse_args(argv), out=out)
        return d.addCallback(lambda status: (status, out.getvalue()))

    @inlineCallbacks
    def test_sync_as_b_fetches_nothing_of_a_s_and_as_a_everything(self):
        out_b = os.path.join(self.work, "b")
        status, text = yield self.cli(self.bob, "sync", "--out", out_b)
        self.assertEqual(status, 0, text)
        self.assertIn("0 downloaded", text)
        self.assertEqual(os.listdir(out_b) if os.path.isdir(out_b) else [], [])
        out_a = os.path.join(self.work, "a")
        status, text = yield self.cli(self.alice, "sync", "--out", out_a)
        self.assertEqual(status, 0, text)
        self.assertIn("2 downloaded", text)
        [folder] = os.listdir(out_a)
        self.assertEqual(len(os.listdir(os.path.join(out_a, folder))), 2)
        # B's sync marked nothing seen; A's marked both.
        seen = db_rows(self.server, "SELECT j.username FROM submission_seen s JOIN journalists j"
                                    " ON j.id = s.journalist_id ORDER BY 1")
        self.assertEqual(seen, [("alice",), ("alice",)])

    @inlineCallbacks
    def test_a_workstation_reply_is_encrypted_to_the_keys_of_the_desks_that_list_it(self):
        designation = db_rows(self.server, "SELECT designation FROM sources WHERE uuid = ?", self.uuid)[0][0]
        message_file = os.path.join(self.work, "reply.txt")
        with open(message_file, "w") as f:
            f.write("WS-REPLY-FOR-A")
        status, text = yield self.cli(self.alice, "reply", designation, "--message-file", message_file)
        self.assertEqual(status, 0, text)
        [(filename,)] = db_rows(self.server, "SELECT filename FROM replies")
        with open(self.newsroom.store.path_of(self.identity.filesystem_id, filename), "rb") as f:
            files = {filename: f.read()}
        plain, err = yield deferToThread(self.a.decrypt, files)
        self.assertEqual(list(plain.values()), [b"WS-REPLY-FOR-A"], err)
        plain, err = yield deferToThread(self.b.decrypt, files)
        self.assertEqual(plain, {})
        self.assertIn("belongs to another desk", err)
        # The default desk's key (/instance's submission key) is not among its recipients either.
        default = self.newsroom.desks.default
        recipients = yield self.newsroom.crypto_pool.run(self.newsroom.keyring.recipients_of,
                                                         files[filename].decode("ascii"))
        ids = yield self.newsroom.crypto_pool.run(self.newsroom.keyring.subkey_ids, default.fingerprint)
        self.assertFalse(set(recipients) & set(ids))
        self.assertEqual(len(recipients), 2)  # the source's key and A's

    @inlineCallbacks
    def test_a_source_both_desks_read_counts_for_b_only_what_b_sees(self):
        """The source's own counter counts what it exchanged with every desk: B's journalist, on a
        desk the source added later, must not read in it how many replies A's sent it privately
        (SecureDrop's interaction_count is the number of the last item the reader sees)."""
        for n in range(3):
            yield self.desk.reply_plaintext((yield self.desk.source(self.alice_id, self.uuid)), f"A's {n}", self.alice_id)
        yield self.newsroom.add_desks(self.identity, [self.desk_b.uuid])
        api = self.sdk_as(self.bob)
        self.assertTrue((yield deferToThread(api.authenticate)))

        def count(reader):
            if reader == self.bob_id:  # through SecureDrop's SDK
                return deferToThread(lambda: {s.uuid: s.interaction_count for s in api.get_sources()})
            return self.desk.sources(reader).addCallback(lambda found: {s.uuid: s.interaction_count for s in found[0]})

        bob, alice = self.bob_id, self.alice_id
        self.assertEqual((yield count(bob)), {self.uuid: 0})  # listed (it chose B), nothing seen yet
        self.assertEqual((yield count(alice)), {self.uuid: 5})  # message, file, three replies
        for n in range(2):
            yield self.desk.reply_plaintext((yield self.desk.source(self.alice_id, self.uuid)), f"A's {n}", self.alice_id)
        self.assertEqual((yield count(bob)), {self.uuid: 0})
        self.assertEqual((yield count(alice)), {self.uuid: 7})
        # Bob's own reply is the last thing he sees: its number.
        yield self.desk.reply_plaintext((yield self.desk.source(self.bob_id, self.uuid)), "B's", self.bob_id)
        self.assertEqual((yield count(bob)), {self.uuid: 8})
        self.assertEqual((yield count(alice)), {self.uuid: 7})
