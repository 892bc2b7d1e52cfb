"""Onion service keys and client authorisation, on disk in Tor's own formats.

Both the server and ``deaddrop-admin`` use this module. Layout under the data directory::

    DATA/source-onion.txt                      the source onion address (written by the server)
    DATA/tor/                                  0700; Tor's DataDirectory in ``--tor launch`` mode
    DATA/tor/onion-services/source/            0700, like a Tor HiddenServiceDir:
        hs_ed25519_secret_key                  0600, Tor's format (32-byte header + 64-byte key)
        hs_ed25519_public_key, hostname        derived, for backups and humans
    DATA/tor/onion-services/journalist/        the same, plus
        authorized_clients/NAME.auth           "descriptor:x25519:<base32 public key>"

The layout is that of a Tor ``HiddenServiceDir`` on purpose: an operator can back it up or move
the service to a hand-written torrc. The server itself publishes with ``ADD_ONION`` and the key
read from here, so the address never changes across restarts. Client *private* keys are never
stored on the server: ``onion-client add`` prints one once.

Keys are generated here (not by Tor) so that the admin tool knows the journalist address before
the server ever published it; the server checks that Tor's ServiceID equals the derived address.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
from dataclasses import dataclass

import nacl.bindings
import nacl.public

from deaddrop.durable import create_exclusively, fsync_directory, write_atomically

SECRET_KEY_HEADER = b"== ed25519v1-secret: type0 ==\x00\x00\x00"
PUBLIC_KEY_HEADER = b"== ed25519v1-public: type0 ==\x00\x00\x00"
SECRET_KEY_FILE = "hs_ed25519_secret_key"
PUBLIC_KEY_FILE = "hs_ed25519_public_key"
HOSTNAME_FILE = "hostname"
CLIENTS_DIR = "authorized_clients"

SOURCE = "source"
JOURNALIST = "journalist"

_ONION_RE = re.compile(r"^[a-z2-7]{56}$")
_CLIENT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_AUTH_LINE_RE = re.compile(r"^descriptor:x25519:([A-Z2-7]{52})$")


class OnionKeyError(Exception):
    """A key or client file is missing, unreadable or malformed (one clear line)."""


# -- paths ------------------------------------------------------------------------------------


def tor_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "tor")


def services_dir(data_dir: str) -> str:
    return os.path.join(tor_dir(data_dir), "onion-services")


def service_dir(data_dir: str, which: str) -> str:
    if which not in (SOURCE, JOURNALIST):
        raise ValueError(f"unknown onion service {which!r}")
    return os.path.join(services_dir(data_dir), which)


def clients_dir(data_dir: str) -> str:
    return os.path.join(service_dir(data_dir, JOURNALIST), CLIENTS_DIR)


def source_onion_file(data_dir: str) -> str:
    return os.path.join(data_dir, "source-onion.txt")


def ensure_private_dir(path: str) -> None:
    """Create ``path`` and any missing parents with mode 0700; tighten ``path`` if it exists.

    (``os.makedirs(mode=...)`` would give the intermediate directories the umask default.)
    """
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)


# -- ed25519 onion keys -----------------------------------------------------------------------


@dataclass(frozen=True)
class OnionKey:
    """A v3 onion service identity: Tor's 64-byte expanded ed25519 secret key."""

    expanded: bytes

    def __post_init__(self) -> None:
        if len(self.expanded) != 64:
            raise OnionKeyError("an ed25519 expanded secret key is 64 bytes")

    @property
    def public_key(self) -> bytes:
        # The first half is the (already clamped) scalar; A = a*B.
        return nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(self.expanded[:32])

    @property
    def address(self) -> str:
        """``xxxx.onion`` (56 base32 characters and the suffix)."""
        return onion_address_from_public_key(self.public_key)

    @property
    def service_id(self) -> str:
        return self.address[: -len(".onion")]

    def control_blob(self) -> str:
        """The ``KeyType:KeyBlob`` argument of ``ADD_ONION``. Secret: never log it."""
        return "ED25519-V3:" + base64.b64encode(self.expanded).decode("ascii")

    def __repr__(self) -> str:  # never print the secret by accident
        return f"OnionKey({self.address})"


def generate_onion_key() -> OnionKey:
    seed = secrets.token_bytes(32)
    digest = bytearray(hashlib.sha512(seed).digest())
    digest[0] &= 248
    digest[31] &= 127
    digest[31] |= 64
    return OnionKey(bytes(digest))


def onion_address_from_public_key(public_key: bytes) -> str:
    version = b"\x03"
    checksum = hashlib.sha3_256(b".onion checksum" + public_key + version).digest()[:2]
    return base64.b32encode(public_key + checksum + version).decode("ascii").lower() + ".onion"


def is_valid_onion_address(address: str) -> bool:
    """True for a well-formed v3 address, with or without ``.onion``, checksum included."""
    host = address[: -len(".onion")] if address.endswith(".onion") else address
    if not _ONION_RE.match(host):
        return False
    raw = base64.b32decode(host.upper())
    public_key, checksum, version = raw[:32], raw[32:34], raw[34:]
    if version != b"\x03":
        return False
    return hashlib.sha3_256(b".onion checksum" + public_key + version).digest()[:2] == checksum


def key_from_control_blob(blob: str) -> OnionKey:
    """Parse ``ED25519-V3:<base64>`` as returned by ``ADD_ONION NEW:ED25519-V3``."""
    kind, _, data = blob.partition(":")
    if kind != "ED25519-V3":
        raise OnionKeyError(f"unsupported onion key type {kind!r}")
    return OnionKey(base64.b64decode(data, validate=True))


def read_onion_key(directory: str) -> OnionKey | None:
    """Load the key in ``directory`` (Tor's format); None if there is none yet."""
    path = os.path.join(directory, SECRET_KEY_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise OnionKeyError(f"cannot read onion key {path}: {e.strerror}") from None
    if len(data) != 96 or not data.startswith(SECRET_KEY_HEADER):
        raise OnionKeyError(f"onion key {path} is not a Tor v3 secret key file")
    return OnionKey(data[32:])


def load_or_create_onion_key(directory: str) -> tuple[OnionKey, bool]:
    """The key in ``directory``, creating one if needed. Returns ``(key, created)``.

    Creation is atomic and exclusive (temp file + ``link``), so the server and the admin tool
    racing to create the journalist key end up using the same one.
    """
    ensure_private_dir(directory)
    key = read_onion_key(directory)
    if key is not None:
        _check_secret_mode(directory)
        _write_derived_files(directory, key)
        return key, False
    new = generate_onion_key()
    created = create_exclusively(os.path.join(directory, SECRET_KEY_FILE), SECRET_KEY_HEADER + new.expanded)
    key = read_onion_key(directory)
    if key is None:  # pragma: no cover - the file was just created
        raise OnionKeyError(f"onion key in {directory} vanished")
    _write_derived_files(directory, key)
    return key, created


def _check_secret_mode(directory: str) -> None:
    path = os.path.join(directory, SECRET_KEY_FILE)
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o600)


def _write_derived_files(directory: str, key: OnionKey) -> None:
    public = os.path.join(directory, PUBLIC_KEY_FILE)
    hostname = os.path.join(directory, HOSTNAME_FILE)
    if not os.path.exists(public):
        write_atomically(public, PUBLIC_KEY_HEADER + key.public_key, 0o600)
    expected = (key.address + "\n").encode("ascii")
    try:
        with open(hostname, "rb") as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if current != expected:
        write_atomically(hostname, expected, 0o600)


# -- v3 client authorisation ------------------------------------------------------------------


@dataclass(frozen=True)
class ClientKeyPair:
    public_b32: str  # what the server keeps: "descriptor:x25519:<this>"
    private_b32: str  # what the journalist's Tor Browser gets; never stored on the server

    def __repr__(self) -> str:
        return f"ClientKeyPair(public={self.public_b32})"


def _b32(data: bytes) -> str:
    return base64.b32encode(data).decode("ascii").rstrip("=")


def generate_client_keypair() -> ClientKeyPair:
    private = nacl.public.PrivateKey.generate()
    return ClientKeyPair(_b32(bytes(private.public_key)), _b32(bytes(private)))


def client_private_b64(private_b32: str) -> str:
    """The same private key in base64, as ``ONION_CLIENT_AUTH_ADD`` wants it."""
    padded = private_b32 + "=" * (-len(private_b32) % 8)
    return base64.b64encode(base64.b32decode(padded)).decode("ascii")


def tor_browser_line(address: str, private_b32: str) -> str:
    """``<onion-without-.onion>:descriptor:x25519:<base32 private key>`` (.auth_private format)."""
    host = address[: -len(".onion")] if address.endswith(".onion") else address
    return f"{host}:descriptor:x25519:{private_b32}"


def validate_client_name(name: str) -> str:
    if not _CLIENT_NAME_RE.match(name):
        raise OnionKeyError(
            "client names are 1-64 characters: letters, digits, '-' and '_', starting with a letter or digit"
        )
    return name


def add_client(data_dir: str, name: str) -> tuple[str, ClientKeyPair]:
    """Authorise a new client of the journalist onion; returns ``(address, keypair)``.

    Creates the journalist onion key on first use so the address is known at once.
    """
    validate_client_name(name)
    key, _ = load_or_create_onion_key(service_dir(data_dir, JOURNALIST))
    directory = clients_dir(data_dir)
    ensure_private_dir(directory)
    pair = generate_client_keypair()
    line = f"descriptor:x25519:{pair.public_b32}\n".encode("ascii")
    if not create_exclusively(os.path.join(directory, name + ".auth"), line):
        raise OnionKeyError(f"a client named {name!r} already exists (remove it first)")
    return key.address, pair


def remove_client(data_dir: str, name: str) -> None:
    validate_client_name(name)
    path = os.path.join(clients_dir(data_dir), name + ".auth")
    try:
        os.unlink(path)
    except FileNotFoundError:
        raise OnionKeyError(f"no client named {name!r}") from None
    fsync_directory(os.path.dirname(path))


def list_clients(data_dir: str) -> dict[str, str]:
    """``{name: base32 public key}`` for every well-formed ``NAME.auth`` file.

    Malformed files raise: silently skipping one could publish without a client an operator
    believes is authorised, or keep one they believe is revoked.
    """
    directory = clients_dir(data_dir)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return {}
    clients: dict[str, str] = {}
    for filename in names:
        if not filename.endswith(".auth") or filename.startswith("."):
            continue
        name = filename[: -len(".auth")]
        path = os.path.join(directory, filename)
        try:
            with open(path, encoding="ascii") as f:
                content = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise OnionKeyError(f"cannot read client file {path}: {e}") from None
        match = _AUTH_LINE_RE.match(content)
        if match is None:
            raise OnionKeyError(f"client file {path} is not 'descriptor:x25519:<base32 key>'")
        clients[name] = match.group(1)
    return clients
