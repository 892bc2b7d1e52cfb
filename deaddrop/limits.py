"""Sizes shared by the server and the offline tools. It imports nothing, so the SVS tool can read
the server's upload limit without the server's dependencies (PyNaCl, Twisted)."""

MiB = 1024 * 1024
# ``--max-upload-size``'s default (``Config.max_upload_size``): the SVS caps a file's plaintext at twice it.
MAX_UPLOAD_SIZE = 500 * MiB
