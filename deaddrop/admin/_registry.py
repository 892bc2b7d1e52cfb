"""Which modules contribute sub-commands to ``deaddrop-admin``.

A module listed here provides ``register(subparsers, common_parent)``; each sub-parser it adds
must use ``parents=[common_parent]`` (for ``--data-dir`` and ``--json``) and set ``func``.
"""
from __future__ import annotations

from typing import Any, Callable

from deaddrop.admin import (_backup_commands, _ca_commands, _desk_commands, _digest_commands, _instance_commands,
                            _journalist_commands, _migrate_commands, _settings_commands, _source_commands,
                            _status_commands, _tor_commands)


def registrars() -> list[Callable[[Any, Any], None]]:
    return [
        _ca_commands.register,  # ca init, cert issue|revoke, crl
        _journalist_commands.register,  # journalist add|list|delete|reset-2fa|reset-password
        _desk_commands.register,  # desk add|list|rename|remove|members|key|describe|set
        _status_commands.register,  # status
        _tor_commands.register,  # onion-client add|remove|list
        _backup_commands.register,  # backup, restore
        _source_commands.register,  # sources retire-untagged
        _digest_commands.register,  # digest test
        _settings_commands.register,  # settings require-security-keys
        _migrate_commands.register,  # migrate
        _instance_commands.register,  # instance add|list (the Debian package's deaddrop@NAME)
    ]
