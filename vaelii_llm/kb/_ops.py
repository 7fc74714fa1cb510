"""The embedded engine's op table, read off the ops' own declarations.

``OPS`` maps an op name (as the daemon names it: writes without ``!``) to its engine
function: every function carrying `vaelii_llm._declare.op` defined in one of
`OP_MODULES`. Each function's declaration says its kind, options and clock; its
parameters, their annotations (`Sentence`, `Context`, `Term`, `Handle`, an options
Struct, ``int``, ``str``) and its docstring are what a model reads when the op is published
as a tool, so the docstrings are written for a model. Nothing else lists an op.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from collections.abc import Mapping
from types import ModuleType
from typing import Any
from typing import Final

from vaelii_llm._declare import KBLESS
from vaelii_llm._declare import declared
from vaelii_llm._declare import op
from vaelii_llm._version import __version__

__all__ = ["OPS", "OP_MODULES", "VERSION", "op_names", "version"]

VERSION: Final = __version__

#: The modules whose declared functions make up the op table.
OP_MODULES: Final = (
    "vaelii_llm.kb._reads",
    "vaelii_llm.kb._audits",
    "vaelii_llm.kb._writes",
    "vaelii_llm.kb._verdicts",
    "vaelii_llm.kb._search_tree",
    "vaelii_llm.kb._tacticians",
    "vaelii_llm.kb._within",
    "vaelii_llm.kb._scenarios",
    "vaelii_llm.kb._audits_whole",
    __name__,
)


@op("version", kind=KBLESS)
def version() -> str:
    """The embedded engine's version."""
    return VERSION


@op("op-names", kind=KBLESS)
def op_names() -> list[str]:
    """Every op the engine has, sorted."""
    return sorted(OPS)


def _module(name: str) -> ModuleType:
    return sys.modules[__name__] if name == __name__ else importlib.import_module(name)


def _table() -> dict[str, Callable[..., Any]]:
    table: dict[str, Callable[..., Any]] = {}
    for name in OP_MODULES:
        module = _module(name)
        for fn in vars(module).values():
            d = declared(fn)
            if d is None or getattr(fn, "__module__", None) != name:
                continue
            other = table.get(d.name)
            if other is not None and other is not fn:
                raise ValueError(f"two functions declare the op {d.name!r}")
            table[d.name] = fn
    return dict(sorted(table.items()))


OPS: Final[Mapping[str, Callable[..., Any]]] = _table()
