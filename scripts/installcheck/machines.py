"""The guide's machines inside one scratch prefix.

Each machine's file system (/opt, /etc, /var/lib, /srv, /root, /dev/shm) is a folder of the prefix: the
server's is the prefix itself, the offline machine's PREFIX/offline, the workstation's
PREFIX/workstation (the new server reuses the server's, emptied: see steps.begin_new_server). The
USB sticks (/media/...) are the same folder for every machine, as a stick moves between them.

Each machine sees only the programs of the Debian packages its own ``apt-get install`` lines
name (of those the guide's machines differ by): a workstation whose line lacks gnupg has no gpg,
as on a fresh machine. Its PATH is a folder of links to the programs it may run, in the order of
a root shell's PATH on Debian.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

SUBFOLDER = {"server": "", "new server": "", "offline machine": "offline", "journalist workstation": "workstation"}
# Paths of the guide moved under the prefix; /media is shared by every machine.
_PATH = re.compile(r"(?<![\w.~/-])(/(?:opt|var/lib|etc|media|srv|root|dev/shm)(?:/[^\s'\"<>|;&()]*)?)")
DEBIAN_ROOT_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
# The programs of the packages a machine may or may not have installed: hidden unless it did.
PACKAGE_PROGRAMS = {
    "gnupg": re.compile(r"^(gpg(?!v$).*|dirmngr.*|kbxutil|watchgnupg)$"),
    "mat2": re.compile(r"^mat2$"),
    "bubblewrap": re.compile(r"^bwrap$"),
    "tor": re.compile(r"^tor(-.*)?$"),
    "git": re.compile(r"^git(-.*)?$"),
    "wireguard": re.compile(r"^wg(-quick)?$"),
    "nftables": re.compile(r"^nft$"),
}


def root_of(prefix: Path, machine: str, path: str) -> Path:
    """Where ``path`` of ``machine`` is: a stick is everywhere the same."""
    sub = SUBFOLDER.get(machine, "")
    return prefix / sub if sub and not path.startswith("/media") else prefix


def move_paths(prefix: Path, machine: str, text: str) -> str:
    return _PATH.sub(lambda m: str(root_of(prefix, machine, m.group(1))) + m.group(1), text)


def home_of(prefix: Path, machine: str) -> Path:
    return root_of(prefix, machine, "/root") / "root"


def program_folder(prefix: Path, machine: str, installed: set[str]) -> Path:
    """A fresh folder of links to every program on Debian's root PATH but those of the packages
    in PACKAGE_PROGRAMS that ``installed`` lacks; the machine's PATH is this folder alone."""
    folder = prefix / "programs" / (SUBFOLDER.get(machine) or "server")
    folder.mkdir(parents=True, exist_ok=True)
    for link in folder.iterdir():
        link.unlink()
    hidden = [pattern for package, pattern in PACKAGE_PROGRAMS.items() if package not in installed]
    for directory in DEBIAN_ROOT_PATH:
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if (folder / name).exists() or (folder / name).is_symlink() or any(p.match(name) for p in hidden):
                continue
            if os.path.isfile(path) and os.access(path, os.X_OK):
                (folder / name).symlink_to(path)
    return folder
