"""``deaddrop-journalist sync``: fetch every submission this workstation has not downloaded yet,
encrypted, exactly as stored, whether or not it was read in the browser or by a colleague (the
``DownloadLedger`` says what was downloaded here).

Each file is verified against the server's ``sha256:`` ETag, resumed with a Range request if a
previous run was interrupted, made durable (fsync, rename), and only then marked seen and
written down as downloaded.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import treq
from twisted.internet.defer import inlineCallbacks

from deaddrop.durable import replace_durably
from deaddrop.workstation.api import ApiError, JournalistApi
from deaddrop.workstation.ledger import DownloadLedger

# Designations are "amber_quiet_lantern", or "amber_lantern" for sources made before they had
# three words: lowercase words and underscores only, so always one safe folder name.
_SAFE_NAME = re.compile(r"^[1-9][0-9]*-[a-z]+(?:_[a-z]+){1,2}-(msg|doc\.gz|reply)\.gpg$")
_SAFE_DIR = re.compile(r"^[a-z]+(?:_[a-z]+){1,2}$")


class SyncError(Exception):
    pass


@dataclass
class SyncReport:
    downloaded: list[str] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    refetched: list[str] = field(default_factory=list)
    marked_seen: int = 0
    partial_responses: int = 0  # 206 answers to our Range requests
    downloaded_before: int = 0  # by an earlier sync on this workstation: not fetched again
    read_elsewhere: int = 0  # fetched although read already (in the browser, or by a colleague)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _etag_digest(response: Any) -> str | None:
    values = response.headers.getRawHeaders(b"etag") or []
    for value in values:
        value = value.decode("ascii", "replace").strip().strip('"')
        if value.startswith("sha256:"):
            return value[len("sha256:"):].lower()
    return None


class Progress:
    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled

    def update(self, label: str, done: int, total: int) -> None:
        if not self._enabled:
            return
        width = 30
        fraction = done / total if total else 1.0
        bar = "#" * int(fraction * width)
        self._stream.write(f"\r{label[:40]:40} [{bar:<{width}}] {fraction * 100:5.1f}%")
        self._stream.flush()

    def done(self) -> None:
        if self._enabled:
            self._stream.write("\n")


class Syncer:
    def __init__(self, api: JournalistApi, out_dir: str, progress: Progress | None = None,
                 ledger: DownloadLedger | None = None) -> None:
        self.api = api
        self.out_dir = out_dir
        self.progress = progress or Progress(sys.stderr, sys.stderr.isatty())
        self.ledger = ledger if ledger is not None else DownloadLedger(None)

    @inlineCallbacks
    def run(self):
        report = SyncReport()
        os.makedirs(self.out_dir, mode=0o700, exist_ok=True)
        on_server: set[str] = set()
        try:
            sources = yield self.api.all_sources()
            for source in sources:
                yield self._sync_source(source, report, on_server)
        except BaseException:
            self.ledger.save()  # what did arrive stays written down
            raise
        self.ledger.save(still_on_server=on_server)
        return report

    @inlineCallbacks
    def _sync_source(self, source: dict, report: SyncReport, on_server: set[str]):
        designation = source["journalist_designation"].replace(" ", "_")
        if not _SAFE_DIR.fullmatch(designation):
            raise SyncError(f"refusing an unexpected designation from the server: {designation!r}")
        subs = yield self.api.get_json(f"/sources/{source['uuid']}/submissions")
        fetched: list[dict] = []
        for sub in subs.get("submissions", []):
            on_server.add(sub["uuid"])
            if sub["uuid"] in self.ledger:
                report.downloaded_before += 1
                continue
            yield self._fetch(sub, os.path.join(self.out_dir, designation), report)
            fetched.append(sub)
            report.read_elsewhere += bool(sub.get("is_read"))
        if fetched:
            files = [s["uuid"] for s in fetched if not s.get("is_message")]
            messages = [s["uuid"] for s in fetched if s.get("is_message")]
            yield self.api.request_json("POST", "/seen", {"files": files, "messages": messages})
            report.marked_seen += len(fetched)
            # Only once seen: a file whose marking failed is checked (and marked) next time.
            for sub in fetched:
                self.ledger.add(sub["uuid"])

    @inlineCallbacks
    def _fetch(self, sub: dict, directory: str, report: SyncReport):
        name = sub["filename"]
        if not _SAFE_NAME.fullmatch(name):
            raise SyncError(f"refusing an unexpected file name from the server: {name!r}")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        final = os.path.join(directory, name)
        part = final + ".part"
        if os.path.exists(final):
            expected = yield self._etag_only(sub)
            if expected and sha256_of(final) == expected:
                report.already_present.append(name)
                return
            os.replace(final, part)  # a damaged copy: verify/replace it like a partial one
        for attempt in range(2):
            offset = os.path.getsize(part) if os.path.exists(part) else 0
            if offset:
                report.resumed.append(name)
            expected = yield self._download(sub, part, offset, report)
            if expected is None:
                raise SyncError(f"{name}: the server sent no sha256 ETag")
            if sha256_of(part) == expected:
                replace_durably(part, final)
                report.downloaded.append(name)
                return
            # Corrupt (a bad partial file or a damaged transfer): start again from zero once.
            os.remove(part)
            report.refetched.append(name)
        raise SyncError(f"{name}: downloaded twice and the checksum never matched; not marked seen")

    @inlineCallbacks
    def _etag_only(self, sub: dict):
        response = yield self.api.get_stream(sub["download_url"], {"Range": "bytes=0-0"})
        yield treq.content(response)
        return _etag_digest(response)

    @inlineCallbacks
    def _download(self, sub: dict, part: str, offset: int, report: SyncReport):
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        response = yield self.api.get_stream(sub["download_url"], headers)
        if response.code == 416:  # our partial file is already whole (or longer): check it as is
            yield treq.content(response)
            head = yield self._etag_only(sub)
            return head
        if response.code not in (200, 206):
            body = yield treq.content(response)
            raise ApiError(response.code, body[:200].decode("utf-8", "replace"))
        if response.code == 206:
            report.partial_responses += 1
        mode = "ab" if response.code == 206 else "wb"
        total = int(sub.get("size") or 0)
        done = [offset if response.code == 206 else 0]
        fd = os.open(part, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, mode) as f:
            if mode == "wb":
                f.truncate(0)

            def write(data: bytes) -> None:
                f.write(data)
                done[0] += len(data)
                self.progress.update(sub["filename"], done[0], total)

            yield treq.collect(response, write)
        self.progress.done()
        return _etag_digest(response)
