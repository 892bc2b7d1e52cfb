"""The submission key is the instance's identity.

The first start copies ``--submission-key`` into ``DATA/submission-key.asc``; every later start
(and a restored data dir) uses that copy, so ``--submission-key`` is needed only once. A
*different* key given later is refused: every new submission would be encrypted to it, readable
by whoever holds its secret half. A newsroom whose SVS key really changed says so with
``--replace-submission-key``: the replacement is the security event
``admin.submission_key.replaced`` and a line of ``DATA/submission-key-replaced.json``, which
``deaddrop-admin status`` shows.
"""
from __future__ import annotations

import datetime
import json
import os
from typing import Any

from deaddrop.config import Config, ConfigError
from deaddrop.durable import write_atomically

KEY_FILE = "submission-key.asc"
HISTORY_FILE = "submission-key-replaced.json"
REPLACED = "admin.submission_key.replaced"


def use_submission_key(config: Config, keyring: Any, events: Any) -> tuple[str, str, str | None]:
    """Import the instance's submission key and keep its copy in the data dir.
    -> (armored key, fingerprint, the fingerprint it replaced or None). Blocking (gpg)."""
    key_copy = config.path(KEY_FILE)
    given = config.submission_key
    assert given is not None  # Config.validated: given, or the copy already in the data dir
    armored = _read(given)
    previous: str | None = None
    if os.path.isfile(key_copy) and os.path.realpath(given) != os.path.realpath(key_copy):
        # Compared before anything is imported: a refused key never enters the keyring.
        stored = keyring.fingerprint_of(_read(key_copy))
        offered = keyring.fingerprint_of(armored)
        if offered != stored:
            if not config.replace_submission_key:
                raise ConfigError(
                    f"--submission-key {given} is key {offered}, but this instance's submission key is {stored} "
                    f"({key_copy}): refusing to replace it, or every new submission would be readable by whoever "
                    "holds the other key. Start without --submission-key to keep the instance's key; if the SVS "
                    "key really changed, start once with --replace-submission-key (logged as a security event)")
            previous = stored
    fingerprint = keyring.import_submission_key(armored)
    if not os.path.isfile(key_copy) or _read(key_copy) != armored:
        write_atomically(key_copy, armored.encode("utf-8"), mode=0o644)
    if previous is not None:
        history = replacements(config.data_dir)
        history.append({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                        "previous": previous, "fingerprint": fingerprint})
        write_atomically(config.path(HISTORY_FILE), json.dumps(history, indent=1).encode() + b"\n", mode=0o600)
        events.emit(REPLACED, fingerprint=fingerprint, detail=f"replaced {previous} (--replace-submission-key)")
    return armored, fingerprint, previous


def replacements(data_dir: str) -> list[dict[str, str]]:
    """Every replacement of this instance's submission key, oldest first (date, previous, fingerprint)."""
    try:
        with open(os.path.join(data_dir, HISTORY_FILE), encoding="utf-8") as f:
            history = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise ConfigError(f"{os.path.join(data_dir, HISTORY_FILE)} cannot be read: {e}") from None
    return [entry for entry in history if isinstance(entry, dict)] if isinstance(history, list) else []


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()
