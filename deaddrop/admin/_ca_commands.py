"""``deaddrop-admin ca init``, ``cert issue|server|list|revoke`` and ``crl``: the offline CA.

One CA signs both the journalists' client certificates and the journalist listener's server
certificate, so a journalist who imports their ``.p12`` (which carries the CA) and trusts that
CA gets no certificate warning. Every file a command writes is named in its output.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
from typing import Any

from deaddrop.transport import ca
from deaddrop.admin._output import AdminError, Output

_CA_DIR_HELP = (
    "the CA directory (default: DATA_DIR/ca, for demos only: in production keep the CA "
    "on an offline machine and copy only ca.pem and the CRL to the server)"
)


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    ca_parser = subparsers.add_parser("ca", help="the journalist client-certificate authority")
    ca_sub = ca_parser.add_subparsers(dest="ca_command", metavar="ACTION")
    ca_sub.required = True
    p = ca_sub.add_parser("init", parents=[common_parent], help="create a new CA (never overwrites one)")
    _add_ca_dir(p)
    p.add_argument("--algorithm", choices=ca.ALGORITHMS, default="p256",
                   help="the CA key type (client keys are always P-256, which browsers support)")
    p.set_defaults(func=_ca_init)

    cert_parser = subparsers.add_parser("cert", help="journalist client certificates")
    cert_sub = cert_parser.add_subparsers(dest="cert_command", metavar="ACTION")
    cert_sub.required = True
    p = cert_sub.add_parser("issue", parents=[common_parent],
                            help="issue NAME's client certificate as a password-protected .p12")
    p.add_argument("name", metavar="NAME", help="the journalist's username (the certificate CN; "
                   "logins are accepted only over a certificate issued for that username)")
    _add_ca_dir(p)
    p.add_argument("--out", required=True, help="where to write the PKCS#12 file, e.g. NAME.p12")
    p.add_argument("--password-file", help="file holding the .p12 import password "
                   "(default: generate and print a random passphrase)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default: 365)")
    p.add_argument("--pem", action="store_true", help="also write OUT-STEM.key.pem (encrypted with the same "
                   "password) and OUT-STEM.cert.pem, for command-line tools")
    p.set_defaults(func=_cert_issue)

    p = cert_sub.add_parser("server", parents=[common_parent],
                            help="issue the journalist listener's TLS certificate from this CA")
    _add_ca_dir(p)
    p.add_argument("--host", action="append", required=True, metavar="HOST",
                   help="an address or DNS name journalists use to reach the server (repeatable)")
    p.add_argument("--out", default="server.pem",
                   help="the certificate to write (default: server.pem); its key goes to OUT-STEM.key")
    p.add_argument("--days", type=int, default=ca.SERVER_DAYS,
                   help=f"validity in days (default: {ca.SERVER_DAYS}, at most {ca.SERVER_MAX_DAYS}); "
                        "'deaddrop-admin status' warns 30 days before the end")
    p.set_defaults(func=_cert_server)

    p = cert_sub.add_parser("list", parents=[common_parent],
                            help="every certificate: serial, name, expiry, revoked, whether an account exists")
    _add_ca_dir(p)
    p.set_defaults(func=_cert_list)

    p = cert_sub.add_parser("revoke", parents=[common_parent],
                            help="revoke NAME's certificate (then publish a new CRL with 'crl')")
    p.add_argument("name", metavar="NAME")
    _add_ca_dir(p)
    p.set_defaults(func=_cert_revoke)

    p = subparsers.add_parser("crl", parents=[common_parent],
                              help="write a CRL listing all revoked certificates")
    _add_ca_dir(p)
    p.add_argument("--out", help="where to write the CRL (default: CA_DIR/crl.pem)")
    p.add_argument("--next-update-days", type=int, default=30,
                   help="days until the CRL expires; the server refuses everyone after that (default: 30)")
    p.set_defaults(func=_crl)


def _add_ca_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ca-dir", help=_CA_DIR_HELP)


def _ca_dir(args: argparse.Namespace) -> str:
    return args.ca_dir or os.path.join(args.data_dir, "ca")


def _ca_init(args: argparse.Namespace, out: Output) -> int:
    r = ca.init_ca(_ca_dir(args), args.algorithm)
    out.result(r, f"created a {r['algorithm']} CA in {r['ca_dir']}\n"
                  f"  server needs: {r['ca_cert']} and a CRL ({r['crl']} is an empty one)\n"
                  f"  keep {os.path.join(r['ca_dir'], ca.CA_KEY)} offline")
    return 0


def _cert_issue(args: argparse.Namespace, out: Output) -> int:
    password = _read_password(args.password_file) if args.password_file else None
    r = ca.issue_client_cert(_ca_dir(args), args.name, args.out, password, days=args.days, pem=args.pem)
    names = account_names(args.data_dir)
    r["account_exists"] = None if names is None else args.name.casefold() in names
    text = f"issued {r['name']} (serial {r['serial']}, expires {r['not_after']})\n"
    text += "".join(f"  wrote {path}\n" for path in r["files"])
    if r["password_generated"]:
        text += f"  import password (shown once, give it to {r['name']} separately): {r['password']}\n"
    if r["account_exists"] is False:
        text += (f"  warning: there is no account named {args.name} in {args.data_dir}: this certificate "
                 f"logs in only as {args.name} (deaddrop-admin journalist add {args.name} on the server)\n")
    elif r["account_exists"] is None:
        text += (f"  note: no database in {args.data_dir}, so whether {args.name} has an account was not checked; "
                 f"this certificate logs in only as the account named {args.name}\n")
    out.result(r, text)
    return 0


def _cert_server(args: argparse.Namespace, out: Output) -> int:
    r = ca.issue_server_cert(_ca_dir(args), args.host, args.out, days=args.days)
    out.result(r, f"issued the server certificate for {', '.join(r['hosts'])} (serial {r['serial']}, "
                  f"expires {r['not_after']})\n"
                  f"  wrote {r['cert']} (certificate + CA)\n  wrote {r['key']} (its key: keep it secret)\n"
                  f"  on the server: DATA/tls/server.pem and DATA/tls/server.key, the service user's, the key 0600 "
                  f"(the server reads its pair there)\n"
                  f"  renew it before then: copy a new pair over these files (temporary name, then mv) and the "
                  f"server picks it up without a restart; 'deaddrop-admin status' warns 30 days before")
    return 0


def _cert_list(args: argparse.Namespace, out: Output) -> int:
    certs = ca.list_certs(_ca_dir(args))
    names = account_names(args.data_dir)
    for c in certs:
        c["account_exists"] = None if names is None or c["kind"] != "client" else c["name"].casefold() in names
    rows = [f"{'serial':<40} {'kind':<6} {'name':<20} {'expires':<25} {'revoked':<7} account"]
    for c in certs:
        account = {True: "yes", False: "NO", None: "-"}[c["account_exists"]]
        rows.append(f"{c['serial']:<40} {c['kind']:<6} {c['name']:<20} {c['not_after']:<25} "
                    f"{'yes' if c['revoked'] else 'no':<7} {account}")
    if names is None:
        rows.append(f"(no database in {args.data_dir}: accounts not checked)")
    out.result({"certificates": certs, "accounts_checked": names is not None}, "\n".join(rows))
    return 0


def _cert_revoke(args: argparse.Namespace, out: Output) -> int:
    ca_dir = _ca_dir(args)
    r = ca.revoke(ca_dir, args.name)
    r["next_step"] = _publish_step(args, ca_dir)
    out.result(r, f"revoked {r['name']} (serial {', '.join(r['serials'])})\n  next: {r['next_step']}")
    return 0


def _publish_step(args: argparse.Namespace, ca_dir: str) -> str:
    """The command that makes the revocation take effect, for the CA actually in use."""
    data_dir = os.path.abspath(args.data_dir)
    if os.path.realpath(ca_dir) == os.path.realpath(os.path.join(data_dir, "ca")):
        # The demo layout: the server watches DATA/ca/crl.pem itself.
        return (f"deaddrop-admin crl --data-dir {args.data_dir} (rewrites {os.path.join(ca_dir, ca.CA_CRL)}, "
                "which the server reloads within seconds; its open connections for this certificate close)")
    return (f"deaddrop-admin crl --ca-dir {ca_dir} --out crl.pem, then copy crl.pem over the server's "
            "--journalist-crl file (copy to a temporary name beside it, then mv): the server reloads it "
            "within seconds")


def _crl(args: argparse.Namespace, out: Output) -> int:
    ca_dir = _ca_dir(args)
    r = ca.write_crl(ca_dir, args.out or os.path.join(ca_dir, ca.CA_CRL), args.next_update_days)
    out.result(r, f"wrote {r['path']}: {r['count']} revoked, next update by {r['next_update']}")
    return 0


def account_names(data_dir: str) -> set[str] | None:
    """Usernames (casefolded) in ``DATA/db.sqlite``, or None when there is no database to ask.

    Read-only: on the offline CA machine there is usually no database, and then nothing is
    created; the commands say that the account was not checked.
    """
    path = os.path.join(os.path.abspath(data_dir), "db.sqlite")
    if not os.path.isfile(path):
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return {str(row[0]).casefold() for row in conn.execute("SELECT username FROM journalists")}
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def _read_password(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise AdminError(f"cannot read password file {path}: {e.strerror}") from None
    # Editors add a final newline; it is not part of the password.
    password = data[:-1] if data.endswith(b"\n") else data
    password = password[:-1] if password.endswith(b"\r") else password
    if not password:
        raise AdminError(f"password file {path} is empty")
    return password
