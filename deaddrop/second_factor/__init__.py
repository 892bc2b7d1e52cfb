"""A journalist account's second factor, chosen per account (issue 30).

* ``hotp``: YubiKeys in HOTP mode (RFC 4226), as SecureDrop offers them.
* ``codes``: checking a typed one-time code, TOTP or HOTP, each accepted once.
* ``security_keys``: WebAuthn security keys (python-fido2 on the server, the browser's own API).
* ``policy``: whether an account must use security keys (``deaddrop-admin settings``).
* ``recovery_codes``, ``api_codes``: printed recovery codes, and one-time codes for the API of
  an account with keys.

Nothing here imports the web layer; the journalist interface and the admin CLI call it.
"""
