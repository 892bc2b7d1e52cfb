"""Turn the command line's INPUTs (files, folders, zips) into a stream of items to process.

Zip entries are read straight out of the archive (``ZipFile.open`` decompresses as it goes):
nothing is extracted to disk, and an entry's name is only ever used to *parse* a submission
name from its last component, never as a path.
"""
from __future__ import annotations

import os
import re
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Callable, ContextManager, Iterable, Iterator

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


def _file_opener(path: str) -> Callable[[], ContextManager[BinaryIO]]:
    @contextmanager
    def opener() -> Iterator[BinaryIO]:
        with open(path, "rb") as f:
            yield f

    return opener


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], ContextManager[BinaryIO]]:
    @contextmanager
    def opener() -> Iterator[BinaryIO]:
        with zf.open(info) as f:
            yield f  # type: ignore[misc]

    return opener


def _file_item(path: str, folders: tuple[str, ...] = ()) -> Item:
    base = os.path.basename(path)
    return Item(display(path), parse_submission_name(base), os.path.getsize(path), _file_opener(path), base, folders)


def _zip_items(path: str) -> Iterator[Item | BadInput]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        yield BadInput(display(path), f"cannot read zip: {e}")
        return
    with zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            label = f"{display(path)}:{display(info.filename)}"
            name = parse_submission_name(info.filename)
            if name is None:
                yield BadInput(label, "unexpected zip entry (not N-adjective_noun-msg|doc.gz|reply.gpg)")
                continue
            base = info.filename.replace("\\", "/").rsplit("/", 1)[-1]
            yield Item(label, name, info.file_size, _zip_opener(zf, info), base)


def iter_inputs(
    paths: Iterable[str], submissions_only: bool = True, exclude: str | None = None
) -> Iterator[Item | BadInput]:
    """Items to process, in a stable order; :class:`BadInput` for what can't be used.

    ``submissions_only`` (decrypt): every file must be a server file (or a zip of them);
    files in a folder that don't end in ``.gpg`` are skipped silently (a browser's download
    folder has other things in it). Export passes ``False``: other files, zips included (a
    decrypted document may well be a zip), are encrypted as-is, and our own leftover temp
    files are skipped. ``exclude`` (OUTDIR) is not walked into: with ``decrypt . --out out``
    the files being written must not become inputs.
    """
    seen: set[str] = set()
    for path in paths:
        if not os.path.lexists(path):
            yield BadInput(display(path), "no such file or directory")
            continue
        if exclude is not None and os.path.realpath(path) == exclude:
            yield BadInput(display(path), "is the output directory")
            continue
        if os.path.isdir(path):
            top = os.path.basename(os.path.normpath(os.path.abspath(path)))
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(
                    (d for d in dirnames if exclude is None or os.path.realpath(os.path.join(dirpath, d)) != exclude),
                    key=_natural,
                )
                rel = os.path.relpath(dirpath, path)
                sub = () if rel == "." else tuple(rel.split(os.sep))
                for fn in sorted(filenames, key=_natural):
                    full = os.path.join(dirpath, fn)
                    if not os.path.isfile(full):
                        continue  # sockets, fifos, dangling links
                    if submissions_only and not fn.endswith(".gpg"):
                        continue
                    if fn.startswith(TEMP_PREFIX):
                        continue  # an interrupted run's temp file, never a result
                    real = os.path.realpath(full)
                    if real in seen:
                        continue
                    seen.add(real)
                    item = _file_item(full, (top,) + sub)
                    if submissions_only and item.name is None:
                        yield BadInput(item.label, "unrecognised name (expected N-adjective_noun-msg|doc.gz|reply.gpg)")
                    else:
                        yield item
            continue
        if not os.path.isfile(path):
            yield BadInput(display(path), "not a regular file")
            continue
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        base = os.path.basename(path)
        if parse_submission_name(base) is not None:
            yield _file_item(path)
        elif submissions_only and (
            base.lower().endswith(".zip") or (not base.endswith(".gpg") and zipfile.is_zipfile(path))
        ):
            yield from _zip_items(path)
        elif submissions_only:
            yield BadInput(display(path), "not a server file (N-adjective_noun-msg|doc.gz|reply.gpg) or a zip of them")
        else:
            yield _file_item(path)
