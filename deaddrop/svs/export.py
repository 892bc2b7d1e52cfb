"""``deaddrop-svs export``: encrypt files to a journalist's personal key for the trip off the SVS.

Every file is cleaned of metadata with mat2 first (:mod:`deaddrop.svs.scrub`: a private copy in
RAM, never on a disk and never in OUTDIR, which is usually the USB stick that leaves); one line
per file says which kinds were removed. A file mat2 cannot clean is refused unless
``--keep-metadata`` names it. Two kinds of FILE:

* a server file (``N-designation-kind.gpg``, encrypted to the submission key): decrypted with
  the SVS key and re-encrypted to the personal key. A message or reply (text the source or a
  journalist typed: no file metadata) goes gpg to gpg through an OS pipe, its plaintext touching
  no filesystem; a document is unpacked into the RAM copy, cleaned, and packed again. The output
  keeps the server's name and format (``OUTDIR/1-brave_otter-msg.gpg``; a ``doc.gz`` stays gzip
  inside, under its original name). The zip the journalist interface downloads is read entry by
  entry, as ``decrypt`` reads it (nothing extracted), each server file in it exported so;
* any other file (typically something ``decrypt`` wrote): cleaned and encrypted to
  ``OUTDIR/<name>.gpg``. A folder keeps its layout: ``OUTDIR/brave_otter/1-msg.txt.gpg``.

The personal key is never imported into the SVS keyring: a throwaway GnuPG home is used and
the key is passed with ``--recipient-file``. Outputs are encrypted to that key alone.
"""
from __future__ import annotations

import os
import shutil
import struct
import sys
import zlib
from typing import Iterable, TextIO

from deaddrop.svs._errors import ItemError, SvsError, describe_exception
from deaddrop.svs._gnupg import Gpg, KeyInfo, fingerprint_groups, throwaway_home
from deaddrop.svs._guard import InputGuard
from deaddrop.svs._gzip import GzipFormatError, GzipReader
from deaddrop.svs._inputs import Item, iter_inputs
from deaddrop.svs._mat2 import open_output
from deaddrop.svs._names import sanitise_filename
from deaddrop.svs._outdir import OutDir
from deaddrop.svs.scrub import Cleaner, KeepList, RunSummary, run_items


ExportSummary = RunSummary


def copy_key_file(guard: InputGuard, keyfile: str, home: str) -> str:
    """Copy ``keyfile`` into the throwaway ``home``, read without following links.

    gpg would open a path itself (following links, even into the SVS home), so it only ever
    gets this copy.
    """
    try:
        data = guard.read_small(keyfile)
    except FileNotFoundError:
        raise SvsError(f"--to-key {keyfile}: no such file") from None
    except ItemError as e:
        raise SvsError(f"--to-key {keyfile}: {e}") from None
    except OSError as e:
        raise SvsError(f"--to-key {keyfile}: {describe_exception(e)}") from None
    copy = os.path.join(home, "recipient.key")
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return copy


def check_recipient(scratch: Gpg, keyfile: str, own_fingerprints: Iterable[str], shown: str | None = None) -> KeyInfo:
    """The one usable public key in ``keyfile``; SvsError for anything else.

    ``shown`` is the name to use in messages (the operator's path, not our copy's).
    """
    if not os.path.isfile(keyfile):
        raise SvsError(f"--to-key {keyfile}: no such file")
    shown = shown or keyfile
    try:
        keys = scratch.show_keys(keyfile)
    except SvsError as e:
        raise SvsError(str(e).replace(keyfile, shown)) from None
    keyfile = shown
    if any(k.secret for k in keys):
        # Someone brought a secret key to the SVS: refuse rather than silently use it.
        raise SvsError(f"{keyfile} holds a SECRET key: bring only the journalist's public key")
    if len(keys) != 1:
        raise SvsError(f"{keyfile} must hold exactly one public key (found {len(keys)})")
    key = keys[0]
    if not key.can_encrypt:
        raise SvsError(f"{keyfile}: key {key.fingerprint} cannot encrypt (expired, revoked or sign-only)")
    if key.fingerprint in set(own_fingerprints):
        raise SvsError("--to-key is this station's own submission key: use the journalist's personal key")
    return key


def _encrypt_file(scratch: Gpg, keyfile: str, path: str, out: OutDir, folder: str, name: str) -> str:
    with open_output(path) as source:  # a file of mat2's folder: never through a link left there
        pending = out.new_file(folder)
        try:
            scratch.encrypt_to_keyfile(keyfile, source, pending.file)
            return pending.commit(name, ".gpg")
        except BaseException:
            pending.discard()
            raise


def _write_gzip(src_path: str, dest_path: str, fname: bytes | None) -> None:
    """``src_path`` as one gzip member named ``fname`` (raw bytes, as the server wrote them)."""
    header = b"\x1f\x8b\x08" + (b"\x08" if fname else b"\x00") + b"\x00\x00\x00\x00\x00\xff"
    if fname:
        header += fname.replace(b"\0", b"_") + b"\0"
    crc = size = 0
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    fd = os.open(dest_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with open_output(src_path) as src, os.fdopen(fd, "wb") as dest:
        dest.write(header)
        for chunk in iter(lambda: src.read(1024 * 1024), b""):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            dest.write(deflate.compress(chunk))
        dest.write(deflate.flush() + struct.pack("<II", crc, size & 0xFFFFFFFF))


def _export_document(svs: Gpg, scratch: Gpg, keyfile: str, item: Item, out: OutDir, folder: str,
                     cleaner: Cleaner) -> tuple[str, str]:
    """A server document: decrypt and unpack into RAM, clean, pack, encrypt."""
    assert item.name is not None
    target = sanitise_filename(item.basename[: -len(".gpg")], "file")
    with item.open() as source:
        keep = cleaner.keep.names(source)
        with svs.decrypt(source) as job:
            try:
                gz = GzipReader(job.stdout)
                fname = gz.read_header()
                name = sanitise_filename(fname, item.name.default_output_name())
                with cleaner.prepare_chunks(item.label, name, gz.chunks(), keep, verify=job.finish) as prepared:
                    packed = os.path.join(os.path.dirname(prepared.path), "packed.gz")
                    _write_gzip(prepared.path, packed, fname)
                    return _encrypt_file(scratch, keyfile, packed, out, folder, target), prepared.line
            except ItemError as e:
                raise ItemError(job.abort() or str(e)) from None
            except (GzipFormatError, OSError, ValueError) as e:
                raise ItemError(job.abort() or str(e)) from None


def export_item(svs: Gpg | None, scratch: Gpg, keyfile: str, item: Item, out: OutDir,
                cleaner: Cleaner) -> tuple[str, str]:
    """Clean and encrypt (or decrypt and re-encrypt) one item to ``keyfile``.

    -> (the written path, the line saying what metadata was removed).
    """
    folder = out.folder(*(sanitise_filename(c, "folder") for c in item.folders))
    if item.name is None:
        name = sanitise_filename(item.basename, "file")
        with item.open() as source:
            keep = cleaner.keep.names(source)
            with cleaner.prepare_stream(item.label, name, source, item.size, keep) as prepared:
                return _encrypt_file(scratch, keyfile, prepared.path, out, folder, name), prepared.line
    if svs is None:
        raise ItemError("a server file: needs this station's submission key (check --home)")
    if item.name.kind == "doc.gz":
        return _export_document(svs, scratch, keyfile, item, out, folder, cleaner)
    # "1-brave_otter-msg.gpg" -> "1-brave_otter-msg" (+ ".gpg" after any collision number).
    target = sanitise_filename(item.basename[: -len(".gpg")], "file")
    with item.open() as source, svs.decrypt(source) as job:
        pending = out.new_file(folder)
        try:
            # gpg --decrypt's stdout is handed to gpg --encrypt as its stdin: plaintext goes
            # from one gpg to the other without passing through Python or a file.
            scratch.encrypt_to_keyfile(keyfile, job.stdout, pending.file)
            job.finish()  # the re-encrypted copy is kept only if the original verified
            path = pending.commit(target, ".gpg")
        except ItemError as e:
            pending.discard()
            raise ItemError(job.abort() or str(e)) from None
        except BaseException:
            pending.discard()
            raise
    return path, f"{item.label}: typed text, no file metadata to remove"


def run_export(
    svs: Gpg | None,
    keyfile: str,
    inputs: Iterable[str],
    outdir: str,
    own_fingerprints: Iterable[str] = (),
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    guard: InputGuard | None = None,
    keep_metadata: Iterable[str] = (),
) -> ExportSummary:
    """Export every input; ``guard`` (knowing the SVS home) says what may be read."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    guard = guard or InputGuard(None)
    summary = ExportSummary()
    keep = KeepList(keep_metadata)
    home = throwaway_home()
    scratch = Gpg(home)
    cleaner: Cleaner | None = None
    try:
        shown = keyfile
        keyfile = copy_key_file(guard, keyfile, home)
        key = check_recipient(scratch, keyfile, own_fingerprints, shown)
        who = f" ({key.uids[0]})" if key.uids else ""
        stdout.write(f"Encrypting to {fingerprint_groups(key.fingerprint)}{who}\n")
        cleaner = Cleaner(keep)
        cleaner.say_notes(stderr)
        out = OutDir(outdir)  # only once the key is known good: no stray empty OUTDIR
        items = iter_inputs(inputs, submissions_only=False, exclude=os.path.realpath(out.root), guard=guard)
        run_items(items, lambda item: export_item(svs, scratch, keyfile, item, out, cleaner), out, summary,
                  stdout, stderr)
        for path in keep.unused():
            stderr.write(f"note: --keep-metadata {path} was not among the files exported\n")
        stdout.write(summary.closing_line("Exported", f"to {out.root}") + "\n")
        return summary
    finally:
        if cleaner is not None:
            cleaner.close()
        scratch.kill_agent()
        shutil.rmtree(home, ignore_errors=True)
