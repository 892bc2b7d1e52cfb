"""Metadata removal before files leave the SVS: ``deaddrop-svs scrub``, and the step ``export``
runs before it encrypts.

Per file: a private copy in RAM (see :mod:`deaddrop.svs._mat2`), its first bytes checked
against its extension, ``mat2 --show`` (what is there), ``mat2`` (clean), ``mat2 --show`` on the
result (what is left); one line says which kinds of metadata were removed. A file mat2 cannot
clean is refused unless ``--keep-metadata`` names it; a file so named leaves unchanged, with
its metadata listed. ``scrub`` writes the cleaned files into OUTDIR (plaintext, for
publication), like ``decrypt`` does: temp name, fsync, final name, never replacing a file.
"""
from __future__ import annotations

import os
import shutil
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterable, Iterator, TextIO

from deaddrop.svs._errors import ItemError, SvsError, describe_exception
from deaddrop.svs._guard import InputGuard
from deaddrop.svs._inputs import BadInput, Item, Skipped, display, iter_inputs
from deaddrop.svs._findings import describe
from deaddrop.svs._mat2 import (Mat2, Mat2Failed, RamScratch, ScratchItem, content_mismatch, extension_for,
                                open_output)
from deaddrop.svs._names import sanitise_filename
from deaddrop.svs._outdir import OutDir

# Left free in the RAM folder whatever happens: the station must keep working.
RAM_RESERVE = 64 * 1024 * 1024
HEAD = 64


class KeepList:
    """The files ``--keep-metadata`` names, by identity (device, inode), not by spelling."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._wanted: dict[tuple[int, int], str] = {}
        self._used: set[tuple[int, int]] = set()
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                raise SvsError(f"--keep-metadata {display(path)}: no such file") from None
            if not stat.S_ISREG(st.st_mode):
                raise SvsError(f"--keep-metadata {display(path)}: not a regular file")
            self._wanted[(st.st_dev, st.st_ino)] = path

    def names(self, f: BinaryIO) -> bool:
        try:
            st = os.fstat(f.fileno())
        except (OSError, ValueError, AttributeError):
            return False  # a zip entry: not a file --keep-metadata can name
        key = (st.st_dev, st.st_ino)
        if key in self._wanted:
            self._used.add(key)
            return True
        return False

    def unused(self) -> list[str]:
        return [display(p) for k, p in self._wanted.items() if k not in self._used]


@dataclass
class Prepared:
    path: str  # what leaves: the cleaned copy, or the unchanged copy of a kept file
    line: str  # what was done, for the operator

    def open(self) -> BinaryIO:
        """What leaves, for reading; never through a link mat2 may have left in its place."""
        return open_output(self.path)


class Cleaner:
    """One run's RAM folder and mat2; :meth:`prepare` gives the file that may leave."""

    def __init__(self, keep: KeepList) -> None:
        self.keep = keep
        self.mat2 = Mat2()
        self.scratch = RamScratch()

    def close(self) -> None:
        self.scratch.close()

    def say_notes(self, stderr: TextIO) -> None:
        """Once per run: what walls mat2 lacks here (no usable bubblewrap)."""
        for note in self.mat2.notes():
            stderr.write(note + "\n")

    def _room(self) -> int:
        return self.scratch.room() - RAM_RESERVE

    @contextmanager
    def prepare_stream(self, label: str, name: str, source: BinaryIO, size: int | None,
                       keep: bool) -> Iterator[Prepared]:
        """Clean the file ``source`` holds (``name`` gives its type); the result is removed on exit."""
        with self.scratch.item() as work:
            ext = extension_for(name)
            room = self._room()
            if size is not None and 2 * size > room:  # the copy, and mat2's cleaned copy
                raise ItemError(f"too large for the RAM folder mat2 works in ({max(room, 0) // (1024 * 1024)} MiB free)")
            copy = work.fill(ext, source, room)
            yield self._clean(work, name, label, copy, ext, keep)

    @contextmanager
    def prepare_chunks(self, label: str, name: str, chunks: Iterator[bytes], keep: bool,
                       verify: Callable[[], None]) -> Iterator[Prepared]:
        """Like :meth:`prepare_stream` for decrypted data: ``verify`` (gpg's integrity check)
        must pass after the last chunk, before mat2 sees any of it."""
        with self.scratch.item() as work:
            ext = extension_for(name)
            copy = work.fill(ext, chunks, self._room())
            verify()
            yield self._clean(work, name, label, copy, ext, keep)

    def _clean(self, work: ScratchItem, name: str, label: str, copy: str, ext: str, keep: bool) -> Prepared:
        if keep:
            try:
                found = self.mat2.show(work, copy)
            except Mat2Failed as e:
                what = f"; mat2 could not read {name} to list what it holds ({e})"
            else:
                what = f": it still holds {describe(found.kinds)}" if found.supported and found.kinds else ""
            return Prepared(copy, f"{label}: metadata KEPT as asked (--keep-metadata){what}")
        with open(copy, "rb") as f:
            head = f.read(HEAD)
        mismatch = content_mismatch(ext, head)
        if mismatch:
            raise ItemError(f"{mismatch} (refused; --keep-metadata FILE lets it leave unchanged)")
        try:
            before = self.mat2.show(work, copy)
        except Mat2Failed as e:
            raise ItemError(f"mat2 could not read {name}: {e}; refused, it would leave with its metadata "
                            "unknown (--keep-metadata FILE lets it leave unchanged)") from None
        if not before.supported:
            raise ItemError(f"{before.problem}: refused, it would leave with its metadata "
                            "(--keep-metadata FILE lets it leave unchanged)")
        cleaned = self.mat2.clean(work, copy, before)
        return Prepared(cleaned.path, f"{label}: {cleaning_report(cleaned.removed, cleaned.remaining)}")


def cleaning_report(removed: list[str], remaining: list[str]) -> str:
    """What mat2 did to one file, in words that never contradict each other: "no metadata
    found" only when mat2 reports none left either."""
    if removed and remaining:
        return f"removed {describe(removed)}; mat2 still reports {describe(remaining)} (look before publishing)"
    if removed:
        return f"removed {describe(removed)}"
    if remaining:
        return (f"mat2 could remove nothing, and still reports {describe(remaining)} "
                "(the format keeps them: look before publishing)")
    return "no metadata found"


@dataclass
class RunSummary:
    written: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def closing_line(self, verb: str, where: str) -> str:
        total = len(self.written) + len(self.failed)
        line = f"{verb} {len(self.written)} of {total} file{'s' if total != 1 else ''} {where}"
        return line + (f"; {len(self.failed)} FAILED." if self.failed else ".")


def run_items(items: Iterable[Item | BadInput | Skipped], handle: Callable[[Item], tuple[str, str]], out: OutDir,
              summary: RunSummary, stdout: TextIO, stderr: TextIO) -> None:
    """Each item through ``handle`` (-> written path, what was done); a failure is one FAILED
    line and the run goes on, except an error that would fail every file alike."""
    for item in items:
        if isinstance(item, (BadInput, Skipped)):  # export and scrub take every file: never Skipped
            summary.failed.append((item.label, item.reason))
            stderr.write(f"FAILED {item.label}: {item.reason}\n")
            continue
        try:
            path, line = handle(item)
        except ItemError as e:
            reason = str(e)
        except SvsError:
            raise
        except Exception as e:
            reason = describe_exception(e)
        else:
            summary.written.append(path)
            stdout.write(f"{line}\n  -> {out.relative(path)}\n")
            continue
        summary.failed.append((item.label, reason))
        stderr.write(f"FAILED {item.label}: {reason}\n")


ScrubSummary = RunSummary


def scrub_item(cleaner: Cleaner, item: Item, out: OutDir) -> tuple[str, str]:
    """Clean one file into ``out``; return (written path, the line saying what was removed)."""
    if item.name is not None:
        raise ItemError("a server file (still encrypted): decrypt it first (deaddrop-svs decrypt)")
    name = sanitise_filename(item.basename, "file")
    with item.open() as source:
        keep = cleaner.keep.names(source)
        with cleaner.prepare_stream(item.label, name, source, item.size, keep) as prepared:
            folder = out.folder(*(sanitise_filename(c, "folder") for c in item.folders))
            pending = out.new_file(folder)
            try:
                with prepared.open() as cleaned:
                    shutil.copyfileobj(cleaned, pending.file, 1024 * 1024)
                return pending.commit(name), prepared.line
            except BaseException:
                pending.discard()
                raise


def run_scrub(
    inputs: Iterable[str],
    outdir: str,
    keep_metadata: Iterable[str] = (),
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    guard: InputGuard | None = None,
) -> RunSummary:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    guard = guard or InputGuard(None)
    keep = KeepList(keep_metadata)
    summary = RunSummary()
    cleaner = Cleaner(keep)
    try:
        cleaner.say_notes(stderr)
        out = OutDir(outdir)
        items = iter_inputs(inputs, submissions_only=False, exclude=os.path.realpath(out.root), guard=guard)
        run_items(items, lambda item: scrub_item(cleaner, item, out), out, summary, stdout, stderr)
        for path in keep.unused():
            stderr.write(f"note: --keep-metadata {path} was not among the files scrubbed\n")
        stdout.write(summary.closing_line("Scrubbed", f"into {out.root}") + "\n")
        return summary
    finally:
        cleaner.close()
