"""One typed configuration, built once from twistd options (or the environment, for the
``.tac``), validated, and passed down. No module reads globals or the environment itself."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from deaddrop.crypto.kdf import KdfCost

MiB = 1024 * 1024

# The line shown when the server is started without a submission key.
NO_KEY_HELP = (
    "no submission key: on the offline Secure Viewing Station run "
    "`deaddrop-svs --home DIR init`, copy DIR/submission-public.asc here and start with "
    "--submission-key submission-public.asc (or run ./scripts/demo for a throwaway demo)"
)


class ConfigError(ValueError):
    """An invalid setting; the message is one line an admin can act on."""


@dataclass(frozen=True)
class Config:
    data_dir: str = "./deaddrop-data"
    source_listen: str = "tcp:8080:interface=127.0.0.1"
    journalist_listen: str = "tcp:8443:interface=127.0.0.1"
    tor: str = "launch"
    tor_binary: str | None = None
    tor_options: tuple[tuple[str, str], ...] = ()
    tor_pow: bool = True  # --tor-pow on|off: Tor's proof-of-work defence on the source onion
    journalist_onion: bool = False
    submission_key: str | None = None
    codename_words: int = 7
    max_upload_size: int = 500 * MiB
    crypto_threads: int = 4
    stream_threads: int = 256  # mostly idle pumps waiting for a slow Tor upload
    uploads_per_session: int = 2
    kdf_cost: KdfCost = field(default_factory=lambda: KdfCost.parse("default"))
    gpg_binary: str = "gpg"
    journalist_ca: str | None = None
    journalist_crl: str | None = None
    journalist_tls_cert: str | None = None
    journalist_tls_key: str | None = None
    journalist_explain_missing_cert: bool = False
    journalist_connection_max_age: float = 3600.0
    organisation_name: str = "DeadDrop"
    demo: bool = False
    source_session_idle: float = 30 * 60.0
    source_session_lifetime: float = 4 * 3600.0
    journalist_session_idle: float = 30 * 60.0
    journalist_session_lifetime: float = 8 * 3600.0
    source_login_failures_per_minute: int = 30

    def path(self, *parts: str) -> str:
        return os.path.join(self.data_dir, *parts)

    def validated(self) -> "Config":
        if not 4 <= self.codename_words <= 16:
            raise ConfigError("--codename-words must be between 4 and 16")
        if self.max_upload_size < 1024:
            raise ConfigError("--max-upload-size must be at least 1024 bytes")
        if not 1 <= self.crypto_threads <= 256:
            raise ConfigError("--crypto-threads must be between 1 and 256")
        if not 10 <= self.journalist_connection_max_age <= 7 * 86400:
            raise ConfigError("--journalist-connection-max-age must be between 10 seconds and 7 days")
        if self.submission_key is None:
            raise ConfigError(NO_KEY_HELP)
        if not os.path.isfile(self.submission_key):
            raise ConfigError(f"--submission-key {self.submission_key}: no such file")
        from deaddrop.tor import check_tor_option, is_loopback_endpoint, parse_tor_mode

        try:
            tor = parse_tor_mode(self.tor)
            for key, value in self.tor_options:
                check_tor_option(key, value)
        except ValueError as e:
            raise ConfigError(str(e))
        if tor != "none":
            # Reachable through the onion and nowhere else.
            if not is_loopback_endpoint(self.source_listen):
                raise ConfigError(
                    f"--source-listen {self.source_listen} is not loopback: with Tor the source interface "
                    "must be reachable only through the onion (use tcp:PORT:interface=127.0.0.1 or unix:PATH)"
                )
            if self.journalist_onion and not is_loopback_endpoint(self.journalist_listen):
                raise ConfigError("--journalist-onion needs a loopback --journalist-listen")
        return replace(self, tor=tor, data_dir=os.path.abspath(self.data_dir),
                       submission_key=os.path.abspath(self.submission_key))

    def with_changes(self, **changes: Any) -> "Config":
        return replace(self, **changes)


def option_names() -> list[str]:
    return [f.name for f in fields(Config)]


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``DEADDROP_DATA_DIR=...`` -> ``{"data-dir": ...}``: the .tac's view of the options."""
    found = {}
    for name in option_names():
        key = "DEADDROP_" + name.upper()
        if key in environ:
            found[name.replace("_", "-")] = environ[key]
    return found
