"""The package reads no dependency's private state (#61): every ``obj._name``
it reads or writes, and every ``getattr``/``setattr``/``hasattr`` of a
``"_name"``, names an attribute the package itself defines (its own modules,
classes and instances), or one of the few allowed below with the reason.
The one exception is one module, :data:`ONE_PLACE`, where aiohttp keeps a
credential in records it gives no public way to reach: no other module
names any private attribute of aiohttp's, even as a string."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "vaelii_llm"

ONE_PLACE = Path("_transport/aiohttp_private.py")

ALLOWED = {
    # namedtuple's own API, public though underscored (Python's docs)
    "_replace": "collections.namedtuple",
    "_fields": "collections.namedtuple",
    "_asdict": "collections.namedtuple",
    # pydantic-ai's StreamedResponse subclass contract: a model's stream fills
    # its parts manager (every model pydantic-ai ships does the same)
    "_parts_manager": "pydantic_ai.models.StreamedResponse",
}


def _trees() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text())
        for path in sorted(ROOT.rglob("*.py"))
        if path.relative_to(ROOT) != ONE_PLACE
    }


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(trees: dict[Path, ast.Module]) -> set[str]:
    """Every underscored name the package defines: functions, classes,
    assigned names and attributes, slots, parameters and imported names."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                    names.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
    return {name for name in names if _private(name)}


def _read(trees: dict[Path, ast.Module]) -> dict[str, list[str]]:
    """Every underscored attribute the package reads or writes on an object,
    with where."""
    found: dict[str, list[str]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and _private(node.attr):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)
            ):
                name = node.args[1].value
            if name is not None:
                found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_private_attribute_of_a_dependency_is_read_or_written() -> None:
    trees = _trees()
    own = _defined(trees)
    foreign = {
        name: where
        for name, where in _read(trees).items()
        if name not in own and name not in ALLOWED
    }
    assert foreign == {}


def test_the_rule_finds_a_dependency_s_private_read() -> None:
    """The rule itself: aiohttp's idle map, read as #58's check read it, is found."""
    tree = ast.parse("def f(connector):\n    return connector._conns, getattr(r, '_protocol')\n")
    found = _read({ROOT / "probe.py": tree})
    assert set(found) == {"_conns", "_protocol"}
    assert not {"_conns", "_protocol"} & _defined(_trees())


def _aiohttp_private_names() -> set[str]:
    """The underscored attributes of aiohttp's client classes (and of what
    they hold), as aiohttp names them."""
    import aiohttp
    from aiohttp import client_exceptions
    from aiohttp import client_proto
    from aiohttp import connector

    names = set(aiohttp.ClientSession.ATTRS)
    classes = [
        aiohttp.ClientResponse,
        aiohttp.ClientRequest,
        aiohttp.TCPConnector,
        connector.Connection,
        client_proto.ResponseHandler,
        client_exceptions.ClientConnectorError,
        aiohttp.StreamReader,
    ]
    for cls in classes:
        names |= set(dir(cls)) | set(getattr(cls, "__annotations__", {}))
    names |= {"_conns", "_acquired", "_protocol", "_connection", "_conn_key", "_loop"}
    return {name for name in names if _private(name)}


def test_no_module_but_one_names_a_private_attribute_of_aiohttp() -> None:
    private = _aiohttp_private_names() - _defined(_trees())
    found = []
    for path, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in private:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
            elif isinstance(node, ast.Attribute) and node.attr in private:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}")
    assert found == []
    assert (ROOT / ONE_PLACE).exists()
