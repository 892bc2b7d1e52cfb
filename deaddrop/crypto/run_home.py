"""The GnuPG home every gpg run of the server's keyring starts in: a private folder on a tmpfs,
outside the data dir, whose keyring and secret keys are links into ``DATA/gnupg``.

gpg writes in its home at every start, not only when it changes a key: it takes a lock on the
keybox (a ``.#lk0x...`` file linked to ``pubring.kbx.lock``, both removed at exit), every three
hours after the keybox's last maintenance it copies the keybox to ``pubring.kbx.tmp`` to compact
it (renamed over the keybox, with that second in its header, when it dropped something), and the
gpg-agent it starts makes its sockets there and chmods ``private-keys-v1.d``. In ``DATA/gnupg``
each of these gave the folder (or the secret key folder) a change time, which no cut can hide, at
the second a source read a reply. Here they land on a tmpfs that no seized disk holds:

- ``pubring.kbx`` is a link to the keyring: reads find it; gpg's lock beside it is made here.
- ``pubring.kbx.tmp`` is a folder: gpg cannot open it for writing, so the compaction a read
  would start stops before it begins (silently: gpg carries on, exit status 0). Compacting
  through the link would have replaced the link with a file of its own.
- ``private-keys-v1.d`` is a link to the secret key folder: the agent reads the keys there and
  writes a new one there at a key generation; its start-up chmod still reaches that folder, so
  the agent is started when the server starts and at each key generation, never by a read.
- ``openpgp-revocs.d`` is a plain file: gpg cannot write a revocation certificate of a new key.
- the trust database, which ``--trust-model always`` never consults, is gpg's own here.

A run that writes the keyring names it (``--keyring``, see ``Keyring``): gpg then writes the
keybox itself, with its lock and backup beside it in ``DATA/gnupg``.

The folder's name is derived from the keyring's path (one per data dir; a restart after a crash
finds and replaces its own), on ``/dev/shm``: memory, gone at power-off. It must be a folder of
this user that nobody else can enter, or the server refuses to start.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile

PARENT = "/dev/shm"
KEYBOX = "pubring.kbx"
SECRET_KEYS = "private-keys-v1.d"
REVOCATIONS = "openpgp-revocs.d"
# gpg-agent's longest socket name; sun_path holds 107 bytes and a NUL.
_LONGEST_SOCKET = "S.gpg-agent.browser"


class RunHomeError(Exception):
    pass


def run_home_path(keyring_home: str) -> str:
    """Where the run home of the keyring in ``keyring_home`` is (whether or not it exists)."""
    digest = hashlib.blake2b(os.path.realpath(keyring_home).encode("utf-8", "surrogateescape"),
                             digest_size=8, person=b"dd-gpg-run-home").hexdigest()
    parent = PARENT if os.path.isdir(PARENT) else tempfile.gettempdir()
    return os.path.join(parent, f"deaddrop-gnupg-{digest}")


def prepare_run_home(keyring_home: str, agent_conf: str) -> str:
    """A fresh run home for the keyring in ``keyring_home`` (replacing one a crash left). -> its path."""
    path = run_home_path(keyring_home)
    if len(os.path.join(path, _LONGEST_SOCKET)) > 107:
        raise RunHomeError(f"the GnuPG run folder's path is too long for gpg-agent's sockets: {path}")
    remove_run_home(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:  # made again between the removal and here: not by us
        raise RunHomeError(f"{path} exists and is not a private folder of this user") from None
    home = os.path.realpath(keyring_home)
    os.symlink(os.path.join(home, KEYBOX), os.path.join(path, KEYBOX))
    os.symlink(os.path.join(home, SECRET_KEYS), os.path.join(path, SECRET_KEYS))
    os.mkdir(os.path.join(path, KEYBOX + ".tmp"), 0o500)
    os.close(os.open(os.path.join(path, REVOCATIONS), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400))
    with open(os.path.join(path, "gpg-agent.conf"), "w", encoding="ascii") as f:
        f.write(agent_conf)
    return path


def remove_run_home(path: str) -> None:
    """Stop the agent of the run home at ``path`` and remove it; nothing if there is none. Refuses
    a path that is not a private folder of this user (never follows a link there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RunHomeError(f"{path} exists and is not a private folder of this user")
    subprocess.run(["gpgconf", "--homedir", path, "--kill", "gpg-agent"],
                   stdin=subprocess.DEVNULL, capture_output=True)
    shutil.rmtree(path, ignore_errors=True)
