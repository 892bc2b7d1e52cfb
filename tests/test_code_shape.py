"""The code's shape: imports point one way, and routes are guarded in one place."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

from twisted.trial import unittest

import deaddrop

_ROOT = os.path.dirname(deaddrop.__file__)


def _package_modules() -> dict[str, str]:
    """Dotted name -> path of every module of the package (a package by its own name)."""
    modules = {}
    for folder, _dirs, files in os.walk(_ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = "deaddrop" + path[len(_ROOT):-3].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = path
    return modules


def _import_graph() -> dict[str, set[str]]:
    """Module -> deaddrop modules it imports, at any depth (function-level imports count too)."""
    modules = _package_modules()
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


# The composition: it builds the service from the domain and the web layer, so it alone may import both.
_COMPOSITION = ("deaddrop.service", "deaddrop.tap")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _domain_into_web(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of ``deaddrop.web`` from below it: anything but the web layer and the composition."""
    return {(m, i) for m, imports in graph.items() for i in imports
            if _within(i, "deaddrop.web") and not _within(m, "deaddrop.web")
            and not any(_within(m, c) for c in _COMPOSITION)}


def _across_interfaces(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of the source interface's code from the journalist interface's."""
    return {(m, i) for m, imports in graph.items() if _within(m, "deaddrop.web.journalist")
            for i in imports if _within(i, "deaddrop.web.source")}


# The domain: what the newsroom does, who may start costly work, the digest it mails and the
# journalists' second factors. It is given what it needs when the composition builds it, so it
# never reaches up for it.
_DOMAIN = ("deaddrop.newsroom", "deaddrop.admission", "deaddrop.digest", "deaddrop.second_factor")
_ABOVE_THE_DOMAIN = ("deaddrop.web", "deaddrop.service", "deaddrop.admin", "deaddrop.config", "deaddrop.tap")


def _domain_reaching_up(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports, from the domain, of the web layer, the composition, the admin tool or the options."""
    return {(m, i) for m, imports in graph.items() if any(_within(m, d) for d in _DOMAIN)
            for i in imports if any(_within(i, a) for a in _ABOVE_THE_DOMAIN)}


def _into_admin(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of the admin command line (an offline tool) from anything else, the server included."""
    return {(m, i) for m, imports in graph.items() for i in imports
            if _within(i, "deaddrop.admin") and not _within(m, "deaddrop.admin")}


def _private_across_packages(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of a ``_name`` module (or package) from outside the package that holds it."""
    found = set()
    for m, imports in graph.items():
        for i in imports:
            parts = i.split(".")
            private = next((k for k, part in enumerate(parts) if k and part.startswith("_")), None)
            if private is not None and not _within(m, ".".join(parts[:private])):
                found.add((m, i))
    return found


def _svs_beyond_itself(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The offline SVS tool imports only itself and ``deaddrop.limits`` (which imports nothing)."""
    return {(m, i) for m, imports in graph.items() if _within(m, "deaddrop.svs") for i in imports
            if not _within(i, "deaddrop.svs") and i != "deaddrop.limits"}


def _web_into_service(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of the composition from the web layer: it is built by it, never the other way."""
    return {(m, i) for m, imports in graph.items() for i in imports
            if _within(m, "deaddrop.web") and _within(i, "deaddrop.service")}


# Where the service may be built: the composition, twistd's plugin and option module, the .tac.
_BUILDERS = ("deaddrop.service", "deaddrop.tap", "deaddrop.tac", "twisted.plugins")


def _service_builders(sources: dict[str, str]) -> set[str]:
    """Modules, outside ``_BUILDERS``, that import ``deaddrop.service`` or build the service
    (``build_service(...)``, ``DeadDropService(...)``)."""
    found = set()
    for module, text in sources.items():
        if any(_within(module, b) for b in _BUILDERS):
            continue
        for node in ast.walk(ast.parse(text)):
            imported = ([node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                        if isinstance(node, ast.ImportFrom) and node.level == 0
                        else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            called = node.func if isinstance(node, ast.Call) else None
            name = getattr(called, "id", None) or getattr(called, "attr", None)
            if any(_within(i, "deaddrop.service") for i in imported) or name in ("build_service", "DeadDropService"):
                found.add(module)
    return found


def _server_sources() -> dict[str, str]:
    """Module -> source of every module of the package, ``deaddrop.tac`` and twistd's plugin."""
    repo = os.path.dirname(_ROOT)
    paths = dict(_package_modules(), **{"deaddrop.tac": os.path.join(repo, "deaddrop.tac")})
    plugins = os.path.join(repo, "twisted", "plugins")
    for name in os.listdir(plugins):
        if name.endswith(".py"):
            paths["twisted.plugins." + name[:-3]] = os.path.join(plugins, name)
    sources = {}
    for module, path in paths.items():
        with open(path, encoding="utf-8") as f:
            sources[module] = f.read()
    return sources


class ImportTests(unittest.TestCase):
    def test_no_import_circles(self):
        self.assertEqual(_cycles(_import_graph()), [])

    def test_the_cycle_finder_finds_cycles(self):
        self.assertEqual(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}), [{"a", "b", "c"}])

    def test_the_circles_the_issue_names_are_gone(self):
        graph = _import_graph()
        self.assertNotIn("deaddrop.web.journalist.wiring", graph)  # composition: deaddrop.service.journalist_side
        for module, imports in graph.items():
            if module.startswith("deaddrop.admin._") and module.endswith("_commands"):
                self.assertNotIn("deaddrop.admin.cli", imports, module)

    def test_the_domain_does_not_import_the_web_layer(self):
        self.assertEqual(_domain_into_web(_import_graph()), set())
        self.assertEqual(_domain_into_web({"deaddrop.newsroom.newsroom": {"deaddrop.web._common.site"},
                                           "deaddrop.service.build": {"deaddrop.web.sessions"},
                                           "deaddrop.web.source.app": {"deaddrop.web.sessions"}}),
                         {("deaddrop.newsroom.newsroom", "deaddrop.web._common.site")})

    def test_the_domain_imports_neither_web_service_admin_nor_config(self):
        graph = _import_graph()
        for package in _DOMAIN:
            self.assertIn(package, graph)
        self.assertEqual(_domain_reaching_up(graph), set())
        self.assertEqual(_domain_reaching_up({
            "deaddrop.newsroom.newsroom": {"deaddrop.config", "deaddrop.store.db"},
            "deaddrop.newsroom.desk": {"deaddrop.web.sessions"},
            "deaddrop.admission.queues": {"deaddrop.service.tree"},
            "deaddrop.digest.schedule": {"deaddrop.admin.cli", "deaddrop.crypto.gpg"},
            "deaddrop.service.build": {"deaddrop.config", "deaddrop.newsroom.newsroom"},
            "deaddrop.newsroomish": {"deaddrop.config"},
        }), {("deaddrop.newsroom.newsroom", "deaddrop.config"), ("deaddrop.newsroom.desk", "deaddrop.web.sessions"),
             ("deaddrop.admission.queues", "deaddrop.service.tree"), ("deaddrop.digest.schedule", "deaddrop.admin.cli")})

    def test_the_web_layer_does_not_import_the_composition(self):
        example = {"deaddrop.web.journalist.wiring": {"deaddrop.service.tree"}, "deaddrop.tap": {"deaddrop.service"},
                   "deaddrop.service.source_side": {"deaddrop.web.source.app"}}
        self.assertEqual(_web_into_service(example), {("deaddrop.web.journalist.wiring", "deaddrop.service.tree")})
        self.assertEqual(_web_into_service(_import_graph()), set())

    def test_only_the_composition_and_twistd_s_entry_points_build_the_service(self):
        sources = _server_sources()
        self.assertIn("deaddrop.tac", sources)
        self.assertIn("twisted.plugins.deaddrop_plugin", sources)
        self.assertEqual(_service_builders(sources), set())
        self.assertEqual(_service_builders({
            "deaddrop.web.journalist.wiring": "def add(top): pass\nfrom deaddrop.service.tree import DeadDropService\n",
            "deaddrop.newsroom.retention": "import deaddrop.service\n",
            "deaddrop.admin.cli": "from deaddrop import service\nservice.build_service(config)\n",
            "deaddrop.digest.schedule": "from deaddrop import service\n",
            "deaddrop.tor": "def f(config):\n    return DeadDropService(config, None)\n",
            "deaddrop.service.build": "def build_service(config):\n    return DeadDropService(config, None)\n",
            "deaddrop.tap": "from deaddrop.service import build_service\nbuild_service(config)\n",
            "deaddrop.tac": "makeService(options)\n",
        }), {"deaddrop.web.journalist.wiring", "deaddrop.newsroom.retention", "deaddrop.admin.cli", "deaddrop.digest.schedule",
             "deaddrop.tor"})

    def test_nothing_but_the_admin_cli_imports_it(self):
        self.assertEqual(_into_admin(_import_graph()), set())
        self.assertEqual(_into_admin({"deaddrop.service.journalist_side": {"deaddrop.transport.ca"},
                                      "deaddrop.service.build": {"deaddrop.admin.backup"},
                                      "deaddrop.admin.cli": {"deaddrop.admin._output", "deaddrop.transport.ca"}}),
                         {("deaddrop.service.build", "deaddrop.admin.backup")})

    def test_private_modules_are_used_within_their_package(self):
        self.assertEqual(_private_across_packages(_import_graph()), set())
        self.assertEqual(_private_across_packages({
            "deaddrop.admin.backup": {"deaddrop.store._atomic", "deaddrop.digest.smtp"},
            "deaddrop.store.files": {"deaddrop.store._atomic"},
            "deaddrop.web.source.app": {"deaddrop.web._common.site"},
            "deaddrop.service.build": {"deaddrop.web._common.circuits"},
        }), {("deaddrop.admin.backup", "deaddrop.store._atomic"), ("deaddrop.service.build", "deaddrop.web._common.circuits")})

    def test_the_svs_tool_imports_only_itself_and_the_dependency_free_limits(self):
        graph = _import_graph()
        self.assertEqual(_svs_beyond_itself(graph), set())
        self.assertEqual(graph["deaddrop.limits"], set())
        self.assertEqual(_svs_beyond_itself({"deaddrop.svs._limit": {"deaddrop.config", "deaddrop.limits"}}),
                         {("deaddrop.svs._limit", "deaddrop.config")})
        with open(os.path.join(_ROOT, "limits.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        self.assertFalse([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))])

    def test_the_svs_tool_loads_neither_pynacl_nor_twisted(self):
        loaded = subprocess.run(
            [sys.executable, "-c", "import sys, deaddrop.svs.cli, deaddrop.svs.decrypt, deaddrop.svs.export, "
             "deaddrop.svs.scrub; print('\\n'.join(sys.modules))"],
            capture_output=True, text=True, check=True).stdout.split()
        self.assertIn("deaddrop.svs.cli", loaded)
        self.assertEqual([m for m in loaded if m.split(".")[0] in ("nacl", "twisted") or m == "deaddrop.config"], [])

    def test_web_code_does_not_import_across_interfaces(self):
        self.assertEqual(_across_interfaces(_import_graph()), set())
        self.assertEqual(_across_interfaces({"deaddrop.web.journalist.app": {"deaddrop.web.source.i18n"},
                                             "deaddrop.web.source.app": {"deaddrop.web._common.site"}}),
                         {("deaddrop.web.journalist.app", "deaddrop.web.source.i18n")})


def _own_durable_writers(sources: dict[str, str]) -> set[str]:
    """Functions that fsync and rename (or link) a file themselves instead of using ``deaddrop.durable``."""
    found = set()
    for module, text in sources.items():
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = {f"{c.func.value.id}.{c.func.attr}" for c in ast.walk(fn) if isinstance(c, ast.Call)
                         and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)}
                if "os.fsync" in calls and calls & {"os.replace", "os.rename", "os.link"}:
                    found.add(f"{module}.{fn.name}")
    return found


class DurableWriteTests(unittest.TestCase):
    def test_one_module_writes_crash_safely(self):
        sources = {}
        for folder, _dirs, files in os.walk(_ROOT):
            for name in files:
                path = os.path.join(folder, name)
                module = "deaddrop" + path[len(_ROOT):-3].replace(os.sep, ".")
                # The offline SVS tool imports nothing of the server's (see above): its own writer.
                if name.endswith(".py") and not module.startswith(("deaddrop.durable", "deaddrop.svs.")):
                    with open(path, encoding="utf-8") as f:
                        sources[module] = f.read()
        self.assertEqual(_own_durable_writers(sources), set())
        self.assertEqual(_own_durable_writers({"m": "import os\ndef w(p):\n    os.fsync(1)\n    os.replace(p, p)\n"}),
                         {"m.w"})


def _crl_readers(sources: dict[str, str]) -> set[str]:
    """Paths whose code parses a CRL or keeps its own expiry warning."""
    return {path for path, text in sources.items()
            if "load_pem_x509_crl" in text or "load_der_x509_crl" in text or "CRL_WARNING_DAYS" in text}


class CertificateFactsTests(unittest.TestCase):
    def test_one_module_reads_crls(self):
        # The server's listener and ``deaddrop-admin status`` once parsed CRLs apart (PEM told by a
        # different test) and warned of their expiry with constants of their own.
        self.assertEqual(_crl_readers(_sources_under("")), {"deaddrop/transport/certificates.py"})
        self.assertEqual(_crl_readers({"a.py": "x509.load_pem_x509_crl(data)", "b.py": "CRL_WARNING_DAYS = 7",
                                       "c.py": "from deaddrop.transport.certificates import load_crl"}),
                         {"a.py", "b.py"})


def _storing_steps(sources: dict[str, str]) -> set[str]:
    """Where code calls a step of storing a submission (encrypting its message, committing it)
    rather than the one use case that sequences them, ``Submissions.submit``."""
    return {f"{path}:{node.lineno}" for path, text in sources.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("encrypt_message", "commit", "commit_submission")}


class UseCaseTests(unittest.TestCase):
    def test_the_web_layer_asks_the_newsroom_to_submit_and_sequences_no_step_itself(self):
        # Issue 28, item 3: /submit encrypted the message, committed and discarded in 7 branches
        # of its own; a branch that forgot to discard left ciphertext in DATA/tmp.
        self.assertEqual(_storing_steps(_sources_under("web")), set())
        self.assertEqual(_storing_steps({
            "a.py": "part = yield self.newsroom.encrypt_message(identity, text)\n",
            "b.py": "yield newsroom.submissions.commit(identity, parts)\n",
            "c.py": "stored = yield self.newsroom.submissions.submit(identity, text, files)\n",
        }), {"a.py:1", "b.py:1"})


def _sources_under(package: str) -> dict[str, str]:
    """Path (relative to the checkout) -> text of every module under ``deaddrop/<package>``."""
    found = {}
    for folder, _dirs, files in os.walk(os.path.join(_ROOT, package)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    found[os.path.relpath(path, os.path.dirname(_ROOT))] = f.read()
    return found


def _defines_routes(text: str) -> bool:
    """A function decorated with ``app.route(...)``, ``routes.route(...)`` or ``token_route(...)``."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else None
                if (getattr(f, "attr", None) or getattr(f, "id", None) or "").endswith("route"):
                    return True
    return False


def _long_route_files(sources: dict[str, str], most: int) -> set[str]:
    return {path for path, text in sources.items() if _defines_routes(text) and text.count("\n") > most}


def _long_classes(sources: dict[str, str], most: int) -> set[str]:
    return {f"{path}:{node.name}" for path, text in sources.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > most}


class RoomSizeTests(unittest.TestCase):
    """Each feature in a room small enough to read in one sitting: no file of routes over 300
    lines, no class over 400, and no exemption by name.
    """

    def test_no_route_file_over_300_lines(self):
        web = _sources_under("web")
        self.assertIn("deaddrop/web/journalist/api/replies.py", {p for p, t in web.items() if _defines_routes(t)})
        self.assertEqual(_long_route_files(web, 300), set())
        self.assertEqual(_long_route_files({"a.py": "@app.route('/')\ndef f(self, request): pass\n" + "\n" * 300,
                                            "b.py": "@token_route(routes, '/', 'GET')\ndef f(self): pass\n",
                                            "c.py": "def f(): pass\n" + "\n" * 300}, 300), {"a.py"})

    def test_no_class_over_400_lines(self):
        self.assertEqual(_long_classes(_sources_under(""), 400), set())
        self.assertEqual(_long_classes({"m.py": "class A:\n" + "    x = 1\n" * 400 + "class B:\n    y = 2\n"}, 400),
                         {"m.py:A"})


def _reaching_in(sources: dict[str, str]) -> set[str]:
    """Assignments to an attribute of another object's part (``queues.argon2id.standing = f``,
    ``self.queues.argon2id.calibrate = f``): a part gets what it needs when it is built.
    ``top.newsroom = n`` and ``self.admission.running += 1`` (a part's own helper) are not."""
    found = set()
    for module, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    chain = []
                    while isinstance(t, ast.Attribute):
                        chain.append(t.attr)
                        t = t.value
                    steps = len(chain) - (isinstance(t, ast.Name) and t.id == "self")
                    if steps >= 2:
                        found.add(f"{module}:{node.lineno}")
    return found


def _without_their_tests(sources: dict[str, str], tests_root: str) -> set[str]:
    """Modules (other than package faces) whose first lines name no test module, or name one
    that ``tests_root``'s parent does not hold: the ``# -*- test-case-name: tests.test_x -*-``
    line that trial reads (``trial --testmodule deaddrop/newsroom/desk.py`` runs them)."""
    from twisted.scripts.trial import _parseLocalVariables

    found = set()
    for path, text in sources.items():
        if path.endswith("__init__.py"):
            continue
        names = []
        for line in text.splitlines()[:2]:
            try:
                names = _parseLocalVariables(line).get("test-case-name", "").split(",")
                break
            except ValueError:
                pass
        where = [os.path.join(os.path.dirname(tests_root), *n.strip().split(".")) + ".py" for n in names if n.strip()]
        if not where or not all(os.path.isfile(w) for w in where):
            found.add(path)
    return found


class ServiceTreeTests(unittest.TestCase):
    def test_neither_the_composition_nor_the_domain_patches_a_part_after_building_it(self):
        sources = {}
        for package in ("service",) + tuple(d.split(".")[1] for d in _DOMAIN):
            sources.update(_sources_under(package))
        self.assertIn("deaddrop/service/source_side.py", sources)
        self.assertEqual(_reaching_in(sources), set())
        self.assertEqual(_reaching_in({
            "a.py": "queues = build()\nqueues.argon2id.standing = queues.untagged.standing = f\n",
            "b.py": "class N:\n    def __post_init__(self):\n        self.queues.argon2id.calibrate = self.run\n",
            "c.py": "top.newsroom = n\nsweeper.clock = reactor\nself.admission.running += 1\nself.replies = R()\n",
        }), {"a.py:2", "b.py:3"})

    def test_the_newsroom_holds_its_replies_part_rather_than_inheriting_it(self):
        from deaddrop.newsroom.newsroom import Newsroom
        from deaddrop.newsroom.replies import SourceReplies

        self.assertNotIn(SourceReplies, Newsroom.__mro__)
        self.assertEqual(Newsroom.__dataclass_fields__["replies"].type, "SourceReplies")

    def test_the_service_parts_are_typed_attributes_not_looked_up(self):
        from deaddrop.service.tree import DeadDropService

        # Every part build_service or a side's wiring sets on the tree is declared on the class.
        declared = set(DeadDropService.__annotations__)
        set_on_top = set()
        looked_up = []
        for folder in ("service",):
            for name in os.listdir(os.path.join(_ROOT, folder)):
                if name.endswith(".py"):
                    with open(os.path.join(_ROOT, folder, name), encoding="utf-8") as f:
                        tree = ast.parse(f.read())
                    for node in ast.walk(tree):
                        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                                and isinstance(node.value, ast.Name) and node.value.id == "top":
                            set_on_top.add(node.attr)
                        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" \
                                and isinstance(node.args[0], ast.Name) and node.args[0].id in ("top", "self") \
                                and folder == "service":
                            looked_up.append((name, node.lineno))
        self.assertIn("newsroom", set_on_top)
        self.assertEqual(set_on_top - declared, set())
        self.assertEqual(looked_up, [])


class TestBesideEachModuleTests(unittest.TestCase):
    """From a domain module to its tests in one step: its first line names them."""

    def test_every_domain_module_names_its_tests(self):
        tests_root = os.path.dirname(os.path.abspath(__file__))
        sources = {}
        for package in (d.split(".")[1] for d in _DOMAIN):
            sources.update(_sources_under(package))
        self.assertIn("deaddrop/newsroom/desk.py", sources)
        self.assertEqual(_without_their_tests(sources, tests_root), set())
        self.assertEqual(_without_their_tests({
            "a.py": "# -*- test-case-name: tests.test_code_shape -*-\n",
            "b.py": '"""No line."""\n',
            "c.py": "# -*- test-case-name: tests.test_code_shape,tests.test_nothing_here -*-\n",
            "d/__init__.py": '"""A package face."""\n',
        }, tests_root), {"b.py", "c.py"})


class PackagingTests(unittest.TestCase):
    def test_every_package_is_installed(self):
        # A package missing from setup.cfg works in the checkout and fails in an installed copy.
        import configparser

        setup = configparser.ConfigParser()
        setup.read(os.path.join(os.path.dirname(_ROOT), "setup.cfg"))
        listed = set(setup["options"]["packages"].split())
        packages = {"deaddrop" + folder[len(_ROOT):].replace(os.sep, ".") for folder, _dirs, files in os.walk(_ROOT)
                    if "__init__.py" in files}
        self.assertIn("deaddrop.transport", packages)
        self.assertEqual(packages - listed, set())


def _selves(sources: dict[str, str]) -> dict[str, str]:
    """``path:function`` -> how its ``self`` is annotated ("" if it is not), for every function
    outside a class that takes the interface as ``self``: route functions and their helpers."""
    found = {}
    for path, text in sources.items():
        tree = ast.parse(text)
        in_classes = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in ast.walk(c)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in in_classes \
                    and node.args.args and node.args.args[0].arg == "self":
                annotation = node.args.args[0].annotation
                found[f"{path}:{node.name}"] = ast.unparse(annotation) if annotation is not None else ""
    return found


def _selves_not_typed(sources: dict[str, str]) -> set[str]:
    """Route functions and helpers whose ``self`` is unannotated or ``Any``: a reader (or mypy)
    loses the trail there, where the interface's Protocol says what they may use."""
    return {f for f, annotation in _selves(sources).items() if annotation in ("", "Any", "typing.Any")}


class TypedRoomsTests(unittest.TestCase):
    """Route functions take their interface as the Protocol it states (SourceSite, JournalistSite,
    ApiSite), not ``Any``."""

    def test_no_route_function_takes_self_as_any(self):
        selves = _selves(_sources_under("web"))
        self.assertEqual(selves["deaddrop/web/source/submit.py:submit"], "SourceSite")
        self.assertEqual(selves["deaddrop/web/journalist/sources.py:source"], "JournalistSite")
        self.assertEqual(selves["deaddrop/web/journalist/api/sources.py:sources"], "ApiSite")
        self.assertEqual(_selves_not_typed(_sources_under("web")), set())
        self.assertEqual(_selves_not_typed({
            "a.py": "from typing import Any\n@routes.route('/')\ndef f(self: Any, request): pass\n",
            "b.py": "@login_route(routes, '/x', 'GET')\ndef g(self, request, login):\n    yield None\n",
            "c.py": "def h(self: SourceSite, request): pass\nclass C:\n    def m(self): pass\n",
        }), {"a.py:f", "b.py:g"})


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
        self.assertEqual(self._unguarded(JournalistInterface, {"index", "login_form", "login", "login_key_form", "login_key", "login_recovery", "logout", "api_branch", "api_branch_branch", "robots", "static", "save_source_logo"}), set())

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
