"""``deaddrop-svs``: the offline Secure Viewing Station tool.

    deaddrop-svs --home DIR init [--algorithm curve25519|rsa4096] [--passphrase-file F]
    deaddrop-svs --home DIR decrypt INPUT... --out OUTDIR [--progress] [--max-output-size BYTES]
                 [--passphrase-file F]
    deaddrop-svs --home DIR export FILE... --to-key KEY.asc --out OUTDIR [--passphrase-file F]
                 [--keep-metadata FILE]...
    deaddrop-svs --home DIR scrub FILE... --out OUTDIR [--keep-metadata FILE]...

Exit codes: 0 all went well, 1 an error or any file failed, 2 usage error. This program
never opens a network connection; everything goes through the local ``gpg`` and ``mat2``
binaries (mat2 walled in by bubblewrap: it sees the system's programs and its own RAM
folder, no network). ``--home`` (or ``$DEADDROP_SVS_HOME``) is required by every command: the
home is never read as an input, and no OUTDIR may lie inside it.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from deaddrop.svs._errors import SvsError
from deaddrop.svs._gnupg import ALGORITHMS, fingerprint_groups, read_passphrase_file
from deaddrop.svs.home import Home

PROG = "deaddrop-svs"
HOME_ENV = "DEADDROP_SVS_HOME"


def build_parser() -> argparse.ArgumentParser:
    # --home is accepted before or after the command; SUPPRESS keeps a sub-parser's unset
    # default from clobbering a value given before the command.
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument("--home", metavar="DIR", default=argparse.SUPPRESS,
                      help=f"the SVS home (key pair); default ${HOME_ENV}")
    passphrase = argparse.ArgumentParser(add_help=False)
    passphrase.add_argument("--passphrase-file", metavar="F",
                            help="file whose first line is the submission key's passphrase")

    parser = argparse.ArgumentParser(prog=PROG, parents=[home],
                                     description="DeadDrop Secure Viewing Station (offline).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("init", parents=[home, passphrase], help="create the submission key pair")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="curve25519")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("decrypt", parents=[home, passphrase],
                       help="decrypt downloaded submissions (.gpg files, folders, zips)")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("--out", required=True, metavar="OUTDIR")
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    p.add_argument("--max-output-size", type=_positive_int, default=None, metavar="BYTES",
                   help="largest plaintext one file may decrypt to (default: 2 x the server's "
                        "default --max-upload-size); bigger ones FAIL and leave nothing")
    p.set_defaults(func=cmd_decrypt)

    p = sub.add_parser("export", parents=[home, passphrase],
                       help="encrypt files to a journalist's personal public key")
    p.add_argument("inputs", nargs="+", metavar="FILE")
    p.add_argument("--to-key", required=True, metavar="KEY.asc")
    p.add_argument("--out", required=True, metavar="OUTDIR")
    _keep_metadata(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("scrub", parents=[home],
                       help="remove metadata with mat2 into OUTDIR, without encrypting (for publication)")
    p.add_argument("inputs", nargs="+", metavar="FILE")
    p.add_argument("--out", required=True, metavar="OUTDIR")
    _keep_metadata(p)
    p.set_defaults(func=cmd_scrub)
    return parser


def _keep_metadata(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-metadata", action="append", default=[], metavar="FILE",
                        help="let FILE leave unchanged, metadata and all (repeatable); without it a "
                             "file mat2 cannot clean is refused")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 byte")
    return value


def _home(args: argparse.Namespace, parser: argparse.ArgumentParser, why: str = "") -> Home:
    path = getattr(args, "home", None) or os.environ.get(HOME_ENV)
    if not path:
        parser.error(f"--home DIR is required (or set ${HOME_ENV}){why}")
    return Home(path)


def _outside_home(home: Home, out: str, advice: str) -> None:
    """Refuse an OUTDIR inside the home: nothing there is ever read again, so whatever is
    written there could never be exported or published."""
    if home.holds(out):
        raise SvsError(f"--out {out} is inside the SVS home ({home.root}), where nothing is ever read again "
                       f"(export and scrub refuse it: the secret key lives there). {advice}")


def _decrypt_advice() -> str:
    from deaddrop.svs._mat2 import ram_folders

    ram = ram_folders()
    if ram:
        base = "/dev/shm" if "/dev/shm" in ram else ram[0]  # the one every Debian has
        return (f"Decrypt into a folder outside it, e.g. --out {os.path.join(base, 'plain')} "
                "(RAM: never written to a disk, gone at power-off)")
    return "Decrypt into a folder outside it, on the station's encrypted storage"


def _passphrase(args: argparse.Namespace) -> bytes | None:
    return read_passphrase_file(args.passphrase_file) if args.passphrase_file else None


def cmd_init(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    home = _home(args, parser)
    fingerprint = home.init(args.algorithm, _passphrase(args))
    print(f"Created the submission key ({args.algorithm}) in {home.gnupg}")
    print(f"Fingerprint: {fingerprint_groups(fingerprint)}")
    print(f"Public key:  {home.public_key}")
    print("Give the public key to the server (--submission-key); check the fingerprint there.")
    return 0


def cmd_decrypt(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from deaddrop.svs._guard import InputGuard
    from deaddrop.svs._limit import DEFAULT_MAX_OUTPUT, OutputLimit
    from deaddrop.svs._outdir import OutDir
    from deaddrop.svs.decrypt import run_decrypt

    home = _home(args, parser)
    _outside_home(home, args.out, _decrypt_advice())
    gpg = home.open(_passphrase(args))
    try:
        out = OutDir(args.out)
        show = args.progress or sys.stderr.isatty()
        limit = OutputLimit(args.max_output_size or DEFAULT_MAX_OUTPUT)
        summary = run_decrypt(gpg, args.inputs, out, show_progress=show, guard=InputGuard(home.root), limit=limit)
    finally:
        gpg.kill_agent()  # drop the unlocked key as soon as we're done
    return 0 if summary.ok else 1


def cmd_export(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from deaddrop.svs._guard import InputGuard
    from deaddrop.svs.export import run_export

    home = _home(args, parser)
    _outside_home(home, args.out, "Export onto the stick that goes to the journalist's workstation.")
    passphrase = _passphrase(args)
    # The SVS key is only needed for server files, and to refuse exporting to itself; a
    # station without one can still encrypt plain files.
    own = home.fingerprints()
    svs = home.open(passphrase) if own else None
    try:
        summary = run_export(svs, args.to_key, args.inputs, args.out, own_fingerprints=own,
                             guard=InputGuard(home.root), keep_metadata=args.keep_metadata)
    finally:
        if svs is not None:
            svs.kill_agent()
    return 0 if summary.ok else 1


def cmd_scrub(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from deaddrop.svs._guard import InputGuard
    from deaddrop.svs.scrub import run_scrub

    # No key is needed, but the home must be known: nothing of it may be read as an input,
    # not even through a hard link an archive planted.
    home = _home(args, parser, ": scrub never reads the SVS home's files, not even through a hard link, "
                               "so it must know where that is")
    _outside_home(home, args.out, "Scrub into the publication folder.")
    guard = InputGuard(home.root)
    summary = run_scrub(args.inputs, args.out, keep_metadata=args.keep_metadata, guard=guard)
    return 0 if summary.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 for usage errors, 0 for --help
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    try:
        return int(args.func(args, parser))
    except SystemExit as e:  # parser.error() from a command
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    except SvsError as e:
        sys.stdout.flush()
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
