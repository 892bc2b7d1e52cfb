"""Archive members checked with Python's own zipfile/tarfile before mat2 sees an archive.

mat2 unpacks archives (zip, the zip-based office formats docx/odt/epub..., tar) into a temp
folder and works on each member by joining its *raw* name onto that folder. mat2 0.13.3
(Debian bookworm) does so without checking the name, and chmods the result before it notices
anything: a member named ``../../../home/amnesia/.gnupg`` changed the mode of a file outside
the folder, even for ``mat2 --show`` (fixed upstream in 0.13.4). So every file that mat2
would unpack as an archive is read here first (nothing is extracted to a disk: each regular
member is copied into the item's RAM folder, one at a time, to see whether it is itself an
archive, which mat2 recurses into and which is checked the same way), and refused if any
member has an absolute name, a ``..`` component (``/`` or ``\\`` separated), or is a link,
a device or another special file.

mat2 chooses its parser by the name's extension, through Python's ``mimetypes`` (so does
this), so an archive is whatever that says is one; a file whose content is a zip or a tar is
checked too, whatever its name, at the top and at any depth (every member is copied out, one
at a time, to be looked at).
"""
from __future__ import annotations

import mimetypes
import os
import re
import stat
import tarfile
import tempfile
import zipfile
from functools import partial
from typing import IO, Callable, Iterator

from deaddrop.svs._errors import ItemError
from deaddrop.svs._inputs import display

MAX_DEPTH = 8  # archives inside archives: deeper than this is refused, not followed
RESERVE = 64 * 1024 * 1024  # left free in the RAM folder while a nested archive is copied out
_CHUNK = 1024 * 1024

# The types mat2 (libmat2.archive, office, epub) unpacks as a zip or as a tar.
ZIP_TYPES = frozenset({
    "application/zip",
    "application/epub+zip",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.spreadsheet",
    "application/vnd.oasis.opendocument.presentation",
    "application/vnd.oasis.opendocument.graphics",
    "application/vnd.oasis.opendocument.chart",
    "application/vnd.oasis.opendocument.formula",
    "application/vnd.oasis.opendocument.image",
})
TAR_TYPE = "application/x-tar"  # mat2: plain, +gz, +bz2, +xz alike

_types: mimetypes.MimeTypes | None = None


def _mime_types() -> mimetypes.MimeTypes:
    """The table mat2 uses: Python's defaults, the system's mime.types files, mat2's additions."""
    global _types
    if _types is None:
        _types = mimetypes.MimeTypes([f for f in mimetypes.knownfiles if os.path.isfile(f)])
        _types.add_type("application/epub+zip", ".epub")
    return _types


def kind_by_name(name: str) -> str | None:
    """``"zip"`` or ``"tar"`` if mat2 would unpack a file so named as an archive.

    mat2 guesses the type of the whole path it unpacked a member to (``/tmp/tmpXYZ/<name>``):
    so is the name here, as a file in a folder. Guessed on its own, ``data:,evil.zip`` would
    read as a data: URL (text/plain) while mat2 sees a zip and unpacks it."""
    mtype, _ = _mime_types().guess_type("/scratch/" + name)
    if mtype in ZIP_TYPES:
        return "zip"
    if mtype == TAR_TYPE:
        return "tar"
    return None


class UnsafeArchive(ItemError):
    pass


def _bad_name(name: str) -> str | None:
    if name == "":
        return "has no name"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "has an absolute name"
    if ".." in re.split(r"[/\\]", name):
        return "has '..' in its path"
    return None


def _refuse(chain: tuple[str, ...], why: str) -> UnsafeArchive:
    shown = " inside ".join(f"'{display(n)}'" for n in reversed(chain))
    return UnsafeArchive(f"archive member {shown} {why}: refused before mat2 unpacked anything "
                         "(it could reach files outside mat2's folder)")


class _Budget:
    """Room in the RAM folder for the nested archives copied out at one time."""

    def __init__(self, folder: str) -> None:
        st = os.statvfs(folder)
        self.left = st.f_bavail * st.f_frsize - RESERVE


def _spool(folder: str, source: IO[bytes], budget: _Budget) -> tuple[str, int]:
    """A nested archive copied into the item's RAM folder (0600), for zipfile/tarfile to seek."""
    fd, path = tempfile.mkstemp(prefix="nested-", dir=folder)
    written = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: source.read(_CHUNK), b""):
                written += len(chunk)
                if written > budget.left:
                    raise ItemError("a file inside it is too large for the RAM folder mat2 works in")
                out.write(chunk)
    except BaseException:
        os.unlink(path)
        raise
    budget.left -= written
    return path, written


def _zip_members(zf: zipfile.ZipFile, chain: tuple[str, ...]) -> Iterator[tuple[zipfile.ZipInfo, str]]:
    for info in zf.infolist():
        name = info.filename
        why = _bad_name(name)
        if why:
            raise _refuse(chain + (name,), why)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            raise _refuse(chain + (name,), "is a symbolic link")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise _refuse(chain + (name,), "is a device or other special file")
        yield info, name


def _check_zip(path: str, chain: tuple[str, ...], folder: str, budget: _Budget) -> None:
    with zipfile.ZipFile(path) as zf:
        for info, name in _zip_members(zf, chain):
            if not info.is_dir():
                _check_member(partial(zf.open, info), chain + (name,), folder, budget)


def _check_tar(path: str, chain: tuple[str, ...], folder: str, budget: _Budget) -> None:
    with tarfile.open(path, "r:*") as tf:
        for member in tf:
            name = member.name
            why = _bad_name(name)
            if why:
                raise _refuse(chain + (name,), why)
            if member.issym() or member.islnk():
                raise _refuse(chain + (name,), "is a link")
            if not (member.isreg() or member.isdir()):
                raise _refuse(chain + (name,), "is a device or other special file")
            if member.isreg():
                _check_member(partial(tf.extractfile, member), chain + (name,), folder, budget)


def _check_member(open_member: Callable[[], IO[bytes] | None], chain: tuple[str, ...], folder: str,
                  budget: _Budget) -> None:
    """One regular member, copied out: checked as an archive if mat2 would take it for one by
    its name (``chain[-1]``), or if its content is one whatever its name."""
    named = kind_by_name(chain[-1])
    try:
        source = open_member()
        assert source is not None
        with source:
            path, size = _spool(folder, source, budget)
    except ItemError:
        raise
    except Exception as e:  # an encrypted member, a bad CRC, a truncated stream...
        if named:
            raise _unreadable(chain, named, e) from None
        return  # unreadable to mat2 too (the same zipfile/tarfile): it cannot unpack it either
    try:
        kind = named or _kind_by_content(path)
        if kind is None:
            return
        if len(chain) > MAX_DEPTH:
            raise _refuse(chain, f"is an archive nested more than {MAX_DEPTH} deep")
        _check(path, kind, chain, folder, budget, named=named is not None)
    finally:
        os.unlink(path)
        budget.left += size


def _unreadable(chain: tuple[str, ...], kind: str, e: Exception) -> ItemError:
    where = f"'{display(chain[-1])}' inside it" if chain else "it"
    return ItemError(f"{where} is named as a {kind} archive but cannot be read as one "
                     f"({type(e).__name__}): refused before mat2 unpacked anything")


def _check(path: str, kind: str, chain: tuple[str, ...], folder: str, budget: _Budget, named: bool) -> None:
    try:
        (_check_zip if kind == "zip" else _check_tar)(path, chain, folder, budget)
    except ItemError:
        raise
    except Exception as e:  # BadZipFile, TarError, zlib/lzma/bz2 errors, an encrypted member...
        if not named:
            return  # only its content looked like one: mat2 will not unpack it as an archive
        raise _unreadable(chain, kind, e) from None


def check_archive(path: str) -> bool:
    """Refuse (``ItemError``) a file mat2 would unpack as an archive if any member, at any
    depth, could name a file outside mat2's folder. ``path`` is the copy in the item's RAM
    folder, named as mat2 will see it; nested archives are copied out beside it while checked.
    -> whether it was an archive at all."""
    folder = os.path.dirname(path)
    named = kind_by_name(os.path.basename(path))
    kind = named or _kind_by_content(path)
    if kind is None:
        return False
    _check(path, kind, (), folder, _Budget(folder), named is not None)
    return True


def _kind_by_content(path: str) -> str | None:
    """``"zip"`` or ``"tar"`` (plain or compressed) if the file's bytes are one, whatever its name."""
    if zipfile.is_zipfile(path):
        return "zip"
    try:
        return "tar" if tarfile.is_tarfile(path) else None
    except Exception:
        return None
