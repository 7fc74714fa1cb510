"""Argument reading for the embedded engine's ops: sentences, contexts, terms and
handles as the ops take them. (An op's options arrive checked, as its declared Struct:
see `vaelii_llm._declare`.)
"""

from __future__ import annotations

from typing import Any

from vaelii_llm._declare import CLOCK
from vaelii_llm._declare import Options
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import Foreign
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import edn_module
from vaelii_llm.kb._store import is_symbol
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._store import term_name
from vaelii_llm.kb._types import MAX_NESTING
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.kb._types import Sentex
from vaelii_llm.kb._types import too_deep

__all__ = [
    "check_arity",
    "clock",
    "context_ids",
    "context_symbol",
    "edn_str",
    "encode",
    "goal",
    "handle",
    "parse_edn",
    "pattern",
    "read_context",
    "sentence",
    "sentex",
    "term",
    "visible_contexts",
]

# -- argument checking -----------------------------------------------------------


def parse_edn(text: str, what: str) -> Any:
    if too_deep(text) is not None:
        raise EngineRefusal(
            f"malformed-{what}", f"{text[:80]!r} is nested deeper than {MAX_NESTING}"
        )
    try:
        return edn_module().loads(text)
    except Exception as exc:  # reader errors, unknown tags, RecursionError
        raise EngineRefusal(
            f"malformed-{what}", f"could not read {text[:80]!r} as EDN ({type(exc).__name__})"
        ) from None


def _check_member(x: Any, depth: int) -> None:
    if type(x) is tuple:
        if depth >= MAX_NESTING:  # the sentence itself is depth 0: one bracket deep
            raise EngineRefusal("malformed-sentence", f"nested deeper than {MAX_NESTING}")
        if not x:
            raise EngineRefusal("malformed-sentence", "an empty list () is not a sentence")
        for y in x:
            _check_member(y, depth + 1)
    elif not (is_symbol(x) or type(x) in (str, int, float, bool)):
        raise EngineRefusal(
            "malformed-sentence",
            f"{x!r} cannot appear in a sentence: use symbols, strings, numbers, "
            "true/false and nested lists",
        )


def sentence(x: Any, what: str = "sentence") -> tuple[Any, ...]:
    """A sentence argument as an edn tuple (a string is read as EDN)."""
    if isinstance(x, str):
        x = parse_edn(x, "sentence")
    if type(x) is not tuple or not x:
        raise EngineRefusal(
            "malformed-sentence",
            f"the {what} must be an EDN list such as (isa Muffet Spider), got {x!r}"[:200],
        )
    if not is_symbol(x[0]):
        raise EngineRefusal(
            "malformed-sentence", f"a sentence starts with a predicate symbol, got {x[0]!r}"
        )
    _check_member(x, 0)
    return x


def goal(kb: KB, x: Any, what: str = "goal") -> tuple[Any, ...]:
    """A sentence argument whose predicate's declared arity it keeps."""
    sent = sentence(x, what)
    check_arity(kb, sent)
    return sent


def context_symbol(x: Any) -> Any:
    if isinstance(x, str):
        plain = x and not any(c.isspace() or c in '()[]{}"#;,' for c in x)
        x = symbol(x) if plain else parse_edn(x, "context")
    if not is_symbol(x) or str(x).startswith("?") or not str(x):
        raise EngineRefusal(
            "malformed-context", f"a context is a symbol such as CxWell, got {x!r}"[:200]
        )
    return x


def read_context(kb: KB, x: Any) -> int:
    """A context a read names: it must exist."""
    sym = context_symbol(x)
    cid = kb.term_id(sym)
    if cid is None or (kb.context_index(cid) is None and cid not in kb.all_parents()):
        names = sorted(term_name(kb.terms[c]) for c in context_ids(kb))
        raise EngineRefusal(
            "unknown-context",
            f"no context named {sym}; contexts: {', '.join(names[:20])}",
            context=str(sym),
        )
    return cid


def visible_contexts(kb: KB, context: Any) -> tuple[int, ...] | None:
    return None if context is None else kb.ancestors(read_context(kb, context))


def term(x: Any) -> Any:
    if is_symbol(x) or type(x) in (str, int, float, bool):
        return x
    raise EngineRefusal(
        "malformed-term", f"a term is a symbol or a literal such as Muffet or 3, got {x!r}"[:200]
    )


def handle(kb: KB, x: Any) -> int:
    if type(x) is not int:
        raise EngineRefusal("bad-argument", f"a handle is an integer, got {x!r}"[:200])
    if not kb.exists(x):
        raise EngineRefusal("unknown-handle", f"no sentex has handle {x}", handle=x)
    return x


def check_arity(kb: KB, sent: tuple[Any, ...]) -> None:
    pid = kb.term_id(sent[0])
    if pid is None:
        return
    n = kb.declared_arity(pid)
    if n is not None and len(sent) - 1 != n:
        raise EngineRefusal(
            "arity-mismatch",
            f"{sent[0]} takes {n} argument(s), {len(sent) - 1} given",
            predicate=str(sent[0]),
            expected=n,
            given=len(sent) - 1,
        )


def encode(kb: KB, sent: tuple[Any, ...]) -> tuple[Any, ...]:
    """An edn sentence interned into the store's internal form (for writes)."""
    return tuple(encode(kb, x) if type(x) is tuple else kb.intern(x) for x in sent)


def pattern(kb: KB, sent: tuple[Any, ...], names: dict[str, Var] | None = None) -> Any:
    """An edn sentence as a query pattern, interning nothing."""
    names = {} if names is None else names
    out: list[Any] = []
    for x in sent:
        if type(x) is tuple:
            out.append(pattern(kb, x, names))
        elif is_symbol(x) and str(x).startswith("?"):
            v = names.get(str(x))
            if v is None:
                v = names[str(x)] = Var(str(x))
            out.append(v)
        else:
            i = kb.term_id(x)
            out.append(Foreign(x) if i is None else i)
    return tuple(out)


def sentex(kb: KB, h: int) -> Sentex:
    kb.stats["realized"] += 1
    return Sentex(h, kb.terms[kb.row_context(h)], kb.to_edn(kb.row(h)))


def edn_str(x: Any) -> str:
    return str(edn_module().dumps(x))


def context_ids(kb: KB) -> list[int]:
    ids = set(kb.context_ids())
    for child, parents in list(kb.all_parents().items()):  # a snapshot: a writer adds
        ids.add(child)
        ids.update(parents)
    return sorted(ids)


def clock(o: Options = CLOCK) -> Clock:
    """The clock of a call whose options are `o`: its ``max-ms`` (an op that takes no
    options runs under `CLOCK`'s, the ceiling); none when `o` has no ``max-ms``."""
    return Clock(getattr(o, "max_ms", None))
