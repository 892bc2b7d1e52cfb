"""The apt repositories the guide's machines install from, served on 127.0.0.1 over HTTP.

``/deaddrop``: DeadDrop's packages, built from this checkout by ``scripts/build-deb`` (or taken
from ``--debs``) and published by ``scripts/publish-apt`` with a throwaway release key: the
guide's own apt commands trust it by its key and install from it, as from the project's.

``/debian``: the stand-in for Debian's mirror (there is no Internet here). A Debian package the
guide names that this machine has installed stays as it is in each machine (an overlay of this
machine's root); one it lacks (wireguard, nftables, unattended-upgrades) is an empty package of
that name, so that ``apt-get install`` installs it and a step needing its programs is stood in.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import re
import subprocess
import threading
from pathlib import Path

from installcheck.steps import StepFailed, say

DEADDROP_PACKAGES = ("deaddrop", "deaddrop-common", "deaddrop-svs", "deaddrop-journalist")
# What the empty stand-in packages hold: the folders the real ones make and the guide uses.
STAND_IN_FOLDERS = {"wireguard": ["etc/wireguard"]}


def debian_packages_named(guide: str) -> set[str]:
    """The packages of Debian (not DeadDrop's, not files) the guide's ``apt-get install`` lines name."""
    names = set()
    for line in re.findall(r"apt-get install -y ([^\n&|;]+)", guide):
        names.update(w for w in line.split() if not w.startswith(("/", "-", ".", "deaddrop")))
    return names


def installed_here(package: str) -> bool:
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True).stdout
    return "install ok installed" in status


def in_debian(package: str) -> bool:
    """Whether Debian has ``package`` (this machine's package lists say): a misspelt name gets no
    stand-in, and apt-get fails on it as it would with Debian's mirror. Without package lists here
    (no apt-get update yet) there is nothing to check the name against: it gets one."""
    if not any(Path("/var/lib/apt/lists").glob("*_Packages*")):
        return True
    return subprocess.run(["apt-cache", "show", "--no-all-versions", package], capture_output=True).returncode == 0


def build_stand_in_mirror(folder: Path, packages: set[str]) -> list[str]:
    """Empty packages for the Debian packages this machine lacks, with an (unsigned) index: the
    machines trust this stand-in as they trust Debian's signed mirror. Returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for name in sorted(p for p in packages if not installed_here(p) and in_debian(p)):
        tree = folder / "tree" / name
        (tree / "DEBIAN").mkdir(parents=True)
        for sub in STAND_IN_FOLDERS.get(name, []):
            (tree / sub).mkdir(parents=True, mode=0o700)
        (tree / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: 0~installcheck\nArchitecture: all\nMaintainer: install-check <root@localhost>\n"
            f"Description: stand-in for Debian's {name} (scripts/install-check: no Internet)\n")
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(folder / f"{name}.deb")],
                       check=True, capture_output=True)
        made.append(name)
    packages_index = subprocess.run(["dpkg-scanpackages", "-m", "."], cwd=folder, capture_output=True, check=True).stdout
    (folder / "Packages").write_bytes(packages_index)
    digest = hashlib.sha256(packages_index).hexdigest()
    (folder / "Release").write_text(f"Origin: install-check\nLabel: stand-in for Debian\nSHA256:\n"
                                    f" {digest} {len(packages_index)} Packages\n")
    return made


def deaddrop_debs(debs: Path | None, checkout: Path, work: Path) -> list[Path]:
    """The four packages of this checkout's version: from ``debs``, or built now (a test build)."""
    if debs is None:
        debs = work / "dist"
        say(f"  building the packages (scripts/build-deb --quick) into {debs}")
        log = work / "build-deb.log"
        with open(log, "wb") as out:
            built = subprocess.run(["python3", str(checkout / "scripts" / "build-deb"), "--quick", "--out", str(debs)],
                                   stdout=out, stderr=subprocess.STDOUT)
        if built.returncode != 0:
            raise StepFailed(f"scripts/build-deb failed:\n{log.read_text(errors='replace')[-4000:]}")
    version = re.search(r'__version__ = "([^"]+)"', (checkout / "deaddrop" / "__init__.py").read_text()).group(1)
    found = sorted(debs.glob(f"*_{version}_*.deb"))
    if sorted(p.name.split("_")[0] for p in found) != sorted(DEADDROP_PACKAGES):
        raise StepFailed(f"{debs} does not hold the four packages of version {version}: {[p.name for p in found]}")
    return found


class Served:
    """A folder served on 127.0.0.1 (a port of its own), as a web server serves a repository."""

    def __init__(self, folder: Path) -> None:
        handler = functools.partial(_Quiet, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
