"""What happens around the guide's commands, played: the newsroom's mail server is there before
the guide names it; the admin carries the backup to the offline machine; the restore happens on a
new server, on which the admin first does again the steps the guide's section 8 names ("do steps
1 and 4 in full": their server commands, as written); the restored instance is checked; and, once
the guide is done, no secret is where it must not be."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
from pathlib import Path

from installcheck import people
from installcheck.guide import Command, guide_commands
from installcheck.steps import Run, StepFailed, dispatch, say
from installcheck.standins import stop


def before_command(run: Run, command: Command) -> None:
    if command.machine == "new server" and not run.new_server:
        begin_new_server(run)
    if run.smtp is None and re.search(r"smtp-password|<MAIL-SERVER>", command.text):
        start_mail_server(run)
    if command.machine == "offline machine" and "/media/transfer/deaddrop-YYYY-MM-DD.gpg" in command.text:
        carry_backup(run)


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
    say(f"  a mail server with STARTTLS and a login on 127.0.0.1:{port} for <MAIL-SERVER>:587; the server "
        "trusts its certificate (SSL_CERT_FILE), as it would a real one's")


def carry_backup(run: Run) -> None:
    """The admin's part: the backup, from where backups are kept, onto the TRANSFER stick."""
    date = run.placeholders.get("YYYY-MM-DD")
    kept = run.machines["server"].path(f"/srv/backups/deaddrop-{date}.gpg")
    if not kept.is_file():
        raise StepFailed(f"no backup of {date} was made to carry: /srv/backups/deaddrop-{date}.gpg")
    shutil.copy(kept, run.prefix / "media" / "transfer" / kept.name)
    say(f"  the admin put the backup {kept.name} on the TRANSFER stick")


def steps_again(guide: str) -> list[str]:
    """The steps section 8 says to do again on the new server ("do steps 1 and 4 in full")."""
    said = re.search(r"do steps? ([\d, and]+?) in full", guide.split("\n## 8.", 1)[-1])
    if not said:
        raise StepFailed("section 8 no longer says which steps to do again on the new server (\"do steps ... in full\")")
    return re.findall(r"\d+", said.group(1))


def begin_new_server(run: Run) -> None:
    """A new machine: the first server stops (its backups stay where they are kept), and the admin
    does on the new one, as written, the server commands of the steps section 8 names."""
    for proc in run.servers:
        stop(proc)
    run.servers.clear()
    run.new_server = True
    run.machine = "new server"
    run.reach("new server")
    numbers = steps_again(run.guide)
    again = [c for c in guide_commands(run.guide) if c.machine == "server" and c.section.split(".")[0] in numbers]
    say(f"  a new server, a fresh machine: the first one is stopped; the admin does steps {', '.join(numbers)} "
        f"again here, as section 8 says ({len(again)} commands, as written)")
    for command in again:
        say(f"  [again] {command.section}: {command.first_line}")
        run.command, run.allowed = command, {run.moved(command.text)}
        run.modes.append("")
        dispatch(run, command.text)
        run.modes[-1] = run.modes[-1] or "as written"
        run.replayed += 1
    data = run.path("/var/lib/deaddrop")
    if any(data.iterdir()):
        raise StepFailed(f"the new server's data dir is not empty before the restore: {sorted(os.listdir(data))}")


def restore_on_new_server(run: Run, command: str) -> None:
    from installcheck.steps import admin_command

    data_dir = run.path("/var/lib/deaddrop")
    held = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*"))
    say(f"  /var/lib/deaddrop holds, as the guide left it: {', '.join(held) or 'nothing'}")
    certificate = data_dir / "tls" / "server.pem"
    run.new_certificate = certificate.read_text() if certificate.is_file() else None
    admin_command(run, re.match(r".*deaddrop-admin (restore.*)", command), command)


def check_restored(run: Run) -> None:
    proc = run.probe(["runuser", "-u", "deaddrop", "--", "deaddrop-admin", "status", "--json", "--data-dir",
                      "/var/lib/deaddrop"])
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


def secrets_out_of_place(sticks: Path, machines: dict[str, Path]) -> list[str]:
    """What a stick or a machine holds that it must not, once the guide is done: a secret key of
    the KEYS stick (SVS, CA, backup key) on another stick or in what a machine other than the
    offline one wrote, a private key on the TRANSFER or TLS stick (a package is code, not looked
    into), anything but certificates on the TLS stick. ``machines``: each one's written files."""
    problems = []
    keys = sticks / "keys"
    secret = [*keys.rglob("private-keys-v1.d/*.key"), *keys.rglob("ca.key")]
    by_content = {(p.stat().st_size, p.read_bytes()): p for p in secret}
    by_name = {p.name: p for p in secret if p.parent.name == "private-keys-v1.d"}
    places = [("", p) for p in sticks.iterdir() if p != keys]
    places += [(f"the {name}'s ", written) for name, written in machines.items() if name != "offline machine"]
    for label, place in places:
        for found in place.rglob("*"):
            if found.is_symlink() or not found.is_file():
                continue
            size = found.stat().st_size
            same = by_name.get(found.name) or next((p for (n, data), p in by_content.items()
                                                    if n == size and found.read_bytes() == data), None)
            if same is not None:
                problems.append(f"{label}{found.relative_to(place.parent)} is the secret key "
                                f"{same.relative_to(sticks)} of the KEYS stick")
    for stick in ("transfer", "tls"):
        for f in (sticks / stick).rglob("*"):
            if f.is_file() and f.suffix != ".deb" and re.search(rb"PRIVATE KEY", f.read_bytes()[:100_000]):
                problems.append(f"the {stick.upper()} stick holds a private key: {f.relative_to(sticks)}")
    tls = sorted(p.name for p in (sticks / "tls").rglob("*") if p.is_file())
    if any(not name.endswith(".pem") for name in tls):
        problems.append(f"the TLS stick holds more than certificates: {tls}")
    return problems
