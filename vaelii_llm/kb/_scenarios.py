"""``qualitative-scenarios``: the consistent truth assignments of a few sentences."""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence
from typing import Annotated
from typing import Any
from typing import Final

import msgspec
from msgspec import Meta

from vaelii_llm._declare import MAX_LIMIT
from vaelii_llm._declare import READ
from vaelii_llm._declare import ProofOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import is_functional
from vaelii_llm.kb._query import is_ground
from vaelii_llm.kb._query import negation
from vaelii_llm.kb._query import other_value
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.kb._types import Sentence

__all__ = [
    "MAX_SCENARIO_SENTENCES",
    "SCENARIOS",
    "Scenario",
    "ScenarioOpts",
    "qualitative_scenarios",
]

#: The most sentences one ``qualitative-scenarios`` call assigns (2^n assignments).
MAX_SCENARIO_SENTENCES: Final = 12


class Scenario(msgspec.Struct, frozen=True, tag_field="kind", tag="scenario"):
    """One consistent assignment: the sentences taken as true and those as false."""

    true: tuple[tuple[Any, ...], ...]
    false: tuple[tuple[Any, ...], ...]


class ScenarioOpts(ProofOpts, frozen=True):
    limit: Annotated[int, Meta(ge=0, le=MAX_LIMIT, description="How many scenarios to build.")] = (
        MAX_LIMIT
    )


SCENARIOS: Final = ScenarioOpts()


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
    kb: KB,
    sentences: Annotated[list[Sentence], Meta(max_length=MAX_SCENARIO_SENTENCES)],
    context: Context,
    opts: ScenarioOpts = SCENARIOS,
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
    variables, and a few at most (more are refused over-ceiling, the refusal naming
    the ceiling). Scenarios list every assignment with the first sentence true before
    those with it false. They end with a cut record when the limit, the depth bound (a
    check could not be finished) or the time bound stopped them. opts: limit
    (scenarios to build), max-depth, max-ms (see the options).
    """
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
    if not all(is_ground(p) for p in pats):
        raise EngineRefusal("bad-argument", "each sentence of a scenario must hold no variables")
    checker = _Consistency(kb, cids, opts.max_depth, arg.clock(opts))
    return _scenarios(kb, sents, pats, checker, opts.limit)


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
            for state in prover.solve((goal,)):
                if other is None or subst(other[1], state[1]) != other[0]:
                    return True
            return False
        finally:
            self.depth_hit = self.depth_hit or prover.depth_hit

    def consistent(self, trues: list[tuple[Any, ...]], falses: list[tuple[Any, ...]]) -> bool:
        kb = self.kb
        hyps = [*trues, *(negation(kb, f) for f in falses)]
        for f in falses:
            if self._proves(hyps, f, None):
                return False
        for t in trues:
            if self._proves(hyps, negation(kb, t), None):
                return False
            if len(t) > 2:
                fn = self.functional.get(t[0])
                if fn is None:
                    fn = self.functional[t[0]] = is_functional(kb, t[0], self.cids)
                if fn:
                    pat, v = other_value(t)
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
