"""The data directory as ``deaddrop-admin`` sees it: it must be one the server initialised.

A mistyped ``--data-dir`` must never turn into a new, empty instance (with credentials printed
for it), so every command except ``ca init`` and ``restore`` refuses a directory without the
server's database, in one line that names the path.
"""
from __future__ import annotations

import os
import sqlite3

from deaddrop.admin._output import AdminError
from deaddrop.store import migrations
from deaddrop.store.db import connect

DB_NAME = "db.sqlite"


def _not_initialised(path: str) -> AdminError:
    return AdminError(
        f"{path} is not an initialised DeadDrop data directory (check --data-dir; "
        "the server initialises it at its first start, or use 'deaddrop-admin restore')"
    )


def is_initialised(data_dir: str) -> bool:
    db = os.path.join(data_dir, DB_NAME)
    if not os.path.isfile(db):
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return migrations.schema_version(conn) is not None
        finally:
            conn.close()
    except (sqlite3.Error, migrations.SchemaError):
        return False


def initialised_data_dir(given: str) -> str:
    """-> the absolute path of an initialised data dir, or a one-line ``AdminError``."""
    path = os.path.abspath(given)
    if not is_initialised(path):
        raise _not_initialised(path)
    return path


def open_database(data_dir: str) -> sqlite3.Connection:
    """The server's database, at exactly the schema this code knows.

    An older schema is left for the server to upgrade (it keeps a copy first): an admin tool
    changing it under a running older server would break that server.
    """
    path = os.path.join(data_dir, DB_NAME)
    try:
        conn = connect(path)
        version = migrations.schema_version(conn)
    except (sqlite3.Error, migrations.SchemaError) as e:
        raise AdminError(f"cannot open the database {path}: {e}") from None
    if version is None:
        conn.close()
        raise _not_initialised(data_dir)
    if version != migrations.CURRENT:
        conn.close()
        if version > migrations.CURRENT:
            raise AdminError(f"{path} has schema version {version}, newer than this deaddrop-admin knows "
                             f"({migrations.CURRENT}): use the newer DeadDrop's deaddrop-admin")
        raise AdminError(f"{path} has schema version {version}, older than this deaddrop-admin "
                         f"({migrations.CURRENT}): upgrade it first with 'deaddrop-admin migrate' (the server stopped) or by "
                         "restarting the server (either keeps a copy)")
    return conn
