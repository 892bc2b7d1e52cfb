"""The SVS home directory: the submission key pair and its exported public key.

Layout of ``--home DIR`` (DIR and DIR/gnupg are mode 0700)::

    DIR/gnupg/                   GnuPG home holding the submission key pair
    DIR/gnupg/openpgp-revocs.d/  gpg's revocation certificate for it
    DIR/submission-public.asc    the armored public key, for the server's --submission-key
"""
from __future__ import annotations

import os

from deaddrop.svs._errors import SvsError
from deaddrop.svs._gnupg import Gpg, KeyInfo

PUBLIC_KEY_NAME = "submission-public.asc"
GNUPG_DIR = "gnupg"

# The agent must not keep an unlocked key around between runs (or let a wrong passphrase
# pass because a right one was cached): with a passphrase, every gpg call supplies it.
_AGENT_CONF = "default-cache-ttl 0\nmax-cache-ttl 0\n"


class Home:
    def __init__(self, path: str) -> None:
        self.root = os.path.abspath(path)
        self.gnupg = os.path.join(self.root, GNUPG_DIR)
        self.public_key = os.path.join(self.root, PUBLIC_KEY_NAME)

    def holds(self, path: str) -> bool:
        """Whether ``path`` is the home or lies inside it (links resolved)."""
        root, real = os.path.realpath(self.root), os.path.realpath(path)
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

    def _existing_keys(self) -> list[KeyInfo]:
        if not os.path.isdir(self.gnupg):
            return []
        return Gpg(self.gnupg).secret_keys()

    def init(self, algorithm: str, passphrase: bytes | None) -> str:
        """Create the key pair and write the public key; return the fingerprint.

        Refuses if a key (or a public key file) is already there: overwriting the submission
        key would make every submission encrypted to it unreadable.
        """
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise SvsError(f"{self.root} exists and is not a directory")
        keys = self._existing_keys()
        if keys:
            raise SvsError(
                f"{self.root} already has a submission key ({keys[0].fingerprint}); refusing to overwrite it"
            )
        if os.path.lexists(self.public_key):
            raise SvsError(f"{self.public_key} already exists; refusing to overwrite it")
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            os.chmod(self.root, 0o700)
            os.makedirs(self.gnupg, mode=0o700, exist_ok=True)
            os.chmod(self.gnupg, 0o700)  # gpg warns about (and we don't want) a readable home
        except OSError as e:
            raise SvsError(f"cannot create {self.root}: {e.strerror}") from None
        gpg = Gpg(self.gnupg)
        try:
            fingerprint = gpg.generate_key(algorithm, passphrase)
            armored = gpg.export_public(fingerprint)
        finally:
            gpg.kill_agent()
        try:
            # Only now: key generation itself relies on the agent caching the passphrase
            # between making the primary key and binding the subkey.
            with open(os.path.join(self.gnupg, "gpg-agent.conf"), "w", encoding="ascii") as f:
                f.write(_AGENT_CONF)
        except OSError as e:
            raise SvsError(f"cannot write {self.gnupg}/gpg-agent.conf: {e.strerror}") from None
        try:
            # O_EXCL: never replace a public key file that appeared meanwhile.
            fd = os.open(self.public_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(armored)
        except OSError as e:
            raise SvsError(f"cannot write {self.public_key}: {e.strerror}") from None
        return fingerprint

    def open(self, passphrase: bytes | None = None) -> Gpg:
        """The keyring for decryption; one-line errors if the home or key is missing."""
        if not os.path.isdir(self.root):
            raise SvsError(f"no SVS home at {self.root} (create one with: deaddrop-svs --home {self.root} init)")
        if not os.path.isdir(self.gnupg):
            raise SvsError(f"no GnuPG home at {self.gnupg} (create one with: deaddrop-svs --home {self.root} init)")
        gpg = Gpg(self.gnupg, passphrase)
        if not gpg.secret_keys():
            raise SvsError(f"no submission key in {self.gnupg} (create one with: deaddrop-svs --home {self.root} init)")
        return gpg

    def fingerprints(self) -> list[str]:
        """Fingerprints of the submission key(s), or none if the home isn't set up."""
        try:
            return [k.fingerprint for k in self._existing_keys()]
        except SvsError:
            return []
