# -*- test-case-name: tests.integration.test_journalist_web -*-
"""Instance settings an admin can change while the server runs (journalist admin pages).

Start-up options give the defaults; values saved in the database's ``settings`` table win.
"""
from __future__ import annotations

from dataclasses import dataclass

from deaddrop.store import queries


@dataclass
class InstanceSettings:
    organisation_name: str
    max_upload_size: int
    allow_uploads: bool = True
    retention_days: int | None = None  # None: keep forever

    KEYS = ("organisation_name", "max_upload_size", "allow_uploads", "retention_days")

    def apply_stored(self, stored: dict[str, str]) -> "InstanceSettings":
        if "organisation_name" in stored:
            self.organisation_name = stored["organisation_name"]
        if "max_upload_size" in stored:
            self.max_upload_size = int(stored["max_upload_size"])
        if "allow_uploads" in stored:
            self.allow_uploads = stored["allow_uploads"] == "1"
        if "retention_days" in stored:
            self.retention_days = int(stored["retention_days"]) or None
        return self

    def as_stored(self) -> dict[str, str]:
        return {
            "organisation_name": self.organisation_name,
            "max_upload_size": str(self.max_upload_size),
            "allow_uploads": "1" if self.allow_uploads else "0",
            "retention_days": str(self.retention_days or 0),
        }

    def save(self, conn) -> None:  # runs on the database thread
        for key, value in self.as_stored().items():
            queries.set_setting(conn, key, value)
