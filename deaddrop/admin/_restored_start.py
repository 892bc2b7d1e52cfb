"""The command that starts a restored instance, and what it inherits from the backup's moment.

The backup records the options the server ran with. For the restored copy: paths inside the old
data dir name the same files in the new one (its own CA and CRL when they live in ``DATA/ca``);
options the Config marks as for development only (``--tor none``, ``--demo``) are left out;
everything else stays, the digest's ``--smtp-*`` included. And the admin is told that accounts
and the CRL are those of the backup, with how to re-apply the current CRL.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from deaddrop.admin.restore import Manifest
from deaddrop.tap import development_options


@dataclass(frozen=True)
class RestoredStart:
    argv: list[str]
    dropped: list[str]  # development-only options the backed-up server ran with
    moved_from: str | None  # the old data dir, when options named paths inside it
    note: str  # what is as it was at the backup, and what to re-apply


def restored_start(data_dir: str, manifest: Manifest) -> RestoredStart:
    kept, dropped = development_options(manifest.start_options or ())
    old = manifest.data_dir
    moved = [_moved(word, old, data_dir) if old else word for word in kept]
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    argv = [twistd if os.path.isfile(twistd) else "twistd", "-n", "--pidfile=", "deaddrop", "--data-dir", data_dir,
            *moved]
    return RestoredStart(argv, dropped, old if moved != kept else None, _as_at_backup(data_dir, moved, manifest))


def _inside(path: str, folder: str) -> bool:
    return os.path.isabs(path) and os.path.commonpath([path, folder]) == folder


def _moved(word: str, old: str, new: str) -> str:
    """``word`` with the old data dir replaced by the new one, if it is a path inside it."""
    return os.path.join(new, os.path.relpath(word, old)) if _inside(word, old) else word


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def _as_at_backup(data_dir: str, argv: list[str], manifest: Manifest) -> str:
    when = manifest.describe()
    ca = _option(argv, "--journalist-ca")
    crl = _option(argv, "--journalist-crl")
    if ca is None and os.path.isfile(os.path.join(data_dir, "ca", "ca.pem")):
        ca, crl = os.path.join(data_dir, "ca", "ca.pem"), crl or os.path.join(data_dir, "ca", "crl.pem")
    said = f"accounts, sources and the CRL are as they were at {when}: delete again any account deleted since"
    if ca is None:
        return said.replace(" and the CRL", "") + " (this instance trusts no journalist CA yet)"
    if crl is None:
        return f"{said}; it names no CRL (--journalist-crl), so no revoked certificate is refused: give the CA's current one"
    ca_here = os.path.isfile(os.path.join(data_dir, "ca", "state.json")) and _inside(crl, data_dir)
    if ca_here:
        return (f"{said}, and revoke again any certificate revoked since: the CA in {os.path.join(data_dir, 'ca')} "
                f"is the backup's too (deaddrop-admin cert revoke NAME --data-dir {data_dir}, then "
                f"deaddrop-admin crl --data-dir {data_dir}, which rewrites {crl})")
    if _inside(crl, data_dir):
        return (f"{said}, and re-apply the current CRL: {crl} came back with the backup; copy the CA's current "
                "one over it (deaddrop-admin crl --ca-dir CA_DIR --out crl.pem on the CA's machine)")
    return (f"{said}; re-apply the current CRL: {crl} is not in the backup, make sure it is the CA's current one "
            "(deaddrop-admin crl --ca-dir CA_DIR --out crl.pem on the CA's machine)")
