"""Every state a source can reach, in every language: a crawler of the source interface over
plain HTTP (so JavaScript off, as at Tor Browser's "Safest"), for the checks of issue 31.

One server serves every language; each language is one visitor (its own cookies, source and
codename) walking the same states, several languages at once. ``crawl`` returns, per language,
per state, the status and the HTML the server answered, as a source's browser got it (redirects
followed, as after a post/redirect/get).

Not reached here (their messages are in the catalogs, checked by tests/test_i18n.py, and their
pages are the same error frame as states that are reached): a busy queue, a full disk, a
storage failure, another upload in flight, the login throttle, no free codename, a submission
received after its session ended, and a header block too long to read (answered before the
language cookie could be read, so in English).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Iterable

from twisted.internet.defer import DeferredLock, DeferredSemaphore, gatherResults, inlineCallbacks

from deaddrop.web.source import pages, uploads
from deaddrop.web.source import _answers
from tests._support import Browser, multipart_body, start_server

TOR_BROWSER_UA = "Mozilla/5.0 (Windows NT 10.0; rv:128.0) Gecko/20100101 Firefox/128.0"
CHROME_UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
# What the crawler types: no English sentence, so none can be mistaken for an untranslated one.
TYPED = "Ijumaa 14:30 — 12345 ✓"
MAX_UPLOAD = 64 * 1024
SERVER_OPTIONS = dict(max_upload_size=MAX_UPLOAD, source_session_idle=3600.0)
_CODENAME = re.compile(r'id="codename"[^>]*>([^<]+)<')


@dataclass(frozen=True)
class Page:
    status: int
    html: str


class _Visitor:
    """One language's visitor: a Browser with the language chosen, and what it saw."""

    def __init__(self, server: Any, code: str, one_at_a_time: DeferredLock) -> None:
        self.server, self.code, self.one_at_a_time = server, code, one_at_a_time
        self.browser = Browser(server.source_url)
        self.browser.USER_AGENT = TOR_BROWSER_UA  # no "not Tor Browser" banner, but where asked for
        self.seen: dict[str, Page] = {}

    @inlineCallbacks
    def keep(self, state: str, answer: Any):
        response, html = yield answer
        self.seen[state] = Page(response.code, html)
        return html

    def get(self, path: str, **headers: str):
        return self.browser.get(path, headers={"User-Agent": TOR_BROWSER_UA, **headers})

    def post(self, path: str, **kw: Any):
        kw.setdefault("headers", {"User-Agent": TOR_BROWSER_UA})
        return self.browser.post(path, **kw)

    def send(self, message: str = "", files: Iterable[tuple[str, bytes]] = (), csrf: str | None = None,
             extra: Iterable[tuple[str, str]] = ()):
        """The submission form as a browser sends it (its own CSRF and form tokens)."""
        html = self.browser.last_html
        token = re.search(r'name="form_token" value="([^"]+)"', html)
        fields = [("csrf_token", csrf if csrf is not None else self.browser.csrf(html))]
        fields += [("form_token", token.group(1))] if token else []
        fields += [("msg", message), *extra]
        body, content_type = multipart_body(fields, list(files) or [("", b"")])
        return self.post("/submit", data=body, headers={"User-Agent": TOR_BROWSER_UA, "Content-Type": content_type})

    def session(self) -> Any:
        token = next(c.value for c in self.browser.cookies if c.name == "dd_source")
        return self.server.service.source.sessions.lookup(token)

    @inlineCallbacks
    def new_source(self, state: str = "") -> Any:
        html = yield self.keep(state or "generate", self.get("/generate"))
        codename = _CODENAME.search(html).group(1)
        yield self.keep(state or "lookup-first", self.one_at_a_time.run(
            self.post, "/create", data={"codename": codename, "csrf_token": self.browser.csrf(html)}))
        return codename

    # -- the states ----------------------------------------------------------------------------

    @inlineCallbacks
    def anonymous(self):
        yield self.get(f"/language/{self.code}")
        yield self.keep("index", self.get("/"))
        yield self.keep("safety", self.get("/safety"))
        yield self.keep("index-not-tor-browser", self.get("/", **{"User-Agent": CHROME_UA}))
        yield self.keep("not-found", self.get("/no/such/page"))
        yield self.keep("not-allowed", self.get("/submit"))
        yield self.keep("bad-address", self.get("/%ff"))
        yield self.keep("tor2web", self.get("/", **{"X-tor2web": "1"}))
        body, content_type = multipart_body([("codename", "x")], [])
        yield self.keep("upload-elsewhere", self.post("/login", data=body, headers={
            "User-Agent": TOR_BROWSER_UA, "Content-Type": content_type}))
        yield self.keep("login-expired", self.get("/login?expired=1"))
        html = yield self.keep("login", self.get("/login"))
        yield self.keep("login-error", self.post("/login", data={
            "codename": "zqxv wplk", "csrf_token": self.browser.csrf(html)}))
        yield self.keep("login-stale", self.post("/login", data={"codename": "zqxv", "csrf_token": "stale"}))
        html = yield self.get("/generate")
        codename = _CODENAME.search(html[1]).group(1)
        yield self.keep("create-stale", self.post("/create", data={"codename": codename, "csrf_token": "stale"}))
        other = " ".join(reversed(codename.split()))
        yield self.keep("create-not-generated", self.post("/create", data={
            "codename": other, "csrf_token": self.browser.csrf(html[1])}))

    @inlineCallbacks
    def logged_in(self):
        codename = yield self.new_source()
        yield self.keep("generate-logged-in", self.get("/generate"))
        yield self.keep("refused-empty", self.send(" "))
        yield self.keep("refused-too-long", self.send("x" * (pages.MAX_MESSAGE_CHARS + 1)))
        yield self.keep("refused-bot", self.send(TYPED, extra=[(pages.HONEYPOT_FIELD, "x")]))
        yield self.keep("refused-stale-form", self.send(TYPED, csrf="stale"))
        yield self.keep("refused-too-large", self.send(TYPED, [("big.bin", b"x" * (MAX_UPLOAD + 1))]))
        yield self.keep("refused-too-many-files", self.send(TYPED, [("a.txt", b"a"), ("b.txt", b"b"), ("c.txt", b"c")]))
        yield self.keep("received-first", self.send(TYPED))
        yield self.get("/lookup")
        yield self.keep("received-message-and-documents", self.send(TYPED, [("a.txt", b"a"), ("b.txt", b"b")]))
        yield self.get("/lookup")
        yield self.keep("received-one-document", self.send("", [("a.txt", b"a")]))
        yield self.keep("nothing-received", self.post("/submit", data={"msg": TYPED}))
        source_id = self.session().data["source"].source_id
        for text in ("Jibu la kwanza", "Jibu la pili"):
            yield self.server.service.newsroom.replies.add(source_id, text)
        html = yield self.keep("lookup-replies", self.get("/lookup"))
        number = re.search(r'name="reply" value="(\d+)"', html).group(1)
        csrf = self.browser.csrf(html)
        yield self.keep("reply-deleted", self.post("/delete", data={"reply": number, "csrf_token": csrf}))
        yield self.keep("reply-not-found", self.post("/delete", data={"reply": "999999", "csrf_token": csrf}))
        yield self.keep("delete-stale", self.post("/delete", data={"reply": number, "csrf_token": "stale"}))
        yield self.keep("replies-all-deleted", self.post("/delete-all", data={"csrf_token": csrf}))
        html = yield self.get("/lookup")
        token = re.search(r'name="form_token" value="([^"]+)"', html[1]).group(1)
        yield self.keep("language-switch-files", self.post(f"/language/{self.code}?next=/lookup", data={
            "msg": TYPED, "fh": "notes.txt", "form_token": token}))
        yield self.get("/lookup")
        html = yield self.keep("lookup-codename", self.get("/lookup"))
        yield self.keep("logged-out", self.get("/logout"))
        html = yield self.get("/login")
        yield self.keep("lookup-returning", self.one_at_a_time.run(self.post, "/login", data={
            "codename": codename, "csrf_token": self.browser.csrf(html[1])}))
        # One at a time: gpg's keyring rewrites after concurrent deletions can fail (seen: "could
        # not rewrite the keyring (import failed, gpg exit 2)"), which is not what this crawls.
        yield self.one_at_a_time.run(self.server.service.newsroom.delete_source, source_id)
        yield self.keep("closed", self.send(TYPED))
        # A session that ended while the form was open: the message waits on the login page.
        yield self.new_source("expired-new-source")
        self.server.service.source.sessions.destroy(self.session())
        yield self.keep("login-message-kept", self.send(TYPED, csrf="ended"))

    @inlineCallbacks
    def admin_settings(self):
        """With the settings ``crawl`` turns on for this phase: a retention period, no files, a demo."""
        yield self.keep("safety-retention", self.get("/safety"))
        yield self.new_source("demo-new-source")
        yield self.keep("lookup-no-files", self.get("/lookup"))
        yield self.keep("refused-no-files", self.send(TYPED, [("a.txt", b"a")]))


@inlineCallbacks
def crawl(testcase: Any, codes: Iterable[str], parallel: int = 6):
    """Start a server for ``testcase`` and visit every state in each language of ``codes``.

    -> ({code: {state: Page}}, seconds taken). Three files at most per submission for the
    crawl, so that "too many files" is reached with three."""
    testcase.patch(uploads, "MAX_FILES", 2)
    testcase.patch(_answers, "MAX_FILES", 2)
    started = time.monotonic()
    server = yield start_server(testcase, **SERVER_OPTIONS)
    # Argon2id runs are admitted a few at a time per circuit (all of these are one): one at a
    # time, and so are source deletions (see ``logged_in``).
    one_at_a_time = DeferredLock()
    visitors = [_Visitor(server, code, one_at_a_time) for code in codes]
    for visitor in visitors:
        testcase.addCleanup(visitor.browser.close)
    limit = DeferredSemaphore(parallel)
    for phase in ("anonymous", "logged_in", "admin_settings"):
        if phase == "admin_settings":
            settings = server.service.settings
            settings.retention_days, settings.allow_uploads = 30, False
            server.service.source.demo = True
        yield gatherResults([limit.run(getattr(v, phase)) for v in visitors], consumeErrors=True)
    return {v.code: v.seen for v in visitors}, time.monotonic() - started
