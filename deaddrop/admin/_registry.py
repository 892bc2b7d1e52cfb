"""Which modules contribute sub-commands to ``deaddrop-admin``.

A module listed here provides ``register(subparsers, common_parent)``; each sub-parser it adds
must use ``parents=[common_parent]`` (for ``--data-dir`` and ``--json``) and set ``func``.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

_MODULES = [
    "deaddrop.admin._ca_commands",  # ca init, cert issue|revoke, crl
    "deaddrop.admin._journalist_commands",  # journalist add|list|delete|reset-2fa|reset-password
    "deaddrop.admin._tor_commands",  # status, onion-client add|remove|list
]


def registrars() -> list[Callable[[Any, Any], None]]:
    found = []
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue  # area not built yet
        found.append(module.register)
    return found
