"""``deaddrop-journalist reply``: encrypt on the workstation, send only ciphertext."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread

from deaddrop.workstation.api import ApiError, JournalistApi


class ReplyError(Exception):
    pass


GPG_TOOLS = ("gpg", "gpgconf")  # encrypt; stop the throwaway home's agent (both in Debian's gnupg)


def require_gpg(path: str | None = None) -> None:
    """Before anything is asked or sent: the reply is encrypted here, by GnuPG. ``path``: the
    folders to look in (default ``$PATH``)."""
    missing = [tool for tool in GPG_TOOLS if shutil.which(tool, path=path) is None]
    if missing:
        raise ReplyError(f"{' and '.join(missing)} not found: a reply is encrypted on this workstation with "
                         "GnuPG; install it (on Debian or Ubuntu: sudo apt install gnupg), then send it again")


def encrypt_armored(plaintext: bytes, public_keys: list[str], gpg_binary: str = "gpg") -> str:
    """Encrypt to each armored public key with a throwaway GnuPG home (nothing imported)."""
    home = tempfile.mkdtemp(prefix="dd-reply-")
    try:
        argv = [gpg_binary, "--homedir", home, "--batch", "--no-tty", "--quiet", "--armor",
                "--trust-model", "always", "--encrypt"]
        for i, key in enumerate(public_keys):
            path = os.path.join(home, f"recipient-{i}.asc")
            with open(path, "w") as f:
                f.write(key)
            argv[-1:-1] = ["--recipient-file", path]
        proc = subprocess.run(argv, input=plaintext, capture_output=True)
        if proc.returncode != 0:
            raise ReplyError("gpg could not encrypt the reply: " + proc.stderr.decode("utf-8", "replace").strip()[-300:])
        return proc.stdout.decode("ascii")
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


@inlineCallbacks
def find_source(api: JournalistApi, designation: str):
    wanted = " ".join(designation.replace("_", " ").lower().split())
    listing = yield api.get_json("/sources")
    for source in listing.get("sources", []):
        if source["journalist_designation"].lower() == wanted:
            return source
    raise ReplyError(f"no source called {designation!r}")


@inlineCallbacks
def reply_keys(api: JournalistApi, source_uuid: str):
    """The keys of the source's desks this journalist is on (issue 29): the desks that list the
    reply read it on their SVS. A server from before desks has no such endpoint: its one key,
    the instance's submission key (``/instance``), is every desk's."""
    try:
        found = yield api.get_json(f"/sources/{source_uuid}/reply_keys")
    except ApiError as e:
        if e.status != 404:
            raise
        instance = yield api.get_json("/instance")
        return [instance["submission_key"]["public"]]
    return [d["public"] for d in found.get("desk_keys", []) if d.get("public")]


@inlineCallbacks
def send_reply(api: JournalistApi, designation: str, message: str):
    if not message.strip():
        raise ReplyError("the reply is empty")
    source = yield find_source(api, designation)
    source_key = (source.get("key") or {}).get("public") or source.get("public_key")
    if not source_key:
        raise ReplyError(f"{designation}: this source has no key yet; try again after their next visit")
    desk_keys = yield reply_keys(api, source["uuid"])
    armored = yield deferToThread(encrypt_armored, message.encode("utf-8"), [source_key, *desk_keys])
    reply_uuid = str(uuid.uuid4())
    result = yield api.request_json("POST", f"/sources/{source['uuid']}/replies", {"reply": armored, "uuid": reply_uuid})
    return result
