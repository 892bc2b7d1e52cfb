"""Is this Tor Browser? Decided from the User-Agent alone, without JavaScript.

Tor Browser sends the User-Agent of the Firefox ESR it is built on, the same for every user of
a platform: ``Mozilla/5.0 (<platform>; rv:N.0) Gecko/20100101 Firefox/N.0`` on desktops and
``Mozilla/5.0 (Android 10; Mobile; rv:N.0) Gecko/N.0 Firefox/N.0`` on Android. Anything else
(Chrome, Safari, Edge, a Firefox with extra tokens) is certainly not Tor Browser. A plain
Firefox passes this check: the banner is a nudge, not a gate, and a User-Agent can lie anyway.
"""
from __future__ import annotations

import re

_DESKTOP = re.compile(
    r"Mozilla/5\.0 \((?:Windows NT 10\.0(?:; Win64; x64)?|X11; Linux x86_64|Macintosh; Intel Mac OS X 10\.15)"
    r"; rv:\d{2,3}\.0\) Gecko/20100101 Firefox/\d{2,3}\.0"
)
_ANDROID = re.compile(r"Mozilla/5\.0 \(Android 10; Mobile; rv:(\d{2,3})\.0\) Gecko/\1\.0 Firefox/\1\.0")
_MAX_CHARS = 200  # longer than any Tor Browser User-Agent


def is_tor_browser(user_agent: str | bytes | None) -> bool:
    if isinstance(user_agent, bytes):
        user_agent = user_agent.decode("latin-1")
    if not user_agent or len(user_agent) > _MAX_CHARS:
        return False
    return bool(_DESKTOP.fullmatch(user_agent) or _ANDROID.fullmatch(user_agent))
