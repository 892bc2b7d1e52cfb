"""Metadata removal with mat2, run as a subprocess on a private copy kept in RAM.

mat2 cleans a *file* (it writes ``NAME.cleaned.EXT`` beside it, and some of its parsers write
temp files of their own), so it needs a copy of the plaintext on a filesystem. That copy never
goes to a disk: it lives in a private folder (0700) on a RAM-backed filesystem (tmpfs), is
named by us (``in.EXT``, never the source's name, which could be an option to mat2), and the
folder is removed after each file. mat2's own temp files go there too (``TMPDIR``).

mat2 is told nothing but the file: a minimal environment (no proxy, display or home of the
operator) and, where the kernel allows it, a network namespace of its own with no interface
but a down loopback, so it could not reach a network even on a station that has one. Where
bubblewrap (``bwrap``, Debian package bubblewrap, which mat2 recommends) works, mat2 runs in
it: the whole filesystem read-only but the item's own folder, no network, its own PID and
IPC namespaces, no capabilities. Otherwise the run says so once and mat2 runs in the network
namespace alone.

Before mat2 sees a file it would unpack as an archive (zip, docx/odt/epub..., tar), its members
are checked with Python's zipfile/tarfile (:mod:`deaddrop.svs._archives`): mat2 0.13.3, the
Debian bookworm version, joins raw member names onto its temp folder and chmods the result
(``../../x`` reached outside it; fixed in 0.13.4). That check is part of every mat2 run here,
whatever mat2's version.

mat2 picks its parser by the file's extension alone, so a JPEG named ``notes.txt`` would pass
as "harmless text" with its EXIF intact: the first bytes are checked against the extension
first (:func:`content_mismatch`).
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

from deaddrop.svs._archives import check_archive
from deaddrop.svs._errors import ItemError, SvsError
from deaddrop.svs._inputs import display
from deaddrop.svs._names import split_ext

RAM_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
MAT2_TIMEOUT = 30 * 60  # seconds; a large video takes a while, a hung mat2 must not hang us
MAX_KINDS_SHOWN = 40
COPY_CHUNK = 1024 * 1024

# First bytes -> (what the content is, the extensions mat2 would clean it as). Only formats
# whose signature is unambiguous; anything not listed is left to mat2's own parser.
_ZIP_FAMILY = {"zip", "docx", "xlsx", "pptx", "odt", "ods", "odp", "odg", "odc", "odf", "odi", "epub"}
_SIGNATURES: list[tuple[bytes, int, str, set[str]]] = [
    (b"\xff\xd8\xff", 0, "a JPEG image", {"jpg", "jpeg", "jpe", "jfif"}),
    (b"\x89PNG\r\n\x1a\n", 0, "a PNG image", {"png"}),
    (b"GIF8", 0, "a GIF image", {"gif"}),
    (b"%PDF-", 0, "a PDF document", {"pdf"}),
    (b"PK\x03\x04", 0, "a zip archive (or an office document)", _ZIP_FAMILY),
    (b"II*\x00", 0, "a TIFF image", {"tif", "tiff"}),
    (b"MM\x00*", 0, "a TIFF image", {"tif", "tiff"}),
    (b"fLaC", 0, "FLAC audio", {"flac"}),
    (b"OggS", 0, "Ogg audio", {"ogg", "oga", "opus", "spx"}),
    (b"ID3", 0, "MP3 audio", {"mp3", "mp2", "mp1", "mpga", "mpega"}),
    (b"WAVE", 8, "WAV audio", {"wav"}),
    (b"AVI ", 8, "an AVI video", {"avi"}),
    (b"ftyp", 4, "an MP4/HEIC file", {"mp4", "m4v", "mpg4", "heic"}),
]
_TEXT_EXTS = {"txt", "text", "css", "html", "htm", "shtml", "xhtml", "xht", "xhtm", "svg", "ncx"}


def content_mismatch(ext: str, head: bytes) -> str | None:
    """Why a file's first bytes say it is not what its extension claims; ``None`` if fine."""
    ext = ext.lower().lstrip(".")
    for magic, offset, what, exts in _SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            if ext not in exts:
                shown = f".{ext}" if ext else "without an extension"
                return (f"named {shown} but it is {what}: mat2 chooses how to clean by the name, "
                        "so rename it with the right extension")
            return None
    if ext in _TEXT_EXTS and b"\0" in head:
        return f"named .{ext} but holds binary data: rename it with its real extension"
    return None


# -- where the copy lives ---------------------------------------------------------------------------


def _mount_types() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount, longest mount point first."""
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 5 and right:
                    point = fields[4].replace("\\040", " ")
                    found.append((point, right.split()[0]))
    except OSError:
        return []
    return sorted(found, key=lambda m: len(m[0]), reverse=True)


def filesystem_type(path: str) -> str | None:
    real = os.path.realpath(path)
    for point, kind in _mount_types():
        if real == point or real.startswith(point.rstrip("/") + "/"):
            return kind
    return None


def ram_folder_candidates() -> list[str]:
    candidates = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        candidates.append(runtime)
    candidates += ["/dev/shm", "/run/shm"]
    return candidates


class _PrivateFolder:
    """A folder only this user can read (``folder``), removed with all it holds on ``close`` or
    on leaving a ``with`` block."""

    folder: str

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RamScratch(_PrivateFolder):
    """A private folder on a RAM-backed filesystem for one run; one sub-folder per file."""

    def __init__(self, candidates: list[str] | None = None) -> None:
        for base in candidates if candidates is not None else ram_folder_candidates():
            if not os.path.isdir(base) or filesystem_type(base) not in RAM_FILESYSTEMS:
                continue
            try:
                self.folder = tempfile.mkdtemp(prefix="deaddrop-svs-", dir=base)
            except OSError:
                continue
            os.chmod(self.folder, 0o700)
            return
        raise SvsError(
            "no RAM-backed folder (tmpfs) for mat2's working copy: plaintext must not be written to a "
            "disk for it. Mount one (e.g. /dev/shm) or set XDG_RUNTIME_DIR to one"
        )

    def room(self) -> int:
        st = os.statvfs(self.folder)
        return st.f_bavail * st.f_frsize

    def item(self) -> "ScratchItem":
        return ScratchItem(tempfile.mkdtemp(prefix="f-", dir=self.folder))


class ScratchItem(_PrivateFolder):
    """One file's private folder: the copy to clean, mat2's output and temp files. Removed on exit."""

    def __init__(self, folder: str) -> None:
        os.chmod(folder, 0o700)
        self.folder = folder

    def copy_path(self, ext: str) -> str:
        return os.path.join(self.folder, "in" + ext)

    def fill(self, ext: str, chunks: Iterator[bytes] | BinaryIO, room: int) -> str:
        """Write the copy from a stream (or chunks); never more than ``room`` bytes."""
        path = self.copy_path(ext)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        written = 0
        with os.fdopen(fd, "wb") as out:
            source = iter(lambda: chunks.read(COPY_CHUNK), b"") if hasattr(chunks, "read") else chunks
            for chunk in source:
                written += len(chunk)
                if written > room:
                    raise ItemError(f"too large for the RAM folder mat2 works in ({room // (1024 * 1024)} MiB free)")
                out.write(chunk)
        return path



# -- running mat2 -------------------------------------------------------------------------------------


def mat2_binary() -> str:
    found = shutil.which("mat2")
    if found is None:
        raise SvsError("mat2 not found: install it (Debian package mat2) to remove metadata")
    return found


def _env(scratch: str) -> dict[str, str]:
    # Nothing of the operator's environment: no proxy, display, session bus or home.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8",
            "HOME": scratch, "TMPDIR": scratch}


_isolation: list[str] | None = None


def network_isolation() -> list[str]:
    """The command prefix giving mat2 an empty network namespace, or ``[]`` where the kernel
    refuses one (the SVS is offline anyway; this is a second wall, not the first)."""
    global _isolation
    if _isolation is None:
        _isolation = []
        unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if unshare is not None:
            options = [[unshare, "--net"], [unshare, "--user", "--map-root-user", "--net"]]
            for prefix in options if os.geteuid() == 0 else options[1:]:
                if _works(prefix + ["true"]):
                    _isolation = prefix
                    break
    return list(_isolation)


def _works(command: list[str]) -> bool:
    try:
        probe = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=_env("/"), timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


# Everything read-only, then the item's folder writable on top of it (see Sandbox.prefix).
_BWRAP_WALLS = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
                "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


@dataclass
class Sandbox:
    """How mat2 is walled in: ``bwrap`` (filesystem read-only but its folder, no network) or,
    where that cannot run, the network namespace alone; ``note`` says so, once per run."""

    bwrap: list[str] | None
    netns: list[str]
    note: str | None = None

    def prefix(self, folder: str) -> list[str]:
        if self.bwrap is not None:
            return self.bwrap + ["--bind", folder, folder, "--chdir", folder, "--"]
        return list(self.netns)


_sandbox: Sandbox | None = None


def bwrap_binary() -> str | None:
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


def sandbox() -> Sandbox:
    """Probe once: bwrap as this user runs it (unprivileged, it needs user namespaces), with
    mat2's own bwrap (for exiftool and ffmpeg) working inside it; failing that, bwrap with the
    inner one hidden (mat2 then runs those tools directly, inside ours); failing that, the
    network namespace alone."""
    global _sandbox
    if _sandbox is None:
        found = bwrap_binary()
        walls = None
        if found is not None:
            base = [found] + (["--unshare-user"] if os.geteuid() == 0 else []) + _BWRAP_WALLS
            inner = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-user-try",
                     "--unshare-pid", "--unshare-net", "--new-session", "--cap-drop", "ALL", "true"]
            if _works(base + ["--"] + inner):
                walls = base
            else:
                hidden = base + ["--ro-bind", "/dev/null", found]
                if _works(hidden + ["--", "true"]):
                    walls = hidden
        if walls is not None:
            _sandbox = Sandbox(walls, [])
        else:
            why = "not installed" if found is None else "cannot run here (it needs unprivileged user namespaces)"
            _sandbox = Sandbox(None, network_isolation(), note=(
                f"note: bubblewrap (bwrap) {why}: mat2 runs without a read-only filesystem; archives are "
                f"still checked member by member before mat2 sees them{_version_note()}"))
    return _sandbox


def _version_note() -> str:
    version = mat2_version()
    if version is None or version < (0, 13, 4):
        shown = ".".join(map(str, version)) if version else "of unknown version"
        return f" (this mat2, {shown}, predates 0.13.4's own check of archive member names)"
    return ""


def mat2_version() -> tuple[int, ...] | None:
    try:
        proc = subprocess.run([mat2_binary(), "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                              env=_env("/"), timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(rb"(\d+)\.(\d+)\.(\d+)", proc.stdout)
    return tuple(int(g) for g in m.groups()) if m else None


@dataclass
class Findings:
    """What ``mat2 --show`` said of one file."""

    supported: bool
    kinds: list[str] = field(default_factory=list)  # metadata field names (never their values)
    problem: str | None = None  # why mat2 cannot clean it


_UNSUPPORTED_RE = re.compile(r"format \(([^)]*)\) is not supported")
_WENT_WRONG_RE = re.compile(r"something went wrong")
_FIELD_RE = re.compile(r"^\s+([^:]{1,200}):")


def parse_show(text: str) -> Findings:
    """Parse ``mat2 --show``: field names at any depth (archive members nest), no values."""
    kinds: list[str] = []
    for line in text.splitlines():
        m = _UNSUPPORTED_RE.search(line)
        if m:
            return Findings(False, problem=f"mat2 cannot clean this type ({display(m.group(1))})")
        if line.startswith("[-]") or _WENT_WRONG_RE.search(line):
            return Findings(False, problem="mat2 cannot read it (damaged, or not what its name says)")
        m = _FIELD_RE.match(line)
        if m and not line.lstrip().startswith("No metadata found"):
            kind = display(m.group(1).strip())[:60]
            if kind not in kinds:
                kinds.append(kind)
    return Findings(True, sorted(kinds, key=str.lower))


@dataclass
class Cleaned:
    path: str  # the cleaned copy, inside the item's RAM folder
    removed: list[str]
    remaining: list[str]


class Mat2:
    def __init__(self) -> None:
        self.binary = mat2_binary()
        self.sandbox = sandbox()
        self._checked: set[tuple[str, int, int, int, int]] = set()

    def notes(self) -> list[str]:
        return [self.sandbox.note] if self.sandbox.note else []

    def _inspect(self, path: str) -> None:
        """Archive members checked (:func:`check_archive`) before mat2 sees ``path``; once per file."""
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ItemError("not a regular file in mat2's folder")
        key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in self._checked:
            check_archive(path)
            self._checked.add(key)

    def _run(self, item: ScratchItem, path: str, options: list[str]) -> subprocess.CompletedProcess:
        self._inspect(path)
        command = self.sandbox.prefix(item.folder) + [self.binary] + options + ["--", os.path.basename(path)]
        try:
            return subprocess.run(command, cwd=item.folder, env=_env(item.folder),
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=MAT2_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise ItemError(f"mat2 took longer than {MAT2_TIMEOUT // 60} minutes: not cleaned") from None

    def show(self, item: ScratchItem, path: str) -> Findings:
        proc = self._run(item, path, ["--show"])
        return parse_show(proc.stdout.decode("utf-8", "replace") + "\n" + proc.stderr.decode("utf-8", "replace"))

    def clean(self, item: ScratchItem, path: str, before: Findings) -> Cleaned:
        """Clean ``path`` (a copy in ``item``); raise ItemError if mat2 could not."""
        stem, ext = os.path.splitext(os.path.basename(path))
        proc = self._run(item, path, [])
        out = os.path.join(item.folder, f"{stem}.cleaned{ext}")
        try:
            st = os.lstat(out)
        except FileNotFoundError:
            st = None
        if proc.returncode != 0 or st is None or not stat.S_ISREG(st.st_mode):
            said = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
            base = os.path.basename(path)
            reason = display(said[-1]).replace(f"In file {base}, ", "").replace(base, "the file")[:200] if said else ""
            raise ItemError("mat2 could not clean it" + (f" ({reason})" if reason else ""))
        after = self.show(item, out)
        remaining = after.kinds if after.supported else []
        return Cleaned(out, [k for k in before.kinds if k not in remaining], remaining)


def describe(kinds: list[str]) -> str:
    shown = kinds[:MAX_KINDS_SHOWN]
    more = len(kinds) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def extension_for(name: str) -> str:
    """The extension mat2 should see (lower case, letters and digits only), or ``""``."""
    ext = split_ext(name)[1].lower()
    if ext.count(".") > 1:  # ".tar.gz": mat2 goes by the last one
        ext = "." + ext.rsplit(".", 1)[1]
    return ext if re.fullmatch(r"\.[a-z0-9]{1,10}", ext) else ""
