"""``twistd deaddrop``: options and ``makeService``.

The options are ``Config``'s fields that say how they are given (``deaddrop.config.Option``): name,
help, default and type are written there once; this module only reads them, for twistd's
command line and for ``deaddrop.tac``'s ``DEADDROP_*`` environment.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Mapping, Sequence

from twisted.python import usage

from deaddrop.config import Config, ConfigError, Option


def _config_options() -> list[tuple[dataclasses.Field, Option]]:
    return [(f, f.metadata["option"]) for f in dataclasses.fields(Config) if "option" in f.metadata]


def _option_name(f: dataclasses.Field) -> str:
    return f.name.replace("_", "-")


def _twistd_parameter(f: dataclasses.Field, option: Option) -> list[Any]:
    """``[name, short, default, help(, coerce)]``: the default as the command line writes it."""
    default: Any
    if option.text is not None:
        default = option.text
    elif f.default is dataclasses.MISSING and callable(f.default_factory):
        default = f.default_factory()
    else:
        default = f.default
    return [_option_name(f), None, default, option.help, *([option.coerce] if option.coerce else [])]


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = (
        "Run a DeadDrop instance: the source interface (published as a Tor onion service) and "
        "the journalist interface (mutual TLS, for the newsroom VPN)."
    )
    optParameters = [_twistd_parameter(f, option) for f, option in _config_options() if not option.flag]
    optFlags = [[_option_name(f), None, option.help] for f, option in _config_options() if option.flag]

    def __init__(self) -> None:
        super().__init__()
        self["tor-option"] = []

    def opt_tor_option(self, value: str) -> None:
        """Extra torrc setting KEY=VALUE (repeatable)."""
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise usage.UsageError(f"--tor-option wants KEY=VALUE, not {value!r}")
        self["tor-option"].append((key.strip(), val.strip()))

    def postOptions(self) -> None:
        try:
            self.config = config_from_options(self).validated()
        except (ConfigError, ValueError) as e:
            raise usage.UsageError(str(e))


def config_from_options(options: Any) -> Config:
    values: dict[str, Any] = {}
    for f, option in _config_options():
        value = options[_option_name(f)]
        if option.flag:
            value = bool(value)
        elif value is not None:
            value = option.coerce(value) if option.coerce else value
            value = option.parse(value) if option.parse else value
        values[f.name] = value
    return Config(**values, tor_options=tuple(options["tor-option"]), start_options=given_options(options))


# Options naming a file: recorded absolute, so the start command restore prints works from anywhere.
_FILE_OPTIONS = {"journalist-ca", "journalist-crl", "journalist-tls-cert", "journalist-tls-key", "tor-binary",
                 "smtp-tls-ca", "smtp-password-file"}
# Not part of a restored instance's start: the data dir is the restore target, the key is in it.
_NOT_RECORDED = {"data-dir", "submission-key", "replace-submission-key"}


def given_options(options: Any) -> tuple[str, ...]:
    """The options given that differ from their defaults, as arguments (for ``Config.start_options``)."""
    argv: list[str] = []
    for name, _short, default, *_ in Options.optParameters:
        value = options[name]
        if name in _NOT_RECORDED or value is None or value == default:
            continue
        argv += [f"--{name}", os.path.abspath(value) if name in _FILE_OPTIONS else str(value)]
    for name, *_ in Options.optFlags:
        if name not in _NOT_RECORDED and options[name]:
            argv.append(f"--{name}")
    for key, value in options["tor-option"]:
        argv += ["--tor-option", f"{key}={value}"]
    return tuple(argv)


def development_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split recorded start options (``given_options``) into (kept, dropped): dropped are those the
    Config fields mark as for development only (``Option.development``: ``--demo``, ``--tor none``),
    which a restored production instance must not inherit."""
    marks = {f"--{_option_name(f)}": (option.flag, option.development) for f, option in _config_options()}
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        name, _, inline = argv[i].partition("=")
        flag, development = marks.get(name, (False, False))
        takes_value = not flag and not inline and (name in marks or name == "--tor-option")
        words = list(argv[i:i + 2]) if takes_value else [argv[i]]
        value = inline or (words[1] if takes_value and len(words) > 1 else "")
        for_development = development is True or (isinstance(development, tuple) and value in development)
        (dropped if for_development else kept).extend(words)
        i += len(words)
    return kept, dropped


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def environment_name(option: str) -> str:
    """``--some-option`` is read from ``DEADDROP_SOME_OPTION`` by ``deaddrop.tac``."""
    return "DEADDROP_" + option.upper().replace("-", "_")


# ``DEADDROP_*`` variables that are not the server's: the other tools' (``deaddrop-journalist``,
# ``deaddrop-svs``), the test suite's and the benchmarks'. Any other ``DEADDROP_*`` is refused.
OTHER_TOOLS_VARIABLES = frozenset({
    "DEADDROP_URL", "DEADDROP_CERT", "DEADDROP_CA", "DEADDROP_USERNAME",  # deaddrop-journalist
    "DEADDROP_SVS_HOME",  # deaddrop-svs
    "DEADDROP_KEEP_TORNET", "DEADDROP_BENCH_ARGV", "DEADDROP_BENCH_RUN_LOG",  # tests and bench
})
OTHER_TOOLS_PREFIX = "DEADDROP_TEST_"
_TOR_OPTION_VARIABLES = (environment_name("tor-option"), environment_name("tor-options"))


def argv_from_environment(environ: Mapping[str, str]) -> list[str]:
    """The ``twistd deaddrop`` arguments ``deaddrop.tac`` takes from the environment.

    Every option of ``Options`` maps (parameters, flags, ``--tor-option``), so a new option
    works from the environment without touching the .tac. A ``DEADDROP_*`` variable that is no
    option (a misspelt one) and a number that is none are refused in one line; the other tools'
    variables (``OTHER_TOOLS_VARIABLES``) are left alone.
    """
    parameters = {environment_name(str(p[0])): p for p in Options.optParameters}
    flags = {environment_name(str(f[0])): f[0] for f in Options.optFlags}
    for key in sorted(environ):
        if (key.startswith("DEADDROP_") and key not in parameters and key not in flags
                and key not in _TOR_OPTION_VARIABLES and key not in OTHER_TOOLS_VARIABLES
                and not key.startswith(OTHER_TOOLS_PREFIX)):
            raise usage.UsageError(f"{key} is not a setting of the server: each option --some-option is "
                                   "DEADDROP_SOME_OPTION (see twistd deaddrop --help)")
    argv: list[str] = []
    for key, (name, _short, _default, _help, *coerce) in parameters.items():
        value = environ.get(key)
        if value is None:
            continue
        if coerce:
            try:
                coerce[0](value)
            except ValueError:
                kind = "a whole number" if coerce[0] is int else "a number"
                raise usage.UsageError(f"{key} must be {kind}, not {value!r}") from None
        argv.append(f"--{name}={value}")
    for key, name in flags.items():
        value = environ.get(key)
        if value is None:
            continue
        if value.strip().lower() in _TRUE:
            argv.append(f"--{name}")
        elif value.strip().lower() not in _FALSE:
            raise usage.UsageError(f"{key} must be 1/true/yes or 0/false/no, not {value!r}")
    # Repeatable: KEY=VALUE items separated by commas or newlines.
    for key in _TOR_OPTION_VARIABLES:
        for item in environ.get(key, "").replace("\n", ",").split(","):
            if item.strip():
                argv.append(f"--tor-option={item.strip()}")
    return argv


def makeService(options: Options) -> Any:
    from deaddrop.crypto.gpg import GpgError
    from deaddrop.service import build_service

    from twisted.internet import reactor

    try:
        service = build_service(options.config, reactor)
    except (ConfigError, GpgError, OSError, ValueError) as e:
        sys.stderr.write(f"deaddrop: error: {e}\n")
        raise SystemExit(1)

    def exit_with_status() -> None:
        # twistd always exits 0 after reactor.stop(); a fatal start-up error must not.
        if service.exit_status:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(service.exit_status)

    reactor.addSystemEventTrigger("after", "shutdown", exit_with_status)
    return service
