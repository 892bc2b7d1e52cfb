"""The code's shape: imports point one way, and routes are guarded in one place."""
from __future__ import annotations

import ast
import os

from twisted.trial import unittest

import deaddrop

_ROOT = os.path.dirname(deaddrop.__file__)


def _import_graph() -> dict[str, set[str]]:
    """Module -> deaddrop modules it imports, at any depth (function-level imports count too)."""
    modules = {}
    for folder, _dirs, files in os.walk(_ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = "deaddrop" + path[len(_ROOT):-3].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = path
    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("deaddrop"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("deaddrop")}
        graph[module] = {m for m in found if m in modules and m != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


class ImportTests(unittest.TestCase):
    def test_no_import_circles(self):
        self.assertEqual(_cycles(_import_graph()), [])

    def test_the_cycle_finder_finds_cycles(self):
        self.assertEqual(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}), [{"a", "b", "c"}])

    def test_the_circles_the_issue_names_are_gone(self):
        graph = _import_graph()
        self.assertNotIn("deaddrop.server", graph["deaddrop.web.journalist.wiring"])
        for module, imports in graph.items():
            if module.startswith("deaddrop.admin._") and module.endswith("_commands"):
                self.assertNotIn("deaddrop.admin.cli", imports, module)

    def test_web_code_does_not_import_across_interfaces(self):
        graph = _import_graph()
        for module, imports in graph.items():
            if module.startswith("deaddrop.web.journalist"):
                self.assertFalse({m for m in imports if m.startswith("deaddrop.web.source")}, module)


class RouteGuardTests(unittest.TestCase):
    """Every route that needs a login says so with a guard decorator, not with code in its body."""

    @staticmethod
    def _unguarded(cls, public: set[str]) -> set[str]:
        """Route endpoints without a guard, other than the ``public`` ones."""
        return {name for name, executor in cls.app.endpoints.items()
                if getattr(executor, "guard", None) is None and name not in public}

    def test_journalist_routes(self):
        from deaddrop.web.journalist.app import JournalistInterface

        # save_source_logo checks its login itself: the CSRF token is in the streamed multipart body.
        self.assertEqual(self._unguarded(JournalistInterface, {"index", "login_form", "login", "logout", "api_branch", "api_branch_branch", "robots", "static", "save_source_logo"}), set())

    def test_journalist_api_routes(self):
        from deaddrop.web.journalist.api import JournalistAPI

        self.assertEqual(self._unguarded(JournalistAPI, {"root", "token"}), set())

    def test_source_routes(self):
        from deaddrop.web.source.app import SourceInterface

        # /submit checks its login itself: the CSRF token is in the streamed multipart body.
        # carry_language (the menu posting a page's form) is public like choose_language: it
        # keeps a logged-in source's message only when the request has its live login.
        public = {"index", "generate", "create", "login_form", "login", "logout", "submit", "robots", "metadata",
                  "public_key", "static", "safety", "choose_language", "carry_language", "logo", "favicon"}
        self.assertEqual(self._unguarded(SourceInterface, public), set())
