"""``deaddrop-admin journalist add|list|delete|reset-2fa|reset-password|notify``.

``add`` and ``reset-2fa`` take ``--hotp-secret HEX`` for a YubiKey in HOTP mode (issue 30);
``reset-2fa`` also forgets the account's security keys and recovery codes.

Works only on a data directory the server has initialised (a mistyped ``--data-dir`` is refused)
and while the server runs: SQLite in WAL mode lets both write, and the server
re-reads an account on every request, so a deletion or reset ends that journalist's sessions
and API tokens at once. Every change is appended to ``DATA/logs/security.jsonl``.
"""
from __future__ import annotations

import argparse
import io
import os
import time
from typing import Any

import qrcode

from deaddrop.admin._opened import OpenedDataDir, with_opened
from deaddrop.admin._output import AdminError, Output
from deaddrop.crypto.kdf import KdfCost
from deaddrop.newsroom.accounts import (
    AccountError, Journalist, create_account_blocking, generate_passphrase, hash_passphrase, new_totp_secret,
    totp_uri,
)
from deaddrop.second_factor import hotp, policy
from deaddrop.store import factor_queries as fq
from deaddrop.store import journalist_queries as jq
from deaddrop.store import queries


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("journalist", help="journalist accounts (passphrase + two-factor)")
    actions = parser.add_subparsers(dest="journalist_command", metavar="ACTION")
    actions.required = True

    p = actions.add_parser("add", parents=[common_parent],
                           help="add an account; prints its passphrase and two-factor secret once")
    p.add_argument("name", metavar="NAME", help="the username (letters, digits, '.', '_', '-')")
    p.add_argument("--admin", action="store_true", help="may manage users and instance settings")
    _add_hotp(p)
    _add_cost(p)
    p.set_defaults(func=_add)

    p = actions.add_parser("list", parents=[common_parent], help="list the accounts")
    p.set_defaults(func=_list)

    p = actions.add_parser("delete", parents=[common_parent], help="delete an account (its sessions end)")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=_delete)

    p = actions.add_parser("reset-2fa", parents=[common_parent],
                           help="give an account a new two-factor secret, forgetting its security keys (its sessions end)")
    p.add_argument("name", metavar="NAME")
    _add_hotp(p)
    p.set_defaults(func=_reset_2fa)

    p = actions.add_parser("reset-password", parents=[common_parent],
                           help="give an account a new generated passphrase (its sessions end)")
    p.add_argument("name", metavar="NAME")
    _add_cost(p)
    p.set_defaults(func=_reset_password)

    p = actions.add_parser("notify", parents=[common_parent],
                           help="send an account the encrypted digest mail (or stop it with --off)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--email", metavar="ADDRESS", help="where the digest goes")
    p.add_argument("--key", metavar="KEY.asc", help="the journalist's personal OpenPGP public key (armored)")
    p.add_argument("--off", action="store_true", help="stop the digest and forget the address and key")
    p.set_defaults(func=_notify)


def _add_hotp(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hotp-secret", metavar="HEX", type=_argument(hotp.parse_secret),
                        help="log in with this YubiKey's HOTP codes (its OATH-HOTP secret in hex) instead of an app's TOTP")


def _add_cost(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kdf-cost", default="default", type=_argument(KdfCost.parse),
                        help="Argon2id cost of the passphrase hash: 'default' or OPS:MEMBYTES")


def _argument(parse: Any) -> Any:
    """An argparse ``type`` from a parser that raises ``ValueError`` with a line for the admin."""
    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parsed


# -- plumbing -------------------------------------------------------------------------------

class _Instance(OpenedDataDir):
    def issuer(self) -> str:
        return self.run(queries.get_settings).get("organisation_name", "DeadDrop")

    def journalist(self, name: str) -> Journalist:
        row = self.run(jq.journalist_by_username, name)
        if row is None:
            raise AdminError(f"no journalist named {name!r} (see 'deaddrop-admin journalist list')")
        return Journalist.from_row(row)


_with_instance = with_opened(_Instance)


def _qr(uri: str) -> str:
    qr = qrcode.QRCode(border=2)
    qr.add_data(uri)
    qr.make(fit=True)
    buf = io.StringIO()
    # Inverted: light modules drawn, dark ones left blank, which reads right on a dark terminal.
    qr.print_ascii(out=buf, invert=True)
    return buf.getvalue()


def _account_json(j: Journalist) -> dict[str, Any]:
    return {"username": j.username, "uuid": j.uuid, "is_admin": j.is_admin,
            "created_at": _iso(j.created_at), "last_login_at": _iso(j.last_login_at)}


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# -- commands -------------------------------------------------------------------------------

def _add_impl(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    try:
        creds = create_account_blocking(instance.conn, args.name, args.admin, args.kdf_cost, instance.issuer(),
                                        hotp_secret=args.hotp_secret)
    except AccountError as e:
        raise AdminError(str(e)) from None
    j = creds.journalist
    instance.events.emit("admin.journalist.added", target=j.username)
    if args.hotp_secret is not None:
        data = dict(_account_json(j), passphrase=creds.passphrase, second_factor="hotp")
        second = "  two-factor:        the YubiKey programmed with that HOTP secret (a code per touch)\n"
    else:
        data = dict(_account_json(j), passphrase=creds.passphrase, totp_secret=creds.totp_secret,
                    totp_uri=creds.totp_uri)
        second = (f"  two-factor secret: {creds.totp_secret}\n"
                  f"  otpauth URI:       {creds.totp_uri}\n"
                  f"  or scan this with an authenticator app:\n{_qr(creds.totp_uri or '')}\n")
    out.result(data, (
        f"added journalist {j.username}{' (administrator)' if j.is_admin else ''}\n"
        f"  give these to {j.username} in person; they are not shown again:\n"
        f"  passphrase:        {creds.passphrase}\n"
        f"{second}"
        f"  {j.username} also needs a client certificate from the newsroom's CA, issued for this name:\n"
        f"    {_cert_issue_line(instance.data_dir, j.username)}"
    ))
    return 0


def _cert_issue_line(data_dir: str, name: str) -> str:
    if os.path.exists(os.path.join(data_dir, "ca", "ca.key")) or os.path.exists(os.path.join(data_dir, "ca", "ca.pem")):
        return f"deaddrop-admin cert issue {name} --data-dir {data_dir} --out {name}.p12"
    return f"deaddrop-admin cert issue {name} --ca-dir CA_DIR --out {name}.p12   (on the offline CA machine)"


def _list_impl(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    accounts = [Journalist.from_row(r) for r in instance.run(jq.list_journalists)]
    lines = [f"{j.username:<24} {'admin' if j.is_admin else 'journalist':<10} last login {_iso(j.last_login_at) or 'never'}"
             for j in accounts]
    out.result({"journalists": [_account_json(j) for j in accounts]},
               "\n".join(lines) if lines else "no journalists yet: add one with 'deaddrop-admin journalist add NAME'")
    return 0


def _delete_impl(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    j = instance.journalist(args.name)
    instance.run(jq.delete_journalist, j.id)
    instance.events.emit("admin.journalist.deleted", target=j.username)
    out.result({"deleted": j.username, "uuid": j.uuid}, f"deleted journalist {j.username}")
    return 0


def _reset_2fa_impl(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    j = instance.journalist(args.name)
    secret = new_totp_secret()
    had_keys = bool(instance.run(fq.key_count, j.id))
    if args.hotp_secret is not None:
        instance.run(fq.reset_to_hotp, j.id, secret, args.hotp_secret.hex())
    else:
        instance.run(fq.reset_to_totp, j.id, secret)
    instance.run(policy.grant_grace, j.id, time.time())  # if keys are required: time to enrol one
    instance.events.emit("admin.journalist.2fa_reset", target=j.username)
    if had_keys:
        instance.events.emit("admin.journalist.keys_reset", target=j.username)
    if args.hotp_secret is not None:
        out.result({"username": j.username, "second_factor": "hotp"}, (
            f"{j.username} now logs in with the YubiKey programmed with that HOTP secret "
            f"(their sessions and API tokens have ended{'; their security keys are forgotten' if had_keys else ''})"))
        return 0
    uri = totp_uri(secret, j.username, instance.issuer())
    out.result({"username": j.username, "totp_secret": secret, "totp_uri": uri}, (
        f"new two-factor secret for {j.username} (their sessions and API tokens have ended)\n"
        f"  two-factor secret: {secret}\n  otpauth URI:       {uri}\n"
        f"  or scan this with an authenticator app:\n{_qr(uri)}"
    ))
    return 0


def _reset_password_impl(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    j = instance.journalist(args.name)
    passphrase = generate_passphrase()
    instance.run(jq.set_password_hash, j.id, hash_passphrase(passphrase, args.kdf_cost), time.time())
    instance.events.emit("admin.journalist.password_reset", target=j.username)
    out.result({"username": j.username, "passphrase": passphrase}, (
        f"new passphrase for {j.username} (their sessions and API tokens have ended; shown once):\n"
        f"  passphrase: {passphrase}"
    ))
    return 0


def _notify_impl(instance: _Instance, args: argparse.Namespace, out: Output) -> int:
    from deaddrop.digest import mail
    from deaddrop.digest.smtp import valid_address
    from deaddrop.store import digest_queries as dq

    j = instance.journalist(args.name)
    if args.off:
        if args.email or args.key:
            raise AdminError("--off takes neither --email nor --key")
        removed = instance.run(dq.unregister, j.id)
        if removed:
            instance.events.emit("admin.journalist.notify_off", target=j.username)
        out.result({"username": j.username, "notify": False},
                   f"{j.username} gets no digest mail any more" if removed else f"{j.username} got no digest mail")
        return 0
    if not args.email or not args.key:
        raise AdminError("give --email ADDRESS and --key KEY.asc (or --off)")
    if not valid_address(args.email):
        raise AdminError(f"--email {args.email!r} is not a plain address like alice@example.org")
    try:
        with open(args.key, "rb") as f:
            armored = f.read(mail.MAX_KEY_BYTES + 1).decode("utf-8", "replace")
    except OSError as e:
        raise AdminError(f"--key {args.key}: {e.strerror}") from None
    try:
        fingerprint = mail.check_key(armored)
    except mail.KeyProblem as e:
        raise AdminError(f"--key {args.key}: {e}") from None
    instance.run(dq.register, j.id, args.email, armored, fingerprint)
    instance.events.emit("admin.journalist.notify_on", target=j.username, fingerprint=fingerprint)
    out.result({"username": j.username, "notify": True, "email": args.email, "fingerprint": fingerprint}, (
        f"{j.username} gets the encrypted digest at {args.email}\n"
        f"  encrypted to {' '.join(fingerprint[i:i + 4] for i in range(0, len(fingerprint), 4))}: "
        f"check this fingerprint with {j.username}\n"
        "  (mails go out while the server runs with --smtp-server and --smtp-from; see deaddrop-admin status)"
    ))
    return 0


_add = _with_instance(_add_impl)
_list = _with_instance(_list_impl)
_delete = _with_instance(_delete_impl)
_reset_2fa = _with_instance(_reset_2fa_impl)
_reset_password = _with_instance(_reset_password_impl)
_notify = _with_instance(_notify_impl)
