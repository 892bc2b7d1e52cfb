"""Hostile requests for the source listener, each with the answer it must get.

A ``Case`` builds raw request bytes from a ``Ctx`` (the cookies and CSRF tokens of a few real
sessions on the server under test) and states what must come back:

- ``status``: the acceptable status codes (``None`` in the tuple: the server may hang up
  without an answer, for a client that itself hung up mid-request);
- ``says``: text the answer must contain (the clear message the source sees);
- ``location``: the redirect target, when the answer is a redirect;
- ``stores``: how many files the request adds to the store (0 for everything refused), and
  for an accepted document ``stored_name``: the sanitised name inside its encrypted envelope.

Every case is also checked for what must never happen (see the test module): a 5xx, a
traceback or a file path in the body, a temp file left in DATA/tmp, the server not answering
a normal ``GET /`` afterwards, a traceback or "request failed" in the log.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote_from_bytes

from deaddrop.newsroom import codenames
from deaddrop.web.source.app import NOT_RECOGNIZED
from deaddrop.web.source.pages import MAX_FILES

CRLF = b"\r\n"
B = b"hostile-boundary-5f2a"


@dataclass
class Ctx:
    """Sessions on the server under test (cookies are "dd_source=..." pairs)."""

    port: int
    codename: str  # source A's codename
    cookie: str  # A, logged in
    csrf: str
    token: str  # A's raw session token
    other_csrf: str  # source B's CSRF token (B is logged in elsewhere)
    stale_cookie: str  # a session of A's that logged out
    stale_csrf: str
    anon_cookie: str  # a visitor who never logged in (a binding cookie, no session)
    anon_csrf: str  # from its login form
    anon_create_csrf: str  # from its /generate page (a token for /create)
    fresh_anon: Callable[[], tuple[str, str]]  # a new not-logged-in session: (cookie, csrf)


@dataclass(frozen=True)
class Case:
    group: str
    name: str
    build: Callable[[Ctx], bytes | list[bytes]]
    status: tuple[int | None, ...]
    says: str | None = None
    location: str | None = None
    stores: int = 0
    stored_name: str | None = None
    stored_content: bytes | None = None
    half_close: bool = False  # the client stops sending (shutdown) after the bytes
    stores_unanswered: int = 0  # files stored when the server (rightly) did not answer


# -- request builders ------------------------------------------------------------------------

def request(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]] = (), body: bytes = b"",
            *, length: bool = True, host: bytes = b"127.0.0.1") -> bytes:
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: " + host, b"Connection: close"]
    lines += [k + b": " + v for k, v in headers]
    if length and (body or method == b"POST"):
        lines.append(b"Content-Length: %d" % len(body))
    return CRLF.join(lines) + CRLF + CRLF + body


def cookie(value: str | bytes) -> tuple[bytes, bytes]:
    return b"Cookie", value.encode("latin-1") if isinstance(value, str) else value


def urlencode(pairs: list[tuple[bytes | str, bytes | str]]) -> bytes:
    def enc(x: bytes | str) -> str:
        return quote_from_bytes(x.encode("utf-8") if isinstance(x, str) else x, safe=b"")
    return "&".join(f"{enc(k)}={enc(v)}" for k, v in pairs).encode("ascii")


def form(target: bytes, body: bytes, session_cookie: str | None = None) -> bytes:
    headers = [(b"Content-Type", b"application/x-www-form-urlencoded")]
    if session_cookie:
        headers.append(cookie(session_cookie))
    return request(b"POST", target, headers, body)


def part(name: bytes, value: bytes, filename: bytes | None = None, extra: bytes = b"") -> bytes:
    disposition = b'form-data; name="' + name + b'"'
    if filename is not None:
        disposition += b'; filename="' + filename + b'"'
    return b"Content-Disposition: " + disposition + CRLF + extra + CRLF + value


def multipart(parts: list[bytes], boundary: bytes = B, close: bool = True) -> bytes:
    body = b"".join(b"--" + boundary + CRLF + p + CRLF for p in parts)
    return body + (b"--" + boundary + b"--" + CRLF if close else b"")


def fields(csrf: str | bytes, msg: bytes = b"", files: list[tuple[bytes, bytes]] = ((b"", b""),)) -> list[bytes]:
    """The parts a browser sends from the /lookup form."""
    csrf = csrf.encode() if isinstance(csrf, str) else csrf
    parts = [part(b"csrf_token", csrf), part(b"msg", msg)]
    for filename, content in files:
        parts.append(part(b"fh", content, filename, b"Content-Type: application/octet-stream" + CRLF))
    return parts


def submit(session_cookie: str | None, body: bytes, content_type: bytes | None = None,
           target: bytes = b"/submit", length: bool = True, method: bytes = b"POST") -> bytes:
    headers = [(b"Content-Type", content_type or b"multipart/form-data; boundary=" + B)]
    if session_cookie:
        headers.append(cookie(session_cookie))
    return request(method, target, headers, body, length=length)


def chunked(body: bytes, size: int = 4096, last: bool = True) -> bytes:
    out = b"".join(b"%x\r\n" % len(body[i:i + size]) + body[i:i + size] + CRLF for i in range(0, len(body), size))
    return out + (b"0\r\n\r\n" if last else b"")


def doc_case(name: str, raw_filename: bytes, expected: str) -> Case:
    content = b"content of " + name.encode()
    return Case(
        "filenames", name,
        lambda c: submit(c.cookie, multipart(fields(c.csrf, b"", [(raw_filename, content)]))),
        (303,), location="/lookup", stores=1, stored_name=expected, stored_content=content,
    )


def login_case(name: str, codename: Callable[[Ctx], str | bytes], status: int = 403) -> Case:
    def build(c: Ctx) -> bytes:
        session, csrf = c.fresh_anon() if status == 303 else (c.anon_cookie, c.anon_csrf)
        return form(b"/login", urlencode([("csrf_token", csrf), ("codename", codename(c))]), session)

    if status == 303:
        return Case("codenames", name, build, (303,), location="/lookup")
    return Case("codenames", name, build, (status,), says=NOT_RECOGNIZED)


# -- the corpus ------------------------------------------------------------------------------

def protocol_cases() -> list[Case]:
    get = lambda target, *h, **kw: (lambda c: request(b"GET", target, list(h), **kw))  # noqa: E731
    return [
        Case("protocol", "raw 0xff byte in the path", get(b"/\xff"), (400,)),
        Case("protocol", "percent-encoded invalid UTF-8 in the path", get(b"/%ff%fe"), (400,), says="could not be read"),
        Case("protocol", "invalid UTF-8 under /static", get(b"/static/%ff"), (400,), says="could not be read"),
        Case("protocol", "overlong UTF-8 slash in the path", get(b"/static/%c0%af%c0%afsetup.cfg"), (400,)),
        Case("protocol", "UTF-16 surrogate in the path", get(b"/%ed%a0%80"), (400,)),
        Case("protocol", "percent-encoded NUL in the path", get(b"/%00"), (404,), says="nothing at this address"),
        Case("protocol", "raw NUL in the path", get(b"/\x00"), (400,)),
        Case("protocol", "invalid UTF-8 and NUL in the query", get(b"/?q=%ff%00&%ff=%00"), (200,)),
        Case("protocol", "raw bytes in the query", get(b"/?q=\xff\x00"), (400,)),
        Case("protocol", "invalid UTF-8 in the login page's query", get(b"/login?codename=%ff%00"), (200,)),
        Case("protocol", "Host header not UTF-8", lambda c: request(b"GET", b"/", host=b"\xff\xfe"), (400,)),
        Case("protocol", "Host header of 15 KB", lambda c: request(b"GET", b"/", host=b"h" * 15000), (400,), says="could not be read"),
        Case("protocol", "Host label over 63 bytes", lambda c: request(b"GET", b"/lookup", host=b"a" * 64 + b".onion"), (400,), says="could not be read"),
        Case("protocol", "Host with an empty label", lambda c: request(b"GET", b"/", host=b"a..onion"), (400,)),
        Case("protocol", "one header line of 20 KB", get(b"/", (b"X-Big", b"a" * 20000)), (431,), says="too large"),
        Case("protocol", "request line of 20 KB", get(b"/" + b"a" * 20000), (431,)),
        Case("protocol", "headers of 24 KB in all", get(b"/", *[(b"X-H%d" % i, b"v" * 600) for i in range(40)]), (400,)),
        Case("protocol", "600 headers", get(b"/", *[(b"X-H%d" % i, b"v") for i in range(600)]), (400,)),
        Case("protocol", "header line without a colon", lambda c: b"GET / HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n", (400,)),
        Case("protocol", "header name with a space", get(b"/", (b"Bad Name", b"x")), (400,)),
        Case("protocol", "NUL in a header value", get(b"/", (b"X-Nul", b"a\x00b")), (400,)),
        Case("protocol", "invalid UTF-8 in a header value", get(b"/", (b"X-Junk", b"\xff\xfe")), (200,)),
        Case("protocol", "unknown method", lambda c: request(b"FROB", b"/"), (405,), says="not available"),
        Case("protocol", "HTTP/0.9 request", lambda c: b"GET /\r\n\r\n", (400,)),
        Case("protocol", "HTTP/9.9 request", lambda c: b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", (400,)),
        Case("protocol", "TLS handshake on the plain port", lambda c: b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(64)) + b"\r\n\r\n", (400,)),
        Case("protocol", "negative Content-Length", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", (400,)),
        Case("protocol", "Content-Length not a number", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n", (400,)),
        Case("protocol", "two Content-Length headers", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", (400,)),
        Case("protocol", "Content-Length and chunked together", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", (400,)),
        Case("protocol", "unknown Transfer-Encoding", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", (400,)),
        Case("protocol", "malformed chunk size", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", (400,)),
        Case("protocol", "form body declared over 1 MiB", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000000\r\n\r\n" + b"a=" * 500, (413,), says="too large"),
        Case("protocol", "chunked form body over 1 MiB", lambda c: b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"a" * (1 << 20) + b"a" * 300_000, 65536), (413, None), says="too large"),
        # Issue 11: the text fields are read (the message comes back in the page), the answer
        # goes out at the first file byte, long before the 600 MB the client announced.
        Case("protocol", "upload declared over the instance limit", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"MESSAGE-KEPT-1f3", [(b"big.bin", b"x" * 1000)]), close=False), length=False).replace(b"\r\n\r\n", b"\r\nContent-Length: 600000000\r\n\r\n", 1), (413,), says="MESSAGE-KEPT-1f3"),
        Case("protocol", "upload over the limit with Expect: 100-continue", lambda c: submit(c.cookie, b"", length=False).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\nContent-Length: 600000000\r\n\r\n", 1), (413,), says="Nothing was stored"),
    ]


def route_cases() -> list[Case]:
    journalist_login = urlencode([("username", "admin"), ("password", "correct horse"), ("token", "123456")])
    return [
        Case("routes", "GET /api/v1/token", lambda c: request(b"GET", b"/api/v1/token"), (404,), says="nothing at this address"),
        Case("routes", "POST /api/v1/token with JSON", lambda c: request(b"POST", b"/api/v1/token", [(b"Content-Type", b"application/json")], b'{"username":"admin","passphrase":"x","one_time_code":"123456"}'), (404,)),
        Case("routes", "POST /api/v1/token with a source cookie", lambda c: request(b"POST", b"/api/v1/token", [(b"Content-Type", b"application/json"), cookie(c.cookie)], b"{}"), (404,)),
        Case("routes", "GET /api/v1/sources with a token", lambda c: request(b"GET", b"/api/v1/sources", [(b"Authorization", b"Token abc")]), (404,)),
        Case("routes", "GET /api/v1/", lambda c: request(b"GET", b"/api/v1/"), (404,)),
        Case("routes", "GET /admin", lambda c: request(b"GET", b"/admin"), (404,)),
        Case("routes", "GET /admin/ with a source cookie", lambda c: request(b"GET", b"/admin/", [cookie(c.cookie)]), (404,)),
        Case("routes", "POST /admin/add-user", lambda c: form(b"/admin/add-user", urlencode([("username", "x")]), c.cookie), (404,)),
        Case("routes", "journalist login form on the source /login", lambda c: form(b"/login", journalist_login), (403,), says="out of date"),
        Case("routes", "journalist login form with a source session", lambda c: form(b"/login", journalist_login + b"&" + urlencode([("csrf_token", c.anon_csrf)]), c.anon_cookie), (403,), says=NOT_RECOGNIZED),
        Case("routes", "static path traversal", lambda c: request(b"GET", b"/static/../../setup.cfg"), (404,)),
        Case("routes", "static encoded traversal", lambda c: request(b"GET", b"/static/..%2f..%2fdeaddrop%2fconfig.py"), (404,)),
        Case("routes", "static name with NUL", lambda c: request(b"GET", b"/static/style.css%00.py"), (404,)),
        Case("routes", "DELETE /submit", lambda c: request(b"DELETE", b"/submit", [cookie(c.cookie)]), (405,)),
        Case("routes", "POST /metadata", lambda c: form(b"/metadata", b"a=b"), (405,)),
        Case("routes", "multipart upload to /lookup (logged in)", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"hi", [(b"x.bin", os.urandom(50_000))])), target=b"/lookup"), (415,), says="does not accept uploads"),
        Case("routes", "multipart upload to /api/v1/token (logged in)", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"hi", [(b"x.bin", os.urandom(50_000))])), target=b"/api/v1/token"), (415,)),
        Case("routes", "multipart body on GET / (logged in)", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"hi", [(b"x.bin", os.urandom(50_000))])), target=b"/", method=b"GET"), (415,)),
        Case("routes", "multipart upload to an encoded /submit", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"hi", [(b"x.bin", os.urandom(50_000))])), target=b"/%73ubmit"), (415,)),
        Case("routes", "upload to /submit with a query string", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"query string upload")), target=b"/submit?next=//evil.example"), (303,), location="/lookup", stores=1),
        Case("routes", "urlencoded POST to /submit", lambda c: form(b"/submit", urlencode([("csrf_token", c.csrf), ("msg", "x")]), c.cookie), (400,), says="Submissions must be sent with the form"),
    ]


def cookie_cases() -> list[Case]:
    lookup = lambda value: (lambda c: request(b"GET", b"/lookup", [cookie(value(c) if callable(value) else value)]))  # noqa: E731
    return [
        Case("cookies", "session cookie not UTF-8", lookup(b"dd_source=\xff\xfe"), (303,), location="/login"),
        Case("cookies", "session cookie with non-ASCII text", lookup("dd_source=é".encode()), (303,), location="/login"),
        Case("cookies", "session cookie percent-encoded NUL", lookup(b"dd_source=%00"), (303,), location="/login"),
        Case("cookies", "session cookie of 10 KB", lookup(b"dd_source=" + b"A" * 10000), (303,), location="/login"),
        Case("cookies", "raw NUL in the cookie", lookup(b"dd_source=a\x00b"), (400,)),
        Case("cookies", "journalist cookie carrying a valid source token", lookup(lambda c: f"dd_journalist={c.token}"), (303,), location="/login"),
        Case("cookies", "journalist cookie on an upload", lambda c: submit(f"dd_journalist={c.token}", multipart(fields(c.csrf, b"via the wrong cookie"))), (403,), says="Nothing was stored"),
        Case("cookies", "junk session cookie before the real one", lookup(lambda c: f"dd_source=junk; {c.cookie}"), (200, 303)),
        Case("cookies", "session token in the query instead of a cookie", lambda c: request(b"GET", b"/lookup?dd_source=" + c.token.encode()), (303,), location="/login"),
    ]


def csrf_cases() -> list[Case]:
    up = lambda sess, token: (lambda c: submit(sess(c), multipart(fields(token(c), b"replayed token")))) # noqa: E731
    return [
        Case("csrf", "logged-out session and its token", up(lambda c: c.stale_cookie, lambda c: c.stale_csrf), (403,), says="your message is kept below"),  # in the login page answered (nothing kept on the server)
        Case("csrf", "another source's token", up(lambda c: c.cookie, lambda c: c.other_csrf), (403,), says="Nothing was stored"),
        Case("csrf", "the token of the same source's logged-out session", up(lambda c: c.cookie, lambda c: c.stale_csrf), (403,), says="Nothing was stored"),
        Case("csrf", "a not-logged-in session's token", up(lambda c: c.cookie, lambda c: c.anon_csrf), (403,), says="Nothing was stored"),
        Case("csrf", "empty token", up(lambda c: c.cookie, lambda c: ""), (403,), says="Nothing was stored"),
        Case("csrf", "no token field", lambda c: submit(c.cookie, multipart([part(b"msg", b"no token")])), (403,), says="Nothing was stored"),
        Case("csrf", "login with a logged-out session", lambda c: form(b"/login", urlencode([("csrf_token", c.stale_csrf), ("codename", c.codename)]), c.stale_cookie), (403,), says="out of date"),
        Case("csrf", "create with another source's token", lambda c: form(b"/create", urlencode([("csrf_token", c.other_csrf), ("codename", c.codename)]), c.anon_cookie), (403,), says="Nothing was stored"),
        Case("csrf", "delete with another source's token", lambda c: form(b"/delete", urlencode([("csrf_token", c.other_csrf), ("reply", "2")]), c.cookie), (403,), says="Nothing was deleted"),
        Case("csrf", "delete-all with a logged-out token", lambda c: form(b"/delete-all", urlencode([("csrf_token", c.stale_csrf)]), c.cookie), (403,), says="Nothing was deleted"),
    ]


def field_cases() -> list[Case]:
    def sub(parts: Callable[[Ctx], list[bytes]]) -> Callable[[Ctx], bytes]:
        return lambda c: submit(c.cookie, multipart(parts(c)))

    many_text = lambda c: [part(b"csrf_token", c.csrf.encode())] + [part(b"f%d" % i, b"x") for i in range(10_000)]  # noqa: E731
    return [
        Case("fields", "message not UTF-8", sub(lambda c: fields(c.csrf, b"caf\xe9 \xff\xfe")), (400,), says="The form could not be read"),
        Case("fields", "NUL in the message", sub(lambda c: fields(c.csrf, b"a\x00b")), (400,), says="The form could not be read"),
        Case("fields", "message of 100,001 characters", sub(lambda c: fields(c.csrf, b"m" * 100_001)), (413,), says="the limit is 100,000"),
        Case("fields", "message of 400,001 bytes", sub(lambda c: fields(c.csrf, b"m" * 400_001)), (413,), says="The form could not be read"),
        Case("fields", "CSRF token not UTF-8", sub(lambda c: fields(b"\xff" + c.csrf.encode()[1:])), (403,), says="form was out of date"),
        Case("fields", "NUL in the CSRF token", sub(lambda c: fields(c.csrf.encode() + b"\x00")), (403,), says="form was out of date"),
        Case("fields", "CSRF token of 300 bytes", sub(lambda c: fields(b"t" * 300, b"x")), (413,)),
        Case("fields", "honeypot not UTF-8", sub(lambda c: fields(c.csrf, b"x") + [part(b"website", b"\xff")]), (400,)),
        Case("fields", "honeypot filled in", sub(lambda c: fields(c.csrf, b"x") + [part(b"website", b"http://spam.example")]), (403,), says="could not be accepted"),
        Case("fields", "unknown field", sub(lambda c: fields(c.csrf, b"x") + [part(b"journalist_id", b"1")]), (400,), says="The form could not be read"),
        Case("fields", "field name not UTF-8", sub(lambda c: fields(c.csrf, b"x") + [part(b"\xff\xfe", b"1")]), (400,)),
        Case("fields", "NUL in a field name", sub(lambda c: [part(b"msg\x00", b"1")] + fields(c.csrf, b"x")), (400,)),
        Case("fields", "empty field name", sub(lambda c: fields(c.csrf, b"x") + [part(b"", b"1")]), (400,)),
        Case("fields", "repeated message field", sub(lambda c: fields(c.csrf, b"x") + [part(b"msg", b"again")]), (400,), says="The form could not be read"),
        Case("fields", "10,000 multipart fields", sub(many_text), (400, 413)),
        Case("fields", "10,000 multipart message fields", sub(lambda c: [part(b"csrf_token", c.csrf.encode())] + [part(b"msg", b"x")] * 10_000), (400, 413)),
        Case("fields", "40 file parts (any number of files is one submission)", sub(lambda c: fields(c.csrf, b"x", [(b"", b"")] * 40)), (303,), location="/lookup", stores=1),
        Case("fields", f"{MAX_FILES + 1} file parts (over the files limit)", sub(lambda c: fields(c.csrf, b"x", [(b"", b"")] * (MAX_FILES + 1))), (413,), says="too many files"),
        Case("fields", "file part in the message field", sub(lambda c: [part(b"csrf_token", c.csrf.encode()), part(b"msg", b"x", b"evil.txt")]), (400,), says="The form could not be read"),
        Case("fields", "file name not UTF-8", sub(lambda c: fields(c.csrf, b"", [(b"caf\xe9\xff.txt", b"data")])), (400,)),
        Case("fields", "login codename not UTF-8", lambda c: form(b"/login", urlencode([("csrf_token", c.anon_csrf), ("codename", b"\xff\xfe abacus")]), c.anon_cookie), (403,), says=NOT_RECOGNIZED),
        Case("fields", "login codename with NUL", lambda c: form(b"/login", urlencode([("csrf_token", c.anon_csrf), ("codename", c.codename + "\x00")]), c.anon_cookie), (403,), says=NOT_RECOGNIZED),
        Case("fields", "login CSRF token not UTF-8", lambda c: form(b"/login", urlencode([("csrf_token", b"\xff"), ("codename", c.codename)]), c.anon_cookie), (403,), says="out of date"),
        Case("fields", "login with 10,000 urlencoded fields", lambda c: form(b"/login", urlencode([("csrf_token", c.anon_csrf)] + [(f"f{i}", "1") for i in range(10_000)]), c.anon_cookie), (403,), says=NOT_RECOGNIZED),
        Case("fields", "login with 10,000 codename fields", lambda c: form(b"/login", urlencode([("csrf_token", c.anon_csrf)] + [("codename", c.codename)] * 10_000), c.anon_cookie), (403,), says=NOT_RECOGNIZED),
        Case("fields", "login with 10,000 CSRF fields", lambda c: form(b"/login", urlencode([("csrf_token", c.anon_csrf)] * 10_000 + [("codename", c.codename)]), c.anon_cookie), (403,), says="out of date"),
        Case("fields", "urlencoded body with broken escapes", lambda c: form(b"/login", b"csrf_token=%zz%&codename=%%%", c.anon_cookie), (403,)),
        Case("fields", "urlencoded body with raw bytes", lambda c: form(b"/login", b"csrf_token=\xff\x00&codename=\xfe", c.anon_cookie), (403,)),
        Case("fields", "JSON body on /login", lambda c: request(b"POST", b"/login", [(b"Content-Type", b"application/json"), cookie(c.anon_cookie)], b'{"codename": "x"}'), (403,)),
        Case("fields", "create codename not UTF-8", lambda c: form(b"/create", urlencode([("csrf_token", c.anon_create_csrf), ("codename", b"\xff\xfe")]), c.anon_cookie), (400,), says="not made for this visit"),
        Case("fields", "create codename with NUL", lambda c: form(b"/create", urlencode([("csrf_token", c.anon_create_csrf), ("codename", c.codename + "\x00")]), c.anon_cookie), (400,), says="not made for this visit"),
        Case("fields", "create with an existing, not generated codename", lambda c: form(b"/create", urlencode([("csrf_token", c.anon_create_csrf), ("codename", c.codename)]), c.anon_cookie), (400,), says="not made for this visit"),
        Case("fields", "reply number not UTF-8", lambda c: form(b"/delete", urlencode([("csrf_token", c.csrf), ("reply", b"\xff")]), c.cookie), (404,), says="Nothing was deleted"),
        Case("fields", "reply number with NUL", lambda c: form(b"/delete", urlencode([("csrf_token", c.csrf), ("reply", "2\x00")]), c.cookie), (404,), says="Nothing was deleted"),
        Case("fields", "reply number traversal", lambda c: form(b"/delete", urlencode([("csrf_token", c.csrf), ("reply", "../../../db.sqlite")]), c.cookie), (404,), says="Nothing was deleted"),
        Case("fields", "reply number of 10 KB", lambda c: form(b"/delete", urlencode([("csrf_token", c.csrf), ("reply", "9" * 10_000)]), c.cookie), (404,), says="Nothing was deleted"),
        Case("fields", "delete with 10,000 fields", lambda c: form(b"/delete", urlencode([("csrf_token", c.csrf)] + [("reply", str(1000 + i)) for i in range(10_000)]), c.cookie), (404,), says="Nothing was deleted"),
    ]


def multipart_cases() -> list[Case]:
    def sub(body: Callable[[Ctx], bytes], content_type: bytes | None = None, **kw) -> Callable[[Ctx], bytes]:
        return lambda c: submit(c.cookie, body(c), content_type, **kw)

    ok = lambda c, msg=b"fine": multipart(fields(c.csrf, msg))  # noqa: E731
    long_b = b"L" * 200
    return [
        Case("multipart", "no boundary parameter", sub(ok, b"multipart/form-data"), (400,), says="could not be read"),
        Case("multipart", "empty boundary", sub(ok, b"multipart/form-data; boundary="), (400,), says="could not be read"),
        Case("multipart", "boundary that is not in the body", sub(ok, b"multipart/form-data; boundary=other"), (400,)),
        Case("multipart", "200-byte boundary", sub(lambda c: multipart(fields(c.csrf, b"long boundary"), long_b), b"multipart/form-data; boundary=" + long_b), (303,), location="/lookup", stores=1),
        Case("multipart", "upper-case content type", sub(lambda c: ok(c, b"upper case type"), b"MULTIPART/FORM-DATA; BOUNDARY=" + B), (303,), location="/lookup", stores=1),
        Case("multipart", "no closing delimiter", sub(lambda c: multipart(fields(c.csrf, b"x"), close=False)), (400,), says="The form could not be read"),
        Case("multipart", "body ends inside part headers", sub(lambda c: b"--" + B + b"\r\nContent-Disposition: form-da"), (400,)),
        Case("multipart", "body ends inside a file", sub(lambda c: multipart(fields(c.csrf, b"", [(b"cut.bin", os.urandom(300_000))]), close=False)[:-1000]), (400,), says="Nothing was stored"),
        Case("multipart", "random bytes", sub(lambda c: random.Random(7).randbytes(5000)), (400,)),
        Case("multipart", "empty body", sub(lambda c: b""), (400,)),
        Case("multipart", "only the closing delimiter", sub(lambda c: b"--" + B + b"--\r\n"), (400, 403)),
        Case("multipart", "part without Content-Disposition", sub(lambda c: b"--" + B + b"\r\nContent-Type: text/plain\r\n\r\nx\r\n--" + B + b"--\r\n"), (400,)),
        Case("multipart", "part header of 5,000 bytes", sub(lambda c: multipart([part(b"msg", b"x", None, b"X-Long: " + b"h" * 5000 + CRLF)])), (413,), says="The form could not be read"),
        Case("multipart", "part with 20 headers", sub(lambda c: multipart([part(b"msg", b"x", None, b"".join(b"X-%d: v\r\n" % i for i in range(20)))])), (413,)),
        Case("multipart", "LF-only line endings", sub(lambda c: multipart(fields(c.csrf, b"lf")).replace(CRLF, b"\n")), (400,)),
        Case("multipart", "preamble before the first boundary", sub(lambda c: b"preamble junk\r\n" + ok(c, b"with preamble")), (303,), location="/lookup", stores=1),
        Case("multipart", "epilogue after the last boundary", sub(lambda c: ok(c, b"with epilogue") + b"epilogue junk" * 100), (303,), location="/lookup", stores=1),
        Case("multipart", "chunked upload", lambda c: submit(c.cookie, chunked(multipart(fields(c.csrf, b"chunked", [(b"chunked.bin", b"c" * 100_000)])), 7000), length=False).replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n", 1), (303,), location="/lookup", stores=2),
        Case("multipart", "upload without a length", sub(lambda c: multipart(fields(c.csrf, b"", [(b"nolength.bin", os.urandom(100_000))])), length=False), (400,), says="Nothing was stored"),
        Case("multipart", "client hangs up after a complete file part", lambda c: submit(c.cookie, b"", length=False).replace(b"\r\n\r\n", b"\r\nContent-Length: 900000\r\n\r\n", 1) + multipart(fields(c.csrf, b"", [(b"done.bin", os.urandom(300_000))]), close=False), (None,), half_close=True),
        Case("multipart", "bad part after a complete file part", sub(lambda c: multipart(fields(c.csrf, b"", [(b"first.bin", os.urandom(300_000))]) + [part(b"unexpected", b"x")])), (400,), says="The form could not be read"),
        Case("multipart", "client hangs up mid-file (declared length)", lambda c: submit(c.cookie, b"", length=False).replace(b"\r\n\r\n", b"\r\nContent-Length: 900000\r\n\r\n", 1) + multipart(fields(c.csrf, b"", [(b"gone.bin", os.urandom(400_000))]))[:300_000], (None,), half_close=True),
        # The whole body arrived, then the client went away: stored (unacknowledged), and no
        # temp file left behind from the encryptions the request was waiting for.
        Case("multipart", "client leaves right after a complete upload", lambda c: submit(c.cookie, multipart(fields(c.csrf, b"left early", [(b"left.bin", os.urandom(3_000_000))]))), (None, 303), half_close=True, stores=2, stores_unanswered=2),
        Case("multipart", "chunked upload without its last chunk", lambda c: submit(c.cookie, chunked(multipart(fields(c.csrf, b"", [(b"gone.bin", os.urandom(200_000))])), 8000, last=False), length=False).replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n", 1), (None,), half_close=True),
        # A whole body without a session: the login page, the message in it (kept nowhere else).
        Case("multipart", "not logged in", lambda c: submit(c.anon_cookie, multipart(fields(c.anon_csrf, b"anon"))), (403,), says="your message is kept below"),
        Case("multipart", "no cookie at all", lambda c: submit(None, multipart(fields("x", b"anon", [(b"a.bin", os.urandom(100_000))]))), (403,), says="Nothing was stored"),
    ]


def filename_cases() -> list[Case]:
    return [
        doc_case("parent directory traversal", b"../../etc/passwd", "passwd"),
        doc_case("windows traversal", b"..\\..\\windows\\system32\\config\\SAM", "SAM"),
        doc_case("absolute path", b"/etc/shadow", "shadow"),
        doc_case("windows absolute path", b"C:\\Users\\me\\secret.docx", "secret.docx"),
        # Not percent-decoded (browsers do not encode file names so): one harmless component.
        doc_case("percent-encoded traversal", b"%2e%2e%2f%2e%2e%2fetc%2fpasswd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
        doc_case("device name CON", b"CON", "_CON"),
        doc_case("device name nul.txt", b"nul.txt", "_nul.txt"),
        doc_case("device name COM1.pdf", b"COM1.pdf", "_COM1.pdf"),
        doc_case("device name lpt9", b"lpt9", "_lpt9"),
        doc_case("device name CONIN$", b"CONIN$", "_CONIN$"),
        doc_case("device name aux.tar.gz", b"aux.tar.gz", "_aux.tar.gz"),
        doc_case("dot", b".", "document"),
        doc_case("dot dot", b"..", "document"),
        doc_case("hidden file", b".bashrc", "bashrc"),
        doc_case("trailing dots and spaces", b"  report. . ", "report"),
        doc_case("raw NUL", b"a\x00b.txt", "a_b.txt"),
        doc_case("encoded NUL", b"a%00b.txt", "a%00b.txt"),
        doc_case("encoded CR LF", b"report%0d%0a.pdf", "report%0d%0a.pdf"),
        doc_case("right-to-left override", "\u202egpj.exe".encode(), "_gpj.exe"),
        doc_case("zero-width space", "in\u200bvoice.pdf".encode(), "in_voice.pdf"),
        doc_case("markup", b"<script>alert(1)</script>.html", "script_.html"),
        doc_case("1,000 characters", b"x" * 1000 + b".pdf", "x" * 196 + ".pdf"),
        doc_case("100 emoji", "\U0001F600".encode() * 100, "\U0001F600" * 50),
        doc_case("decomposed accents", "re\u0301sume\u0301.pdf".encode(), "r\u00e9sum\u00e9.pdf"),
        doc_case("escaped quote", b'a\\"b.txt', "a_b.txt"),
        doc_case("empty name with content", b"", "document"),
        Case("filenames", "file field without a filename", lambda c: submit(c.cookie, multipart([part(b"csrf_token", c.csrf.encode()), part(b"fh", b"nameless")])), (303,), location="/lookup", stores=1, stored_name="document", stored_content=b"nameless"),
    ]


def codename_cases() -> list[Case]:
    words = codenames.codename_words()
    rng = random.Random(1)
    some = lambda n: " ".join(rng.choice(words) for _ in range(n))  # noqa: E731
    cases = [login_case(f"{n} known words, never issued", lambda c, s=some(n): s) for n in (0, 1, 3, 4, 7, 16, 17, 40)]
    cases += [
        login_case("only whitespace", lambda c: " \t\r\n "),
        login_case("256 characters", lambda c: "a" * 256),
        login_case("257 characters", lambda c: "a" * 257),
        login_case("10,000 characters", lambda c: "abacus" * 1666),
        login_case("100,000 characters", lambda c: "abacus " * 14_285),
        login_case("Cyrillic", lambda c: "абакус абдомен абзац аборт акация алмаз"),
        login_case("Greek", lambda c: "αλφα βητα γαμμα δελτα εψιλον ζητα ητα"),
        login_case("CJK", lambda c: "秘密 情報 記者 匿名 送信 安全 暗号"),
        login_case("Arabic (right to left)", lambda c: "سري معلومات صحفي مجهول إرسال آمن تشفير"),
        login_case("Hebrew", lambda c: "סוד מידע עיתונאי אנונימי שליחה בטוח הצפנה"),
        login_case("Devanagari", lambda c: "गुप्त सूचना पत्रकार अज्ञात भेजना सुरक्षित"),
        login_case("emoji", lambda c: "\U0001F511 \U0001F4F0 \U0001F575 \U0001F4E8 \U0001F512 \U0001F47B \U0001F30D"),
        login_case("fullwidth Latin copy of the codename", lambda c: "".join(chr(ord(ch) + 0xFEE0) if "a" <= ch <= "z" else ch for ch in c.codename)),
        login_case("Cyrillic homoglyph in the codename", lambda c: c.codename.replace("a", "\u0430").replace("e", "\u0435").replace("o", "\u043e")),
        login_case("combining accent in the codename", lambda c: c.codename.replace(" ", "\u0301 ", 1)),
        login_case("zero-width space in the codename", lambda c: c.codename[:2] + "\u200b" + c.codename[2:]),
        login_case("soft hyphen in the codename", lambda c: c.codename[:2] + "\u00ad" + c.codename[2:]),
        login_case("dotted capital I (Turkish)", lambda c: c.codename.upper().replace("I", "\u0130")),
        login_case("codename with a word missing", lambda c: c.codename.rsplit(" ", 1)[0]),
        login_case("codename with an extra word", lambda c: c.codename + " " + words[0]),
        login_case("codename words reversed", lambda c: " ".join(reversed(c.codename.split())) if len(set(c.codename.split())) > 1 else "abacus " * 7),
        login_case("codename without spaces", lambda c: c.codename.replace(" ", "")),
        login_case("codename with NUL separators", lambda c: c.codename.replace(" ", "\x00")),
        login_case("codename with a trailing NUL", lambda c: c.codename + "\x00"),
        login_case("codename as invalid UTF-8", lambda c: c.codename.encode() + b"\xff"),
        # Whitespace and case are not part of a codename: these are the source's own.
        login_case("upper case, tabs and newlines", lambda c: "\t" + c.codename.upper().replace(" ", "\n\t ") + "\r\n", status=303),
        login_case("no-break spaces between words", lambda c: c.codename.replace(" ", "\u00a0"), status=303),
        login_case("ideographic spaces between words", lambda c: c.codename.replace(" ", "\u3000"), status=303),
    ]
    return cases


def all_cases() -> list[Case]:
    return (protocol_cases() + route_cases() + cookie_cases() + csrf_cases() + field_cases()
            + multipart_cases() + filename_cases() + codename_cases())
