"""Start-up options (issue 12): word lists checked at start-up, session lengths, and every option
through deaddrop.tac's environment -- the last one with a real ``twistd -ny deaddrop.tac``."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from twisted.internet.defer import inlineCallbacks
from twisted.python import usage
from twisted.trial import unittest

from deaddrop.newsroom import codenames
from deaddrop.config import Config, ConfigError
from deaddrop.tap import Options, argv_from_environment
from tests._markdown import table_rows
from tests._support import short_tempdir, test_svs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WordListTests(unittest.TestCase):
    def lists(self, codename_words: list[str], adjectives=None, nouns=None) -> str:
        adjectives = adjectives if adjectives is not None else self.words(500)
        nouns = nouns if nouns is not None else self.words(500)
        d = self.mktemp()
        os.makedirs(d)
        for name, words in [("codename-words.txt", codename_words), ("adjectives.txt", adjectives),
                            ("nouns.txt", nouns)]:
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write("\n".join(words) + "\n")
        return d

    def words(self, n: int) -> list[str]:
        import itertools
        import string

        return ["".join(p) for p in itertools.islice(itertools.product(string.ascii_lowercase, repeat=4), n)]

    def test_the_shipped_lists_pass_and_give_over_64_bits_from_5_words(self):
        self.assertGreater(codenames.check_word_lists(7), 90)
        self.assertGreater(codenames.check_word_lists(5), 64)
        with self.assertRaises(codenames.WordListError) as caught:
            codenames.check_word_lists(4)
        self.assertIn("has 51.6 bits, fewer than the 64 required: use --codename-words 5 or more", str(caught.exception))

    def test_damaged_lists_are_refused_with_the_file_and_the_fault(self):
        cases = [
            (self.words(7000) + ["aaab"], "'aaab' appears more than once"),
            (self.words(7000) + ["Paris"], "'Paris' is not a lowercase ASCII word"),
            (self.words(7000) + ["café"], "is not ASCII"),
            (self.words(7000) + ["two words"], "'two words' is not a lowercase ASCII word"),
            (["yes", "no"], "has 7.0 bits, fewer than the 64 required: use a longer list"),
        ]
        for words, message in cases:
            d = self.lists(words)
            with self.assertRaises(codenames.WordListError) as caught:
                codenames.check_word_lists(7, d)
            self.assertIn(os.path.join(d, "codename-words.txt"), str(caught.exception))
            self.assertIn(message, str(caught.exception))
        d = self.lists(self.words(7000), nouns=self.words(500) + ["aaab"])
        with self.assertRaises(codenames.WordListError):
            codenames.check_word_lists(7, d)
        os.remove(os.path.join(d, "nouns.txt"))
        with self.assertRaises(codenames.WordListError) as caught:
            codenames.check_word_lists(7, d)
        self.assertIn("No such file", str(caught.exception))

    def test_the_server_refuses_to_start_with_too_few_bits(self):
        config = Config(submission_key=test_svs().public_key_path, codename_words=4, tor="none")
        with self.assertRaises(ConfigError) as caught:
            config.validated()
        self.assertIn("fewer than the 64 required", str(caught.exception))
        with self.assertRaises(usage.UsageError):
            Options().parseOptions(["--submission-key", test_svs().public_key_path, "--codename-words", "4"])


    def test_designation_lists_too_small_for_any_instance_are_refused_at_start_up(self):
        d = self.lists(self.words(7000), adjectives=self.words(300), nouns=self.words(300))
        with self.assertRaises(codenames.WordListError) as caught:
            codenames.check_word_lists(7, d)
        # Two different adjectives and a noun: 300 x 299 x 300.
        self.assertIn("make 26,910,000 designations, fewer than the 100,000,000 required: use longer lists",
                      str(caught.exception))
        self.assertIn(os.path.join(d, "adjectives.txt"), str(caught.exception))

    def test_designation_lists_too_small_for_this_instance_are_refused_in_one_line(self):
        d = self.lists(self.words(7000), adjectives=self.words(500), nouns=self.words(500))
        self.assertEqual(codenames.check_designation_space(31_187_500, d), 124_750_000)  # 500 x 499 x 500
        with self.assertRaises(codenames.WordListError) as caught:
            codenames.check_designation_space(31_187_501, d)
        self.assertEqual(str(caught.exception).count("\n"), 0)
        self.assertIn("make 124,750,000 designations; this instance holds 31,187,501 sources and needs at least "
                      "124,750,004 (4 per source)", str(caught.exception))


class DeclaredOnceTests(unittest.TestCase):
    """Each option is a Config field: twistd's defaults are Config's, and every option has a field."""

    def test_twistd_defaults_are_configs_defaults(self):
        options = Options()
        options.parseOptions(["--submission-key", test_svs().public_key_path, "--tor", "none"])
        # Built from Config's defaults alone: once --crypto-threads defaulted to 2-8 and Config to 4.
        expected = Config(submission_key=test_svs().public_key_path, tor="none",
                          start_options=("--tor", "none")).validated()
        self.assertEqual(options.config, expected)

    def test_every_option_is_a_config_field(self):
        import dataclasses

        fields = {f.name for f in dataclasses.fields(Config)}
        names = [p[0] for p in Options.optParameters] + [f[0] for f in Options.optFlags]
        self.assertEqual(len(names), 35)
        self.assertEqual({n for n in names if n.replace("-", "_") not in fields}, set())
        self.assertIn("--tor-option", Options().__str__())


def help_defaults(text: str) -> dict[str, tuple[bool, str | None]]:
    """Each option ``twistd deaddrop --help`` shows -> (is a flag, its ``[default: ...]`` or None)."""
    entries: dict[str, tuple[bool, list[str]]] = {}
    current = None
    for line in text.splitlines():
        option = re.match(r" {2,8}(?:-\w, )?--([a-z][a-z-]*)(=?)(.*)", line)
        if option:
            current = option.group(1)
            entries[current] = (option.group(2) != "=", [option.group(3).strip()])
        elif current and line.startswith(" " * 20) and line.strip():
            entries[current][1].append(line.strip())  # the help wrapped onto the next line
        else:
            current = None
    shown = {}
    for name, (flag, parts) in entries.items():
        default = re.search(r"\[default: (.*?)\]", " ".join(parts))
        shown[name] = (flag, default.group(1) if default else None)
    return {name: d for name, d in shown.items() if name not in ("help", "version")}  # twistd's own


def readme_defaults(text: str) -> dict[str, str]:
    """Each option of the README's options table -> its default cell, backticks removed."""
    table = table_rows(text, "| option | default | meaning |")
    return {name: default.replace("`", "") for options, default, _ in table
            for name in re.findall(r"`--([a-z][a-z-]*)", options)}


def same_default(readme: str, shown: str) -> bool:
    """The README's default is the one ``--help`` shows: the same text, the same number (3600 and
    3600.0), or a range holding it (``--crypto-threads`` defaults to the CPUs, 2 to 8)."""
    if readme == shown:
        return True
    numbers = re.fullmatch(r"(\d+)-(\d+)", readme)
    try:
        if numbers:
            return int(numbers.group(1)) <= float(shown) <= int(numbers.group(2))
        return float(readme) == float(shown)
    except ValueError:
        return False


class ReadmeOptionsTableTests(unittest.TestCase):
    """The README's options table is written by hand: it lists every option ``--help`` shows, with
    the same default, and no other."""

    def test_the_readme_table_is_the_help(self):
        shown = help_defaults(str(Options()))
        self.assertEqual(len(shown), 36)  # Config's 35 options and --tor-option
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            readme = readme_defaults(f.read())
        self.assertEqual(sorted(set(shown) - set(readme)), [], "options missing from the README's table")
        self.assertEqual(sorted(set(readme) - set(shown)), [], "README options that --help does not show")
        for name, (flag, default) in shown.items():
            if flag:
                self.assertEqual(readme[name], "off", name)
            elif default is not None:
                self.assertTrue(same_default(readme[name], default), f"--{name}: README {readme[name]!r}, "
                                                                      f"--help {default!r}")

    def test_the_comparison_can_fail(self):
        text = ("Options:\n      --demo                             A demo.\n"
                "      --disk-reserve=                    Free space (2GB, 5%), or both. [default:\n"
                "                                         2GB,5%]\n"
                "      --help                             Display this help and exit.\n"
                "      --tor-binary=                      The tor binary (default: on PATH).\n")
        self.assertEqual(help_defaults(text), {"demo": (True, None), "disk-reserve": (False, "2GB,5%"),
                                               "tor-binary": (False, None)})
        self.assertTrue(same_default("3600", "3600.0"))
        self.assertTrue(same_default("2-8", "4"))
        self.assertFalse(same_default("2-8", "12"))
        self.assertFalse(same_default("120", "480"))
        self.assertFalse(same_default("on", "off"))
        table = ("| option | default | meaning |\n| --- | --- | --- |\n"
                 "| `--journalist-ca FILE`, `--journalist-crl FILE` | `DATA/ca/*` | who |\n| `--kdf-cost X` | `default` | cost |\n")
        self.assertEqual(readme_defaults(table), {"journalist-ca": "DATA/ca/*", "journalist-crl": "DATA/ca/*",
                                                  "kdf-cost": "default"})


class SessionOptionTests(unittest.TestCase):
    def parse(self, *argv: str) -> Config:
        options = Options()
        options.parseOptions(["--submission-key", test_svs().public_key_path, "--tor", "none", *argv])
        return options.config

    def test_defaults_and_options(self):
        config = self.parse()
        self.assertEqual((config.source_session_minutes, config.journalist_session_minutes), (120, 480))
        # Absolute for sources: activity does not extend a session.
        self.assertEqual((config.source_session_idle, config.source_session_lifetime), (7200.0, 7200.0))
        self.assertEqual(Config(source_session_minutes=30).source_session_lifetime, 1800.0)
        config = self.parse("--source-session-minutes", "30", "--journalist-session-minutes", "60")
        self.assertEqual((config.source_session_lifetime, config.journalist_session_lifetime), (1800.0, 3600.0))
        for bad in ("0", "4", "20000"):
            with self.assertRaises(usage.UsageError):
                self.parse("--source-session-minutes", bad)


class RefusedValuesTests(unittest.TestCase):
    """The option table says which values are refused: each is, with a line naming the option."""

    def parse(self, *argv: str) -> Config:
        options = Options()
        options.parseOptions(["--submission-key", test_svs().public_key_path, "--tor", "none", *argv])
        return options.config

    def refused(self, *argv: str) -> str:
        with self.assertRaises(usage.UsageError) as caught:
            self.parse(*argv)
        return str(caught.exception)

    def test_source_session_minutes_below_5(self):
        self.assertEqual(self.parse("--source-session-minutes", "5").source_session_minutes, 5)
        self.assertIn("--source-session-minutes must be between 5 and 10080", self.refused("--source-session-minutes", "4"))

    def test_no_submission_key_says_how_to_make_one(self):
        options = Options()
        with self.assertRaises(usage.UsageError) as caught:
            options.parseOptions(["--tor", "none"])
        self.assertIn("no submission key: on the offline Secure Viewing Station run `deaddrop-svs --home DIR init`",
                      str(caught.exception))

    def test_a_source_listener_beyond_loopback_with_tor(self):
        message = self.refused("--tor", "launch", "--source-listen", "tcp:8080")
        self.assertIn("--source-listen tcp:8080 is not loopback", message)
        self.assertEqual(self.parse("--source-listen", "tcp:8080").source_listen, "tcp:8080")  # --tor none

    def test_max_upload_size_below_1024(self):
        self.assertEqual(self.parse("--max-upload-size", "1024").max_upload_size, 1024)
        self.assertIn("--max-upload-size must be at least 1024 bytes", self.refused("--max-upload-size", "1023"))


class EnvironmentTests(unittest.TestCase):
    def test_every_option_maps_flags_and_tor_options_too(self):
        argv = argv_from_environment({
            "DEADDROP_SOURCE_SESSION_MINUTES": "30", "DEADDROP_DEMO": "yes", "DEADDROP_JOURNALIST_ONION": "0",
            "DEADDROP_TOR_OPTION": "ConnectionPadding=1, Sandbox=0", "DEADDROP_URL": "https://not-an-option",
        })
        self.assertEqual(argv, ["--source-session-minutes=30", "--demo", "--tor-option=ConnectionPadding=1",
                                "--tor-option=Sandbox=0"])
        with self.assertRaises(usage.UsageError):
            argv_from_environment({"DEADDROP_DEMO": "maybe"})

    def refused(self, environ: dict[str, str]) -> str:
        with self.assertRaises(usage.UsageError) as caught:
            argv_from_environment(environ)
        return str(caught.exception)

    def test_an_unknown_variable_is_refused_in_one_line(self):
        # Misspelt (THREAD for THREADS): once silently ignored, so the server ran with the default.
        message = self.refused({"DEADDROP_CRYPTO_THREAD": "4", "DEADDROP_DEMO": "1"})
        self.assertTrue(message.startswith("DEADDROP_CRYPTO_THREAD is not a setting of the server"), message)
        self.assertNotIn("\n", message)
        # The other tools' variables are theirs: left alone.
        self.assertEqual(argv_from_environment({"DEADDROP_URL": "https://x", "DEADDROP_SVS_HOME": "/media/svs",
                                                "DEADDROP_TEST_CHROMIUM": "/usr/bin/chromium",
                                                "DEADDROP_CRYPTO_THREADS": "3"}), ["--crypto-threads=3"])

    def test_a_bad_number_is_refused_in_one_line(self):
        self.assertEqual(self.refused({"DEADDROP_CRYPTO_THREADS": "four"}),
                         "DEADDROP_CRYPTO_THREADS must be a whole number, not 'four'")
        self.assertEqual(self.refused({"DEADDROP_PENDING_SOURCE_HOURS": "a day"}),
                         "DEADDROP_PENDING_SOURCE_HOURS must be a number, not 'a day'")
        self.assertEqual(argv_from_environment({"DEADDROP_PENDING_SOURCE_HOURS": "1.5"}), ["--pending-source-hours=1.5"])

    def test_every_deaddrop_variable_in_the_code_is_an_option_or_another_tools(self):
        from deaddrop.tap import OTHER_TOOLS_PREFIX, OTHER_TOOLS_VARIABLES, environment_name

        options = {environment_name(p[0]) for p in Options.optParameters + Options.optFlags}
        options |= {environment_name("tor-option"), environment_name("tor-options")}
        found = set()
        for top in ("deaddrop", "tests", "bench"):
            for folder, _dirs, files in os.walk(os.path.join(REPO, top)):
                for name in files:
                    # This file names a misspelt variable on purpose.
                    if name.endswith(".py") and name != "test_options.py":
                        with open(os.path.join(folder, name), encoding="utf-8") as f:
                            # As a string ("DEADDROP_URL") or a keyword (dict(os.environ, DEADDROP_TOR=...)).
                            found |= {a or b for a, b in re.findall(
                                r"[\"'](DEADDROP_[A-Z0-9_]*[A-Z0-9])[\"']|\b(DEADDROP_[A-Z0-9_]*[A-Z0-9])=", f.read())}
        self.assertIn("DEADDROP_SVS_HOME", found)
        self.assertEqual({v for v in found - options - OTHER_TOOLS_VARIABLES if not v.startswith(OTHER_TOOLS_PREFIX)},
                         set())

    def test_twistd_refuses_a_bad_number_from_the_environment_in_one_line(self):
        work = short_tempdir("dd-tac-")
        self.addCleanup(shutil.rmtree, work, True)
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        for variable, value, line in [
            ("DEADDROP_CRYPTO_THREADS", "four", "deaddrop: error: DEADDROP_CRYPTO_THREADS must be a whole number, not 'four'"),
            ("DEADDROP_CRYPTO_THREAD", "4", "deaddrop: error: DEADDROP_CRYPTO_THREAD is not a setting of the server"),
        ]:
            env = dict(os.environ, DEADDROP_DATA_DIR=os.path.join(work, "data"), DEADDROP_TOR="none",
                       DEADDROP_SUBMISSION_KEY=test_svs().public_key_path, **{variable: value})
            done = subprocess.run([twistd, "-n", "--pidfile=", "-y", os.path.join(REPO, "deaddrop.tac")], cwd=work,
                                  env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 1, done.stderr)
            self.assertEqual(done.stdout, "")
            self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
            self.assertTrue(done.stderr.startswith(line), done.stderr)
            self.assertFalse(os.path.exists(os.path.join(work, "data")))

    def test_twistd_runs_deaddrop_tac_with_session_minutes_from_the_environment(self):
        # Issue 12: DEADDROP_SOURCE_SESSION_IDLE made this start-up fail.
        work = short_tempdir("dd-tac-")
        self.addCleanup(shutil.rmtree, work, True)
        data = os.path.join(work, "data")
        env = dict(os.environ, DEADDROP_DATA_DIR=data, DEADDROP_SUBMISSION_KEY=test_svs().public_key_path,
                   DEADDROP_TOR="none", DEADDROP_SOURCE_LISTEN="tcp:0:interface=127.0.0.1",
                   DEADDROP_JOURNALIST_LISTEN="tcp:0:interface=127.0.0.1", DEADDROP_KDF_COST="insecure-fast",
                   DEADDROP_SOURCE_SESSION_MINUTES="30", DEADDROP_JOURNALIST_SESSION_MINUTES="90")
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        proc = subprocess.Popen([twistd, "-n", "--pidfile=", "-y", os.path.join(REPO, "deaddrop.tac")], cwd=work,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            status = os.path.join(data, "status.json")
            deadline = time.monotonic() + 60
            while not os.path.exists(status):
                self.assertIsNone(proc.poll(), proc.stdout.read().decode(errors="replace") if proc.poll() else "")
                self.assertLess(time.monotonic(), deadline, "the server did not start")
                time.sleep(0.2)
            with open(status) as f:
                reported = json.load(f)
            self.assertEqual((reported["source_session_minutes"], reported["journalist_session_minutes"]), (30, 90))
            self.assertEqual(reported["pid"], proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            output = proc.communicate(timeout=30)[0].decode(errors="replace")
            subprocess.run(["gpgconf", "--homedir", os.path.join(data, "gnupg"), "--kill", "gpg-agent"],
                           capture_output=True)
        # twistd re-raises SIGTERM on itself once it has shut down cleanly.
        self.assertIn(proc.returncode, (0, -signal.SIGTERM), output)
        self.assertIn("Server Shut Down.", output)
        self.assertFalse(os.path.exists(status))


class SessionLengthOnPagesTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_the_journalist_login_page_shows_the_configured_length(self):
        from tests._support import JournalistBrowser, issue_client_cert, start_journalist_server

        server = yield start_journalist_server(self, journalist_session_minutes=90)
        browser = JournalistBrowser(server, issue_client_cert(server, "alice"))
        self.addCleanup(browser.close)
        response, html = yield browser.get("/login")
        self.assertIn("You are logged out 90 minutes after logging in, or after 30 minutes without activity.", html)


class SubmissionKeyOptionTests(unittest.TestCase):
    def test_the_key_survives_tor_options(self):
        # A --tor-option once took the submission key's place (a loop variable of the same name).
        from tests._support import test_svs

        options = Options()
        options.parseOptions(["--tor", "none", "--submission-key", test_svs().public_key_path,
                              "--tor-option", "DirAuthority=x", "--replace-submission-key"])
        self.assertEqual(options.config.submission_key, test_svs().public_key_path)
        self.assertEqual(options.config.validated().submission_key, test_svs().public_key_path)
        self.assertIn("--tor-option", options.config.start_options)
        self.assertNotIn("--replace-submission-key", options.config.start_options)
