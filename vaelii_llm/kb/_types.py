"""The embedded engine's vocabulary: answer records, and (from `vaelii_llm._declare`,
where every engine finds them) the argument markers and the refusal.

The markers (`Sentence`, `Context`, `Term`, `Handle`) are `typing.NewType`s.
They cost nothing at run time (``Handle(5) is 5``) and they survive
`typing.get_type_hints`, so a reader of an engine function's signature (the tools)
can tell a handle from any other integer and a sentence from any other tuple.

What the values are at run time, as `edn_format.loads` reads them:

* `Sentence`: an EDN list, i.e. a tuple whose first member is the predicate symbol,
  e.g. ``(isa Muffet Spider)``. Members are symbols, strings, integers, floats,
  booleans or nested lists. A symbol whose name starts with ``?`` is a variable.
* `Context`: a symbol naming a context, e.g. ``CxWell``.
* `Term`: a constant: a symbol (``Muffet``) or a literal (``"Little Miss"``, ``3``).
* `Handle`: the integer that names one stored sentex.

An op's options are not a marker: the parameter ``opts`` is annotated with the op's
options Struct (`vaelii_llm._declare`), and a caller may pass a mapping with
kebab-case keys, e.g. ``{"max-depth": 4, "max-ms": 500}`` (an EDN keyword key
``:max-depth`` reads as ``"max-depth"``), which the op checks into that Struct.

Nothing here imports edn_format (its import builds parser tables): the records hold
whatever symbol objects the store hands them.
"""

from __future__ import annotations

import logging
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._declare import IRREVERSIBLE_ATTR
from vaelii_llm._declare import MAX_NESTING
from vaelii_llm._declare import Context
from vaelii_llm._declare import EngineRefusal
from vaelii_llm._declare import Handle
from vaelii_llm._declare import Sentence
from vaelii_llm._declare import Term
from vaelii_llm._declare import too_deep

# edn_format's lexer logs its whole rule table at INFO each time it is built (every
# read); every reader of EDN imports this module first, so it is quiet unless a caller
# has set that logger's level.
_LEXER_LOG: Final = logging.getLogger("edn_format.edn_lex")
if _LEXER_LOG.level == logging.NOTSET:
    _LEXER_LOG.setLevel(logging.WARNING)

__all__ = [
    "IRREVERSIBLE_ATTR",
    "MAX_NESTING",
    "Answer",
    "Change",
    "Context",
    "ContextInfo",
    "Cut",
    "EngineRefusal",
    "Handle",
    "Problem",
    "Sentence",
    "Sentex",
    "Term",
    "WhyNot",
    "too_deep",
]


class Sentex(msgspec.Struct, frozen=True):
    """One stored sentence: its handle, its context and the sentence itself."""

    handle: int
    context: Any
    sentence: tuple[Any, ...]


class Answer(msgspec.Struct, frozen=True):
    """One answer: variable bindings and the handles (facts and rules) that support it.

    ``depth`` is the number of nested rule applications the proof used (0: a stored fact).
    """

    bindings: dict[Any, Any]
    support: tuple[int, ...]
    depth: int = 0


class Cut(msgspec.Struct, frozen=True, tag_field="kind", tag="cut"):
    """The last record of a read that was stopped before it finished.

    Tagged, so it prints as ``{:kind "cut", :reason "max-ms", :bound 500, :yielded 3}``:
    a reader of the answers can tell it from the records before it.

    ``reason`` is ``"max-ms"`` (the clock ran out: more answers may exist) or
    ``"max-depth"`` (the search reached its depth bound somewhere: a deeper proof may
    exist). ``bound`` is the bound that stopped it, ``yielded`` the records before it.
    """

    reason: str
    bound: int
    yielded: int


class Problem(msgspec.Struct, frozen=True):
    """One finding of an audit (``kb-integrity``, ``kb-quality``, ``exposed-clashes``)."""

    kind: str
    detail: str
    handles: tuple[int, ...] = ()


class ContextInfo(msgspec.Struct, frozen=True):
    """A context, its direct parents, and how many live sentexes it holds itself."""

    name: Any
    parents: tuple[Any, ...]
    sentexes: int


class WhyNot(msgspec.Struct, frozen=True):
    """Why a sentence does not hold, or does: one record per rule that could conclude it.

    ``holds`` says whether the sentence is proved (without the excluded handle, for the
    handle shape). ``rule`` is the rule's handle (0 for the stored-fact check),
    ``missing`` the antecedents (instantiated as far as the goal binds them) that have
    no support within the depth bound, and ``supported`` those that do.
    """

    sentence: tuple[Any, ...]
    holds: bool
    rule: int
    missing: tuple[tuple[Any, ...], ...] = ()
    supported: tuple[tuple[Any, ...], ...] = ()


class Change(msgspec.Struct, frozen=True):
    """One entry of the change feed: ``kind`` is ``"assert"`` or ``"retract"``.

    ``tick`` is the handle counter's value that the change took; for an assert it is
    the new sentex's handle.
    """

    tick: int
    kind: str
    handle: int
    context: Any
    sentence: tuple[Any, ...]
