"""Uploads still arriving, per source: a source the newsroom deletes has them ended at once."""
from __future__ import annotations

from deaddrop.web._common.upload import MultipartUpload, UploadError

# Why an upload was ended (UploadError.reason): the newsroom deleted its source while it arrived.
CLOSED = "closed"


class InFlight:
    """Uploads still arriving, per source id: a source the newsroom deletes has them ended."""

    def __init__(self) -> None:
        self._by_source: dict[int, set[MultipartUpload]] = {}

    def add(self, source_id: int, upload: MultipartUpload) -> None:
        self._by_source.setdefault(source_id, set()).add(upload)

    def discard(self, source_id: int, upload: MultipartUpload) -> None:
        uploads = self._by_source.get(source_id)
        if uploads is not None:
            uploads.discard(upload)
            if not uploads:
                del self._by_source[source_id]

    def close(self, source_id: int) -> None:
        """The source was deleted: uploads it started under a live session stop here. Their
        ciphertext is discarded and the page that answers says the conversation was closed (the
        typed message kept)."""
        for upload in list(self._by_source.get(source_id, ())):
            upload.cancel(UploadError(403, "The conversation was closed.", CLOSED))
