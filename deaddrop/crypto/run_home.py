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

It is on ``/dev/shm``: memory, gone at power-off, and shared with every user of the host
(systemd's ``PrivateDevices=yes`` keeps the host's). So the run home is ``home`` inside a private
folder with a random name (``deaddrop-gnupg-<hash of the keyring's path>-<random>``, 0700): no
local user can make that folder first (a name derived from the data dir alone could be made by
anyone, and stopped the server's start), and the only entry they can stat never changes while the
server runs (the run home's own times moved at every gpg run, to the nanosecond, where anyone
could read them). A start removes the folders of its keyring a crash left (this user's, private,
with the keyring's prefix) and leaves everyone else's alone.
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
HOME = "home"  # the run home, inside its private folder
# gpg-agent's longest socket name; sun_path holds 107 bytes and a NUL.
_LONGEST_SOCKET = "S.gpg-agent.browser"


class RunHomeError(Exception):
    pass


def _prefix(keyring_home: str) -> str:
    """The start of the names of the run folders of the keyring in ``keyring_home``."""
    digest = hashlib.blake2b(os.path.realpath(keyring_home).encode("utf-8", "surrogateescape"),
                             digest_size=8, person=b"dd-gpg-run-home").hexdigest()
    return f"deaddrop-gnupg-{digest}"


def _parent() -> str:
    return PARENT if os.path.isdir(PARENT) else tempfile.gettempdir()


def prepare_run_home(keyring_home: str, agent_conf: str) -> str:
    """A fresh run home for the keyring in ``keyring_home`` (removing those a crash left). -> its path."""
    remove_left_behind(keyring_home)
    folder = tempfile.mkdtemp(prefix=_prefix(keyring_home) + "-", dir=_parent())  # 0700, a name nobody chose
    path = os.path.join(folder, HOME)
    if len(os.path.join(path, _LONGEST_SOCKET)) > 107:
        os.rmdir(folder)
        raise RunHomeError(f"the GnuPG run folder's path is too long for gpg-agent's sockets: {path}")
    os.mkdir(path, 0o700)
    home = os.path.realpath(keyring_home)
    os.symlink(os.path.join(home, KEYBOX), os.path.join(path, KEYBOX))
    os.symlink(os.path.join(home, SECRET_KEYS), os.path.join(path, SECRET_KEYS))
    os.mkdir(os.path.join(path, KEYBOX + ".tmp"), 0o500)
    os.close(os.open(os.path.join(path, REVOCATIONS), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400))
    with open(os.path.join(path, "gpg-agent.conf"), "w", encoding="ascii") as f:
        f.write(agent_conf)
    return path


def remove_left_behind(keyring_home: str) -> None:
    """Remove every run folder of the keyring in ``keyring_home`` (what a crash left, and the one
    name an older version used), stopping its agent: only folders of this user that nobody else
    can enter; anything else with such a name (anyone may make one) is left alone."""
    prefix = _prefix(keyring_home)
    parent = _parent()
    for name in os.listdir(parent):
        if name == prefix or name.startswith(prefix + "-"):
            folder = os.path.join(parent, name)
            if _ours(folder):
                _remove(folder)


def remove_run_home(path: str) -> None:
    """Stop the agent of the run home at ``path`` (``prepare_run_home``'s) and remove its folder;
    nothing if there is none, or if it is not this user's private folder (never follows a link)."""
    folder = os.path.dirname(path)
    if os.path.basename(path) == HOME and _ours(folder):
        _remove(folder)


def _ours(folder: str) -> bool:
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _remove(folder: str) -> None:
    for home in (os.path.join(folder, HOME), folder):  # (an older version ran gpg in the folder itself)
        if os.path.isdir(home):
            subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"],
                           stdin=subprocess.DEVNULL, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)
