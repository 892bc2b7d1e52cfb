"""One admin command's hold on a data dir: its database at this code's schema, and the security
log its changes are appended to (``DATA/logs/security.jsonl``)."""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable

from deaddrop.admin._datadir import initialised_data_dir, open_database
from deaddrop.admin._output import Output
from deaddrop.events import SecurityEvents
from deaddrop.store.db import transaction


class OpenedDataDir:
    def __init__(self, args: argparse.Namespace) -> None:
        self.data_dir = initialised_data_dir(args.data_dir)
        self.conn = open_database(self.data_dir)
        self.events = SecurityEvents(os.path.join(self.data_dir, "logs", "security.jsonl"))

    def run(self, fn: Any, *args: Any) -> Any:
        """``fn(conn, *args)`` in one write transaction."""
        return transaction(self.conn, fn, *args)

    def close(self) -> None:
        self.events.close()
        self.conn.close()


def with_opened(kind: type[OpenedDataDir]) -> Callable[[Any], Callable[[argparse.Namespace, Output], int]]:
    """A command ``fn(opened, args, out)`` as argparse calls it: the data dir opened as ``kind``
    for it, and closed after it whatever happens."""
    def wrap(fn: Any) -> Callable[[argparse.Namespace, Output], int]:
        def run(args: argparse.Namespace, out: Output) -> int:
            opened = kind(args)
            try:
                return fn(opened, args, out)
            finally:
                opened.close()
        return run
    return wrap
