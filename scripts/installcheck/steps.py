"""Each command of the guide, run as written on its machine or, where this machine cannot (no
systemd as PID 1, no WireGuard or nftables, no Internet), stood in for by a check of what it would
use (standins.py); and what each must show. ``Run.execute`` is the only way a guide command runs,
and it refuses anything but the guide's own text (its placeholders filled, the VPN address moved
to 127.0.0.1): install-check never adds an option or changes a word."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from installcheck import people
from installcheck.guide import Command, guide_commands
from installcheck.terminal import Finished, Unanswered, run_in_terminal

# The sticks of the guide's table and the machines each may be plugged into.
STICKS = {"keys": {"offline machine"}, "tls": {"offline machine", "server", "new server"},
          "transfer": {"offline machine", "server", "new server", "journalist workstation"},
          "export": {"offline machine"}}
PROMPTS = [(re.compile(r"(?i)mail server password"), "smtp password"),
           (re.compile(r"(?i)(\.p12|pkcs ?#?12|import password)"), "p12"),
           (re.compile(r"(?i)passphrase"), "passphrase"),
           (re.compile(r"(?i)(one-time|two-factor|six-digit|totp).*code|^code"), "code")]
FILLED = {"<ALICE-ADDRESS>": "alice@example.org", "<DEADDROP-ADDRESS>": "deaddrop@example.org",
          "<MAIL-LOGIN>": "deaddrop", "<JOURNALIST-HOST>": "newsroom.example", "<SERVER-PUBLIC-ADDRESS>": "127.0.0.1"}
MAIL_CA = "/run/installcheck/mail-ca.pem"  # inside a machine: the local mail server's certificate


class StepFailed(Exception):
    pass


@dataclass
class Run:
    prefix: Path
    journalist_port: int
    source_port: int
    base_env: dict[str, str]
    checkout: Path
    command: Command | None = None
    machine: str = "server"
    machines: dict[str, object] = field(default_factory=dict)  # name -> machines.Machine
    make_machine: Callable[[str], object] | None = None
    release_key: str = ""  # the fingerprint the README would give (the throwaway key's)
    repository: str = ""  # the URL <YOUR-MIRROR>'s repository is served at here
    allowed: set[str] = field(default_factory=set)  # what may run for the current command
    as_user: str = ""  # "runuser -u deaddrop -- " while its command is dispatched
    answers: dict[str, str] = field(default_factory=dict)
    last_code: str | None = None
    placeholders: dict[str, str] = field(default_factory=lambda: dict(FILLED))
    servers: list[subprocess.Popen] = field(default_factory=list)
    smtp: object | None = None  # tests._smtp_server.SmtpServer, once the digest's options name it
    smtp_trust: Path | None = None  # the CA bundle the server trusts the mail server with
    marker: str = field(default_factory=lambda: f"install-check test message {os.urandom(4).hex()}")
    photo_name: str = "holiday-photo.jpg"
    codename: str = ""
    reply_text: str = ""
    new_server: bool = False
    restored: bool = False
    new_certificate: str | None = None
    tunnels: dict[str, str] = field(default_factory=dict)  # machine -> the WireGuard file it started
    host_names: set[str] = field(default_factory=set)  # the DNS names the server certificates carry
    guide: str = ""  # the guide's text: what `cert server` may name
    reached: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)  # per command: how it ran (as written, stood in)
    replayed: int = 0  # commands the admin did again on the new server

    # -- the guide's text, here

    def moved(self, text: str) -> str:
        if self.repository:
            text = text.replace("https://<YOUR-MIRROR>/deaddrop", self.repository)
        for placeholder, value in self.placeholders.items():
            text = text.replace(placeholder, value)
        text = text.replace("tcp:8443:interface=10.8.0.1", f"tcp:{self.journalist_port}:interface=127.0.0.1")
        return text.replace("10.8.0.1:8443", f"127.0.0.1:{self.journalist_port}").replace("10.8.0.1", "127.0.0.1")

    @property
    def here(self):  # the current machine (machines.Machine)
        if self.machine not in self.machines:
            self.machines[self.machine] = self.make_machine(self.machine)
        return self.machines[self.machine]

    def path(self, guide_path: str) -> Path:
        """Where ``guide_path`` of the current machine is, seen from here."""
        return self.here.path(self.moved(guide_path))

    def env(self) -> dict[str, str]:
        from installcheck.machines import PROGRAMS

        env = dict(self.base_env, HOME="/root", PATH=PROGRAMS, TERM="xterm")
        if self.smtp_trust is not None:
            trust = self.here.path(MAIL_CA)
            if not trust.exists():
                trust.write_bytes(self.smtp_trust.read_bytes())
            env["SSL_CERT_FILE"] = MAIL_CA
        return env

    def reach(self, milestone: str) -> None:
        if milestone not in self.reached:
            self.reached.append(milestone)

    # -- running

    def execute(self, text: str, *, check: bool = True, timeout: float = 900) -> Finished:
        """Run ``text``, which must be the guide's command as the current step allows it, in a
        terminal of the current machine, as root in its home folder."""
        if text not in self.allowed:
            raise StepFailed(f"install-check would run something the guide does not say:\n  it: {text}\n  "
                             f"the guide: {self.moved(self.command.text) if self.command else '?'}")
        root = self.here.root
        argv = root._enter(["/usr/bin/env", "-C", "/root", "/bin/bash", "-e", "-o", "pipefail", "-c", text])
        try:
            done = run_in_terminal(argv, "/", self.env(), self.answer, timeout)
        except (Unanswered, TimeoutError) as e:
            raise StepFailed(f"{e}: {text}") from None
        if check and done.status != 0:
            raise StepFailed(f"exit {done.status}: {text}\n{done.output}".rstrip())
        return done

    def as_written(self, command: str, **kw) -> Finished:
        self.mode("as written")
        return self.execute(self.moved(self.as_user + command), **kw)

    def stand_in(self, reason: str) -> None:
        self.mode("stood in")
        say(f"  stood in: {reason}")

    def mode(self, mode: str) -> None:
        if self.modes and not self.modes[-1]:
            self.modes[-1] = mode

    def answer(self, prompt: str) -> str | None:
        for pattern, what in PROMPTS:
            if pattern.search(prompt):
                if what == "code":
                    self.last_code = people.totp_now(self.answers["totp"], not_this=self.last_code)
                    return self.last_code
                return self.answers.get(what)
        return None

    def probe(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """install-check's own look at the current machine (never a guide command)."""
        return self.here.run(argv, check=False, env={k: v for k, v in self.env().items()
                                                     if k in ("PATH", "SSL_CERT_FILE", "HOME")}, **kw)


def say(text: str) -> None:
    print(text, flush=True)


# -- the packages ---------------------------------------------------------------------------------


def apt_install(run: Run, m: re.Match, command: str) -> None:
    """apt-get as written: Debian's packages from the stand-in mirror (or as this machine has
    them), DeadDrop's from the repository the guide trusts, or from the stick's files."""
    run.as_written(command)
    named = m.group(1).split()
    names = [Path(n).name.split("_")[0] if n.startswith("/") else n for n in named if not n.startswith("-")]
    machine = run.here
    machine.installed(names)
    ours = [n for n in names if n.startswith("deaddrop")]
    if not ours:
        say(f"  installed on the {run.machine}: {' '.join(names)} (Debian's: see the stand-ins)")
        run.reach("Debian packages" if run.machine in ("server", "new server") else f"{run.machine} Debian packages")
        return
    versions = {n: machine.version(n) for n in ours}
    if not all(versions.values()):
        raise StepFailed(f"apt-get said nothing failed, but these are not installed: {versions}")
    if named[0].startswith("/"):
        say(f"  on the {run.machine}, from the stick's files alone: {versions}")
        run.reach(f"{run.machine} packages")
        return
    policy = run.probe(["apt-cache", "policy", *ours]).stdout
    pinned = all(re.search(rf"^\s+\*\*\* {re.escape(v)} 500\n\s+-?\d+ {re.escape(run.repository)} bookworm/main", policy, re.M)
                 for v in versions.values())
    if not pinned:
        raise StepFailed(f"{' '.join(ours)} did not come from the signed repository, pinned:\n{policy}")
    say(f"  installed from the signed repository ({run.repository}, pinned at 500): {versions}")
    if "deaddrop" in ours:
        user = run.probe(["stat", "-c", "%U %a", "/var/lib/deaddrop"]).stdout.split()
        if user != ["deaddrop", "700"]:
            raise StepFailed(f"/var/lib/deaddrop is not the deaddrop user's, 0700: {user}")
        say("  the package made the deaddrop user and /var/lib/deaddrop (0700, its own)")
        run.reach("package installed")
    else:
        run.reach(f"{run.machine} packages")


def release_key(run: Run, m: re.Match, command: str) -> None:
    """The admin compares the fingerprint gpg prints with the README's: here, the throwaway key's."""
    out = run.as_written(command).output
    shown = re.findall(r"\b([0-9A-F]{40})\b", out.replace(" ", ""))
    if shown != [run.release_key]:
        raise StepFailed(f"the keyring holds {shown or 'no key'}, not the release key {run.release_key} alone:\n{out}")
    say(f"  the admin compares: {shown[0]} is the README's fingerprint (here the throwaway release key's)")
    run.reach("release key checked" if run.machine != "journalist workstation" else "workstation release key checked")


def unattended(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    config = run.probe(["apt-config", "dump"]).stdout
    if 'APT::Periodic::Unattended-Upgrade "1";' not in config:
        return  # the next line of the guide turns it on
    release = (run.prefix / "www" / "deaddrop" / "dists" / "bookworm" / "Release").read_text()
    fields = dict(re.findall(r"^(Origin|Label|Codename): (.*)$", release, re.M))
    wanted = f"origin={fields['Origin']},label={fields['Label']},codename=${{distro_codename}}"
    if f'"{wanted}";' not in config:
        raise StepFailed(f"unattended-upgrades does not take the repository's packages ({wanted}):\n"
                         + "\n".join(line for line in config.splitlines() if "Unattended-Upgrade" in line))
    say(f"  unattended-upgrades is on and takes {wanted}, the repository's Release")
    run.reach("unattended upgrades")


def apt_download(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    folder = run.path(m.group(1))
    names = sorted(p.name for p in folder.glob("*.deb"))
    if sorted(n.split("_")[0] for n in names) != sorted(m.group(2).split()):
        raise StepFailed(f"{folder} does not hold the packages asked for: {names}")
    say(f"  on the TRANSFER stick, checked against the signed index: {', '.join(names)}")
    run.reach("SVS packages on the stick")


def wg_keys(run: Run, m: re.Match, command: str) -> None:
    """wg genkey | tee PRIVATE | wg pubkey > PUBLIC: as written where wg is installed, else a key
    pair as wg makes them (the stand-in wireguard package has no programs)."""
    if run.probe(["sh", "-c", "command -v wg"]).returncode == 0:
        run.as_written(command)
    else:
        from installcheck.standins import public_half

        folder, private = run.path(m.group(1)), people.wireguard_key()
        (folder / m.group(2)).write_text(private + "\n")
        (run.path(m.group(3)) if m.group(3).startswith("/") else folder / m.group(3)).write_text(
            public_half(private) + "\n")
        run.stand_in(f"WireGuard's programs are not installed here: a key pair as wg makes them, {m.group(2)} in "
                     f"{m.group(1)} and its public half in {m.group(3)}")
    run.reach("VPN keys" if run.machine != "journalist workstation" else "workstation VPN keys")


# -- commands that run as written, and what they must show ---------------------------------------


def as_user(run: Run, m: re.Match, command: str) -> None:
    """runuser -u deaddrop -- X: run as written; what X must show is X's handler's to check."""
    run.as_user = command[:m.start(2)]
    try:
        dispatch(run, m.group(2), sticks_checked=True)
    finally:
        run.as_user = ""


def admin_command(run: Run, m: re.Match, command: str) -> None:
    out = run.as_written(command).output
    sub = m.group(1)
    if sub.startswith("journalist add"):
        run.answers["passphrase"] = re.search(r"passphrase:\s+(\S.*)", out).group(1).strip()
        run.answers["totp"] = re.search(r"two-factor secret:\s+(\S+)", out).group(1)
        if "(administrator)" not in out.splitlines()[0]:
            raise StepFailed("the guide's first account is not an admin: the Users and settings pages it names "
                             f"would answer Not found:\n{out.splitlines()[0]}")
        say(f"  {out.splitlines()[0]}; its passphrase and two-factor secret were printed")
        run.reach("admin account")
    elif sub.startswith("status"):
        data = json.loads(run.probe(shlex.split(run.moved(run.as_user + command)) + ["--json"]).stdout)
        if not data["server"]["running"]:
            raise StepFailed(f"status says the server is not running:\n{out}")
        say(f"  status: running, version {data['server']['version']}, submission key "
            f"{data['submission_key_fingerprint']}")
        run.reach("status")
    elif sub.startswith("cert issue"):
        run.answers["p12"] = re.search(r"import password \(shown once[^)]*\): (\S+)", out).group(1)
        run.reach("cert issue")
    elif sub.startswith("cert server"):
        cert_server(run, sub, out)
    elif sub.startswith("ca init"):
        run.reach("CA")
    elif sub.startswith("crl"):
        run.reach("CRL")
    elif sub.startswith("backup"):
        written = re.search(r"deaddrop-(\d{4}-\d{2}-\d{2})\.gpg", out)
        if written:  # the admin restores it later, naming it by its date
            run.placeholders["YYYY-MM-DD"] = written.group(1)
        number = re.search(r"backup #(\d+) of instance ([0-9a-f]{8}), ", out)
        if not number:
            raise StepFailed(f"backup did not print its number and instance, which the admin keeps for the "
                             f"restore:\n{out}")
        run.placeholders["<NUMBER>"] = number.group(1)
        run.placeholders["<INSTANCE>"] = number.group(2)
        say(f"  {out.strip().splitlines()[0]}")
        run.reach("backup")
    elif sub.startswith("restore"):
        started = re.search(r"start it with: (.*)", out)
        kept = re.search(r"kept this server's own .*", out)
        say(f"  restored; it prints: {started.group(1) if started else '(no start line)'}"
            + (f"\n  {kept.group(0)}" if kept else ""))
        run.restored = True
        run.reach("restore")
    elif sub.startswith("digest test"):
        check_test_digest(run, out)
    elif sub.startswith("journalist notify"):
        if not re.search(r"(?:[0-9A-F]{4} ?){10}", out):
            raise StepFailed(f"journalist notify printed no fingerprint to compare:\n{out}")
        say(f"  {out.strip().splitlines()[0]}")
        run.reach("digest registration")
    else:
        say("  done")


def cert_server(run: Run, sub: str, out: str) -> None:
    commands = " ".join(c.text for c in guide_commands(run.guide))
    unused = sorted({o for o in re.findall(r"(?<![\w-])--[a-z][\w-]*", out) if o not in commands})
    if unused:
        raise StepFailed(f"cert server prints options no command of the guide uses: {', '.join(unused)}\n{out}")
    names = certificate_host_names(run.path(re.search(r"--out (\S+)", sub).group(1)).read_bytes())
    if not names:
        raise StepFailed("the server certificate names no host name, only addresses: journalists' security keys "
                         "(WebAuthn) refuse an interface opened by an IP address, so none could be registered\n"
                         f"{out}")
    run.host_names.update(names)
    say(f"  the server certificate names {', '.join(names)}: security keys can be registered there")
    run.reach("cert server")
    run.reach("host name for security keys")


def certificate_host_names(pem: bytes) -> list[str]:
    """The DNS names (not addresses) of the first certificate in ``pem``: where a browser can use
    security keys, as the server's own ``server_names`` sees them."""
    from cryptography import x509

    try:
        names = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return names.value.get_values_for_type(x509.DNSName)


def workstation_host_name(run: Run, m: re.Match, command: str) -> None:
    """The workstation resolves a name of the server's certificate to the server's VPN address."""
    run.as_written(command)
    name = run.placeholders.get(m.group(1), m.group(1))
    if name not in run.host_names:
        raise StepFailed(f"{name} is not a name of the server certificate ({', '.join(sorted(run.host_names))})")
    hosts = run.path("/etc/hosts").read_text().split("\n")
    if f"{run.moved('10.8.0.1')} {name}" not in hosts:
        raise StepFailed(f"the workstation's /etc/hosts does not send {name} to the server:\n" + "\n".join(hosts))
    say(f"  the workstation reaches the server as {name}, a name of its certificate")
    run.reach("host name on the workstation")


def personal_key_export(run: Run, m: re.Match, command: str) -> None:
    """alice's part first: the personal key she has on her own machine."""
    address = run.placeholders["<ALICE-ADDRESS>"]
    if run.probe(["gpg", "--homedir", "/root/.gnupg", "--list-secret-keys", address]).returncode != 0:
        people.make_personal_key(run.here, "/root/.gnupg", address)
        say("  alice's personal OpenPGP key, which she has already, made in the workstation's /root/.gnupg "
            "(no passphrase)")
    run.as_written(command)
    if "BEGIN PGP PUBLIC KEY BLOCK" not in run.path(m.group(1)).read_text():
        raise StepFailed(f"{m.group(1)} holds no public key")
    run.reach("personal key exported")


def journalist_sync(run: Run, m: re.Match, command: str) -> None:
    source = people.SourceBrowser(run.source_port)
    run.codename = source.send(run.marker, run.photo_name, people.photo_with_metadata())
    say(f"  a source (Tor Browser in the guide; here its requests on 127.0.0.1) sent {run.marker!r} and "
        f"{run.photo_name}, whose EXIF names its author, camera and place")
    run.reach("source submission")
    done = run.as_written(command)
    say(f"  it asked: {'; '.join(done.prompts) or 'nothing'} (answered as alice would type)")
    inbox = run.path(m.group(1))
    got = sorted(str(p.relative_to(inbox)) for p in inbox.rglob("*.gpg"))
    if len(got) < 2:
        raise StepFailed(f"the message and the photo were not both downloaded into {inbox}: {got}\n{done.output}")
    run.placeholders["<DESIGNATION>"] = got[0].split("/")[0]
    say(f"  downloaded, still encrypted: {', '.join(got)}; <DESIGNATION> is {run.placeholders['<DESIGNATION>']}")
    run.reach("journalist download")


def svs_decrypt(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    out = run.path(m.group(1))
    files = [p for p in out.rglob("*") if p.is_file()]
    if not any(run.marker in p.read_text(errors="replace") for p in files):
        raise StepFailed(f"the test message is not among the decrypted files in {m.group(1)}")
    photo = [p for p in files if p.name.endswith(run.photo_name)]
    if not photo:
        raise StepFailed(f"the photo is not among the decrypted files in {m.group(1)}: {[p.name for p in files]}")
    run.placeholders["<FILE>"] = photo[0].name
    say(f"  the SVS decrypted the message and {photo[0].name} into {m.group(1)}, the offline machine's RAM "
        f"(<FILE> is {photo[0].name})")
    run.reach("SVS decrypt")


def svs_export(run: Run, m: re.Match, command: str) -> None:
    out = run.as_written(command).output
    folder = run.path(m.group(1))
    exported = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.gpg"))
    if not exported:
        raise StepFailed(f"nothing was exported to {m.group(1)}:\n{out}")
    say(f"  encrypted for alice on the TRANSFER stick: {', '.join(exported)}")
    run.reach("export for alice")


def svs_scrub(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    folder = run.path(m.group(1))
    published = [p for p in folder.rglob("*") if p.is_file()]
    if [p.name for p in published] != [run.placeholders["<FILE>"]]:
        raise StepFailed(f"the publication folder {m.group(1)} holds {[p.name for p in published]}, not the photo alone")
    left = people.photo_metadata(published[0].read_bytes())
    if left:
        raise StepFailed(f"the published photo still carries: {', '.join(left)}")
    say(f"  published: {m.group(1)}/{published[0].name}, with no EXIF, author or camera left")
    run.reach("published")


def read_export(run: Run, m: re.Match, command: str) -> None:
    out = run.as_written(command).output
    if run.marker not in out:
        raise StepFailed(f"alice's gpg did not show the test message:\n{out}")
    say("  alice's gpg shows the test message")
    run.reach("alice reads the export")


def journalist_reply(run: Run, m: re.Match, command: str) -> None:
    message_file = m.group(1)
    run.reply_text = run.path(message_file if message_file.startswith("/") else f"/root/{message_file}").read_text().strip()
    done = run.as_written(command)
    say(f"  it asked: {'; '.join(done.prompts) or 'nothing'}; {done.output.strip().splitlines()[-1]}")
    run.reach("reply")
    page = people.SourceBrowser(run.source_port).login(run.codename)
    if run.reply_text not in page:
        raise StepFailed("the source, logged in with their codename, does not see alice's reply")
    say(f"  the source logged in with their codename and read: {run.reply_text!r}")
    run.reach("source reads the reply")


def digest_options(run: Run, m: re.Match, command: str) -> None:
    conf = run.path(m.group(1))
    before = conf.read_text()
    run.as_written(command)
    after = conf.read_text()
    if not after.startswith(before):
        raise StepFailed(f"{m.group(1)} was overwritten, not edited: the shipped file's other options are gone")
    say(f"  {m.group(1)} keeps its {len(before.splitlines())} lines and ends with the digest's options")
    run.reach("digest options")


def check_test_digest(run: Run, out: str) -> None:
    """The test digest reached the mail server, inside TLS after the login, and alice's own key
    (on her workstation) opens it."""
    if not out.startswith("sent"):
        raise StepFailed(f"the test digest was not sent:\n{out}")
    mails = run.smtp.messages() if run.smtp is not None else []
    if not mails:
        raise StepFailed("digest test said sent, but the mail server has no mail")
    raw, meta = mails[-1]
    if not meta.get("tls") or not meta.get("login"):
        raise StepFailed(f"the test digest arrived outside TLS or without the login: {meta}")
    armored = re.search(rb"-----BEGIN PGP MESSAGE-----.*?-----END PGP MESSAGE-----", raw, re.S)
    workstation = run.machines["journalist workstation"]
    opened = workstation.run(["gpg", "--homedir", "/root/.gnupg", "--batch", "--decrypt"], check=False,
                             input=armored.group(0).decode() if armored else "")
    if opened.returncode != 0:
        raise StepFailed(f"alice's personal key does not open the test digest: {opened.stderr[-500:]}")
    say(f"  {out.strip().splitlines()[0]}\n  the mail server got it inside TLS after the login, and alice's key "
        "opens it")
    run.reach("digest test")


def archive_for_new_server(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    archive = run.path(m.group(1))
    if not archive.is_file() or not archive.stat().st_size:
        raise StepFailed(f"no archive for the new server in {m.group(1)}")
    say(f"  the backup, still signed by the old server, encrypted again to the new server's restore key: {m.group(1)}")
    run.reach("archive for the new server")


GENERIC_MILESTONES = [(r"deaddrop-svs --home \S+ init", "SVS key"), (r"quick-gen-key 'DeadDrop backups'", "backup keys"),
                      (r"quick-gen-key 'DeadDrop restore'", "restore key"),
                      (r"install .* /var/lib/deaddrop/tls/server.key", "files to the server"),
                      (r"cat > /etc/apt/sources.list.d/\S+ <<", "repository trusted")]


def generic(run: Run, m: re.Match | None, command: str) -> None:
    run.as_written(command)
    for pattern, milestone in GENERIC_MILESTONES:
        if re.search(pattern, command):
            run.reach(milestone)


def _handlers() -> list[tuple[str, Callable[[Run, re.Match, str], None]]]:
    from installcheck import newserver, standins

    return [
        (r"(?:apt-get update && )?apt-get install -y ([^\n]*)$", apt_install),
        (r"gpg --show-keys (\S+)$", release_key),
        (r"(?:cp \S+52deaddrop-unattended-upgrades|cat > /etc/apt/apt.conf.d/20auto-upgrades)", unattended),
        (r"\(cd (\S+) && apt-get download (.*)\)$", apt_download),
        (r"\(cd (\S+) && umask 077 && wg genkey \| tee (\S+) \| wg pubkey > (\S+)\)$", wg_keys),
        (r"systemctl enable --now wg-quick@(\w+)$", standins.systemctl_wg),
        (r"systemctl enable --now nftables$", standins.systemctl_nft),
        (r"systemd-analyze security (\S+)", standins.analyze_security),
        (r"systemctl (enable --now|restart) (\S+)$", standins.start_unit),
        (r"runuser -u (\w+) -- (.*)$", as_user),
        (r"cat >> (/etc/deaddrop/deaddrop.conf) <<'?\w+'?\n.*DEADDROP_SMTP_SERVER", digest_options),
        (r"\S*deaddrop-admin restore ", lambda run, m, c: newserver.restore_on_new_server(run, c)),
        (r"\S*deaddrop-admin (.*)$", admin_command),
        (r"\S*deaddrop-journalist .* sync --out (\S+)", journalist_sync),
        (r"\S*deaddrop-journalist .* reply \S+ --message-file (\S+)", journalist_reply),
        (r"\S*deaddrop-svs --home \S+ decrypt \S+ --out (\S+)", svs_decrypt),
        (r"\S*deaddrop-svs --home \S+ export .* --out (\S+)", svs_export),
        (r"\S*deaddrop-svs (?:--home \S+ )?scrub .* --out (\S+)", svs_scrub),
        (r"gpg --armor --export \S+ > (\S+)$", personal_key_export),
        (r"echo '10\.8\.0\.1 (\S+)' >> /etc/hosts$", workstation_host_name),
        (r"gpg --decrypt (\S+)$", read_export),
        (r"gpg .*--unwrap .*--output (\S+) --encrypt$", archive_for_new_server),
    ]


def dispatch(run: Run, command: str, sticks_checked: bool = False) -> None:
    if not sticks_checked:
        check_sticks(run, command)
    for pattern, handler in _handlers():
        m = re.match(pattern, command, re.S)
        if m:
            handler(run, m, command)
            return
    generic(run, None, command)


def check_sticks(run: Run, command: str) -> None:
    for name in re.findall(r"(?<![\w.~/-])/media/([^/\s'\"]+)", command):
        if name not in STICKS:
            raise StepFailed(f"/media/{name} is none of the guide's sticks ({', '.join(sorted(STICKS))})")
        if run.machine not in STICKS[name]:
            raise StepFailed(f"the {name.upper()} stick on the {run.machine}: it goes only to the "
                             f"{', '.join(sorted(STICKS[name]))}")
