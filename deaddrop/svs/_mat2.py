"""Metadata removal with mat2, run as a subprocess on a private copy kept in RAM.

mat2 cleans a *file* (it writes ``NAME.cleaned.EXT`` beside it, and some of its parsers write
temp files of their own), so it needs a copy of the plaintext on a filesystem. That copy never
goes to a disk: it lives in a private folder (0700) on a RAM-backed filesystem (tmpfs), is
named by us (``in.EXT``, never the source's name, which could be an option to mat2), and the
folder is removed after each file. mat2's own temp files go there too (``TMPDIR``).

mat2 is told nothing but the file, and sees nothing else: it runs walled in
(:mod:`deaddrop.svs._sandbox`: bubblewrap showing it the system's programs and libraries and
its item folder alone, no network), with a minimal environment. mat2 failing is a failure:
its exit status is checked for ``--show`` and for cleaning alike, and a crash is reported for
that file, never taken for "no metadata found".

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
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from deaddrop.svs._archives import check_archive
from deaddrop.svs._errors import ItemError, SvsError
from deaddrop.svs._findings import Findings, parse_show
from deaddrop.svs._inputs import display
from deaddrop.svs._names import split_ext
from deaddrop.svs._sandbox import minimal_env, sandbox

RAM_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
MAT2_TIMEOUT = 30 * 60  # seconds; a large video takes a while, a hung mat2 must not hang us
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


def ram_folders(candidates: list[str] | None = None) -> list[str]:
    """The candidate folders that exist and are RAM-backed (tmpfs)."""
    found = candidates if candidates is not None else ram_folder_candidates()
    return [base for base in found if os.path.isdir(base) and filesystem_type(base) in RAM_FILESYSTEMS]


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
        for base in ram_folders(candidates):
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


def open_output(path: str) -> BinaryIO:
    """A file of mat2's item folder, opened to be read by us only if it is a regular file there.

    We read with the operator's rights, outside the walls: code running as mat2 cannot read the
    submission key, but it could leave a symbolic link to it (or a FIFO, to hang us) where its
    cleaned copy, or a kept file's copy, should be; followed, the key would be what leaves."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ItemError(f"mat2's folder no longer holds a readable {os.path.basename(path)} ({e.strerror}): "
                        "nothing leaves") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ItemError(f"mat2 left something other than a file as {os.path.basename(path)}: nothing leaves")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


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


def mat2_version() -> tuple[int, ...] | None:
    try:
        proc = subprocess.run([mat2_binary(), "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                              env=minimal_env("/"), timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(rb"(\d+)\.(\d+)\.(\d+)", proc.stdout)
    return tuple(int(g) for g in m.groups()) if m else None


def _version_note() -> str:
    version = mat2_version()
    if version is None or version < (0, 13, 4):
        shown = ".".join(map(str, version)) if version else "of unknown version"
        return f" (this mat2, {shown}, predates 0.13.4's own check of archive member names)"
    return ""


class Mat2Failed(ItemError):
    """mat2 ended in error (a crash, a parser's exception): what it said last, or its status."""


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
        if self.sandbox.missing is None:
            return []
        return [f"note: bubblewrap (bwrap) {self.sandbox.missing}: mat2 runs without its filesystem wall (it "
                f"could read whatever this user can); archives are still checked member by member before mat2 "
                f"sees them{_version_note()}"]

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
        """mat2 on ``path`` in the sandbox; :class:`Mat2Failed` unless it ended well (status 0)."""
        self._inspect(path)
        command = self.sandbox.command(item.folder, [self.binary] + options + ["--", os.path.basename(path)])
        try:
            proc = subprocess.run(command, cwd=item.folder, env=minimal_env(item.folder),
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=MAT2_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise ItemError(f"mat2 took longer than {MAT2_TIMEOUT // 60} minutes: not cleaned") from None
        if proc.returncode != 0:
            raise Mat2Failed(_last_words(proc, os.path.basename(path)))
        return proc

    def show(self, item: ScratchItem, path: str) -> Findings:
        proc = self._run(item, path, ["--show"])
        return parse_show(proc.stdout.decode("utf-8", "replace"))

    def clean(self, item: ScratchItem, path: str, before: Findings) -> Cleaned:
        """Clean ``path`` (a copy in ``item``); raise ItemError if mat2 could not."""
        stem, ext = os.path.splitext(os.path.basename(path))
        try:
            self._run(item, path, [])
        except Mat2Failed as e:
            raise ItemError(f"mat2 could not clean it ({e})") from None
        out = os.path.join(item.folder, f"{stem}.cleaned{ext}")
        try:
            st = os.lstat(out)
        except FileNotFoundError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            raise ItemError("mat2 could not clean it (it wrote no cleaned copy)")
        try:
            after = self.show(item, out)
        except Mat2Failed as e:
            raise ItemError(f"mat2 could not read its own cleaned copy ({e})") from None
        if not after.supported:
            raise ItemError(f"mat2 could not read its own cleaned copy ({after.problem})")
        return Cleaned(out, [k for k in before.kinds if k not in after.kinds], after.kinds)


def _last_words(proc: subprocess.CompletedProcess, base: str) -> str:
    """mat2's last line (a traceback's exception, a logged error), our copy's name taken out."""
    said = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
    if not said:
        return f"it ended with status {proc.returncode}"
    return display(said[-1]).replace(f"In file {base}, ", "").replace(base, "the file")[:200]


def extension_for(name: str) -> str:
    """The extension mat2 should see (lower case, letters and digits only), or ``""``."""
    ext = split_ext(name)[1].lower()
    if ext.count(".") > 1:  # ".tar.gz": mat2 goes by the last one
        ext = "." + ext.rsplit(".", 1)[1]
    return ext if re.fullmatch(r"\.[a-z0-9]{1,10}", ext) else ""
