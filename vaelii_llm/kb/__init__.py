"""The embedded knowledge-base engine: a small, real, in-memory engine.

Sentences are EDN lists such as ``(isa Muffet Spider)``, each stored as a *sentex*
with an integer handle in a *context*; contexts inherit from their parents through
``(genlCtx Child Parent)``; rules are ``(implies (and a b ...) c)``; variables start
with ``?``. The ops, their answer records and their options live in the private
modules; `vaelii_llm.engine.embedded` describes them (its op table) to the tools.

This package knows nothing of models: it imports no provider, tool or transport.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from vaelii_llm.kb._io import load_edn
from vaelii_llm.kb._io import open
from vaelii_llm.kb._io import sample
from vaelii_llm.kb._io import save
from vaelii_llm.kb._io import synthetic
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import EngineRefusal

__all__ = ["KB", "EngineRefusal", "load_edn", "open", "sample", "save", "synthetic"]


def op_table() -> Mapping[str, Callable[..., Any]]:
    """The embedded engine's op table (op name -> function), for
    `vaelii_llm.engine.embedded`; loaded on first use, as every op module is."""
    from vaelii_llm.kb._ops import OPS

    return OPS
