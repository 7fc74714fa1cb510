"""``ask-within`` and ``prove-within``: an ask and a proof under an explicit time budget,
answering what was found and whether the search ran to its end."""

from __future__ import annotations

import time
from typing import Annotated
from typing import Any
from typing import Final

import msgspec
from msgspec import Meta

from vaelii_llm._declare import MAX_LIMIT
from vaelii_llm._declare import READ
from vaelii_llm._declare import ClockOpts
from vaelii_llm._declare import ProofOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ms_since
from vaelii_llm.kb._reads import _query
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import Answer
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import Sentence

__all__ = [
    "ASK_WITHIN",
    "DEFAULT_ANSWERS",
    "PROVE_WITHIN",
    "AskWithinOpts",
    "ProveWithinOpts",
    "Within",
    "ask_within",
    "prove_within",
]

Answers = Annotated[int, Meta(ge=0, le=MAX_LIMIT, description="How many answers to build.")]


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


#: How many answers an ask or a proof within a budget builds when the call names none.
DEFAULT_ANSWERS: Final = 20


class AskWithinOpts(ClockOpts, frozen=True):
    limit: Answers = DEFAULT_ANSWERS


class ProveWithinOpts(ProofOpts, frozen=True):
    limit: Answers = DEFAULT_ANSWERS


ASK_WITHIN: Final = AskWithinOpts()
PROVE_WITHIN: Final = ProveWithinOpts()


@op("ask-within", kind=READ, opts=AskWithinOpts, clocked=True)
def ask_within(
    kb: KB, sentence: Sentence, context: Context, opts: AskWithinOpts = ASK_WITHIN
) -> Within:
    """Ask what is stored, under an explicit time budget: the answers found before the
    budget ran out, and whether the ask ran to its end.

    Like ask: stored facts only, in the context and every context it inherits from, no
    rules; variables start with ?. Example: (isa ?x Spider) in CxNursery. The answer
    says complete true when nothing more could be found, else a cut record names the
    bound that stopped it (max-ms: the budget ran out; limit: that many answers were
    built), with the budget and the time taken. opts: max-ms (the budget), limit
    (answers to build); see the options.
    """
    sent = arg.goal(kb, sentence, "sentence")
    cids = arg.visible_contexts(kb, context)
    return _within(kb, sent, cids, 0, arg.clock(opts), opts.limit, rules=False)


@op("prove-within", kind=READ, opts=ProveWithinOpts, clocked=True)
def prove_within(
    kb: KB, goal: Sentence, context: Context | None = None, opts: ProveWithinOpts = PROVE_WITHIN
) -> Within:
    """Prove a goal from the facts and rules under an explicit time budget: the proofs
    found before the budget ran out, and whether the search ran to its end.

    Like query (backward chaining; without a context, every context's facts and rules).
    Example: (afraidOf ?who Muffet) in CxNursery. complete true means every answer
    within the depth bound is there; otherwise a cut record names the bound that
    stopped it (max-ms, max-depth or limit), with the budget and the time taken.
    opts: max-ms (the budget), max-depth, limit (answers to build); see the options.
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    kb.stats["queries"] += 1
    return _within(kb, sent, cids, opts.max_depth, arg.clock(opts), opts.limit)


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
    out: list[Answer] = []
    cut: Cut | None = None
    for rec in _query(kb, sent, cids, depth, clock):  # query's own answers, deduplicated
        if isinstance(rec, Cut):
            if rules or rec.reason != "max-depth":  # an ask uses no rule: no depth to cut
                cut = Cut(rec.reason, rec.bound, len(out))
        elif len(out) >= limit:
            cut = Cut("limit", limit, len(out))
            break
        else:
            out.append(rec)
    return Within(tuple(out), cut is None, clock.budget_ms or 0, ms_since(t0), cut)
