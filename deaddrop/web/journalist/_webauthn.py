"""What the security key pages share: who the relying party is, the script and its CSP, and
reading the browser's answer.

The relying party is the host the browser asked for (the Host header) only when the server's
certificate names it (``cert server --host NAME``): WebAuthn needs a host name, never an IP
address, and a name the certificate does not carry would be somebody else's. The origin is that
name on the listener's own port, over https.
"""
from __future__ import annotations

import json
import secrets
from typing import Any, Iterable

from twisted.web.template import Tag, tags

from deaddrop.second_factor.security_keys import MAX_RESPONSE_CHARS, RelyingParty
from deaddrop.web._common.forms import form_arg
from deaddrop.web._common.headers import CSP
from deaddrop.web._common.static import hashed_url, integrity

SCRIPT = "webauthn.js"


def relying_party(request: Any, hosts: Iterable[str]) -> RelyingParty | None:
    host = (request.getRequestHostname() or b"").decode("ascii", "replace").lower().rstrip(".")
    if not host or host not in {h.lower() for h in hosts}:
        return None
    return RelyingParty.for_host(host, request.getHost().port)


def script_csp(nonce: str) -> str:
    """The strict policy, and one script: the one whose tag carries ``nonce``."""
    return CSP.replace("default-src 'none';", f"default-src 'none'; script-src 'nonce-{nonce}';", 1)


def allow_script(request: Any) -> Tag:
    """Let this response run the WebAuthn script (and nothing else): -> its tag for the page."""
    nonce = secrets.token_urlsafe(18)
    request.setHeader(b"Content-Security-Policy", script_csp(nonce).encode("ascii"))
    return tags.script(src=hashed_url(SCRIPT), nonce=nonce, integrity=integrity(SCRIPT), defer="")


def browser_answer(request: Any) -> Any:
    """The key's answer as the script sent it (JSON), or None."""
    raw = form_arg(request, "credential", MAX_RESPONSE_CHARS)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
