"""The layout's rules, checked on the import graph (read from the source, nothing imported):

- pure modules (spec, manifests, quota model, ...) import only other pure modules and the
  standard library;
- the notebook side never imports the hub side (`paddle_ext.hub`);
- the quota package imports neither the backends nor the hub;
- no cycle between the package's parts (each top-level module and each subpackage);
- no cycle between its modules.

The graph holds the imports that can run: at module level and inside functions (a lazy
import still loads its module, and one module loading another that loads it back is the
circle the layout forbids, whenever it happens). Imports under `if TYPE_CHECKING:` are left
out: they never run, and they are how a module names a type whose module it must not load.
The cycle checks also follow import strings such as the backend registry's
"paddle_ext.backends.local:LocalBackend" (loaded with importlib when asked for): a backend
that imported the registry back would close a circle at run time. The layering rules do
not: the registry's names are data to the modules that read them (the hub's settings read
the names without ever loading a backend).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "paddle_ext"
PURE = {
    "paddle_ext.lazy", "paddle_ext.constants", "paddle_ext.environment", "paddle_ext.grammars", "paddle_ext.quantity", "paddle_ext.timestamps", "paddle_ext.errors",
    "paddle_ext.spec", "paddle_ext.options", "paddle_ext.jobs", "paddle_ext.launch", "paddle_ext.manifests",
    "paddle_ext.jobkinds", "paddle_ext.restarts",
    "paddle_ext.tenancy", "paddle_ext.policies", "paddle_ext.quota.model", "paddle_ext.quota.queues",
    "paddle_ext.quota.queue_admin",
    "paddle_ext.backends.kubernetes_status",
    "paddle_ext.backends.kubernetes_progress", "paddle_ext.progress", "paddle_ext.metrics",
    "paddle_ext.loglines", "paddle_ext.reporting", "paddle_ext.capacity", "paddle_ext.hub.settings",
    "paddle_ext.hub.overview", "paddle_ext.backends.registry", "paddle_ext.backends.local_queue",
    "paddle_ext.backends.kubernetes_queue", "paddle_ext.hub.notebook_gpus",
}
# hub.settings is pure but for yaml (values files) and kubespawner's name escaping.
PURE_THIRD_PARTY = {"paddle_ext.hub.settings": {"yaml", "kubespawner"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` that can run: all but the bodies of `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


IMPORT_STRING = re.compile(r"(paddle_ext(?:\.\w+)*):\w+")


def imports(path: Path, strings: bool = False) -> set[str]:
    """Absolute names of everything `path` imports when it runs (relative imports resolved);
    with `strings`, also the modules its import strings name."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            # `from . import tenancy` loads the module tenancy; `from . import JobClient`, the package
            found.update(f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target
                         for alias in node.names)
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = IMPORT_STRING.fullmatch(node.value)
            if match:
                found.add(match.group(1))
    return found


GRAPH = {name: {i for i in imports(path) if i in MODULES} for name, path in MODULES.items()}
LOADS = {name: {i for i in imports(path, strings=True) if i in MODULES} for name, path in MODULES.items()}
THIRD_PARTY = {name: {i.split(".")[0] for i in imports(path) if not i.startswith("paddle_ext")}
               for name, path in MODULES.items()}


def part(module: str) -> str:
    """The unit of the layout a module belongs to: its subpackage, or itself at top level."""
    pieces = module.split(".")
    return ".".join(pieces[:2])


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_import_only_pure_modules_and_the_standard_library(module):
    assert module in MODULES, f"{module} is listed as pure but does not exist"
    impure = GRAPH[module] - PURE - {"paddle_ext", "paddle_ext.quota", "paddle_ext.hub", "paddle_ext.backends"}
    assert not impure, f"{module} imports {sorted(impure)}"
    outside = {m for m in THIRD_PARTY[module] if m not in sys.stdlib_module_names and m != "__future__"}
    assert outside <= PURE_THIRD_PARTY.get(module, set()), f"{module} imports {sorted(outside)}"


def test_the_notebook_side_never_imports_the_hub_side():
    offenders = {name: sorted(i for i in deps if i.startswith("paddle_ext.hub"))
                 for name, deps in GRAPH.items() if not name.startswith("paddle_ext.hub")}
    assert not {k: v for k, v in offenders.items() if v}


def test_quota_imports_neither_backends_nor_hub():
    for name, deps in GRAPH.items():
        if name.startswith("paddle_ext.quota"):
            assert not [d for d in deps if d.startswith(("paddle_ext.backends", "paddle_ext.hub"))], name


def first_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle in the graph (its nodes, the first repeated at the end), or None."""
    visiting, done = [], set()

    def visit(node):
        if node in done:
            return None
        if node in visiting:
            return visiting[visiting.index(node):] + [node]
        visiting.append(node)
        for dep in sorted(edges.get(node, ())):
            cycle = visit(dep)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(edges):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def test_no_cycle_between_the_parts_of_the_package():
    edges: dict[str, set[str]] = {}
    for name, deps in LOADS.items():
        edges.setdefault(part(name), set()).update(part(d) for d in deps if part(d) != part(name))
    edges.pop("paddle_ext", None)  # __init__ re-exports the public API; nothing imports it back
    for deps in edges.values():
        deps.discard("paddle_ext")
    cycle = first_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_cycle_between_modules():
    cycle = first_cycle({name: deps - {name} for name, deps in LOADS.items()})
    assert cycle is None, "import cycle between modules: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_circle_of_lazy_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert first_cycle(graph) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b"}, "b": set()}) is None
