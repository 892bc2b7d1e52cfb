"""The package as an admin gets it: an sdist, the wheel built from that sdist (what
``python -m build`` does), installed into a fresh venv outside the checkout and run from an
empty folder. Nothing of the checkout is on the installed copy's path, so a file the package
reads at run time but does not ship (the word lists, once) fails here.
"""
from __future__ import annotations

import gettext
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from twisted.trial import unittest

from tests._process import RawClient, ServerProcess, free_port
from tests._support import kill_gpg_agent, short_tempdir

ROOT = Path(__file__).resolve().parents[2]
# What the build never needs: the suite, local venvs and run-time folders of a working checkout.
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "venv", "_trial_temp*", "build", "dist", "*.egg-info",
                                     "__pycache__", "deaddrop-data", "deaddrop-demo", "tests", "bench",
                                     "dropin.cache")
# Read at run time: a fresh install must hold each of these (inside the deaddrop package).
RUNTIME_DATA = [
    "deaddrop/wordlists/codename-words.txt",
    "deaddrop/wordlists/adjectives.txt",
    "deaddrop/wordlists/nouns.txt",
    "deaddrop/web/source/locales/es/LC_MESSAGES/messages.mo",
    "deaddrop/web/source/locales/ar/LC_MESSAGES/messages.mo",
    "deaddrop/web/static/style.css",
    "twisted/plugins/deaddrop_plugin.py",
]
_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')
_STYLESHEET = re.compile(r'<link rel="stylesheet" href="(/static/[^"]+)"')


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    # Never the test process's PYTHONPATH (trial -j sets it to its own sys.path): pip would find
    # the dependencies there and not install them, and the installed copy would not be alone.
    kw.setdefault("env", {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")})
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


class OneSourceTests(unittest.TestCase):
    def test_the_package_reads_the_top_level_word_lists(self):
        from deaddrop.newsroom import codenames

        # deaddrop/wordlists is a link to wordlists/: the package data and the folder are one.
        self.assertEqual(Path(codenames.WORDLIST_DIR).resolve(), (ROOT / "wordlists").resolve())
        self.assertTrue((ROOT / "deaddrop" / "wordlists").is_symlink())


class InstalledCopyTests(unittest.TestCase):
    # A build, then an install of the dependencies from the package index (~15-30 s with pip's cache).
    timeout = 420

    def setUp(self) -> None:
        self.work = short_tempdir("dd-pkg-")
        self.addCleanup(shutil.rmtree, self.work, True)

    def _build(self) -> tuple[Path, Path]:
        """-> (sdist, wheel), from a copy of the checkout (the build writes into its tree)."""
        import importlib.util

        self.assertIsNotNone(importlib.util.find_spec("build"),
                             "the test extra holds 'build' now: pip install -e '.[test]' in this venv")
        source = Path(self.work, "src")
        shutil.copytree(ROOT, source, symlinks=True, ignore=_NOT_SOURCE)
        dist = Path(self.work, "dist")
        # The test extra holds the build requirements: no isolated environment to download.
        _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)])
        [sdist] = dist.glob("deaddrop-*.tar.gz")
        [wheel] = dist.glob("deaddrop-*.whl")
        return sdist, wheel

    def _install(self, wheel: Path) -> Path:
        venv = Path(self.work, "venv")
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
              "--no-compile", "--disable-pip-version-check", str(wheel)])
        return venv

    def test_the_built_package_installs_and_runs_outside_the_checkout(self):
        sdist, wheel = self._build()
        with tarfile.open(sdist) as tar:
            in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
        with zipfile.ZipFile(wheel) as whl:
            in_wheel = set(whl.namelist())
            shipped_words = whl.read("deaddrop/wordlists/codename-words.txt")
        for name in RUNTIME_DATA:
            self.assertIn(name, in_sdist, f"the sdist lacks {name}")
            self.assertIn(name, in_wheel, f"the wheel lacks {name}")
        self.assertFalse([n for n in in_wheel if "templates" in n], "a phantom templates entry came back")
        # One source of truth: what ships is the top-level wordlists/ folder, byte for byte.
        self.assertEqual(shipped_words, (ROOT / "wordlists" / "codename-words.txt").read_bytes())

        venv = self._install(wheel)
        site = next(venv.glob("lib/python3*/site-packages"))
        for name in RUNTIME_DATA:
            self.assertTrue((site / name).is_file(), f"the installed copy lacks {name}")
        app = Path(self.work, "app")  # the admin's empty folder
        app.mkdir()
        home = Path(self.work, "home")
        home.mkdir(mode=0o700)
        env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}

        def cli(*argv: str, cwd: Path = app) -> subprocess.CompletedProcess:
            return _run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=cwd, env=env)

        where = cli("python", "-c", "import deaddrop, deaddrop.newsroom.codenames as c; print(deaddrop.__file__); "
                                    "print(c.WORDLIST_DIR)").stdout.split()
        for path in where:
            self.assertTrue(path.startswith(str(site)), f"{path} is not inside the installed copy")

        for tool in ("deaddrop-admin", "deaddrop-svs", "deaddrop-journalist"):
            self.assertIn("usage:", cli(tool, "--help").stdout)
        self.assertIn("--submission-key", cli("twistd", "deaddrop", "--help").stdout)

        # deaddrop-svs: a real submission key, made by the installed copy, for the server below.
        svs = Path(self.work, "svs")
        self.addCleanup(kill_gpg_agent, str(svs / "gnupg"))
        self.assertIn("Fingerprint:", cli("deaddrop-svs", "--home", str(svs), "init").stdout)
        data = app / "deaddrop-data"
        self.addCleanup(kill_gpg_agent, str(data / "gnupg"))
        cli("deaddrop-admin", "ca", "init")  # the default --data-dir, ./deaddrop-data
        journalist_port = free_port()
        server = ServerProcess(str(data), workdir=str(app), twistd=str(venv / "bin" / "twistd"), env=env,
                               submission_key=str(svs / "submission-public.asc"),
                               extra_args=["--journalist-listen", f"tcp:{journalist_port}:interface=127.0.0.1"])
        self.addCleanup(server.cleanup)
        server.start(timeout=60)

        # A codename from the installed word list; Spanish and Arabic from the installed catalogs.
        client = server.client()
        page = client.get("/generate")
        self.assertEqual(page.status, 200, page.text[:300])
        words = set((site / "deaddrop/wordlists/codename-words.txt").read_text("ascii").split())
        codename = _CODENAME.search(page.text).group(1).split()
        self.assertEqual(len(codename), 7)
        self.assertTrue(set(codename) <= words, codename)
        for language in ("es", "ar"):
            catalog = gettext.GNUTranslations(open(site / f"deaddrop/web/source/locales/{language}/LC_MESSAGES/messages.mo", "rb"))
            landing = html.unescape(RawClient(server.port).get("/", headers=[("Accept-Language", language)]).text)
            translated = [text for msgid, text in catalog._catalog.items() if msgid and len(text) > 12 and text in landing]
            self.assertTrue(translated, f"no {language} text from the installed catalog on the landing page")
        stylesheet = _STYLESHEET.search(page.text).group(1)
        css = client.get(stylesheet)
        self.assertEqual(css.status, 200)
        self.assertIn((site / "deaddrop/web/static/style.css").read_bytes()[:4000], css.body)  # (chunked)

        # deaddrop-admin: status of the running server; an account and its certificate.
        status = json.loads(cli("deaddrop-admin", "status", "--json").stdout)
        self.assertTrue(status["server"]["running"], status)
        account = json.loads(cli("deaddrop-admin", "journalist", "add", "alice", "--json").stdout)
        secrets = Path(self.work, "alice")
        secrets.mkdir(mode=0o700)
        (secrets / "p12-password").write_text("correct horse battery staple\n")
        (secrets / "passphrase").write_text(account["passphrase"] + "\n")
        (secrets / "totp").write_text(account["totp_secret"] + "\n")
        cli("deaddrop-admin", "cert", "issue", "alice", "--out", str(secrets / "alice.p12"),
            "--password-file", str(secrets / "p12-password"))

        # deaddrop-journalist: logs in over the journalist listener's mutual TLS and lists sources.
        listing = cli("deaddrop-journalist", "--url", f"https://127.0.0.1:{journalist_port}",
                      "--cert", str(secrets / "alice.p12"), "--cert-password-file", str(secrets / "p12-password"),
                      "--ca", str(data / "ca" / "ca.pem"), "--username", "alice",
                      "--password-file", str(secrets / "passphrase"), "--totp-secret-file", str(secrets / "totp"),
                      "--session-file", str(secrets / "session"), "sources")
        self.assertIn("source", listing.stdout.lower())
        server.stop()
