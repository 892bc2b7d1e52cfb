"""``deaddrop-admin ca init``, ``cert issue|revoke`` and ``crl``: the offline journalist CA."""
from __future__ import annotations

import argparse
import os
from typing import Any

from deaddrop.admin import ca
from deaddrop.admin.cli import AdminError, Output

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
                            help="issue NAME.p12 for a browser, plus NAME.key.pem/NAME.cert.pem next to it")
    p.add_argument("name", metavar="NAME", help="the journalist's name (the certificate CN)")
    _add_ca_dir(p)
    p.add_argument("--out", required=True, help="where to write the PKCS#12 file, e.g. NAME.p12")
    p.add_argument("--password-file", help="file holding the .p12 import password "
                   "(default: generate and print a random passphrase)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default: 365)")
    p.set_defaults(func=_cert_issue)

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
    r = ca.issue_client_cert(_ca_dir(args), args.name, args.out, password, days=args.days)
    text = (f"issued {r['name']} (serial {r['serial']}, expires {r['not_after']})\n"
            f"  browser: {r['p12']}\n  command line: {r['key_pem']} + {r['cert_pem']}")
    if r["password_generated"]:
        text += f"\n  import password (shown once, give it to {r['name']} separately): {r['password']}"
    out.result(r, text)
    return 0


def _cert_revoke(args: argparse.Namespace, out: Output) -> int:
    ca_dir = _ca_dir(args)
    r = ca.revoke(ca_dir, args.name)
    out.result(r, f"revoked {r['name']} (serial {', '.join(r['serials'])})\n"
                  f"  now publish it: deaddrop-admin crl --ca-dir {ca_dir} --out crl.pem, "
                  "and copy crl.pem to the server")
    return 0


def _crl(args: argparse.Namespace, out: Output) -> int:
    ca_dir = _ca_dir(args)
    r = ca.write_crl(ca_dir, args.out or os.path.join(ca_dir, ca.CA_CRL), args.next_update_days)
    out.result(r, f"wrote {r['path']}: {r['count']} revoked, next update by {r['next_update']}")
    return 0


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
