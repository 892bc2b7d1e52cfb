"""Schema versions and the steps between them.

The database says which schema it has in ``meta.schema_version``. Version 1 is the schema every
DeadDrop had before versioning (``BASELINE_SQL``, frozen: never edit it, add a step). A step
turns version N-1 into N and runs inside the one write transaction that also records N, so a
crash leaves either the old version or the new one. To change the schema, append
``(N, function)`` to ``STEPS``; ``CURRENT`` follows. A fresh database is built from the baseline
plus every step, so new and upgraded instances take the same path.
"""
from __future__ import annotations

import sqlite3
import time
import uuid
from typing import Callable


class SchemaError(ValueError):
    """The database's schema cannot be used by this DeadDrop (one line for the admin)."""


BASELINE = 1

BASELINE_SQL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    filesystem_id TEXT NOT NULL UNIQUE,
    designation TEXT NOT NULL UNIQUE,
    key_fingerprint TEXT,
    public_key TEXT,
    created_at REAL NOT NULL,
    last_updated REAL NOT NULL,
    next_n INTEGER NOT NULL DEFAULT 1,
    is_starred INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    filename TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('msg', 'doc')),
    size INTEGER NOT NULL,
    sha256 TEXT,
    seen INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS submissions_source ON submissions(source_id);
CREATE TABLE IF NOT EXISTS replies (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    filename TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    sha256 TEXT,
    journalist_id INTEGER,
    deleted_by_source INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS replies_source ON replies(source_id);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journalists (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    username TEXT NOT NULL COLLATE NOCASE UNIQUE,
    password_hash TEXT NOT NULL,
    totp_secret TEXT NOT NULL,
    last_totp_step INTEGER NOT NULL DEFAULT 0,
    is_admin INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    password_changed_at REAL NOT NULL,
    auth_epoch INTEGER NOT NULL DEFAULT 0,
    last_login_at REAL
);
CREATE TABLE IF NOT EXISTS api_tokens (
    token_hash TEXT PRIMARY KEY,
    journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,
    auth_epoch INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS api_tokens_journalist ON api_tokens(journalist_id);
CREATE TABLE IF NOT EXISTS submission_seen (
    submission_id INTEGER NOT NULL REFERENCES submissions(id) ON DELETE CASCADE,
    journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,
    PRIMARY KEY (submission_id, journalist_id)
);
CREATE TABLE IF NOT EXISTS reply_seen (
    reply_id INTEGER NOT NULL REFERENCES replies(id) ON DELETE CASCADE,
    journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,
    PRIMARY KEY (reply_id, journalist_id)
);
"""


def _v2_age_indexes(conn: sqlite3.Connection) -> None:
    # Retention finds old submissions, replies and idle sources by age on every daily run.
    conn.execute("CREATE INDEX IF NOT EXISTS submissions_created ON submissions(created_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS replies_created ON replies(created_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS sources_last_updated ON sources(last_updated)")


def _v3_day_precision(conn: sqlite3.Connection) -> None:
    # Source, submission and reply times are kept to the day (midnight UTC) from now on; older
    # databases stored them to the microsecond.
    day = "CAST({0} / 86400 AS INTEGER) * 86400.0"
    conn.execute(f"UPDATE sources SET created_at = {day.format('created_at')},"
                 f" last_updated = {day.format('last_updated')}")
    for table in ("submissions", "replies"):
        conn.execute(f"UPDATE {table} SET created_at = {day.format('created_at')}")


def _v4_one_argon2id_run(conn: sqlite3.Connection) -> None:
    # login_id: the filesystem id of the one-run KDF scheme, by which a source logs in; NULL for
    # a source of the first scheme (two runs), moved to the new one at its next login.
    # key_wrap: such a migrated source's old key passphrase, encrypted under its new derivation.
    conn.execute("ALTER TABLE sources ADD COLUMN login_id TEXT")
    conn.execute("ALTER TABLE sources ADD COLUMN key_wrap BLOB")
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS sources_login_id ON sources(login_id)")
    # The pending-source purge looks for sources that never submitted, by age.
    conn.execute("CREATE INDEX IF NOT EXISTS sources_pending ON sources(pending, created_at)")


def _v5_reply_read_by_source(conn: sqlite3.Connection) -> None:
    # Which replies a source has been shown, for the source page's "N new replies" (issue 11):
    # one row per reply, nothing else (no time, no count of visits).
    conn.execute("CREATE TABLE IF NOT EXISTS reply_read_by_source ("
                 " reply_id INTEGER PRIMARY KEY REFERENCES replies(id) ON DELETE CASCADE)")


def _v6_listing_index(conn: sqlite3.Connection) -> None:
    # The journalist's source list pages through visible sources in listing order (starred,
    # last activity, uuid): with this index a page costs the same at 100,000 sources as at 10.
    conn.execute("CREATE INDEX IF NOT EXISTS sources_listing ON sources(pending, is_starred, last_updated, uuid)")


def _v7_login_tags(conn: sqlite3.Connection) -> None:
    # login_tag: a few bits of a keyed hash of the codename (crypto/kdf.py), checked before any
    # Argon2id run; NULL for a source made before tags, which gets one at its next login, and
    # RETIRED_TAG for such a source an admin retired (it can no longer log in). The day tags
    # began is kept so that retiring counts idle days from then, never from before it.
    conn.execute("ALTER TABLE sources ADD COLUMN login_tag INTEGER")
    conn.execute("CREATE INDEX IF NOT EXISTS sources_login_tag ON sources(login_tag)")
    # Pending sources are capped, the oldest evicted first: found in id order by this index.
    conn.execute("CREATE INDEX IF NOT EXISTS sources_pending_by_id ON sources(pending)")
    day = int(time.time() // 86400 * 86400)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('login_tags_since', ?)", (str(day),))


def _v8_digest_recipients(conn: sqlite3.Connection) -> None:
    # Journalists who get the encrypted digest mail (issue 22): address, personal key, and what
    # arrived since their last digest was accepted by the mail server. Counted by triggers in
    # the transaction that stores a submission: no time, no id, no log line per submission.
    conn.execute("CREATE TABLE IF NOT EXISTS digest_recipients ("
                 " journalist_id INTEGER PRIMARY KEY REFERENCES journalists(id) ON DELETE CASCADE,"
                 " email TEXT NOT NULL, public_key TEXT NOT NULL, fingerprint TEXT NOT NULL,"
                 " new_submissions INTEGER NOT NULL DEFAULT 0, new_sources INTEGER NOT NULL DEFAULT 0)")
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_count_submission AFTER INSERT ON submissions"
                 " BEGIN UPDATE digest_recipients SET new_submissions = new_submissions + 1; END")
    # A source becomes visible to journalists (pending 1 -> 0) with its first submission.
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_count_source AFTER UPDATE OF pending ON sources"
                 " WHEN OLD.pending = 1 AND NEW.pending = 0"
                 " BEGIN UPDATE digest_recipients SET new_sources = new_sources + 1; END")


def _v9_second_factors(conn: sqlite3.Connection) -> None:
    # Issue 30: an account's second factor is TOTP (as before), a YubiKey in HOTP mode
    # (hotp_secret set; hotp_counter is the next counter value the key may show), or security
    # keys (one row or more in security_keys). keys_enrol_by: the end of an account's own grace
    # period to enrol a key while keys are required (after an admin reset, or a new account).
    conn.execute("ALTER TABLE journalists ADD COLUMN hotp_secret TEXT")
    conn.execute("ALTER TABLE journalists ADD COLUMN hotp_counter INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE journalists ADD COLUMN keys_enrol_by REAL")
    # WebAuthn credentials: the public key (COSE, CBOR), the relying party it was made for, the
    # last signature counter seen, the authenticator model (AAGUID) and the name the journalist gave.
    conn.execute("CREATE TABLE IF NOT EXISTS security_keys ("
                 " id INTEGER PRIMARY KEY,"
                 " journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,"
                 " credential_id BLOB NOT NULL UNIQUE, rp_id TEXT NOT NULL, public_key BLOB NOT NULL,"
                 " sign_count INTEGER NOT NULL DEFAULT 0, aaguid TEXT NOT NULL, name TEXT NOT NULL,"
                 " created_at REAL NOT NULL, last_used_at REAL)")
    conn.execute("CREATE INDEX IF NOT EXISTS security_keys_journalist ON security_keys(journalist_id)")
    # Printed recovery codes of an account with keys: Argon2id hashes, deleted when used.
    conn.execute("CREATE TABLE IF NOT EXISTS recovery_codes ("
                 " id INTEGER PRIMARY KEY,"
                 " journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,"
                 " code_hash TEXT NOT NULL, created_at REAL NOT NULL)")
    conn.execute("CREATE INDEX IF NOT EXISTS recovery_codes_journalist ON recovery_codes(journalist_id)")
    # One-time codes for the API of an account with keys (its clients cannot touch a key):
    # a keyed hash of the code, valid once, until it expires or the account's credentials change.
    conn.execute("CREATE TABLE IF NOT EXISTS api_codes ("
                 " code_hash TEXT PRIMARY KEY,"
                 " journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,"
                 " auth_epoch INTEGER NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL)")
    conn.execute("CREATE INDEX IF NOT EXISTS api_codes_journalist ON api_codes(journalist_id)")


def _v10_desks(conn: sqlite3.Connection) -> None:
    # Issue 29: desks. Each has its own submission key and members; a source chooses its desks
    # and each submission and reply records the desks whose keys it was encrypted to (a desk a
    # source adds later cannot open what was sent before). ``texts``: the name and description
    # sources see, per language (JSON, like the instance's own texts); ``name`` is the admin's.
    conn.execute("CREATE TABLE IF NOT EXISTS desks ("
                 " id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE,"
                 " name TEXT NOT NULL COLLATE NOCASE UNIQUE, texts TEXT NOT NULL DEFAULT '{}',"
                 " key_fingerprint TEXT, public_key TEXT, show_members INTEGER NOT NULL DEFAULT 0,"
                 " retention_days INTEGER, is_default INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL)")
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS desks_one_default ON desks(is_default) WHERE is_default = 1")
    conn.execute("CREATE TABLE IF NOT EXISTS desk_members ("
                 " desk_id INTEGER NOT NULL REFERENCES desks(id) ON DELETE CASCADE,"
                 " journalist_id INTEGER NOT NULL REFERENCES journalists(id) ON DELETE CASCADE,"
                 " PRIMARY KEY (journalist_id, desk_id))")
    conn.execute("CREATE INDEX IF NOT EXISTS desk_members_desk ON desk_members(desk_id)")
    # No cascade from desks: a desk that still has sources cannot be removed.
    conn.execute("CREATE TABLE IF NOT EXISTS source_desks ("
                 " source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,"
                 " desk_id INTEGER NOT NULL REFERENCES desks(id),"
                 " PRIMARY KEY (source_id, desk_id))")
    conn.execute("CREATE INDEX IF NOT EXISTS source_desks_desk ON source_desks(desk_id, source_id)")
    for item, table in (("submission", "submissions"), ("reply", "replies")):
        conn.execute(f"CREATE TABLE IF NOT EXISTS {item}_desks ("
                     f" {item}_id INTEGER NOT NULL REFERENCES {table}(id) ON DELETE CASCADE,"
                     " desk_id INTEGER NOT NULL REFERENCES desks(id),"
                     f" PRIMARY KEY ({item}_id, desk_id))")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {item}_desks_desk ON {item}_desks(desk_id)")
    # The instance's key becomes the default desk's (its key is filled in at start-up from
    # DATA/submission-key.asc); every source, submission, reply and journalist is on it, so an
    # upgraded instance behaves exactly as before until an admin adds a second desk.
    conn.execute("INSERT INTO desks(uuid, name, is_default, created_at) VALUES (?, 'Newsroom', 1, ?)",
                 (str(uuid.uuid4()), float(int(time.time() // 86400 * 86400))))
    desk = conn.execute("SELECT id FROM desks WHERE is_default = 1").fetchone()[0]
    conn.execute("INSERT INTO source_desks(source_id, desk_id) SELECT id, ? FROM sources", (desk,))
    conn.execute("INSERT INTO submission_desks(submission_id, desk_id) SELECT id, ? FROM submissions", (desk,))
    conn.execute("INSERT INTO reply_desks(reply_id, desk_id) SELECT id, ? FROM replies", (desk,))
    conn.execute("INSERT INTO desk_members(desk_id, journalist_id) SELECT ?, id FROM journalists", (desk,))
    # The digest counts, for each journalist, only what their desks receive: a submission once
    # (whichever of its desks the journalist is on), a source when it first submits and when it
    # adds a desk of theirs. Made after the rows above, which were counted long ago.
    conn.execute("DROP TRIGGER IF EXISTS digest_count_submission")
    conn.execute("DROP TRIGGER IF EXISTS digest_count_source")
    members = "SELECT journalist_id FROM desk_members WHERE desk_id = NEW.desk_id"
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_count_submission AFTER INSERT ON submission_desks"
                 " BEGIN UPDATE digest_recipients SET new_submissions = new_submissions + 1"
                 f" WHERE journalist_id IN ({members}) AND journalist_id NOT IN ("
                 "  SELECT m.journalist_id FROM desk_members m JOIN submission_desks d ON d.desk_id = m.desk_id"
                 "  WHERE d.submission_id = NEW.submission_id AND d.desk_id != NEW.desk_id); END")
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_count_source AFTER UPDATE OF pending ON sources"
                 " WHEN OLD.pending = 1 AND NEW.pending = 0"
                 " BEGIN UPDATE digest_recipients SET new_sources = new_sources + 1 WHERE journalist_id IN ("
                 "  SELECT m.journalist_id FROM desk_members m JOIN source_desks s ON s.desk_id = m.desk_id"
                 "  WHERE s.source_id = NEW.id); END")
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_count_source_desk AFTER INSERT ON source_desks"
                 " WHEN (SELECT pending FROM sources WHERE id = NEW.source_id) = 0"
                 " BEGIN UPDATE digest_recipients SET new_sources = new_sources + 1"
                 f" WHERE journalist_id IN ({members}) AND journalist_id NOT IN ("
                 "  SELECT m.journalist_id FROM desk_members m JOIN source_desks s ON s.desk_id = m.desk_id"
                 "  WHERE s.source_id = NEW.source_id AND s.desk_id != NEW.desk_id); END")


def _v11_digest_per_desk(conn: sqlite3.Connection) -> None:
    # Issue 29: the digest counts per desk too. For each journalist who gets the digest and each
    # of their desks: what that desk received since their last digest (a submission sent to two
    # of their desks counts in both lines, once in the totals of digest_recipients). Kept by
    # triggers in the transaction that stores a submission, as the totals are; rows go with the
    # recipient (``journalist notify --off``) and with the desk.
    conn.execute("CREATE TABLE IF NOT EXISTS digest_desk_counts ("
                 " journalist_id INTEGER NOT NULL REFERENCES digest_recipients(journalist_id) ON DELETE CASCADE,"
                 " desk_id INTEGER NOT NULL REFERENCES desks(id) ON DELETE CASCADE,"
                 " new_submissions INTEGER NOT NULL DEFAULT 0, new_sources INTEGER NOT NULL DEFAULT 0,"
                 " PRIMARY KEY (journalist_id, desk_id))")
    conn.execute("CREATE INDEX IF NOT EXISTS digest_desk_counts_desk ON digest_desk_counts(desk_id)")

    def bump(column: str, desk: str) -> str:
        """+1 in ``column`` for every digest recipient on desk ``desk`` (an SQL expression)."""
        return ("INSERT INTO digest_desk_counts(journalist_id, desk_id, " + column + ")"
                " SELECT r.journalist_id, " + desk + ", 1 FROM digest_recipients r JOIN desk_members m"
                " ON m.journalist_id = r.journalist_id AND m.desk_id = " + desk +
                " WHERE true ON CONFLICT(journalist_id, desk_id) DO UPDATE SET " + column + " = " + column + " + 1")

    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_desk_count_submission AFTER INSERT ON submission_desks"
                 f" BEGIN {bump('new_submissions', 'NEW.desk_id')}; END")
    # A source is new to a desk when it first submits (pending 1 -> 0), for each desk it has
    # then, and when it adds a desk afterwards.
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_desk_count_source AFTER UPDATE OF pending ON sources"
                 " WHEN OLD.pending = 1 AND NEW.pending = 0 BEGIN"
                 " INSERT INTO digest_desk_counts(journalist_id, desk_id, new_sources)"
                 " SELECT r.journalist_id, s.desk_id, 1 FROM source_desks s"
                 " JOIN desk_members m ON m.desk_id = s.desk_id"
                 " JOIN digest_recipients r ON r.journalist_id = m.journalist_id WHERE s.source_id = NEW.id"
                 " ON CONFLICT(journalist_id, desk_id) DO UPDATE SET new_sources = new_sources + 1; END")
    conn.execute("CREATE TRIGGER IF NOT EXISTS digest_desk_count_source_desk AFTER INSERT ON source_desks"
                 " WHEN (SELECT pending FROM sources WHERE id = NEW.source_id) = 0"
                 f" BEGIN {bump('new_sources', 'NEW.desk_id')}; END")


def _v12_journalist_language(conn: sqlite3.Connection) -> None:
    # Issue 31 item 3: the language an account chose for the journalist interface and its digest
    # mail (a code of languages.JOURNALIST_LANGUAGES). NULL, as every existing account has it: not
    # chosen, so the pages follow the browser and the digest is in English, as before.
    conn.execute("ALTER TABLE journalists ADD COLUMN language TEXT")


Step = Callable[[sqlite3.Connection], None]

# (the version a step produces, the step); versions are consecutive from BASELINE + 1.
STEPS: list[tuple[int, Step]] = [
    (2, _v2_age_indexes),
    (3, _v3_day_precision),
    (4, _v4_one_argon2id_run),
    (5, _v5_reply_read_by_source),
    (6, _v6_listing_index),
    (7, _v7_login_tags),
    (8, _v8_digest_recipients),
    (9, _v9_second_factors),
    (10, _v10_desks),
    (11, _v11_digest_per_desk),
    (12, _v12_journalist_language),
]

CURRENT = BASELINE + len(STEPS)
assert [v for v, _ in STEPS] == list(range(BASELINE + 1, CURRENT + 1)), "schema steps must be consecutive"


def schema_version(conn: sqlite3.Connection) -> int | None:
    """The database's schema version; None for an empty database (nothing made yet)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return None
    try:
        return int(row[0])
    except ValueError:
        raise SchemaError(f"the database's schema version {row[0]!r} is not a number") from None


def check_known(version: int | None, path: str) -> None:
    if version is not None and version > CURRENT:
        raise SchemaError(
            f"{path} has schema version {version}, newer than this DeadDrop knows ({CURRENT}): "
            "run the newer DeadDrop, or restore a backup made by this version"
        )


def _in_transaction(conn: sqlite3.Connection, fn: Callable[[], None]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        fn()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _set_version(conn: sqlite3.Connection, version: int) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) VALUES('schema_version', ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (str(version),),
    )


def upgrade(conn: sqlite3.Connection, path: str = "the database") -> tuple[int | None, int]:
    """Create (empty database) or upgrade to ``CURRENT``. -> (version before, version after).

    Each step re-reads the version inside its own transaction, so two processes upgrading at
    once (the server and ``deaddrop-admin``) do each step exactly once.
    """
    before = schema_version(conn)
    check_known(before, path)

    def create() -> None:
        if schema_version(conn) is None:
            for statement in BASELINE_SQL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            _set_version(conn, BASELINE)

    _in_transaction(conn, create)
    for version, step in STEPS:
        def apply(version: int = version, step: Step = step) -> None:
            if schema_version(conn) == version - 1:
                step(conn)
                _set_version(conn, version)

        _in_transaction(conn, apply)
    after = schema_version(conn)
    assert after == CURRENT, after
    return before, after
