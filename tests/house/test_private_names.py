"""No module of the package uses another part's private names (#61 item 7).

A name whose first ``_``-prefixed part follows a package is that package's:
any module inside it may use it (``vaelii_llm._protocol`` is the whole
package's, ``vaelii_llm.pool._slots`` the pool's). A name whose first
``_``-prefixed part follows a module is that module's alone
(``config._read`` is config's). Everything else goes through public names.
"""

from __future__ import annotations

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[2] / "vaelii_llm"


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(LIBRARY.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(dotted: str) -> bool:
    return (LIBRARY.parent / dotted.replace(".", "/") / "__init__.py").exists()


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _owner(reference: str) -> str | None:
    """Who may use ``reference``: the package or module before its first private part."""
    parts = reference.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if _private(part):
            return ".".join(parts[:i])
    return None


def _references(path: Path) -> list[tuple[int, str]]:
    """Every dotted ``vaelii_llm`` name the module imports or reads off an imported one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "vaelii_llm":
                for alias in node.names:
                    found.append((node.lineno, f"{node.module}.{alias.name}"))
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "vaelii_llm":
                    found.append((node.lineno, alias.name))
                    if alias.asname:
                        bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
        ):
            found.append((node.lineno, f"{bound[node.value.id]}.{node.attr}"))
    return found


def _scope_holds(me: str, owner: str) -> bool:
    return me == owner or (_is_package(owner) and me.startswith(owner + "."))


def test_no_module_uses_another_part_s_private_names() -> None:
    crossings = []
    for path in sorted(LIBRARY.rglob("*.py")):
        me = _dotted(path)
        for line, reference in _references(path):
            owner = _owner(reference)
            if owner is not None and not _scope_holds(me, owner):
                crossings.append(f"{path.relative_to(LIBRARY.parent)}:{line}: {reference}")
    assert crossings == [], "\n".join(crossings)


def test_the_rule_sees_a_crossing() -> None:
    """The walk itself: a reach into a sibling package's private module, and into a
    module's private name, are seen; a child's use of its ancestor's is not."""
    assert _owner("vaelii_llm.pool._vote.vote") == "vaelii_llm.pool"
    assert not _scope_holds("vaelii_llm.cli", "vaelii_llm.pool")
    assert _owner("vaelii_llm.config._read") == "vaelii_llm.config"
    assert not _scope_holds("vaelii_llm.cli", "vaelii_llm.config")
    assert _scope_holds("vaelii_llm.providers.openai._chat", "vaelii_llm")
    assert _scope_holds("vaelii_llm.pool._vote", "vaelii_llm.pool")
