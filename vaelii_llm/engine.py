"""The one module that reaches into an engine.

An engine is described by an `Engine`: its op table (op name such as
``"find-sentexes"`` or ``"ask?"`` -> the engine function), its refusal type and its
version. Everything else is read off each function's own declaration (`op`): its
kind (read, write, irreversible, host-path, unbounded, feed, kb-less), its options
(an `Options` Struct whose fields carry the defaults and, as bounds, the ceilings)
and whether the clock holds it. `embedded()` describes the engine this package ships
(`vaelii_llm.kb`); any other engine whose functions carry the same declarations
plugs into `vaelii_llm.tools` unchanged.

Engine functions take the KB first; their other parameters are annotated with the
markers `Sentence`, `Context`, `Term` and `Handle`, their options Struct (the
parameter ``opts``), or plain ``int``/``str``/``bool``; several shapes are declared
with `typing.overload`, and their docstrings are written for a model to read.
Nothing model-side lives here or in `vaelii_llm.kb`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import TypeVar

from vaelii_llm._declare import FEED
from vaelii_llm._declare import HOST_PATH
from vaelii_llm._declare import IRREVERSIBLE
from vaelii_llm._declare import IRREVERSIBLE_ATTR
from vaelii_llm._declare import KBLESS

# re-exported for the tools (not public: not in __all__)
from vaelii_llm._declare import MAX_LIMIT as MAX_LIMIT

# re-exported for the EDN reader (its nesting cap is the engine's) and the
# command and the tools (the engine's refusal), none public
from vaelii_llm._declare import MAX_NESTING as MAX_NESTING
from vaelii_llm._declare import READ as READ
from vaelii_llm._declare import UNBOUNDED
from vaelii_llm._declare import WRITE
from vaelii_llm._declare import Context
from vaelii_llm._declare import Declared
from vaelii_llm._declare import EngineRefusal as EngineRefusal
from vaelii_llm._declare import Handle
from vaelii_llm._declare import Options
from vaelii_llm._declare import Sentence
from vaelii_llm._declare import Term
from vaelii_llm._declare import check_options as check_options
from vaelii_llm._declare import declared as declared
from vaelii_llm._declare import op
from vaelii_llm._declare import too_deep as too_deep
from vaelii_llm._version import __version__

__all__ = [
    "Context",
    "Engine",
    "Handle",
    "Options",
    "Sentence",
    "Term",
    "embedded",
    "irreversible",
    "op",
]


F = TypeVar("F", bound=Callable[..., Any])

#: Annotation -> the kind of value a parameter takes (an `Options` subclass: "opts").
#: The tools map a kind to a JSON schema; "sentence", "context" and "term" travel as
#: strings holding EDN.
ARG_KINDS: Final[Mapping[object, str]] = {
    Sentence: "sentence",
    Context: "context",
    Term: "term",
    Handle: "handle",
    int: "integer",
    str: "string",
    bool: "boolean",
}


def irreversible(fn: F) -> F:
    """Mark an engine function irreversible (what a Clojure ``!`` var says).

    The tools exclude an op whose function carries the mark whatever its declaration
    says; the mark is a backstop (``@op(..., kind=IRREVERSIBLE)`` sets it too). It is
    the function attribute `vaelii_llm.kb._types.IRREVERSIBLE_ATTR`, so an engine
    package can set it without importing this module.
    """
    setattr(fn, IRREVERSIBLE_ATTR, True)
    return fn


def is_irreversible(fn: object) -> bool:
    """Whether `fn` (or the function it wraps) carries the irreversible mark."""
    seen = 0
    while fn is not None and seen < 16:
        if getattr(fn, IRREVERSIBLE_ATTR, False) is True:
            return True
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return False


@dataclass(frozen=True)
class Engine:
    """Everything the tools need to know about one engine: its op table; the rest is
    read off each op function's declaration. An op whose function carries none has
    no kind: it is in the table, and never a tool."""

    name: str
    ops: Mapping[str, Callable[..., Any]]
    refusal: type[Exception]
    version: str = ""

    def replace(self, **changes: Any) -> Engine:
        """A copy with some fields changed (`dataclasses.replace`), e.g. an extra op."""
        return dataclasses.replace(self, **changes)

    def with_ops(self, ops: Mapping[str, Callable[..., Any]]) -> Engine:
        """A copy with `ops` added to (or replacing entries of) the op table."""
        return self.replace(ops={**self.ops, **ops})

    def declaration(self, op: str) -> Declared | None:
        """The declaration of `op`'s function, or None."""
        return declared(self.ops.get(op))

    @property
    def kinds(self) -> Mapping[str, str | None]:
        """op -> its declared kind (None for an op nobody declared)."""
        return {op: (d.kind if (d := declared(fn)) else None) for op, fn in self.ops.items()}

    def of_kind(self, *kinds: str) -> frozenset[str]:
        """The ops declared one of `kinds`."""
        return frozenset(op for op, kind in self.kinds.items() if kind in kinds)

    @property
    def read_ops(self) -> frozenset[str]:
        """The ops declared reads: the only ones that can become tools."""
        return self.of_kind(READ)

    @property
    def write_ops(self) -> frozenset[str]:
        """The ops that change state: declared writes, irreversible ones, and any op
        whose function carries the irreversible mark."""
        marked = frozenset(op for op, fn in self.ops.items() if is_irreversible(fn))
        return self.of_kind(WRITE, IRREVERSIBLE) | marked

    @property
    def feed_ops(self) -> frozenset[str]:
        return self.of_kind(FEED)

    @property
    def host_path_ops(self) -> frozenset[str]:
        return self.of_kind(HOST_PATH)

    @property
    def unbounded_ops(self) -> frozenset[str]:
        return self.of_kind(UNBOUNDED)

    @property
    def kbless_ops(self) -> frozenset[str]:
        return self.of_kind(KBLESS)

    @property
    def clocked(self) -> frozenset[str]:
        """The ops the clock holds: a call naming no ``max-ms`` runs under the
        declaration's default (`Declared.defaults`)."""
        return frozenset(
            op for op, fn in self.ops.items() if (d := declared(fn)) is not None and d.clocked
        )

    def opts(self, op: str) -> type[Options] | None:
        """The options Struct `op` declares, or None."""
        d = self.declaration(op)
        return d.opts if d is not None else None


def embedded() -> Engine:
    """The embedded engine of `vaelii_llm.kb`."""
    from vaelii_llm import kb

    return Engine(
        name="vaelii_llm.kb", ops=kb.op_table(), refusal=EngineRefusal, version=__version__
    )
