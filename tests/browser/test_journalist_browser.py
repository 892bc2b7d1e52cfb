"""The journalist flow in a real Chromium with JavaScript off, over mutual TLS with a client certificate.

How Chromium gets through the journalist listener's TLS, per driver, without touching anything
global (no /etc/chromium/policies, no ``--ignore-certificate-errors``, no ``acceptInsecureCerts``):

* **A private HOME with an NSS database.** On Linux, Chromium keeps client certificates (and
  locally trusted server certificates) in the NSS database at ``$HOME/.pki/nssdb``. Each driver
  gets a fresh temporary HOME, passed to chromedriver (and so to Chromium) with
  ``start_driver(env=...)``. ``certutil -N`` creates the database (empty password) and
  ``pk12util -i`` imports the journalist's PKCS#12 (``deaddrop-admin cert issue`` output) -- just as a
  journalist would on their workstation. certutil/pk12util are in Debian's ``libnss3-tools``.

* **Trusting the server: the newsroom CA.** One offline CA signs the journalists' certificates
  and the journalist listener's (``deaddrop-admin cert server``; the demo layout issues it from
  ``DATA/ca`` at first start). ``certutil -A -t "C,,"`` trusts that CA to identify websites,
  which is the "Authorities" import a journalist does in Chromium's or Firefox's settings. The
  server's own certificate is never imported: ``test_journalist_onboarding`` checks that the
  ``.p12`` plus the CA is all a browser needs, and that without the CA Chromium warns.

* **Choosing the certificate without a dialog.** When a server asks for a client certificate,
  Chromium shows a certificate picker unless the ``AutoSelectCertificateForUrls`` policy matches.
  Headless, nobody answers the picker: the navigation simply hangs until the page-load timeout
  (tried: with no rule, or with a rule whose filter does not match, ``driver.get`` times out).
  The policy is stored in the pref ``profile.managed_auto_select_certificate_for_urls`` (a list
  of JSON strings, exactly the policy's format), and like the colleague's JavaScript switch
  (``profile.managed_default_content_settings.javascript``) it can be set per profile through
  chromedriver's ``prefs`` -- no managed policy file. Our rule names the journalist origin
  (``https://127.0.0.1:PORT``) and filters on the issuer CN of this instance's CA
  (``DeadDrop journalist CA <random>``), so Chromium picks exactly the certificate from our CA.
  Chromium has no command-line switch for this (``--auto-select-certificate-for-urls`` does not
  exist). The user-level content setting
  ``profile.content_settings.exceptions.auto_select_certificate`` = ``{"<origin>,*": {"setting":
  {"filters": [{...}]}}}`` works too, but its format is internal and has changed over the years;
  the policy's format is documented and stable.

Without the certificate (the same set-up, only the PKCS#12 not imported) Chromium has nothing to
offer, sends an empty Certificate message, and the server ends the handshake with a
``certificate_required`` alert: no HTTP at all. Chromium reports ``ERR_BAD_SSL_CLIENT_AUTH_CERT``
or, when the alert beats the request, ``ERR_SOCKET_NOT_CONNECTED`` (both seen; the net log shows
the alert either way), and the server records ``tls.client_cert.refused`` (``no_certificate``).

Downloads go to a per-driver directory (prefs ``download.default_directory`` and
``download.prompt_for_download``); the downloaded ``.gpg`` files are decrypted with the test SVS key.

Every journalist page is saved to tests/screenshots/journalist-<page>-<desktop|phone>.png.
Selenium is blocking: browser steps run in a thread (``deferToThread``) while the reactor serves.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time

from cryptography import x509
from cryptography.x509.oid import NameOID
from twisted.internet.defer import inlineCallbacks
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.trial import unittest
from twisted.trial.unittest import SkipTest

from deaddrop.web.journalist import pages
from tests._support import (
    Browser, TotpDevice, add_journalist, issue_client_cert, security_events, start_journalist_server, test_svs,
    wait_until,
)
from tests.browser._chromium import (
    follow,
    DESKTOP, PHONE, WindowSize, horizontal_overflow, overflowing_elements, quit_driver, require_chromium, screenshot,
    start_driver,
)
from tests.integration.test_source_flow import gunzip_with_name

try:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
except ImportError:  # require_chromium() skips with the reason
    pass

_log = Logger()

CERTUTIL = os.environ.get("DEADDROP_TEST_CERTUTIL", "certutil")
PK12UTIL = os.environ.get("DEADDROP_TEST_PK12UTIL", "pk12util")
P12_PASSWORD = "test-password"  # what tests._support.issue_client_cert encrypts the .p12 with
AUTO_SELECT_PREF = "profile.managed_auto_select_certificate_for_urls"
REFUSED_HANDSHAKE_ERRORS = ("ERR_BAD_SSL_CLIENT_AUTH_CERT", "ERR_SOCKET_NOT_CONNECTED")

MESSAGE = "A tip for the newsroom. MSG-MARKER-6a1f"
DOCUMENT = ("budget 2024.pdf", b"DOC-MARKER-0c9e\n" * 300 + bytes(range(256)) * 16)
REPLY = "Thank you, we read it. REPLY-MARKER-77d3\nCould you send the second page too?"


def require_nss_tools() -> None:
    missing = [tool for tool in (CERTUTIL, PK12UTIL) if shutil.which(tool) is None]
    if missing:
        raise SkipTest(f"JOURNALIST BROWSER TESTS SKIPPED: missing {' and '.join(missing)} (Debian package "
                       "'libnss3-tools'). Chromium needs them to get the journalist's client certificate "
                       "and the server's certificate into its NSS database.")


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr or proc.stdout}")


def make_nss_home(parent: str, ca_cert: str | None, p12: str | None) -> str:
    """A HOME whose ``.pki/nssdb`` trusts ``ca_cert`` to identify websites and holds ``p12``, if given.

    Exactly what the README asks of a journalist: import the ``.p12`` (Your Certificates) and
    trust the newsroom CA (Authorities, "identify websites"); nothing about the server itself.
    """
    home = tempfile.mkdtemp(prefix="home-", dir=parent)
    db = os.path.join(home, ".pki", "nssdb")
    os.makedirs(db, mode=0o700)
    _run(CERTUTIL, "-N", "-d", f"sql:{db}", "--empty-password")
    if ca_cert is not None:
        _run(CERTUTIL, "-A", "-d", f"sql:{db}", "-n", "DeadDrop newsroom CA", "-t", "C,,", "-i", ca_cert)
    if p12 is not None:
        _run(PK12UTIL, "-i", p12, "-d", f"sql:{db}", "-W", P12_PASSWORD, "-K", "")
    return home


def ca_common_name(ca_cert_path: str) -> str:
    with open(ca_cert_path, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def _css(driver, selector: str):
    return driver.find_element(By.CSS_SELECTOR, selector)


def _text(driver, selector: str = "main") -> str:
    return _css(driver, selector).text


def outside_the_column(driver, limit: int = 5) -> list[str]:
    """Elements in <main> reaching past its right edge (a table too wide for the page's column).

    Runs through DevTools, which the page's JavaScript setting does not govern.
    """
    return driver.execute_script("""
        const main = document.querySelector('main');
        const edge = main.getBoundingClientRect().right + 0.5;
        const out = [];
        for (const el of main.querySelectorAll('*')) {
            const r = el.getBoundingClientRect();
            if (r.width && r.right > edge) {
                out.push(el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ').join('.') : '')
                         + ' right=' + Math.round(r.right) + ' main=' + Math.round(edge));
            }
        }
        return out.slice(0, arguments[0]);
    """, limit)


def _path(driver) -> str:
    return "/" + driver.current_url.split("/", 3)[3]


def wait_for_download(directory: str, suffix: str, timeout: float = 15) -> str:
    """-> the path of the one finished download ending in ``suffix``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = os.listdir(directory)
        done = [n for n in names if n.endswith(suffix)]
        if done and not any(n.endswith(".crdownload") for n in names):
            [name] = done
            return os.path.join(directory, name)
        time.sleep(0.05)
    raise AssertionError(f"no finished download *{suffix} in {directory} after {timeout}s: {os.listdir(directory)}")


class JournalistBrowserTests(unittest.TestCase):
    # A flow takes ~11 s on a quiet machine and took up to 57 s on a loaded 2-core one.
    timeout = 180

    @inlineCallbacks
    def setUp(self):
        require_chromium()
        require_nss_tools()
        self.server = yield start_journalist_server(self)
        self.url = self.server.journalist_url
        issue_client_cert(self.server, "alice")
        self.p12 = os.path.join(self.server.data_dir, "clients", "alice.p12")
        self.admin = yield add_journalist(self.server, "alice", admin=True)
        yield add_journalist(self.server, "bob")  # so the users page has an account it may delete
        self.device = TotpDevice(self.server, self.admin.totp_secret)
        self.tempdir = tempfile.mkdtemp(prefix="dd-jbrowser-")
        self.addCleanup(shutil.rmtree, self.tempdir, True)
        self.shots: list[str] = []
        self.page_sources: list[str] = []

    def _driver_args(self, size: WindowSize, with_certificate: bool) -> tuple[dict, str]:
        home = make_nss_home(self.tempdir, self.server.server_cert, self.p12 if with_certificate else None)
        downloads = tempfile.mkdtemp(prefix="downloads-", dir=self.tempdir)
        rule = {"pattern": self.url, "filter": {"ISSUER": {"CN": ca_common_name(os.path.join(self.server.ca_dir,
                                                                                            "ca.pem"))}}}
        prefs = {
            AUTO_SELECT_PREF: [json.dumps(rule)],
            "download.default_directory": downloads,
            "download.prompt_for_download": False,
        }
        env = dict(os.environ, HOME=home)
        return dict(extra_prefs=prefs, env=env, page_load_timeout=15), downloads

    @inlineCallbacks
    def _start(self, size: WindowSize, with_certificate: bool = True):
        kw, downloads = self._driver_args(size, with_certificate)
        started = time.monotonic()
        driver = yield deferToThread(start_driver, size, **kw)
        self.addCleanup(deferToThread, quit_driver, driver)
        self.startup_seconds = time.monotonic() - started
        driver.deaddrop_downloads = downloads
        return driver

    def _source_browser(self) -> Browser:
        b = Browser(self.server.source_url)
        self.addCleanup(b.close)
        return b

    def _db(self, sql: str, *args) -> list[tuple]:
        conn = sqlite3.connect(os.path.join(self.server.data_dir, "db.sqlite"))
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    # -- blocking helpers (run in a thread) ------------------------------------------------

    def _page(self, driver, name: str) -> str:
        """Check the page as laid out, save a screenshot; -> the main text."""
        self.assertEqual(_css(driver, "body").value_of_css_property("margin-top"), "0px",
                         f"{name}: /static/style.css was not applied")
        self.shots.append(screenshot(driver, f"journalist-{name}"))
        self.page_sources.append(driver.page_source)
        overflow = horizontal_overflow(driver)
        if overflow:
            self.fail(f"{name}: the page is {overflow}px wider than the {driver.deaddrop_size.name} window: "
                      f"{overflowing_elements(driver)}; see {self.shots[-1]}")
        outside = outside_the_column(driver)
        self.assertEqual(outside, [], f"{name}: wider than the page's column; see {self.shots[-1]}")
        return _text(driver)

    def _log_in(self, driver, code: str) -> None:
        driver.get(self.url + "/")
        self.assertEqual(_path(driver), "/login")
        self.assertIn("Journalist log in", self._page(driver, "login"))
        _css(driver, "#username").send_keys(self.admin.username)
        _css(driver, "#passphrase").send_keys(self.admin.passphrase)
        _css(driver, "#one_time_code").send_keys("000000")
        follow(driver, "form[action='/login'] button[type=submit]")
        self.assertIn(pages.GENERIC_LOGIN_ERROR, self._page(driver, "login-error"))
        self.assertEqual(_css(driver, "#username").get_attribute("value"), self.admin.username)
        _css(driver, "#passphrase").send_keys(self.admin.passphrase)
        _css(driver, "#one_time_code").send_keys(code)
        follow(driver, "form[action='/login'] button[type=submit]")
        self.assertEqual(_path(driver), "/sources")

    def _open_source(self, driver, designation: str) -> str:
        """On /sources: the one source, 2 unread; find it by part of its designation (issue 22);
        open it. -> its page path."""
        self._page(driver, "sources")
        _css(driver, "#q").send_keys(designation.split()[-1].upper())
        _css(driver, "input[name=unread]").click()
        follow(driver, "form.filters button[type=submit]")
        self.assertIn("unread=1", driver.current_url)
        text = self._page(driver, "sources-filtered")
        self.assertEqual(_css(driver, "#q").get_attribute("value"), designation.split()[-1].upper())
        [row] = driver.find_elements(By.CSS_SELECTOR, "main tbody tr")
        self.assertEqual(row.find_element(By.CSS_SELECTOR, "a.designation").text, designation)
        self.assertEqual(row.find_element(By.CSS_SELECTOR, ".badge").text, "2 unread")
        self.assertIn("1 message, 1 document", text)
        follow(driver, "main a.designation")
        path = _path(driver)
        self.assertRegex(path, r"^/sources/[0-9a-f-]{36}$")
        text = self._page(driver, "source")
        self.assertEqual(_text(driver, "h1"), designation)
        self.assertIn("Download all unread (2)", text)
        self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "main tbody tr")), 2)
        self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "main tbody .badge")), 2)
        return path

    def _submission_links(self, driver) -> dict[str, object]:
        links = driver.find_elements(By.CSS_SELECTOR, "main tbody a[href*='/submissions/']")
        return {("msg" if a.text.endswith("-msg.gpg") else "doc"): a for a in links}

    def _download_both(self, driver) -> tuple[str, str]:
        links = self._submission_links(driver)
        names = {kind: a.text for kind, a in links.items()}
        self.assertRegex(names["msg"], r"^1-[a-z]+_[a-z]+_[a-z]+-msg\.gpg$")
        self.assertRegex(names["doc"], r"^2-[a-z]+_[a-z]+_[a-z]+-doc\.gz\.gpg$")
        # A file's link shows the page again, its counts already new, and the file downloads
        # without replacing it (issue 22: no reload, no JavaScript).
        hrefs = {kind: a.get_attribute("href").split("/sources/", 1)[1] for kind, a in links.items()}
        follow(driver, f"main tbody a[href$='{hrefs['msg']}']")
        msg = wait_for_download(driver.deaddrop_downloads, "-msg.gpg")
        self.assertIn("Download all unread (1)", _text(driver))
        follow(driver, f"main tbody a[href$='{hrefs['doc']}']")
        doc = wait_for_download(driver.deaddrop_downloads, "-doc.gz.gpg")
        self.assertEqual((os.path.basename(msg), os.path.basename(doc)), (names["msg"], names["doc"]))
        # Both are read now, on the page as it is.
        self.assertIn("Download all unread (0)", _text(driver))
        self.assertEqual([td.text for td in driver.find_elements(By.CSS_SELECTOR, "main tbody td:last-child")],
                         ["read", "read"])
        return msg, doc

    def _reply(self, driver) -> None:
        _css(driver, "#reply").send_keys(REPLY)
        follow(driver, "form[action$='/reply'] button[type=submit]")
        text = self._page(driver, "reply-sent")
        self.assertIn("Reply sent.", _text(driver, ".flashes"))
        [reply] = driver.find_elements(By.CSS_SELECTOR, "main ul li")
        self.assertRegex(reply.text, r"^3-[a-z]+_[a-z]+_[a-z]+-reply\.gpg \(by alice, [A-Z][a-z]+ \d{1,2}, \d{4}\)$")
        self.assertEqual(_css(driver, "#reply").get_attribute("value"), "")
        self.assertNotIn("REPLY-MARKER", text)

    def _star_and_delete_message(self, driver, designation: str) -> None:
        follow(driver, "form[action$='/star'] button[type=submit]")
        self.assertEqual(_text(driver, "h1"), "★ " + designation)
        self.assertEqual(_css(driver, "form[action$='/star'] button[type=submit]").text, "Unstar")
        msg_link = self._submission_links(driver)["msg"]
        msg_name = msg_link.text
        submission_uuid = msg_link.get_attribute("href").split("/submissions/")[1].split("/")[0]
        _css(driver, f"input[name=submission][value='{submission_uuid}']").click()
        follow(driver, "button[name=action][value=delete]")
        # A confirmation page lists what would go; nothing is deleted yet (issue 13).
        text = self._page(driver, "delete-selected-confirm")
        self.assertIn("Delete 1 file of", text)
        self.assertEqual([li.text.split(" (")[0] for li in driver.find_elements(By.CSS_SELECTOR, "li.to-delete")],
                         [msg_name])
        follow(driver, "button[name=action][value=delete-confirmed]")
        self.assertIn("Deleted 1 submission.", _text(driver, ".flashes"))
        self.assertEqual(list(self._submission_links(driver)), ["doc"])
        self._page(driver, "submission-deleted")

    def _accounts_and_settings(self, driver, source_path: str) -> None:
        follow(driver, "header a[href='/account']")
        self.assertIn("Username: alice (administrator)", self._page(driver, "account"))
        follow(driver, "header a[href='/admin/users']")
        text = self._page(driver, "users")
        self.assertEqual([tr.find_element(By.TAG_NAME, "td").text
                          for tr in driver.find_elements(By.CSS_SELECTOR, "main tbody tr")], ["alice admin", "bob"])
        # Everyone but oneself can be deleted, after a confirmation (issue 22).
        self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "main tbody .danger")), 1)
        self.assertRegex(text, r"alice admin\s.*\svalid until [A-Z][a-z]+ \d{1,2}, \d{4}")
        follow(driver, "main tbody a.danger")
        self.assertEqual(_text(driver, "h1"), "Delete bob?")
        self._page(driver, "user-delete-confirm")
        follow(driver, "main a.button.secondary")  # Cancel
        self.assertEqual(_path(driver), "/admin/users")
        self.assertIn("Add a user", text)
        _css(driver, "#username").send_keys("carol")
        follow(driver, "form[action='/admin/users'] button[type=submit]")
        text = self._page(driver, "user-added")
        self.assertEqual(_text(driver, "h1"), "Added carol")
        self.assertEqual(len(_text(driver, "#passphrase").split()), 7)
        self.assertRegex(_text(driver, "#totp-secret"), r"^[A-Z2-7]{16,}$")
        self.assertTrue(_css(driver, "svg.qr").is_displayed())
        follow(driver, "header a[href='/admin/settings']")
        self._page(driver, "settings")
        self.assertEqual(_css(driver, "#organisation_name").get_attribute("value"), "DeadDrop")
        follow(driver, "form[action='/admin/settings'] button[type=submit]")
        self.assertEqual(_text(driver, ".flashes"), "Settings saved.")
        driver.get(self.url + source_path)

    def _delete_source(self, driver, designation: str) -> None:
        follow(driver, "main a[href$='/delete']")
        text = self._page(driver, "delete-source")
        self.assertEqual(_text(driver, "h1"), f"Delete {designation}?")
        self.assertIn("This cannot be undone", text)
        follow(driver, "form[action$='/delete'] button[type=submit]")
        self.assertEqual(_path(driver), "/sources")
        text = self._page(driver, "source-deleted")
        self.assertIn(f"{designation} and everything they sent were deleted.", text)
        self.assertIn("No source has submitted anything yet.", text)

    def _log_out(self, driver) -> None:
        [before] = driver.get_cookies()
        follow(driver, "header form[action='/logout'] button")
        self.assertEqual(_path(driver), "/login")
        # The login form starts a new, anonymous session (for its CSRF token): a new cookie.
        [after] = driver.get_cookies()
        self.assertEqual(after["name"], before["name"])
        self.assertNotEqual(after["value"], before["value"])
        driver.get(self.url + "/sources")
        self.assertEqual(_path(driver), "/login")

    # -- the flow --------------------------------------------------------------------------

    @inlineCallbacks
    def _flow(self, size: WindowSize):
        started = time.monotonic()
        source = self._source_browser()
        codename = yield source.create_source()
        response, html = yield source.submit(MESSAGE, [DOCUMENT])
        self.assertEqual(response.code, 200, html[:300])
        [(designation, filesystem_id)] = self._db("SELECT designation, filesystem_id FROM sources")
        store = os.path.join(self.server.data_dir, "store", filesystem_id)

        driver = yield self._start(size)
        yield deferToThread(self._log_in, driver, self.device.code())
        source_path = yield deferToThread(self._open_source, driver, designation)
        msg, doc = yield deferToThread(self._download_both, driver)
        svs = test_svs()
        with open(msg, "rb") as f:
            self.assertEqual(svs.decrypt(f.read()).decode("utf-8"), MESSAGE)
        with open(doc, "rb") as f:
            self.assertEqual(gunzip_with_name(svs.decrypt(f.read())), DOCUMENT)

        yield deferToThread(self._reply, driver)
        response, html = yield source.get("/lookup")
        # A browser submits a textarea's line breaks as CRLF (HTML's form-data encoding).
        self.assertIn(REPLY.replace("\n", "\r\n"), html)

        yield deferToThread(self._star_and_delete_message, driver, designation)
        self.assertEqual(self._db("SELECT is_starred FROM sources"), [(1,)])
        self.assertFalse(any(n.endswith("-msg.gpg") for n in os.listdir(store)), os.listdir(store))

        yield deferToThread(self._accounts_and_settings, driver, source_path)
        yield deferToThread(self._delete_source, driver, designation)
        self.assertEqual(self._db("SELECT COUNT(*) FROM sources"), [(0,)])
        self.assertFalse(os.path.exists(store))
        response, html = yield source.get("/lookup")
        # Issue 11: the source is logged out and told why, calmly.
        self.assertIn("The newsroom has closed the conversation for this codename", html)

        yield deferToThread(self._log_out, driver)
        # No journalist page showed the source's filesystem id or codename.
        for page in self.page_sources:
            self.assertNotIn(filesystem_id, page)
            self.assertNotIn(codename, page)
        # 12, the "Delete selected" confirmation, the filtered list and the "Delete user" confirmation
        self.assertEqual(len(self.shots), 15)
        _log.info("journalist browser flow ({size}): Chromium start {start:.1f}s, whole flow {total:.1f}s; "
                  "screenshots in {where}", size=size.name, start=self.startup_seconds,
                  total=time.monotonic() - started, where=os.path.dirname(self.shots[0]))

    def test_journalist_flow_on_a_desktop_without_javascript(self):
        return self._flow(DESKTOP)

    def test_journalist_flow_on_a_phone_without_javascript(self):
        return self._flow(PHONE)

    @inlineCallbacks
    def test_without_the_client_certificate_the_page_does_not_load(self):
        """The same browser set-up minus the PKCS#12: the server refuses the handshake."""
        driver = yield self._start(DESKTOP, with_certificate=False)

        def visit() -> tuple[str, str]:
            """-> (Chromium's net error, the page's HTML)."""
            try:
                driver.get(self.url + "/login")
            except WebDriverException as e:
                # Depending on timing chromedriver reports the failed navigation as an error...
                found = re.search(r"net::(ERR_[A-Z_]+)", e.msg or "")
                if found is None:
                    raise
                return found.group(1), driver.page_source
            # ...or Chromium's error page loads. Its template names other errors too: read the
            # page's data, not the first ERR_ in the source.
            found = re.search(r'"errorCode":"(ERR_[A-Z_]+)"', driver.page_source)
            self.assertIsNotNone(found, f"no network error on the page: {driver.title!r} at {driver.current_url}")
            return found.group(1), driver.page_source

        error, html = yield deferToThread(visit)
        # With TLS 1.3 the client finishes its side of the handshake before the server judges its
        # (empty) Certificate message; the server's certificate_required alert then arrives either
        # while the request is read (ERR_BAD_SSL_CLIENT_AUTH_CERT) or while Chromium is still
        # handing the fresh socket to the request, which it then finds closed
        # (ERR_SOCKET_NOT_CONNECTED). Chromium's net log shows the alert (116) received both times.
        self.assertIn(error, REFUSED_HANDSHAKE_ERRORS)
        self.assertNotIn("Journalist log in", html)
        self.assertNotIn("csrf_token", html)
        cookies = yield deferToThread(driver.get_cookies)
        self.assertEqual(cookies, [])
        yield wait_until(lambda: any(e["event"] == "tls.client_cert.refused" for e in security_events(self.server)))
        refusals = [e for e in security_events(self.server) if e["event"] == "tls.client_cert.refused"]
        self.assertEqual({e["reason"] for e in refusals}, {"no_certificate"})

    @inlineCallbacks
    def test_an_over_size_logo_says_what_is_accepted_and_the_admin_tries_again(self):
        """Issue 17 §7: a logo too large (over the file limit, or over the whole body's limit and
        answered at its first byte) gets the settings page with the size accepted, not a dead end."""
        from deaddrop.newsroom import png

        driver = yield self._start(DESKTOP)
        code = self.device.code()
        files = {}
        for name, content in (("huge.png", b"\x89PNG" + os.urandom(3_000_000)), ("big.png", b"\x89PNG" + b"x" * 60_000),
                              ("small.png", png.tiny_png(8, 8))):
            files[name] = os.path.join(self.tempdir, name)
            with open(files[name], "wb") as f:
                f.write(content)

        def run() -> None:
            driver.get(self.url + "/login")
            _css(driver, "#username").send_keys(self.admin.username)
            _css(driver, "#passphrase").send_keys(self.admin.passphrase)
            _css(driver, "#one_time_code").send_keys(code)
            follow(driver, "form[action='/login'] button[type=submit]")
            for name in ("huge.png", "big.png"):
                driver.get(self.url + "/admin/source-texts")
                _css(driver, "#logo-en").send_keys(files[name])
                follow(driver, "form[action='/admin/source-logo'] button[type=submit]:not([name])")
                text = self._page(driver, f"logo-too-large-{name[:-4]}")
                self.assertIn("The logo was not saved: that file is larger than 50,000 bytes", text)
                self.assertIn("Choose a PNG image of at most 50,000 bytes and 1024 x 1024 pixels", text)
            _css(driver, "#logo-en").send_keys(files["small.png"])  # tried again from that page
            follow(driver, "form[action='/admin/source-logo'] button[type=submit]:not([name])")
            self.assertIn("Logo for English saved.", _text(driver))
        yield deferToThread(run)
