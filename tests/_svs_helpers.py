"""Fixtures for the SVS tests: short temp dirs, gzip streams with UTF-8 FNAMEs, gpg encryption.

The fixtures are built here, independently of the code under test, in the exact format the
server stores: gzip (RFC 1952, written by hand because the stdlib encodes FNAME as Latin-1)
inside OpenPGP encrypted with ``--compress-algo none``.
"""
from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from contextlib import contextmanager
from typing import Iterator, Sequence

from deaddrop.svs import _sandbox, cli


def short_tempdir(testcase, prefix: str = "ddsvs-") -> str:  # type: ignore[no-untyped-def]
    """A temp dir under /tmp (gpg-agent's socket path is limited to 108 bytes), removed after.

    Any gpg-agent started for a GnuPG home below it is killed first.
    """
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")

    def cleanup() -> None:
        for dirpath, dirnames, filenames in os.walk(path):
            if "pubring.kbx" in filenames or "private-keys-v1.d" in dirnames:
                kill_agent(dirpath)
        shutil.rmtree(path, ignore_errors=True)

    testcase.addCleanup(cleanup)
    return path


def kill_agent(gnupg_home: str) -> None:
    subprocess.run(["gpgconf", "--homedir", gnupg_home, "--kill", "gpg-agent"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def make_gzip(data: bytes, fname: bytes | None = None, level: int = 6, *, comment: bytes | None = None,
              extra: bytes | None = None, header_crc: bool = False, mtime: int = 0) -> bytes:
    """A single-member gzip stream with an arbitrary (e.g. UTF-8, or hostile) FNAME."""
    flags = 0
    tail = b""
    if extra is not None:
        flags |= 0x04
        tail += struct.pack("<H", len(extra)) + extra
    if fname is not None:
        assert b"\0" not in fname, "FNAME is NUL-terminated: it cannot contain NUL"
        flags |= 0x08
        tail += fname + b"\0"
    if comment is not None:
        flags |= 0x10
        tail += comment + b"\0"
    if header_crc:
        flags |= 0x02
    header = b"\x1f\x8b\x08" + bytes([flags]) + struct.pack("<I", mtime) + b"\x00\xff" + tail
    if header_crc:
        header += struct.pack("<H", zlib.crc32(header) & 0xFFFF)
    comp = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = comp.compress(data) + comp.flush()
    return header + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def gpg_encrypt(scratch_home: str, plaintext: bytes, recipient_files: Sequence[str], out_path: str) -> str:
    """Encrypt like the server does: to the given public key files, no OpenPGP compression."""
    args = ["gpg", "--batch", "--no-tty", "--homedir", scratch_home, "--compress-algo", "none",
            "--yes", "--output", out_path]
    for f in recipient_files:
        args += ["--recipient-file", f]
    subprocess.run(args + ["--encrypt"], input=plaintext, check=True, capture_output=True)
    return out_path


def gpg_decrypt(gnupg_home: str, path: str) -> subprocess.CompletedProcess:
    """Decrypt with a plain gpg call (to check what the tool wrote), never raising."""
    return subprocess.run(
        ["gpg", "--batch", "--no-tty", "--homedir", gnupg_home, "--pinentry-mode", "loopback",
         "--status-fd", "2", "--decrypt", path],
        capture_output=True, check=False,
    )


def scratch_gpg_home(testcase) -> str:  # type: ignore[no-untyped-def]
    home = os.path.join(short_tempdir(testcase, "ddsvs-x-"), "g")
    os.mkdir(home, 0o700)
    return home


@contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = old


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``deaddrop-svs argv...`` in-process: (exit code, stdout, stderr)."""
    with captured() as (out, err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def tree(root: str) -> set[str]:
    """Every path below ``root`` (relative), to prove nothing appeared where it shouldn't."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            found.add(os.path.relpath(os.path.join(dirpath, n), root))
    return found


def let_spy_report(testcase, fifo: str) -> None:  # type: ignore[no-untyped-def]
    """The sandbox mat2 runs in, plus the test's ``fifo`` (writable), so that a spy standing in
    for mat2 can report out of it; nothing else of the walls changes."""
    testcase.patch(_sandbox, "_sandbox", None)
    walls = _sandbox.sandbox()
    if walls.bwrap is not None:
        walls.bwrap = walls.bwrap + ["--bind", fifo, fifo]


def real_mat2(testcase) -> str:  # type: ignore[no-untyped-def]
    """The mat2 on PATH before any spy stands in front of it."""
    found = shutil.which("mat2")
    testcase.assertIsNotNone(found)
    return found


def spy_mat2(testcase, folder: str, body: str) -> None:  # type: ignore[no-untyped-def]
    """A shell script ``body`` standing in for mat2 (first on PATH) until the test ends; it
    lives in ``folder/bin``."""
    spy_dir = os.path.join(folder, "bin")
    os.makedirs(spy_dir, exist_ok=True)
    spy = os.path.join(spy_dir, "mat2")
    with open(spy, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(spy, 0o755)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = spy_dir + os.pathsep + old_path
    testcase.addCleanup(os.environ.__setitem__, "PATH", old_path)
