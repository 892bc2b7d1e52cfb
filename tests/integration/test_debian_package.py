"""The Debian packages as an admin gets them (issue 32, items 1-4).

``scripts/build-deb`` builds them (lintian: no error), ``scripts/publish-apt`` publishes them in an
apt repository signed by a throwaway release key, and apt installs them, trusting that key with
``signed-by``, in a throwaway copy of this machine (``tests/_throwaway_root.py``: this machine is
left as it was). The server starts as its unit's ExecStart says (systemd is not PID 1 here), its
own Tor publishing the onion on the private Tor network of ``tornet.py``; a source submits,
alice downloads with ``deaddrop-journalist`` and the SVS decrypts with ``deaddrop-svs``. Then a
second release with two more schema steps comes through the repository: ``apt-get upgrade``
with its last step failing leaves the database as it was and prints the way back, which works;
without the failure the upgrade migrates, and the same codename logs in, alice downloads the
old submission and the onion address is the same. Last, two instances of ``deaddrop@NAME``
side by side, each its own user, Tor, onion, listeners and accounts, neither able to read the
other's files.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from twisted.trial import unittest

from tests._debian import ReleaseKey, checkout_with_test_migrations, missing_tools, start_build, unit_exec
from tests._process import RawClient, free_port
from tests._support import short_tempdir
from tests._throwaway_root import ThrowawayRoot
from tests.integration import tornet

FIRST, SECOND = "0.1.0", "0.1.0+upgradetest1"
PACKAGES = ["deaddrop", "deaddrop-common", "deaddrop-svs", "deaddrop-journalist"]
MARKER = "a first message through the package SUBMISSION-MARKER-deb"
DATA = "/var/lib/deaddrop"
REPO = "/srv/deaddrop-apt"  # inside the throwaway root
CHECKOUT = Path(__file__).resolve().parents[2]


def _schema_version(root: ThrowawayRoot, db: str) -> int:
    """The database's schema version, read where it is (sqlite3 of the machine's Python)."""
    return int(root.run(["python3", "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
                         "\"SELECT value FROM meta WHERE key = 'schema_version'\").fetchone()[0])", db]).stdout)


def _wait_for(predicate, what: str, timeout: float = 150.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class DebianPackageTests(unittest.TestCase):
    # Two package builds (about a minute of CPU each, run side by side), one install, two upgrades.
    timeout = 1800

    def setUp(self) -> None:
        reason = ThrowawayRoot.unavailable() or missing_tools() or tornet.TorNetwork.available()
        if reason:
            raise unittest.SkipTest(reason)
        self.work = Path(short_tempdir("dd-deb-"))
        os.chmod(self.work, 0o755)  # apt reads the repository as its _apt user
        self.addCleanup(shutil.rmtree, self.work, True)

    # -- building and publishing ---------------------------------------------------------------

    def _build_both(self) -> tuple[Path, Path]:
        """The release from this checkout (lintian must pass; CI builds it once for every test that
        installs it: DEADDROP_TEST_DEBS) and, beside it, a second release with the test schema steps
        (a quick build), while the private Tor network comes up."""
        first, second = self.work / "dist-first", self.work / "dist-second"
        built = os.environ.get("DEADDROP_TEST_DEBS")  # CI's build of this checkout (.ci/run), lintian passed
        if built:
            first = Path(built)
        builds = [] if built else [(start_build(CHECKOUT, first, self.work / "first.log"), "first.log")]
        builds.append((start_build(checkout_with_test_migrations(self.work / "second-src"), second,
                                   self.work / "second.log", version=SECOND, quick=True), "second.log"))
        net: list = []
        bring_up = threading.Thread(target=lambda: net.append(tornet.TorNetwork().start()))
        bring_up.start()
        for proc, log in builds:
            proc.wait()
            text = (self.work / log).read_text(errors="replace")
            self.assertEqual(proc.returncode, 0, f"scripts/build-deb failed ({log}):\n{text[-5000:]}")
        if not built:
            self.assertIn("build-deb: lintian: no errors", (self.work / "first.log").read_text())
        bring_up.join()
        self.assertTrue(net, "the private Tor network did not come up")
        self.net = net[0]
        self.addCleanup(self.net.stop)
        return first, second

    @staticmethod
    def _debs(dist: Path, version: str) -> list[Path]:
        found = sorted(dist.glob(f"*_{version}_*.deb"))
        assert {p.name.split("_")[0] for p in found} == set(PACKAGES), found
        return found

    def _trust_repository(self, root: ThrowawayRoot) -> None:
        """The machine's apt sources give way to DeadDrop's repository alone (nothing to fetch
        from Debian: tor, gnupg, mat2 and bubblewrap are installed), as the packaged example
        writes it; an index its key did not sign is refused."""
        root.run(["sh", "-c", "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* /etc/apt/preferences.d/*"])
        sources = (CHECKOUT / "debian" / "examples" / "deaddrop.sources").read_text()
        sources = sources.replace("https://<YOUR-MIRROR>/deaddrop", f"file:{REPO}/public")
        root.path("/etc/apt/sources.list.d/deaddrop.sources").write_text(sources)
        refused = root.run(["apt-get", "update"], check=False)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("NO_PUBKEY", refused.stdout + refused.stderr)
        root.run(["install", "-m", "644", f"{REPO}/public/deaddrop-archive-keyring.gpg", "/usr/share/keyrings/"])
        root.run(["apt-get", "update"])

    # -- the instance ----------------------------------------------------------------------------

    def _offline_keys(self, root: ThrowawayRoot) -> dict[str, str]:
        """The SVS key and the CA, made with the packaged tools (on the offline machine, in life),
        installed where the packaged options file names them."""
        root.run(["deaddrop-svs", "--home", "/root/svs", "init"])
        root.run(["sh", "-c", "echo 'correct horse battery staple' > /root/p12-password"])
        for argv in (["ca", "init", "--ca-dir", "/root/ca"],
                     ["cert", "server", "--ca-dir", "/root/ca", "--host", "127.0.0.1", "--out", "/root/server.pem"],
                     ["cert", "issue", "alice", "--ca-dir", "/root/ca", "--out", "/root/alice.p12",
                      "--password-file", "/root/p12-password"],
                     ["crl", "--ca-dir", "/root/ca", "--out", "/root/crl.pem"]):
            root.run(["deaddrop-admin", *argv])
        return {"svs": "/root/svs/submission-public.asc", "ca": "/root/ca/ca.pem", "crl": "/root/crl.pem"}

    def _install_keys(self, root: ThrowawayRoot, keys: dict[str, str], etc: str) -> None:
        root.run(["install", "-m", "644", keys["svs"], f"{etc}/submission-public.asc"])
        root.run(["install", "-m", "644", keys["ca"], keys["crl"], f"{etc}/"])

    def _tor_option(self) -> str:
        """The private Tor network for the instance's own Tor (DEADDROP_TOR_OPTION's format)."""
        return "DEADDROP_TOR_OPTION=" + ",".join(f"{k}={v}" for k, v in self.net.tor_options) + "\n"

    def _configure(self, root: ThrowawayRoot, keys: dict[str, str]) -> tuple[int, int]:
        """deaddrop.conf as an admin edits it: loopback listeners, the private Tor network."""
        source, journalist = free_port(), free_port()
        self._install_keys(root, keys, "/etc/deaddrop")
        conf = root.path("/etc/deaddrop/deaddrop.conf")
        text = conf.read_text().replace("tcp:8443:interface=10.8.0.1", f"tcp:{journalist}:interface=127.0.0.1")
        conf.write_text(text + f"DEADDROP_SOURCE_LISTEN=tcp:{source}:interface=127.0.0.1\n" + self._tor_option())
        return source, journalist

    def _start(self, root: ThrowawayRoot, ports: tuple[int, int], unit: str = "deaddrop.service",
               instance: str | None = None):
        text = root.path(f"/lib/systemd/system/{unit}").read_text()
        argv = unit_exec(text, lambda path: root.path(path).read_text(), instance)
        log = self.work / f"{instance or 'deaddrop'}.log"
        proc = root.popen(argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, log=log)

        def listening():
            self.assertIsNone(proc.poll(), f"the server exited:\n{log.read_text()[-4000:]}")
            return RawClient(ports[0]).get("/").status == 200 if _open(ports[0]) and _open(ports[1]) else False

        _wait_for(listening, f"{unit} to listen")
        return proc

    def _as_service_user(self, root: ThrowawayRoot, user: str, *argv: str, check: bool = True):
        return root.run(["runuser", "-u", user, "--", *argv], check=check)

    def _sync(self, root: ThrowawayRoot, port: int, secrets: dict[str, str], inbox: str) -> list[str]:
        root.run(["sh", "-c", f"rm -rf /root/session* {inbox}"])
        root.run(["deaddrop-journalist", "--url", f"https://127.0.0.1:{port}", "--cert", "/root/alice.p12",
                  "--cert-password-file", "/root/p12-password", "--ca", "/root/ca/ca.pem", "--username", "alice",
                  "--password-file", secrets["passphrase"], "--totp-secret-file", secrets["totp"],
                  "--session-file", "/root/session/session.json", "sync", "--out", inbox])
        return sorted(p.name for p in root.path(inbox).rglob("*.gpg"))

    def _onion(self, root: ThrowawayRoot, data_dir: str = DATA) -> tuple[str, str]:
        """The published address and a digest of the key behind it."""
        published = root.path(f"{data_dir}/source-onion.txt")
        address = _wait_for(lambda: published.exists() and published.read_text().strip(), "the onion's publication")
        key = root.path(f"{data_dir}/tor/onion-services/source/hs_ed25519_secret_key").read_bytes()
        return address, hashlib.sha256(key).hexdigest()

    # -- the test ----------------------------------------------------------------------------------

    def test_install_use_upgrade_and_run_two_instances(self):
        first, second = self._build_both()
        key = ReleaseKey(self.work / "release-gnupg")
        self.addCleanup(key.stop_agent)
        root = ThrowawayRoot(str(self.work / "machine")).start()
        self.addCleanup(root.stop)
        # The repository is made inside the throwaway root (written through it): a folder of
        # this machine's changed under the overlay would not be seen changing.
        repo = root.path(REPO)
        key.publish(repo, self._debs(first, FIRST))
        self._trust_repository(root)
        root.run(["apt-get", "install", "-y", "deaddrop", "deaddrop-svs", "deaddrop-journalist"])

        # What the package made: the user, the data dir (0700), the options, the tools on PATH.
        st = root.path(DATA).stat()
        self.assertEqual((st.st_mode & 0o7777, root.run(["stat", "-c", "%U", DATA]).stdout.strip()),
                         (0o700, "deaddrop"))
        for tool in ("deaddrop-admin", "deaddrop-svs", "deaddrop-journalist"):
            self.assertEqual(root.run(["sh", "-c", f"command -v {tool}"]).stdout.strip(), f"/usr/bin/{tool}")
        for unit in ("deaddrop.service", "deaddrop@.service"):
            documentation = re.search(r"^Documentation=file:(\S+)$", root.path(f"/lib/systemd/system/{unit}").read_text(),
                                      re.M).group(1)
            self.assertTrue(root.path(documentation).is_file(), documentation)
        policy = root.run(["apt-cache", "policy", "deaddrop"]).stdout
        self.assertIn(f"file:{REPO}/public bookworm/main", policy)

        keys = self._offline_keys(root)
        ports = self._configure(root, keys)
        root.run(["install", "-d", "-m", "700", "-o", "deaddrop", "-g", "deaddrop", f"{DATA}/tls"])
        root.run(["install", "-m", "600", "-o", "deaddrop", "-g", "deaddrop", "/root/server.pem", "/root/server.key",
                  f"{DATA}/tls/"])
        server = self._start(root, ports)
        account = json.loads(self._as_service_user(root, "deaddrop", "deaddrop-admin", "journalist", "add", "alice",
                                                   "--data-dir", DATA, "--json").stdout)
        root.run(["sh", "-c", f"umask 077; mkdir -p /root/alice; echo '{account['passphrase']}' > /root/alice/passphrase;"
                              f" echo '{account['totp_secret']}' > /root/alice/totp"])
        secrets = {"passphrase": "/root/alice/passphrase", "totp": "/root/alice/totp"}

        source = RawClient(ports[0])
        codename = source.create_source()
        self.assertEqual(source.submit(MARKER).status, 303)
        downloaded = self._sync(root, ports[1], secrets, "/root/inbox")
        first_login = time.time()
        self.assertEqual(len(downloaded), 1, downloaded)
        root.run(["deaddrop-svs", "--home", "/root/svs", "decrypt", "/root/inbox", "--out", "/root/plain"])
        plain = [p.read_text(errors="replace") for p in root.path("/root/plain").rglob("*") if p.is_file()]
        self.assertTrue(any(MARKER in text for text in plain), plain)
        onion = self._onion(root)
        ThrowawayRoot.end(server)  # what prerm does under systemd

        # The second release reaches the repository; its last schema step fails.
        key.publish(repo, self._debs(second, SECOND))
        root.run(["apt-get", "update"])
        db = f"{DATA}/db.sqlite"
        before = _schema_version(root, db)
        root.run(["touch", "/etc/deaddrop/fail-test-migration"])
        failed = root.run(["apt-get", "upgrade", "-y"], check=False)
        said = failed.stdout + failed.stderr
        self.assertNotEqual(failed.returncode, 0, said)
        self.assertIn(f"the database is back at version {before}, as the previous DeadDrop left it", said)
        self.assertEqual(_schema_version(root, db), before)
        way_back = re.search(r"deaddrop:   (apt-get install --allow-downgrades .*)", said)
        self.assertIsNotNone(way_back, said)
        self.assertEqual(sorted(way_back.group(1).split()[3:]), sorted(f"{p}={FIRST}" for p in PACKAGES))
        root.run(way_back.group(1).split() + ["-y"])
        server = self._start(root, ports)
        self.assertEqual(RawClient(ports[0]).login(codename).status, 303)  # the old version, the old data
        ThrowawayRoot.end(server)

        # Again, the step allowed to succeed: the upgrade migrates, after a copy.
        root.run(["rm", "/etc/deaddrop/fail-test-migration"])
        upgraded = root.run(["apt-get", "upgrade", "-y"])
        self.assertIn(f"upgraded from schema version {before} to {before + 2}", upgraded.stdout)
        self.assertEqual(_schema_version(root, db), before + 2)
        copies = sorted(root.path(f"{DATA}/backups").glob(f"db-schema{before}-*.sqlite"))
        self.assertEqual(len(copies), 2, copies)  # one for each attempt
        copy = copies[-1]
        self.assertEqual(_schema_version(root, f"{DATA}/backups/{copy.name}"), before)
        self.assertIn(f"Installed: {SECOND}", root.run(["apt-cache", "policy", "deaddrop"]).stdout)
        server = self._start(root, ports)
        source = RawClient(ports[0])
        self.assertEqual(source.login(codename).status, 303)
        _wait_for(lambda: int(time.time() // 30) != int(first_login // 30), "a new one-time code", 31)
        self.assertEqual(self._sync(root, ports[1], secrets, "/root/inbox-after"), downloaded)
        self.assertEqual(self._onion(root), onion)
        ThrowawayRoot.end(server)

        self._two_instances(root, keys)

    def _two_instances(self, root: ThrowawayRoot, keys: dict[str, str]) -> None:
        refused = root.run(["deaddrop-admin", "instance", "add", "alpha"], check=False)
        self.assertIn(f"{DATA} is deaddrop.service's initialised data dir", refused.stderr)
        # A host of instances runs no deaddrop.service: the single instance's data goes.
        root.run(["sh", "-c", f"rm -rf {DATA} && install -d -m 700 -o deaddrop -g deaddrop {DATA}"])
        ports = {}
        for name in ("alpha", "beta"):
            ports[name] = free_port(), free_port()
            out = root.run(["deaddrop-admin", "instance", "add", name,
                            "--source-listen", f"tcp:{ports[name][0]}:interface=127.0.0.1",
                            "--journalist-listen", f"tcp:{ports[name][1]}:interface=127.0.0.1"]).stdout
            self.assertIn(f"made the system user deaddrop-{name}", out)
            self._install_keys(root, keys, f"/etc/deaddrop/{name}")
            with open(root.path(f"/etc/deaddrop/{name}.conf"), "a") as conf:
                conf.write(self._tor_option())
        self.assertEqual(root.path(DATA).stat().st_mode & 0o7777, 0o711)
        servers = {name: self._start(root, ports[name], "deaddrop@.service", name) for name in ports}
        onions = {name: self._onion(root, f"{DATA}/{name}")[0] for name in ports}
        self.assertNotEqual(onions["alpha"], onions["beta"])
        self._as_service_user(root, "deaddrop-alpha", "deaddrop-admin", "--instance", "alpha", "journalist", "add",
                              "alice")
        for name, has_alice in (("alpha", True), ("beta", False)):
            listed = self._as_service_user(root, f"deaddrop-{name}", "deaddrop-admin", "journalist", "list",
                                           "--instance", name, "--json").stdout
            self.assertEqual("alice" in listed, has_alice, listed)
        # Neither instance's user can open the other's files, nor list the instances.
        for reader, other in (("deaddrop-beta", "alpha"), ("deaddrop-alpha", "beta")):
            for argv in (["cat", f"{DATA}/{other}/db.sqlite"], ["ls", DATA], ["ls", f"{DATA}/{other}"]):
                denied = self._as_service_user(root, reader, *argv, check=False)
                self.assertNotEqual(denied.returncode, 0, (reader, argv, denied.stdout))
                self.assertIn("Permission denied", denied.stderr, (reader, argv))
            refused = self._as_service_user(root, reader, "deaddrop-admin", "--instance", other, "journalist", "list",
                                            check=False)
            self.assertNotEqual(refused.returncode, 0, refused.stdout)
        for proc in servers.values():
            ThrowawayRoot.end(proc)
        # postinst migrates every instance, each as its own user.
        reinstalled = root.run(["apt-get", "install", "-y", "--reinstall", "deaddrop"]).stdout
        for name in ports:
            self.assertIn(f"{DATA}/{name}: schema version", reinstalled)
        self._remove_and_purge(root)

    def _remove_and_purge(self, root: ThrowawayRoot) -> None:
        """dpkg -r keeps everything but the program; dpkg -P asks nothing (no terminal here to
        ask on) and removes the options file, never the data."""
        kept = sorted(p.name for p in root.path(DATA).iterdir())
        root.run(["dpkg", "-r", "deaddrop-svs", "deaddrop-journalist", "deaddrop"], stdin=subprocess.DEVNULL)
        self.assertTrue(root.path("/etc/deaddrop/deaddrop.conf").exists())
        purged = root.run(["dpkg", "-P", "deaddrop"], stdin=subprocess.DEVNULL).stdout
        self.assertIn("deaddrop: kept /var/lib/deaddrop", purged)
        self.assertFalse(root.path("/etc/deaddrop/deaddrop.conf").exists())
        self.assertEqual(sorted(p.name for p in root.path(DATA).iterdir()), kept)
        self.assertTrue(root.path(f"{DATA}/alpha/db.sqlite").exists())


def _open(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
