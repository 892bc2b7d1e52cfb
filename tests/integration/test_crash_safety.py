"""``kill -9`` during concurrent uploads, then restart: nothing acknowledged is ever lost.

The real ``twistd -n deaddrop`` runs as a child process (``tests._process``). Each round logs
ten sources in, fires 50 concurrent uploads of mixed sizes (1 KB to 5 MB files, messages, both),
kills the server with SIGKILL at a random moment 0.2 to 2 s in (clients start within the first
1.8 s and send at 0.5 to 6 MB/s each, as over Tor, so every kill finds uploads at every stage), and restarts it on the same data
directory. Then:

- every submission whose success answer (303 to /lookup from POST /submit) reached its client
  is in the store and decrypts, with the SVS key, to exactly what was sent;
- no temp, partial or orphan file is left: DATA/tmp is empty, every file in the store has a
  database row and every row its file (with the recorded ciphertext size);
- the server started without help and logged its recovery line; SQLite is intact.

Figures (acknowledged, lost in flight, present after restart, temp files cleaned) are printed
and written to the trial log. ``DD_CRASH_SEED`` replays a run.
"""
from __future__ import annotations

import hashlib
import math
import os
import random
import re
import shutil
import sqlite3
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from twisted.python import log
from twisted.trial import unittest

from tests._process import ConnectionBroke, RawClient, ServerProcess, exchange
from tests._support import short_tempdir, test_svs
from tests.integration.test_source_flow import gunzip_with_name

ROUNDS = 3
UPLOADS_PER_ROUND = 50
SOURCES = 25  # two uploads at once per source: the per-session limit
MIN_FILE, MAX_FILE = 1024, 5 * 1024 * 1024
_STORED = re.compile(r"^([1-9][0-9]*)-[a-z]+_[a-z]+_[a-z]+-(msg|doc\.gz)\.gpg$")


@dataclass
class Job:
    tag: str
    source: int
    message: str
    file_name: str | None
    file_sha256: str | None
    file_size: int
    request: bytes = b""
    outcome: str = "pending"  # acked | lost | refused:<status>
    found: set = field(default_factory=set)  # "msg" / "doc" parts found in the store

    @property
    def parts(self) -> set:
        return ({"msg"} if self.message else set()) | ({"doc"} if self.file_name else set())


def make_job(rng: random.Random, round_no: int, index: int, source: int) -> Job:
    tag = f"r{round_no}j{index:02d}-{uuid.uuid4().hex[:10]}"
    kind = rng.choice(["msg", "file", "both", "file", "both"])
    message = ""
    if kind in ("msg", "both"):
        message = f"message {tag} " + "lorem ipsum " * rng.randint(0, 2000)
    file_name = file_sha = None
    size = 0
    if kind in ("file", "both"):
        # Log-uniform 1 KB .. 5 MB: many small uploads finish before the kill, big ones do not.
        size = int(math.exp(rng.uniform(math.log(MIN_FILE), math.log(MAX_FILE))))
        content = tag.encode() + os.urandom(size - len(tag))
        file_name = f"{tag}.bin"
        file_sha = hashlib.sha256(content).hexdigest()
        job = Job(tag, source, message, file_name, file_sha, size)
        job._content = content
        return job
    return Job(tag, source, message, None, None, 0)


class CrashSafetyTests(unittest.TestCase):
    def setUp(self):
        self.workdir = short_tempdir("dd-crash-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self.data_dir = os.path.join(self.workdir, "data")
        self.server = ServerProcess(self.data_dir)
        self.addCleanup(self.server.cleanup)
        self.svs = test_svs()

    def report(self, line: str) -> None:
        print(line)
        log.msg(line)

    def test_kill_9_during_concurrent_uploads_loses_nothing_acknowledged(self):
        seed = int(os.environ.get("DD_CRASH_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        self.report(f"crash safety: seed {seed} (DD_CRASH_SEED={seed} replays the sizes and kill times)")
        started = time.monotonic()
        recovery = self.server.start()
        self.assertEqual((recovery.temp_files_removed, recovery.rows_without_file, recovery.files_without_row), (0, 0, 0))
        codenames = [RawClient(self.server.port).create_source() for _ in range(SOURCES)]

        all_jobs: list[Job] = []
        decrypted: dict[str, tuple[str, str]] = {}  # stored path -> (kind, tag)
        totals = dict(acked=0, lost=0, present=0, partial=0, temp_cleaned=0, orphans_removed=0, rows_dropped=0)
        for round_no in range(1, ROUNDS + 1):
            jobs = self._run_round(rng, round_no, codenames)
            all_jobs += jobs
            recovery = self.server.start()
            # Straight after start-up, before anything new arrives: no temp file survived.
            self.assertEqual(os.listdir(os.path.join(self.data_dir, "tmp")), [])
            self._assert_store_and_database_agree()
            self._decrypt_new_files(decrypted, {j.tag: j for j in all_jobs})
            acked = [j for j in jobs if j.outcome == "acked"]
            lost = [j for j in jobs if j.outcome == "lost"]
            present = [j for j in jobs if j.found == j.parts]
            partial = [j for j in jobs if j.found and j.found != j.parts]
            for job in acked:
                self.assertEqual(job.found, job.parts, f"acknowledged submission {job.tag} lost: {job.found} of {job.parts}")
            self.assertEqual(len(acked) + len(lost), len(jobs), [j.outcome for j in jobs])
            log_text = self.server.log_since_start()
            self.assertNotIn("Traceback", log_text)
            self.assertNotIn("request failed", log_text)
            self.report(
                f"crash round {round_no}: {len(jobs)} uploads, killed at {self._kill_at:.2f} s: "
                f"{len(acked)} acknowledged, {len(lost)} lost in flight; after restart {len(present)} present "
                f"({len(present) - len(acked)} stored but unacknowledged), {len(partial)} partial (unacknowledged); "
                f"recovery: {recovery.temp_files_removed} temp files cleaned, {recovery.rows_without_file} rows "
                f"without file, {recovery.files_without_row} files without row"
            )
            totals["acked"] += len(acked)
            totals["lost"] += len(lost)
            totals["present"] += len(present)
            totals["partial"] += len(partial)
            totals["temp_cleaned"] += recovery.temp_files_removed
            totals["orphans_removed"] += recovery.files_without_row
            totals["rows_dropped"] += recovery.rows_without_file

        # Everything acknowledged in any round is still there after all the later crashes.
        self._assert_store_and_database_agree()
        for job in all_jobs:
            if job.outcome == "acked":
                self.assertEqual(job.found, job.parts, job.tag)
        on_disk = {tag for _kind, tag in decrypted.values()}
        for path, (_kind, tag) in decrypted.items():
            self.assertTrue(os.path.exists(path), f"{path} ({tag}) vanished after a later crash")
        self.assertLessEqual({j.tag for j in all_jobs if j.outcome == "acked"}, on_disk)

        # The restarted server takes new submissions as usual.
        client = RawClient(self.server.port)
        self.assertEqual(client.login(codenames[0]).status, 303)
        response = client.submit("after the crashes", [("after.txt", b"after")])
        self.assertEqual((response.status, (response.header("location") or "").split("?")[0]), (303, "/lookup"))
        self._assert_store_and_database_agree()

        # The run exercised both sides of the kill, or it proved nothing.
        self.assertGreater(totals["acked"], 0, "no upload was acknowledged before any kill")
        self.assertGreater(totals["lost"], 0, "no upload was in flight at any kill")
        self.report(
            f"crash safety totals: {ROUNDS} rounds x {UPLOADS_PER_ROUND} uploads: {totals['acked']} acknowledged "
            f"(all present and decrypting), {totals['lost']} lost in flight, {totals['present']} present after "
            f"restart, {totals['partial']} partial unacknowledged, {totals['temp_cleaned']} temp files cleaned, "
            f"{totals['orphans_removed']} orphan files removed, {totals['rows_dropped']} rows without file dropped; "
            f"{time.monotonic() - started:.1f} s"
        )

    # -- one round -------------------------------------------------------------------------

    def _run_round(self, rng: random.Random, round_no: int, codenames: list[str]) -> list[Job]:
        port = self.server.port
        sessions = []
        for codename in codenames:
            client = RawClient(port)
            self.assertEqual(client.login(codename).status, 303)
            sessions.append((client, client.lookup_csrf()))
        jobs = [make_job(rng, round_no, i, i % SOURCES) for i in range(UPLOADS_PER_ROUND)]
        for job in jobs:
            client, csrf = sessions[job.source]
            files = [(job.file_name, job._content)] if job.file_name else []
            job.request = client.submit_bytes(csrf, job.message, files)
            if job.file_name:
                del job._content
        gate = threading.Barrier(len(jobs) + 1)

        def paced(job: Job, start: float, rate: float):
            # Sources arrive over Tor: staggered starts, each at its own pace, so that at any
            # kill moment some uploads are done, some mid-body and some committing.
            time.sleep(start)
            for offset in range(0, len(job.request), 64 * 1024):
                yield job.request[offset:offset + 64 * 1024]
                time.sleep(64 * 1024 / rate)

        def upload(job: Job, start: float, rate: float) -> None:
            gate.wait()
            try:
                response = exchange(port, paced(job, start, rate), timeout=60)
            except ConnectionBroke:
                job.outcome = "lost"
                return
            location = response.header("location") or ""
            if response.status == 303 and location.startswith("/lookup?form=") and location.endswith("&received=1"):
                job.outcome = "acked"
            else:
                job.outcome = f"refused:{response.status}"

        threads = [threading.Thread(target=upload, args=(job, rng.uniform(0, 1.8), rng.uniform(0.5, 6) * 1e6), daemon=True)
                   for job in jobs]
        for t in threads:
            t.start()
        self._kill_at = rng.uniform(0.2, 2.0)
        gate.wait()
        time.sleep(self._kill_at)
        self.server.kill()
        for t in threads:
            t.join(30)
        for job in jobs:
            job.request = b""
        refused = [(j.tag, j.outcome) for j in jobs if j.outcome not in ("acked", "lost")]
        self.assertEqual(refused, [], "uploads answered with something other than success")
        return jobs

    # -- checks ----------------------------------------------------------------------------

    def _assert_store_and_database_agree(self) -> None:
        db = sqlite3.connect(f"file:{os.path.join(self.data_dir, 'db.sqlite')}?mode=ro", uri=True)
        try:
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            rows = db.execute(
                "SELECT s.filesystem_id, x.filename, x.size, x.n, s.next_n FROM submissions x"
                " JOIN sources s ON s.id = x.source_id"
            ).fetchall()
            orphan_rows = db.execute(
                "SELECT COUNT(*) FROM submissions WHERE source_id NOT IN (SELECT id FROM sources)"
            ).fetchone()[0]
            fids = {r[0] for r in db.execute("SELECT filesystem_id FROM sources")}
        finally:
            db.close()
        self.assertEqual(orphan_rows, 0)
        store = os.path.join(self.data_dir, "store")
        expected = {}
        for fid, filename, size, n, next_n in rows:
            self.assertLess(n, next_n, f"{filename}: number not reserved")
            expected[os.path.join(store, fid, filename)] = size
        on_disk = {}
        for entry in os.listdir(store):
            directory = os.path.join(store, entry)
            self.assertTrue(os.path.isdir(directory) and entry in fids, f"stray entry in the store: {entry}")
            for name in os.listdir(directory):
                self.assertRegex(name, _STORED, f"temp or partial file visible in the store: {entry}/{name}")
                on_disk[os.path.join(directory, name)] = os.path.getsize(os.path.join(directory, name))
        self.assertEqual(sorted(set(on_disk) - set(expected)), [], "files in the store without a database row")
        self.assertEqual(sorted(set(expected) - set(on_disk)), [], "database rows without their file")
        self.assertEqual(on_disk, expected, "a stored file's size differs from its row (truncated?)")

    def _decrypt_new_files(self, decrypted: dict, jobs: dict[str, Job]) -> None:
        store = os.path.join(self.data_dir, "store")
        new = [os.path.join(store, fid, name) for fid in os.listdir(store)
               for name in os.listdir(os.path.join(store, fid))
               if os.path.join(store, fid, name) not in decrypted]

        def open_one(path: str) -> tuple[str, str, str, str]:
            with open(path, "rb") as f:
                plain = self.svs.decrypt(f.read())
            if path.endswith("-msg.gpg"):
                text = plain.decode("utf-8")
                return path, "msg", text.split(" ")[1], text
            name, content = gunzip_with_name(plain)
            return path, "doc", name[: -len(".bin")], hashlib.sha256(content).hexdigest()

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(open_one, new))
        for path, kind, tag, evidence in results:
            job = jobs.get(tag)
            if job is None:
                continue  # the final, post-crash submission
            if kind == "msg":
                self.assertEqual(evidence, job.message, f"{tag}: message decrypts to something else")
            else:
                self.assertEqual(evidence, job.file_sha256, f"{tag}: document decrypts to something else")
            self.assertNotIn(kind, job.found, f"{tag}: {kind} stored twice")
            job.found.add(kind)
            decrypted[path] = (kind, tag)
