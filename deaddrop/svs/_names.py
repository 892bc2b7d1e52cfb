"""Names: parse the server's file names, and make any other name safe to create.

Everything here is pure string work, so it can be tested exhaustively without touching disk.
The SVS never trusts the server: a document's name comes from inside an encrypted gzip
header that a compromised server (or a malicious source) fully controls, and zip entry names
come from whatever produced the zip.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# N-<designation>-<kind>.gpg, designation "adjective_adjective_noun" (or "adjective_noun", made
# before designations had three words). Bounded lengths so a name can't be used to make an
# over-long folder; fullmatch so a trailing newline can't slip past "$".
_SUBMISSION_RE = re.compile(
    r"(?P<number>[1-9][0-9]{0,9})-(?P<designation>[a-z]{1,40}(?:_[a-z]{1,40}){1,2})-(?P<kind>msg|doc\.gz|reply)\.gpg"
)

KINDS = ("msg", "doc.gz", "reply")

# Comfortably under the usual 255-byte NAME_MAX, leaving room for " (NNN)" on collisions.
MAX_NAME_BYTES = 200
# An "extension" longer than this is not one: keeping it would let a hostile name keep most of
# its length through truncation.
_MAX_EXT_CHARS = 16

# Windows/DOS device names: harmless on Linux, but decrypted files get copied to other machines
# (USB sticks, a Windows workstation) where "CON.txt" opens the console instead of a file.
_DEVICE_NAMES = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"]
    + [f"{p}{d}" for p in ("COM", "LPT") for d in "0123456789\u00b9\u00b2\u00b3"]
)
# Characters Windows forbids in names; replaced so a copy to NTFS/FAT doesn't fail or mangle.
_WINDOWS_FORBIDDEN = frozenset('<>:"|?*')
# Control, format (e.g. U+202E right-to-left override, used to disguise "exe.pdf"), surrogate,
# private-use and line/paragraph separators: never wanted in a file name.
_BAD_CATEGORIES = frozenset(["Cc", "Cf", "Cs", "Co", "Zl", "Zp"])


@dataclass(frozen=True)
class SubmissionName:
    """A parsed ``N-<designation>-<kind>.gpg`` server file name."""

    number: int
    designation: str  # "amber_quiet_lantern" or "brave_otter": [a-z_] only, always one safe path component
    kind: str  # one of KINDS

    def default_output_name(self) -> str:
        """The output name for messages and replies, and for documents without an FNAME."""
        return {"msg": f"{self.number}-msg.txt", "reply": f"{self.number}-reply.txt"}.get(
            self.kind, f"{self.number}-document"
        )


def parse_submission_name(raw: str) -> SubmissionName | None:
    """Parse the last component of ``raw`` (a path or zip entry name); ``None`` if it isn't one.

    Only the last component is looked at, split on both separators: a zip entry called
    ``..\\..\\1-brave_otter-msg.gpg`` must not smuggle its directories into the output path.
    """
    base = re.split(r"[/\\]", raw)[-1]
    m = _SUBMISSION_RE.fullmatch(base)
    if m is None:
        return None
    return SubmissionName(int(m["number"]), m["designation"], m["kind"])


def split_ext(name: str) -> tuple[str, str]:
    """``("report", ".pdf")``; ``("archive", ".tar.gz")``; ``("README", "")``."""
    dot = name.rfind(".")
    if dot <= 0 or len(name) - dot > _MAX_EXT_CHARS:
        return name, ""
    stem, ext = name[:dot], name[dot:]
    if stem.lower().endswith(".tar") and len(stem) > 4:
        stem, ext = stem[:-4], stem[-4:] + ext
    return stem, ext


def numbered(name: str, n: int) -> str:
    """The n-th candidate for ``name`` when it is taken: ``report (2).pdf``."""
    if n <= 1:
        return name
    stem, ext = split_ext(name)
    return f"{stem} ({n}){ext}"


def _truncate(name: str, limit: int) -> str:
    if len(name.encode("utf-8")) <= limit:
        return name
    stem, ext = split_ext(name)
    budget = limit - len(ext.encode("utf-8"))
    # Cut on a byte budget, then drop a partial trailing UTF-8 sequence.
    stem = stem.encode("utf-8")[:budget].decode("utf-8", "ignore").rstrip(" .")
    return stem + ext if stem else ""


def sanitise_filename(raw: str | bytes | None, fallback: str) -> str:
    """Make ``raw`` a single, safe, portable path component; ``fallback`` if nothing is left.

    The result never contains a separator or control character, never starts with a dot
    (no dot files, no ``..``), a dash (not an option to the operator's next shell command) or
    a space, is not a device name, and is at most ``MAX_NAME_BYTES`` UTF-8 bytes. Separators
    are turned into ``_`` rather than cut away, so ``../../etc/passwd`` becomes
    ``etc_passwd``: visibly odd, but nothing of the source's name is silently lost.
    """
    if raw is None:
        return fallback
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    text = unicodedata.normalize("NFC", raw)
    text = "".join(
        "_" if (unicodedata.category(c) in _BAD_CATEGORIES or c in _WINDOWS_FORBIDDEN) else c
        for c in text
    )
    # Path components that are empty, "." or ".." (or only dots/spaces, which Windows treats
    # alike) are dropped; the rest are joined into one component.
    parts = [p for p in re.split(r"[/\\]", text) if p.strip(". ")]
    text = "_".join(parts)
    text = text.lstrip(". ").rstrip(". ")
    if text.startswith("-"):
        text = "_" + text
    if text.split(".")[0].rstrip(" ").upper() in _DEVICE_NAMES:
        text = "_" + text
    text = _truncate(text, MAX_NAME_BYTES)
    return text or fallback
