"""deaddrop.web._common.routes: feature files add their routes to an interface's Klein app."""
from __future__ import annotations

from typing import ClassVar

from klein import Klein
from twisted.trial import unittest

from deaddrop.web._common.routes import Routes


def _feature(module: str) -> Routes:
    """A feature file of ``module`` with a route named ``remove``."""
    routes = Routes()

    def remove(self, request):
        return b""
    remove.__module__ = module
    routes.route(f"/{module}/remove", methods=["POST"])(remove)
    return routes


class EndpointNameTests(unittest.TestCase):
    def test_two_features_with_a_route_of_one_name_are_refused(self):
        # Klein keys its routes by endpoint (the function's name): the second feature's `remove`
        # took over the first's URL too (a security key's removal ran the desk's).
        class Site:
            app: ClassVar[Klein] = Klein()

        _feature("keys").register(Site)
        error = self.assertRaises(ValueError, _feature("desks").register, Site)
        self.assertIn("two routes are named 'remove' (keys and desks)", str(error))

    def test_one_function_may_serve_two_urls(self):
        class Site:
            app: ClassVar[Klein] = Klein()

        routes = Routes()

        def page(self, request):
            return b""
        routes.route("/a")(page)
        routes.route("/b")(page)
        routes.register(Site)
        self.assertEqual(sorted(r.rule for r in Site.app.url_map.iter_rules()), ["/a", "/b"])
