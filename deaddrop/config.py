"""One typed configuration, built once from twistd options (or the environment, for the
``.tac``), validated, and passed down. No module reads globals or the environment itself.

Each field that is a ``twistd deaddrop`` option says so here (``_option``, ``_flag``): its help and
default are written once, and ``deaddrop.tap`` derives the command line and the ``.tac``'s
``DEADDROP_*`` variables from them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from deaddrop.crypto.kdf import KdfCost
from deaddrop.limits import MAX_UPLOAD_SIZE

# The line shown when the server is started without a submission key.
NO_KEY_HELP = (
    "no submission key: on the offline Secure Viewing Station run "
    "`deaddrop-svs --home DIR init`, copy DIR/submission-public.asc here and start with "
    "--submission-key submission-public.asc (needed at the first start only: the data dir keeps a copy; "
    "or run ./scripts/demo for a throwaway demo)"
)


class ConfigError(ValueError):
    """An invalid setting; the message is one line an admin can act on."""


@dataclass(frozen=True)
class Option:
    """How a ``Config`` field is given to ``twistd deaddrop``: as ``--NAME`` (the field's name with
    dashes) and, through ``deaddrop.tac``, as ``DEADDROP_NAME``. The field's default is the option's."""

    help: str
    flag: bool = False  # on when given (``--demo``); the field is a bool
    coerce: Callable[[str], Any] | None = None  # the command line's text -> a number (None: text)
    text: str | None = None  # the default as written on the command line, where the field holds it parsed
    parse: Callable[[Any], Any] | None = None  # the option's value -> the field's (with ``text``)
    # For development only: the flag itself (True) or these values as written (``--tor none``).
    # A restored instance's start line leaves them out (``deaddrop.tap.development_options``).
    development: bool | tuple[str, ...] = False


def _option(default: Any, help: str, **how: Any) -> Any:
    """A ``Config`` field that is also a ``twistd deaddrop`` option."""
    if "coerce" not in how and isinstance(default, (int, float)) and not isinstance(default, bool):
        how["coerce"] = type(default)
    made = {"default_factory": default} if callable(default) else {"default": default}
    return field(**made, metadata={"option": Option(help, **how)})


def _flag(help: str, **how: Any) -> Any:
    return field(default=False, metadata={"option": Option(help, flag=True, **how)})


def _default_crypto_threads() -> int:
    return min(8, max(2, os.cpu_count() or 2))


def _pow_switch(value: str) -> bool:
    from deaddrop.tor.defences import parse_pow_switch

    return parse_pow_switch(value)


def _default_kdf_cost() -> KdfCost:
    return KdfCost.parse("default")


@dataclass(frozen=True)
class Config:
    # Fields made with ``_option``/``_flag`` are the ``twistd deaddrop`` options, in ``--help``'s order.
    data_dir: str = _option("./deaddrop-data", "Directory for the store, database, keys and logs.")
    source_listen: str = _option("tcp:8080:interface=127.0.0.1", "Endpoint for the source interface.")
    journalist_listen: str = _option("tcp:8443:interface=127.0.0.1",
                                     "Endpoint for the journalist interface (wrapped in TLS).")
    tor: str = _option("launch", "launch (start Tor), control:ENDPOINT (attach to a running Tor) or none (development).",
                       development=("none",))
    tor_binary: str | None = _option(None, "The tor binary to launch (default: found on PATH).")
    tor_options: tuple[tuple[str, str], ...] = ()  # --tor-option KEY=VALUE, repeatable (``tap.Options``)
    tor_pow: bool = _option(True, "on|off: Tor's proof-of-work defence on the source onion (needs Tor's pow module).",
                            text="on", parse=_pow_switch)
    journalist_onion: bool = _flag("Also publish the journalist interface as an onion service with client authorisation.")
    demo: bool = _flag("Mark this instance as a demo everywhere (the README's demo uses it).", development=True)
    # None: the copy the data dir holds (deaddrop.submission_key)
    submission_key: str | None = _option(None, "The SVS's armored public submission key.")
    replace_submission_key: bool = _flag("Accept a --submission-key other than the one the data dir holds (a security event).")
    codename_words: int = _option(7, "Words in a new codename.")
    max_upload_size: int = _option(MAX_UPLOAD_SIZE, "Largest accepted upload, in bytes.")
    # Kept free on the store's file system: uploads that would eat into it are refused at once.
    # The larger of 2 GB and 5% (see deaddrop.admission.disk_space).
    disk_reserve: str = _option("2GB,5%", "Free space uploads never take: a size (2GB, 500MB), a share of the disk "
                                "(5%), or both (the larger is kept).")
    crypto_threads: int = _option(_default_crypto_threads, "Threads for Argon2id and GnuPG work.", coerce=int)
    stream_threads: int = 256  # mostly idle pumps waiting for a slow Tor upload
    uploads_per_source: int = 2  # uploads in flight per source identity (not per session)
    message_threads: int = 4  # text-only parts: a pool of their own, never behind uploads
    kdf_cost: KdfCost = _option(_default_kdf_cost, "Argon2id cost: 'default' or OPS:MEMBYTES.",
                                text="default", parse=KdfCost.parse)
    gpg_binary: str = _option("gpg", "The gpg binary.")
    journalist_ca: str | None = _option(None, "CA certificate that signs journalists' client certificates.")
    journalist_crl: str | None = _option(
        None, "Certificate revocation list for journalists' certificates (reloaded on change).")
    journalist_tls_cert: str | None = _option(
        None, "The journalist listener's certificate (default: made in the data dir).")
    journalist_tls_key: str | None = _option(None, "The journalist listener's key (default: made in the data dir).")
    journalist_explain_missing_cert: bool = _flag(
        "Show a browser without a client certificate one static page saying it needs one (off: refuse the handshake).")
    journalist_connection_max_age: float = _option(
        3600.0, "Seconds after which a journalist connection is closed (the browser reconnects).")
    organisation_name: str = _option("DeadDrop", "The name sources see (admins can change it later).")
    # Session lengths in minutes. A source session ends that long after log-in whatever the
    # activity (absolute); a journalist's also ends after ``journalist_session_idle`` unused.
    source_session_minutes: int = _option(120, "A source is logged out this long after logging in (absolute).")
    journalist_session_minutes: int = _option(
        480, "A journalist is logged out this long after logging in (and after 30 idle minutes).")
    journalist_session_idle: float = 30 * 60.0
    # None: the absolute length (activity does not extend a source session); tests shorten it.
    source_session_idle: float | None = None
    # None: keep submissions and replies until deleted
    retention_days: int | None = _option(
        None, "Delete submissions and replies older than this many days, daily (default: keep; admins can change it).",
        coerce=int)
    # A source with no submission is purged after this; at most so many are kept (the oldest go first).
    pending_source_hours: float = _option(24.0, "Delete a source that has submitted nothing after this many hours.")
    max_pending_sources: int = _option(
        100_000, "Keep at most this many sources that have submitted nothing (the oldest go first).")
    source_login_failures_per_minute: int = 10  # per Tor circuit (LOCAL: one shared bucket)
    # The encrypted digest mail (off without smtp_server).
    smtp_server: str | None = _option(
        None, "HOST:PORT of the mail server for the encrypted digest (default: no digest).")
    smtp_from: str | None = _option(None, "The digest's sender address.")
    smtp_tls: str = _option("starttls", "starttls (required, certificate verified), tls (TLS from the first byte, "
                            "port 465) or none (loopback servers only).")
    smtp_tls_ca: str | None = _option(
        None, "PEM CA certificate(s) to verify the mail server with (default: the system's).")
    smtp_username: str | None = _option(None, "Log in to the mail server as this user (AUTH PLAIN or LOGIN, "
                                        "inside TLS only; needs --smtp-password-file).")
    smtp_password_file: str | None = _option(
        None, "File holding the mail server password on one line (mode 0600; with --smtp-username).")
    notify_interval_minutes: int = _option(
        1440, "A digest every this many minutes, at fixed times (1440: daily at 00:00 UTC).")
    # The twistd deaddrop options as given, less --data-dir and the key options: what a restored
    # instance is started with (``deaddrop-admin restore`` prints it; see DATA/status.json).
    start_options: tuple[str, ...] = ()

    @property
    def source_session_lifetime(self) -> float:
        return self.source_session_minutes * 60.0

    @property
    def source_session_idle_seconds(self) -> float:
        """How long a source session lasts unused: the idle option if set, else its lifetime."""
        return self.source_session_lifetime if self.source_session_idle is None else self.source_session_idle

    @property
    def journalist_session_lifetime(self) -> float:
        return self.journalist_session_minutes * 60.0

    def path(self, *parts: str) -> str:
        return os.path.join(self.data_dir, *parts)

    def validated(self) -> "Config":
        if not 4 <= self.codename_words <= 16:
            raise ConfigError("--codename-words must be between 4 and 16")
        from deaddrop.newsroom.codenames import WordListError, check_word_lists

        try:
            check_word_lists(self.codename_words)
        except WordListError as e:
            raise ConfigError(str(e)) from None
        for option, minutes in (("--source-session-minutes", self.source_session_minutes),
                                ("--journalist-session-minutes", self.journalist_session_minutes)):
            if not 5 <= minutes <= 7 * 24 * 60:
                raise ConfigError(f"{option} must be between 5 and 10080 (a week)")
        if self.retention_days is not None and not 1 <= self.retention_days <= 36500:
            raise ConfigError("--retention-days must be between 1 and 36500")
        if self.max_upload_size < 1024:
            raise ConfigError("--max-upload-size must be at least 1024 bytes")
        from deaddrop.admission.disk_space import DiskReserve

        try:
            DiskReserve.parse(self.disk_reserve)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not 1 <= self.crypto_threads <= 256:
            raise ConfigError("--crypto-threads must be between 1 and 256")
        if not 10 <= self.journalist_connection_max_age <= 7 * 86400:
            raise ConfigError("--journalist-connection-max-age must be between 10 seconds and 7 days")
        if not 0 < self.pending_source_hours <= 24 * 365:
            raise ConfigError("--pending-source-hours must be more than 0 and at most a year")
        if not 100 <= self.max_pending_sources <= 10_000_000:
            raise ConfigError("--max-pending-sources must be between 100 and 10000000")
        self._check_smtp()
        submission_key = self.submission_key
        if submission_key is None:
            if self.replace_submission_key:
                raise ConfigError("--replace-submission-key needs --submission-key NEW.asc (the SVS's new public key)")
            # The instance's own key, kept in the data dir since its first start.
            submission_key = os.path.join(self.data_dir, "submission-key.asc")
            if not os.path.isfile(submission_key):
                raise ConfigError(NO_KEY_HELP)
        elif not os.path.isfile(submission_key):
            raise ConfigError(f"--submission-key {submission_key}: no such file")
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
                       source_session_idle=self.source_session_idle_seconds,
                       submission_key=os.path.abspath(submission_key))

    def _check_smtp(self) -> None:
        from deaddrop.digest.smtp import TLS_MODES, is_loopback, parse_server, valid_address

        if not 1 <= self.notify_interval_minutes <= 31 * 24 * 60:
            raise ConfigError("--notify-interval-minutes must be between 1 and 44640 (31 days)")
        if self.smtp_tls not in TLS_MODES:
            raise ConfigError(f"--smtp-tls must be starttls, tls or none, not {self.smtp_tls!r}")
        if self.smtp_server is None:
            for given, option in ((self.smtp_from, "--smtp-from"), (self.smtp_username, "--smtp-username"),
                                  (self.smtp_password_file, "--smtp-password-file")):
                if given is not None:
                    raise ConfigError(f"{option} needs --smtp-server HOST:PORT")
            return
        try:
            host, _ = parse_server(self.smtp_server)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.smtp_from is None:
            raise ConfigError("--smtp-server needs --smtp-from ADDRESS (the digest's sender)")
        if not valid_address(self.smtp_from):
            raise ConfigError(f"--smtp-from {self.smtp_from!r} is not a plain address like deaddrop@example.org")
        if self.smtp_tls == "none" and not is_loopback(host):
            raise ConfigError(f"--smtp-tls none is refused for {host}: digests would cross the network in the "
                              "clear. Use starttls, or a loopback server (127.0.0.1, ::1, localhost) that relays")
        if self.smtp_tls_ca is not None and not os.path.isfile(self.smtp_tls_ca):
            raise ConfigError(f"--smtp-tls-ca {self.smtp_tls_ca}: no such file")
        self._check_smtp_login()

    def _check_smtp_login(self) -> None:
        from deaddrop.digest.smtp import read_password_file

        if (self.smtp_username is None) != (self.smtp_password_file is None):
            raise ConfigError("--smtp-username and --smtp-password-file go together (the login for the mail server)")
        if self.smtp_username is None:
            return
        if self.smtp_tls == "none":
            raise ConfigError("--smtp-username needs --smtp-tls starttls or tls: the password is only ever sent "
                              "inside TLS")
        if not self.smtp_username or any(c in self.smtp_username for c in "\0\r\n"):
            raise ConfigError("--smtp-username must be one line, not empty")
        try:
            read_password_file(self.smtp_password_file)  # type: ignore[arg-type]
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def with_changes(self, **changes: Any) -> "Config":
        return replace(self, **changes)

