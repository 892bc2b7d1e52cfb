# -*- test-case-name: tests.integration.test_source_flow -*-
"""Who a source is to the server once logged in, and the two ways a source can be missing.

Shared by the source use cases (``Newsroom``) and their part that answers sources
(``replies``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceIdentity:
    source_id: int
    filesystem_id: str
    designation: str
    # The desks (ids) that read this source, as it chose them (issue 29); empty until it chose,
    # and on an instance with one desk before its first submission.
    desks: tuple[int, ...] = ()


class SourceNotFound(Exception):
    pass


class KeyNotReady(Exception):
    """The source's key pair does not exist yet and cannot be made without its codename."""
