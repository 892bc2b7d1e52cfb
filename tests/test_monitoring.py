"""The Wazuh/OSSEC decoder and rules in docs/wazuh against the events DeadDrop really writes.

``wazuh-logtest`` cannot be installed here, so this checks what it would catch first: the
files are well-formed, every field a rule reads is a key of our JSON lines, every event
pattern matches an event the code emits, the ids hang together, and real event lines (written
by ``SecurityEvents``) land on the intended rules.
"""
from __future__ import annotations

import ast
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from twisted.trial import unittest

import deaddrop
from deaddrop.events import ALLOWED_FIELDS, SecurityEvents
from tests import _event_catalogue

ROOT = Path(__file__).resolve().parents[1]
WAZUH = ROOT / "docs" / "wazuh"
JSON_KEYS = set(ALLOWED_FIELDS) | {"timestamp", "event", "program"}
_EVENT_RE = re.compile(r"^(journalist|admin|tls|crl|tor|source|submission|digest)\.[a-z0-9_.]+$")


def parse(name: str) -> ET.Element:
    # Wazuh files hold several top-level elements (and comments): wrap them to parse.
    text = (WAZUH / name).read_text("utf-8")
    return ET.fromstring(f"<root>{text}</root>")


def emitted_events() -> set[str]:
    """Every string literal in the package that looks like an event name."""
    found = set()
    for path in Path(deaddrop.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _EVENT_RE.match(node.value):
                found.add(node.value)
    return found


def os_regex(pattern: str) -> re.Pattern:
    """The subset of OSSEC's regex the rules use: literal text, ^, $ and | (a "." is literal)."""
    alternatives = []
    for alt in pattern.split("|"):
        core = alt.removeprefix("^").removesuffix("$")
        assert re.fullmatch(r"[a-z0-9_.]+", core), f"pattern outside the checked subset: {pattern!r}"
        alternatives.append(("^" if alt.startswith("^") else "") + re.escape(core) + ("$" if alt.endswith("$") else ""))
    return re.compile("|".join(alternatives))


class Rule:
    def __init__(self, element: ET.Element) -> None:
        self.id = int(element.get("id"))
        self.level = int(element.get("level"))
        self.frequency = element.get("frequency")
        self.timeframe = element.get("timeframe")
        self.if_sid = [int(x) for x in re.split(r"[,\s]+", (element.findtext("if_sid") or "").strip()) if x]
        self.if_matched_sid = int(element.findtext("if_matched_sid")) if element.find("if_matched_sid") is not None else None
        self.decoded_as = element.findtext("decoded_as")
        self.fields = {f.get("name"): f.text or "" for f in element.findall("field")}
        self.same_fields = [f.text for f in element.findall("same_field")]
        self.description = element.findtext("description") or ""

    def matches(self, event: dict) -> bool:
        return all(name in event and os_regex(pattern).search(str(event[name])) for name, pattern in self.fields.items())


class WazuhRulesTests(unittest.TestCase):
    def setUp(self):
        self.decoders = parse("deaddrop_decoders.xml").findall("decoder")
        groups = parse("deaddrop_rules.xml").findall("group")
        self.rules = {int(r.get("id")): Rule(r) for g in groups for r in g.findall("rule")}
        self.events = emitted_events()

    def test_files_are_well_formed_and_ids_hang_together(self):
        self.assertEqual([d.get("name") for d in self.decoders], ["deaddrop"])
        decoder = self.decoders[0]
        self.assertEqual(decoder.findtext("program_name"), "^deaddrop$")
        self.assertEqual(decoder.findtext("plugin_decoder"), "JSON_Decoder")
        groups = parse("deaddrop_rules.xml").findall("group")
        ids = [int(r.get("id")) for g in groups for r in g.findall("rule")]
        self.assertEqual(len(ids), len(set(ids)), "duplicate rule ids")
        self.assertTrue(all(100000 <= i <= 120000 for i in ids), "local rules belong in 100000-120000")
        for rule in self.rules.values():
            self.assertTrue(0 <= rule.level <= 16, rule.id)
            for parent in rule.if_sid + ([rule.if_matched_sid] if rule.if_matched_sid else []):
                self.assertIn(parent, self.rules, f"rule {rule.id} refers to unknown rule {parent}")
                self.assertLess(parent, rule.id)
            if rule.decoded_as is not None:
                self.assertIn(rule.decoded_as, {"json", "deaddrop"}, rule.id)
            self.assertTrue(rule.if_sid or rule.if_matched_sid or rule.decoded_as, f"rule {rule.id} matches everything")
            if rule.frequency is not None:
                self.assertIsNotNone(rule.if_matched_sid, rule.id)
                self.assertGreater(int(rule.frequency), 1)
                self.assertGreater(int(rule.timeframe), 0)
            for name in re.findall(r"\$\((\w+)\)", rule.description):
                self.assertIn(name, JSON_KEYS, f"rule {rule.id} describes with unknown field {name}")

    def test_rules_read_only_keys_deaddrop_writes(self):
        for rule in self.rules.values():
            for name in list(rule.fields) + rule.same_fields:
                self.assertIn(name, JSON_KEYS, f"rule {rule.id} reads {name!r}, which no event has")

    def test_every_event_pattern_matches_a_real_event(self):
        self.assertIn("journalist.login.fail", self.events)  # the scan works
        self.assertIn("tor.fatal", self.events)
        self.assertIn("tls.client_cert.refused", self.events)
        for rule in self.rules.values():
            pattern = rule.fields.get("event")
            if pattern is None:
                continue
            for alternative in pattern.split("|"):
                regex = os_regex(alternative)
                self.assertTrue(any(regex.search(e) for e in self.events),
                                f"rule {rule.id}: {alternative!r} matches no event the code emits")

    def most_specific(self, event: dict) -> int | None:
        """A small model of rule evaluation: base rules, then children; frequency rules aside."""
        matched: set[int] = set()
        for rule_id in sorted(self.rules):
            rule = self.rules[rule_id]
            if rule.frequency is not None:
                continue
            if rule.decoded_as == "json" and rule.matches(event):
                matched.add(rule_id)
            elif rule.if_sid and any(p in matched for p in rule.if_sid) and rule.matches(event):
                matched.add(rule_id)
        return max(matched, default=None)

    def test_real_event_lines_land_on_the_intended_rules(self):
        path = os.path.join(self.mktemp(), "security.jsonl")
        events = SecurityEvents(path)
        self.addCleanup(events.close)
        emitted = [
            (("journalist.login.fail",), dict(username="alice", reason="bad_totp"), 100711),
            (("journalist.login.throttled",), dict(username="alice"), 100713),
            (("journalist.totp.reused",), dict(username="alice"), 100715),
            (("tls.client_cert.refused",), dict(reason="no_certificate"), 100730),
            (("tls.client_cert.refused",), dict(reason="revoked", subject="bob", serial="5c1f"), 100731),
            (("crl.reload_failed",), dict(reason="bad_signature"), 100734),
            (("crl.reloaded",), dict(count=2), 100733),
            (("tor.control.lost",), dict(reason="control_lost", detail="lost"), 100741),
            (("tor.restart.failed",), dict(reason="exit_1", detail="tor exited"), 100741),
            (("tor.fatal",), dict(reason="binary_missing", detail="tor not found"), 100742),
            (("source.login.throttled",), {}, 100720),
            (("source.flood",), dict(reason="requests", repeated=41), 100722),
            (("admin.journalist.added",), dict(target="carol"), 100750),
            (("journalist.login.ok",), dict(username="alice"), 100710),
            (("digest.send_failed",), dict(username="alice", reason="connection_refused", delay=60), 100760),
            (("digest.send_failed",), dict(username="alice", reason="key_unusable"), 100761),
            (("digest.send_failed",), dict(username="alice", reason="auth", delay=60), 100761),
            (("digest.check_failed",), dict(reason="tls"), 100764),
            (("admin.digest.test",), dict(target="alice", reason="tls"), 100750),
            (("digest.sent",), dict(username="alice", count=1), 100763),
        ]
        for (name,), fields, _ in emitted:
            events.emit(name, **fields)
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        for line, (_, _, expected) in zip(lines, emitted):
            self.assertEqual(self.most_specific(line), expected, line)
        self.assertIsNone(self.most_specific({"event": "journalist.login.fail", "program": "something-else"}))

    def test_required_alerts_exist(self):
        def rules_for(event: str) -> list[Rule]:
            return [r for r in self.rules.values() if "event" in r.fields and os_regex(r.fields["event"]).search(event)]

        for event in ["journalist.login.fail", "journalist.login.throttled", "journalist.totp.reused",
                      "tls.client_cert.refused", "crl.reload_failed", "tor.control.lost", "tor.fatal"]:
            self.assertTrue(any(r.level >= 5 for r in rules_for(event)), event)
        frequency_parents = {r.if_matched_sid for r in self.rules.values() if r.frequency}
        for event in ["journalist.login.fail", "journalist.login.throttled", "tls.client_cert.refused"]:
            self.assertTrue(any(r.id in frequency_parents for r in rules_for(event)), f"no frequency rule for {event}")


NOT_EVENTS = {"source.sock", "tor.pid", "crl.pem"}  # file names the scan below would take for events
FROM_TOR = {"BAD_DESC", "QUERY_REJECTED", "UPLOAD_REJECTED", "NOT_FOUND", "UNEXPECTED", "QUERY_NO_HSDIR",
            "QUERY_RATE_LIMITED"}  # HS_DESC reasons Tor gives, passed on as they are


def string_literals() -> set[str]:
    found = set()
    for path in Path(deaddrop.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


class EventCatalogueTests(unittest.TestCase):
    """docs/monitoring.md lists exactly the events, keys and reasons DeadDrop emits.

    Every event emitted while the suite runs is checked against the doc as it is emitted
    (tests/_event_catalogue.py, installed by tests/__init__.py): an unlisted event, key or
    reason fails the test that emitted it. Here: that check itself, and the doc against the code."""

    def test_the_allow_list_in_the_doc_is_the_codes(self):
        self.assertEqual(_event_catalogue.allow_list_in_doc(_event_catalogue.DOC.read_text("utf-8")),
                         set(ALLOWED_FIELDS))

    def test_every_event_the_code_names_is_listed_and_every_listed_one_exists(self):
        pattern = re.compile(r"^(journalist|admin|tls|crl|tor|source|submissions?|retention|digest)\.[a-z0-9_.]+$")
        named = {s for s in string_literals() if pattern.match(s)} - NOT_EVENTS
        self.assertIn("retention.deleted", named)  # the scan works
        listed = set(_event_catalogue.catalogue())
        self.assertEqual(sorted(named - listed), [], "events the code names that docs/monitoring.md does not list")
        self.assertEqual(sorted(listed - named), [], "events docs/monitoring.md lists that the code never names")

    def test_every_listed_reason_is_one_the_code_gives(self):
        literals = string_literals()
        for name, entry in _event_catalogue.catalogue().items():
            for reason in entry.reasons:
                if reason in FROM_TOR or reason.endswith("_N"):
                    continue
                self.assertIn(reason, literals, f"{name}: docs/monitoring.md lists the reason {reason!r}, "
                                                "which the code never gives")
        self.assertTrue(any("signal_{" in line for line in
                            (Path(deaddrop.__file__).parent / "tor" / "_process.py").read_text().splitlines()))

    def test_an_unlisted_event_key_or_reason_fails_the_test_that_emits_it(self):
        events = SecurityEvents(None)
        events.emit("journalist.login.fail", username="alice", reason="bad_totp")  # listed
        events.emit("tor.exited", reason="signal_9", detail="killed")  # a listed pattern
        self.assertEqual(self.flushLoggedErrors(_event_catalogue.UnlistedEvent), [])
        events.emit("journalist.login.vanished", username="alice")
        events.emit("journalist.login.ok", username="alice", count=3)
        events.emit("journalist.login.fail", username="alice", reason="bad_mood")
        events.emit("tor.exited", reason="signal_x", detail="killed")
        logged = [str(f.value) for f in self.flushLoggedErrors(_event_catalogue.UnlistedEvent)]
        self.assertEqual(logged, [
            "the event 'journalist.login.vanished' is not listed in docs/monitoring.md",
            "journalist.login.ok: the key 'count' is not listed for it in docs/monitoring.md",
            "journalist.login.fail: the reason 'bad_mood' is not listed for it in docs/monitoring.md",
            "tor.exited: the reason 'signal_x' is not listed for it in docs/monitoring.md",
        ])

    def test_the_doc_table_is_read_strictly(self):
        text = _event_catalogue.DOC.read_text("utf-8")
        for broken, why in [
            (text.replace("| `journalist.totp.reused` | username |", "| `journalist.totp.reused` | usernme |"),
             "'usernme' is not a key"),
            (text.replace("| `source.flood` | reason, repeated | the source side",
                          "| `source.flood` | reason, repeated | no reasons here; the source side").replace(
                "`busy`", "busy").replace("`requests`", "requests").replace("`circuit_closed`", "x").replace(
                "`upload_ended`", "x").replace("`abandoned`", "x"), "a reason key, but no reason listed"),
            (text + "", None),
        ]:
            if why is None:
                _event_catalogue.parse(broken)
                continue
            with self.assertRaises(_event_catalogue.CatalogueError) as caught:
                _event_catalogue.parse(broken)
            self.assertIn(why, str(caught.exception))
