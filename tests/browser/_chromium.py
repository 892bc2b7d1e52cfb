"""A real Chromium, driven by selenium, for the browser tests of both interfaces.

Everything here is blocking (selenium talks HTTP to chromedriver and waits). Tests that run a
DeadDrop server in the same process must call these functions through
``twisted.internet.threads.deferToThread`` so the reactor keeps serving while the browser waits.

    driver = start_driver(PHONE)                      # JavaScript off, as at Tor Browser's "Safest"
    driver.get(url); screenshot(driver, "source-index")   # -> tests/screenshots/source-index-phone.png
    quit_driver(driver)

``start_driver`` takes ``extra_args`` (more Chromium switches, e.g. for client certificates),
``extra_prefs``, ``env`` (for chromedriver and Chromium, e.g. a HOME holding an NSS database
with a client certificate), ``user_data_dir`` (a profile prepared beforehand) and
``accept_insecure_certs`` (a private CA), which the journalist interface's tests need.
"""
from __future__ import annotations

import base64
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from twisted.trial.unittest import SkipTest

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError as e:  # pragma: no cover - selenium is in the [test] extras
    webdriver = None
    _SELENIUM_IMPORT_ERROR: str | None = str(e)
else:
    _SELENIUM_IMPORT_ERROR = None

CHROMIUM = os.environ.get("DEADDROP_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("DEADDROP_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "screenshots")

# Without the background-networking switches Chromium phones home at start, and on a closed
# network (CI, this machine) those connections are refused and can stall it.
BASE_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--password-store=basic",
)

# Content setting 2 = block. "managed" is the policy level: a page cannot turn it back on.
JAVASCRIPT_OFF_PREFS = {"profile.managed_default_content_settings.javascript": 2}

# Tor Browser for Android identifies itself as Firefox for Android.
PHONE_USER_AGENT = "Mozilla/5.0 (Android 10; Mobile; rv:128.0) Gecko/128.0 Firefox/128.0"


@dataclass(frozen=True)
class WindowSize:
    name: str
    width: int   # CSS pixels of the viewport
    height: int
    mobile: bool = False
    pixel_ratio: float = 1.0
    user_agent: str | None = None


DESKTOP = WindowSize("desktop", 1280, 800)
PHONE = WindowSize("phone", 390, 844, mobile=True, pixel_ratio=2.0, user_agent=PHONE_USER_AGENT)
SIZES = (DESKTOP, PHONE)


def require_chromium() -> None:
    """Raise SkipTest, loudly, when the browser tests cannot run here."""
    missing = []
    if _SELENIUM_IMPORT_ERROR is not None:
        missing.append(f"the Python package selenium ({_SELENIUM_IMPORT_ERROR}; pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (Debian package 'chromium')")
    if not os.access(CHROMEDRIVER, os.X_OK):
        missing.append(f"{CHROMEDRIVER} (Debian package 'chromium-driver')")
    if missing:
        raise SkipTest("BROWSER TESTS SKIPPED: missing " + "; ".join(missing)
                       + ". These tests drive a real Chromium through the pages with JavaScript off.")


def start_driver(
    size: WindowSize = DESKTOP,
    *,
    javascript: bool = False,
    extra_args: Iterable[str] = (),
    extra_prefs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    user_data_dir: str | None = None,
    accept_insecure_certs: bool = False,
    page_load_timeout: float = 30,
    command_timeout: float = 40,
) -> Any:
    """-> a selenium Chrome driver on a fresh profile, its viewport exactly ``size``.

    JavaScript is off unless ``javascript=True``, and that is checked before returning.
    Stop it with ``quit_driver`` (which also removes a profile this function made).
    """
    require_chromium()
    own_profile = user_data_dir is None
    profile = user_data_dir or tempfile.mkdtemp(prefix="dd-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (*BASE_ARGS, f"--user-data-dir={profile}", *extra_args):
        options.add_argument(arg)
    prefs: dict[str, Any] = {} if javascript else dict(JAVASCRIPT_OFF_PREFS)
    prefs.update(extra_prefs or {})
    if prefs:
        options.add_experimental_option("prefs", prefs)
    if size.mobile:
        # No touch emulation: with JavaScript off, chromedriver's click turns into a tap that
        # never completes (chromedriver 156 hangs in element.click() until its own timeout).
        metrics = {"width": size.width, "height": size.height, "pixelRatio": size.pixel_ratio, "touch": False}
        emulation: dict[str, Any] = {"deviceMetrics": metrics}
        if size.user_agent:
            emulation["userAgent"] = size.user_agent
        options.add_experimental_option("mobileEmulation", emulation)
    options.accept_insecure_certs = accept_insecure_certs
    service = Service(CHROMEDRIVER, env=dict(env) if env is not None else None)
    try:
        driver = webdriver.Chrome(service=service, options=options)
    except Exception:
        if own_profile:
            shutil.rmtree(profile, ignore_errors=True)
        raise
    driver.deaddrop_size = size
    driver.deaddrop_profile = profile if own_profile else None
    driver.deaddrop_profile_arg = f"--user-data-dir={profile}"
    try:
        # A command chromedriver never answers fails after this, rather than selenium's 120 s.
        executor = driver.command_executor
        (getattr(executor, "client_config", None) or executor._client_config).timeout = command_timeout
        driver.set_page_load_timeout(page_load_timeout)
        if not size.mobile:
            # In headless mode a 1280x800 window has a smaller viewport; pin the viewport itself.
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                "width": size.width, "height": size.height, "deviceScaleFactor": size.pixel_ratio, "mobile": False,
            })
        if not javascript:
            assert_javascript_off(driver)
    except BaseException:
        quit_driver(driver)
        raise
    return driver


def quit_driver(driver: Any) -> None:
    """Stop Chromium and chromedriver, even if chromedriver no longer answers; remove our profile."""
    try:
        driver.quit()
    except Exception:
        driver.service.stop()
    finally:
        # Killing a stuck chromedriver orphans its Chromium: end the processes of this
        # driver's profile (and only those: the profile directory is unique to it).
        _kill_processes_with_arg(getattr(driver, "deaddrop_profile_arg", None))
        profile = getattr(driver, "deaddrop_profile", None)
        if profile:
            shutil.rmtree(profile, ignore_errors=True)


def _kill_processes_with_arg(arg: str | None) -> None:
    if not arg or not os.path.isdir("/proc"):
        return
    wanted = arg.encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if wanted in argv:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


# A page whose inline script, if it runs, renames it. Loaded as a data: URL, so it needs no
# server and no CSP stands in the way: only the browser's JavaScript setting decides.
_PROBE_HTML = (
    "<!DOCTYPE html><title>script did not run</title>"
    "<script>document.title = 'script ran'</script>"
    "<body onload=\"document.title = 'script ran'\"><noscript><p id=noscript>noscript</p></noscript>"
)


def javascript_runs(driver: Any) -> bool:
    """Load the probe page: True if its script ran (leaves the driver on the probe page)."""
    driver.get("data:text/html;charset=utf-8," + _PROBE_HTML)
    title = driver.title
    if title not in ("script ran", "script did not run"):
        raise AssertionError(f"JavaScript probe page did not load (title {title!r})")
    return title == "script ran"


def assert_javascript_off(driver: Any) -> None:
    if javascript_runs(driver):
        raise AssertionError("JavaScript is enabled in the test browser; the tests must run with it off")
    # The browser itself says scripting is off: it renders <noscript> content.
    if not driver.find_element("id", "noscript").is_displayed():
        raise AssertionError("<noscript> content is hidden: the browser believes scripting is on")


def layout_metrics(driver: Any) -> dict[str, float]:
    """Page and viewport sizes in CSS pixels, from DevTools (needs no page JavaScript)."""
    m = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    return {
        "content_width": m["cssContentSize"]["width"],
        "content_height": m["cssContentSize"]["height"],
        "layout_width": m["cssLayoutViewport"]["clientWidth"],
        "viewport_width": m["cssVisualViewport"]["clientWidth"],
        "viewport_height": m["cssVisualViewport"]["clientHeight"],
    }


def horizontal_overflow(driver: Any) -> float:
    """CSS pixels by which the page is wider than the window (0 = nothing sticks out).

    On a phone, content wider than the device makes the layout viewport grow past it;
    on a desktop, the document gets wider than the viewport and scrolls sideways.
    """
    size: WindowSize = driver.deaddrop_size
    m = layout_metrics(driver)
    return max(0.0, m["content_width"] - size.width, m["layout_width"] - size.width)


def screenshot(driver: Any, name: str) -> str:
    """Save the whole page (not just the viewport) as tests/screenshots/<name>-<size>.png."""
    size: WindowSize = driver.deaddrop_size
    os.makedirs(SCREENSHOT_DIR, exist_ok=True)
    m = layout_metrics(driver)
    clip = {"x": 0, "y": 0, "width": max(size.width, m["content_width"]),
            "height": max(size.height, m["content_height"]), "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot",
                                  {"format": "png", "captureBeyondViewport": True, "clip": clip})
    path = os.path.join(SCREENSHOT_DIR, f"{name}-{size.name}.png")
    # A temporary name of our own: another test run in the same checkout may be saving this page too.
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    os.replace(tmp, path)
    return path


def overflowing_elements(driver: Any, limit: int = 5) -> list[str]:
    """Elements whose right edge is past the window, for failure messages.

    WebDriver runs this through DevTools, which the page's JavaScript setting does not govern.
    """
    width = driver.deaddrop_size.width
    return driver.execute_script("""
        const out = [];
        for (const el of document.querySelectorAll('body *')) {
            const r = el.getBoundingClientRect();
            if (r.width && r.right > arguments[0] + 0.5) {
                out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
                         (el.className ? '.' + String(el.className).split(' ').join('.') : '') +
                         ' right=' + Math.round(r.right) + ' width=' + Math.round(r.width));
            }
        }
        return out.slice(0, arguments[1]);
    """, width, limit)


def _document_id(driver) -> str:
    """The loader id of the page's current document: a new one for every page that replaces it."""
    return driver.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["loaderId"]


def follow(driver, selector: str, timeout: float = 20) -> None:
    """Click the link or submit button ``selector`` and wait until the next page has replaced this one.

    The wait follows the document's loader id, not selenium's ``staleness_of``: when a click
    replaces the page, chromedriver 156 sometimes answers a command about an element of the old
    page -- or the click itself, once the next page is on its way -- with "unhandled inspector
    error: Node with given id does not belong to the document" instead of a stale-element error
    (seen in 5 of ~60 runs, under load).
    """
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    before = _document_id(driver)

    def replaced(_driver) -> bool:
        return _document_id(driver) != before and driver.execute_script("return document.readyState") == "complete"

    try:
        driver.find_element(By.CSS_SELECTOR, selector).click()
    except WebDriverException as e:
        if "does not belong to the document" not in (e.msg or ""):
            raise
        try:
            WebDriverWait(driver, 5).until(replaced)
            return  # the click did go through
        except TimeoutException:
            driver.find_element(By.CSS_SELECTOR, selector).click()  # it did not: the page is unchanged
    WebDriverWait(driver, timeout).until(replaced)
