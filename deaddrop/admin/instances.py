"""Instances of the Debian package's template unit ``deaddrop@NAME``: where each keeps what.

NAME runs as its own system user ``deaddrop-NAME``, with its data in ``/var/lib/deaddrop/NAME``
(0700, that user's: no other instance's user can open anything in it), its options in
``/etc/deaddrop/NAME.conf`` (read by systemd as root) and its keys and certificates in
``/etc/deaddrop/NAME/`` (root's, group ``deaddrop-NAME``, 0750). ``deaddrop-admin --instance
NAME ...`` is ``--data-dir /var/lib/deaddrop/NAME``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from deaddrop.admin._output import AdminError

DATA_ROOT = "/var/lib/deaddrop"
CONF_ROOT = "/etc/deaddrop"
# deaddrop-NAME must be a valid user name of at most 32 characters, and NAME a systemd instance
# name that needs no escaping.
_NAME = re.compile(r"[a-z][a-z0-9-]{0,22}")
# /etc/deaddrop/deaddrop.conf is deaddrop.service's own options file.
RESERVED = {"deaddrop"}


@dataclass(frozen=True)
class Instance:
    name: str

    @property
    def data_dir(self) -> str:
        return os.path.join(DATA_ROOT, self.name)

    @property
    def conf(self) -> str:
        return os.path.join(CONF_ROOT, f"{self.name}.conf")

    @property
    def etc_dir(self) -> str:
        return os.path.join(CONF_ROOT, self.name)

    @property
    def user(self) -> str:
        return f"deaddrop-{self.name}"

    @property
    def unit(self) -> str:
        return f"deaddrop@{self.name}.service"


def instance(name: str) -> Instance:
    """-> the instance NAME, or a one-line ``AdminError`` for a name no instance can have."""
    if not _NAME.fullmatch(name) or name in RESERVED:
        raise AdminError(f"{name!r} cannot name an instance: 1 to 23 lowercase letters, digits and '-', "
                         f"starting with a letter, and not {' or '.join(sorted(RESERVED))}")
    return Instance(name)


def configured() -> list[Instance]:
    """The instances that have an options file, by name."""
    try:
        names = sorted(n[:-len(".conf")] for n in os.listdir(CONF_ROOT) if n.endswith(".conf"))
    except FileNotFoundError:
        return []
    return [Instance(n) for n in names if _NAME.fullmatch(n) and n not in RESERVED]


def data_dir_of(data_dir: str | None, instance_name: str | None, default: str) -> str:
    """``deaddrop-admin``'s data dir: ``--instance NAME`` names it, else ``--data-dir``, else the default."""
    if instance_name is None:
        return default if data_dir is None else data_dir
    if data_dir is not None:
        raise AdminError(f"--instance {instance_name} names the data dir ({instance(instance_name).data_dir}): "
                         "give it or --data-dir, not both")
    return instance(instance_name).data_dir
