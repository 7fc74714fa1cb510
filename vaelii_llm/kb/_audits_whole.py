"""The whole-KB audits and the full explanation: reads no call can bound.

Each runs under no clock and builds its whole answer, however large the KB, so each
is declared ``unbounded`` and never becomes a tool. The bounded reads that answer the
narrower questions are ``why-not``, ``search-tree`` and ``escalate`` (one goal, held
to the clock) and ``kb-integrity`` (arity, rule safety, clocked).

What the audits check is what the KB declares about its predicates:

* ``(arity P n)``: every sentence of P has n arguments;
* ``(argIsa P i T)``: the i-th argument of every sentence of P is provably an
  instance of T (``(isa arg T)`` follows, the rules included), in the sentence's own
  context;
* ``(functional P)``: P gives one value in its last argument for given other
  arguments, in every context's view.

Proofs here go as deep as the engine's depth ceiling, the deepest any bounded
read may go; recursive rules need some bound to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from vaelii_llm._declare import MAX_DEPTH_CEILING
from vaelii_llm._declare import UNBOUNDED
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import candidates
from vaelii_llm.kb._query import is_ground
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import to_edn
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._store import term_name
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Problem
from vaelii_llm.kb._types import Sentence

__all__ = [
    "Explanation",
    "Level",
    "Step",
    "all_functional_at_instant_violations",
    "all_specified_violations",
    "explain_levels",
]


class Step(msgspec.Struct, frozen=True):
    """One step of a proof: the goal, as the proof bound it, and what proved it.

    ``by`` is ``fact`` (the stored sentex ``handle``), ``rule`` (the rule ``handle``,
    whose conditions are the next level's steps) or ``builtin`` (a ``(different …)``
    test, handle 0).
    """

    sentence: tuple[Any, ...]
    by: str
    handle: int


class Level(msgspec.Struct, frozen=True):
    """The steps of one proof at one rule depth (0: the goal itself)."""

    level: int
    steps: tuple[Step, ...]


class Explanation(msgspec.Struct, frozen=True):
    """One proof of a goal, every level of it: ``proof`` numbers it from 1."""

    proof: int
    bindings: dict[Any, Any]
    depth: int
    levels: tuple[Level, ...]


@op("explain-levels", kind=UNBOUNDED)
def explain_levels(kb: KB, sentence: Sentence, context: Context | None = None) -> list[Explanation]:
    """Every proof of a sentence, each explained level by level in full, under no clock.

    Level 0 is the goal and the fact or rule that proves it; level k holds the
    conditions of the rules used at level k-1 and what proves each of them, down to
    stored facts. Every proof within the depth ceiling is built, in query's order,
    however many there are: an unbounded read.
    """
    sent = arg.sentence(sentence)
    arg.check_arity(kb, sent)
    cids = arg.visible_contexts(kb, context)
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    prover = Prover(kb, cids, MAX_DEPTH_CEILING, Clock(None), traced=True)
    out: list[Explanation] = []
    for state in prover.solve((pat,)):
        b = state[1]
        by_level: dict[int, list[Step]] = {}
        for goal, depth, by, handle in state[4] or ():
            step = Step(to_edn(kb, subst(goal, b)), by, handle)
            by_level.setdefault(depth, []).append(step)
        levels = tuple(Level(d, tuple(steps)) for d, steps in sorted(by_level.items()))
        bindings = {symbol(n): to_edn(kb, subst(v, b)) for n, v in names.items()}
        kb.stats["realized"] += 1
        out.append(Explanation(len(out) + 1, bindings, state[3], levels))
    return out


# -- declarations ------------------------------------------------------------------------


def _declarations(kb: KB, pred_name: str, arity: int) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Live ``(pred_name …)`` sentexes of the given length: (handle, row)."""
    pid = kb.term_id(symbol(pred_name))
    if pid is None:
        return
    for h in candidates(kb, (pid,), None):
        row = kb.row(h)
        if row[0] == pid and len(row) == arity + 1:
            yield h, row


def _sees(kb: KB, cid: int, decl: int) -> bool:
    """Whether context `cid` sees what context `decl` holds."""
    return decl in kb.ancestors(cid)


def _show(kb: KB, enc: Any) -> str:
    return arg.edn_str(to_edn(kb, enc))


# -- all-specified-violations -------------------------------------------------------------


@op("all-specified-violations", kind=UNBOUNDED)
def all_specified_violations(kb: KB) -> list[Problem]:
    """Every sentence in the KB that breaks what the KB specifies about its predicate,
    checked whole under no clock.

    Two kinds of specification: (arity P n), P takes n arguments (an arity-violation
    otherwise), and (argIsa P i T), the i-th argument of P is an instance of T (an
    arg-isa-violation when (isa argument T) does not follow, rules included, in the
    sentence's own context). Each problem names the sentence's handle and the
    declaration's. An unbounded audit: the bounded kb-integrity checks arities.
    """
    out: list[Problem] = []
    for decl, row in _declarations(kb, "arity", 2):
        want = kb.terms[row[2]] if type(row[2]) is int else None
        if type(want) is not int or type(row[1]) is not int:
            continue
        for h in candidates(kb, (row[1],), None):
            got = kb.row(h)
            if got[0] == row[1] and len(got) - 1 != want:
                out.append(
                    Problem(
                        "arity-violation",
                        f"{_show(kb, got)} has {len(got) - 1} argument(s); "
                        f"{kb.terms[row[1]]} is declared with {want}",
                        (h, decl),
                    )
                )
    isa = kb.sid("isa")
    for decl, row in _declarations(kb, "argIsa", 3):
        pred, place, kind = row[1], kb.terms[row[2]] if type(row[2]) is int else None, row[3]
        if type(pred) is not int or type(place) is not int or place < 1:
            continue
        decl_ctx = kb.row_context(decl)
        for h in candidates(kb, (pred,), None):
            got = kb.row(h)
            cid = kb.row_context(h)
            if got[0] != pred or not _sees(kb, cid, decl_ctx):
                continue
            if len(got) <= place:
                continue  # an arity problem, reported above when declared
            goal = (isa, got[place], kind)
            search = Prover(kb, kb.ancestors(cid), MAX_DEPTH_CEILING, Clock(None))
            if not search.prove(goal):
                out.append(
                    Problem(
                        "arg-isa-violation",
                        f"{_show(kb, got)} in {term_name(kb.terms[cid])}: argument {place} "
                        f"{_show(kb, got[place])} is not known to be {_show(kb, kind)}",
                        (h, decl),
                    )
                )
    return out


# -- all-functional-at-instant-violations -----------------------------------------------


@op("all-functional-at-instant-violations", kind=UNBOUNDED)
def all_functional_at_instant_violations(kb: KB) -> list[Problem]:
    """Every place where a functional predicate takes two values at once, across the
    whole KB and every context, under no clock.

    (functional P) declares that P gives one value in its last argument for given
    other arguments. This engine keeps no time index, so an instant is the KB as it
    stands seen from one context: a violation is two or more values that follow (from
    facts and rules) for the same other arguments in some context's view. Each is
    reported once, in the most general context that sees it, with the support handles
    of one proof of each value. An unbounded audit: the bounded argue shows the
    clashing values for one sentence.
    """
    out: list[Problem] = []
    reported: set[tuple[Any, ...]] = set()
    contexts = sorted(arg.context_ids(kb), key=lambda c: (len(kb.ancestors(c)), c))
    for decl, row in _declarations(kb, "functional", 1):
        pred = row[1]
        if type(pred) is not int:
            continue
        decl_ctx = kb.row_context(decl)
        for size in sorted(_arities(kb, pred)):
            if size < 2:
                continue
            pat = (pred, *(Var(f"?a{i}") for i in range(1, size + 1)))
            for cid in contexts:
                if not _sees(kb, cid, decl_ctx):
                    continue
                values: dict[tuple[Any, ...], dict[Any, tuple[int, ...]]] = {}
                prover = Prover(kb, kb.ancestors(cid), MAX_DEPTH_CEILING, Clock(None))
                for state in prover.solve((pat,)):
                    got = subst(pat, state[1])
                    if not is_ground(got):
                        continue
                    values.setdefault(got[1:-1], {}).setdefault(got[-1], state[2])
                for key, vals in values.items():
                    if len(vals) < 2:
                        continue
                    seen = (pred, key, frozenset(vals))
                    if seen in reported:
                        continue
                    reported.add(seen)
                    support = tuple(dict.fromkeys(h for s in vals.values() for h in s))
                    shown = ", ".join(sorted(_show(kb, v) for v in vals))
                    args = " ".join(_show(kb, x) for x in key)
                    out.append(
                        Problem(
                            "functional-violation",
                            f"({term_name(kb.terms[pred])} {args} …) has {len(vals)} values "
                            f"in {term_name(kb.terms[cid])}: {shown}",
                            (decl, *support),
                        )
                    )
    return out


def _arities(kb: KB, pred: int) -> set[int]:
    """How many arguments `pred` takes: its declared arity, else the lengths it is
    stored and concluded with."""
    n = kb.declared_arity(pred)
    if n is not None:
        return {n}
    sizes = {len(kb.row(h)) - 1 for h in candidates(kb, (pred,), None) if kb.row(h)[0] == pred}
    for rule in kb.all_rules():
        if rule.consequent and rule.consequent[0] == pred:
            sizes.add(len(rule.consequent) - 1)
    return sizes
