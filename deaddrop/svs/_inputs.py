"""Turn the command line's INPUTs (files, folders, zips) into a stream of items to process.

Zip entries are read straight out of the archive (``ZipFile.open`` decompresses as it goes):
nothing is extracted to disk, and an entry's name is only ever used to *parse* a submission
name from its last component, never as a path.
"""
from __future__ import annotations

import os
import re
import stat
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Callable, ContextManager, Iterable, Iterator

from deaddrop.svs._errors import ItemError
from deaddrop.svs._guard import InputGuard
from deaddrop.svs._names import SubmissionName, parse_submission_name
from deaddrop.svs._outdir import TEMP_PREFIX


def _natural(name: str) -> list[object]:
    """Sort key putting ``2-...`` before ``10-...``, as the server numbered them."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def display(text: str) -> str:
    """``text`` safe to print on a terminal: hostile names may carry escape sequences."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass
class Item:
    label: str  # for messages, already display()-safe
    name: SubmissionName | None  # None: not a server file (export encrypts such files as-is)
    size: int | None  # bytes to read, for progress
    open: Callable[[], ContextManager[BinaryIO]]
    basename: str  # the raw last component (for export's output name)
    folders: tuple[str, ...] = ()  # raw sub-folders below a folder INPUT (export keeps them)


@dataclass
class BadInput:
    label: str
    reason: str


@dataclass
class Skipped:
    """A file in a folder given to ``decrypt`` that is neither a server file nor a zip holding
    any: named, counted and left alone (a browser's download folder has other things in it)."""

    label: str
    reason: str


NOT_SERVER_FILE = "not a server file (N-designation-msg|doc.gz|reply.gpg) nor a zip holding any: skipped"


def _file_opener(guard: InputGuard, path: str, st: os.stat_result) -> Callable[[], ContextManager[BinaryIO]]:
    @contextmanager
    def opener() -> Iterator[BinaryIO]:
        with guard.open(path, st) as f:
            yield f

    return opener


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], ContextManager[BinaryIO]]:
    @contextmanager
    def opener() -> Iterator[BinaryIO]:
        with zf.open(info) as f:
            yield f  # type: ignore[misc]

    return opener


def _file_item(guard: InputGuard, path: str, st: os.stat_result, folders: tuple[str, ...] = ()) -> Item:
    base = os.path.basename(path)
    return Item(display(path), parse_submission_name(base), st.st_size, _file_opener(guard, path, st), base, folders)


def _is_zip(guard: InputGuard, path: str, st: os.stat_result) -> bool:
    try:
        with guard.open(path, st) as f:
            return zipfile.is_zipfile(f)
    except (ItemError, OSError):
        return False


def _server_entries(guard: InputGuard, path: str, st: os.stat_result) -> tuple[int, int] | None:
    """(server files, all files) among a zip's entries; ``None`` if it is no readable zip."""
    try:
        with guard.open(path, st) as f:
            if not zipfile.is_zipfile(f):
                return None
            f.seek(0)
            with zipfile.ZipFile(f) as zf:
                names = [info.filename for info in zf.infolist() if not info.is_dir()]
    except (ItemError, OSError, zipfile.BadZipFile, ValueError):
        return None
    return sum(parse_submission_name(n) is not None for n in names), len(names)


def _is_server_zip(guard: InputGuard, path: str, st: os.stat_result) -> bool:
    """A zip holding server files (the journalist interface's download): export takes its
    entries as decrypt does; cleaned as-is, mat2 would only fail on the encrypted entries.
    Only a zip whose every entry is a server file is one: any other zip (a decrypted document
    may be one, holding a server file's name among others) is a plain file, checked and
    cleaned as a whole."""
    counts = _server_entries(guard, path, st)
    return counts is not None and 0 < counts[0] == counts[1]


def _zip_items(guard: InputGuard, path: str, st: os.stat_result) -> Iterator[Item | BadInput]:
    try:
        raw = guard.open(path, st)
    except ItemError as e:  # a link, or a file of the home
        yield BadInput(display(path), str(e))
        return
    except OSError as e:
        yield BadInput(display(path), f"cannot read zip: {e}")
        return
    try:
        zf = zipfile.ZipFile(raw)
    except (zipfile.BadZipFile, OSError) as e:
        raw.close()
        yield BadInput(display(path), f"cannot read zip: {e}")
        return
    with raw, zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            label = f"{display(path)}:{display(info.filename)}"
            name = parse_submission_name(info.filename)
            if name is None:
                yield BadInput(label, "unexpected zip entry (not N-designation-msg|doc.gz|reply.gpg)")
                continue
            base = info.filename.replace("\\", "/").rsplit("/", 1)[-1]
            yield Item(label, name, info.file_size, _zip_opener(zf, info), base)


def iter_inputs(
    paths: Iterable[str], submissions_only: bool = True, exclude: str | None = None,
    guard: InputGuard | None = None,
) -> Iterator[Item | BadInput | Skipped]:
    """Items to process, in a stable order; :class:`BadInput` for what can't be used.

    ``submissions_only`` (decrypt): every file must be a server file (or a zip of them); in a
    folder, a zip holding server files (the browser's "download all") is read as one given
    on its own, and any other file is a :class:`Skipped`, named and counted (a browser's
    download folder has other things in it). Export passes ``False``: a zip of nothing but server files (the
    journalist interface's download) is read entry by entry as decrypt reads it; other files,
    other zips included (a decrypted document may well be a zip), are encrypted as-is, and our own leftover temp
    files are skipped. ``exclude`` (OUTDIR) is not walked into: with ``decrypt . --out out``
    the files being written must not become inputs. ``guard`` decides what may be read at
    all: no symbolic link is ever followed and nothing of the SVS home is read.
    """
    guard = guard or InputGuard(None)
    seen: set[tuple[int, int]] = set()  # (device, inode): a file named twice is done once
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            yield BadInput(display(path), "no such file or directory")
            continue
        if exclude is not None and os.path.realpath(path) == exclude:
            yield BadInput(display(path), "is the output directory")
            continue
        reason = guard.refusal(path, st)
        if reason is not None:
            yield BadInput(display(path), reason)
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from _folder_items(guard, path, submissions_only, exclude, seen)
            continue
        if not stat.S_ISREG(st.st_mode):
            yield BadInput(display(path), "not a regular file")
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        base = os.path.basename(path)
        if parse_submission_name(base) is not None:
            yield _file_item(guard, path, st)
        elif submissions_only and (
            base.lower().endswith(".zip") or (not base.endswith(".gpg") and _is_zip(guard, path, st))
        ):
            yield from _zip_items(guard, path, st)
        elif submissions_only:
            yield BadInput(display(path), "not a server file (N-designation-msg|doc.gz|reply.gpg) or a zip of them")
        elif _is_server_zip(guard, path, st):
            yield from _zip_items(guard, path, st)
        else:
            yield _file_item(guard, path, st)


def _folder_items(
    guard: InputGuard, path: str, submissions_only: bool, exclude: str | None, seen: set[tuple[int, int]]
) -> Iterator[Item | BadInput | Skipped]:
    """The files below a folder INPUT; links inside it are reported, never followed."""
    top = os.path.basename(os.path.normpath(os.path.abspath(path)))
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        keep = []
        for d in sorted(dirnames, key=_natural):
            full = os.path.join(dirpath, d)
            if exclude is not None and os.path.realpath(full) == exclude:
                continue
            reason = guard.refusal(full)
            if reason is not None:  # os.walk lists a link to a folder among the folders
                yield BadInput(display(full), reason)
                continue
            keep.append(d)
        dirnames[:] = keep
        rel = os.path.relpath(dirpath, path)
        sub = () if rel == "." else tuple(rel.split(os.sep))
        for fn in sorted(filenames, key=_natural):
            full = os.path.join(dirpath, fn)
            if fn.startswith(TEMP_PREFIX):
                continue  # an interrupted run's temp file, never a result
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            reason = guard.refusal(full, st)
            if reason is not None:
                yield BadInput(display(full), reason)
                continue
            if not stat.S_ISREG(st.st_mode):  # sockets, fifos
                if submissions_only:
                    yield Skipped(display(full), "not a regular file: skipped")
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            item = _file_item(guard, full, st, (top,) + sub)
            if submissions_only and item.name is None and not fn.endswith(".gpg"):
                counts = _server_entries(guard, full, st)
                if counts is not None and counts[0] > 0:
                    yield from _zip_items(guard, full, st)
                else:
                    yield Skipped(item.label, NOT_SERVER_FILE)
            elif submissions_only and item.name is None:
                yield BadInput(item.label, "unrecognised name (expected N-designation-msg|doc.gz|reply.gpg)")
            elif item.name is None and _is_server_zip(guard, full, st):
                yield from _zip_items(guard, full, st)
            else:
                yield item
