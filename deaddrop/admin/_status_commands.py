"""``deaddrop-admin status``: is the server running, its onion and Tor, counts, disk, keys, certs.

Read-only. Whether the server runs comes from the kernel's lock table (the server holds an
exclusive lock on ``DATA/server.lock`` for its lifetime; reading ``/proc/locks`` never takes it,
so a status call cannot make a starting server fail); what it runs with comes from the file it
keeps up to date (``DATA/status.json``, see ``deaddrop.store.runtime_status``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from typing import Any

from deaddrop.admin import _file_checks, _tor_commands
from deaddrop.admin._atime_check import access_time_check
from deaddrop.admin._process_privacy import process_privacy
from deaddrop.admin._datadir import initialised_data_dir
from deaddrop.admin._output import Output
from deaddrop.admission.disk_space import DiskReserve, DiskSpace
from deaddrop.transport.certificates import (
    CERT_EXPIRY_WARNING, STATE_FILE, certificate_expiry, crl_expires_soon, crl_next_update, read_issued_list,
)
from deaddrop.store.runtime_status import status_path
from deaddrop.store import migrations
from deaddrop.submission_key import replacements

# Certificates within CERT_EXPIRY_WARNING of their end are listed; the CRL within CRL_WARNING (a CRL
# lives 30 days and is refreshed monthly: its last week), as the server's crl.expires_soon event does.


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "status", parents=[common_parent],
        help="is the server running; onion and Tor; counts; free disk; submission key; CRL and certificate expiry; "
        "modes and owners of every private path")
    p.set_defaults(func=_status)


# -- the parts -------------------------------------------------------------------------------------


def _lock_holder(data_dir: str) -> int | None:
    """The pid holding ``DATA/server.lock`` (the running server), from the kernel's lock table."""
    path = os.path.join(data_dir, "server.lock")
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            table = f.read().splitlines()
    except OSError:
        return None
    holders = []
    for line in table:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:131 0 EOF" (blocked waiters carry "->")
        if "->" in fields or len(fields) < 6:
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
        except ValueError:
            continue
        if int(inode) == st.st_ino and os.makedev(int(major, 16), int(minor, 16)) == st.st_dev:
            return pid
        holders.append(pid)
    # On overlayfs (a container's root file system) the table names the device and inode of the
    # layer the file is on, not the ones stat sees: then the holder is the one with the file open.
    return next((pid for pid in holders if _has_open(pid, path)), None)


def _has_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (readable for our own processes, and root's)."""
    folder = f"/proc/{pid}/fd"
    try:
        descriptors = os.listdir(folder)
    except OSError:
        return False
    wanted = os.path.realpath(path)
    for fd in descriptors:
        try:
            if os.readlink(os.path.join(folder, fd)) == wanted:
                return True
        except OSError:
            continue
    return False


def server_status(data_dir: str, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    pid = _lock_holder(data_dir)
    reported: dict[str, Any] = {}
    if pid is not None:
        try:
            with open(status_path(data_dir)) as f:
                reported = json.load(f)
        except (OSError, ValueError):
            reported = {}
        if reported.get("pid") != pid:
            reported = {}  # still starting, or a stale file from an earlier run
    started = reported.get("started_at")
    return {
        "running": pid is not None,
        "pid": pid,
        "version": reported.get("version"),
        "started_at": _iso(started) if started else None,
        "uptime_seconds": int(now - started) if started else None,
        "reported": reported,
    }


def counts(data_dir: str) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{os.path.join(data_dir, 'db.sqlite')}?mode=ro", uri=True, timeout=10.0)
    try:
        one = lambda sql: int(conn.execute(sql).fetchone()[0])  # noqa: E731
        return {
            # As journalists see them: a source that never submitted anything is not listed.
            "sources": one("SELECT COUNT(*) FROM sources WHERE pending = 0"),
            "unread_submissions": one("SELECT COUNT(*) FROM submissions WHERE seen = 0"),
            "journalists": one("SELECT COUNT(*) FROM journalists"),
            "schema_version": migrations.schema_version(conn) or 0,
        }
    finally:
        conn.close()


def desks(data_dir: str) -> list[dict[str, Any]]:
    """Each desk: its name, key fingerprint, members and sources (issue 29)."""
    conn = sqlite3.connect(f"file:{os.path.join(data_dir, 'db.sqlite')}?mode=ro", uri=True, timeout=10.0)
    try:
        return [{"name": r[0], "fingerprint": r[1], "default": bool(r[2]), "members": r[3], "sources": r[4]}
                for r in conn.execute(
                    "SELECT d.name, d.key_fingerprint, d.is_default,"
                    " (SELECT COUNT(*) FROM desk_members m WHERE m.desk_id = d.id),"
                    " (SELECT COUNT(*) FROM source_desks s WHERE s.desk_id = d.id)"
                    " FROM desks d ORDER BY d.is_default DESC, d.name")]
    finally:
        conn.close()


def _digest_recipients(data_dir: str) -> int:
    conn = sqlite3.connect(f"file:{os.path.join(data_dir, 'db.sqlite')}?mode=ro", uri=True, timeout=10.0)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM digest_recipients").fetchone()[0])
    finally:
        conn.close()


def disk(data_dir: str) -> dict[str, int]:
    usage = shutil.disk_usage(data_dir)
    return {"free_bytes": usage.free, "total_bytes": usage.total}


def upload_room(data_dir: str, reported: dict[str, Any]) -> dict[str, Any] | None:
    """The largest upload the disk takes above ``--disk-reserve`` (and the room kept for text),
    with no upload in flight, beside the instance's largest; None if the server does not say."""
    uploads = reported.get("uploads")
    if not isinstance(uploads, dict) or not uploads.get("allow_uploads"):
        return None
    try:
        reserve = DiskReserve.parse(uploads["disk_reserve"])
        largest = int(uploads["max_upload_size"])
    except (KeyError, TypeError, ValueError):
        return None
    return {"largest_that_fits": DiskSpace(data_dir, reserve).largest_upload_alone(), "max_upload_size": largest}


def _upload_room_check(room: dict[str, Any]) -> dict[str, Any]:
    """Failing while an upload of the instance's largest size would be refused for room: then
    whether an upload near the edge is taken tells anyone online whether other sources are
    uploading at that moment (docs/threat-model.md, "Shared stores")."""
    fits, largest = room["largest_that_fits"], room["max_upload_size"]
    if fits >= largest:
        return {"name": "upload_room", "ok": True, "detail": f"uploads of {_mb(largest)} fit above --disk-reserve"}
    return {"name": "upload_room", "ok": False, "detail": (
        f"only {_mb(fits)} fit above --disk-reserve, less than the largest upload ({_mb(largest)}): larger "
        "uploads are refused, and whether one near that size is taken tells a prober whether other sources are "
        "uploading (docs/threat-model.md, \"Shared stores\"); free space, enlarge the disk, or lower the largest "
        "upload or --disk-reserve")}


def key_fingerprint(armored_path: str) -> str | None:
    """The primary key fingerprint of an armored public key file (no keyring touched)."""
    if not os.path.isfile(armored_path):
        return None
    home = tempfile.mkdtemp(prefix="dd-st-", dir="/tmp")
    try:
        proc = subprocess.run(["gpg", "--homedir", home, "--batch", "--with-colons", "--show-keys", armored_path],
                              capture_output=True)
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if fields[0] == "fpr":
            return fields[9]
    return None


def certificates(data_dir: str, reported: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """The CRL's expiry and every certificate expiring within ``CERT_EXPIRY_WARNING``: the server's
    TLS certificate, the CA, and (with a CA in the data dir) issued client certificates."""
    ca = reported.get("journalist_ca") or _existing(os.path.join(data_dir, "ca", "ca.pem"))
    crl = reported.get("journalist_crl") or _existing(os.path.join(data_dir, "ca", "crl.pem"))
    server_cert = reported.get("journalist_tls_cert") or _existing(os.path.join(data_dir, "tls", "server.pem"))
    horizon = now + CERT_EXPIRY_WARNING
    result: dict[str, Any] = {"crl": None, "server_certificate": None, "expiring_certificates": [], "problems": []}
    if crl and os.path.isfile(crl):
        try:
            next_update = crl_next_update(crl)
            days_left = (next_update - now).days if next_update else None
            result["crl"] = {"path": crl, "next_update": _iso(next_update.timestamp()) if next_update else None,
                             "days_left": days_left, "expired": bool(next_update and next_update <= now),
                             "expires_soon": bool(next_update and crl_expires_soon(next_update, now))}
        except (OSError, ValueError) as e:
            result["problems"].append(f"cannot read the CRL {crl}: {e}")
    for label, path in (("server TLS certificate", server_cert), ("journalist CA", ca)):
        if path and os.path.isfile(path):
            try:
                expiry = certificate_expiry(path)
            except (OSError, ValueError) as e:
                result["problems"].append(f"cannot read the {label} {path}: {e}")
                continue
            if path == server_cert:
                result["server_certificate"] = {"path": path, "expires": _iso(expiry.timestamp()),
                                                "days_left": (expiry - now).days, "expired": expiry <= now,
                                                "expires_soon": expiry <= horizon}
            if expiry <= horizon:
                result["expiring_certificates"].append({"what": label, "path": path, "expires": _iso(expiry.timestamp())})
    result["expiring_certificates"] += _issued_expiring(os.path.join(data_dir, "ca"), now, horizon)
    return result


def _issued_expiring(ca_dir: str, now: datetime.datetime, horizon: datetime.datetime) -> list[dict[str, Any]]:
    found = []
    for entry in read_issued_list(os.path.join(ca_dir, STATE_FILE)) or []:
        try:
            expiry = datetime.datetime.fromisoformat(entry["not_after"])
        except (KeyError, TypeError, ValueError):
            continue
        if not entry.get("revoked") and now < expiry <= horizon:
            found.append({"what": f"client certificate {entry.get('name')}", "serial": entry.get("serial"),
                          "expires": _iso(expiry.timestamp())})
    return found


def _existing(path: str) -> str | None:
    return path if os.path.exists(path) else None


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# -- the command -----------------------------------------------------------------------------------


def instance_status(data_dir: str) -> dict[str, Any]:
    now = time.time()
    server = server_status(data_dir, now)
    reported = server.pop("reported")
    owner = _file_checks.expected_owner(data_dir, server["pid"])
    status = _tor_commands.tor_status(data_dir, owner)
    status["checks"][:0] = _file_checks.private_path_checks(data_dir, owner, reported.get("journalist_tls_key"))
    atime = access_time_check(data_dir)
    if atime is not None:
        status["checks"].append(atime)
    if server["running"] and reported.get("source_onion"):
        status["source_onion"] = reported["source_onion"]  # as published by the running server
    status["tor_state"] = reported.get("tor_state") if server["running"] else "not running"
    status["tor_mode"] = reported.get("tor_mode")
    status["server"] = server
    status["counts"] = counts(data_dir)
    status["desks"] = desks(data_dir)
    status["disk"] = disk(data_dir)
    status["processes"] = process_privacy()
    status["upload_room"] = upload_room(data_dir, reported) if server["running"] else None
    if status["upload_room"] is not None:
        status["checks"].append(_upload_room_check(status["upload_room"]))
    status["submission_key_fingerprint"] = reported.get("submission_key_fingerprint") or key_fingerprint(
        os.path.join(data_dir, "submission-key.asc"))
    try:
        status["submission_key_replacements"] = replacements(data_dir)
    except ValueError as e:
        status["submission_key_replacements"] = []
        status["checks"].append({"name": "submission_key_replacements", "ok": False, "detail": str(e)})
    certs = certificates(data_dir, reported, datetime.datetime.fromtimestamp(now, datetime.timezone.utc))
    status["crl"] = certs["crl"]
    status["expiring_certificates"] = certs["expiring_certificates"]
    for problem in certs["problems"]:
        status["checks"].append({"name": "certificates", "ok": False, "detail": problem})
    status["digest"] = dict(reported.get("digest") or {"enabled": False}, running=server["running"],
                            recipients=_digest_recipients(data_dir))
    for name, failure in status["digest"].get("failing", {}).items():
        status["checks"].append({"name": "digest", "ok": False, "detail": (
            f"the digest mail to {name} is failing ({failure.get('reason')}) since {failure.get('since')}; see "
            "digest.send_failed in the security log")})
    smtp_check = status["digest"].get("smtp_check") if server["running"] else None
    if smtp_check and not smtp_check.get("ok"):
        status["checks"].append({"name": "digest_smtp", "ok": False, "detail": (
            f"the mail server check at start-up failed ({smtp_check.get('reason')}): {smtp_check.get('detail')}; "
            "fix the --smtp-* options and restart (deaddrop-admin digest test NAME tries a send)")})
    crl = certs["crl"]
    if crl and crl["expires_soon"]:
        when = "expired at" if crl["expired"] else "expires at"
        status["checks"].append({"name": "crl", "ok": False, "detail": f"the CRL {when} {crl['next_update']}: issue a "
                                 "new one (deaddrop-admin crl) and copy it to the server, or journalists cannot connect"})
    server_cert = certs["server_certificate"]
    status["server_certificate"] = server_cert
    if server_cert and server_cert["expires_soon"]:
        when = "expired at" if server_cert["expired"] else "expires at"
        status["checks"].append({"name": "server_certificate", "ok": False, "detail": (
            f"the journalist listener's certificate {server_cert['path']} {when} {server_cert['expires']}: issue a "
            "new one (deaddrop-admin cert server) and copy it over it, or journalists' browsers refuse the server")})
    return status


def _gib(n: int) -> str:
    return f"{n / 1024 ** 3:.1f} GiB"


def _mb(n: int) -> str:
    return f"{n / 10 ** 6:,.0f} MB"


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    return (f"{days} d " if days else "") + f"{hours} h {rest // 60} min"


def format_status(status: dict[str, Any]) -> str:
    server = status["server"]
    if server["running"]:
        version = server["version"] or "?"
        up = f", up {_duration(server['uptime_seconds'])}" if server["uptime_seconds"] is not None else ""
        running = f"running (pid {server['pid']}, version {version}{up})"
    else:
        running = "not running"
    c = status["counts"]
    crl = status["crl"]
    lines = [
        f"Server:           {running}",
        "Tor:              " + ("not used (--tor none)" if status.get("tor_mode") == "none" else
                                 f"{status['tor_state'] or '?'}" + (f" ({status['tor_mode']})" if status.get("tor_mode") else "")),
        f"Sources:          {c['sources']}",
        f"Unread:           {c['unread_submissions']} submission(s)",
        f"Journalists:      {c['journalists']}",
        f"Free disk:        {_gib(status['disk']['free_bytes'])} of {_gib(status['disk']['total_bytes'])}",
        *([f"Processes:        {status['processes']['detail']}"] if status.get("processes") else []),
        f"Submission key:   {status['submission_key_fingerprint'] or '(none yet)'}",
        *([f"Key replaced:     {status['submission_key_replacements'][-1]['date']}, was "
            f"{status['submission_key_replacements'][-1]['previous']} (--replace-submission-key; "
            f"{len(status['submission_key_replacements'])} time(s) in all, see the security log)"]
          if status.get("submission_key_replacements") else []),
        *(["Desks:            " + "; ".join(
            f"{d['name']}{' (default)' if d['default'] else ''}: key {d['fingerprint'] or '(none)'}, "
            f"{d['members']} member(s), {d['sources']} source(s)" for d in status["desks"])]
          if len(status.get("desks", ())) > 1 else []),
        "CRL:              " + (f"next update {crl['next_update']}" + (" (EXPIRED)" if crl["expired"] else
                                 f" (in {crl['days_left']} days)") if crl else "(none)"),
    ]
    lines.append("Digest mail:      " + _digest_line(status["digest"]))
    expiring = status["expiring_certificates"]
    lines.append("Expiring (30 d):  " + ("none" if not expiring else
                                         "; ".join(f"{e['what']} {e['expires']}" for e in expiring)))
    return "\n".join(lines) + "\n" + _tor_commands.format_tor_status(status)


def _digest_line(digest: dict[str, Any]) -> str:
    who = f"{digest['recipients']} journalist(s) registered"
    if not digest["running"]:
        return f"server not running; {who}"
    if not digest.get("enabled"):
        return f"off (no --smtp-server); {who}"
    line = f"every {digest['interval_minutes']} min via {digest['smtp_server']}; {who}"
    check = digest.get("smtp_check")
    if check is None:
        line += "; mail server check: pending"
    elif check.get("ok"):
        line += "; mail server check: ok"
    else:
        line += f"; mail server check: FAILED ({check.get('reason')})"
    if digest.get("last_slot"):
        line += f"; last round {digest['last_slot']}"
    failing = digest.get("failing") or {}
    if failing:
        line += "; FAILING for " + ", ".join(f"{name} ({f.get('reason')})" for name, f in failing.items())
    return line


def _status(args: argparse.Namespace, out: Output) -> int:
    status = instance_status(initialised_data_dir(args.data_dir))
    out.result(status, format_status(status))
    return 0 if all(c["ok"] for c in status["checks"]) else 1
