"""Composition: the one place that builds the server from its parts.

``tree.py`` is the running server (``DeadDropService``) with its parts as typed attributes;
``build.py`` builds it from a ``Config``: the store, the keys and the domain, then each side
(``source_side.py``, ``journalist_side.py``), then Tor (``tor_side.py``) and the timers. ``deaddrop.tap`` (``twistd deaddrop``) calls ``build_service``.
"""
from deaddrop.service.build import build_service
from deaddrop.service.tree import DeadDropService

__all__ = ["DeadDropService", "build_service"]
