"""``compare-tacticians``: one goal under the three search strategies of the prover."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from vaelii_llm._declare import PROOF
from vaelii_llm._declare import READ
from vaelii_llm._declare import ProofOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._prover import FrontierFull
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._prover import State
from vaelii_llm.kb._prover import answer
from vaelii_llm.kb._prover import breadth_first
from vaelii_llm.kb._prover import depth_first
from vaelii_llm.kb._prover import iterative_deepening
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import ms_since
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import Answer
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import Sentence

__all__ = ["STRATEGIES", "TacticianRun", "compare_tacticians"]

STRATEGIES: Final = ("depth-first", "breadth-first", "iterative-deepening")


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


@op("compare-tacticians", kind=READ, opts=ProofOpts, clocked=True)
def compare_tacticians(
    kb: KB, goal: Sentence, context: Context | None = None, opts: ProofOpts = PROOF
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
    max-depth, or max-frontier when breadth-first had more states waiting than it
    keeps, the bound given in the record). opts: max-depth, max-ms (see the options).
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    whole = arg.clock(opts).budget_ms or 0  # shared out equally
    share = max(1, whole // len(STRATEGIES))
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    kb.stats["queries"] += 1
    return [_run(kb, name, cids, pat, names, opts.max_depth, Clock(share)) for name in STRATEGIES]


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
        return TacticianRun(strategy, "cut", steps(), ms_since(t0), None, cut)
    except FrontierFull as full:
        cut = Cut("max-frontier", full.bound, 0)
        return TacticianRun(strategy, "cut", steps(), ms_since(t0), None, cut)
    if found is not None:
        return TacticianRun(strategy, "proved", steps(), ms_since(t0), answer(kb, names, found))
    if hit:
        cut = Cut("max-depth", depth, 0)
        return TacticianRun(strategy, "cut", steps(), ms_since(t0), None, cut)
    return TacticianRun(strategy, "unknown", steps(), ms_since(t0))
