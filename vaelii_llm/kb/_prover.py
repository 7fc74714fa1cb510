"""The engine's one backward-chaining prover: SLD resolution, one state at a time.

A state is the goals still to prove (in frames, the antecedents of the newest rule
first, each frame at its rule depth), the bindings, the support and the depth used.
`Prover.expand` gives a state's children in the engine's order (stored facts, then
hypotheses, then rules, the goal with the most bound arguments worked on first);
`depth_first` drives them as every read's own search (`Prover.solve`), and
`breadth_first` and `iterative_deepening` drive the same states in other orders.
Every loop checks the cooperative clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Final

from vaelii_llm.kb._query import Bindings
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import answer_bindings
from vaelii_llm.kb._query import candidates
from vaelii_llm.kb._query import order_goals
from vaelii_llm.kb._query import rename
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import unify
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._types import Answer

__all__ = [
    "MAX_FRONTIER",
    "Frames",
    "FrontierFull",
    "Prover",
    "State",
    "Step",
    "answer",
    "breadth_first",
    "depth_first",
    "iterative_deepening",
]

#: The most states breadth-first search keeps waiting; past it the run is cut
#: (``max-frontier``), so a wide search cannot fill the memory before its clock ends.
MAX_FRONTIER: Final = 50_000

#: goals still to prove, in frames: ((goals, rule depth), ...), the first frame active
Frames = tuple[tuple[tuple[Any, ...], int], ...]
#: (frames, bindings, support, depth used, trace or None)
State = tuple[Frames, Bindings, tuple[int, ...], int, tuple[Any, ...] | None]
#: a child state, how it was reached (fact, rule, hypothesis, builtin) and the handle
Step = tuple[State, str, int]


class FrontierFull(Exception):
    """Breadth-first search holds more than `MAX_FRONTIER` waiting states."""

    def __init__(self, bound: int) -> None:
        super().__init__(bound)
        self.bound = bound


class Prover:
    """SLD resolution over a KB's facts and rules (and optional hypotheses).

    ``hypotheses`` are ground patterns treated as extra stored facts (a scenario's
    assumptions); ``exclude`` is a handle the search must do without (a fact or a
    rule); ``traced`` keeps, in each state, the steps that led to it (goal, depth, by,
    handle), which `vaelii_llm.kb._audits_whole` reads as an explanation. ``steps``
    counts the states the strategies expanded; ``depth_cuts`` counts the states whose
    rules the depth bound kept from being tried (``depth_hit``: any).
    """

    __slots__ = (
        "cids",
        "clock",
        "depth_cuts",
        "different",
        "exclude",
        "hypotheses",
        "kb",
        "max_depth",
        "steps",
        "traced",
    )

    def __init__(
        self,
        kb: KB,
        cids: tuple[int, ...] | None,
        max_depth: int,
        clock: Clock,
        hypotheses: Sequence[tuple[Any, ...]] = (),
        *,
        exclude: int | None = None,
        traced: bool = False,
    ) -> None:
        self.kb = kb
        self.cids = cids
        self.max_depth = max_depth
        self.clock = clock
        self.hypotheses = tuple(hypotheses)
        self.exclude = exclude
        self.traced = traced
        self.steps = 0
        self.depth_cuts = 0
        self.different = kb.term_id(symbol("different"))

    @property
    def depth_hit(self) -> bool:
        return self.depth_cuts > 0

    def root(self, goals: tuple[Any, ...], b: Bindings | None = None) -> State:
        """The state that has `goals` to prove under bindings `b`."""
        return (((goals, 0),), {} if b is None else b, (), 0, () if self.traced else None)

    def solve(self, goals: tuple[Any, ...], b: Bindings | None = None) -> Iterator[State]:
        """Every proof of all `goals` under `b`, depth-first (the engine's order)."""
        return depth_first(self, self.root(goals, b))

    def prove(self, goal: tuple[Any, ...]) -> bool:
        """Whether some proof of `goal` is found."""
        return next(self.solve((goal,)), None) is not None

    def select(self, state: State) -> tuple[Any, int, Frames]:
        """The goal a state works on next, its depth, and the frames after it."""
        frames, b = state[0], state[1]
        goals, depth = frames[0]
        if len(goals) > 1:
            goals = order_goals(goals, b, self.different)
        rest = goals[1:]
        tail: Frames = ((rest, depth), *frames[1:]) if rest else frames[1:]
        return goals[0], depth, tail

    def expand(self, state: State) -> Iterator[Step]:
        """The children of a state, lazily, in the engine's order: facts, then
        hypotheses, then rules. Where the depth bound keeps the rules from being
        tried, `depth_cuts` counts it."""
        kb = self.kb
        clock = self.clock
        exclude = self.exclude
        _, b, support, used, trace = state
        goal, depth, tail = self.select(state)
        g = subst(goal, b)
        if self.different is not None and g and g[0] == self.different:
            args = g[1:]  # decided on ground arguments only
            if not any(type(a) is Var for a in args) and len(set(args)) == len(args):
                yield (
                    (tail, b, support, used, _traced(trace, goal, depth, "builtin", 0)),
                    "builtin",
                    0,
                )
            return
        for h in candidates(kb, g, self.cids):
            clock.check()
            if h == exclude:
                continue
            got = unify(g, kb.row(h), b)
            if got is not None:
                step = None if trace is None else (*trace, (goal, depth, "fact", h))
                yield (tail, got, (*support, h), used, step), "fact", h
        for i, hyp in enumerate(self.hypotheses):
            got = unify(g, hyp, b)
            if got is not None:
                step = _traced(trace, goal, depth, "hypothesis", 0)
                yield (tail, got, support, used, step), "hypothesis", i + 1
        head = g[0] if g and type(g[0]) is int else -1
        rules = kb.rules_for(head, self.cids)
        if not rules:
            return
        if depth >= self.max_depth:
            self.depth_cuts += 1
            return
        deeper = depth + 1
        for rule in rules:
            if rule.handle == exclude:
                continue
            clock.check()
            kb.stats["inferences"] += 1
            ants, cons = rename(kb, rule)
            got = unify(cons, g, b)
            if got is None:
                continue
            frames: Frames = ((ants, deeper), *tail)
            step = _traced(trace, goal, depth, "rule", rule.handle)
            yield (
                (frames, got, (*support, rule.handle), max(used, deeper), step),
                "rule",
                rule.handle,
            )


def _traced(
    trace: tuple[Any, ...] | None, goal: Any, depth: int, by: str, handle: int
) -> tuple[Any, ...] | None:
    return None if trace is None else (*trace, (goal, depth, by, handle))


def answer(kb: KB, names: Mapping[str, Var], state: State) -> Answer:
    """An answer state as the `Answer` record a read yields."""
    kb.stats["realized"] += 1
    return Answer(answer_bindings(kb, names, state[1]), state[2], state[3])


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
                raise FrontierFull(MAX_FRONTIER)


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
        for state in prover.solve(goals):
            found = True
            yield state
        if found or not prover.depth_hit:
            return
