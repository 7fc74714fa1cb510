"""The embedded engine's bounded reads, and its change feed.

Reads return lazy generators where an answer can be large (checked against the clock
as they are consumed) and plain values or lists where the answer is small or built
whole. A read the clock or the depth bound stopped ends with a `Cut` record. Each
op's name, kind, options and clock are declared at its definition (`op`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import Final
from typing import overload

from vaelii_llm._declare import CLOCK
from vaelii_llm._declare import FEED
from vaelii_llm._declare import LIMIT
from vaelii_llm._declare import LIST
from vaelii_llm._declare import MAX_DEPTH_CEILING
from vaelii_llm._declare import PROOF
from vaelii_llm._declare import READ
from vaelii_llm._declare import ClockOpts
from vaelii_llm._declare import LimitOpts
from vaelii_llm._declare import ListOpts
from vaelii_llm._declare import MaxDepth
from vaelii_llm._declare import ProofOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import answer_bindings
from vaelii_llm.kb._query import candidates
from vaelii_llm.kb._query import rename
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import to_edn
from vaelii_llm.kb._query import unify
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import KEY_POSITIONS
from vaelii_llm.kb._store import LIVE
from vaelii_llm.kb._store import Subscription
from vaelii_llm.kb._store import term_name
from vaelii_llm.kb._types import Answer
from vaelii_llm.kb._types import Change
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import ContextInfo
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.kb._types import Handle
from vaelii_llm.kb._types import Sentence
from vaelii_llm.kb._types import Sentex
from vaelii_llm.kb._types import Term
from vaelii_llm.kb._types import WhyNot

__all__ = [
    "ESCALATE",
    "EscalateOpts",
    "ask",
    "ask_all",
    "ask_p",
    "changes_since",
    "contexts",
    "describe",
    "escalate",
    "find_sentexes",
    "find_terms",
    "lookup",
    "query",
    "query_p",
    "sentex_count",
    "sentexes_in_context",
    "subscribe",
    "term_count",
    "types",
    "types_of",
    "why_not",
]


class EscalateOpts(ClockOpts, frozen=True):
    """A time budget and the deepest level to try: the ceiling when none is named."""

    max_depth: MaxDepth = MAX_DEPTH_CEILING


ESCALATE: Final = EscalateOpts()

# -- reads -------------------------------------------------------------------------


@op("find-sentexes", kind=READ, opts=ClockOpts, clocked=True)
def find_sentexes(
    kb: KB, pattern: Sentence, context: Context | None = None, opts: ClockOpts = CLOCK
) -> Iterator[Sentex | Cut]:
    """Find stored sentences matching a pattern, e.g. (isa ?x Spider) or (fears Muffet ?y).

    Variables start with ?. With a context, searches that context and every context it
    inherits from; without one, searches every context. Stored facts only: no rules are
    applied (use query for what follows from rules). Each result is a sentex: its
    handle, context and sentence. opts: max-ms (time bound; the results stop with a
    cut record when it runs out).
    """
    sent = arg.goal(kb, pattern, "pattern")
    cids = arg.visible_contexts(kb, context)
    return _find(kb, arg.pattern(kb, sent), cids, arg.clock(opts))


def _find(kb: KB, pat: Any, cids: tuple[int, ...] | None, clock: Clock) -> Iterator[Sentex | Cut]:
    n = 0
    try:
        for h in candidates(kb, pat, cids):
            clock.check()
            if unify(pat, kb.row(h), {}) is not None:
                n += 1
                yield arg.sentex(kb, h)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


@op("sentexes-in-context", kind=READ, opts=ListOpts, clocked=True)
def sentexes_in_context(kb: KB, context: Context, opts: ListOpts = LIST) -> Iterator[Sentex | Cut]:
    """List the sentexes stored in one context, oldest first.

    Only the context's own sentexes unless opts has inherited: true (then those of the
    contexts it inherits from follow). opts: max-ms, inherited.
    """
    cid = arg.read_context(kb, context)
    cids = kb.ancestors(cid) if opts.inherited else (cid,)
    return _in_context(kb, cids, arg.clock(opts))


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
                    yield arg.sentex(kb, h)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


@op("ask?", kind=READ, clocked=True)
def ask_p(kb: KB, sentence: Sentence, context: Context) -> bool:
    """Is this sentence stored (directly) in the context or a context it inherits from?

    Answers true or false. Variables are allowed: (isa ?x Spider) asks whether anything
    is stored as a spider. No rules are applied; use query? for what follows from rules.
    """
    sent = arg.goal(kb, sentence, "sentence")
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock()
    try:
        for _ in _find(kb, arg.pattern(kb, sent), cids, clock):
            return not isinstance(_, Cut)
    except ClockOut:
        pass
    if clock.expired():
        raise EngineRefusal("clock-cut", "ask? ran out of time before it could answer")
    return False


@op("ask", kind=READ, opts=ClockOpts, clocked=True)
def ask(
    kb: KB, sentence: Sentence, context: Context, opts: ClockOpts = CLOCK
) -> Iterator[Answer | Cut]:
    """The variable bindings under which the sentence is stored in the context.

    Example: (fears ?who Muffet) in CxNursery answers {?who Miss-Muffet} with the
    handle that says so. Stored facts only, the context's ancestors included; no rules.
    opts: max-ms.
    """
    sent = arg.goal(kb, sentence, "sentence")
    cids = arg.visible_contexts(kb, context)
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    return _ask(kb, (pat,), names, cids, arg.clock(opts))


def _ask(
    kb: KB,
    pats: tuple[Any, ...],
    names: dict[str, Var],
    cids: tuple[int, ...] | None,
    clock: Clock,
) -> Iterator[Answer | Cut]:
    n = 0
    try:
        for state in Prover(kb, cids, 0, clock).solve(pats):
            n += 1
            kb.stats["realized"] += 1
            yield Answer(answer_bindings(kb, names, state[1]), state[2], 0)
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)


@op("ask-all", kind=READ, clocked=True)
def ask_all(kb: KB, context: Context, *sentences: Sentence) -> Iterator[Answer | Cut]:
    """Bindings that make every one of the sentences stored at once (a conjunction).

    Takes any number of sentences, so it has no single signature: a Python caller's
    convenience, not a tool.
    """
    sents = [arg.sentence(s) for s in sentences]
    for s in sents:
        arg.check_arity(kb, s)
    cids = arg.visible_contexts(kb, context)
    names: dict[str, Var] = {}
    pats = tuple(arg.pattern(kb, s, names) for s in sents)
    return _ask(kb, pats, names, cids, arg.clock())


@op("query", kind=READ, opts=ProofOpts, clocked=True)
def query(
    kb: KB, goal: Sentence, context: Context | None = None, opts: ProofOpts = PROOF
) -> Iterator[Answer | Cut]:
    """Prove a goal from the stored facts and rules (backward chaining); answers lazily.

    Example: (afraid-of ?who Muffet) in CxNursery. Each answer gives the bindings of
    the goal's variables and the handles of the facts and rules that support it. Without
    a context, facts and rules of every context are used. opts: max-depth (how many rule
    steps may nest), max-ms (time bound); see the options. When the time bound or the depth
    bound stops the search, the answers end with a cut record saying which: no cut
    record and no answers means nothing proves the goal.
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(opts)
    kb.stats["queries"] += 1
    return _query(kb, sent, cids, opts.max_depth, clock)


def _query(
    kb: KB,
    sent: tuple[Any, ...],
    cids: tuple[int, ...] | None,
    max_depth: int,
    clock: Clock,
    exclude: int | None = None,
) -> Iterator[Answer | Cut]:
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    search = Prover(kb, cids, max_depth, clock, exclude=exclude)
    seen: set[tuple[Any, ...]] = set()
    n = 0
    try:
        for state in search.solve((pat,)):
            b = state[1]
            key = tuple(subst(v, b) for v in names.values())
            if any(type(x) is Var for x in key):
                key = (*key, len(seen))  # unbound answers are never merged
            if key in seen:
                continue
            seen.add(key)
            n += 1
            kb.stats["realized"] += 1
            yield Answer(answer_bindings(kb, names, b), state[2], state[3])
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)
        return
    if search.depth_hit:
        yield Cut("max-depth", max_depth, n)


@op("query?", kind=READ, opts=ProofOpts, clocked=True)
def query_p(
    kb: KB, goal: Sentence, context: Context | None = None, opts: ProofOpts = PROOF
) -> bool:
    """Does the goal follow from the stored facts and rules? Answers true or false.

    Like query, but stops at the first proof. false means no proof within max-depth;
    if the time bound (max-ms) runs out first, the call is refused with type clock-cut
    instead of answering false. opts: max-depth, max-ms (see the options).
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(opts)
    kb.stats["queries"] += 1
    for rec in _query(kb, sent, cids, opts.max_depth, clock):
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
    kb: KB, sentence: Sentence, context: Context, opts: ProofOpts = PROOF
) -> Iterator[WhyNot | Cut]: ...


# the handle shape's slot also takes the sentence
@op("why-not", kind=READ, opts=ProofOpts, clocked=True)  # type: ignore[misc]
def why_not(
    kb: KB,
    handle: Handle | Sentence | None = None,
    context: Context | None = None,
    opts: ProofOpts = PROOF,
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
        if context is not None or opts != PROOF:
            raise EngineRefusal(
                "bad-argument",
                "why-not with a handle takes nothing else: (handle) or (sentence, context, opts)",
            )
        h = arg.handle(kb, target)
        sent = kb.to_edn(kb.row(h))
        cids: tuple[int, ...] | None = kb.ancestors(kb.row_context(h))
        exclude = h
    else:
        if context is None:
            raise EngineRefusal(
                "bad-argument", "why-not with a sentence needs a context: (sentence, context)"
            )
        sent = arg.goal(kb, target, "sentence")
        cids = arg.visible_contexts(kb, context)
    return _why_not(kb, sent, cids, opts.max_depth, arg.clock(opts), exclude)


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
        pat = arg.pattern(kb, sent)
        holds = Prover(kb, cids, max_depth, clock, exclude=exclude).prove(pat)
        head = pat[0] if type(pat[0]) is int else -1
        any_rule = False
        for rule in kb.rules_for(head, cids):
            if rule.handle == exclude:
                continue
            clock.check()
            ants, cons = rename(kb, rule)
            b = unify(cons, pat, {})
            if b is None:
                continue
            any_rule = True
            missing: list[tuple[Any, ...]] = []
            supported: list[tuple[Any, ...]] = []
            sub = Prover(kb, cids, max(max_depth - 1, 0), clock, exclude=exclude)
            todo = list(ants)
            while todo:  # prove what can be proved first, so the missing ones are bound
                for i, ant in enumerate(todo):
                    got = next(sub.solve((ant,), b), None)
                    if got is not None:
                        b = got[1]
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


@op("types-of", kind=READ)
def types_of(kb: KB, term: Term, context: Context | None = None) -> list[Any]:
    """The types of a term: what it is stored as an instance of (isa term Type), plus
    every supertype reached through (genls Sub Super). Sorted by name.

    With a context, only what that context and its ancestors hold.
    """
    t = arg.term(term)
    cids = arg.visible_contexts(kb, context)
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


@op("types", kind=READ)
def types(kb: KB) -> list[Any]:
    """Every type in the KB: each term used as a type in (isa x Type) or (genls A B).

    Built whole and sorted by name.
    """
    return sorted((kb.terms[i] for i in kb.type_ids()), key=term_name)


@op("contexts", kind=READ)
def contexts(kb: KB) -> list[ContextInfo]:
    """Every context: its name, the contexts it inherits from, and how many sentexes it
    holds itself. Built whole and sorted by name.
    """
    out = []
    for cid in arg.context_ids(kb):
        c = kb.context_index(cid)
        out.append(
            ContextInfo(
                kb.terms[cid],
                tuple(kb.terms[p] for p in kb.parents(cid)),
                c.live if c is not None else 0,
            )
        )
    return sorted(out, key=lambda ci: term_name(ci.name))


@op("sentex-count", kind=READ)
def sentex_count(kb: KB, context: Context | None = None) -> int:
    """How many sentexes are stored: in the whole KB, or in one context itself
    (not counting those it inherits).
    """
    if context is None:
        return sum(c.live for cid in kb.context_ids() if (c := kb.context_index(cid)) is not None)
    c = kb.context_index(arg.read_context(kb, context))
    return 0 if c is None else c.live


@op("term-count", kind=READ)
def term_count(kb: KB) -> int:
    """How many distinct constants (symbols and literals) the KB knows."""
    return len(kb.terms) - sum(kb._is_var)


@op("find-terms", kind=READ, opts=LimitOpts)
def find_terms(kb: KB, search: str, opts: LimitOpts = LIMIT) -> list[Any]:
    """Terms whose name contains the search string (case-insensitive), sorted by name.

    Use it to find the exact spelling of a constant before asking about it. opts: limit
    (answer at most this many, the first by name).
    """
    if not isinstance(search, str):
        raise EngineRefusal("bad-argument", "the search must be a string")
    needle = search.casefold()
    terms = kb.terms
    n = len(terms)
    matches = (
        (term_name(terms[i]), i)
        for i in range(n)
        if not kb.is_var(i) and needle in term_name(terms[i]).casefold()
    )
    return [terms[i] for _, i in heapq.nsmallest(opts.limit, matches)]


@op("describe", kind=READ, opts=LimitOpts)
def describe(kb: KB, term: Term, opts: LimitOpts = LIMIT) -> list[Sentex]:
    """The sentexes that mention a term, in any context and any argument position,
    oldest first. opts: limit (answer at most this many, the oldest).
    """
    t = arg.term(term)
    tid = kb.term_id(t)
    if tid is None:
        return []
    found: set[int] = set()
    heads: list[int] = []
    for cid in kb.context_ids():
        c = kb.context_index(cid)
        if c is None:
            continue
        for pos in range(KEY_POSITIONS):
            for h in c.mentioning(tid, pos):
                if h not in found and kb.visible(h):
                    found.add(h)
                    heads.append(h)
    for rule in kb.all_rules():  # nested mentions inside rules
        if rule.handle not in found and _mentions(kb.row(rule.handle), tid):
            found.add(rule.handle)
            heads.append(rule.handle)
    return [arg.sentex(kb, h) for h in heapq.nsmallest(opts.limit, heads)]


def _mentions(enc: tuple[Any, ...], tid: int) -> bool:
    return any(x == tid if type(x) is int else _mentions(x, tid) for x in enc)


@op("lookup", kind=READ, opts=ClockOpts, clocked=True)
def lookup(kb: KB, handle: Handle, opts: ClockOpts = CLOCK) -> Sentex:
    """The sentex a handle names: its context and sentence.

    opts: max-ms, the budget for reading and printing it (see the options); the
    lookup itself is one index step.
    """
    h = arg.handle(kb, handle)
    if kb._state[h - 1] != LIVE:
        raise EngineRefusal("unknown-handle", f"handle {h} was retracted", handle=h)
    return arg.sentex(kb, h)


@op("escalate", kind=READ, opts=EscalateOpts, clocked=True)
def escalate(
    kb: KB, goal: Sentence, context: Context | None = None, opts: EscalateOpts = ESCALATE
) -> Iterator[Answer | Cut]:
    """Prove a goal with as few rule steps as possible: tries depth 0, 1, 2 ... until
    some proof answers, the depth ceiling is reached, or the time bound runs out.

    Each answer carries the depth it needed. Ends with a cut record when the time or the
    depth bound stopped it first. opts: max-depth (the deepest level to try), max-ms (see
    the options).
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    return _escalate(kb, sent, cids, opts.max_depth, arg.clock(opts))


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


@op("changes-since", kind=FEED)
def changes_since(kb: KB, handle: Handle) -> Iterator[Change]:
    """The changes (asserts and retracts) after the handle counter stood at `handle`,
    oldest first, lazily.
    """
    if type(handle) is not int:
        raise EngineRefusal("bad-argument", "changes-since takes the handle counter, an integer")
    return kb.changes(handle)


@op("subscribe", kind=FEED)
def subscribe(kb: KB, callback: Callable[[Change], None]) -> Subscription:
    """Call `callback` with each change as it is committed (on the writer's thread);
    answers a subscription to close.
    """
    return kb.subscribe(callback)
