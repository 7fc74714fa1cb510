"""No import cycle anywhere in the package: every ``import`` and ``from ...
import`` of every module (at its top, in a function, under ``TYPE_CHECKING``)
and every ``importlib.import_module`` is an edge, and the graph has none.

A literal module name given to ``import_module`` is an edge; a computed one
must be declared in :data:`DYNAMIC`, with the modules it can name read from
the data that names them, so a new dynamic import fails here until it is.
A parent package loading before its child is Python's order, not an edge.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from collections.abc import Callable
from pathlib import Path

import vaelii_llm
from vaelii_llm import _backends
from vaelii_llm.kb import _ops

PACKAGE = Path(vaelii_llm.__file__).parent


def _backend_modules() -> frozenset[str]:
    return frozenset(backend.module for backend in _backends.BUILTIN)


DYNAMIC: dict[str, Callable[[], frozenset[str]]] = {
    # the lazy submodules of `import vaelii_llm`
    "vaelii_llm": lambda: frozenset(f"vaelii_llm.{name}" for name in vaelii_llm._LAZY),
    # a chosen kind's module, named by its backend record
    "vaelii_llm.providers": _backend_modules,
    "vaelii_llm.pool": _backend_modules,
    "vaelii_llm._backends": _backend_modules,
    # the modules that declare the engine's ops
    "vaelii_llm.kb._ops": lambda: frozenset(_ops.OP_MODULES),
}
"""Each module importing a computed name, and the modules that name can be."""


def modules() -> dict[str, Path]:
    found = {"vaelii_llm": PACKAGE / "__init__.py"}
    for info in pkgutil.walk_packages(vaelii_llm.__path__, "vaelii_llm."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None
        assert spec.origin is not None
        found[info.name] = Path(spec.origin)
    return found


IMPORTERS = ("import_module",)
"""``importlib.import_module``."""


def _is_import_module(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in IMPORTERS) or (
        isinstance(func, ast.Name) and func.id in IMPORTERS
    )


def edges(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], bool]:
    """The package modules ``name`` imports, and whether it imports a computed name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    computed = False
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
        elif isinstance(node, ast.Call) and _is_import_module(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
            else:
                computed = True
    return {m for m in found if m in known and m != name}, computed


def graph() -> dict[str, set[str]]:
    known = modules()
    out: dict[str, set[str]] = {}
    undeclared = []
    for name, path in known.items():
        out[name], computed = edges(name, path, known)
        if computed and name not in DYNAMIC:
            undeclared.append(name)
        elif computed:
            out[name] |= DYNAMIC[name]()
    assert undeclared == [], f"declare what these modules import by a computed name: {undeclared}"
    return out


def cycles(links: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in sorted(links.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(links):
        if node not in index:
            visit(node)
    return groups


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_walk_sees_each_kind_of_import() -> None:
    # the checker itself: a cycle made of each kind of edge is found
    links = graph()
    assert "vaelii_llm._transport.settings" in links["vaelii_llm._transport.sessions"]
    assert "vaelii_llm.providers.ollama" in links["vaelii_llm.providers"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_only_the_engine_module_reaches_into_the_engines_private_modules() -> None:
    # The spec's boundary: model-side code reaches the engine through engine.py alone.
    links = graph()
    reaching = sorted(
        name
        for name, found in links.items()
        if not name.startswith("vaelii_llm.kb")
        and name != "vaelii_llm.engine"
        and any(m.startswith("vaelii_llm.kb._") for m in found)
    )
    assert reaching == []


def test_no_module_imports_the_version_from_the_package_root() -> None:
    # The root imports its submodules lazily; a submodule reaching up for a name
    # the root re-exports is an edge upward. The version has its own module.
    known = modules()
    upward = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "vaelii_llm"
                and not node.level
                and any(alias.name == "__version__" for alias in node.names)
            ):
                upward.append(name)
    assert upward == []


def test_the_transport_reads_no_switch() -> None:
    # A URL's user info is the transport's rule (_transport.urls): the transport
    # imports nothing of the configuration, which hands it values, not rules.
    links = graph()
    reaching = sorted(
        name
        for name, found in links.items()
        if name.startswith("vaelii_llm._transport") and "vaelii_llm.config" in found
    )
    assert reaching == []
