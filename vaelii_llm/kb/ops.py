"""The embedded engine's op table, in the daemon's shape.

``OPS`` maps an op name (as the daemon names it: writes without ``!``) to its engine
function. Every function takes the KB first; its other parameters, their annotations
(`Sentence`, `Context`, `Term`, `Handle`, `Opts`, ``int``, ``str``) and its docstring
are what a model reads when the op is published as a tool, so the docstrings are
written for a model.

Beside the table: ``WRITE_OPS`` (the engine's own write set; ``clear-caches``, which
mutates only the measurement state, is filed elsewhere, as the daemon files it),
``KBLESS_OPS``, ``FEED_OPS``, ``HOST_PATH_OPS``, ``UNBOUNDED_OPS`` and the ceiling
tables: ``MAX_DEPTH_CEILING`` (12) and ``MAX_MS_CEILING`` (10,000 ms) hold every
read; ``CLOCKED`` reads run under ``MAX_MS_CEILING`` when the call names no
``max-ms``; ``OPT_KEYS`` says which opts keys each op reads (anything else is refused
``unknown-option``).

Reads return lazy generators where an answer can be large (checked against the clock
as they are consumed) and plain values or lists where the answer is small or built
whole. A read the clock or the depth bound stopped ends with a `Cut` record.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, overload

import msgspec

from vaelii_llm.kb.query import (
    Clock,
    ClockOut,
    Foreign,
    Search,
    Var,
    candidates,
    rename,
    subst,
    to_edn,
)
from vaelii_llm.kb.store import (
    KB,
    LIVE,
    PENDING,
    Subscription,
    compile_rule,
    edn_module,
    handles_in,
    is_symbol,
    symbol,
    term_name,
)
from vaelii_llm.kb.types import (
    IRREVERSIBLE_ATTR,
    Answer,
    Change,
    Context,
    ContextInfo,
    Cut,
    EngineRefusal,
    Handle,
    Opts,
    Problem,
    Sentence,
    Sentex,
    Term,
    WhyNot,
)

VERSION: Final = "0.1.0"
MAX_DEPTH_CEILING: Final = 12
MAX_MS_CEILING: Final = 10_000
DEFAULT_MAX_DEPTH: Final = 6
MAX_NESTING: Final = 32


class Edited(msgspec.Struct, frozen=True):
    """What an edit did: the old handle, the new one, and the consequences."""

    old: int
    new: int
    retracted: tuple[int, ...] = ()
    derived: tuple[Sentex, ...] = ()


class Abduction(msgspec.Struct, frozen=True):
    """Hypotheses stored in a scratch context, and whether they prove the goal there."""

    context: Any
    hypotheses: tuple[Sentex, ...]
    proves: bool


class Diff(msgspec.Struct, frozen=True):
    """Sentexes only in the KB, and (context, sentence) pairs only in the files."""

    only_in_kb: tuple[Sentex, ...]
    only_in_path: tuple[tuple[Any, tuple[Any, ...]], ...]


def _mark_irreversible(fn: Callable[..., Any]) -> Callable[..., Any]:
    # the same mark vaelii_llm.engine.irreversible sets (kb imports nothing model-side)
    setattr(fn, IRREVERSIBLE_ATTR, True)
    return fn


# -- argument checking -----------------------------------------------------------


def _parse_edn(text: str, what: str) -> Any:
    try:
        return edn_module().loads(text)
    except Exception as exc:  # reader errors, unknown tags, RecursionError
        raise EngineRefusal(
            f"malformed-{what}", f"could not read {text[:80]!r} as EDN ({type(exc).__name__})"
        ) from None


def _check_member(x: Any, depth: int) -> None:
    if type(x) is tuple:
        if depth > MAX_NESTING:
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


def _sentence(x: Any, what: str = "sentence") -> tuple[Any, ...]:
    """A sentence argument as an edn tuple (a string is read as EDN)."""
    if isinstance(x, str):
        x = _parse_edn(x, "sentence")
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


def _context_symbol(x: Any) -> Any:
    if isinstance(x, str):
        plain = x and not any(c.isspace() or c in '()[]{}"#;,' for c in x)
        x = symbol(x) if plain else _parse_edn(x, "context")
    if not is_symbol(x) or str(x).startswith("?") or not str(x):
        raise EngineRefusal(
            "malformed-context", f"a context is a symbol such as CxWell, got {x!r}"[:200]
        )
    return x


def _read_context(kb: KB, x: Any) -> int:
    """A context a read names: it must exist."""
    sym = _context_symbol(x)
    cid = kb.term_id(sym)
    if cid is None or (kb.context_index(cid) is None and cid not in kb.all_parents()):
        names = sorted(term_name(kb.terms[c]) for c in _context_ids(kb))
        raise EngineRefusal(
            "unknown-context",
            f"no context named {sym}; contexts: {', '.join(names[:20])}",
            context=str(sym),
        )
    return cid


def _visible_contexts(kb: KB, context: Any) -> tuple[int, ...] | None:
    return None if context is None else kb.ancestors(_read_context(kb, context))


def _term(x: Any) -> Any:
    if is_symbol(x) or type(x) in (str, int, float, bool):
        return x
    raise EngineRefusal(
        "malformed-term", f"a term is a symbol or a literal such as Muffet or 3, got {x!r}"[:200]
    )


def _handle(kb: KB, x: Any) -> int:
    if type(x) is not int:
        raise EngineRefusal("bad-argument", f"a handle is an integer, got {x!r}"[:200])
    if not kb.exists(x):
        raise EngineRefusal("unknown-handle", f"no sentex has handle {x}", handle=x)
    return x


def _check_arity(kb: KB, sent: tuple[Any, ...]) -> None:
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


def _encode(kb: KB, sent: tuple[Any, ...]) -> tuple[Any, ...]:
    """An edn sentence interned into the store's internal form (for writes)."""
    return tuple(_encode(kb, x) if type(x) is tuple else kb.intern(x) for x in sent)


def _pattern(kb: KB, sent: tuple[Any, ...], names: dict[str, Var] | None = None) -> Any:
    """An edn sentence as a query pattern, interning nothing."""
    names = {} if names is None else names
    out: list[Any] = []
    for x in sent:
        if type(x) is tuple:
            out.append(_pattern(kb, x, names))
        elif is_symbol(x) and str(x).startswith("?"):
            v = names.get(str(x))
            if v is None:
                v = names[str(x)] = Var(str(x))
            out.append(v)
        else:
            i = kb.term_id(x)
            out.append(Foreign(x) if i is None else i)
    return tuple(out)


_INT_OPTS: Final = frozenset({"max-ms", "max-depth", "limit", "rounds"})
_BOOL_OPTS: Final = frozenset({"inherited"})

#: The JSON kind of every opts key an op may read ("integer" or "boolean").
OPT_KINDS: Final[Mapping[str, str]] = {
    **{key: "integer" for key in _INT_OPTS},
    **{key: "boolean" for key in _BOOL_OPTS},
}


def _opts(op: str, opts: Any) -> dict[str, Any]:
    """Check an op's opts: unknown keys, types and ceilings are refused, never ignored."""
    if opts is None:
        return {}
    if not isinstance(opts, Mapping):
        raise EngineRefusal(
            "bad-option", f"opts must be a map such as {{\"max-depth\": 3}}, got {opts!r}"[:200]
        )
    accepted = OPT_KEYS.get(op, frozenset())
    out: dict[str, Any] = {}
    for k, v in opts.items():
        key = getattr(k, "name", k)
        if isinstance(key, str):
            key = key.lstrip(":")
        if key not in accepted:
            raise EngineRefusal(
                "unknown-option",
                f"{op} reads no option {key!r}; it accepts: "
                + (", ".join(sorted(accepted)) or "none"),
                key=key,
                accepted=sorted(accepted),
            )
        if key in _INT_OPTS:
            if type(v) is not int or v < 0 or (key == "max-ms" and v < 1):
                least = 1 if key == "max-ms" else 0
                raise EngineRefusal(
                    "bad-option", f"{key} must be a whole number >= {least}, got {v!r}"[:120],
                    key=key,
                )
            ceiling = {"max-ms": MAX_MS_CEILING, "max-depth": MAX_DEPTH_CEILING}.get(key)
            if ceiling is not None and v > ceiling:
                raise EngineRefusal(
                    "over-ceiling", f"{key} {v} is over the ceiling of {ceiling}",
                    key=key, value=v, ceiling=ceiling,
                )
        elif key in _BOOL_OPTS and type(v) is not bool:
            raise EngineRefusal("bad-option", f"{key} must be true or false", key=key)
        out[key] = v
    return out


def _clock(op: str, o: Mapping[str, Any]) -> Clock:
    ms = o.get("max-ms")
    if ms is None and op in CLOCKED:
        ms = MAX_MS_CEILING
    return Clock(ms)


def _sentex(kb: KB, h: int) -> Sentex:
    kb.stats["realized"] += 1
    return Sentex(h, kb.terms[kb.row_context(h)], kb.to_edn(kb.row(h)))


def _edn_str(x: Any) -> str:
    return str(edn_module().dumps(x))


def _context_ids(kb: KB) -> list[int]:
    ids = set(kb.context_ids())
    for child, parents in kb.all_parents().items():
        ids.add(child)
        ids.update(parents)
    return sorted(ids)


# -- reads -------------------------------------------------------------------------


def find_sentexes(
    kb: KB, pattern: Sentence, context: Context | None = None, opts: Opts | None = None
) -> Iterator[Sentex | Cut]:
    """Find stored sentences matching a pattern, e.g. (isa ?x Spider) or (fears Muffet ?y).

    Variables start with ?. With a context, searches that context and every context it
    inherits from; without one, searches every context. Stored facts only: no rules are
    applied (use query for what follows from rules). Each result is a sentex: its
    handle, context and sentence. opts: max-ms (time bound; the results stop with a
    cut record when it runs out).
    """
    o = _opts("find-sentexes", opts)
    sent = _sentence(pattern, "pattern")
    _check_arity(kb, sent)
    cids = _visible_contexts(kb, context)
    pat = _pattern(kb, sent)
    clock = _clock("find-sentexes", o)
    return _find(kb, pat, cids, clock)


def _find(kb: KB, pat: Any, cids: tuple[int, ...] | None, clock: Clock) -> Iterator[Sentex | Cut]:
    from vaelii_llm.kb.query import unify

    n = 0
    try:
        for h in candidates(kb, pat, cids):
            clock.check()
            if unify(pat, kb.row(h), {}) is not None:
                n += 1
                yield _sentex(kb, h)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


def sentexes_in_context(
    kb: KB, context: Context, opts: Opts | None = None
) -> Iterator[Sentex | Cut]:
    """List the sentexes stored in one context, oldest first.

    Only the context's own sentexes unless opts has inherited: true (then those of the
    contexts it inherits from follow). opts: max-ms, inherited.
    """
    o = _opts("sentexes-in-context", opts)
    cid = _read_context(kb, context)
    cids = kb.ancestors(cid) if o.get("inherited") else (cid,)
    clock = _clock("sentexes-in-context", o)
    return _in_context(kb, cids, clock)


def _in_context(kb: KB, cids: tuple[int, ...], clock: Clock) -> Iterator[Sentex | Cut]:
    n = 0
    try:
        for cid in cids:
            c = kb.context_index(cid)
            if c is None:
                continue
            handles = c.all
            for i in range(len(handles)):
                clock.check()
                h = handles[i]
                if kb.visible(h):
                    n += 1
                    yield _sentex(kb, h)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


def ask_p(kb: KB, sentence: Sentence, context: Context) -> bool:
    """Is this sentence stored (directly) in the context or a context it inherits from?

    Answers true or false. Variables are allowed: (isa ?x Spider) asks whether anything
    is stored as a spider. No rules are applied; use query? for what follows from rules.
    """
    sent = _sentence(sentence)
    _check_arity(kb, sent)
    cids = _visible_contexts(kb, context)
    clock = _clock("ask?", {})
    try:
        for _ in _find(kb, _pattern(kb, sent), cids, clock):
            return not isinstance(_, Cut)
    except ClockOut:
        pass
    if clock.expired():
        raise EngineRefusal("clock-cut", "ask? ran out of time before it could answer")
    return False


def ask(
    kb: KB, sentence: Sentence, context: Context, opts: Opts | None = None
) -> Iterator[Answer | Cut]:
    """The variable bindings under which the sentence is stored in the context.

    Example: (fears ?who Muffet) in CxNursery answers {?who Miss-Muffet} with the
    handle that says so. Stored facts only, the context's ancestors included; no rules.
    opts: max-ms.
    """
    o = _opts("ask", opts)
    sent = _sentence(sentence)
    _check_arity(kb, sent)
    cids = _visible_contexts(kb, context)
    names: dict[str, Var] = {}
    pat = _pattern(kb, sent, names)
    clock = _clock("ask", o)
    return _ask(kb, (pat,), names, cids, clock)


def _ask(
    kb: KB,
    pats: tuple[Any, ...],
    names: dict[str, Var],
    cids: tuple[int, ...] | None,
    clock: Clock,
) -> Iterator[Answer | Cut]:
    search = Search(kb, cids, 0, clock)
    n = 0
    try:
        for b, support, _ in search.solve(pats, {}, 0, (), 0):
            n += 1
            kb.stats["realized"] += 1
            yield Answer(_bindings(kb, names, b), support, 0)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


def ask_all(kb: KB, context: Context, *sentences: Sentence) -> Iterator[Answer | Cut]:
    """Bindings that make every one of the sentences stored at once (a conjunction).

    Takes any number of sentences, so it has no single signature: a Python caller's
    convenience, not a tool.
    """
    sents = [_sentence(s) for s in sentences]
    for s in sents:
        _check_arity(kb, s)
    cids = _visible_contexts(kb, context)
    names: dict[str, Var] = {}
    pats = tuple(_pattern(kb, s, names) for s in sents)
    return _ask(kb, pats, names, cids, _clock("ask-all", {}))


def _bindings(kb: KB, names: Mapping[str, Var], b: Mapping[Var, Any]) -> dict[Any, Any]:
    return {symbol(name): to_edn(kb, subst(v, dict(b))) for name, v in names.items()}


def query(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> Iterator[Answer | Cut]:
    """Prove a goal from the stored facts and rules (backward chaining); answers lazily.

    Example: (afraid-of ?who Muffet) in CxNursery. Each answer gives the bindings of
    the goal's variables and the handles of the facts and rules that support it. Without
    a context, facts and rules of every context are used. opts: max-depth (how many rule
    steps may nest, default 6), max-ms (time bound). When the time bound or the depth
    bound stops the search, the answers end with a cut record saying which: no cut
    record and no answers means nothing proves the goal.
    """
    o = _opts("query", opts)
    sent = _sentence(goal, "goal")
    _check_arity(kb, sent)
    cids = _visible_contexts(kb, context)
    clock = _clock("query", o)
    kb.stats["queries"] += 1
    return _query(kb, sent, cids, o.get("max-depth", DEFAULT_MAX_DEPTH), clock)


def _query(
    kb: KB,
    sent: tuple[Any, ...],
    cids: tuple[int, ...] | None,
    max_depth: int,
    clock: Clock,
    exclude: int | None = None,
) -> Iterator[Answer | Cut]:
    names: dict[str, Var] = {}
    pat = _pattern(kb, sent, names)
    search = Search(kb, cids, max_depth, clock, exclude)
    seen: set[tuple[Any, ...]] = set()
    n = 0
    try:
        for b, support, used in search.solve((pat,), {}, 0, (), 0):
            key = tuple(subst(v, b) for v in names.values())
            if any(type(x) is Var for x in key):
                key = (*key, len(seen))  # unbound answers are never merged
            if key in seen:
                continue
            seen.add(key)
            n += 1
            kb.stats["realized"] += 1
            yield Answer(_bindings(kb, names, b), support, used)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)
        return
    if search.depth_hit:
        yield Cut("max-depth", max_depth, n)


def query_p(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> bool:
    """Does the goal follow from the stored facts and rules? Answers true or false.

    Like query, but stops at the first proof. false means no proof within max-depth
    (default 6); if the time bound (max-ms) runs out first, the call is refused with
    type clock-cut instead of answering false. opts: max-depth, max-ms.
    """
    o = _opts("query?", opts)
    sent = _sentence(goal, "goal")
    _check_arity(kb, sent)
    cids = _visible_contexts(kb, context)
    clock = _clock("query?", o)
    kb.stats["queries"] += 1
    for rec in _query(kb, sent, cids, o.get("max-depth", DEFAULT_MAX_DEPTH), clock):
        if isinstance(rec, Answer):
            return True
        if rec.reason == "max-ms":
            raise EngineRefusal(
                "clock-cut", f"query? ran out of its {clock.budget_ms} ms before a proof"
            )
    return False


@overload
def why_not(kb: KB, handle: Handle) -> Iterator[WhyNot | Cut]: ...


@overload
def why_not(
    kb: KB, sentence: Sentence, context: Context, opts: Opts | None = None
) -> Iterator[WhyNot | Cut]: ...


def why_not(  # type: ignore[misc]  # the handle shape's slot also takes the sentence
    kb: KB,
    handle: Handle | Sentence | None = None,
    context: Context | None = None,
    opts: Opts | None = None,
    *,
    sentence: Sentence | None = None,
) -> Iterator[WhyNot | Cut]:
    """Explain why a sentence does not follow (or does): which rules could conclude it,
    and which of their conditions have no support.

    Two shapes: a handle (asks whether that stored sentence would still follow without
    the sentex itself, e.g. before retracting it, or why a retracted one no longer
    holds), or a sentence and a context. One record per rule whose conclusion matches,
    with the conditions that are supported and those missing, checked to a bounded
    depth; a record with rule 0 when no rule concludes it. opts: max-depth, max-ms.
    """
    if sentence is not None:
        if handle is not None:
            raise EngineRefusal("bad-argument", "why-not takes a handle or a sentence, not both")
        handle = Handle(0)
        target: Any = sentence
    else:
        target = handle
    exclude: int | None = None
    if type(target) is int:
        if context is not None or opts is not None:
            raise EngineRefusal(
                "bad-argument", "why-not with a handle takes nothing else: (handle) or "
                "(sentence, context, opts)"
            )
        h = _handle(kb, target)
        sent = kb.to_edn(kb.row(h))
        cids: tuple[int, ...] | None = kb.ancestors(kb.row_context(h))
        o: dict[str, Any] = {}
        exclude = h
    else:
        if context is None:
            raise EngineRefusal(
                "bad-argument", "why-not with a sentence needs a context: (sentence, context)"
            )
        o = _opts("why-not", opts)
        sent = _sentence(target)
        _check_arity(kb, sent)
        cids = _visible_contexts(kb, context)
    clock = _clock("why-not", o)
    return _why_not(kb, sent, cids, o.get("max-depth", DEFAULT_MAX_DEPTH), clock, exclude)


def _why_not(
    kb: KB,
    sent: tuple[Any, ...],
    cids: tuple[int, ...] | None,
    max_depth: int,
    clock: Clock,
    exclude: int | None,
) -> Iterator[WhyNot | Cut]:
    n = 0
    try:
        pat = _pattern(kb, sent)
        search = Search(kb, cids, max_depth, clock, exclude)
        holds = search.prove(pat)
        head = pat[0] if type(pat[0]) is int else -1
        any_rule = False
        for rule in kb.rules_for(head, cids):
            if rule.handle == exclude:
                continue
            clock.check()
            ants, cons = rename(kb, rule)
            from vaelii_llm.kb.query import unify

            b = unify(cons, pat, {})
            if b is None:
                continue
            any_rule = True
            missing: list[tuple[Any, ...]] = []
            supported: list[tuple[Any, ...]] = []
            sub = Search(kb, cids, max(max_depth - 1, 0), clock, exclude)
            todo = list(ants)
            while todo:  # prove what can be proved first, so the missing ones are bound
                for i, ant in enumerate(todo):
                    got = next(iter(sub.solve((ant,), b, 0, (), 0)), None)
                    if got is not None:
                        b = got[0]
                        supported.append(to_edn(kb, subst(ant, b)))
                        del todo[i]
                        break
                else:
                    missing.extend(to_edn(kb, subst(ant, b)) for ant in todo)
                    todo = []
            n += 1
            yield WhyNot(sent, holds, rule.handle, tuple(missing), tuple(supported))
        if not any_rule:
            n += 1
            yield WhyNot(sent, holds, 0, () if holds else (sent,), ())
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


def _types_closure(kb: KB, firsts: list[int], cids: tuple[int, ...] | None) -> list[int]:
    genls = kb.sid("genls")
    out: list[int] = []
    seen: set[int] = set()
    todo = list(firsts)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        out.append(t)
        for h in candidates(kb, (genls, t, Var("?super")), cids):
            row = kb.row(h)  # candidates may match: check the predicate and position
            if len(row) == 3 and row[0] == genls and row[1] == t and type(row[2]) is int:
                todo.append(row[2])
    return out


def types_of(kb: KB, term: Term, context: Context | None = None) -> list[Any]:
    """The types of a term: what it is stored as an instance of (isa term Type), plus
    every supertype reached through (genls Sub Super). Sorted by name.

    With a context, only what that context and its ancestors hold.
    """
    t = _term(term)
    cids = _visible_contexts(kb, context)
    tid = kb.term_id(t)
    if tid is None:
        return []
    isa = kb.sid("isa")
    direct = [
        row[2]
        for h in candidates(kb, (isa, tid, Var("?type")), cids)
        if len(row := kb.row(h)) == 3 and row[0] == isa and row[1] == tid and type(row[2]) is int
    ]
    found = _types_closure(kb, direct, cids)
    return sorted((kb.terms[i] for i in found), key=term_name)


def types(kb: KB) -> list[Any]:
    """Every type in the KB: each term used as a type in (isa x Type) or (genls A B).

    Built whole and sorted by name.
    """
    return sorted((kb.terms[i] for i in kb.type_ids()), key=term_name)


def contexts(kb: KB) -> list[ContextInfo]:
    """Every context: its name, the contexts it inherits from, and how many sentexes it
    holds itself. Built whole and sorted by name.
    """
    out = []
    for cid in _context_ids(kb):
        c = kb.context_index(cid)
        out.append(
            ContextInfo(
                kb.terms[cid],
                tuple(kb.terms[p] for p in kb.parents(cid)),
                c.live if c is not None else 0,
            )
        )
    return sorted(out, key=lambda ci: term_name(ci.name))


def sentex_count(kb: KB, context: Context | None = None) -> int:
    """How many sentexes are stored: in the whole KB, or in one context itself
    (not counting those it inherits).
    """
    if context is None:
        return sum(
            c.live for cid in kb.context_ids() if (c := kb.context_index(cid)) is not None
        )
    c = kb.context_index(_read_context(kb, context))
    return 0 if c is None else c.live


def term_count(kb: KB) -> int:
    """How many distinct constants (symbols and literals) the KB knows."""
    return len(kb.terms) - sum(kb._is_var)


def find_terms(kb: KB, search: str, opts: Opts | None = None) -> list[Any]:
    """Terms whose name contains the search string (case-insensitive), sorted by name.

    Use it to find the exact spelling of a constant before asking about it. opts: limit
    (answer at most this many, the first by name).
    """
    o = _opts("find-terms", opts)
    if not isinstance(search, str):
        raise EngineRefusal("bad-argument", "the search must be a string")
    needle = search.casefold()
    limit = o.get("limit")
    terms = kb.terms
    n = len(terms)
    matches = (
        (term_name(terms[i]), i)
        for i in range(n)
        if not kb.is_var(i) and needle in term_name(terms[i]).casefold()
    )
    picked = sorted(matches) if limit is None else heapq.nsmallest(limit, matches)
    return [terms[i] for _, i in picked]


def describe(kb: KB, term: Term, opts: Opts | None = None) -> list[Sentex]:
    """The sentexes that mention a term, in any context and any argument position,
    oldest first. opts: limit (answer at most this many, the oldest).
    """
    o = _opts("describe", opts)
    t = _term(term)
    limit = o.get("limit")
    tid = kb.term_id(t)
    if tid is None:
        return []
    found: set[int] = set()
    heads: list[int] = []
    for cid in kb.context_ids():
        c = kb.context_index(cid)
        if c is None:
            continue
        for pos in range(8):
            v = c.keys.get(tid * 8 + pos)
            if v is None:
                continue
            for h in handles_in(v):
                if h not in found and kb.visible(h):
                    found.add(h)
                    heads.append(h)
    for rule in kb.all_rules():  # nested mentions inside rules
        if rule.handle not in found and _mentions(kb.row(rule.handle), tid):
            found.add(rule.handle)
            heads.append(rule.handle)
    chosen = sorted(heads) if limit is None else heapq.nsmallest(limit, heads)
    return [_sentex(kb, h) for h in chosen]


def _mentions(enc: tuple[Any, ...], tid: int) -> bool:
    return any(x == tid if type(x) is int else _mentions(x, tid) for x in enc)


def lookup(kb: KB, handle: Handle) -> Sentex:
    """The sentex a handle names: its context and sentence."""
    h = _handle(kb, handle)
    if kb._state[h - 1] != LIVE:
        raise EngineRefusal("unknown-handle", f"handle {h} was retracted", handle=h)
    return _sentex(kb, h)


def escalate(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> Iterator[Answer | Cut]:
    """Prove a goal with as few rule steps as possible: tries depth 0, 1, 2 ... until
    some proof answers, the depth ceiling is reached, or the time bound runs out.

    Each answer carries the depth it needed. Ends with a cut record when the time or the
    depth bound stopped it first. opts: max-depth (the deepest level to try, default the
    ceiling 12), max-ms.
    """
    o = _opts("escalate", opts)
    sent = _sentence(goal, "goal")
    _check_arity(kb, sent)
    cids = _visible_contexts(kb, context)
    clock = _clock("escalate", o)
    return _escalate(kb, sent, cids, o.get("max-depth", MAX_DEPTH_CEILING), clock)


def _escalate(
    kb: KB, sent: tuple[Any, ...], cids: tuple[int, ...] | None, top: int, clock: Clock
) -> Iterator[Answer | Cut]:
    for depth in range(top + 1):
        got_answer = False
        depth_hit = False
        for rec in _query(kb, sent, cids, depth, clock):
            if isinstance(rec, Answer):
                got_answer = True
                yield rec
            elif rec.reason == "max-ms":
                yield rec
                return
            else:
                depth_hit = True
        if got_answer:
            return
        if not depth_hit:
            return  # the search space is exhausted: deeper cannot help
    yield Cut("max-depth", top, 0)


def kb_integrity(
    kb: KB, context: Context | None = None, opts: Opts | None = None
) -> Iterator[Problem | Cut]:
    """Check the KB's consistency: context inheritance cycles, rules whose conclusion
    has a variable no condition binds, rules with a condition nothing can satisfy, and
    sentences that break a declared (arity pred n). One problem record per finding;
    none means no problem found. opts: max-ms.
    """
    o = _opts("kb-integrity", opts)
    cids = _visible_contexts(kb, context)
    return _integrity(kb, cids, _clock("kb-integrity", o))


def _integrity(kb: KB, cids: tuple[int, ...] | None, clock: Clock) -> Iterator[Problem | Cut]:
    n = 0
    try:
        for cid in _context_ids(kb) if cids is None else cids:
            clock.check()
            if cid in kb.ancestors(cid)[1:] or any(
                cid in kb.ancestors(p) for p in kb.parents(cid)
            ):
                n += 1
                yield Problem("context-cycle", f"{kb.terms[cid]} inherits from itself")
        rules = kb.all_rules() if cids is None else kb.rules_for(-1, cids)
        for rule in rules:
            clock.check()
            bound: set[int] = set()
            for a in rule.antecedents:
                _vars_of(kb, a, bound)
            free: set[int] = set()
            _vars_of(kb, rule.consequent, free)
            if free - bound:
                n += 1
                names = ", ".join(sorted(str(kb.terms[v]) for v in free - bound))
                yield Problem(
                    "unsafe-rule", f"the conclusion's {names} is bound by no condition",
                    (rule.handle,),
                )
            for a in rule.antecedents:
                head = a[0] if type(a[0]) is int and not kb.is_var(a[0]) else None
                if head is None or head == kb.term_id(symbol("different")):
                    continue
                has_fact = next(candidates(kb, (head,), None), None) is not None
                if not has_fact and not kb.rules_for(head, None):
                    n += 1
                    yield Problem(
                        "dead-condition",
                        f"nothing states or concludes {kb.terms[head]}, so the rule never fires",
                        (rule.handle,),
                    )
        arity_id = kb.sid("arity")
        for h in candidates(kb, (arity_id,), None):
            row = kb.row(h)
            if len(row) != 3 or type(row[1]) is not int:
                continue
            want = kb.declared_arity(row[1])
            if want is None:
                continue
            for h2 in candidates(kb, (row[1],), cids):
                clock.check()
                got = len(kb.row(h2)) - 1
                if got != want:
                    n += 1
                    yield Problem(
                        "arity-mismatch",
                        f"{kb.terms[row[1]]} is declared with {want} argument(s), used with {got}",
                        (h2, h),
                    )
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


def _vars_of(kb: KB, enc: Any, out: set[int]) -> None:
    for x in enc:
        if type(x) is int:
            if kb.is_var(x):
                out.add(x)
        else:
            _vars_of(kb, x, out)


# -- unbounded reads ---------------------------------------------------------------


def handles(kb: KB) -> list[int]:
    """Every live handle in the KB, sorted (the whole KB in one vector)."""
    state = bytes(kb._state)
    return [i + 1 for i, s in enumerate(state) if s == LIVE]


def terms(kb: KB) -> list[Any]:
    """Every constant in the KB, sorted by name (the whole vocabulary in one vector)."""
    ts = kb.terms
    return sorted((ts[i] for i in range(len(ts)) if not kb.is_var(i)), key=term_name)


def kb_quality(kb: KB) -> list[Problem]:
    """Audit the whole KB: duplicate sentences within a context, constants mentioned
    once (often a misspelling), predicates used with several arities, empty contexts.
    """
    out: list[Problem] = []
    mentions: dict[int, int] = {}
    arities: dict[int, set[int]] = {}
    for cid in kb.context_ids():
        c = kb.context_index(cid)
        if c is None:
            continue
        seen: dict[tuple[Any, ...], int] = {}
        for h in c.all:
            if not kb.visible(h):
                continue
            row = kb.row(h)
            if row in seen:
                out.append(
                    Problem("duplicate", f"stored twice in {kb.terms[cid]}", (seen[row], h))
                )
            seen[row] = h
            if type(row[0]) is int:
                arities.setdefault(row[0], set()).add(len(row) - 1)
            _count_mentions(row, mentions)
        if c.live == 0:
            out.append(Problem("empty-context", f"{kb.terms[cid]} holds no live sentex"))
    for pred, ns in sorted(arities.items()):
        if len(ns) > 1:
            out.append(
                Problem("mixed-arity", f"{kb.terms[pred]} is used with {sorted(ns)} arguments")
            )
    for tid, k in sorted(mentions.items()):
        if k == 1 and not kb.is_var(tid) and is_symbol(kb.terms[tid]):
            out.append(Problem("single-mention", f"{kb.terms[tid]} is mentioned once"))
    return out


def _count_mentions(enc: tuple[Any, ...], out: dict[int, int]) -> None:
    for x in enc:
        if type(x) is int:
            out[x] = out.get(x, 0) + 1
        else:
            _count_mentions(x, out)


def exposed_clashes(kb: KB) -> list[Problem]:
    """Every sentence asserted both plainly and as (not sentence) where some context
    sees both (the same context, or one that inherits from both). Whole-KB audit.
    """
    not_id = kb.sid("not")
    all_cids = _context_ids(kb)
    seen_by = {cid: set(kb.ancestors(cid)) for cid in all_cids}
    out: list[Problem] = []
    for h in list(candidates(kb, (not_id,), None)):
        row = kb.row(h)
        if len(row) != 2 or type(row[1]) is not tuple:
            continue
        neg_ctx = kb.row_context(h)
        for h2 in candidates(kb, row[1], None):
            if kb.row(h2) != row[1]:
                continue
            pos_ctx = kb.row_context(h2)
            where = [c for c in all_cids if {neg_ctx, pos_ctx} <= seen_by[c]]
            if where:
                out.append(
                    Problem(
                        "clash",
                        f"{_edn_str(kb.to_edn(row[1]))} and its negation are both visible in "
                        + ", ".join(sorted(term_name(kb.terms[c]) for c in where)),
                        (h2, h),
                    )
                )
    return out


# -- writes ------------------------------------------------------------------------


def _write_context(kb: KB, context: Any) -> int:
    return kb.intern(_context_symbol(context))


def _check_rule(kb: KB, sent: tuple[Any, ...], enc: tuple[Any, ...]) -> None:
    if enc[0] == kb.sid("implies") and compile_rule(0, 0, enc, kb.sid("and")) is None:
        raise EngineRefusal(
            "malformed-sentence",
            "a rule is (implies condition conclusion) or (implies (and c1 c2 ...) conclusion)",
        )


def _assert(kb: KB, sentence: Any, cid: int, *, pending: bool = False) -> tuple[int, bool]:
    sent = _sentence(sentence)
    if any(is_symbol(x) and str(x).startswith("?") for x in sent) and sent[0] != symbol(
        "implies"
    ):
        raise EngineRefusal("malformed-sentence", "a stored fact cannot hold a variable")
    _check_arity(kb, sent)
    enc = _encode(kb, sent)
    _check_rule(kb, sent, enc)
    return kb.add(cid, enc, state=PENDING if pending else LIVE)


def assert_sentence(kb: KB, sentence: Sentence, context: Context) -> Handle:
    """Store a sentence in a context; answers its handle (the existing handle when the
    context already holds the same sentence).
    """
    with kb._wlock:
        h, _ = _assert(kb, sentence, _write_context(kb, context))
        return Handle(h)


@_mark_irreversible
def retract(kb: KB, handle: Handle) -> Sentex:
    """Remove a sentex; answers what was removed. Irreversible: re-asserting stores a
    new sentex with a new handle.
    """
    h = _handle(kb, handle)
    cid, enc = kb.retract(h)
    return Sentex(h, kb.terms[cid], kb.to_edn(enc))


def edit(kb: KB, handle: Handle, sentence: Sentence) -> Handle:
    """Replace a sentex's sentence (same context); answers the new handle."""
    with kb._wlock:
        h = _handle(kb, handle)
        sent = _sentence(sentence)
        _check_arity(kb, sent)
        cid = kb.row_context(h)
        if kb._state[h - 1] != LIVE:
            raise EngineRefusal("unknown-handle", f"handle {h} was retracted", handle=h)
        kb.retract(h)
        new, _ = _assert(kb, sent, cid)
        return Handle(new)


def edit_with_consequences(
    kb: KB, handle: Handle, sentence: Sentence, opts: Opts | None = None
) -> Edited:
    """Edit a sentex, retract what forward chaining had derived from it, and chain
    again in its context. opts: max-depth (chaining rounds), max-ms.
    """
    o = _opts("edit-with-consequences", opts)
    with kb._wlock:
        h = _handle(kb, handle)
        cid = kb.row_context(h)
        new = edit(kb, handle, sentence)
        gone: list[int] = []
        frontier = {h}
        while frontier:
            nxt = {
                d
                for d, sup in list(kb._derived.items())
                if frontier.intersection(sup) and kb._state[d - 1] == LIVE
            }
            for d in sorted(nxt):
                kb.retract(d)
                gone.append(d)
            frontier = nxt
        derived = _forward_chain(kb, cid, o, "edit-with-consequences")
        return Edited(h, new, tuple(gone), tuple(s for s in derived if isinstance(s, Sentex)))


def forward_chain(kb: KB, context: Context, opts: Opts | None = None) -> list[Sentex | Cut]:
    """Apply the rules visible in a context to its facts and store every new conclusion
    in that context, round after round until nothing new follows. opts: max-depth
    (rounds, default 6), max-ms.
    """
    o = _opts("forward-chain", opts)
    with kb._wlock:
        return _forward_chain(kb, _write_context(kb, context), o, "forward-chain")


def _forward_chain(kb: KB, cid: int, o: Mapping[str, Any], op: str) -> list[Sentex | Cut]:
    clock = _clock(op, o)
    rounds = o.get("max-depth", DEFAULT_MAX_DEPTH)
    cids = kb.ancestors(cid)
    out: list[Sentex | Cut] = []
    try:
        for _ in range(rounds):
            new = 0
            for rule in kb.rules_for(-1, cids):
                ants, cons = rename(kb, rule)
                search = Search(kb, cids, 0, clock)
                found = []
                for b, support, _u in search.solve(ants, {}, 0, (), 0):
                    c = subst(cons, b)
                    if _ground(c):
                        found.append((c, (rule.handle, *support)))
                for c, support in found:
                    if next(iter(Search(kb, cids, 0, clock).facts(c, {})), None) is not None:
                        continue
                    h, fresh = kb.add(cid, c)
                    if fresh:
                        kb._derived[h] = support
                        out.append(_sentex(kb, h))
                        new += 1
            if not new:
                break
    except ClockOut:
        out.append(Cut("max-ms", clock.budget_ms or 0, len(out)))
    return out


def _ground(p: Any) -> bool:
    return all(_ground(x) if type(x) is tuple else type(x) is int for x in p)


def preview(
    kb: KB, sentences: list[Sentence], context: Context, goal: Sentence, opts: Opts | None = None
) -> list[Answer | Cut]:
    """Answer a query as if some sentences were stored: stores them, runs the query,
    and rolls them back. It holds the single writer and advances the handle counter.
    opts: max-depth, max-ms.
    """
    o = _opts("preview", opts)
    sent = _sentence(goal, "goal")
    with kb._wlock:
        cid = _write_context(kb, context)
        added: list[int] = []
        kb._preview_owner = threading.get_ident()
        try:
            for s in sentences:
                h, fresh = _assert(kb, s, cid, pending=True)
                if fresh:
                    added.append(h)
            _check_arity(kb, sent)
            clock = _clock("preview", o)
            return list(
                _query(kb, sent, kb.ancestors(cid), o.get("max-depth", DEFAULT_MAX_DEPTH), clock)
            )
        finally:
            kb.drop_pending(added)
            kb._preview_owner = None


def clear_caches(kb: KB) -> dict[str, int]:
    """Drop the engine's caches (context ancestry) and reset its measurement counters;
    answers what was dropped.
    """
    with kb._wlock:
        out = {"ancestors": len(kb._ancestors), **kb.stats}
        kb._ancestors = {}
        kb.stats = dict.fromkeys(kb.stats, 0)
        return out


def abduce(kb: KB, goal: Sentence, context: Context, opts: Opts | None = None) -> Abduction:
    """Find hypotheses that would let a goal follow through the rules, and store them in
    a new scratch context that inherits from the given one (drop it with abduce-discard).
    opts: max-depth, max-ms.
    """
    o = _opts("abduce", opts)
    sent = _sentence(goal, "goal")
    _check_arity(kb, sent)
    with kb._wlock:
        cid = _read_context(kb, context)
        cids = kb.ancestors(cid)
        clock = _clock("abduce", o)
        depth = o.get("max-depth", DEFAULT_MAX_DEPTH)
        pat = _pattern(kb, sent)
        try:
            if Search(kb, cids, depth, clock).prove(pat):
                return Abduction(None, (), True)
            hyps = _explain(kb, pat, {}, cids, depth, clock)
        except ClockOut:
            raise EngineRefusal("clock-cut", "abduce ran out of time") from None
        if not hyps:
            return Abduction(None, (), False)
        n = 1 + sum(1 for c in _context_ids(kb) if str(kb.terms[c]).startswith("CxAbduce"))
        while kb.term_id(symbol(f"CxAbduce{n}")) is not None:
            n += 1
        scratch = symbol(f"CxAbduce{n}")
        sid = kb.intern(scratch)
        kb._scratch.add(sid)
        kb.add(sid, (kb.sid("genlCtx"), sid, cid))
        stored = []
        for hyp in hyps:
            h, _ = kb.add(sid, _encode(kb, to_edn(kb, hyp)))
            stored.append(_sentex(kb, h))
        proves = Search(kb, kb.ancestors(sid), depth, Clock(MAX_MS_CEILING)).prove(pat)
        return Abduction(scratch, tuple(stored), proves)


def _explain(
    kb: KB, goal: Any, b: dict[Var, Any], cids: tuple[int, ...], depth: int, clock: Clock
) -> list[Any] | None:
    g = subst(goal, b)
    head = g[0] if type(g[0]) is int else -1
    from vaelii_llm.kb.query import unify

    for rule in kb.rules_for(head, cids):
        clock.check()
        ants, cons = rename(kb, rule)
        b2 = unify(cons, g, b)
        if b2 is None:
            continue
        hyps: list[Any] = []
        todo = list(ants)
        while todo:
            # prove what can be proved first (it binds variables), then assume a
            # ground condition that cannot be proved
            for i, ant in enumerate(todo):
                got = next(iter(Search(kb, cids, depth, clock).solve((ant,), b2, 0, (), 0)), None)
                if got is not None:
                    b2 = got[0]
                    del todo[i]
                    break
            else:
                ground = [
                    i
                    for i, ant in enumerate(todo)
                    if _ground(a := subst(ant, b2)) and not any(type(x) is Foreign for x in a)
                ]
                if not ground:
                    break
                a = subst(todo.pop(ground[0]), b2)
                deeper = _explain(kb, a, b2, cids, depth - 1, clock) if depth > 1 else None
                hyps.extend(deeper if deeper else [a])
        if not todo and hyps:
            return hyps
    return None


@_mark_irreversible
def abduce_discard(kb: KB, context: Context) -> int:
    """Drop a scratch context made by abduce, with every hypothesis in it; answers how
    many sentexes were dropped. Irreversible. Refused for any other context.
    """
    sym = _context_symbol(context)
    with kb._wlock:
        sid = kb.term_id(sym)
        if sid is None or sid not in kb._scratch:
            raise EngineRefusal("not-scratch", f"{sym} is not a scratch context made by abduce")
        c = kb.context_index(sid)
        n = 0
        if c is not None:
            for h in list(c.all):
                if kb._state[h - 1] == LIVE:
                    kb.retract(h)
                    n += 1
        kb._scratch.discard(sid)
        return n


# -- host path, feed, kb-less -------------------------------------------------------


def kb_diff(kb: KB, path: str, context: Context | None = None) -> Diff:
    """Compare the KB with a directory of .edn files on this host: what only the KB
    holds and what only the files hold (optionally one context only).
    """
    from vaelii_llm.kb.io import load_edn

    p = Path(os.fspath(path))
    if not p.is_dir():
        raise EngineRefusal("bad-path", f"{p} is not a directory")
    other = KB()
    for f in sorted(p.glob("*.edn")):
        load_edn(f, into=other)
    only_ctx = None if context is None else _context_symbol(context)

    def pairs(k: KB) -> dict[tuple[Any, Any], int]:
        out: dict[tuple[Any, Any], int] = {}
        for cid in k.context_ids():
            if only_ctx is not None and k.terms[cid] != only_ctx:
                continue
            c = k.context_index(cid)
            if c is None:
                continue
            for h in c.all:
                if k.visible(h):
                    out[(k.terms[cid], k.to_edn(k.row(h)))] = h
        return out

    mine, theirs = pairs(kb), pairs(other)
    return Diff(
        tuple(_sentex(kb, h) for key, h in sorted(mine.items(), key=lambda kv: kv[1])
              if key not in theirs),
        tuple(key for key, h in sorted(theirs.items(), key=lambda kv: kv[1]) if key not in mine),
    )


def changes_since(kb: KB, handle: Handle) -> Iterator[Change]:
    """The changes (asserts and retracts) after the handle counter stood at `handle`,
    oldest first, lazily.
    """
    if type(handle) is not int:
        raise EngineRefusal("bad-argument", "changes-since takes the handle counter, an integer")
    return kb.changes(handle)


def subscribe(kb: KB, callback: Callable[[Change], None]) -> Subscription:
    """Call `callback` with each change as it is committed (on the writer's thread);
    answers a subscription to close.
    """
    return kb.subscribe(callback)


def version() -> str:
    """The embedded engine's version."""
    return VERSION


def op_names() -> list[str]:
    """Every op the engine has, sorted."""
    return sorted(OPS)


OPS: Final[Mapping[str, Callable[..., Any]]] = {
    # reads
    "find-sentexes": find_sentexes,
    "sentexes-in-context": sentexes_in_context,
    "ask?": ask_p,
    "ask": ask,
    "ask-all": ask_all,
    "query": query,
    "query?": query_p,
    "why-not": why_not,
    "types-of": types_of,
    "types": types,
    "contexts": contexts,
    "sentex-count": sentex_count,
    "term-count": term_count,
    "find-terms": find_terms,
    "describe": describe,
    "lookup": lookup,
    "escalate": escalate,
    "kb-integrity": kb_integrity,
    # unbounded reads
    "handles": handles,
    "terms": terms,
    "kb-quality": kb_quality,
    "exposed-clashes": exposed_clashes,
    # writes
    "assert": assert_sentence,
    "retract": retract,
    "edit": edit,
    "edit-with-consequences": edit_with_consequences,
    "forward-chain": forward_chain,
    "preview": preview,
    "clear-caches": clear_caches,
    "abduce": abduce,
    "abduce-discard": abduce_discard,
    # host path
    "kb-diff": kb_diff,
    # feed
    "changes-since": changes_since,
    "subscribe": subscribe,
    # kb-less
    "version": version,
    "op-names": op_names,
}

#: The engine's own write set. clear-caches is not in it: it mutates only the
#: measurement state, and the daemon files it elsewhere (the tools list it themselves).
WRITE_OPS: Final = frozenset(
    {
        "assert",
        "retract",
        "edit",
        "edit-with-consequences",
        "forward-chain",
        "preview",
        "abduce",
        "abduce-discard",
    }
)
KBLESS_OPS: Final = frozenset({"version", "op-names"})
FEED_OPS: Final = frozenset({"changes-since", "subscribe"})
HOST_PATH_OPS: Final = frozenset({"kb-diff"})
UNBOUNDED_OPS: Final = frozenset({"handles", "terms", "kb-quality", "exposed-clashes"})

#: The opts keys each op reads; any other key is refused "unknown-option".
OPT_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "find-sentexes": frozenset({"max-ms"}),
    "sentexes-in-context": frozenset({"max-ms", "inherited"}),
    "ask": frozenset({"max-ms"}),
    "query": frozenset({"max-ms", "max-depth"}),
    "query?": frozenset({"max-ms", "max-depth"}),
    "why-not": frozenset({"max-ms", "max-depth"}),
    "find-terms": frozenset({"limit"}),
    "describe": frozenset({"limit"}),
    "escalate": frozenset({"max-ms", "max-depth"}),
    "kb-integrity": frozenset({"max-ms"}),
    "edit-with-consequences": frozenset({"max-ms", "max-depth"}),
    "forward-chain": frozenset({"max-ms", "max-depth"}),
    "preview": frozenset({"max-ms", "max-depth"}),
    "abduce": frozenset({"max-ms", "max-depth"}),
}

#: Ops the clock holds: they run under MAX_MS_CEILING when the call names no max-ms.
CLOCKED: Final = frozenset(
    {
        "find-sentexes",
        "sentexes-in-context",
        "ask?",
        "ask",
        "ask-all",
        "query",
        "query?",
        "why-not",
        "escalate",
        "kb-integrity",
        "edit-with-consequences",
        "forward-chain",
        "preview",
        "abduce",
    }
)
ACCEPTS_MAX_MS: Final = frozenset(op for op, keys in OPT_KEYS.items() if "max-ms" in keys)
ACCEPTS_MAX_DEPTH: Final = frozenset(
    op for op, keys in OPT_KEYS.items() if "max-depth" in keys
)

