"""``deaddrop-svs decrypt``: server files (or a folder or zip of them) into readable files.

Per item the data flows ciphertext -> gpg (stdin pipe, fed by a thread) -> plaintext (stdout
pipe) -> [in-process gunzip for documents] -> a temp file inside ``OUTDIR/<designation>/``,
renamed to its final name only after gpg confirmed the decryption and its integrity check
(and, for documents, the gzip CRC). Nothing is ever held whole in memory.

Layout: ``OUTDIR/brave_otter/1-msg.txt``, ``.../4-reply.txt``, ``.../<original name>``; the
folder uses the underscore designation, exactly as the server's file names and the journalist
interface's zip do, so it is easy to match up and to type in a shell.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Iterator, TextIO

from deaddrop.svs._errors import ItemError, SvsError, describe_exception
from deaddrop.svs._gnupg import Gpg
from deaddrop.svs._guard import InputGuard
from deaddrop.svs._gzip import GzipFormatError, GzipReader
from deaddrop.svs._inputs import BadInput, Item, Skipped, iter_inputs
from deaddrop.svs._limit import Budget, OutputLimit
from deaddrop.svs._names import SubmissionName, sanitise_filename
from deaddrop.svs._outdir import OutDir
from deaddrop.svs._progress import THRESHOLD, Progress

CHUNK = 64 * 1024
KIND_WORDS = {"msg": ("message", "messages"), "reply": ("reply", "replies"), "doc.gz": ("document", "documents")}


@dataclass
class Summary:
    written: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)  # already in OUTDIR, byte for byte
    not_server: list[str] = field(default_factory=list)  # files in a folder that are none of ours

    @property
    def ok(self) -> bool:
        return not self.failed


def _read_all(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        data = stream.read(CHUNK)
        if not data:
            return
        yield data


class AlreadyThere(Exception):
    """The file's plaintext is already in OUTDIR under its name (decrypted before): nothing was
    written. ``args[0]`` is that file's path."""


def decrypt_item(
    gpg: Gpg, item: Item, out: OutDir, progress: Progress | None = None, limit: OutputLimit | None = None
) -> str:
    """Decrypt one server file into ``out``; return the written path or raise ItemError
    (AlreadyThere: the same bytes are already there under its name, and are not copied).

    ``limit`` bounds what the file may write (cap and free space); going over it stops gpg
    and removes the temp file, so nothing of an over-cap file is left.
    """
    name = item.name
    if name is None:  # iter_inputs already filters these; keep the function safe on its own
        raise ItemError("not a server file name")
    limit = limit or OutputLimit()
    folder = out.folder(name.designation)  # validated [a-z]+(_[a-z]+){1,2}: one safe component
    try:
        budget = limit.start(folder, item.size)  # before gpg runs or any byte is written
        return _decrypt_into(gpg, item, name, out, folder, budget, progress)
    except BaseException:
        try:
            os.rmdir(folder)  # only if this file was to be its first: no empty leftovers
        except OSError:
            pass
        raise


def _decrypt_into(
    gpg: Gpg, item: Item, name: SubmissionName, out: OutDir, folder: str, budget: Budget, progress: Progress | None
) -> str:
    with item.open() as source, gpg.decrypt(source, progress) as job:
        pending = None
        try:
            if name.kind == "doc.gz":
                gz = GzipReader(job.stdout)
                # The name is inside the ciphertext, so we learn it only now; whatever it
                # says, it only ever becomes one sanitised component within `folder`.
                target = sanitise_filename(gz.read_header(), name.default_output_name())
                chunks: Iterable[bytes] = gz.chunks()
            else:
                target = name.default_output_name()
                chunks = _read_all(job.stdout)
            pending = out.new_file(folder)
            for chunk in chunks:
                budget.add(len(chunk))  # raises before an over-cap chunk is written
                pending.write(chunk)
            job.finish()  # raises unless gpg decrypted and verified everything
            existing = pending.identical_existing(target)
            if existing is not None:
                pending.discard()
                raise AlreadyThere(existing)
            return pending.commit(target)
        except ItemError:
            if pending is not None:
                pending.discard()
            raise
        except (GzipFormatError, OSError, ValueError) as e:
            if pending is not None:
                pending.discard()
            # If gpg failed first (wrong key -> no output -> "not a gzip stream"), say so.
            gpg_reason = job.abort()
            raise ItemError(gpg_reason or str(e)) from None
        except BaseException:
            if pending is not None:
                pending.discard()
            raise


def run_decrypt(
    gpg: Gpg,
    inputs: Iterable[str],
    out: OutDir,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    show_progress: bool = False,
    guard: InputGuard | None = None,
    limit: OutputLimit | None = None,
) -> Summary:
    """Decrypt every input, reporting each result in one line; failures don't stop the run.

    ``guard`` says what may be read (pass one knowing the SVS home); ``limit`` caps each
    file's plaintext.
    """
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    tty = stderr.isatty() if hasattr(stderr, "isatty") else False
    summary = Summary()
    for item in iter_inputs(inputs, submissions_only=True, exclude=os.path.realpath(out.root), guard=guard):
        if isinstance(item, BadInput):
            summary.failed.append((item.label, item.reason))
            stderr.write(f"FAILED {item.label}: {item.reason}\n")
            continue
        if isinstance(item, Skipped):
            summary.not_server.append(item.label)
            stderr.write(f"skipped {item.label}: {item.reason}\n")
            continue
        progress = None
        if show_progress and item.size is not None and item.size >= THRESHOLD:
            progress = Progress(stderr, item.label, item.size, tty)
        try:
            path = decrypt_item(gpg, item, out, progress, limit)
        except AlreadyThere as e:
            if progress:
                progress.close(item.size)
            summary.skipped.append(e.args[0])
            stdout.write(f"{out.relative(e.args[0])}: already there, identical (skipped, not copied)\n")
            stdout.flush()
            continue
        except ItemError as e:
            if progress:
                progress.close()
            summary.failed.append((item.label, str(e)))
            stderr.write(f"FAILED {item.label}: {e}\n")
            continue
        except SvsError:
            raise  # e.g. PassphraseError: every other file would fail the same way
        except Exception as e:  # input vanished, OUTDIR full, zip entry encrypted/unsupported...
            if progress:
                progress.close()
            reason = describe_exception(e)
            summary.failed.append((item.label, reason))
            stderr.write(f"FAILED {item.label}: {reason}\n")
            continue
        if progress:
            progress.close(item.size)
        assert item.name is not None
        summary.written.append(path)
        summary.kinds[item.name.kind] += 1
        stdout.write(f"{out.relative(path)}\n")
        stdout.flush()
    stdout.write(summary_line(summary, out.root) + "\n")
    return summary


def summary_line(summary: Summary, root: str) -> str:
    parts = []
    for kind in ("msg", "reply", "doc.gz"):
        n = summary.kinds.get(kind, 0)
        if n:
            one, many = KIND_WORDS[kind]
            parts.append(f"{n} {one if n == 1 else many}")
    total = len(summary.written) + len(summary.failed) + len(summary.skipped) + len(summary.not_server)
    line = f"Decrypted {len(summary.written)} of {total} file{'s' if total != 1 else ''} into {root}"
    if parts:
        line += f" ({', '.join(parts)})"
    if summary.skipped:
        n = len(summary.skipped)
        line += f"; {n} {'was' if n == 1 else 'were'} already there, identical (skipped)"
    if summary.not_server:
        n = len(summary.not_server)
        line += f"; {n} {'is not a server file' if n == 1 else 'are not server files'} (skipped, named above)"
    if summary.failed:
        line += f"; {len(summary.failed)} FAILED"
    return line + "."
