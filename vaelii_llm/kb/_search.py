"""The engine's reads about proof search itself: status, arguments, trees, strategies.

``query`` answers what follows; the reads here answer how the search went: whether a
goal is proved, refuted, unknown or cut (``query-status``), the arguments for and
against a sentence (``argue``), the search as a tree (``search-tree``), the same goal
under three search strategies (``compare-tacticians``), asks and proofs under an
explicit time budget (``ask-within``, ``prove-within``) and the consistent truth
assignments of a few sentences (``qualitative-scenarios``).

Negation is what the engine stores: ``(not S)`` is an ordinary sentence, stated or
concluded by a rule, so a sentence is *refuted* where ``(not S)`` is proved. A
predicate declared ``(functional P)`` takes one value in its last argument for given
other arguments, so a proof of ``(P a 2)`` argues against ``(P a 4)``.

`Prover` is SLD resolution one state at a time: a state is the goals still to prove
(in frames, the antecedents of the newest rule first, each frame at its rule depth),
the bindings, the support and the depth used. Driven depth-first it makes the same
search, in the same order, as `vaelii_llm.kb._query.Search` (its goal ordering
included); `breadth_first` and `iterative_deepening` drive the same states in other
orders. Every loop checks the cooperative clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta

from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._declare import (
    DEFAULT_MAX_DEPTH,
    MAX_LIMIT,
    READ,
    MaxMs,
    Options,
    ProofOpts,
    op,
)
from vaelii_llm.kb._query import (
    Clock,
    ClockOut,
    Search,
    Var,
    answer_bindings,
    candidates,
    order_goals,
    rename,
    subst,
    to_edn,
    unify,
)
from vaelii_llm.kb._store import KB, symbol
from vaelii_llm.kb._types import Answer, Context, Cut, EngineRefusal, Opts, Sentence

__all__ = [
    "MAX_FRONTIER",
    "MAX_SCENARIO_SENTENCES",
    "Argument",
    "Prover",
    "Scenario",
    "SearchNode",
    "SearchTree",
    "Status",
    "TacticianRun",
    "Within",
    "argue",
    "ask_within",
    "breadth_first",
    "compare_tacticians",
    "depth_first",
    "iterative_deepening",
    "prove_within",
    "qualitative_scenarios",
    "query_status",
    "search_tree",
]

#: The most states breadth-first search keeps waiting; past it the run is cut
#: (``max-frontier``), so a wide search cannot fill the memory before its clock ends.
MAX_FRONTIER: Final = 50_000
#: The most sentences one ``qualitative-scenarios`` call assigns (2^12 assignments).
MAX_SCENARIO_SENTENCES: Final = 12

DEFAULT_ARGUMENTS: Final = 10
DEFAULT_TREE_NODES: Final = 20
DEFAULT_WITHIN: Final = 20


# -- records ---------------------------------------------------------------------------


class Status(msgspec.Struct, frozen=True):
    """Where a goal stands within the bounds.

    ``status``: ``proved``, ``refuted`` (its negation is proved), ``contested`` (both),
    ``unknown`` (the search ran to its end and found neither) or ``cut`` (a bound
    stopped the search before it could tell). ``stopped_by`` names the bound that cut
    some part of the search (``max-depth`` or ``max-ms``) and ``bound`` its value.
    ``proof`` and ``refutation`` are the first proofs found of the goal and of its
    negation.
    """

    goal: tuple[Any, ...]
    status: str
    stopped_by: str | None = None
    bound: int | None = None
    proof: Answer | None = None
    refutation: Answer | None = None


class Argument(msgspec.Struct, frozen=True, tag_field="kind", tag="argument"):
    """One argument about a sentence: a proof, and which side it is on.

    ``side`` is ``for`` or ``against``; ``by`` is ``proof`` (a proof of the sentence),
    ``negation`` (a proof of its negation) or ``functional`` (a proof of another value
    of a functional predicate). ``sentence`` is what was proved, ``support`` the handles
    of the facts and rules used, ``depth`` the rule steps nested.
    """

    side: str
    by: str
    sentence: tuple[Any, ...]
    support: tuple[int, ...]
    depth: int


class SearchNode(msgspec.Struct, frozen=True):
    """One state of the proof search: the goal it works on next.

    ``by`` says how the parent reached it (``goal`` for the root, ``fact`` or ``rule``
    with that sentex's ``handle``, ``builtin`` for a ``(different …)`` test), ``goal``
    the goal selected here (nil once nothing is left to prove), ``waiting`` how many
    more goals wait behind it. ``outcome``: ``answer`` (a proof ends here, its
    ``bindings`` given), ``proved`` (a proof lies below), ``failed`` (nothing below
    proves it), ``max-depth`` (the depth bound stopped it) or ``unexplored`` (the node
    limit or the clock stopped the search before it was finished).
    """

    by: str
    handle: int
    goal: tuple[Any, ...] | None
    waiting: int
    outcome: str
    bindings: dict[Any, Any] | None = None
    children: tuple[SearchNode, ...] = ()


class SearchTree(msgspec.Struct, frozen=True):
    """The search for ``goal`` as a tree, with its size and the bound that cut it."""

    goal: tuple[Any, ...]
    outcome: str
    nodes: int
    answers: int
    cut: Cut | None
    root: SearchNode


class TacticianRun(msgspec.Struct, frozen=True):
    """One search strategy's run on a goal: its first answer, steps and time.

    ``status`` is ``proved``, ``unknown`` (searched to the end, no proof) or ``cut``
    (``cut`` says which bound). ``steps`` counts the states expanded, ``ms`` the time.
    """

    strategy: str
    status: str
    steps: int
    ms: float
    answer: Answer | None = None
    cut: Cut | None = None


class Within(msgspec.Struct, frozen=True):
    """What an ask or a proof found within its time budget.

    ``complete`` is true when the search ran to its end; otherwise ``cut`` says which
    bound stopped it (``max-ms``, ``max-depth`` or ``limit``).
    """

    answers: tuple[Answer, ...]
    complete: bool
    budget_ms: int
    elapsed_ms: float
    cut: Cut | None = None


class Scenario(msgspec.Struct, frozen=True, tag_field="kind", tag="scenario"):
    """One consistent assignment: the sentences taken as true and those as false."""

    true: tuple[tuple[Any, ...], ...]
    false: tuple[tuple[Any, ...], ...]


# -- options ---------------------------------------------------------------------------


class ArgueOpts(ProofOpts, frozen=True):
    limit: Annotated[
        int, Meta(ge=0, le=MAX_LIMIT, description="How many arguments to build on each side.")
    ] = DEFAULT_ARGUMENTS


class TreeOpts(ProofOpts, frozen=True):
    limit: Annotated[
        int, Meta(ge=1, le=MAX_LIMIT, description="How many nodes of the tree to build.")
    ] = DEFAULT_TREE_NODES


class AskWithinOpts(Options, frozen=True):
    max_ms: MaxMs | None = None
    limit: Annotated[int, Meta(ge=0, le=MAX_LIMIT, description="How many answers to build.")] = (
        DEFAULT_WITHIN
    )


class ProveWithinOpts(ProofOpts, frozen=True):
    limit: Annotated[int, Meta(ge=0, le=MAX_LIMIT, description="How many answers to build.")] = (
        DEFAULT_WITHIN
    )


class ScenarioOpts(ProofOpts, frozen=True):
    limit: Annotated[int, Meta(ge=0, le=MAX_LIMIT, description="How many scenarios to build.")] = (
        MAX_LIMIT
    )


# -- the prover ------------------------------------------------------------------------

#: goals still to prove, in frames: ((goals, rule depth), ...), the first frame active
Frames = tuple[tuple[tuple[Any, ...], int], ...]
#: (frames, bindings, support, depth used, trace or None)
State = tuple[Frames, dict[Var, Any], tuple[int, ...], int, tuple[Any, ...] | None]
#: a child state, how it was reached (fact, rule, hypothesis, builtin) and the handle
Step = tuple[State, str, int]


class FrontierFull(Exception):
    """Breadth-first search holds more than `MAX_FRONTIER` waiting states."""


class Prover:
    """SLD resolution over a KB's facts and rules (and optional hypotheses).

    ``hypotheses`` are ground patterns treated as extra stored facts (a scenario's
    assumptions); ``traced`` keeps, in each state, the steps that led to it (goal,
    depth, by, handle), which `vaelii_llm.kb._audits_whole` reads as an explanation.
    ``steps`` counts the states the strategies expanded; ``depth_cuts`` counts the
    states whose rules the depth bound kept from being tried (``depth_hit``: any).
    """

    def __init__(
        self,
        kb: KB,
        cids: tuple[int, ...] | None,
        max_depth: int,
        clock: Clock,
        hypotheses: Sequence[tuple[Any, ...]] = (),
        *,
        traced: bool = False,
    ) -> None:
        self.kb = kb
        self.cids = cids
        self.max_depth = max_depth
        self.clock = clock
        self.hypotheses = tuple(hypotheses)
        self.traced = traced
        self.steps = 0
        self.depth_cuts = 0
        self.different = kb.term_id(symbol("different"))

    @property
    def depth_hit(self) -> bool:
        return self.depth_cuts > 0

    def root(self, goals: tuple[Any, ...]) -> State:
        return (((goals, 0),), {}, (), 0, () if self.traced else None)

    def select(self, state: State) -> tuple[Any, int, Frames]:
        """The goal a state works on next, its depth, and the frames after it."""
        frames, b = state[0], state[1]
        goals, depth = frames[0]
        if len(goals) > 1:
            goals = order_goals(goals, b, self.different)
        rest = goals[1:]
        tail: Frames = (((rest, depth), *frames[1:])) if rest else frames[1:]
        return goals[0], depth, tail

    def expand(self, state: State) -> Iterator[Step]:
        """The children of a state, lazily, in the engine's order: facts, then rules.

        Where the depth bound keeps the rules from being tried, `depth_cuts` counts it.
        """
        kb = self.kb
        clock = self.clock
        _, b, support, used, trace = state
        goal, depth, tail = self.select(state)
        g = subst(goal, b)
        if self.different is not None and g and g[0] == self.different:
            args = g[1:]
            if not any(type(a) is Var for a in args) and len(set(args)) == len(args):
                yield (
                    (tail, b, support, used, _traced(trace, goal, depth, "builtin", 0)),
                    ("builtin"),
                    0,
                )
            return
        for h in candidates(kb, g, self.cids):
            clock.check()
            got = unify(g, kb.row(h), b)
            if got is not None:
                yield (
                    (tail, got, (*support, h), used, _traced(trace, goal, depth, "fact", h)),
                    ("fact"),
                    h,
                )
        for i, hyp in enumerate(self.hypotheses):
            got = unify(g, hyp, b)
            if got is not None:
                yield (
                    (tail, got, support, used, _traced(trace, goal, depth, "hypothesis", 0)),
                    ("hypothesis"),
                    i + 1,
                )
        head = g[0] if g and type(g[0]) is int else -1
        rules = kb.rules_for(head, self.cids)
        if not rules:
            return
        if depth >= self.max_depth:
            self.depth_cuts += 1
            return
        for rule in rules:
            clock.check()
            kb.stats["inferences"] += 1
            ants, cons = rename(kb, rule)
            got = unify(cons, g, b)
            if got is None:
                continue
            frames: Frames = ((ants, depth + 1), *tail)
            step = _traced(trace, goal, depth, "rule", rule.handle)
            yield (
                (frames, got, (*support, rule.handle), max(used, depth + 1), step),
                ("rule"),
                rule.handle,
            )


def _traced(
    trace: tuple[Any, ...] | None, goal: Any, depth: int, by: str, handle: int
) -> tuple[Any, ...] | None:
    return None if trace is None else (*trace, (goal, depth, by, handle))


def depth_first(prover: Prover, root: State) -> Iterator[State]:
    """The answer states of the search, depth-first (the engine's own order)."""
    clock = prover.clock
    stack: list[Iterator[Step]] = [iter(((root, "goal", 0),))]
    while stack:
        clock.check()
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            continue
        state = nxt[0]
        if not state[0]:
            yield state
            continue
        prover.steps += 1
        stack.append(prover.expand(state))


def breadth_first(prover: Prover, root: State) -> Iterator[State]:
    """The answer states of the search, breadth-first: fewest resolution steps first.

    Raises `FrontierFull` past `MAX_FRONTIER` waiting states.
    """
    clock = prover.clock
    queue: deque[State] = deque((root,))
    while queue:
        clock.check()
        state = queue.popleft()
        if not state[0]:
            yield state
            continue
        prover.steps += 1
        for step in prover.expand(state):
            queue.append(step[0])
            if len(queue) > MAX_FRONTIER:
                raise FrontierFull


def iterative_deepening(
    kb: KB,
    cids: tuple[int, ...] | None,
    goals: tuple[Any, ...],
    top: int,
    clock: Clock,
    provers: list[Prover],
) -> Iterator[State]:
    """Depth-first to depth 0, 1, 2 … `top`: the answers of the first depth that has one.

    Each depth's prover is appended to `provers` (for its steps and depth bound).
    Stops when a depth answers, when a depth ran to its end without meeting its bound
    (deeper cannot help), or at `top`.
    """
    for depth in range(top + 1):
        prover = Prover(kb, cids, depth, clock)
        provers.append(prover)
        found = False
        for state in depth_first(prover, prover.root(goals)):
            found = True
            yield state
        if found or not prover.depth_hit:
            return


# -- helpers over the arguments ---------------------------------------------------------


def _goal(kb: KB, x: Any, what: str = "goal") -> tuple[Any, ...]:
    sent = arg.sentence(x, what)
    arg.check_arity(kb, sent)
    return sent


def _answer(kb: KB, names: Mapping[str, Var], state: State) -> Answer:
    kb.stats["realized"] += 1
    return Answer(answer_bindings(kb, names, state[1]), state[2], state[3])


def _is_ground(p: Any) -> bool:
    return all(_is_ground(x) if type(x) is tuple else type(x) is not Var for x in p)


def _negation(kb: KB, pat: tuple[Any, ...]) -> tuple[Any, ...]:
    """``(not S)`` for S, and S for ``(not S)``."""
    not_id = kb.sid("not")
    if len(pat) == 2 and pat[0] == not_id and type(pat[1]) is tuple:
        return tuple(pat[1])
    return (not_id, pat)


def _functional(kb: KB, pred: Any, cids: tuple[int, ...] | None) -> bool:
    """Whether a ``(functional pred)`` declaration is visible in `cids`."""
    fid = kb.term_id(symbol("functional"))
    if fid is None or type(pred) is not int:
        return False
    return any(kb.row(h) == (fid, pred) for h in candidates(kb, (fid, pred), cids))


def _other_value(pat: tuple[Any, ...]) -> tuple[tuple[Any, ...], Var]:
    """`pat` with its last argument replaced by a fresh variable."""
    v = Var("?other")
    return (*pat[:-1], v), v


def _ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


# -- query-status --------------------------------------------------------------------


@op("query-status", kind=READ, opts=ProofOpts, clocked=True)
def query_status(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> Status:
    """Where a goal stands: proved, refuted, contested, unknown, or cut by a bound.

    Example: (isa Moby Fish) in CxWell is refuted (the KB states (not (isa Moby Fish)));
    in CxFolklore it is contested (folk belief states it too). A goal is refuted when
    its negation (not goal) is proved; only a goal without variables can be refuted.
    unknown means the search ran to its end within the bounds and proved neither; cut
    means a bound stopped it first, and stopped-by says which (max-depth or max-ms) with
    the bound's value. The first proof (and refutation) found is included with its
    support handles. opts: max-depth (default 6), max-ms.
    """
    o = arg.options(query_status, opts)
    sent = _goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(query_status, o)
    depth: int = o.get("max-depth", DEFAULT_MAX_DEPTH)
    kb.stats["queries"] += 1
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    proof: Answer | None = None
    refutation: Answer | None = None
    depth_hit = False
    try:
        search = Search(kb, cids, depth, clock)
        for b, support, used in search.solve((pat,), {}, 0, (), 0):
            proof = Answer(answer_bindings(kb, names, b), support, used)
            break
        depth_hit = search.depth_hit and proof is None
        if _is_ground(pat):
            neg_names: dict[str, Var] = {}
            neg = _negation(kb, pat)
            against = Search(kb, cids, depth, clock)
            for b, support, used in against.solve((neg,), {}, 0, (), 0):
                refutation = Answer(answer_bindings(kb, neg_names, b), support, used)
                break
            depth_hit = depth_hit or (against.depth_hit and refutation is None)
    except ClockOut:
        budget = clock.budget_ms or 0
        status = "proved" if proof is not None else "cut"
        return Status(sent, status, "max-ms", budget, proof, refutation)
    if proof is not None and refutation is not None:
        return Status(sent, "contested", None, None, proof, refutation)
    if proof is not None:
        return Status(sent, "proved", None, None, proof)
    if refutation is not None:
        return Status(sent, "refuted", None, None, None, refutation)
    if depth_hit:
        return Status(sent, "cut", "max-depth", depth)
    return Status(sent, "unknown")


# -- argue -----------------------------------------------------------------------------


@op("argue", kind=READ, opts=ArgueOpts, clocked=True)
def argue(
    kb: KB, sentence: Sentence, context: Context | None = None, opts: Opts | None = None
) -> Iterator[Argument | Cut]:
    """The arguments for and against a sentence: each a distinct proof, lazily.

    For: every distinct proof of the sentence (different facts or rules). Against: the
    proofs of its negation (not sentence), and, when the sentence's predicate is
    declared (functional P), the proofs of another value in its last argument (a proof
    of (hasLegs MissMuffet 2) argues against (hasLegs MissMuffet 4)). Only a sentence
    without variables has arguments against. Each argument gives its side (for or
    against), what it proves, the support handles (read them with lookup) and the rule
    depth. The arguments end with a cut record when the limit, the depth bound or the
    time bound stopped them. opts: limit (arguments per side, default 10, at most
    100), max-depth (default 6), max-ms.
    """
    o = arg.options(argue, opts)
    sent = arg.sentence(sentence)
    arg.check_arity(kb, sent)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(argue, o)
    depth = o.get("max-depth", DEFAULT_MAX_DEPTH)
    pat = arg.pattern(kb, sent, {})
    plans: list[_Plan] = [("for", "proof", pat, None)]
    if _is_ground(pat):
        plans.append(("against", "negation", _negation(kb, pat), None))
        if len(pat) > 2 and _functional(kb, pat[0], cids):
            other, v = _other_value(pat)
            plans.append(("against", "functional", other, (v, pat[-1])))
    return _argue(kb, plans, cids, depth, clock, o["limit"])


#: (side, by, goal, (variable, value) when the goal must give another value)
_Plan = tuple[str, str, tuple[Any, ...], tuple[Var, Any] | None]


def _argue(
    kb: KB,
    plans: list[_Plan],
    cids: tuple[int, ...] | None,
    depth: int,
    clock: Clock,
    limit: int,
) -> Iterator[Argument | Cut]:
    n = 0
    limited = False
    depth_hit = False
    per_side: dict[str, int] = {}
    try:
        for side, by, goal, other in plans:
            search = Search(kb, cids, depth, clock)
            seen: set[tuple[int, ...]] = set()
            if per_side.get(side, 0) >= limit:
                limited = True
                continue
            for b, support, used in search.solve((goal,), {}, 0, (), 0):
                if other is not None and subst(other[0], b) == other[1]:
                    continue  # the same value: no clash
                if support in seen:
                    continue
                if per_side.get(side, 0) >= limit:
                    limited = True
                    break
                seen.add(support)
                per_side[side] = per_side.get(side, 0) + 1
                n += 1
                kb.stats["realized"] += 1
                yield Argument(side, by, to_edn(kb, subst(goal, b)), support, used)
            depth_hit = depth_hit or search.depth_hit
    except ClockOut:
        yield Cut("max-ms", clock.budget_ms or 0, n)
        return
    if limited:
        yield Cut("limit", limit, n)
    elif depth_hit:
        yield Cut("max-depth", depth, n)


# -- search-tree -----------------------------------------------------------------------


class _Node:
    __slots__ = ("bindings", "by", "children", "depth_cut", "done", "goal", "handle", "waiting")

    def __init__(self, by: str, handle: int, goal: tuple[Any, ...] | None, waiting: int) -> None:
        self.by = by
        self.handle = handle
        self.goal = goal
        self.waiting = waiting
        self.children: list[_Node] = []
        self.bindings: dict[Any, Any] | None = None
        self.done = False  # every child was tried
        self.depth_cut = False


@op("search-tree", kind=READ, opts=TreeOpts, clocked=True)
def search_tree(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> SearchTree:
    """The proof search for a goal as a tree: the goals tried, the facts and rules used
    and what came of each, in the order query searches.

    Each node is one step of the search: the goal worked on next (with how many more
    wait behind it), reached from its parent by a fact or a rule (its handle) or a
    (different ...) test. A node's outcome is answer (a proof ends there; its bindings
    given), proved (a proof lies below), failed (nothing below proves it), max-depth
    (the depth bound kept a rule from being tried) or unexplored (the node limit or
    the time bound stopped the search first; cut says which). Example: (afraidOf
    MissMuffet ?y) in CxNursery. opts: limit (nodes to build, default 20, at most 100),
    max-depth (default 6), max-ms.
    """
    o = arg.options(search_tree, opts)
    sent = _goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(search_tree, o)
    depth = o.get("max-depth", DEFAULT_MAX_DEPTH)
    limit: int = o["limit"]
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    prover = Prover(kb, cids, depth, clock)
    state = prover.root((pat,))
    root = _node(kb, prover, state, "goal", 0)
    count, answers = 1, 0
    cut: Cut | None = None
    stack: list[tuple[_Node, Iterator[Step]]] = [(root, prover.expand(state))]
    try:
        while stack:
            clock.check()
            node, children = stack[-1]
            cuts = prover.depth_cuts
            step = next(children, None)
            if prover.depth_cuts != cuts:
                node.depth_cut = True
            if step is None:
                node.done = True
                stack.pop()
                continue
            if count >= limit:
                cut = Cut("limit", limit, count)
                break
            child_state, by, handle = step
            child = _node(kb, prover, child_state, by, handle)
            count += 1
            node.children.append(child)
            if child.goal is None:
                child.done = True
                child.bindings = answer_bindings(kb, names, child_state[1])
                answers += 1
                continue
            stack.append((child, prover.expand(child_state)))
    except ClockOut:
        cut = Cut("max-ms", clock.budget_ms or 0, count)
    frozen = _freeze(root)
    return SearchTree(sent, frozen.outcome, count, answers, cut, frozen)


def _node(kb: KB, prover: Prover, state: State, by: str, handle: int) -> _Node:
    if not state[0]:
        return _Node(by, handle, None, 0)
    goal, _, tail = prover.select(state)
    waiting = sum(len(goals) for goals, _ in tail)
    return _Node(by, handle, to_edn(kb, subst(goal, state[1])), waiting)


def _freeze(node: _Node) -> SearchNode:
    children = tuple(_freeze(c) for c in node.children)
    outcomes = {c.outcome for c in children}
    if node.goal is None:
        outcome = "answer"
    elif outcomes & {"answer", "proved"}:
        outcome = "proved"
    elif not node.done or "unexplored" in outcomes:
        outcome = "unexplored"
    elif node.depth_cut or "max-depth" in outcomes:
        outcome = "max-depth"
    else:
        outcome = "failed"
    return SearchNode(
        node.by, node.handle, node.goal, node.waiting, outcome, node.bindings, children
    )


# -- compare-tacticians ----------------------------------------------------------------

STRATEGIES: Final = ("depth-first", "breadth-first", "iterative-deepening")


@op("compare-tacticians", kind=READ, opts=ProofOpts, clocked=True)
def compare_tacticians(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> list[TacticianRun]:
    """The same goal under three search strategies, each to its first answer: how many
    search steps and how much time each took, and what it answered.

    depth-first is query's own order (facts first, then rules, deepest first);
    breadth-first expands every state of one level before the next, so it finds the
    proof with the fewest resolution steps; iterative-deepening searches depth-first
    to rule depth 0, then 1, 2 ... so it finds the proof with the fewest nested rule
    steps, re-searching the shallow levels each time. The time bound is shared out
    equally: each strategy gets a third of max-ms. A run's status is proved, unknown
    (searched to its end, no proof) or cut (its cut record says which bound: max-ms,
    max-depth, or max-frontier when breadth-first had more than 50,000 states
    waiting). opts: max-depth (default 6), max-ms.
    """
    o = arg.options(compare_tacticians, opts)
    sent = _goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    budget = arg.clock(compare_tacticians, o).budget_ms
    share = None if budget is None else max(1, budget // len(STRATEGIES))
    depth = o.get("max-depth", DEFAULT_MAX_DEPTH)
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    kb.stats["queries"] += 1
    return [_run(kb, name, cids, pat, names, depth, Clock(share)) for name in STRATEGIES]


def _run(
    kb: KB,
    strategy: str,
    cids: tuple[int, ...] | None,
    pat: tuple[Any, ...],
    names: Mapping[str, Var],
    depth: int,
    clock: Clock,
) -> TacticianRun:
    t0 = time.perf_counter()
    provers: list[Prover] = []
    found: State | None = None

    def steps() -> int:
        return sum(p.steps for p in provers)

    try:
        if strategy == "iterative-deepening":
            ids = iterative_deepening(kb, cids, (pat,), depth, clock, provers)
            found = next(ids, None)
            hit = bool(provers) and provers[-1].depth_hit
        else:
            prover = Prover(kb, cids, depth, clock)
            provers.append(prover)
            run = depth_first if strategy == "depth-first" else breadth_first
            found = next(run(prover, prover.root((pat,))), None)
            hit = prover.depth_hit
    except ClockOut:
        cut = Cut("max-ms", clock.budget_ms or 0, 0)
        return TacticianRun(strategy, "cut", steps(), _ms_since(t0), None, cut)
    except FrontierFull:
        cut = Cut("max-frontier", MAX_FRONTIER, 0)
        return TacticianRun(strategy, "cut", steps(), _ms_since(t0), None, cut)
    if found is not None:
        answer = _answer(kb, names, found)
        return TacticianRun(strategy, "proved", steps(), _ms_since(t0), answer)
    if hit:
        cut = Cut("max-depth", depth, 0)
        return TacticianRun(strategy, "cut", steps(), _ms_since(t0), None, cut)
    return TacticianRun(strategy, "unknown", steps(), _ms_since(t0))


# -- ask-within and prove-within ----------------------------------------------------------


@op("ask-within", kind=READ, opts=AskWithinOpts, clocked=True)
def ask_within(kb: KB, sentence: Sentence, context: Context, opts: Opts | None = None) -> Within:
    """Ask what is stored, under an explicit time budget: the answers found before the
    budget ran out, and whether the ask ran to its end.

    Like ask: stored facts only, in the context and every context it inherits from, no
    rules; variables start with ?. Example: (isa ?x Spider) in CxNursery. The answer
    says complete true when nothing more could be found, else a cut record names the
    bound that stopped it (max-ms: the budget ran out; limit: that many answers were
    built), with the budget and the time taken. opts: max-ms (the budget; the ceiling
    10,000 when none is named), limit (answers to build, default 20, at most 100).
    """
    o = arg.options(ask_within, opts)
    sent = _goal(kb, sentence, "sentence")
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(ask_within, o)
    return _within(kb, sent, cids, 0, clock, o["limit"], rules=False)


@op("prove-within", kind=READ, opts=ProveWithinOpts, clocked=True)
def prove_within(
    kb: KB, goal: Sentence, context: Context | None = None, opts: Opts | None = None
) -> Within:
    """Prove a goal from the facts and rules under an explicit time budget: the proofs
    found before the budget ran out, and whether the search ran to its end.

    Like query (backward chaining; without a context, every context's facts and rules).
    Example: (afraidOf ?who Muffet) in CxNursery. complete true means every answer
    within the depth bound is there; otherwise a cut record names the bound that
    stopped it (max-ms, max-depth or limit), with the budget and the time taken.
    opts: max-ms (the budget; the ceiling 10,000 when none is named), max-depth
    (default 6), limit (answers to build, default 20, at most 100).
    """
    o = arg.options(prove_within, opts)
    sent = _goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(prove_within, o)
    kb.stats["queries"] += 1
    return _within(kb, sent, cids, o.get("max-depth", DEFAULT_MAX_DEPTH), clock, o["limit"])


def _within(
    kb: KB,
    sent: tuple[Any, ...],
    cids: tuple[int, ...] | None,
    depth: int,
    clock: Clock,
    limit: int,
    *,
    rules: bool = True,
) -> Within:
    t0 = time.perf_counter()
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    search = Search(kb, cids, depth, clock)
    out: list[Answer] = []
    seen: set[tuple[Any, ...]] = set()
    cut: Cut | None = None
    budget = clock.budget_ms or 0
    try:
        for b, support, used in search.solve((pat,), {}, 0, (), 0):
            key = tuple(subst(v, b) for v in names.values())
            if any(type(x) is Var for x in key):
                key = (*key, len(seen))  # an answer that leaves a variable open is kept
            if key in seen:
                continue
            if len(out) >= limit:
                cut = Cut("limit", limit, len(out))
                break
            seen.add(key)
            kb.stats["realized"] += 1
            out.append(Answer(answer_bindings(kb, names, b), support, used))
    except ClockOut:
        cut = Cut("max-ms", budget, len(out))
    if cut is None and rules and search.depth_hit:
        cut = Cut("max-depth", depth, len(out))
    return Within(tuple(out), cut is None, budget, _ms_since(t0), cut)


# -- qualitative-scenarios ----------------------------------------------------------------


def _sentence_list(x: Any) -> list[tuple[Any, ...]]:
    """The sentences argument: a list of sentences, or one EDN string holding a list."""
    if isinstance(x, str):
        x = arg.parse_edn(x, "sentence")
        if type(x) is tuple and x and type(x[0]) is not tuple:
            x = [x]  # one sentence given alone
    if isinstance(x, tuple | list) and all(isinstance(s, str | tuple) for s in x):
        return [arg.sentence(s) for s in x]
    raise EngineRefusal(
        "bad-argument",
        'sentences is a list of sentences, e.g. ["(isa Humpty Horse)", "(canFly Humpty)"] '
        'or "((isa Humpty Horse) (canFly Humpty))"',
    )


@op("qualitative-scenarios", kind=READ, opts=ScenarioOpts, clocked=True)
def qualitative_scenarios(
    kb: KB, sentences: list[Sentence], context: Context, opts: Opts | None = None
) -> Iterator[Scenario | Cut]:
    """The consistent ways a few open sentences could be true or false together, given
    what the context holds: one scenario per consistent true/false assignment, lazily.

    An assignment is consistent when, taking its true sentences as stated (and the
    negation (not s) of each false one), no false sentence is then proved from the
    facts and rules, no true sentence is refuted (its negation proved), and no
    functional predicate gets two values. Example: (isa Humpty Horse) and (afraidOf
    Humpty Humpty) in CxNursery: Humpty fears horses, so the scenario where Humpty is a
    horse but not afraid of himself is inconsistent; the other three are scenarios.
    sentences is a list of sentence strings, e.g. ["(isa Humpty Horse)", "(afraidOf
    Humpty Humpty)"], or one string holding an EDN list of them; they must hold no
    variables; at most 12. Scenarios list every assignment with
    the first sentence true before those with it false. They end with a cut record when
    the limit, the depth bound (a check could not be finished) or the time bound
    stopped them. opts: limit (scenarios to build, at most 100), max-depth (default
    6), max-ms.
    """
    o = arg.options(qualitative_scenarios, opts)
    sents = _sentence_list(sentences)
    if not sents:
        raise EngineRefusal("bad-argument", "qualitative-scenarios needs at least one sentence")
    if len(sents) > MAX_SCENARIO_SENTENCES:
        raise EngineRefusal(
            "over-ceiling",
            f"{len(sents)} sentences are over the ceiling of {MAX_SCENARIO_SENTENCES}",
            key="sentences",
            value=len(sents),
            ceiling=MAX_SCENARIO_SENTENCES,
        )
    for s in sents:
        arg.check_arity(kb, s)
    cids = arg.visible_contexts(kb, context)
    pats = [arg.pattern(kb, s, {}) for s in sents]
    if not all(_is_ground(p) for p in pats):
        raise EngineRefusal("bad-argument", "each sentence of a scenario must hold no variables")
    clock = arg.clock(qualitative_scenarios, o)
    checker = _Consistency(kb, cids, o.get("max-depth", DEFAULT_MAX_DEPTH), clock)
    return _scenarios(kb, sents, pats, checker, o["limit"])


class _Consistency:
    """Checks a partial assignment: a prover per check, the hypotheses its facts."""

    def __init__(self, kb: KB, cids: tuple[int, ...] | None, depth: int, clock: Clock) -> None:
        self.kb = kb
        self.cids = cids
        self.depth = depth
        self.clock = clock
        self.depth_hit = False
        self.functional: dict[Any, bool] = {}

    def _proves(self, hyps: Sequence[tuple[Any, ...]], goal: tuple[Any, ...], other: Any) -> bool:
        prover = Prover(self.kb, self.cids, self.depth, self.clock, hyps)
        try:
            for state in depth_first(prover, prover.root((goal,))):
                if other is None or subst(other[1], state[1]) != other[0]:
                    return True
            return False
        finally:
            self.depth_hit = self.depth_hit or prover.depth_hit

    def consistent(self, trues: list[tuple[Any, ...]], falses: list[tuple[Any, ...]]) -> bool:
        kb = self.kb
        hyps = [*trues, *(_negation(kb, f) for f in falses)]
        for f in falses:
            if self._proves(hyps, f, None):
                return False
        for t in trues:
            if self._proves(hyps, _negation(kb, t), None):
                return False
            if len(t) > 2:
                fn = self.functional.get(t[0])
                if fn is None:
                    fn = self.functional[t[0]] = _functional(kb, t[0], self.cids)
                if fn:
                    pat, v = _other_value(t)
                    if self._proves(hyps, pat, (t[-1], v)):
                        return False
        return True


def _scenarios(
    kb: KB,
    sents: list[tuple[Any, ...]],
    pats: list[tuple[Any, ...]],
    checker: _Consistency,
    limit: int,
) -> Iterator[Scenario | Cut]:
    # depth-first over partial assignments, true before false; a partial assignment
    # that is already inconsistent is dropped with every extension of it (more
    # hypotheses only ever prove more)
    n = 0
    stack: list[tuple[int, tuple[bool, ...]]] = [(0, ())]
    try:
        while stack:
            checker.clock.check()
            i, values = stack.pop()
            trues = [p for p, v in zip(pats, values, strict=False) if v]
            falses = [p for p, v in zip(pats, values, strict=False) if not v]
            if values and not checker.consistent(trues, falses):
                continue
            if i == len(pats):
                if n >= limit:
                    yield Cut("limit", limit, n)
                    return
                n += 1
                kb.stats["realized"] += 1
                yield Scenario(
                    tuple(s for s, v in zip(sents, values, strict=True) if v),
                    tuple(s for s, v in zip(sents, values, strict=True) if not v),
                )
                continue
            stack.append((i + 1, (*values, False)))
            stack.append((i + 1, (*values, True)))
    except ClockOut:
        yield Cut("max-ms", checker.clock.budget_ms or 0, n)
        return
    if checker.depth_hit:
        yield Cut("max-depth", checker.depth, n)
