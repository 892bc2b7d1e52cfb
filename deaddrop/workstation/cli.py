"""``deaddrop-journalist``: the journalist workstation's command line (treq over mutual TLS)."""
from __future__ import annotations

import argparse
import datetime
import getpass
import os
import sys
from typing import Any, Sequence

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import react

from deaddrop.workstation.api import ApiError, Credentials, JournalistApi  # noqa: F401 (re-exported)
from deaddrop.workstation.ledger import DownloadLedger, ledger_path_beside
from deaddrop.workstation.reply import ReplyError, require_gpg, send_reply
from deaddrop.workstation.sync import Progress, SyncError, Syncer
from deaddrop.workstation.tls import (
    ClientTLSError, NewsroomTLSPolicy, WrongCertificatePassword, load_client_certificate, load_trust_root,
)

DEFAULT_SESSION = os.path.join(os.path.expanduser("~"), ".cache", "deaddrop-journalist", "session.json")


class UsageProblem(Exception):
    pass


def _common_options(suppress: bool) -> argparse.ArgumentParser:
    """The connection options, accepted before or after the command.

    After the command they default to SUPPRESS, so they never clobber values given before it.
    """
    common = argparse.ArgumentParser(add_help=False)

    def add(*names: str, default: Any = None, **kw: Any) -> None:
        common.add_argument(*names, default=argparse.SUPPRESS if suppress else default, **kw)

    add("--url", default=os.environ.get("DEADDROP_URL"), help="https://HOST:8443 (or $DEADDROP_URL)")
    add("--cert", default=os.environ.get("DEADDROP_CERT"), help="your client certificate: NAME.p12 or NAME.cert.pem")
    add("--key", help="PEM private key (default: NAME.key.pem next to a PEM --cert)")
    add("--cert-password-file", help="file holding the .p12 password")
    add("--ca", default=os.environ.get("DEADDROP_CA"), help="the server's certificate or its CA (PEM)")
    add("--username", default=os.environ.get("DEADDROP_USERNAME"))
    add("--password-file", help="file holding your passphrase (default: ask)")
    add("--totp", help="the current one-time code: six digits from your app or YubiKey, or, for an account with "
                       "security keys, the API code from your account page (default: ask)")
    add("--totp-secret-file", help="compute codes from this TOTP secret (automation only)")
    add("--session-file", default=DEFAULT_SESSION, help="where the API token is cached (0600)")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_options(suppress=True)
    parser = argparse.ArgumentParser(prog="deaddrop-journalist", description="Talk to a DeadDrop journalist API.",
                                     parents=[_common_options(suppress=False)])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("sync", parents=[common],
                       help="download every submission this workstation has not downloaded yet (encrypted) into --out")
    p.add_argument("--out", required=True, help="folder for DESIGNATION/N-designation-kind.gpg files")
    p.add_argument("--progress", action="store_true", help="show progress even when not on a terminal")
    p = sub.add_parser("reply", parents=[common], help="encrypt a reply here and send it")
    p.add_argument("designation", help='the source\'s designation, e.g. "amber quiet lantern" or amber_quiet_lantern')
    p.add_argument("--message-file", required=True, help="the reply text (UTF-8); '-' for standard input")
    sub.add_parser("sources", parents=[common], help="a table of sources")
    sub.add_parser("login", parents=[common],
                   help="log in now and cache the API token (with security keys: give the API code from your "
                        "account page as the one-time code)")
    sub.add_parser("logout", parents=[common], help="revoke the cached token")
    return parser


def _read_first_line(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as e:
        raise UsageProblem(f"cannot read {what} {path}: {e.strerror}")


def credentials_from(args: Any) -> Credentials:
    if not args.username:
        raise UsageProblem("--username is required")
    passphrase = _read_first_line(args.password_file, "--password-file") if args.password_file else getpass.getpass("Passphrase: ")

    def code() -> str:
        if args.totp:
            return args.totp
        if args.totp_secret_file:
            import pyotp

            return pyotp.TOTP(_read_first_line(args.totp_secret_file, "--totp-secret-file")).now()
        return input("One-time code (or the API code from your account page): ").strip()

    return Credentials(args.username, passphrase, code)


def make_api(reactor: Any, args: Any) -> JournalistApi:
    for option in ("url", "cert", "ca"):
        if not getattr(args, option):
            raise UsageProblem(f"--{option} is required")
    if not args.url.startswith("https://"):
        raise UsageProblem("--url must start with https://")
    policy = NewsroomTLSPolicy(load_trust_root(args.ca), client_certificate(args))
    return JournalistApi(reactor, args.url, policy, session_file=args.session_file)


PASSWORD_TRIES = 3


def client_certificate(args: Any) -> Any:
    """The client certificate, opened with ``--cert-password-file`` or else, if it needs a
    password, with the one typed at the prompt (three tries), as the guide says it asks."""
    if args.cert_password_file:
        password = _read_first_line(args.cert_password_file, "--cert-password-file").encode("utf-8")
        try:
            return load_client_certificate(args.cert, args.key, password)
        except WrongCertificatePassword as e:
            raise UsageProblem(f"{e} (the password in --cert-password-file {args.cert_password_file})")
    try:
        return load_client_certificate(args.cert, args.key, None)
    except WrongCertificatePassword:
        pass  # it has a password, as every one `cert issue` makes does: ask for it
    prompt = f"Import password for {os.path.basename(args.cert)}: "
    for attempt in range(PASSWORD_TRIES):
        if attempt:
            sys.stderr.write("Wrong password, try again.\n")
        try:
            typed = getpass.getpass(prompt)
        except EOFError:
            raise UsageProblem(f"{args.cert} needs its import password: type it when asked, or give "
                               "--cert-password-file FILE")
        try:
            return load_client_certificate(args.cert, args.key, typed.encode("utf-8"))
        except WrongCertificatePassword as failure:
            last = failure
    raise UsageProblem(f"{last} ({PASSWORD_TRIES} tries)")


def activity(value: str | None) -> str:
    """The API's ``last_updated`` as the journalist web shows it: a source's times are kept to
    the day only, so midnight UTC is the date alone, not a made-up time of day."""
    if not value:
        return "never"
    try:
        moment = datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return value
    if moment.time() == datetime.time():
        return moment.strftime("%Y-%m-%d")
    return moment.strftime("%Y-%m-%d %H:%M UTC")


@inlineCallbacks
def run(reactor: Any, args: Any, out=sys.stdout):
    if args.command == "reply":
        require_gpg()  # before a password is asked for: without gpg nothing can be sent
    api = make_api(reactor, args)
    try:
        if args.command == "logout":
            api.token = api._load_saved_token()
            yield api.log_out()
            out.write("logged out\n")
            return 0
        if args.command == "login":  # a new token whatever is cached: the one-time code is used now
            yield api.log_in(lambda: credentials_from(args), reuse=False)
            user = yield api.get_json("/user")
            out.write(f"logged in as {user['username']}; the token is cached in {args.session_file} "
                      f"until it expires ('logout' ends it)\n")
            return 0
        yield api.log_in(lambda: credentials_from(args))
        if args.command == "sync":
            progress = Progress(sys.stderr, args.progress or sys.stderr.isatty())
            ledger = DownloadLedger(ledger_path_beside(args.session_file))
            report = yield Syncer(api, args.out, progress, ledger).run()
            out.write(
                f"{len(report.downloaded)} downloaded, {len(report.already_present)} already present, "
                f"{len(report.resumed)} resumed, {len(report.refetched)} re-fetched after a bad checksum, "
                f"{report.marked_seen} marked seen, {report.downloaded_before} downloaded here before\n")
            if report.read_elsewhere:
                out.write(f"{report.read_elsewhere} of the files fetched had been read already (in the browser, or "
                          "by a colleague): sync fetches what this workstation has not downloaded, read or not\n")
        elif args.command == "reply":
            if args.message_file == "-":
                message = sys.stdin.read()
            else:
                try:
                    with open(args.message_file, encoding="utf-8") as f:
                        message = f.read()
                except (OSError, UnicodeDecodeError) as e:
                    raise UsageProblem(f"cannot read --message-file {args.message_file}: {e}")
            result = yield send_reply(api, args.designation, message)
            out.write(f"reply sent ({result.get('filename', result.get('uuid', 'ok'))})\n")
        elif args.command == "sources":
            sources = yield api.all_sources()
            rows = []
            for s in sources:
                subs = yield api.get_json(f"/sources/{s['uuid']}/submissions")
                unread = sum(1 for x in subs.get("submissions", []) if not x.get("is_read"))
                name = ("* " if s.get("is_starred") else "  ") + s["journalist_designation"]
                rows.append((name, str(unread), activity(s.get("last_updated"))))
            out.write(f"{'SOURCE':32} {'UNREAD':>6}  LAST ACTIVITY\n")
            for name, unread_count, last in rows:
                out.write(f"{name:32} {unread_count:>6}  {last}\n")
        return 0
    finally:
        yield api.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    status = [1]

    def go(reactor: Any):
        d = run(reactor, args)

        def ok(code: int) -> None:
            status[0] = code

        def failed(failure: Any) -> None:
            e = failure.value
            if isinstance(e, (UsageProblem, ClientTLSError, SyncError, ReplyError)):
                sys.stderr.write(f"deaddrop-journalist: error: {e}\n")
            elif isinstance(e, ApiError):
                sys.stderr.write(f"deaddrop-journalist: the server said {e.status}: {e.message}\n")
            else:
                sys.stderr.write(f"deaddrop-journalist: error: {failure.getErrorMessage() or failure.type.__name__}\n")
            status[0] = 1

        return d.addCallbacks(ok, failed)

    try:
        react(go)
    except SystemExit:
        pass
    return status[0]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
