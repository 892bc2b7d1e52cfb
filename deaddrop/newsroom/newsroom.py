# -*- test-case-name: tests.integration.test_source_flow,tests.integration.test_login_tags,tests.test_admission_fairness -*-
"""Source use cases: create, log in, submit, read and delete replies; replies from journalists
(the keys and replies in ``replies``, submissions in ``submissions``).

This is the only layer that sees a codename, and only for as long as the KDF needs it: what
a session keeps is the filesystem id (to find the source's files) and the key passphrase (to
decrypt replies while the source is logged in), both derived, never the codename itself.
"""
from __future__ import annotations

import os
import sqlite3
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.logger import Logger
from twisted.python.failure import Failure

from deaddrop.newsroom import codenames
from deaddrop.admission.queues import Admission, AdmissionQueue, Pace, Ticket
from deaddrop.admission.answer_grid import AnswerGrid
from deaddrop.crypto.gpg import Keyring
from deaddrop.crypto.kdf import CodenameKdf, Derived, unwrap_passphrase, wrap_passphrase
from deaddrop.crypto.pool import WorkerPool
from deaddrop.crypto.streaming import EncryptionTarget
from deaddrop.admission.upload_slots import UploadSlots
from deaddrop.newsroom.daily_report import SourceActivity
from deaddrop.newsroom.desks import Desks, NoSuchDesk
from deaddrop.newsroom.encryption import SubmissionEncryption
from deaddrop.events import SecurityEvents
from deaddrop.newsroom.identity import SourceIdentity
from deaddrop.newsroom.replies import SourceReplies
from deaddrop.newsroom.submissions import Submissions
from deaddrop.store import desk_queries, queries
from deaddrop.store.db import Database
from deaddrop.admission.disk_space import DiskSpace
from deaddrop.store.files import Store
from deaddrop.admission.throttle import FailureThrottle

_log = Logger(namespace="deaddrop.sources")  # the name its log lines carried before the module moved


class NoFreeDesignation(Exception):
    """Twenty random designations were all taken: the lists are too small for the instance
    (start-up checks them against the sources it holds; this is the rest of the way)."""


class LoginThrottled(Exception):
    """This codename was tried too often lately (counted per derived identity, after the KDF)."""


# Logins per derived identity: a source logs in a few times a visit; 128 sessions opened at once
# with one codename (to hold many uploads) are not a source.
IDENTITY_LOGINS_PER_MINUTE = 30
# Longest expected wait for reply decryption before "busy, come back" is the kinder answer.
MAX_WAIT = 4.0
# Longest expected wait for Argon2id (a login or a new codename): a Tor page load already takes
# seconds, so a visitor still connected may wait this long before the calm busy page. How many
# may wait follows from the pace Argon2id has been running at lately.
PATIENCE = 20.0
# Until the first Argon2id run was timed: about a run at the default cost.
FIRST_PACE_GUESS = 0.25
# Argon2id runs timed one after another at start-up; the fastest is the run time that sets
# when login and create answers leave (``AnswerGrid``): what the machine does when nothing
# else holds it (a start-up among other start-ups once made runs of 2 s and a delay of 8 s).
CALIBRATION_RUNS = 3
# A returning source logs in a few times a visit. Its logins beyond this many in
# RETURNING_WINDOW seconds (counted per login tag, successful logins only: a wrong codename
# whose tag collides cannot use up a source's) wait behind new codenames: codenames of one's own,
# logged in again and again (they never fail), would otherwise keep every /create waiting.
RETURNING_LOGINS = 5
RETURNING_WINDOW = 600.0
# /create is owed one Argon2id slot in this many while it waits, whatever logins keep coming:
# a new source then waits at most CREATE_SHARE - 1 runs of others before each create ahead of
# it and its own (security review F5: with 2 slots and 0.25 s runs, a lone create is served
# within 1 s, where three codenames with two logins each in flight kept it waiting 60 s). A
# returning source is still served first: the share falls due only after logins were served
# while a create waited.
CREATE_SHARE = 4
# Sources that have not submitted yet (a row each: no folder, no key) kept at most; beyond it
# the oldest goes. About 530 bytes of database each with its indexes (measured): 53 MB at most.
MAX_PENDING_SOURCES = 100_000


@dataclass
class SourceQueues:
    """The bounded, fair admission queues in front of a source's expensive work."""

    argon2id: AdmissionQueue  # key: the Tor circuit; logins whose tag some source has: served first
    creates: AdmissionQueue  # key: the Tor circuit; new codenames, in arrival order, after logins
    untagged: AdmissionQueue  # key: the Tor circuit; logins that may be a source made before tags
    repeats: AdmissionQueue  # key: the Tor circuit; a tag's logins beyond RETURNING_LOGINS, after creates
    keygen: AdmissionQueue  # key: source id
    decrypt: AdmissionQueue  # key: source id; a logged-in source's replies
    messages: AdmissionQueue  # key: source id; text-only parts, on their own pool
    uploads: UploadSlots  # key: source id (and its circuit); a slot is held for an upload's whole life
    # When /login and /create answers leave: on a grid from each request's arrival.
    answers: AnswerGrid

    @classmethod
    def build(cls, crypto_pool: Any, crypto_slots: int, message_pool: Any, message_slots: int,
              stream_pool: Any, upload_slots: int, uploads_per_identity: int,
              clock: Callable[[], float] = time.monotonic, timer: Any = None,
              standing: Callable[[Hashable], int] | None = None) -> "SourceQueues":
        """``standing``: a circuit's wrong codenames lately (0: none; None: every circuit alike).
        A circuit that sent some waits behind those that did not, and gives up its place to them
        when a login queue is full."""
        crypto = Admission(crypto_pool, crypto_slots, clock=clock, timer=timer)
        # About 4 s of work waiting at ~0.25 s a run: beyond that a source is better told at
        # once to come back than kept waiting.
        waiting = 16 * crypto_slots
        # Argon2id: up to PATIENCE at that pace; the measured pace decides the actual length.
        patient = int(PATIENCE / FIRST_PACE_GUESS) * crypto_slots
        argon2id = Pace(FIRST_PACE_GUESS)  # logins and creations run the same Argon2id: one pace
        messages = Admission(message_pool, message_slots)
        # Runs at once: one per slot, but no more than the cores (more slots share them).
        parallel = min(crypto_slots, os.cpu_count() or 1)
        return cls(
            # Served in this order when a crypto slot frees: what a logged-in source is waiting
            # for first; then fresh Argon2id, a returning source's login before a new codename
            # (which is owed one slot in CREATE_SHARE), then the logins of a tag that logged in
            # more than a source does, and last a login whose tag matches no source (it can only
            # be a source made before tags: while any remains, a wrong codename lands here and
            # costs a run).
            decrypt=crypto.queue("decrypt", priority=0, per_key=2, max_waiting=waiting, max_wait=MAX_WAIT),
            keygen=crypto.queue("keygen", priority=1, per_key=1, max_waiting=waiting),
            argon2id=crypto.queue("argon2id", priority=2, per_key=2, max_waiting=patient, max_wait=PATIENCE,
                                  pace=argon2id, standing=standing),
            creates=crypto.queue("creates", priority=3, per_key=2, max_waiting=patient, max_wait=PATIENCE,
                                 fifo=True, pace=argon2id, share=CREATE_SHARE),
            repeats=crypto.queue("repeats", priority=4, per_key=2, max_waiting=patient, max_wait=PATIENCE,
                                 pace=argon2id, standing=standing),
            untagged=crypto.queue("untagged", priority=5, per_key=2, max_waiting=patient, max_wait=PATIENCE,
                                  pace=argon2id, standing=standing),
            messages=messages.queue("messages", priority=0, per_key=2, max_waiting=16 * message_slots),
            # One Tor circuit holds a small share of the pumps at most; the slowest upload makes
            # room for a newcomer when all are taken (see upload_slots).
            uploads=UploadSlots(Admission(stream_pool, upload_slots), per_key=uploads_per_identity,
                                per_circuit=max(uploads_per_identity, upload_slots // 16)),
            answers=AnswerGrid(FIRST_PACE_GUESS, parallel, timer),
        )

    @inlineCallbacks
    def calibrate(self, run: Callable[[], Any]):
        """Time ``CALIBRATION_RUNS`` Argon2id runs (``run``, blocking) one after another through
        the login queue: the fastest is the run time that sets when login and create answers
        leave (``answers``), for the life of the process. -> that time."""
        took = []
        for _ in range(CALIBRATION_RUNS):
            seconds = yield self.argon2id.admit(None, lambda ticket: self._timed(ticket, run))
            took.append(seconds)
        run_seconds = min(took)
        self.answers.calibrate(run_seconds)
        return run_seconds

    def _timed(self, ticket: Ticket, run: Callable[[], Any]) -> Deferred:
        """One run on ``ticket``'s slot. -> the seconds it took."""
        clock = self.argon2id.admission.clock
        started = clock()
        return ticket.run(run).addCallback(lambda _: clock() - started)


@dataclass
class Newsroom:
    """The use cases, wired to their blocking back-ends through thread pools.

    Source key pairs and replies are a part of their own, ``replies`` (``SourceReplies``), and so
    are uploads and submissions, ``submissions`` (``Submissions``: ``submit`` stores one)."""

    reactor: Any
    db: Database
    store: Store
    keyring: Keyring
    kdf: CodenameKdf
    crypto_pool: WorkerPool
    stream_pool: WorkerPool  # one thread per upload in flight, pumping it into gpg
    io_pool: WorkerPool  # short file-system work (renames, fsyncs, reads): never behind uploads
    encryption: EncryptionTarget
    submission_fingerprint: str
    events: SecurityEvents
    queues: SourceQueues
    message_pool: WorkerPool  # text-only parts: never behind slow file uploads
    disk: DiskSpace | None = None  # admits uploads against free space (None: not checked)
    clock: Callable[[], float] = time.time
    # What sources did today, counted, never logged when it happens (see daily_report).
    activity: SourceActivity = field(default_factory=SourceActivity)
    identity_logins: FailureThrottle = field(
        default_factory=lambda: FailureThrottle(IDENTITY_LOGINS_PER_MINUTE, 60.0))
    # Successful logins per login tag lately: beyond RETURNING_LOGINS they lose login priority.
    returning_logins: FailureThrottle = field(
        default_factory=lambda: FailureThrottle(RETURNING_LOGINS, RETURNING_WINDOW))
    # True while sources of the first KDF scheme remain: only then does a codename that matches
    # nothing cost a second Argon2id run (the legacy filesystem id).
    legacy_sources: bool = True
    # Pending sources kept at most (None: no cap); the oldest goes first (see _create).
    max_pending_sources: int | None = MAX_PENDING_SOURCES
    # Argon2id runs started for logins, and logins answered by their tag alone (a count only).
    login_runs: int = 0
    login_decoys: int = 0
    _evicting: bool = False
    _pending_estimate: int | None = None
    _evict_again: bool = False
    # Stored filenames whose row is committed but whose file is not in the store yet. Readers
    # skip those rows, or a download would 404 and /lookup show an unreadable reply. (Safe
    # because the one database thread answers in order: an insert's result reaches the
    # reactor, which adds its names here, before the result of any later query.)
    _placing: set[str] = field(default_factory=set)
    _source_deleted_hooks: list[Callable[[int], None]] = field(default_factory=list)
    replies: SourceReplies = field(init=False)
    desks: Desks = field(init=False)
    encrypting: SubmissionEncryption = field(init=False)
    submissions: Submissions = field(init=False)

    def __post_init__(self) -> None:
        self.desks = Desks(self.db, self.keyring, self.crypto_pool, os.path.dirname(self.store.root))
        self.encrypting = SubmissionEncryption(
            reactor=self.reactor, store=self.store, desks=self.desks, target=self.encryption,
            stream_pool=self.stream_pool, message_pool=self.message_pool, messages=self.queues.messages,
            activity=self.activity, disk=self.disk)
        self.replies = SourceReplies(
            db=self.db, store=self.store, keyring=self.keyring, crypto_pool=self.crypto_pool, io_pool=self.io_pool,
            desks=self.desks, activity=self.activity,
            keygen=self.queues.keygen, decrypt=self.queues.decrypt, clock=self.clock, placing=self._placing)
        self.on_source_deleted(self.replies.read_marks.forget)
        self.submissions = Submissions(
            db=self.db, store=self.store, encrypting=self.encrypting, io_pool=self.io_pool,
            uploads=self.queues.uploads, disk=self.disk, activity=self.activity, replies=self.replies,
            clock=self.clock, placing=self._placing)

    def is_placed(self, filename: str) -> bool:
        """False while a committed submission or reply is still being moved into the store."""
        return filename not in self._placing

    # -- accounts ------------------------------------------------------------------------

    def create_source(self, codename: str, circuit: Any = None) -> Deferred:
        """Make a source for a freshly generated codename. -> (SourceIdentity, passphrase).

        Waits in the creation queue, after every login (cancellable while it waits; fails with
        ``Busy`` at once when full). Answered on the grid from its arrival (``queues.answers``),
        like a login. A pending source is a row only: its folder and key pair are made at its
        first submission, and beyond ``max_pending_sources`` the oldest pending one goes.
        """
        tag = self.kdf.login_tag(codename)

        def made(result: Any) -> Any:
            self._evict_pending()
            return result

        return self.queues.answers.answer(
            lambda: self.queues.creates.admit(circuit, lambda ticket: self._create(ticket, codename, tag))
            .addCallback(made))

    @inlineCallbacks
    def _create(self, ticket: Ticket, codename: str, tag: int):
        derived = yield ticket.run(self.kdf.derive, codename)
        fid = derived.filesystem_id
        for _attempt in range(20):
            designation = codenames.generate_designation()
            try:
                source_id = yield self.db.run(
                    queries.insert_source, str(uuidlib.uuid4()), fid, designation, self.clock(), tag
                )
            except sqlite3.IntegrityError as e:
                if "filesystem_id" in str(e) or "login_id" in str(e):
                    raise ValueError("codename already in use")
                continue  # designation taken: draw another
            break
        else:
            raise NoFreeDesignation()
        return SourceIdentity(source_id, fid, designation, ()), derived.key_passphrase

    def _evict_pending(self) -> None:
        """Beyond ``max_pending_sources`` sources that never submitted, delete the oldest (a
        source sending its first submission right now is left alone). Counted in memory between
        rounds (an overestimate: submissions and purges only lower it), and each round evicts a
        hundredth of the cap more, so the database is asked once per that many creations."""
        cap = self.max_pending_sources
        if cap is None:
            return
        if self._pending_estimate is not None:
            self._pending_estimate += 1
            if self._pending_estimate <= cap:
                return
        if self._evicting:
            # A round is under way; its count may predate this creation: another round follows.
            self._evict_again = True
            return
        self._evicting = True

        @inlineCallbacks
        def evict():
            ids = yield self.db.run(queries.pending_sources_beyond, cap - cap // 100)
            for source_id in ids:
                if not self.submissions.in_flight(source_id):
                    yield self.delete_source(source_id)
            self._pending_estimate = yield self.db.run(queries.pending_source_count)

        def done(result: Any) -> None:
            self._evicting = False
            if isinstance(result, Failure):
                self._pending_estimate = None
                _log.error("pending-source eviction failed: {error}", error=type(result.value).__name__)
            elif self._evict_again:
                self._evict_again = False
                self._pending_estimate = None
                self._evict_pending()

        evict().addBoth(done)

    def login(self, codename: str, circuit: Any = None) -> Deferred:
        """-> (SourceIdentity, passphrase) or None; raises ``LoginThrottled`` or ``Busy``.

        Every answer but ``Busy`` leaves on the grid from its arrival (``queues.answers``): its
        time tells nothing of other requests' runs, nor whether an Argon2id run was made.

        First the codename's login tag (microseconds): if no source has it, and every source has
        a tag, it belongs to nobody and the answer is None, with no run (``AdmissionQueue.decoy``
        holds its circuit's place as long as a run would). Else one Argon2id run, in the
        login queue of ``circuit``, ahead of every new codename (which is owed one slot in
        ``CREATE_SHARE``), unless that tag logged in more than ``RETURNING_LOGINS`` times lately,
        then after new codenames; a codename whose tag matches
        nobody while sources without a tag remain waits after new codenames (only such a source
        can own it). While sources of the first KDF scheme remain, a codename that matches no
        current source costs one more run (the old filesystem id); a legacy source that matches
        is migrated then (a third run, once per source, for its old key passphrase). A source
        without a tag gets one at its login.
        """
        tag = self.kdf.login_tag(codename)
        return self.queues.answers.answer(lambda: self._login_by_tag(codename, tag, circuit))

    @inlineCallbacks
    def _login_by_tag(self, codename: str, tag: int, circuit: Any):
        matched, untagged = yield self.db.run(queries.login_tag_state, tag)
        if matched or untagged:
            if not matched:
                queue = self.queues.untagged
            elif self.returning_logins.blocked(tag):
                queue = self.queues.repeats  # logged in more than a source does: after creates
            else:
                queue = self.queues.argon2id
            found = yield queue.admit(circuit, lambda ticket: self._login(ticket, codename, tag))
            return found
        self.login_decoys += 1
        yield self.queues.argon2id.decoy(circuit, self.queues.answers.run_seconds)
        return None

    @inlineCallbacks
    def _login(self, ticket: Ticket, codename: str, tag: int):
        self.login_runs += 1
        derived: Derived = yield ticket.run(self.kdf.derive, codename)
        if self.identity_logins.blocked(derived.filesystem_id):
            raise LoginThrottled()
        row = yield self.db.run(queries.source_by_login_id, derived.filesystem_id)
        if row is None and self.legacy_sources:
            row = yield self._migrate_legacy(ticket, codename, derived)
        if row is None or row["login_tag"] == queries.RETIRED_TAG:
            return None
        # Counted for real identities only (a wrong codename is the circuit's failure).
        self.identity_logins.failed(derived.filesystem_id)
        self.returning_logins.failed(tag)
        if row["login_tag"] is None:
            # Made before tags: tagged now, with the codename it just gave (nothing else could).
            yield self.db.run(queries.set_login_tag, row["id"], tag)
        passphrase = derived.key_passphrase
        if row["key_wrap"] is not None:
            passphrase = unwrap_passphrase(derived, row["key_wrap"])
        desks = yield self.db.run(desk_queries.desks_of_source, row["id"])
        identity = SourceIdentity(row["id"], row["filesystem_id"], row["designation"], desks)
        if row["key_fingerprint"] is None and not row["pending"]:
            self.replies.ensure_key(identity, passphrase)
        return identity, passphrase

    def calibrate(self) -> Deferred:
        """Time Argon2id at start-up, on throwaway inputs (``SourceQueues.calibrate``). -> the run time."""
        return self.queues.calibrate(lambda: self.kdf.derive(os.urandom(16).hex()))

    @inlineCallbacks
    def _migrate_legacy(self, ticket: Ticket, codename: str, derived: Derived):
        """A source of the first scheme: move it to the one-run scheme. -> its row or None."""
        legacy_fid = yield ticket.run(self.kdf.legacy_filesystem_id, codename)
        row = yield self.db.run(queries.legacy_source_by_filesystem_id, legacy_fid)
        if row is None:
            self.legacy_sources = yield self.db.run(queries.any_legacy_source)
            return None
        wrapped = None
        if row["key_fingerprint"] is not None:
            # Its key pair is locked with the old passphrase (and its replies are encrypted to
            # it): keep that passphrase, encrypted under the new derivation.
            old_passphrase = yield ticket.run(self.kdf.legacy_key_passphrase, codename)
            wrapped = wrap_passphrase(derived, old_passphrase)
        yield self.db.run(queries.migrate_source_login, row["id"], derived.filesystem_id, wrapped)
        self.legacy_sources = yield self.db.run(queries.any_legacy_source)
        row = yield self.db.run(queries.source_by_id, row["id"])
        return row

    # -- desks ---------------------------------------------------------------------------

    @inlineCallbacks
    def add_desks(self, identity: SourceIdentity, desk_uuids: Iterable[str]):
        """The source adds desks to its own (never removes one: what was sent stays where it was
        sent). -> its identity with every desk it has now. Raises ``NoSuchDesk``."""
        chosen = []
        for uuid in desk_uuids:
            desk = self.desks.by_uuid(uuid)
            if desk is None or not self.desks.is_offered(desk):  # gone, keyless or read by no one
                raise NoSuchDesk()
            chosen.append(desk.id)
        desks = yield self.db.run(desk_queries.add_source_desks, identity.source_id, chosen)
        return SourceIdentity(identity.source_id, identity.filesystem_id, identity.designation, desks)

    # -- deletion ------------------------------------------------------------------------

    def on_source_deleted(self, hook: Callable[[int], None]) -> None:
        self._source_deleted_hooks.append(hook)

    @inlineCallbacks
    def delete_source(self, source_id: int):
        row = yield self.db.run_and_scrub(queries.delete_source, source_id)
        if row is None:
            return False
        for hook in self._source_deleted_hooks:
            hook(source_id)
        yield self.crypto_pool.run(self.store.remove_source, row["filesystem_id"])
        if row["key_fingerprint"]:
            yield self.crypto_pool.run(self.keyring.delete_key_pair, row["key_fingerprint"])
        return True

    @inlineCallbacks
    def purge_pending_sources(self, max_age: float):
        """Delete sources that submitted nothing within ``max_age`` seconds of their creation.

        Creation times are kept to the day (midnight UTC), so a day is added: a source goes
        between ``max_age`` and ``max_age`` + 24 h after it was made, never sooner. A source
        uploading its first submission right now is left for the next round.
        """
        ids = yield self.db.run(queries.pending_sources_before, self.clock() - max_age - 86400.0)
        purged = 0
        for source_id in ids:
            if self.submissions.in_flight(source_id):
                continue
            deleted = yield self.delete_source(source_id)
            purged += bool(deleted)
        if purged:
            _log.info("purged {n} pending sources that never submitted", n=purged)
        return purged

    # -- start-up ------------------------------------------------------------------------

    def recover_blocking(self) -> Any:
        """Reconcile store and database before serving (start-up, before the reactor runs)."""
        self.legacy_sources = self.db.run_blocking(queries.any_legacy_source)
        known = self.db.run_blocking(queries.all_stored_filenames)
        report, missing = self.store.recover(known)
        if missing:
            self.db.run_blocking(queries.delete_rows_for_missing_files, missing)
        return report
