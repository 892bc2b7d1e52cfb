"""What each desk received, counted (issue 29): the digest mail says it per desk for each
journalist's desks, and the day's report has a line per desk. A journalist of B counts
nothing of what was sent to A."""
from __future__ import annotations

import email
import json
import os
import re
import subprocess

from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks, succeed
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread

from deaddrop.digest import mail as digest_mail
from deaddrop.digest.schedule import DigestService
from deaddrop.digest.smtp import SmtpTarget
from tests._support import add_journalist, short_tempdir
from tests.integration.test_admin_cli import run_cli as run_admin
from tests.integration.test_desks import TwoDesks
from tests.integration.test_digest import SLOT, journalist_key

DESK_LINE = re.compile(r"^  (.+): (\d+) new submissions, (\d+) new sources\r?$", re.M)


@inlineCallbacks
def sent_to_a_and_to_both(case: TwoDesks):
    """A source of A sends a message and a file; one of A and B a message. -> the first's identity."""
    only_a, p1 = yield case.new_source(case.desk_a)
    yield case.send(only_a, p1, "to A", b"a file for A")
    both, p2 = yield case.new_source(case.desk_a, case.desk_b)
    yield case.send(both, p2, "to A and B")
    return only_a


class DeskDigestTests(TwoDesks):
    @inlineCallbacks
    def setUp(self):
        yield super().setUp()
        # carol reads both desks; alice A, bob B.
        self.carol = yield add_journalist(self.server, "carol")
        data = ("--data-dir", self.server.data_dir)
        for desk in ("A", "B"):
            code, _, err = yield deferToThread(run_admin, "desk", "members", desk, "--add", "carol", *data)
            self.assertEqual(code, 0, err)
        self.homes = {}
        for name in ("alice", "bob", "carol"):
            home, public = journalist_key(self, name)
            self.homes[f"{name}@example.org"] = home
            code, _, err = yield deferToThread(run_admin, "journalist", "notify", name, "--email",
                                               f"{name}@example.org", "--key", public, *data)
            self.assertEqual(code, 0, err)
        self.sent: list[tuple[str, bytes]] = []
        service = self.server.service
        self.digest = DigestService(
            reactor=reactor, clock=Clock(), db=service.db, pool=service.newsroom.crypto_pool, events=service.events,
            target=SmtpTarget("127.0.0.1", 25, "none", "dd@example.org"), interval_minutes=1440, gpg_binary="gpg",
            homedir=short_tempdir("dd-dg-"),
            send=lambda _reactor, _target, to, message: succeed(self.sent.append((to, message))))

    def read(self) -> dict[str, tuple[tuple[int, int], dict[str, tuple[int, int]], int]]:
        """Each mail sent, decrypted: -> {address: ((submissions, sources), {desk: (...)}, armored size)}."""
        found = {}
        for to, raw in self.sent:
            payload = email.message_from_bytes(raw).get_payload()[1].get_payload().encode()
            opened = subprocess.run(["gpg", "--homedir", self.homes[to], "--batch", "--decrypt"], input=payload,
                                    capture_output=True, check=True)
            text = email.message_from_bytes(opened.stdout).get_payload()
            totals = tuple(int(re.search(rf"new {w}:\s+(\d+)", text).group(1)) for w in ("submissions", "sources"))
            desks = {name: (int(s), int(r)) for name, s, r in DESK_LINE.findall(text)}
            found[to] = (totals, desks, len(payload))
        self.sent.clear()
        return found

    @inlineCallbacks
    def test_each_journalist_s_digest_counts_what_each_of_their_desks_received(self):
        only_a = yield sent_to_a_and_to_both(self)
        yield self.digest.run_slot(SLOT)
        mails = self.read()
        self.assertEqual({to: m[:2] for to, m in mails.items()}, {
            "alice@example.org": ((3, 2), {"A": (3, 2)}),
            "bob@example.org": ((1, 1), {"B": (1, 1)}),
            # One submission sent to both of carol's desks counts once in her totals, in each desk's
            # line; each of her desks has its line, zeros too (she is on the default desk as well).
            "carol@example.org": ((3, 2), {"Newsroom": (0, 0), "A": (3, 2), "B": (1, 1)}),
        })
        # What was reported is no longer new; the next digest, nothing new, has the same size.
        yield self.digest.run_slot(SLOT + 86400)
        later = self.read()
        self.assertEqual(later["carol@example.org"][:2], ((0, 0), {"Newsroom": (0, 0), "A": (0, 0), "B": (0, 0)}))
        self.assertEqual(later["carol@example.org"][2], mails["carol@example.org"][2])
        # A source adding B later is new to B's journalists (once), and to nobody else.
        yield self.newsroom.add_desks(only_a, [self.desk_b.uuid])
        yield self.digest.run_slot(SLOT + 2 * 86400)
        self.assertEqual({to: m[:2] for to, m in self.read().items()}, {
            "alice@example.org": ((0, 0), {"A": (0, 0)}),
            "bob@example.org": ((0, 1), {"B": (0, 1)}),
            "carol@example.org": ((0, 0), {"Newsroom": (0, 0), "A": (0, 0), "B": (0, 1)}),
        })

    def test_the_mail_s_size_follows_the_desks_names_never_the_counts(self):
        desks = [("Investigations", 0, 0), ("Inversión pública", 0, 0)]
        sizes = {len(digest_mail.plaintext(SLOT, n, n, [(name, n, n) for name, _, _ in desks]))
                 for n in (0, 7, 10 ** 9)}
        self.assertEqual(sizes, {digest_mail.PLAINTEXT_SIZE})
        many = [(f"Desk number {i} with a long name", 0, 0) for i in range(40)]
        sizes = {len(digest_mail.plaintext(SLOT, n, n, [(name, n, n) for name, _, _ in many])) for n in (0, 10 ** 9)}
        self.assertEqual(len(sizes), 1)
        self.assertEqual(sizes.pop() % digest_mail.PLAINTEXT_SIZE, 0)


class DeskDailyReportTests(TwoDesks):
    @inlineCallbacks
    def test_the_day_s_report_has_a_line_per_desk(self):
        only_a = yield sent_to_a_and_to_both(self)
        report = self.server.service.daily_report
        activity = report.activity
        activity._ended.append(activity.today)  # as at midnight
        activity.today = type(activity.today)("2999-01-01")
        day = activity._ended[0].day
        report.report_ended_days()
        with open(os.path.join(self.server.data_dir, "logs", "security.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        [total] = [e for e in lines if e["event"] == "submissions.daily" and e["day"] == day]
        self.assertEqual((total["messages"], total["files"]), (2, 1))
        per_desk = {e["desk"]: (e["messages"], e["files"]) for e in lines
                    if e["event"] == "submissions.daily.desk" and e["day"] == day}
        self.assertEqual(per_desk, {"Newsroom": (0, 0), "A": (2, 1), "B": (1, 0)})
