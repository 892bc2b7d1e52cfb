"""The parts the guide leaves to people, played here: a source in a browser without JavaScript
(Tor Browser in the guide, here plain requests to 127.0.0.1), the photo they send, alice's
authenticator app and her personal OpenPGP key."""
from __future__ import annotations

import base64
import hashlib
import hmac
import html
import http.cookiejar
import io
import re
import secrets
import struct
import time
import urllib.parse
import urllib.request

# What the photo's EXIF says of whoever took it: none of it may reach the publication folder.
PHOTO_AUTHOR, PHOTO_CAMERA = "Jane Whistle", "EOS SecretModel"


class PlayFailed(Exception):
    pass


def photo_with_metadata() -> bytes:
    """A small JPEG whose EXIF names its author and camera and holds a GPS position."""
    try:
        from PIL import Image
    except ImportError:
        raise PlayFailed("the source's photo is made with Pillow: run install-check with the checkout's "
                         ".venv/bin/python (pip install -e '.[test]')") from None
    exif = Image.Exif()
    exif[0x013B], exif[0x0110], exif[0x010F] = PHOTO_AUTHOR, PHOTO_CAMERA, "CanonMakeX"  # Artist, Model, Make
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2] = "N", (52.0, 31.0, 12.0)
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 40)).save(buf, "JPEG", exif=exif)
    return buf.getvalue()


def photo_metadata(data: bytes) -> list[str]:
    """What of the photo's metadata ``data`` still carries (empty: none)."""
    from PIL import Image

    left = [word for word in (PHOTO_AUTHOR, PHOTO_CAMERA) if word.encode() in data]
    if dict(Image.open(io.BytesIO(data)).getexif()):
        left.append("EXIF")
    return left


def totp_now(secret: str, *, not_this: str | None = None) -> str:
    """The authenticator app's six digits (RFC 6238); a code already used waits for the next."""
    key = base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))
    while True:
        counter = int(time.time()) // 30
        digest = hmac.new(key, struct.pack(">Q", counter), hashlib.sha1).digest()
        offset = digest[-1] & 0x0F
        code = f"{(struct.unpack('>I', digest[offset:offset + 4])[0] & 0x7FFFFFFF) % 1_000_000:06d}"
        if code != not_this:
            return code
        time.sleep(30 - time.time() % 30 + 0.1)


def make_personal_key(machine, gnupg_home: str, address: str) -> None:
    """alice's own OpenPGP key, as she has it on her workstation (``machine``) before the guide asks
    her to export it."""
    machine.run(["sh", "-c", f"mkdir -p -m 700 {gnupg_home}"])
    machine.run(["gpg", "--homedir", gnupg_home, "--batch", "--quiet", "--passphrase", "", "--quick-gen-key",
                 f"alice <{address}>", "future-default", "default", "never"])


def wireguard_key() -> str:
    """A private key as ``wg genkey`` makes them (32 random bytes, base64), where wg is not installed."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


class SourceBrowser:
    """A source's browser without JavaScript: forms as the pages give them."""

    _HIDDEN = re.compile(r'<input[^>]*type="hidden"[^>]*>')

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=60) as r:
            return r.read().decode("utf-8", "replace")

    def post(self, path: str, data: bytes, content_type: str) -> str:
        request = urllib.request.Request(self.base + path, data=data, headers={"Content-Type": content_type})
        with self.opener.open(request, timeout=120) as r:
            return r.read().decode("utf-8", "replace")

    def hidden(self, page: str, action: str) -> list[tuple[str, str]]:
        form = re.search(rf'<form[^>]*action="{re.escape(action)}"[^>]*>(.*?)</form>', page, re.S)
        if not form:
            raise PlayFailed(f"no form for {action} on the page")
        fields = []
        for tag in self._HIDDEN.findall(form.group(1)):
            name, value = re.search(r'name="([^"]*)"', tag), re.search(r'value="([^"]*)"', tag)
            if name:
                fields.append((name.group(1), html.unescape(value.group(1)) if value else ""))
        return fields

    def form(self, path: str, fields: list[tuple[str, str]]) -> str:
        return self.post(path, urllib.parse.urlencode(fields).encode(), "application/x-www-form-urlencoded")

    def send(self, message: str, file_name: str, file_data: bytes) -> str:
        """Get a codename, then send ``message`` with one file attached; returns the codename."""
        page = self.get("/generate")
        codename = html.unescape(re.search(r'id="codename"[^>]*>([^<]+)<', page).group(1))
        fields = [(k, v) for k, v in self.hidden(page, "/create") if k != "codename"]
        self.form("/create", fields + [("codename", codename)])
        page = self.get("/lookup")
        boundary = secrets.token_hex(16)
        parts = self.hidden(page, "/submit") + [("msg", message)]
        body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                        for k, v in parts)
        body += (f'--{boundary}\r\nContent-Disposition: form-data; name="fh"; filename="{file_name}"\r\n'
                 f"Content-Type: image/jpeg\r\n\r\n").encode() + file_data + f"\r\n--{boundary}--\r\n".encode()
        self.post("/submit", body, f"multipart/form-data; boundary={boundary}")
        return codename

    def login(self, codename: str) -> str:
        """Log in with ``codename``; returns the page shown (the replies are on it)."""
        page = self.get("/login")
        fields = [(k, v) for k, v in self.hidden(page, "/login") if k != "codename"]
        return self.form("/login", fields + [("codename", codename)])
