"""The wall around mat2: what the parsers it drives on hostile files may see, and nothing else.

mat2 hands a source's file to exiftool, poppler, GdkPixbuf, mutagen, ffmpeg...: one parser bug
and the file runs code with the operator's rights. On the SVS those rights reach the
submission key (``--home``), which must never leave the air gap; and whatever mat2 writes
beside its input leaves the station (``export`` encrypts it to a journalist). So mat2 runs in
bubblewrap (``bwrap``, Debian package bubblewrap, which mat2 recommends) with a filesystem
built from nothing:

* the system's programs and libraries (``/usr``; ``/bin``, ``/sbin``, ``/lib*`` as the links
  or folders they are here), read-only;
* of ``/etc`` and ``/var`` only what mat2's libraries read: the dynamic linker's cache, the
  file-type table mat2 chooses its parser by (without it a ``.docx`` is "not supported"),
  fonts (poppler draws PDF pages), Debian's alternatives links, the time zone;
* a private ``/tmp``, ``/proc`` and minimal ``/dev``, and the item's own RAM folder, the only
  place it can write.

Everything else is absent, not merely read-only: the SVS home, ``/root``, ``/home``,
``/media``, ``/mnt``, ``/run`` (removable media and the operator's runtime folder), the
input and output folders. Every namespace is its own (no network, no other process), no
capability, a new terminal session, an empty environment but for a few fixed variables, and
mat2 dies with us.

Where bwrap cannot run (not installed, unprivileged user namespaces off, or in a chroot), mat2 runs
in a network namespace of its own where the kernel allows one (``unshare``), and the run
says so, in bwrap's own words.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

# Programs and libraries. On merged-/usr Debian all but /usr are links into it (kept links).
SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What mat2's libraries read of the rest; nothing that identifies the station or its users.
SYSTEM_CONFIG = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/mime.types",
                 "/etc/alternatives", "/etc/fonts", "/etc/localtime", "/var/cache/fontconfig")
_NAMESPACES = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
_PROBE_TIMEOUT = 30  # seconds


def minimal_env(folder: str) -> dict[str, str]:
    """Nothing of the operator's environment: no proxy, display, session bus or home."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8",
            "HOME": folder, "TMPDIR": folder}


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def system_view() -> list[str]:
    """bwrap options building the read-only system part of the sandbox's filesystem."""
    view: list[str] = []
    for path in SYSTEM_ROOTS + SYSTEM_CONFIG:
        if os.path.islink(path):
            view += ["--symlink", os.readlink(path), path]  # a dangling link reveals nothing
        elif os.path.exists(path):
            view += ["--ro-bind", path, path]
    return view + ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]


def bwrap_binary() -> str | None:
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


def works(command: list[str]) -> bool:
    return refusal(command) is None


def refusal(command: list[str]) -> str | None:
    """None if ``command`` runs and exits 0, else why not, in one line: its own last line on
    stderr where it wrote one (bwrap names what it could not do; in a chroot, for one, user
    namespaces work but "Failed to make / slave"), whole up to 600 characters: Debian's bwrap ends
    its refusal with a link to its README, which a cut at 200 broke)."""
    try:
        probe = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=minimal_env("/"), timeout=_PROBE_TIMEOUT,
                               check=False)
    except subprocess.TimeoutExpired:
        return f"it did not answer within {_PROBE_TIMEOUT:g} s"
    except OSError as e:
        return e.strerror or str(e)
    if probe.returncode == 0:
        return None
    said = [line.strip() for line in probe.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return said[-1][:600] if said else f"it exited with status {probe.returncode}"


_isolation: list[str] | None = None


def network_isolation() -> list[str]:
    """The command prefix giving a program an empty network namespace, or ``[]`` where the
    kernel refuses one (the SVS is offline anyway; this is a second wall, not the first)."""
    global _isolation
    if _isolation is None:
        _isolation = []
        unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if unshare is not None:
            options = [[unshare, "--net"], [unshare, "--user", "--map-root-user", "--net"]]
            for prefix in options if os.geteuid() == 0 else options[1:]:
                if works(prefix + ["true"]):
                    _isolation = prefix
                    break
    return list(_isolation)


@dataclass
class Sandbox:
    """How mat2 is walled in: ``bwrap`` (the options before the item's folder) or, where that
    cannot run, the network namespace alone (``netns``); ``missing`` says why bwrap is not used."""

    bwrap: list[str] | None
    netns: list[str]
    missing: str | None = None

    def command(self, folder: str, argv: list[str]) -> list[str]:
        """``argv`` run in the sandbox, seeing ``folder`` (writable, its working folder)."""
        if self.bwrap is None:
            return self.netns + argv
        env = [arg for name, value in minimal_env(folder).items() for arg in ("--setenv", name, value)]
        # The program itself, not the link PATH found (a link outside the system folders, as in a
        # folder of links to /usr/bin, names nothing inside); one outside them (a mat2 installed
        # elsewhere) is shown, alone.
        program = os.path.realpath(argv[0])
        own = [] if _under(program, SYSTEM_ROOTS) else ["--ro-bind", program, program]
        return self.bwrap + env + own + ["--bind", folder, folder, "--chdir", folder, "--", program] + argv[1:]


_sandbox: Sandbox | None = None


def sandbox() -> Sandbox:
    """Probe once: bwrap as this user runs it (unprivileged, it needs user namespaces), with
    mat2's own bwrap (for exiftool and ffmpeg) working inside it; failing that, bwrap with the
    inner one hidden (mat2 then runs those tools directly, inside ours); failing that, the
    network namespace alone."""
    global _sandbox
    if _sandbox is None:
        found = bwrap_binary()
        walls = None
        refused = None
        if found is not None:
            # As root, bwrap makes no user namespace unless told: without one, "no capability"
            # would not hold for root's files.
            base = [found] + (["--unshare-user"] if os.geteuid() == 0 else []) + _NAMESPACES + ["--clearenv"]
            base += system_view()
            inner = [found, "--ro-bind", "/usr", "/usr", "--dev", "/dev", "--proc", "/proc", "--unshare-user-try",
                     "--unshare-pid", "--unshare-net", "--new-session", "--cap-drop", "ALL", "/usr/bin/true"]
            if works(base + ["--chdir", "/", "--"] + inner):
                walls = base
            else:
                hidden = base + ["--ro-bind", "/dev/null", found]
                refused = refusal(hidden + ["--chdir", "/", "--", "/usr/bin/true"])
                if refused is None:
                    walls = hidden
        if walls is not None:
            _sandbox = Sandbox(walls, [])
        else:
            # bwrap's own words: user namespaces turned off are one cause, not the only one.
            why = "not installed" if found is None else f"cannot run here ({refused})"
            _sandbox = Sandbox(None, network_isolation(), missing=why)
    return _sandbox
