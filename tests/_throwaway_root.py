"""A throwaway copy of this machine, for tests that install packages as an admin would.

An overlay mount (this machine's root file system read-only below, a tmpfs above) in a mount
namespace of its own, held open by one ``unshare`` process; each command runs in it through
``nsenter`` and ``chroot``. apt, dpkg, new users, /etc and /var/lib change only the tmpfs, which
goes when the namespace does: the machine running the test is left as it was, so the test is as
safe on a developer's machine as on CI's. The network is the machine's (a server started in it
listens on the machine's 127.0.0.1).

Needs root, overlayfs and util-linux's ``unshare`` and ``nsenter`` (both in Debian's base
system); ``unavailable()`` says what is missing.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

# Runs in the new mount namespace: mount the overlay and what a chroot needs (a /dev/shm of its
# own: RAM folders are the machine's, not this one's), bind the folders shared with this machine
# (INSIDE OUTSIDE pairs), say so, then wait for stdin to close (the test ending, or dying) to let
# the namespace go.
_HOLD = r"""
set -e
top="$1"
mount -t tmpfs -o mode=0755 throwaway "$top/upper"
mkdir "$top/upper/u" "$top/upper/w"
mount -t overlay throwaway -o "lowerdir=/,upperdir=$top/upper/u,workdir=$top/upper/w" "$top/root"
mount -t proc proc "$top/root/proc"
mount --rbind /sys "$top/root/sys"
mount --rbind /dev "$top/root/dev"
mount -t tmpfs -o mode=0755 run "$top/root/run"
mount -t tmpfs -o mode=1777 shm "$top/root/dev/shm"
shift
while [ "$#" -gt 1 ]; do
    mkdir -p "$top/root$1"
    mount --bind "$2" "$top/root$1"
    shift 2
done
echo ready
read _ || true
"""


class ThrowawayRoot:
    def __init__(self, base: str, binds: dict[str, str] | None = None) -> None:
        """``binds``: folders of this machine seen inside, as {path inside: path here} (a USB
        stick plugged into several machines)."""
        self.top = Path(base)
        self.binds = dict(binds or {})
        (self.top / "upper").mkdir(parents=True)
        (self.top / "root").mkdir()
        self._holder: subprocess.Popen | None = None
        self._started: list[subprocess.Popen] = []

    @staticmethod
    def unavailable() -> str | None:
        """None if one can be made here, else why not (for SkipTest)."""
        if os.geteuid() != 0:
            return "needs root (CI runs as root): it mounts an overlay of the machine's root file system"
        for tool in ("unshare", "nsenter", "chroot"):
            if shutil.which(tool) is None:
                return f"{tool} is missing (util-linux, coreutils)"
        with open("/proc/filesystems") as f:
            if "overlay" not in f.read():
                return "the kernel offers no overlay file system (modprobe overlay)"
        return None

    def start(self) -> "ThrowawayRoot":
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HOLD, "sh", str(self.top),
             *[part for inside, outside in self.binds.items() for part in (inside, outside)]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self._holder.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the throwaway root did not mount: {line}{self._holder.stderr.read()}")
        return self

    def _enter(self, argv: list[str]) -> list[str]:
        assert self._holder is not None, "start() first"
        # By their paths here: the caller's PATH may be one for inside.
        return [shutil.which("nsenter") or "nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "--",
                shutil.which("chroot") or "chroot", str(self.top / "root"), *argv]

    def run(self, argv: list[str], check: bool = True, timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` as root inside; its output captured as text. ``check``: fail loudly."""
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
               "DEBIAN_FRONTEND": "noninteractive", **kw.pop("env", {})}
        proc = subprocess.run(self._enter(argv), capture_output=True, text=True, env=env, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {proc.returncode} in the throwaway root:\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def popen(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        """Start ``argv`` inside, in a process group of its own (stopped by ``stop``)."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(self._enter(argv), env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._started.append(proc)
        return proc

    def path(self, inside: str) -> Path:
        """Where this machine sees the file ``inside`` (through the holder's view of its namespace)."""
        assert self._holder is not None, "start() first"
        return Path(f"/proc/{self._holder.pid}/root{self.top / 'root'}{inside}")

    def changed(self) -> Path:
        """Where this machine sees every file the throwaway root wrote (the overlay's upper layer)."""
        assert self._holder is not None, "start() first"
        return Path(f"/proc/{self._holder.pid}/root{self.top / 'upper' / 'u'}")

    @staticmethod
    def end(proc: subprocess.Popen, timeout: float = 30) -> None:
        """SIGTERM its group, then SIGKILL what is left (gpg agents, tor)."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)

    def _inside(self) -> list[int]:
        """Processes whose root is this one (daemons that left their group too, such as gpg-agent)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/root") == str(self.top / "root"):
                        found.append(int(entry))
                except OSError:
                    pass
        return found

    def stop(self) -> None:
        for proc in self._started:
            self.end(proc)
        for pid in self._inside():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._holder is not None and self._holder.poll() is None:
            self._holder.stdin.close()
            self._holder.wait(timeout=30)
        shutil.rmtree(self.top, ignore_errors=True)
