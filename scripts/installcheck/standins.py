"""What this machine cannot run as the guide says, stood in for: systemd is not PID 1 here (a
unit's ExecStart is started as systemd would start it, in the machine; a WireGuard or nftables
file is checked instead of loaded), and WireGuard's and nftables' programs are not installed (their
stand-in packages are empty). Each says so, and checks the file the step would use."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

from installcheck.steps import MAIL_CA, Run, StepFailed, say
from tests._debian import unit_exec

UNITS = "/lib/systemd/system"  # where the package puts its units


def systemctl_wg(run: Run, m: re.Match, command: str) -> None:
    name = f"/etc/wireguard/{m.group(1)}.conf"
    conf = run.path(name)
    if not conf.is_file():
        raise StepFailed(f"{name} is missing: wg-quick@{m.group(1)} would not start")
    problems = wireguard_problems(conf.read_text())
    if problems:
        raise StepFailed(f"wg-quick@{m.group(1)} would start with {name} as it is: {'; '.join(problems)}")
    if has_program(run, "wg-quick"):
        proc = run.probe(["wg-quick", "strip", name])
        if proc.returncode != 0:
            raise StepFailed(f"wg-quick strip refused {name}:\n{proc.stderr}")
    run.stand_in(f"systemd is not PID 1 here; {name} has a valid structure and real keys, no placeholder")
    run.tunnels[run.machine] = conf.read_text()
    if run.machine == "journalist workstation":
        check_tunnel_ends(run)
        run.reach("workstation VPN")
    else:
        run.reach("VPN")


def check_tunnel_ends(run: Run) -> None:
    """Each end of the tunnel lists the other's public key: the public half of the private key in
    the other end's file."""
    server, workstation = run.tunnels.get("server"), run.tunnels["journalist workstation"]
    if server is None:
        raise StepFailed("the workstation's tunnel starts before the server has one")

    def private(text: str) -> str:
        return public_half(re.search(r"^PrivateKey = (\S+)", text, re.M).group(1))

    def peers(text: str) -> list[str]:
        return re.findall(r"^PublicKey = (\S+)", text, re.M)

    if private(workstation) not in peers(server):
        raise StepFailed("the server's wg0.conf has no [Peer] with the workstation's public key: the server "
                         "would refuse its tunnel")
    if peers(workstation) != [private(server)]:
        raise StepFailed("the workstation's [Peer] is not the server's public key")
    say("  each end of the tunnel lists the other's public key")
    run.reach("tunnel keys match")


def public_half(private_key: str) -> str:
    """What ``wg pubkey`` prints for ``private_key`` (X25519)."""
    import base64

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    key = X25519PrivateKey.from_private_bytes(base64.b64decode(private_key))
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


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
        raise StepFailed("/etc/nftables.conf is missing")
    problems = nftables_problems(conf.read_text())
    if problems:
        raise StepFailed(f"/etc/nftables.conf: {'; '.join(problems)}")
    checked = "its structure"
    if has_program(run, "nft"):
        proc = run.probe(["nft", "-c", "-f", "/etc/nftables.conf"])
        if proc.returncode == 0:
            checked = "nft -c accepts it"
    run.stand_in(f"systemd is not PID 1 here; /etc/nftables.conf: {checked}, it flushes the rule set first and drops by default")
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



def has_program(run: Run, name: str) -> bool:
    return run.probe(["sh", "-c", f"command -v {name}"]).returncode == 0


def analyze_security(run: Run, m: re.Match, command: str) -> None:
    """The packaged unit, rated and verified in the machine (systemd-analyze needs no PID 1 for that)."""
    unit = f"{UNITS}/{m.group(1)}"
    if not run.path(unit).is_file():
        raise StepFailed(f"{unit} is missing: the package did not install the unit")
    out = run.probe(["systemd-analyze", "security", "--offline=yes", "--no-pager", unit]).stdout
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\w+)", out)
    if not level:
        raise StepFailed(f"systemd-analyze gave no exposure level:\n{out}")
    verify = run.probe(["systemd-analyze", "verify", unit])
    if verify.returncode != 0:
        raise StepFailed(f"systemd-analyze verify refused the unit:\n{verify.stdout}{verify.stderr}")
    run.stand_in(f"systemd is not PID 1: --offline=yes gives exposure {level.group(1)} {level.group(2)}; "
                 "systemd-analyze verify accepts the unit")
    run.reach("unit checked")


def start_unit(run: Run, m: re.Match, command: str) -> None:
    """The unit's ExecStart, as systemd runs it (its user, folder, Environment= and EnvironmentFile=),
    with what this machine changes added last: no Tor (no Internet), and both listeners on 127.0.0.1."""
    if m.group(2) != "deaddrop":
        raise StepFailed(f"unknown unit {m.group(2)}")
    for proc in run.servers:
        stop(proc)
    run.servers.clear()
    machine = run.here
    text = machine.path(f"{UNITS}/deaddrop.service").read_text()
    try:
        argv = unit_exec(text, lambda path: machine.path(path).read_text())
    except FileNotFoundError as e:
        raise StepFailed(f"the unit's EnvironmentFile is missing: systemd would not start it ({e})") from None
    here = ["DEADDROP_TOR=none", f"DEADDROP_SOURCE_LISTEN=tcp:{run.source_port}:interface=127.0.0.1",
            f"DEADDROP_JOURNALIST_LISTEN=tcp:{run.journalist_port}:interface=127.0.0.1"]
    if run.smtp_trust is not None:
        run.env()  # puts the mail server's certificate in the machine
        here.append(f"SSL_CERT_FILE={MAIL_CA}")
    program = next(i for i, word in enumerate(argv) if word.startswith("/usr/lib/deaddrop/"))
    argv[program:program] = here
    run.stand_in(f"systemd is not PID 1 here: the unit's ExecStart as its User with its environment and "
                 f"{' '.join(here)} (no Internet access: Tor could not bootstrap; the VPN address is 127.0.0.1 here)")
    log = run.prefix / ("restored.log" if run.restored else "deaddrop.log")
    proc = machine.root.popen(argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, log=log)
    run.servers.append(proc)
    _wait_listening(run, proc, log)
    if "plugin cache" in log.read_text(errors="replace"):
        raise StepFailed(f"the server's log warns about twistd's plugin cache:\n{log.read_text()[-2000:]}")
    run.reach("first start" if m.group(1) == "enable --now" else "restart")
    if run.restored:
        from installcheck.newserver import check_restored

        check_restored(run)


def _wait_listening(run: Run, proc: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StepFailed(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            for port in (run.source_port, run.journalist_port):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            say(f"  serving: sources on 127.0.0.1:{run.source_port}, journalists on 127.0.0.1:{run.journalist_port}")
            return
        except OSError:
            time.sleep(0.3)
    raise StepFailed(f"the server did not listen within 120 s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
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


