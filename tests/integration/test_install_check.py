"""docs/deploy/install.md, executed: ``scripts/install-check`` runs every command of the guide
exactly as written, in a scratch prefix (what cannot run here is said and its file checked), from
a fresh machine to a photo published without its metadata, a reply the source reads and a
restore on a new server; and it fails, naming the step, when a command of the guide is changed
so that it no longer works (issue 27, items 2, 3, 4, 5, 7, 9 and the cosmetic ones)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from twisted.trial import unittest

from tests._support import short_tempdir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-check"
GUIDE = ROOT / "docs" / "deploy" / "install.md"
CLONE = "git clone https://<YOUR-MIRROR>/deaddrop.git /opt/deaddrop"
TUNNEL = ["cd /etc/wireguard && umask 077 && wg genkey | tee server.key | wg pubkey > server.pub",
          "cp /opt/deaddrop/docs/deploy/wg0-server.conf.example /etc/wireguard/wg0.conf"]


def install_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def blocks(*commands: list[str]) -> str:
    """A guide of its own: each list of commands one ``sh`` block (a first line "# On the ..."
    names its machine, as in the guide)."""
    return "".join("```sh\n" + "\n".join(block) + "\n```\n\n" for block in commands)


class InstallGuideTests(unittest.TestCase):
    # A pip install of the package and its dependencies, wheels, three venvs, a server started three times.
    timeout = 1200

    def run_guide(self, text: str, timeout: float = 300) -> subprocess.CompletedProcess:
        guide = Path(short_tempdir("dd-guide-"), "install.md")
        self.addCleanup(shutil.rmtree, guide.parent, True)
        guide.write_text(text)
        return install_check("--guide", str(guide), timeout=timeout)

    def test_the_guide_runs_end_to_end(self):
        proc = install_check(timeout=1180)
        self.assertEqual(proc.returncode, 0, proc.stdout[-6000:] + proc.stderr[-4000:])
        out = proc.stdout
        for said in ["installed (not editable)", "systemd-analyze verify accepts the unit", "exposure 1.2 OK",
                     "the unit's ExecStart (with DEADDROP_OPTIONS environment", "status: running",
                     # step 2 checks a commit that exists, and the install writes twistd's plugin cache
                     "the clone is at", "version 0.1.0", "twistd's plugin cache is complete",
                     "the offline machine, installed from the stick's wheels alone",
                     "the journalist workstation, installed from the stick's wheels alone",
                     # WireGuard starts only after the admin's edit, which the guide asks for between two blocks
                     "the admin edits /etc/wireguard/wg0.conf", "real keys, no placeholder",
                     "it flushes the rule set first",
                     "added journalist alice (administrator)",
                     # deaddrop-journalist asks, and is answered at its terminal: no option added
                     "it asked: Import password for alice.p12:; Passphrase:; One-time code",
                     "the SVS decrypted the message and holiday-photo.jpg",
                     "encrypted for alice on the TRANSFER stick", "with no EXIF, author or camera left",
                     "alice's gpg shows the test message", "read: 'Thank you: your message and photo arrived.'",
                     "the mail server got it inside TLS after the login, and alice's key opens it",
                     "encrypted again to the new server's restore key",
                     "holds, as the guide left it: tls, tls/server.key, tls/server.pem",
                     "kept this server's own tls/server.key, tls/server.pem",
                     "the digest is on, and the journalist interface presents the certificate installed"]:
            self.assertIn(said, out)
        summary = re.search(r"install-check: OK in \d+ s; (\d+) commands: (.*)", out)
        self.assertTrue(summary, out[-2000:])
        # Every command ran as written, or stood in for by a check where this machine cannot run it.
        modes = dict((mode, int(n)) for n, mode in re.findall(r"(\d+) ([^,]+)", summary.group(2)))
        self.assertLessEqual(set(modes), {"as written", "stood in", "as written (without -o/-g deaddrop)",
                                          "as written (without runuser)"})
        self.assertEqual(sum(modes.values()), int(summary.group(1)))
        self.assertGreater(modes["as written"], modes["stood in"])
        # runuser (in Debian's base system), never sudo (missing where root has a password).
        self.assertNotIn("sudo ", GUIDE.read_text("utf-8").split("## 1.", 1)[1])

    def test_a_broken_step_of_the_guide_fails_and_is_named(self):
        text = GUIDE.read_text("utf-8")
        self.assertIn("\nchmod 700 /var/lib/deaddrop\n", text)
        proc = self.run_guide(text.replace("\nchmod 700 /var/lib/deaddrop\n", "\nchmod 700 /var/lib/deadrop\n"), 120)
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("FAILED: step 5 (1. Packages and the service user) failed: chmod 700 /var/lib/deadrop",
                      proc.stderr)
        self.assertIn("No such file or directory", proc.stderr)

    def test_the_tunnel_started_before_its_keys_are_edited_fails(self):
        # Item 9: pasted as one block, the enable started wg0 with the example's placeholder keys.
        text = GUIDE.read_text("utf-8")
        for line in TUNNEL + [CLONE, "systemctl enable --now wg-quick@wg0"]:
            self.assertIn(line, text)
        one_block = self.run_guide(blocks([CLONE], TUNNEL + ["systemctl enable --now wg-quick@wg0"]))
        self.assertIn("FAILED: step 4 () failed: systemctl enable --now wg-quick@wg0\nwg-quick@wg0 would start",
                      one_block.stderr)
        self.assertIn("PrivateKey is still the example's placeholder <contents of server.key>", one_block.stderr)
        as_the_guide = self.run_guide(blocks([CLONE], TUNNEL, ["systemctl enable --now wg-quick@wg0"]))
        self.assertIn("real keys, no placeholder", as_the_guide.stdout)
        self.assertIn("FAILED: the guide no longer reaches:", as_the_guide.stderr)  # this guide is only a part

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
        # Item 4: each machine runs only the programs of the packages its apt-get line names.
        export = "gpg --armor --export <ALICE-ADDRESS> > /media/transfer/alice-personal.asc"
        self.assertIn(export, GUIDE.read_text("utf-8"))
        self.assertIn("# On the journalist workstation\napt-get install -y python3-venv wireguard gnupg\n",
                      GUIDE.read_text("utf-8"))
        without = self.run_guide(blocks(["# On the journalist workstation", "apt-get install -y python3-venv wireguard",
                                         export]))
        self.assertIn(f"FAILED: step 2 () failed: {export}", without.stderr)
        self.assertIn("gpg: command not found", without.stderr)
        with_it = self.run_guide(blocks(["# On the journalist workstation",
                                         "apt-get install -y python3-venv wireguard gnupg", export]))
        self.assertIn("[2/2]", with_it.stdout)
        self.assertIn("FAILED: the guide no longer reaches:", with_it.stderr)

    def test_a_stick_where_it_must_not_go_fails(self):
        # Item 5: the KEYS stick never leaves the offline machine, the TLS stick never reaches a
        # workstation, and there are no other sticks.
        keys = self.run_guide(blocks(["mkdir -p /etc/deaddrop", "cp /media/keys/ca/ca.pem /etc/deaddrop/"]))
        self.assertIn("the KEYS stick on the server: it goes only to the offline machine", keys.stderr)
        tls = self.run_guide(blocks(["# On the journalist workstation", "ls /media/tls"]))
        self.assertIn("the TLS stick on the journalist workstation", tls.stderr)
        usb = self.run_guide(blocks(["# On the offline machine", "ls /media/usb"]))
        self.assertIn("/media/usb is none of the guide's sticks (export, keys, tls, transfer)", usb.stderr)


class _Parts(unittest.TestCase):
    """install-check's parts on their own, on a scratch prefix."""

    def setUp(self) -> None:
        sys.path.insert(0, str(ROOT / "scripts"))
        self.addCleanup(sys.path.remove, str(ROOT / "scripts"))
        from installcheck import steps
        from installcheck.guide import Command

        self.steps = steps
        prefix = Path(short_tempdir("dd-ic-"))
        self.addCleanup(shutil.rmtree, prefix, True)
        (prefix / "root").mkdir()
        self.run_ = steps.Run(prefix, 1, 2, dict(os.environ), ROOT)
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


class KeysStayOnTheirStickTests(_Parts):
    def test_a_secret_of_the_keys_stick_found_elsewhere_is_named(self):
        # Item 6: the backup key's secret half never reaches an online machine; nor the SVS's.
        prefix = self.run_.prefix
        grip = "0123456789ABCDEF0123456789ABCDEF01234567.key"
        for home in ("media/keys/backup-gnupg", "root/restore-gnupg"):
            (prefix / home / "private-keys-v1.d").mkdir(parents=True)
            (prefix / home / "private-keys-v1.d" / grip).write_text("(secret)")
        (prefix / "media" / "tls").mkdir()
        (prefix / "media" / "tls" / "server.key").write_text("-----BEGIN PRIVATE KEY-----")
        self.assertEqual(self.steps.secrets_out_of_place(prefix), [
            f"{prefix}/root/restore-gnupg/private-keys-v1.d/{grip} is the secret key "
            f"{prefix}/media/keys/backup-gnupg/private-keys-v1.d/{grip} of the KEYS stick",
            f"the TLS stick holds a private key: {prefix}/media/tls/server.key",
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
        (self.run_.prefix / "workstation" / "etc").mkdir(parents=True)
        line = "echo '10.8.0.1 <JOURNALIST-HOST>' >> /etc/hosts"
        self.assertIn(f"\n{line}\n", GUIDE.read_text("utf-8"))
        self.run_.allowed = {self.run_.moved(line)}
        self.steps.dispatch(self.run_, line)
        self.assertEqual((self.run_.prefix / "workstation" / "etc" / "hosts").read_text(), "127.0.0.1 newsroom.example\n")
        self.assertIn("host name on the workstation", self.run_.reached)
        other = "echo '10.8.0.1 intranet.example' >> /etc/hosts"
        self.run_.allowed = {self.run_.moved(other)}
        with self.assertRaises(self.steps.StepFailed) as caught:
            self.steps.dispatch(self.run_, other)
        self.assertIn("intranet.example is not a name of the server certificate", str(caught.exception))

    def test_the_guide_names_the_host_wherever_it_makes_a_server_certificate(self):
        lines = [c.text for c in self.steps.guide_commands(GUIDE.read_text("utf-8")) if " cert server " in c.text]
        self.assertEqual(len(lines), 2)  # the first server's and the restored one's
        for line in lines:
            self.assertIn("--host <JOURNALIST-HOST> --host 10.8.0.1 ", line)


class PluginCacheTests(unittest.TestCase):
    """Cosmetic item: every start as the service user warned that twistd's plugin cache could not
    be written. The guide's install writes it as root; install-check's probe sees a start that
    may not write (as the service user may not) and says what twistd would log."""

    def test_the_guide_s_line_leaves_nothing_for_the_service_user_to_write(self):
        sys.path.insert(0, str(ROOT / "scripts"))
        self.addCleanup(sys.path.remove, str(ROOT / "scripts"))
        from installcheck import steps

        line = re.search(r"^/opt/deaddrop/\.venv/bin/python (-c '.*getPlugins.*')$", GUIDE.read_text("utf-8"), re.M)
        self.assertTrue(line, "the guide writes twistd's plugin cache after pip install")
        prefix = Path(short_tempdir("dd-ic-"))
        self.addCleanup(shutil.rmtree, prefix, True)
        (prefix / "root").mkdir()
        plugins = prefix / "more" / "twisted" / "plugins"  # a new plugin folder, as a fresh install has
        plugins.mkdir(parents=True)
        (plugins / "a_plugin.py").write_text("")
        run = steps.Run(prefix, 1, 2, dict(os.environ, PYTHONPATH=str(prefix / "more")), ROOT)
        python = Path(sys.executable)
        self.assertIn(f"Unable to write to plugin cache {plugins}/dropin.cache",
                      steps.plugin_cache_warning(run, python) or "")
        subprocess.run(f"{python} {line.group(1)}", shell=True, check=True, env=run.env(), cwd=prefix)
        self.assertIsNone(steps.plugin_cache_warning(run, python))
