"""Routes written beside their functions, in the feature's own module, and added to an
interface's Klein app when the module's ``register`` is called::

    routes = Routes()

    @routes.route("/lookup", methods=["GET"])
    @login_required
    def lookup(self, request, login): ...

    def register(cls):
        routes.register(cls)

A route function takes the interface as ``self``, as a method would; its endpoint is its name.
"""
from __future__ import annotations

from typing import Any, Callable


class Routes:
    def __init__(self) -> None:
        self._routes: list[tuple[str, dict[str, Any], Callable[..., Any]]] = []

    def route(self, url: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            self._routes.append((url, kwargs, f))
            return f
        return add

    def register(self, cls: Any) -> None:
        """Add every route to ``cls.app`` (a Klein app that is a class attribute)."""
        for url, kwargs, f in self._routes:
            cls.app.route(url, **kwargs)(f)
