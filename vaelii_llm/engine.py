"""The one module that reaches into an engine.

An engine is described by an `Engine`: its op table (op name such as
``"find-sentexes"`` or ``"ask?"`` -> the engine function), its kb-less ops, its
write set, its feed ops, its host-path ops and its ceiling tables. `embedded()`
describes the engine this package ships (`vaelii_llm.kb`); any other engine that
supplies the same description plugs into `vaelii_llm.tools` unchanged.

Engine functions take the KB first; their other parameters are annotated with the
markers of `ARG_KINDS` (or plain ``int``/``str``/``bool``), several shapes are
declared with `typing.overload`, and their docstrings are written for a model to
read. Nothing model-side lives here or in `vaelii_llm.kb`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from vaelii_llm.kb import ops as _kb_ops
from vaelii_llm.kb.types import (
    IRREVERSIBLE_ATTR,
    Context,
    EngineRefusal,
    Handle,
    Opts,
    Sentence,
    Term,
)

__all__ = [
    "ARG_KINDS",
    "Ceilings",
    "Engine",
    "EngineRefusal",
    "embedded",
    "irreversible",
    "is_irreversible",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Annotation -> the kind of value a parameter takes. The tools map a kind to a JSON
#: schema; "sentence", "context" and "term" travel as strings holding EDN.
ARG_KINDS: Final[Mapping[object, str]] = {
    Sentence: "sentence",
    Context: "context",
    Term: "term",
    Handle: "handle",
    Opts: "opts",
    int: "integer",
    str: "string",
    bool: "boolean",
}


def irreversible(fn: F) -> F:
    """Mark an engine function irreversible (what a Clojure ``!`` var says).

    The tools exclude an op whose function carries the mark whatever the write set
    says; the mark is a backstop, and every mutating op is still listed in the write
    set. The mark is the function attribute `vaelii_llm.kb.types.IRREVERSIBLE_ATTR`,
    so an engine package can set it without importing this module.
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
class Ceilings:
    """The bounds the engine holds every read to, whatever the caller asks.

    ``max_depth``/``max_ms`` are the ceilings; a call naming more is refused
    ``over-ceiling``. ``clocked`` are the ops the clock holds: they run under
    ``max_ms`` when the call names none. ``accepts_max_ms``/``accepts_max_depth``
    are the ops whose opts take those keys.
    """

    max_depth: int
    max_ms: int
    clocked: frozenset[str]
    accepts_max_ms: frozenset[str]
    accepts_max_depth: frozenset[str]


@dataclass(frozen=True)
class Engine:
    """Everything the tools need to know about one engine."""

    name: str
    ops: Mapping[str, Callable[..., Any]]
    kbless_ops: frozenset[str]
    write_ops: frozenset[str]
    feed_ops: frozenset[str]
    host_path_ops: frozenset[str]
    ceilings: Ceilings
    refusal: type[Exception]
    #: reads with no bound a call can carry (the whole-KB sorts and audits); the tools
    #: keep their own list, this is the engine's word on it.
    unbounded_ops: frozenset[str] = field(default_factory=frozenset)
    version: str = ""
    #: op -> {opts key it reads -> its JSON kind, "integer" or "boolean"}; the tools
    #: publish these keys in the schema. An op absent here is described loosely.
    opt_keys: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def replace(self, **changes: Any) -> Engine:
        """A copy with some fields changed (`dataclasses.replace`), e.g. an extra op."""
        return dataclasses.replace(self, **changes)


def embedded() -> Engine:
    """The embedded engine of `vaelii_llm.kb`."""
    return Engine(
        name="vaelii_llm.kb",
        ops=_kb_ops.OPS,
        kbless_ops=_kb_ops.KBLESS_OPS,
        write_ops=_kb_ops.WRITE_OPS,
        feed_ops=_kb_ops.FEED_OPS,
        host_path_ops=_kb_ops.HOST_PATH_OPS,
        ceilings=Ceilings(
            max_depth=_kb_ops.MAX_DEPTH_CEILING,
            max_ms=_kb_ops.MAX_MS_CEILING,
            clocked=_kb_ops.CLOCKED,
            accepts_max_ms=_kb_ops.ACCEPTS_MAX_MS,
            accepts_max_depth=_kb_ops.ACCEPTS_MAX_DEPTH,
        ),
        refusal=EngineRefusal,
        unbounded_ops=_kb_ops.UNBOUNDED_OPS,
        version=_kb_ops.VERSION,
        opt_keys={
            op: {key: _kb_ops.OPT_KINDS[key] for key in sorted(keys)}
            for op, keys in _kb_ops.OPT_KEYS.items()
        },
    )
