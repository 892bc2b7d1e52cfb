"""``deaddrop-svs export``: encrypt files to a journalist's personal key for the trip off the SVS.

Two kinds of FILE:

* a server file (``N-designation-kind.gpg``, encrypted to the submission key): decrypted with
  the SVS key and re-encrypted to the personal key, gpg to gpg through an OS pipe, so its
  plaintext never touches any disk; the output keeps the server's name and format
  (``OUTDIR/1-brave_otter-msg.gpg``, a ``doc.gz`` stays gzip inside);
* any other file (typically something ``decrypt`` wrote): encrypted as-is to
  ``OUTDIR/<name>.gpg``. A folder keeps its layout: ``OUTDIR/brave_otter/1-msg.txt.gpg``.

The personal key is never imported into the SVS keyring: a throwaway GnuPG home is used and
the key is passed with ``--recipient-file``. Outputs are encrypted to that key alone.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Iterable, TextIO

from deaddrop.svs._errors import ItemError, SvsError, describe_exception
from deaddrop.svs._gnupg import Gpg, KeyInfo, fingerprint_groups, throwaway_home
from deaddrop.svs._guard import InputGuard
from deaddrop.svs._inputs import BadInput, Item, iter_inputs
from deaddrop.svs._names import sanitise_filename
from deaddrop.svs._outdir import OutDir


@dataclass
class ExportSummary:
    written: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


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


def export_item(svs: Gpg | None, scratch: Gpg, keyfile: str, item: Item, out: OutDir) -> str:
    """Encrypt (or decrypt and re-encrypt) one item to ``keyfile``; return the written path."""
    folder = out.folder(*(sanitise_filename(c, "folder") for c in item.folders))
    if item.name is None:
        with item.open() as source:
            pending = out.new_file(folder)
            try:
                scratch.encrypt_to_keyfile(keyfile, source, pending.file)
                return pending.commit(sanitise_filename(item.basename, "file"), ".gpg")
            except BaseException:
                pending.discard()
                raise
    if svs is None:
        raise ItemError("a server file: needs this station's submission key (check --home)")
    # "1-brave_otter-msg.gpg" -> "1-brave_otter-msg" (+ ".gpg" after any collision number).
    target = sanitise_filename(item.basename[: -len(".gpg")], "file")
    with item.open() as source, svs.decrypt(source) as job:
        pending = out.new_file(folder)
        try:
            # gpg --decrypt's stdout is handed to gpg --encrypt as its stdin: plaintext goes
            # from one gpg to the other without passing through Python or a file.
            scratch.encrypt_to_keyfile(keyfile, job.stdout, pending.file)
            job.finish()  # the re-encrypted copy is kept only if the original verified
            return pending.commit(target, ".gpg")
        except ItemError as e:
            pending.discard()
            raise ItemError(job.abort() or str(e)) from None
        except BaseException:
            pending.discard()
            raise


def run_export(
    svs: Gpg | None,
    keyfile: str,
    inputs: Iterable[str],
    outdir: str,
    own_fingerprints: Iterable[str] = (),
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    guard: InputGuard | None = None,
) -> ExportSummary:
    """Export every input; ``guard`` (knowing the SVS home) says what may be read."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    guard = guard or InputGuard(None)
    summary = ExportSummary()
    home = throwaway_home()
    scratch = Gpg(home)
    try:
        shown = keyfile
        keyfile = copy_key_file(guard, keyfile, home)
        key = check_recipient(scratch, keyfile, own_fingerprints, shown)
        who = f" ({key.uids[0]})" if key.uids else ""
        stdout.write(f"Encrypting to {fingerprint_groups(key.fingerprint)}{who}\n")
        out = OutDir(outdir)  # only once the key is known good: no stray empty OUTDIR
        for item in iter_inputs(inputs, submissions_only=False, exclude=os.path.realpath(out.root), guard=guard):
            if isinstance(item, BadInput):
                summary.failed.append((item.label, item.reason))
                stderr.write(f"FAILED {item.label}: {item.reason}\n")
                continue
            try:
                path = export_item(svs, scratch, keyfile, item, out)
            except SvsError as e:
                if not isinstance(e, ItemError):
                    raise
                summary.failed.append((item.label, str(e)))
                stderr.write(f"FAILED {item.label}: {e}\n")
                continue
            except Exception as e:
                reason = describe_exception(e)
                summary.failed.append((item.label, reason))
                stderr.write(f"FAILED {item.label}: {reason}\n")
                continue
            summary.written.append(path)
            stdout.write(f"{out.relative(path)}\n")
        total = len(summary.written) + len(summary.failed)
        line = f"Exported {len(summary.written)} of {total} file{'s' if total != 1 else ''} to {out.root}"
        if summary.failed:
            line += f"; {len(summary.failed)} FAILED"
        stdout.write(line + ".\n")
        return summary
    finally:
        scratch.kill_agent()
        shutil.rmtree(home, ignore_errors=True)
