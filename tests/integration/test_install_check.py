"""docs/deploy/install.md, executed: ``scripts/install-check`` runs every command of the guide
exactly as written, each machine in a throwaway root of its own, the Debian packages really
installed from a signed repository by the guide's own apt commands (issue 32, item 5), from a
fresh machine to a photo published without its metadata, a reply the source reads and a restore
on a new server; and it fails, naming the step, when a command of the guide is changed so that it
no longer works (issue 27)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from twisted.trial import unittest

from tests._debian import missing_tools
from tests._support import short_tempdir
from tests._throwaway_root import ThrowawayRoot

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-check"
GUIDE = ROOT / "docs" / "deploy" / "install.md"
SERVER_TUNNEL = re.compile(r"(\(cd /etc/wireguard && umask 077 && wg genkey \| tee server\.key .*?\nWG)\n", re.S)
_built: list[str] = []


def debs() -> str:
    """The packages, built once for this module (CI builds them once for the run: DEADDROP_TEST_DEBS)."""
    given = os.environ.get("DEADDROP_TEST_DEBS")
    if given:
        return given
    if not _built:
        out = Path(short_tempdir("dd-debs-"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        proc = subprocess.run(["python3", str(ROOT / "scripts" / "build-deb"), "--quick", "--out", str(out)],
                              capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        _built.append(str(out))
    return _built[0]


def install_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def blocks(*commands: list[str]) -> str:
    """A guide of its own: each list of commands one ``sh`` block (a first line "# On the ..."
    names its machine, as in the guide)."""
    return "".join("```sh\n" + "\n".join(block) + "\n```\n\n" for block in commands)


def needs_machines() -> None:
    reason = ThrowawayRoot.unavailable() or missing_tools()
    if reason:
        raise unittest.SkipTest(reason)


class InstallGuideTests(unittest.TestCase):
    # The packages built (unless CI built them), four machines, three starts of the server.
    timeout = 1200

    def setUp(self) -> None:
        needs_machines()

    def run_guide(self, text: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        guide = Path(short_tempdir("dd-guide-"), "install.md")
        self.addCleanup(shutil.rmtree, guide.parent, True)
        guide.write_text(text)
        return install_check("--guide", str(guide), *args, timeout=timeout)

    def test_the_guide_runs_end_to_end(self):
        proc = install_check("--debs", debs(), timeout=1180)
        self.assertEqual(proc.returncode, 0, proc.stdout[-6000:] + proc.stderr[-4000:])
        out = proc.stdout
        for said in ["the admin compares:", "is the README's fingerprint (here the throwaway release key's)",
                     "installed from the signed repository", "pinned at 500",
                     "the package made the deaddrop user and /var/lib/deaddrop (0700, its own)",
                     "unattended-upgrades is on and takes origin=DeadDrop,label=DeadDrop,codename=${distro_codename}",
                     "on the TRANSFER stick, checked against the signed index: deaddrop-common_",
                     "on the offline machine, from the stick's files alone: {'deaddrop-common': ",
                     "each end of the tunnel lists the other's public key", "it flushes the rule set first",
                     "systemd-analyze verify accepts the unit", "exposure 1.2 OK",
                     "the unit's ExecStart as its User with its environment", "status: running",
                     "added journalist alice (administrator)",
                     # deaddrop-journalist asks, and is answered at its terminal: no option added
                     "it asked: Import password for alice.p12:; Passphrase:; One-time code",
                     "the SVS decrypted the message and holiday-photo.jpg",
                     "encrypted for alice on the TRANSFER stick", "with no EXIF, author or camera left",
                     "alice's gpg shows the test message", "read: 'Thank you: your message and photo arrived.'",
                     "keeps its", "ends with the digest's options",
                     "the mail server got it inside TLS after the login, and alice's key opens it",
                     "the admin does steps 1, 4 again here, as section 8 says",
                     "encrypted again to the new server's restore key",
                     "holds, as the guide left it: tls, tls/server.key, tls/server.pem",
                     "kept this server's own tls/server.key, tls/server.pem",
                     "the digest is on, and the journalist interface presents the certificate installed"]:
            self.assertIn(said, out)
        summary = re.search(r"install-check: OK in \d+ s; (\d+) commands \(and (\d+) again on the new server\): (.*)",
                            out)
        self.assertTrue(summary, out[-2000:])
        # Every command ran as written, or stood in for by a check where this machine cannot run it.
        modes = dict((mode, int(n)) for n, mode in re.findall(r"(\d+) ([^,]+)", summary.group(3)))
        self.assertLessEqual(set(modes), {"as written", "stood in"})
        self.assertEqual(sum(modes.values()), int(summary.group(1)) + int(summary.group(2)))
        self.assertGreater(modes["as written"], 5 * modes["stood in"])
        # runuser (in Debian's base system), never sudo (missing where root has a password).
        self.assertNotIn("sudo ", GUIDE.read_text("utf-8").split("## 1.", 1)[1])

    def test_a_guide_installing_a_package_the_repository_lacks_fails_and_is_named(self):
        text = GUIDE.read_text("utf-8")
        line = "\napt-get update && apt-get install -y deaddrop\n"
        self.assertIn(line, text)
        proc = self.run_guide(text.replace(line, "\napt-get update && apt-get install -y deaddrop-server\n"),
                              "--debs", debs())
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("FAILED: step 6 (1. The server's packages) failed: apt-get update && apt-get install -y "
                      "deaddrop-server", proc.stderr)
        self.assertIn("Unable to locate package deaddrop-server", proc.stderr)

    def test_the_server_s_tunnel_needs_the_workstation_s_key_first(self):
        # The guide once asked for the workstation's public key before the workstation made one.
        text = GUIDE.read_text("utf-8")
        server = SERVER_TUNNEL.search(text).group(1)
        self.assertLess(text.index("wg pubkey > /media/transfer/alice-wg.pub"), text.index(server))
        install = "apt-get update && apt-get install -y wireguard"
        enable = "systemctl enable --now wg-quick@wg0"
        before = self.run_guide(blocks([install, *server.split("\n", 1), enable]))
        self.assertIn(f"failed: {enable}\nwg-quick@wg0 would start with /etc/wireguard/wg0.conf as it is: "
                      "line 7: PublicKey is not a WireGuard key", before.stderr)
        workstation = ["# On the journalist workstation", install,
                       "(cd /etc/wireguard && umask 077 && wg genkey | tee deaddrop.key | wg pubkey > "
                       "/media/transfer/alice-wg.pub)"]
        after = self.run_guide(blocks(workstation, [install, *server.split("\n", 1), enable]))
        self.assertIn("/etc/wireguard/wg0.conf has a valid structure and real keys", after.stdout)
        self.assertIn("FAILED: the guide no longer reaches:", after.stderr)  # this guide is only a part

    def test_a_firewall_that_does_not_flush_first_fails(self):
        text = GUIDE.read_text("utf-8")
        firewall = re.search(r"(cat > /etc/nftables.conf <<'NFT'\n.*?\nNFT)\n", text, re.S).group(1)
        self.assertIn("\nflush ruleset\n", firewall)
        without = self.run_guide(blocks([firewall.replace("flush ruleset\n", ""), "systemctl enable --now nftables"]))
        self.assertIn("it does not begin with 'flush ruleset': loading it again would add a second copy of every "
                      "rule", without.stderr)
        with_it = self.run_guide(blocks([firewall, "systemctl enable --now nftables"]))
        self.assertIn("it flushes the rule set first", with_it.stdout)

    def test_a_workstation_without_gnupg_cannot_hand_over_alices_key(self):
        # Each machine runs only the programs of the packages its apt-get lines installed.
        export = "gpg --armor --export <ALICE-ADDRESS> > /media/transfer/alice-personal.asc"
        self.assertIn(export, GUIDE.read_text("utf-8"))
        without = self.run_guide(blocks(["# On the journalist workstation", "apt-get update && apt-get install -y wget",
                                         export]))
        self.assertIn(f"FAILED: step 2 () failed: {export}", without.stderr)
        self.assertIn("gpg: command not found", without.stderr)
        with_it = self.run_guide(blocks(["# On the journalist workstation",
                                         "apt-get update && apt-get install -y wget gnupg", export]))
        self.assertIn("[2/2]", with_it.stdout)
        self.assertIn("FAILED: the guide no longer reaches:", with_it.stderr)

    def test_a_stick_where_it_must_not_go_fails(self):
        # The KEYS stick never leaves the offline machine, the TLS stick never reaches a
        # workstation, and there are no other sticks.
        keys = self.run_guide(blocks(["mkdir -p /etc/deaddrop", "cp /media/keys/ca/ca.pem /etc/deaddrop/"]))
        self.assertIn("the KEYS stick on the server: it goes only to the offline machine", keys.stderr)
        tls = self.run_guide(blocks(["# On the journalist workstation", "ls /media/tls"]))
        self.assertIn("the TLS stick on the journalist workstation", tls.stderr)
        usb = self.run_guide(blocks(["# On the offline machine", "ls /media/usb"]))
        self.assertIn("/media/usb is none of the guide's sticks (export, keys, tls, transfer)", usb.stderr)


class _Parts(unittest.TestCase):
    """install-check's parts on their own, on machines of their own."""

    def setUp(self) -> None:
        needs_machines()
        sys.path.insert(0, str(ROOT / "scripts"))
        self.addCleanup(sys.path.remove, str(ROOT / "scripts"))
        from installcheck import machines, steps
        from installcheck.guide import Command

        self.steps = steps
        prefix = Path(short_tempdir("dd-ic-"))
        os.chmod(prefix, 0o755)
        self.addCleanup(shutil.rmtree, prefix, True)
        (prefix / "media" / "transfer").mkdir(parents=True)

        def make(name: str):
            machine = machines.Machine(name, prefix / "machines" / name.replace(" ", "-"),
                                       {"transfer": prefix / "media" / "transfer"}, "http://127.0.0.1:9")
            self.addCleanup(machine.stop)
            return machine

        self.run_ = steps.Run(prefix, 1, 2, {"LANG": "C.UTF-8"}, ROOT, make_machine=make)
        self.run_.command = Command("test", "echo as the guide says")
        self.run_.allowed = {"echo as the guide says"}
        self.run_.modes.append("")


class RunsOnlyTheGuideTests(_Parts):
    """install-check's own guard: it runs a guide command in no other words than the guide's."""

    def test_the_guide_s_words_run(self):
        self.assertIn("as the guide says", self.run_.execute("echo as the guide says").output)

    def test_an_added_option_is_refused(self):
        with self.assertRaises(self.steps.StepFailed) as caught:
            self.run_.execute("echo as the guide says --cert-password-file /tmp/p12")
        self.assertIn("install-check would run something the guide does not say", str(caught.exception))

    def test_a_question_is_answered_at_the_terminal(self):
        self.run_.answers["p12"] = "imported"
        command = "read -rsp 'Import password for alice.p12: ' p && echo got $p"
        self.run_.allowed = {command}
        done = self.run_.execute(command)
        self.assertIn("got imported", done.output)
        self.assertEqual(done.prompts, ["Import password for alice.p12:"])

    def test_a_command_runs_on_its_own_machine(self):
        command = "echo written here > /etc/installcheck-test && cat /etc/installcheck-test"
        self.run_.allowed = {command}
        self.assertIn("written here", self.run_.execute(command).output)
        self.assertFalse(os.path.exists("/etc/installcheck-test"))  # this machine is left as it was
        self.run_.machine = "journalist workstation"
        self.assertFalse(self.run_.path("/etc/installcheck-test").exists())  # nor is another machine


class KeysStayOnTheirStickTests(unittest.TestCase):
    def test_a_secret_of_the_keys_stick_found_elsewhere_is_named(self):
        # The backup key's secret half never reaches an online machine; nor the SVS's.
        sys.path.insert(0, str(ROOT / "scripts"))
        self.addCleanup(sys.path.remove, str(ROOT / "scripts"))
        from installcheck.newserver import secrets_out_of_place

        prefix = Path(short_tempdir("dd-ic-"))
        self.addCleanup(shutil.rmtree, prefix, True)
        grip = "0123456789ABCDEF0123456789ABCDEF01234567.key"
        for home in ("media/keys/backup-gnupg", "server/root/restore-gnupg", "offline/root/copy"):
            (prefix / home / "private-keys-v1.d").mkdir(parents=True)
            (prefix / home / "private-keys-v1.d" / grip).write_text("(secret)")
        (prefix / "media" / "tls").mkdir()
        (prefix / "media" / "transfer").mkdir()
        (prefix / "media" / "tls" / "server.key").write_text("-----BEGIN PRIVATE KEY-----")
        self.assertEqual(secrets_out_of_place(prefix / "media", {"server": prefix / "server",
                                                                 "offline machine": prefix / "offline"}), [
            f"the server's server/root/restore-gnupg/private-keys-v1.d/{grip} is the secret key "
            f"keys/backup-gnupg/private-keys-v1.d/{grip} of the KEYS stick",
            "the TLS stick holds a private key: tls/server.key",
            "the TLS stick holds more than certificates: ['server.key']"])


class HostNameTests(_Parts):
    """Security keys (WebAuthn) refuse an interface opened by an IP address: the guide's server
    certificate names a host name, and the workstation sends that name to the server's VPN address."""

    def cert_server(self, *hosts: str) -> str:
        from deaddrop.transport import ca

        ca_dir, out = self.run_.prefix / "ca", self.run_.prefix / f"server-{len(hosts)}.pem"
        ca.init_ca(str(ca_dir))
        self.addCleanup(shutil.rmtree, ca_dir, True)
        admin = Path(sys.executable).parent / "deaddrop-admin"
        command = f"{admin} cert server --ca-dir {ca_dir} " + " ".join(f"--host {h}" for h in hosts) + f" --out {out}"
        self.run_.guide, self.run_.allowed = GUIDE.read_text("utf-8"), {self.run_.moved(command)}
        self.steps.dispatch(self.run_, command)
        return command

    def test_a_certificate_for_an_address_only_fails(self):
        with self.assertRaises(self.steps.StepFailed) as caught:
            self.cert_server("10.8.0.1")
        self.assertIn("names no host name, only addresses: journalists' security keys (WebAuthn) refuse",
                      str(caught.exception))
        self.assertNotIn("host name for security keys", self.run_.reached)

    def test_a_certificate_with_a_name_reaches_security_keys_and_the_workstation_resolves_it(self):
        self.cert_server("newsroom.example", "10.8.0.1")
        self.assertIn("host name for security keys", self.run_.reached)
        self.assertEqual(self.run_.host_names, {"newsroom.example"})
        self.run_.machine = "journalist workstation"
        hosts = self.run_.path("/etc/hosts").read_text()
        line = "echo '10.8.0.1 <JOURNALIST-HOST>' >> /etc/hosts"
        self.assertIn(f"\n{line}\n", GUIDE.read_text("utf-8"))
        self.run_.allowed = {self.run_.moved(line)}
        self.steps.dispatch(self.run_, line)
        self.assertEqual(self.run_.path("/etc/hosts").read_text(), hosts + "127.0.0.1 newsroom.example\n")
        self.assertIn("host name on the workstation", self.run_.reached)
        other = "echo '10.8.0.1 intranet.example' >> /etc/hosts"
        self.run_.allowed = {self.run_.moved(other)}
        with self.assertRaises(self.steps.StepFailed) as caught:
            self.steps.dispatch(self.run_, other)
        self.assertIn("intranet.example is not a name of the server certificate", str(caught.exception))

    def test_the_guide_names_the_host_wherever_it_makes_a_server_certificate(self):
        from installcheck.guide import guide_commands

        lines = [c.text for c in guide_commands(GUIDE.read_text("utf-8")) if " cert server " in c.text]
        self.assertEqual(len(lines), 2)  # the first server's and the restored one's
        for line in lines:
            self.assertIn("--host <JOURNALIST-HOST> --host 10.8.0.1 ", line)
