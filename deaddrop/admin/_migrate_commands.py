"""``deaddrop-admin migrate``: the schema upgrade the server makes at its start, made while it is
stopped.

The Debian package's postinst runs it for every instance, between prerm stopping the services
and starting them again: an upgrade whose migration fails then fails in ``apt``, with the
server stopped and the database as it was (``MigrationFailed``), rather than in a service that
restarts every 5 s. It holds ``DATA/server.lock`` meanwhile, so no server starts on a database
being changed, and it refuses while a server holds it (``--if-stopped``: says so and leaves the
upgrade to that server's next start, which copies the database first just the same).
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from deaddrop.admin._datadir import DB_NAME, initialised_data_dir
from deaddrop.admin._output import AdminError, Output
from deaddrop.store import migrations
from deaddrop.store.db import connect, upgrade_with_backup
from deaddrop.store.server_lock import DataDirBusy, lock_data_dir


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("migrate", parents=[common_parent],
                              help="upgrade the database to this version's schema (server stopped; a copy first)")
    p.add_argument("--if-stopped", action="store_true",
                   help="if a server runs on the data dir, leave the upgrade to its next start (exit 0)")
    p.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace, out: Output) -> int:
    data_dir = initialised_data_dir(args.data_dir)
    try:
        release = lock_data_dir(data_dir)
    except DataDirBusy as busy:
        if not args.if_stopped:
            raise AdminError(f"a server is running on {data_dir} (it holds {busy}): stop it first "
                             "(or restart it: it upgrades the database itself when it starts)") from None
        out.result({"data_dir": data_dir, "migrated": False, "server_running": True},
                   f"{data_dir}: a server runs on it; it upgrades the database itself at its next start "
                   "(after a copy in backups/)")
        return 0
    try:
        path = os.path.join(data_dir, DB_NAME)
        conn = connect(path)
        try:
            before = migrations.schema_version(conn)
            copy = upgrade_with_backup(conn, path)
        except migrations.SchemaError as e:  # a newer schema, or MigrationFailed (put back as it was)
            raise AdminError(str(e)) from None
        finally:
            conn.close()
    finally:
        release()
    data = {"data_dir": data_dir, "migrated": copy is not None, "server_running": False,
            "schema_version_before": before, "schema_version": migrations.CURRENT, "copy": copy}
    if copy is None:
        out.result(data, f"{data_dir}: schema version {before} is this DeadDrop's; nothing to do")
    else:
        out.result(data, f"{data_dir}: upgraded from schema version {before} to {migrations.CURRENT}; "
                         f"the previous database is kept in {copy}")
    return 0
