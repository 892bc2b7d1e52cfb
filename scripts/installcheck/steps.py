"""Each command of the guide, run as written or, where this machine cannot (no systemd as PID 1,
no Internet, no deaddrop user), stood in for by a check of what it would use; and what each must
show. ``Run.execute`` is the only way a guide command runs, and it refuses anything but the
guide's own text (its paths moved under the prefix, its placeholders filled): install-check
never adds an option or changes a word."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from installcheck import machines, people
from installcheck.guide import Command, guide_commands
from installcheck.terminal import Finished, Unanswered, run_in_terminal

NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "venv", "_trial_temp*", "build", "dist", "*.egg-info",
                                    "__pycache__", "deaddrop-data", "deaddrop-demo", "screenshots", "dropin.cache")
# The sticks of the guide's table and the machines each may be plugged into.
STICKS = {"keys": {"offline machine"}, "tls": {"offline machine", "server", "new server"},
          "transfer": {"offline machine", "server", "new server", "journalist workstation"},
          "export": {"offline machine"}}
PROMPTS = [(re.compile(r"(?i)mail server password"), "smtp password"),
           (re.compile(r"(?i)(\.p12|pkcs ?#?12|import password)"), "p12"),
           (re.compile(r"(?i)passphrase"), "passphrase"),
           (re.compile(r"(?i)(one-time|two-factor|six-digit|totp).*code|^code"), "code")]
FILLED = {"<ALICE-ADDRESS>": "alice@example.org", "<DEADDROP-ADDRESS>": "deaddrop@example.org",
          "<MAIL-LOGIN>": "deaddrop", "<JOURNALIST-HOST>": "newsroom.example"}


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
    allowed: set[str] = field(default_factory=set)  # what may run for the current command
    installed: dict[str, set[str]] = field(default_factory=dict)  # machine -> its packages
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
    host_names: set[str] = field(default_factory=set)  # the DNS names the server certificates carry
    guide: str = ""  # the guide's text: what `cert server` may name
    reached: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)  # per command: how it ran (as written, stood in)
    _programs: dict[str, tuple[frozenset[str], Path]] = field(default_factory=dict)

    # -- the guide's text, here

    def moved(self, text: str) -> str:
        for placeholder, value in self.placeholders.items():
            text = text.replace(placeholder, value)
        text = text.replace("tcp:8443:interface=10.8.0.1", f"tcp:{self.journalist_port}:interface=127.0.0.1")
        text = text.replace("10.8.0.1:8443", f"127.0.0.1:{self.journalist_port}").replace("10.8.0.1", "127.0.0.1")
        return machines.move_paths(self.prefix, self.machine, text)

    def path(self, guide_path: str) -> Path:
        return Path(self.moved(guide_path))

    @property
    def home(self) -> Path:
        return machines.home_of(self.prefix, self.machine)

    def env(self) -> dict[str, str]:
        packages = frozenset(self.installed.get("server" if self.machine == "new server" else self.machine, ()))
        if self._programs.get(self.machine, (None,))[0] != packages:  # made again only when its packages change
            self._programs[self.machine] = (packages, machines.program_folder(self.prefix, self.machine, packages))
        programs = self._programs[self.machine][1]
        env = dict(self.base_env, HOME=str(self.home), PATH=str(programs), TERM="xterm")
        if self.machine in ("offline machine", "journalist workstation"):  # no network: no index, no pip settings
            env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
            env["PIP_CONFIG_FILE"] = os.devnull
        if self.smtp_trust is not None:
            env["SSL_CERT_FILE"] = str(self.smtp_trust)
        return env

    def reach(self, milestone: str) -> None:
        if milestone not in self.reached:
            self.reached.append(milestone)

    # -- running

    def execute(self, text: str, *, check: bool = True, timeout: float = 900) -> Finished:
        """Run ``text``, which must be the guide's command as the current step allows it."""
        if text not in self.allowed:
            raise StepFailed(f"install-check would run something the guide does not say:\n  it: {text}\n  "
                             f"the guide: {self.moved(self.command.text) if self.command else '?'}")
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            done = run_in_terminal(["/bin/bash", "-e", "-o", "pipefail", "-c", text], str(self.home), self.env(),
                                   self.answer, timeout)
        except (Unanswered, TimeoutError) as e:
            raise StepFailed(f"{e}: {text}") from None
        if check and done.status != 0:
            raise StepFailed(f"exit {done.status}: {text}\n{done.output}".rstrip())
        return done

    def as_written(self, command: str, **kw) -> Finished:
        self.mode("as written")
        return self.execute(self.moved(command), **kw)

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
        """install-check's own look at a machine (never a guide command)."""
        return subprocess.run(argv, capture_output=True, text=True, env=self.env(), cwd=self.home, **kw)


def say(text: str) -> None:
    print(text, flush=True)


# -- stand-ins: what cannot run here, said, and what it would use checked -----------------------


def apt_update(run: Run, m: re.Match, command: str) -> None:
    run.stand_in("no Internet access here (apt-get update would refresh the package lists)")


def apt_install(run: Run, m: re.Match, command: str) -> None:
    packages = m.group(1).split()
    run.installed.setdefault(run.machine, set()).update(packages)
    missing = [p for p in packages if "install ok installed" not in subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout]
    needed = [p for p in missing if p in ("tor", "gnupg", "python3-venv", "systemd", "mat2")]
    if needed:
        raise StepFailed(f"not installed here, and DeadDrop needs them: {' '.join(needed)}")
    run.stand_in(f"no Internet access here; installed already: {' '.join(p for p in packages if p not in missing)}"
                 + (f"; not installed here (their steps are checked without them): {' '.join(missing)}" if missing else "")
                 + f". The {run.machine} runs only the programs of these packages and Debian's base system")
    run.reach("packages" if run.machine == "server" else f"{run.machine} packages")


def systemctl_disable(run: Run, m: re.Match, command: str) -> None:
    unit = m.group(1)
    found = [p for p in (f"/lib/systemd/system/{unit}.service", f"/usr/lib/systemd/system/{unit}.service")
             if os.path.isfile(p)]
    if not found:
        raise StepFailed(f"no unit {unit}.service installed: the step would fail")
    run.stand_in(f"systemd is not PID 1 here; the unit it would disable exists: {found[0]}")


def adduser(run: Run, m: re.Match, command: str) -> None:
    home = run.path(m.group(1))
    home.mkdir(parents=True, exist_ok=True)
    run.stand_in(f"no user {m.group(2)} is added here; every step runs as {os.getuid()} (its home made: {home})")
    run.reach("service user")


def git_clone(run: Run, m: re.Match, command: str) -> None:
    """A clone of this checkout: its files as they are now and its commit, for the guide's checkout."""
    target = run.path(m.group(2))
    shutil.copytree(run.checkout, target, symlinks=True, ignore=NOT_COPIED)
    git = ["git", "-C", str(target)]
    for argv in (git + ["init", "--quiet"], git + ["fetch", "--quiet", "--depth", "1", str(run.checkout), "HEAD"],
                 git + ["reset", "--quiet", "--mixed", "FETCH_HEAD"]):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StepFailed(f"could not give the copy this checkout's commit: {shlex.join(argv)}\n{proc.stderr}")
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    run.placeholders["<COMMIT>"] = commit
    run.stand_in(f"no Internet access: {target} is this checkout (its files, its commit {commit}) instead of a "
                 f"clone of {m.group(1)}; <COMMIT> is {commit}")
    run.reach("code")


def wg_keys(run: Run, m: re.Match, command: str) -> None:
    folder = run.path(m.group(1))
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("wg", path=str(run.env()["PATH"])):
        run.as_written(command)
        return
    private = people.wireguard_key()
    (folder / "server.key").write_text(private + "\n")
    (folder / "server.pub").write_text(people.wireguard_key() + "\n")
    run.stand_in(f"wireguard-tools are not installed here: a key pair as wg makes them written to {folder}")


def systemctl_wg(run: Run, m: re.Match, command: str) -> None:
    conf = run.path(f"/etc/wireguard/{m.group(1)}.conf")
    if not conf.is_file():
        raise StepFailed(f"{conf} is missing: wg-quick@{m.group(1)} would not start")
    problems = wireguard_problems(conf.read_text())
    if problems:
        raise StepFailed(f"wg-quick@{m.group(1)} would start with {conf} as it is: {'; '.join(problems)}")
    if shutil.which("wg-quick", path=str(run.env()["PATH"])):
        proc = run.probe(["wg-quick", "strip", str(conf)])
        if proc.returncode != 0:
            raise StepFailed(f"wg-quick strip refused {conf}:\n{proc.stderr}")
    run.stand_in(f"systemd is not PID 1 here; {conf} has a valid structure and real keys, no placeholder")
    run.reach("VPN")


def wireguard_problems(text: str) -> list[str]:
    keys = {"Interface": {"Address", "ListenPort", "PrivateKey", "DNS", "MTU", "Table", "PreUp", "PostUp", "PreDown",
                          "PostDown", "SaveConfig", "FwMark"},
            "Peer": {"PublicKey", "AllowedIPs", "Endpoint", "PersistentKeepalive", "PresharedKey"}}
    problems, section, seen = [], None, []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[]")
            seen.append(section)
            if section not in keys:
                problems.append(f"line {number}: unknown section [{section}]")
            continue
        name, _, value = (part.strip() for part in line.partition("="))
        if not _:
            problems.append(f"line {number}: not KEY = VALUE")
        elif section is None or name not in keys.get(section, ()):
            problems.append(f"line {number}: {name} is not a key of [{section}]")
        elif "<" in value or ">" in value:
            problems.append(f"line {number}: {name} is still the example's placeholder {value}")
        elif name in ("PrivateKey", "PublicKey", "PresharedKey") and not _is_wireguard_key(value):
            problems.append(f"line {number}: {name} is not a WireGuard key")
    if seen.count("Interface") != 1:
        problems.append("there must be exactly one [Interface]")
    return problems


def _is_wireguard_key(value: str) -> bool:
    import base64
    import binascii

    try:
        return len(base64.b64decode(value, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def systemctl_nft(run: Run, m: re.Match, command: str) -> None:
    conf = run.path("/etc/nftables.conf")
    if not conf.is_file():
        raise StepFailed(f"{conf} is missing")
    problems = nftables_problems(conf.read_text())
    if problems:
        raise StepFailed(f"{conf}: {'; '.join(problems)}")
    checked = "its structure"
    if shutil.which("nft", path=str(run.env()["PATH"])):
        proc = run.probe(["nft", "-c", "-f", str(conf)])
        if proc.returncode == 0:
            checked = "nft -c accepts it"
    run.stand_in(f"systemd is not PID 1 here; {conf}: {checked}, it flushes the rule set first and drops by default")
    run.reach("firewall")


def nftables_problems(text: str) -> list[str]:
    statements = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    statements = [s for s in statements if s and not s.startswith("#!")]
    problems = []
    if not statements or statements[0] != "flush ruleset":
        problems.append("it does not begin with 'flush ruleset': loading it again would add a second copy of every rule")
    if text.count("{") != text.count("}"):
        problems.append("unbalanced braces")
    if "policy drop" not in text:
        problems.append("no 'policy drop'")
    return problems


def daemon_reload(run: Run, m: re.Match, command: str) -> None:
    run.stand_in("systemd is not PID 1 here (nothing to reload)")


def analyze_security(run: Run, m: re.Match, command: str) -> None:
    unit = run.path(f"/etc/systemd/system/{m.group(1)}")
    if not unit.is_file():
        raise StepFailed(f"{unit} is missing: the unit was not installed")
    out = run.probe(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)]).stdout
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\w+)", out)
    if not level:
        raise StepFailed(f"systemd-analyze gave no exposure level:\n{out}")
    # verify: the unit with its paths in the prefix, so that ExecStart names a real program.
    checked = run.prefix / "verify" / m.group(1)
    checked.parent.mkdir(exist_ok=True)
    checked.write_text(run.moved(unit.read_text()).replace("User=deaddrop", "").replace("Group=deaddrop", ""))
    verify = run.probe(["systemd-analyze", "verify", str(checked)])
    if verify.returncode != 0:
        raise StepFailed(f"systemd-analyze verify refused the unit:\n{verify.stdout}{verify.stderr}")
    run.stand_in(f"systemd is not PID 1: --offline=yes gives exposure {level.group(1)} {level.group(2)}; "
                 "systemd-analyze verify accepts the unit")
    run.reach("unit checked")


def start_unit(run: Run, m: re.Match, command: str) -> None:
    if m.group(2) != "deaddrop":
        raise StepFailed(f"unknown unit {m.group(2)}")
    for proc in run.servers:
        _stop(proc)
    run.servers.clear()
    unit = run.path("/etc/systemd/system/deaddrop.service").read_text().replace("\\\n", " ")
    environment = unit_environment(unit, run.path)
    exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    exec_start = re.sub(r"\$\{?(\w+)\}?", lambda v: environment.get(v.group(1), ""), exec_start)
    argv = shlex.split(run.moved(exec_start)) + ["--tor", "none",
                                                 "--source-listen", f"tcp:{run.source_port}:interface=127.0.0.1"]
    workdir = run.path(re.search(r"^WorkingDirectory=(.*)$", unit, re.M).group(1))
    warning = plugin_cache_warning(run, Path(argv[0]).parent / "python")
    if warning:
        raise StepFailed(f"a start as the service user (who cannot write the code's folders) would log: {warning}")
    run.stand_in(f"systemd is not PID 1 here: the unit's ExecStart (with {', '.join(environment) or 'no'} "
                 f"environment from its EnvironmentFile) as {os.getuid()}, with --tor none (no Internet access: "
                 f"Tor could not bootstrap) and the source interface on 127.0.0.1:{run.source_port}; twistd's "
                 "plugin cache is complete (a start as the service user writes nothing)")
    _start_server(run, argv, workdir, run.prefix / ("restored.log" if run.restored else "deaddrop.log"))
    run.reach("first start" if m.group(1) == "enable --now" else "restart")
    if run.restored:
        check_restored(run)


def unit_environment(unit: str, path: Callable[[str], Path]) -> dict[str, str]:
    """The variables the unit's EnvironmentFile= lines set (a leading '-': the file may be missing)."""
    found: dict[str, str] = {}
    for name in re.findall(r"^EnvironmentFile=(.*)$", unit, re.M):
        optional = name.startswith("-")
        file = path(name.lstrip("-").strip())
        if not file.is_file():
            if optional:
                continue
            raise StepFailed(f"the unit's EnvironmentFile {file} is missing: systemd would not start it")
        for line in file.read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                found[key.strip()] = " ".join(shlex.split(value))
    return found


def plugin_cache_warning(run: Run, python: Path) -> str | None:
    """What twistd logs about its plugin cache when it may not write it, as the service user may
    not: the cache as the install left it is complete, or twistd wants to rewrite it at each start."""
    script = (
        "from twisted.python import log, filepath\n"
        "said = []\n"
        "log.addObserver(lambda e: said.append(log.textFromEventDict(e) or ''))\n"
        "def refused(self, *a, **k):\n"
        "    raise PermissionError(13, 'Permission denied', self.path)\n"
        "filepath.FilePath.setContent = refused\n"
        "from twisted.plugin import getPlugins\n"
        "from twisted.application.service import IServiceMaker\n"
        "list(getPlugins(IServiceMaker))\n"
        "print('\\n'.join(s for s in said if 'plugin cache' in s))\n")
    proc = run.probe([str(python), "-c", script])
    if proc.returncode != 0:
        raise StepFailed(f"could not look at twistd's plugin cache:\n{proc.stderr}")
    return proc.stdout.strip() or None


def _start_server(run: Run, argv: list[str], workdir: Path, log_path: Path) -> None:
    env = dict(run.env(), HOME=str(workdir))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    run.servers.append(proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StepFailed(f"the server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            for port in (run.source_port, run.journalist_port):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            say(f"  serving: sources on 127.0.0.1:{run.source_port}, journalists on 127.0.0.1:{run.journalist_port}")
            return
        except OSError:
            time.sleep(0.3)
    raise StepFailed(f"the server did not listen within 120 s:\n{log_path.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything it left (gpg children)
    except (ProcessLookupError, PermissionError):
        pass


def journal(run: Run, m: re.Match, command: str) -> None:
    lines = (run.prefix / "deaddrop.log").read_text().splitlines()
    shown = [line for line in lines if "submission key fingerprint" in line or "--tor none" in line]
    if any("plugin cache" in line for line in lines):
        raise StepFailed("the server's log warns about twistd's plugin cache")
    run.stand_in("systemd is not PID 1 here; the server's own log says:\n    " + "\n    ".join(shown[:3]))


def chown(run: Run, m: re.Match, command: str) -> None:
    run.stand_in("there is no deaddrop user here")


# -- the two changes for a machine without the deaddrop user -----------------------------------


def as_user(run: Run, m: re.Match, command: str) -> None:
    """runuser -u deaddrop -- X: X, as this user (there is no deaddrop user here)."""
    run.allowed.add(run.moved(m.group(2)))
    say(f"  as {os.getuid()} (no user {m.group(1)} here)")
    dispatch(run, m.group(2))
    run.modes[-1] += " (without runuser)"


def install_owned(run: Run, m: re.Match, command: str) -> None:
    plain = re.sub(r" -[og] deaddrop\b", "", command)
    run.allowed.add(run.moved(plain))
    say("  owner and group deaddrop left out (no such user here)")
    run.mode("as written (without -o/-g deaddrop)")
    run.execute(run.moved(plain))
    if "server.key" in command:
        run.reach("files to the server")
    if "backup-signing" in command:
        run.reach("backup keys")


# -- commands that run as written, and what they must show ---------------------------------------


def git_checkout(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    run.reach("commit checked out")


def git_log(run: Run, m: re.Match, command: str) -> None:
    out = run.as_written(command).output
    commit = run.placeholders.get("<COMMIT>", "")
    if not commit or commit not in out.split():
        raise StepFailed(f"the checked-out commit is not {commit or '<COMMIT>'}:\n{out}")
    version = re.search(r"__version__ = \"([^\"]+)\"", out)
    say(f"  the clone is at {commit}" + (f", version {version.group(1)}" if version else ""))
    run.reach("commit verified")


def pip_install(run: Run, m: re.Match, command: str) -> None:
    if " -e " in command or "--editable" in command:
        raise StepFailed("the guide installs in editable mode: an admin's install must not depend on the checkout")
    run.as_written(command)
    python = run.path("/opt/deaddrop/.venv/bin/python")
    where = run.probe([str(python), "-c", "import deaddrop, deaddrop.newsroom.codenames as c; print(deaddrop.__file__, c.WORDLIST_DIR)"])
    if where.returncode != 0 or str(run.path("/opt/deaddrop/.venv")) not in where.stdout.split()[1]:
        raise StepFailed(f"the word lists are read from outside the install: {where.stdout}{where.stderr}")
    if "--no-index" in command:
        say(f"  on the {run.machine}, installed from the stick's wheels alone (no index, no pip configuration): "
            f"{where.stdout.split()[0]}")
    else:
        say(f"  installed (not editable): {where.stdout.split()[0]}")
    run.reach({"offline machine": "offline install", "journalist workstation": "workstation install"}.get(
        run.machine, "non-editable install"))


def plugin_cache(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    warning = plugin_cache_warning(run, Path(run.moved(m.group(1))))
    if warning:
        raise StepFailed(f"twistd's plugin cache is still incomplete: {warning}")
    say("  twistd's plugin cache is complete: a start as the service user writes nothing")
    run.reach("plugin cache")


def pip_wheel(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    folder = run.path(m.group(1))
    wheels = sorted(p.name for p in folder.glob("*.whl"))
    if not any(w.startswith("deaddrop-") for w in wheels):
        raise StepFailed(f"no deaddrop wheel in {folder}: {wheels}")
    say(f"  {len(wheels)} wheels on the stick ({folder}), deaddrop's among them")
    run.reach("wheels")


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
        data = json.loads(run.probe(shlex.split(run.moved(command)) + ["--json"]).stdout)
        if not data["server"]["running"]:
            raise StepFailed(f"status says the server is not running:\n{out}")
        say(f"  status: running, version {data['server']['version']}, submission key "
            f"{data['submission_key_fingerprint']}")
        run.reach("status")
    elif sub.startswith("cert issue"):
        run.answers["p12"] = re.search(r"import password \(shown once[^)]*\): (\S+)", out).group(1)
        run.reach("cert issue")
    elif sub.startswith("cert server"):
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
    gnupg = run.home / ".gnupg"
    if not gnupg.exists():
        people.make_personal_key(gnupg, run.placeholders["<ALICE-ADDRESS>"])
        say(f"  alice's personal OpenPGP key, which she has already, made in {gnupg} (no passphrase)")
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
    out = run.path(m.group(1)) if m.group(1).startswith("/") else run.home / m.group(1).removeprefix("~/")
    files = [p for p in out.rglob("*") if p.is_file()]
    if not any(run.marker in p.read_text(errors="replace") for p in files):
        raise StepFailed(f"the test message is not among the decrypted files in {out}")
    photo = [p for p in files if p.name.endswith(run.photo_name)]
    if not photo:
        raise StepFailed(f"the photo is not among the decrypted files in {out}: {[p.name for p in files]}")
    run.placeholders["<FILE>"] = photo[0].name
    say(f"  the SVS decrypted the message and {photo[0].name} into {out} (<FILE> is {photo[0].name})")
    run.reach("SVS decrypt")


def svs_export(run: Run, m: re.Match, command: str) -> None:
    out = run.as_written(command).output
    folder = run.path(m.group(1))
    exported = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.gpg"))
    if not exported:
        raise StepFailed(f"nothing was exported to {folder}:\n{out}")
    say(f"  encrypted for alice on the TRANSFER stick: {', '.join(exported)}")
    run.reach("export for alice")


def svs_scrub(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    folder = run.path(m.group(1))
    published = [p for p in folder.rglob("*") if p.is_file()]
    if [p.name for p in published] != [run.placeholders["<FILE>"]]:
        raise StepFailed(f"the publication folder {folder} holds {[p.name for p in published]}, not the photo alone")
    left = people.photo_metadata(published[0].read_bytes())
    if left:
        raise StepFailed(f"the published photo still carries: {', '.join(left)}")
    say(f"  published: {published[0]}, with no EXIF, author or camera left")
    run.reach("published")


def read_export(run: Run, m: re.Match, command: str) -> None:
    out = run.as_written(command).output
    if run.marker not in out:
        raise StepFailed(f"alice's gpg did not show the test message:\n{out}")
    say("  alice's gpg shows the test message")
    run.reach("alice reads the export")


def journalist_reply(run: Run, m: re.Match, command: str) -> None:
    message_file = m.group(1)
    path = Path(message_file) if message_file.startswith("/") else run.home / message_file
    run.reply_text = path.read_text().strip()
    done = run.as_written(command)
    say(f"  it asked: {'; '.join(done.prompts) or 'nothing'}; {done.output.strip().splitlines()[-1]}")
    run.reach("reply")
    page = people.SourceBrowser(run.source_port).login(run.codename)
    if run.reply_text not in page:
        raise StepFailed("the source, logged in with their codename, does not see alice's reply")
    say(f"  the source logged in with their codename and read: {run.reply_text!r}")
    run.reach("source reads the reply")


def digest_options(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    run.reach("digest options")


def start_mail_server(run: Run) -> None:
    """The newsroom's mail server, with STARTTLS, a login and a certificate the server trusts (as it
    trusts a real mail server's), there before the guide's first line about it."""
    try:
        from tests._smtp_server import SmtpServer, throwaway_certificate
    except ImportError as e:
        raise StepFailed(f"the mail server here needs the test dependencies (aiosmtpd): {e}") from None
    folder = run.prefix / "mail-server"
    folder.mkdir(exist_ok=True)
    cert, key = throwaway_certificate(str(folder))
    run.answers["smtp password"] = os.urandom(9).hex()
    run.smtp = SmtpServer(str(folder / "mail"), cert, key,
                          auth=f"{run.placeholders['<MAIL-LOGIN>']}:{run.answers['smtp password']}")
    port = run.smtp.start()
    run.smtp_trust = Path(cert)
    run.placeholders["<MAIL-SERVER>:587"] = f"127.0.0.1:{port}"
    say(f"  a mail server with STARTTLS and a login on 127.0.0.1:{port} for <MAIL-SERVER>:587; this machine "
        "trusts its certificate (SSL_CERT_FILE), as it would a real one's")


def check_test_digest(run: Run, out: str) -> None:
    """The test digest reached the mail server, inside TLS after the login, and alice's own key
    opens it."""
    if not out.startswith("sent"):
        raise StepFailed(f"the test digest was not sent:\n{out}")
    mails = run.smtp.messages() if run.smtp is not None else []
    if not mails:
        raise StepFailed("digest test said sent, but the mail server has no mail")
    raw, meta = mails[-1]
    if not meta.get("tls") or not meta.get("login"):
        raise StepFailed(f"the test digest arrived outside TLS or without the login: {meta}")
    armored = re.search(rb"-----BEGIN PGP MESSAGE-----.*?-----END PGP MESSAGE-----", raw, re.S)
    alice = run.prefix / "workstation" / "root" / ".gnupg"
    opened = subprocess.run(["gpg", "--homedir", str(alice), "--batch", "--decrypt"], input=armored.group(0) if armored
                            else b"", capture_output=True)
    if opened.returncode != 0:
        raise StepFailed(f"alice's personal key does not open the test digest: {opened.stderr.decode()[-500:]}")
    say(f"  {out.strip().splitlines()[0]}\n  the mail server got it inside TLS after the login, and alice's key "
        "opens it")
    run.reach("digest test")


def archive_for_new_server(run: Run, m: re.Match, command: str) -> None:
    run.as_written(command)
    archive = run.path(m.group(1))
    if not archive.is_file() or not archive.stat().st_size:
        raise StepFailed(f"no archive for the new server in {archive}")
    say(f"  the backup, still signed by the old server, encrypted again to the new server's restore key: {archive}")
    run.reach("archive for the new server")


def generic(run: Run, m: re.Match | None, command: str) -> None:
    run.as_written(command)
    for pattern, milestone in ((r"deaddrop-svs --home \S+ init", "SVS key"), (r"quick-gen-key 'DeadDrop backups'", "backup keys"),
                               (r"quick-gen-key 'DeadDrop restore'", "restore key")):
        if re.search(pattern, command):
            run.reach(milestone)


HANDLERS: list[tuple[str, Callable[[Run, re.Match, str], None]]] = [
    (r"apt-get update$", apt_update),
    (r"apt-get install -y (.*)$", apt_install),
    (r"systemctl disable --now (\S+)", systemctl_disable),
    (r"adduser --system .*--home (\S+) .* (\w+)$", adduser),
    (r"git clone (\S+) (\S+)$", git_clone),
    (r"git -C \S+ checkout ", git_checkout),
    (r"git -C \S+ log -1 ", git_log),
    (r"cd (/etc/wireguard) && .*wg genkey", wg_keys),
    (r"systemctl enable --now wg-quick@(\w+)$", systemctl_wg),
    (r"systemctl enable --now nftables$", systemctl_nft),
    (r"systemctl daemon-reload$", daemon_reload),
    (r"systemd-analyze security (\S+)", analyze_security),
    (r"systemctl (enable --now|restart) (\S+)$", start_unit),
    (r"journalctl -u deaddrop", journal),
    (r"chown -R deaddrop: ", chown),
    (r"runuser -u (\w+) -- (.*)$", as_user),
    (r"install .*-[og] deaddrop\b", install_owned),
    (r"\S*/pip install ", pip_install),
    (r"(\S*/python) -c '.*getPlugins", plugin_cache),
    (r"\S*/pip wheel .*--wheel-dir (\S+)", pip_wheel),
    (r"gpg --armor --export \S+ > (\S+)$", personal_key_export),
    (r"echo '10\.8\.0\.1 (\S+)' >> /etc/hosts$", workstation_host_name),
    (r"echo 'DEADDROP_OPTIONS=.*--smtp-server", digest_options),
    (r"\S*deaddrop-admin restore ", lambda run, m, c: restore_on_new_server(run, c)),
    (r"\S*deaddrop-admin (.*)$", admin_command),
    (r"\S*deaddrop-journalist .* sync --out (\S+)", journalist_sync),
    (r"\S*deaddrop-journalist .* reply \S+ --message-file (\S+)", journalist_reply),
    (r"\S*deaddrop-svs --home \S+ decrypt \S+ --out (\S+)", svs_decrypt),
    (r"\S*deaddrop-svs --home \S+ export .* --out (\S+)", svs_export),
    (r"\S*deaddrop-svs (?:--home \S+ )?scrub .* --out (\S+)", svs_scrub),
    (r"gpg --decrypt (\S+)$", read_export),
    (r"gpg .*--unwrap .*--output (\S+) --encrypt$", archive_for_new_server),
]


def before_command(run: Run, command: Command) -> None:
    """The parts people play before a command: the guide's new server begins; the newsroom's mail
    server is there; the admin carries the backup to the offline machine."""
    if command.machine == "new server" and not run.new_server:
        begin_new_server(run)
    if run.smtp is None and re.search(r"smtp-password|<MAIL-SERVER>", command.text):
        start_mail_server(run)
    if command.machine == "offline machine" and "/media/transfer/deaddrop-YYYY-MM-DD.gpg" in command.text:
        carry_backup(run)


def after_block(run: Run, block: list[Command]) -> None:
    """The parts people play where the guide's text between blocks asks: the admin's edit of
    wg0.conf once the block that copies the example is done."""
    if any("wg0-server.conf.example /etc/wireguard/wg0.conf" in c.text for c in block):
        run.machine = block[-1].machine
        key = run.path("/etc/wireguard/server.key").read_text().strip()
        done = people.edit_wireguard(run.path("/etc/wireguard/wg0.conf"), key)
        say(f"  the admin edits /etc/wireguard/wg0.conf, as the guide asks: {'; '.join(done)}")


def dispatch(run: Run, command: str) -> None:
    check_sticks(run, command)
    for pattern, handler in HANDLERS:
        m = re.match(pattern, command)
        if m:
            handler(run, m, command)
            return
    generic(run, None, command)


def secrets_out_of_place(prefix: Path) -> list[str]:
    """What a stick or a machine holds that it must not, once the guide is done: a secret key of
    the KEYS stick (SVS, CA, backup key) anywhere else, a private key on the TRANSFER or TLS
    stick (a wheel is code, not looked into), anything but certificates on the TLS stick."""
    problems = []
    keys = prefix / "media" / "keys"
    secret = [*keys.rglob("private-keys-v1.d/*.key"), *keys.rglob("ca.key")]
    by_content = {(p.stat().st_size, p.read_bytes()): p for p in secret}
    by_name = {p.name: p for p in secret if p.parent.name == "private-keys-v1.d"}
    for found in prefix.rglob("*"):
        if keys in found.parents or found.is_symlink() or not found.is_file():
            continue
        size = found.stat().st_size
        same = by_name.get(found.name) or next((p for (n, data), p in by_content.items()
                                                if n == size and found.read_bytes() == data), None)
        if same is not None:
            problems.append(f"{found} is the secret key {same} of the KEYS stick")
    for stick in ("transfer", "tls"):
        for f in (prefix / "media" / stick).rglob("*"):
            if f.is_file() and f.suffix != ".whl" and re.search(rb"PRIVATE KEY", f.read_bytes()[:100_000]):
                problems.append(f"the {stick.upper()} stick holds a private key: {f}")
    tls = sorted(p.name for p in (prefix / "media" / "tls").rglob("*") if p.is_file())
    if any(not name.endswith(".pem") for name in tls):
        problems.append(f"the TLS stick holds more than certificates: {tls}")
    return problems


def check_sticks(run: Run, command: str) -> None:
    for name in re.findall(r"(?<![\w.~/-])/media/([^/\s'\"]+)", command):
        if name not in STICKS:
            raise StepFailed(f"/media/{name} is none of the guide's sticks ({', '.join(sorted(STICKS))})")
        if run.machine not in STICKS[name]:
            raise StepFailed(f"the {name.upper()} stick on the {run.machine}: it goes only to the "
                             f"{', '.join(sorted(STICKS[name]))}")


# -- the restore on a new server ------------------------------------------------------------------


def begin_new_server(run: Run) -> None:
    """The guide's restore happens on a new server: the first one stops, and what it had outside
    /opt (its data dir, /etc/deaddrop, /srv, root's home) is moved aside. What steps 1, 2, 4 and 5
    leave stays (the code, the unit, an empty /etc/deaddrop and data dir): the guide does them
    again there in full."""
    for proc in run.servers:
        _stop(proc)
    run.servers.clear()
    aside = run.prefix / "old-server"
    aside.mkdir()
    for guide_path in ("/var/lib/deaddrop", "/etc/deaddrop", "/srv", "/root"):
        path = run.path(guide_path)
        if path.exists():
            target = aside / guide_path.strip("/").replace("/", "-")
            path.rename(target)
    run.path("/var/lib/deaddrop").mkdir(mode=0o700)
    run.path("/etc/deaddrop").mkdir()
    run.path("/srv").mkdir()
    run.new_server = True
    say(f"  a new server: the first one is stopped, its data dir, /etc/deaddrop, /srv and /root moved to {aside}; "
        "the new data dir and /etc/deaddrop are empty, as steps 1 to 5 leave them")
    run.reach("new server")


def carry_backup(run: Run) -> None:
    """The admin's part: the backup, from where backups are kept, onto the TRANSFER stick."""
    date = run.placeholders.get("YYYY-MM-DD")
    kept = run.prefix / "old-server" / "srv" / "backups" / f"deaddrop-{date}.gpg"
    if not kept.is_file():
        raise StepFailed(f"no backup of {date} was made to carry: {kept}")
    shutil.copy(kept, run.prefix / "media" / "transfer" / kept.name)
    say(f"  the admin put the backup {kept.name} on the TRANSFER stick")


def restore_on_new_server(run: Run, command: str) -> None:
    data_dir = run.path("/var/lib/deaddrop")
    held = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*"))
    say(f"  {data_dir} holds, as the guide left it: {', '.join(held) or 'nothing'}")
    certificate = data_dir / "tls" / "server.pem"
    run.new_certificate = certificate.read_text() if certificate.is_file() else None
    admin_command(run, re.match(r".*deaddrop-admin (restore.*)", command), command)


def check_restored(run: Run) -> None:
    admin = run.path("/opt/deaddrop/.venv/bin/deaddrop-admin")
    proc = run.probe([str(admin), "status", "--json", "--data-dir", str(run.path("/var/lib/deaddrop"))])
    data = json.loads(proc.stdout)
    if data["counts"]["sources"] != 1 or data["counts"]["journalists"] != 1:
        raise StepFailed(f"the restored instance lacks the source or the account: {data['counts']}")
    digest = data.get("digest") or {}
    if run.smtp is not None and not (digest.get("enabled") and digest.get("recipients") == 1):
        raise StepFailed(f"the restored instance sends no digest, though alice is registered: {digest}")
    page = people.SourceBrowser(run.source_port).login(run.codename)
    if run.reply_text not in page:
        raise StepFailed("the source's codename does not log in on the restored instance, or alice's reply is gone")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", run.journalist_port), timeout=30) as raw:
        with context.wrap_socket(raw) as tls:
            served = tls.getpeercert(binary_form=True)
    leaf = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", run.new_certificate or "", re.S)
    if not leaf or served != ssl.PEM_cert_to_DER_cert(leaf.group(0)):
        raise StepFailed("the restored instance does not serve the certificate the new server had in tls/ before "
                         "the restore")
    say("  the restored instance serves: the account and the source are there, the codename logs in and the "
        "reply is there, the digest is on, and the journalist interface presents the certificate installed "
        "before the restore")
    run.reach("restored start")
