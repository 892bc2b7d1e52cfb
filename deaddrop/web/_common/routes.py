"""Routes written beside their functions, in the feature's own module, and added to an
interface's Klein app when the module's ``register`` is called::

    routes = Routes()

    @routes.route("/lookup", methods=["GET"])
    @login_required
    def lookup(self, request, login): ...

    def register(cls):
        routes.register(cls)

A route function takes the interface as ``self``, as a method would, typed as what the
interface states a feature may use of it (a Protocol: ``SourceSite``, ``JournalistSite``,
``ApiSite``); its endpoint is its name.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Protocol

from klein import Klein


class Routed(Protocol):
    """An interface class whose Klein app is a class attribute."""

    app: ClassVar[Klein]


class Routes:
    def __init__(self) -> None:
        self._routes: list[tuple[str, dict[str, Any], Callable[..., Any]]] = []

    def route(self, url: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            self._routes.append((url, kwargs, f))
            return f
        return add

    def register(self, cls: type[Routed]) -> None:
        """Add every route to ``cls.app`` (a Klein app that is a class attribute). Two different
        functions with one endpoint name (two feature files each with a ``remove``) are refused:
        Klein would quietly send both URLs to whichever came last."""
        owners = _ENDPOINT_OWNERS.setdefault(id(cls.app), {})
        for url, kwargs, f in self._routes:
            endpoint = kwargs.get("endpoint", f.__name__)
            if owners.setdefault(endpoint, f) is not f:
                raise ValueError(f"two routes are named {endpoint!r} ({owners[endpoint].__module__} and "
                                 f"{f.__module__}): give one another name")
            cls.app.route(url, **kwargs)(f)


# Per Klein app (a class attribute, alive as long as the process): endpoint name -> its function.
_ENDPOINT_OWNERS: dict[int, dict[str, Callable[..., Any]]] = {}
