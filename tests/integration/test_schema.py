"""Schema versions: a fresh database, an upgrade from the schema every instance had before
versioning (captured in tests/fixtures/schema_v1.sql), and the refusal of a newer schema."""
from __future__ import annotations

import glob
import os
import sqlite3

from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from deaddrop.config import Config
from deaddrop.service import build_service
from deaddrop.store import migrations
from deaddrop.store.migrations import SchemaError
from tests._support import Browser, RunningServer, short_tempdir, start_server

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "schema_v1.sql")


def _version(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    finally:
        conn.close()


def _schema(path: str) -> set[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return set(conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
    finally:
        conn.close()


def rebuild_as_version_1(db_path: str) -> None:
    """Replace a database by a version-1 one (built from the fixture) holding the same rows."""
    old = db_path + ".current"
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA journal_mode=DELETE")  # fold the WAL in: one self-contained file
    conn.close()
    os.replace(db_path, old)
    conn = sqlite3.connect(db_path)
    with open(FIXTURE) as f:
        conn.executescript(f.read())
    conn.execute("ATTACH DATABASE ? AS current", (old,))
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'meta'").fetchall():
        columns = [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")]
        have = {r[1] for r in conn.execute(f"PRAGMA current.table_info({table})")}
        shared = ", ".join(c for c in columns if c in have)
        conn.execute(f"INSERT INTO main.{table} ({shared}) SELECT {shared} FROM current.{table}")
    conn.commit()
    conn.execute("DETACH DATABASE current")
    conn.close()
    os.remove(old)
    assert _version(db_path) == 1


@inlineCallbacks
def version_1_data_dir(testcase: unittest.TestCase):
    """A data dir the server initialised, its database then rebuilt at schema version 1."""
    server = RunningServer(testcase)
    testcase.addCleanup(server.cleanup)
    yield server.start()
    yield server.stop()
    db_path = os.path.join(server.data_dir, "db.sqlite")
    yield deferToThread(rebuild_as_version_1, db_path)
    return server, db_path


class SchemaTests(unittest.TestCase):
    timeout = 120

    def test_a_fresh_database_is_the_baseline_plus_every_step(self):
        path = os.path.join(short_tempdir(), "db.sqlite")
        conn = sqlite3.connect(path, isolation_level=None)
        self.assertEqual(migrations.upgrade(conn), (None, migrations.CURRENT))
        self.assertEqual(migrations.upgrade(conn), (migrations.CURRENT, migrations.CURRENT))  # idempotent
        conn.close()
        fixture_db = os.path.join(os.path.dirname(path), "v1.sqlite")
        conn = sqlite3.connect(fixture_db, isolation_level=None)
        with open(FIXTURE) as f:
            conn.executescript(f.read())
        self.assertEqual(migrations.upgrade(conn), (1, migrations.CURRENT))
        conn.close()
        # An upgraded database and a new one have the same tables and indexes.
        self.assertEqual(_schema(fixture_db), _schema(path))
        self.assertIn(("index", "submissions_created"), _schema(path))

    @inlineCallbacks
    def test_upgrade_from_todays_schema_keeps_every_source_submission_and_reply(self):
        server = RunningServer(self)
        self.addCleanup(server.cleanup)
        yield server.start()
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        codename = yield browser.create_source()
        yield browser.submit("before the upgrade SUBMISSION-MARKER")
        db_path = os.path.join(server.data_dir, "db.sqlite")
        conn = sqlite3.connect(db_path)
        [(source_id,)] = conn.execute("SELECT id FROM sources").fetchall()
        conn.close()
        yield server.service.newsroom.replies.add(source_id, "a reply REPLY-MARKER-upgrade")
        yield browser.close()
        yield server.stop()

        yield deferToThread(rebuild_as_version_1, db_path)
        before = _schema(db_path)
        self.assertNotIn(("index", "submissions_created"), before)

        server = RunningServer(self, data_dir=server.data_dir)
        yield server.start()
        self.addCleanup(server.stop)
        self.assertEqual(_version(db_path), migrations.CURRENT)
        # The automatic copy of the database, taken before the upgrade, is the version-1 one.
        [copy] = glob.glob(os.path.join(server.data_dir, "backups", "db-schema1-*.sqlite"))
        self.assertEqual((_version(copy), _schema(copy)), (1, before))
        self.assertEqual(os.stat(copy).st_mode & 0o777, 0o600)
        conn = sqlite3.connect(copy)
        self.assertEqual(conn.execute("SELECT COUNT(*) FROM submissions").fetchone(), (1,))
        conn.close()

        # Everything still works: the source logs in, reads the reply; the submission is kept.
        browser = Browser(server.source_url)
        self.addCleanup(browser.close)
        response, html = yield browser.login(codename)
        self.assertIn("REPLY-MARKER-upgrade", html)
        conn = sqlite3.connect(db_path)
        self.assertEqual(conn.execute("SELECT COUNT(*) FROM submissions").fetchone(), (1,))
        self.assertEqual(conn.execute("SELECT COUNT(*) FROM replies").fetchone(), (1,))
        conn.close()

    @inlineCallbacks
    def test_a_newer_schema_is_refused_and_left_untouched(self):
        server = RunningServer(self)
        self.addCleanup(server.cleanup)
        yield server.start()
        yield server.stop()
        db_path = os.path.join(server.data_dir, "db.sqlite")
        conn = sqlite3.connect(db_path)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(migrations.CURRENT + 1),))
        conn.commit()
        conn.close()
        with open(db_path, "rb") as f:
            before = f.read()
        config = Config(**{**server.config.__dict__})
        with self.assertRaises(SchemaError) as caught:
            yield deferToThread(build_service, config)
        self.assertEqual(str(caught.exception), (
            f"{db_path} has schema version {migrations.CURRENT + 1}, newer than this DeadDrop knows "
            f"({migrations.CURRENT}): run the newer DeadDrop, or restore a backup made by this version"))
        with open(db_path, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(os.path.join(server.data_dir, "backups")))


class AdminSchemaTests(unittest.TestCase):
    timeout = 60

    @inlineCallbacks
    def test_deaddrop_admin_leaves_an_older_schema_to_the_server(self):
        from tests.integration.test_admin_cli import run_cli

        server, db_path = yield version_1_data_dir(self)
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--data-dir", server.data_dir)
        self.assertEqual(code, 1)
        self.assertEqual(err, f"deaddrop-admin: error: {db_path} has schema version 1, older than this deaddrop-admin "
                              f"({migrations.CURRENT}): upgrade it first with 'deaddrop-admin migrate' (the server stopped) "
                              "or by restarting the server (either keeps a copy)\n")
        self.assertEqual(_version(db_path), 1)


def _failing_at(version: int) -> list:
    """The schema steps with step ``version`` failing (the ones before it succeed and commit)."""
    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        raise sqlite3.OperationalError("a step that fails (test)")

    return [(v, fail if v == version else step) for v, step in migrations.STEPS]


class MigrateCommandTests(unittest.TestCase):
    """``deaddrop-admin migrate`` (issue 32, item 2): what the Debian package's postinst runs
    between stopping the services and starting them again."""
    timeout = 60

    @inlineCallbacks
    def test_migrate_upgrades_after_a_copy_and_admin_commands_work_again(self):
        from tests.integration.test_admin_cli import run_cli

        server, db_path = yield version_1_data_dir(self)
        code, out, err = yield deferToThread(run_cli, "migrate", "--data-dir", server.data_dir)
        self.assertEqual((code, err), (0, ""))
        [copy] = glob.glob(os.path.join(server.data_dir, "backups", "db-schema1-*.sqlite"))
        self.assertEqual(out, f"{server.data_dir}: upgraded from schema version 1 to {migrations.CURRENT}; "
                              f"the previous database is kept in {copy}\n")
        self.assertEqual((_version(db_path), _version(copy)), (migrations.CURRENT, 1))
        code, out, err = yield deferToThread(run_cli, "migrate", "--data-dir", server.data_dir)
        self.assertEqual(out, f"{server.data_dir}: schema version {migrations.CURRENT} is this DeadDrop's; "
                              "nothing to do\n")
        code, out, err = yield deferToThread(run_cli, "journalist", "list", "--data-dir", server.data_dir)
        self.assertEqual((code, err), (0, ""))

    @inlineCallbacks
    def test_a_failed_step_puts_the_database_back_as_it_was(self):
        from tests.integration.test_admin_cli import run_cli

        server, db_path = yield version_1_data_dir(self)
        before = _schema(db_path)
        # Steps 2 to 4 succeed (each commits), step 5 fails: without the copy put back, the
        # database would be left at version 4, which the previous DeadDrop refuses.
        self.patch(migrations, "STEPS", _failing_at(5))
        code, out, err = yield deferToThread(run_cli, "migrate", "--data-dir", server.data_dir)
        [copy] = glob.glob(os.path.join(server.data_dir, "backups", "db-schema1-*.sqlite"))
        self.assertEqual((code, out), (1, ""))
        self.assertEqual(err, f"deaddrop-admin: error: upgrading {db_path} from schema version 1 to "
                              f"{migrations.CURRENT} failed (a step that fails (test)); the database is back at "
                              f"version 1, as the previous DeadDrop left it, and its copy is {copy}\n")
        self.assertEqual((_version(db_path), _schema(db_path)), (1, before))

    @inlineCallbacks
    def test_the_server_start_puts_the_database_back_too(self):
        server, db_path = yield version_1_data_dir(self)
        self.patch(migrations, "STEPS", _failing_at(3))
        with self.assertRaises(SchemaError) as caught:
            yield deferToThread(build_service, Config(**{**server.config.__dict__}))
        self.assertIn("the database is back at version 1", str(caught.exception))
        self.assertEqual(_version(db_path), 1)

    @inlineCallbacks
    def test_migrate_refuses_while_a_server_runs_unless_told_to_leave_it_to_the_server(self):
        from tests.integration.test_admin_cli import run_cli

        server = yield start_server(self)
        code, out, err = yield deferToThread(run_cli, "migrate", "--data-dir", server.data_dir)
        lock = os.path.join(server.data_dir, "server.lock")
        self.assertEqual((code, err), (1, f"deaddrop-admin: error: a server is running on {server.data_dir} (it holds "
                                          f"{lock}): stop it first (or restart it: it upgrades the database itself "
                                          "when it starts)\n"))
        code, out, err = yield deferToThread(run_cli, "migrate", "--if-stopped", "--data-dir", server.data_dir)
        self.assertEqual((code, err), (0, ""))
        self.assertIn("a server runs on it; it upgrades the database itself at its next start", out)
