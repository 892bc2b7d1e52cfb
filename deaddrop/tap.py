"""``twistd deaddrop``: options and ``makeService``."""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from twisted.python import usage

from deaddrop.config import Config, ConfigError
from deaddrop.crypto.kdf import KdfCost
from deaddrop.limits import MiB
from deaddrop.tor.defences import parse_pow_switch


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = (
        "Run a DeadDrop instance: the source interface (published as a Tor onion service) and "
        "the journalist interface (mutual TLS, for the newsroom VPN)."
    )
    optParameters = [
        ["data-dir", None, "./deaddrop-data", "Directory for the store, database, keys and logs."],
        ["source-listen", None, "tcp:8080:interface=127.0.0.1", "Endpoint for the source interface."],
        ["journalist-listen", None, "tcp:8443:interface=127.0.0.1", "Endpoint for the journalist interface (wrapped in TLS)."],
        ["tor", None, "launch", "launch (start Tor), control:ENDPOINT (attach to a running Tor) or none (development)."],
        ["tor-binary", None, None, "The tor binary to launch (default: found on PATH)."],
        ["tor-pow", None, "on", "on|off: Tor's proof-of-work defence on the source onion (needs Tor's pow module)."],
        ["submission-key", None, None, "The SVS's armored public submission key."],
        ["codename-words", None, 7, "Words in a new codename.", int],
        ["max-upload-size", None, 500 * MiB, "Largest accepted upload, in bytes.", int],
        ["disk-reserve", None, "2GB,5%",
         "Free space uploads never take: a size (2GB, 500MB), a share of the disk (5%), or both (the larger is kept)."],
        ["crypto-threads", None, min(8, max(2, os.cpu_count() or 2)), "Threads for Argon2id and GnuPG work.", int],
        ["kdf-cost", None, "default", "Argon2id cost: 'default' or OPS:MEMBYTES."],
        ["gpg-binary", None, "gpg", "The gpg binary."],
        ["journalist-ca", None, None, "CA certificate that signs journalists' client certificates."],
        ["journalist-crl", None, None, "Certificate revocation list for journalists' certificates (reloaded on change)."],
        ["journalist-tls-cert", None, None, "The journalist listener's certificate (default: made in the data dir)."],
        ["journalist-tls-key", None, None, "The journalist listener's key (default: made in the data dir)."],
        ["journalist-connection-max-age", None, 3600.0,
         "Seconds after which a journalist connection is closed (the browser reconnects).", float],
        ["organisation-name", None, "DeadDrop", "The name sources see (admins can change it later)."],
        ["source-session-minutes", None, 120, "A source is logged out this long after logging in (absolute).", int],
        ["journalist-session-minutes", None, 480,
         "A journalist is logged out this long after logging in (and after 30 idle minutes).", int],
        ["retention-days", None, None,
         "Delete submissions and replies older than this many days, daily (default: keep; admins can change it).",
         int],
        ["pending-source-hours", None, 24.0, "Delete a source that has submitted nothing after this many hours.", float],
        ["max-pending-sources", None, 100_000,
         "Keep at most this many sources that have submitted nothing (the oldest go first).", int],
        ["smtp-server", None, None, "HOST:PORT of the mail server for the encrypted digest (default: no digest)."],
        ["smtp-from", None, None, "The digest's sender address."],
        ["smtp-tls", None, "starttls", "starttls (required, certificate verified) or none (loopback servers only)."],
        ["smtp-tls-ca", None, None, "PEM CA certificate(s) to verify the mail server with (default: the system's)."],
        ["notify-interval-minutes", None, 1440,
         "A digest every this many minutes, at fixed times (1440: daily at 00:00 UTC).", int],
    ]
    optFlags = [
        ["journalist-onion", None, "Also publish the journalist interface as an onion service with client authorisation."],
        ["demo", None, "Mark this instance as a demo everywhere (the README's demo uses it)."],
        ["replace-submission-key", None,
         "Accept a --submission-key other than the one the data dir holds (a security event)."],
        ["journalist-explain-missing-cert", None,
         "Show a browser without a client certificate one static page saying it needs one (off: refuse the handshake)."],
    ]

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
    return Config(
        data_dir=options["data-dir"],
        source_listen=options["source-listen"],
        journalist_listen=options["journalist-listen"],
        tor=options["tor"],
        tor_binary=options["tor-binary"],
        tor_options=tuple(options["tor-option"]),
        tor_pow=parse_pow_switch(options["tor-pow"]),
        journalist_onion=bool(options["journalist-onion"]),
        submission_key=options["submission-key"],
        replace_submission_key=bool(options["replace-submission-key"]),
        start_options=given_options(options),
        codename_words=int(options["codename-words"]),
        max_upload_size=int(options["max-upload-size"]),
        disk_reserve=options["disk-reserve"],
        crypto_threads=int(options["crypto-threads"]),
        kdf_cost=KdfCost.parse(options["kdf-cost"]),
        gpg_binary=options["gpg-binary"],
        journalist_ca=options["journalist-ca"],
        journalist_crl=options["journalist-crl"],
        journalist_tls_cert=options["journalist-tls-cert"],
        journalist_tls_key=options["journalist-tls-key"],
        journalist_explain_missing_cert=bool(options["journalist-explain-missing-cert"]),
        journalist_connection_max_age=float(options["journalist-connection-max-age"]),
        organisation_name=options["organisation-name"],
        demo=bool(options["demo"]),
        source_session_minutes=int(options["source-session-minutes"]),
        journalist_session_minutes=int(options["journalist-session-minutes"]),
        retention_days=None if options["retention-days"] is None else int(options["retention-days"]),
        pending_source_hours=float(options["pending-source-hours"]),
        max_pending_sources=int(options["max-pending-sources"]),
        smtp_server=options["smtp-server"],
        smtp_from=options["smtp-from"],
        smtp_tls=options["smtp-tls"],
        smtp_tls_ca=options["smtp-tls-ca"],
        notify_interval_minutes=int(options["notify-interval-minutes"]),
    )


# Options naming a file: recorded absolute, so the start command restore prints works from anywhere.
_FILE_OPTIONS = {"journalist-ca", "journalist-crl", "journalist-tls-cert", "journalist-tls-key", "tor-binary",
                 "smtp-tls-ca"}
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


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def environment_name(option: str) -> str:
    """``--some-option`` is read from ``DEADDROP_SOME_OPTION`` by ``deaddrop.tac``."""
    return "DEADDROP_" + option.upper().replace("-", "_")


def argv_from_environment(environ: Mapping[str, str]) -> list[str]:
    """The ``twistd deaddrop`` arguments ``deaddrop.tac`` takes from the environment.

    Every option of ``Options`` maps (parameters, flags, ``--tor-option``), so a new option
    works from the environment without touching the .tac; other ``DEADDROP_*`` variables
    (used by the workstation and SVS tools) are not options and are left alone.
    """
    argv: list[str] = []
    for name, *_ in Options.optParameters:
        value = environ.get(environment_name(name))
        if value is not None:
            argv.append(f"--{name}={value}")
    for name, *_ in Options.optFlags:
        value = environ.get(environment_name(name))
        if value is None:
            continue
        if value.strip().lower() in _TRUE:
            argv.append(f"--{name}")
        elif value.strip().lower() not in _FALSE:
            raise usage.UsageError(f"{environment_name(name)} must be 1/true/yes or 0/false/no, not {value!r}")
    # Repeatable: KEY=VALUE items separated by commas or newlines.
    for key in (environment_name("tor-option"), environment_name("tor-options")):
        for item in environ.get(key, "").replace("\n", ",").split(","):
            if item.strip():
                argv.append(f"--tor-option={item.strip()}")
    return argv


def makeService(options: Options) -> Any:
    from deaddrop.crypto.gpg import GpgError
    from deaddrop.server import build_service

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
