"""The guide's machines, each a throwaway root of its own (tests/_throwaway_root.py: an overlay of
this machine's root, written only in RAM): the server, the offline machine, the journalist
workstation and the new server of the restore. The USB sticks (/media/keys, /media/tls,
/media/transfer, /media/export) are folders of this machine bound into every one of them, as a
stick moves between machines.

Each starts as a fresh Debian 12 without Internet access: no package lists, Debian's sources
replaced by the stand-in mirror's (repository.py), an empty /root. Each sees only the programs of
the Debian packages its own ``apt-get install`` lines installed, with their dependencies, of those
the guide's machines differ by (PACKAGE_PROGRAMS: this machine has them all installed): a
workstation that installed no gnupg has no gpg, as on a fresh machine. Its PATH is a folder of
links to the programs it may run, in the order of a root shell's PATH on Debian.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests._throwaway_root import ThrowawayRoot

DEBIAN_ROOT_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
PROGRAMS = "/run/installcheck/programs"  # inside each machine
# The programs of the packages a machine may or may not have installed: hidden unless it did.
PACKAGE_PROGRAMS = {
    "gnupg": re.compile(r"^(gpg(?!v$).*|dirmngr.*|kbxutil|watchgnupg)$"),
    "gpg": re.compile(r"^gpg$"),
    "mat2": re.compile(r"^mat2$"),
    "bubblewrap": re.compile(r"^bwrap$"),
    "tor": re.compile(r"^tor(-.*)?$"),
    "git": re.compile(r"^git(-.*)?$"),
}


class Machine:
    def __init__(self, name: str, folder: Path, sticks: dict[str, Path], mirror: str) -> None:
        self.name = name
        self.root = ThrowawayRoot(str(folder), binds={f"/media/{s}": str(p) for s, p in sticks.items()}).start()
        self.packages: set[str] = set()  # what its apt-get lines installed, and their dependencies
        # An empty /root, but for a Python installed there (pyenv's), which this machine's tools may run on.
        self.root.run(["sh", "-c", "rm -rf /etc/apt/sources.list /etc/apt/sources.list.d/* /etc/apt/preferences.d/* "
                                   "/var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial && "
                                   "find /root -mindepth 1 -maxdepth 1 ! -name .pyenv -exec rm -rf {} +"])
        self.root.path("/etc/apt/sources.list.d/debian.list").write_text(
            f"# install-check's stand-in for Debian's mirror (no Internet here)\ndeb [trusted=yes] {mirror}/debian ./\n")
        self.refresh_programs()

    def path(self, inside: str) -> Path:
        return self.root.path(inside)

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return self.root.run(argv, **kw)

    def installed(self, names: list[str]) -> None:
        """The guide installed ``names`` here: they and their dependencies may now run."""
        found = self.run(["apt-cache", "depends", "--recurse", "--installed", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *names], check=False)
        self.packages.update(names)
        self.packages.update(line.strip() for line in found.stdout.splitlines() if line and not line[0].isspace())
        self.refresh_programs()

    def version(self, package: str) -> str | None:
        proc = self.run(["dpkg-query", "-W", "-f=${Status} ${Version}", package], check=False)
        return proc.stdout.split()[-1] if proc.stdout.startswith("install ok installed") else None

    def refresh_programs(self) -> None:
        """A fresh folder of links to every program on Debian's root PATH but those of the packages
        in PACKAGE_PROGRAMS this machine did not install."""
        folder = self.path(PROGRAMS)
        folder.mkdir(parents=True, exist_ok=True)
        for link in folder.iterdir():
            link.unlink()
        hidden = [pattern for package, pattern in PACKAGE_PROGRAMS.items() if package not in self.packages]
        for directory in DEBIAN_ROOT_PATH:
            seen = self.path(directory)
            if not seen.is_dir() or seen.is_symlink():  # /bin -> usr/bin: the same programs
                continue
            for name in sorted(os.listdir(seen)):
                program = seen / name
                if (folder / name).is_symlink() or any(p.match(name) for p in hidden):
                    continue
                if program.is_file() and os.access(program, os.X_OK):
                    (folder / name).symlink_to(f"{directory}/{name}")

    def stop(self) -> None:
        self.root.stop()
