"""Streaming an already opened file to a client: Range (one range), ETag, never read whole.

The desk opens (and, the first time, hashes) the file in a pool thread; ``FileResponse`` then
hands it to one of Twisted's static producers, which read one buffer at a time as the
transport asks for more.
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.web import server
from twisted.web.resource import Resource
from twisted.web.static import NoRangeStaticProducer, SingleRangeStaticProducer

from deaddrop.newsroom.desk import Download


def parse_range(header: bytes | None, size: int) -> tuple[int, int] | None | str:
    """``(first, last)`` for one satisfiable ``bytes=`` range; None to ignore the header (absent,
    malformed or several ranges: a server may then answer with the whole file); "unsatisfiable"."""
    if not header:
        return None
    unit, sep, spec = header.partition(b"=")
    if not sep or unit.strip().lower() != b"bytes" or b"," in spec:
        return None
    first, dash, last = spec.strip().partition(b"-")
    if not dash or not (first.isdigit() or last.isdigit()) or (first and not first.isdigit()) \
            or (last and not last.isdigit()):
        return None
    if not first:  # suffix: the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if start >= size or end < start:
        return "unsatisfiable"
    return start, min(end, size - 1)


# Read and written per turn of the reactor. Twisted's 64 KiB would make a 5 MB download wait
# for 80 turns, each of which may also serve a flood of source-side requests; 1 MiB a turn
# (held once per download in flight, on the journalist listener only) makes it 5.
_DOWNLOAD_CHUNK = 1 << 20


class _WholeFile(NoRangeStaticProducer):
    bufferSize = _DOWNLOAD_CHUNK


class _OneRange(SingleRangeStaticProducer):
    bufferSize = _DOWNLOAD_CHUNK


def content_disposition(filename: str) -> bytes:
    # Stored names and zip names are ASCII by construction; refuse to emit anything else.
    safe = "".join(c for c in filename if c.isascii() and (c.isalnum() or c in "._-"))
    return f'attachment; filename="{safe or "download"}"'.encode("ascii")


class FileResponse(Resource):
    """Klein renders a returned resource; this one streams ``download`` and closes it."""

    isLeaf = True

    def __init__(self, download: Download, *, etag: bool = False,
                 unsatisfiable: Callable[[Any], bytes] | None = None) -> None:
        super().__init__()
        self.download = download
        self.etag = f"sha256:{download.sha256}".encode("ascii") if etag and download.sha256 else None
        self.unsatisfiable = unsatisfiable

    def render(self, request: Any) -> Any:
        d = self.download
        request.notifyFinish().addBoth(lambda _: d.close())  # a client that hangs up early
        request.setHeader(b"content-type", d.content_type.encode("ascii"))
        request.setHeader(b"content-disposition", content_disposition(d.filename))
        request.setHeader(b"accept-ranges", b"bytes")
        if self.etag is not None:
            request.setHeader(b"etag", self.etag)
            if _matches(request.getHeader(b"if-none-match"), self.etag) and request.method in (b"GET", b"HEAD"):
                request.setResponseCode(304)
                d.close()
                return b""
        wanted = parse_range(request.getHeader(b"range"), d.size)
        if_range = request.getHeader(b"if-range")
        if wanted is not None and if_range is not None and not _matches(if_range, self.etag):
            wanted = None  # the client's partial copy is of another version: send it all
        if isinstance(wanted, str):  # "unsatisfiable"
            d.close()
            request.setResponseCode(416)
            request.setHeader(b"content-range", b"bytes */%d" % d.size)
            body = self.unsatisfiable(request) if self.unsatisfiable else b""
            request.setHeader(b"content-length", b"%d" % len(body))
            return body
        if request.method == b"HEAD":
            request.setHeader(b"content-length", b"%d" % d.size)
            d.close()
            return b""
        if wanted is None:
            request.setHeader(b"content-length", b"%d" % d.size)
            _WholeFile(request, d.file).start()
        else:
            first, last = wanted
            request.setResponseCode(206)
            request.setHeader(b"content-range", b"bytes %d-%d/%d" % (first, last, d.size))
            request.setHeader(b"content-length", b"%d" % (last - first + 1))
            _OneRange(request, d.file, first, last - first + 1).start()
        return server.NOT_DONE_YET


def _matches(header: bytes | None, etag: bytes | None) -> bool:
    if not header or etag is None:
        return False
    candidates = [c.strip().removeprefix(b"W/").strip(b'"') for c in header.split(b",")]
    return etag in candidates or b"*" in candidates
