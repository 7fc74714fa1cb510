"""Where a goal stands and what argues for and against it: ``query-status`` and ``argue``.

Negation is what the engine stores: ``(not S)`` is an ordinary sentence, stated or
concluded by a rule, so a sentence is *refuted* where ``(not S)`` is proved. A
predicate declared ``(functional P)`` takes one value in its last argument for given
other arguments, so a proof of ``(P a 2)`` argues against ``(P a 4)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated
from typing import Any
from typing import Final

import msgspec
from msgspec import Meta

from vaelii_llm._declare import MAX_LIMIT
from vaelii_llm._declare import PROOF
from vaelii_llm._declare import READ
from vaelii_llm._declare import ProofOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import answer_bindings
from vaelii_llm.kb._query import is_functional
from vaelii_llm.kb._query import is_ground
from vaelii_llm.kb._query import negation
from vaelii_llm.kb._query import other_value
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import to_edn
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import Answer
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import Sentence

__all__ = ["ARGUE", "ArgueOpts", "Argument", "Status", "argue", "query_status"]


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


class ArgueOpts(ProofOpts, frozen=True):
    limit: Annotated[
        int, Meta(ge=0, le=MAX_LIMIT, description="How many arguments to build on each side.")
    ] = 10


ARGUE: Final = ArgueOpts()


@op("query-status", kind=READ, opts=ProofOpts, clocked=True)
def query_status(
    kb: KB, goal: Sentence, context: Context | None = None, opts: ProofOpts = PROOF
) -> Status:
    """Where a goal stands: proved, refuted, contested, unknown, or cut by a bound.

    Example: (isa Moby Fish) in CxWell is refuted (the KB states (not (isa Moby Fish)));
    in CxFolklore it is contested (folk belief states it too). A goal is refuted when
    its negation (not goal) is proved; only a goal without variables can be refuted.
    unknown means the search ran to its end within the bounds and proved neither; cut
    means a bound stopped it first, and stopped-by says which (max-depth or max-ms) with
    the bound's value. The first proof (and refutation) found is included with its
    support handles. opts: max-depth, max-ms (see the options).
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(opts)
    depth = opts.max_depth
    kb.stats["queries"] += 1
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    proof: Answer | None = None
    refutation: Answer | None = None
    depth_hit = False
    try:
        search = Prover(kb, cids, depth, clock)
        for state in search.solve((pat,)):
            proof = Answer(answer_bindings(kb, names, state[1]), state[2], state[3])
            break
        depth_hit = search.depth_hit and proof is None
        if is_ground(pat):
            against = Prover(kb, cids, depth, clock)
            for state in against.solve((negation(kb, pat),)):
                refutation = Answer({}, state[2], state[3])
                break
            depth_hit = depth_hit or (against.depth_hit and refutation is None)
    except ClockOut:
        status = "proved" if proof is not None else "cut"
        return Status(sent, status, "max-ms", opts.max_ms, proof, refutation)
    if proof is not None and refutation is not None:
        return Status(sent, "contested", None, None, proof, refutation)
    if proof is not None:
        return Status(sent, "proved", None, None, proof)
    if refutation is not None:
        return Status(sent, "refuted", None, None, None, refutation)
    if depth_hit:
        return Status(sent, "cut", "max-depth", depth)
    return Status(sent, "unknown")


@op("argue", kind=READ, opts=ArgueOpts, clocked=True)
def argue(
    kb: KB, sentence: Sentence, context: Context | None = None, opts: ArgueOpts = ARGUE
) -> Iterator[Argument | Cut]:
    """The arguments for and against a sentence: each a distinct proof, lazily.

    For: every distinct proof of the sentence (different facts or rules). Against: the
    proofs of its negation (not sentence), and, when the sentence's predicate is
    declared (functional P), the proofs of another value in its last argument (a proof
    of (hasLegs MissMuffet 2) argues against (hasLegs MissMuffet 4)). Only a sentence
    without variables has arguments against. Each argument gives its side (for or
    against), what it proves, the support handles (read them with lookup) and the rule
    depth. The arguments end with a cut record when the limit, the depth bound or the
    time bound stopped them. opts: limit (arguments per side), max-depth, max-ms (see
    the options).
    """
    sent = arg.goal(kb, sentence, "sentence")
    cids = arg.visible_contexts(kb, context)
    pat = arg.pattern(kb, sent, {})
    plans: list[_Plan] = [("for", "proof", pat, None)]
    if is_ground(pat):
        plans.append(("against", "negation", negation(kb, pat), None))
        if len(pat) > 2 and is_functional(kb, pat[0], cids):
            other, v = other_value(pat)
            plans.append(("against", "functional", other, (v, pat[-1])))
    return _argue(kb, plans, cids, opts.max_depth, arg.clock(opts), opts.limit)


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
            search = Prover(kb, cids, depth, clock)
            seen: set[tuple[int, ...]] = set()
            if per_side.get(side, 0) >= limit:
                limited = True
                continue
            for state in search.solve((goal,)):
                b, support, used = state[1], state[2], state[3]
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
