"""The embedded engine's writes: every op that changes the KB (or its measurement
state) is declared ``write``, or ``irreversible`` when it cannot be undone.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from vaelii_llm._declare import IRREVERSIBLE
from vaelii_llm._declare import PROOF
from vaelii_llm._declare import WRITE
from vaelii_llm._declare import ProofOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import Foreign
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import rename
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import to_edn
from vaelii_llm.kb._query import unify
from vaelii_llm.kb._reads import _query
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import LIVE
from vaelii_llm.kb._store import PENDING
from vaelii_llm.kb._store import compile_rule
from vaelii_llm.kb._store import is_symbol
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._types import Answer
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.kb._types import Handle
from vaelii_llm.kb._types import Sentence
from vaelii_llm.kb._types import Sentex

__all__ = [
    "Abduction",
    "Edited",
    "abduce",
    "abduce_discard",
    "assert_sentence",
    "clear_caches",
    "edit",
    "edit_with_consequences",
    "forward_chain",
    "preview",
    "retract",
]


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


# -- writes ------------------------------------------------------------------------


def _write_context(kb: KB, context: Any) -> int:
    return kb.intern(arg.context_symbol(context))


def _check_rule(kb: KB, sent: tuple[Any, ...], enc: tuple[Any, ...]) -> None:
    if enc[0] == kb.sid("implies") and compile_rule(0, 0, enc, kb.sid("and")) is None:
        raise EngineRefusal(
            "malformed-sentence",
            "a rule is (implies condition conclusion) or (implies (and c1 c2 ...) conclusion)",
        )


def _assert(kb: KB, sentence: Any, cid: int, *, pending: bool = False) -> tuple[int, bool]:
    sent = arg.sentence(sentence)
    if any(is_symbol(x) and str(x).startswith("?") for x in sent) and sent[0] != symbol("implies"):
        raise EngineRefusal("malformed-sentence", "a stored fact cannot hold a variable")
    arg.check_arity(kb, sent)
    enc = arg.encode(kb, sent)
    _check_rule(kb, sent, enc)
    return kb.add(cid, enc, state=PENDING if pending else LIVE)


@op("assert", kind=WRITE)
def assert_sentence(kb: KB, sentence: Sentence, context: Context) -> Handle:
    """Store a sentence in a context; answers its handle (the existing handle when the
    context already holds the same sentence).
    """
    with kb._wlock:
        h, _ = _assert(kb, sentence, _write_context(kb, context))
        return Handle(h)


@op("retract", kind=IRREVERSIBLE)
def retract(kb: KB, handle: Handle) -> Sentex:
    """Remove a sentex; answers what was removed. Irreversible: re-asserting stores a
    new sentex with a new handle.
    """
    h = arg.handle(kb, handle)
    cid, enc = kb.retract(h)
    return Sentex(h, kb.terms[cid], kb.to_edn(enc))


@op("edit", kind=WRITE)
def edit(kb: KB, handle: Handle, sentence: Sentence) -> Handle:
    """Replace a sentex's sentence (same context); answers the new handle."""
    with kb._wlock:
        h = arg.handle(kb, handle)
        sent = arg.sentence(sentence)
        arg.check_arity(kb, sent)
        cid = kb.row_context(h)
        if kb._state[h - 1] != LIVE:
            raise EngineRefusal("unknown-handle", f"handle {h} was retracted", handle=h)
        kb.retract(h)
        new, _ = _assert(kb, sent, cid)
        return Handle(new)


@op("edit-with-consequences", kind=WRITE, opts=ProofOpts, clocked=True)
def edit_with_consequences(
    kb: KB, handle: Handle, sentence: Sentence, opts: ProofOpts = PROOF
) -> Edited:
    """Edit a sentex, retract what forward chaining had derived from it, and chain
    again in its context. opts: max-depth (chaining rounds), max-ms.
    """
    with kb._wlock:
        h = arg.handle(kb, handle)
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
        derived = _forward_chain(kb, cid, opts)
        return Edited(h, new, tuple(gone), tuple(s for s in derived if isinstance(s, Sentex)))


@op("forward-chain", kind=WRITE, opts=ProofOpts, clocked=True)
def forward_chain(kb: KB, context: Context, opts: ProofOpts = PROOF) -> list[Sentex | Cut]:
    """Apply the rules visible in a context to its facts and store every new conclusion
    in that context, round after round until nothing new follows. opts: max-depth
    (rounds), max-ms (see the options).
    """
    with kb._wlock:
        return _forward_chain(kb, _write_context(kb, context), opts)


def _forward_chain(kb: KB, cid: int, opts: ProofOpts) -> list[Sentex | Cut]:
    clock = arg.clock(opts)
    rounds = opts.max_depth
    cids = kb.ancestors(cid)
    out: list[Sentex | Cut] = []
    try:
        for _ in range(rounds):
            new = 0
            for rule in kb.rules_for(-1, cids):
                ants, cons = rename(kb, rule)
                found = []
                for state in Prover(kb, cids, 0, clock).solve(ants):
                    c = subst(cons, state[1])
                    if _ground(c):
                        found.append((c, (rule.handle, *state[2])))
                for c, support in found:
                    if Prover(kb, cids, 0, clock).prove(c):  # depth 0: stored facts only
                        continue
                    h, fresh = kb.add(cid, c)
                    if fresh:
                        kb._derived[h] = support
                        out.append(arg.sentex(kb, h))
                        new += 1
            if not new:
                break
    except ClockOut:
        out.append(Cut("max-ms", clock.budget_ms or 0, len(out)))
    return out


def _ground(p: Any) -> bool:
    return all(_ground(x) if type(x) is tuple else type(x) is int for x in p)


@op("preview", kind=WRITE, opts=ProofOpts, clocked=True)
def preview(
    kb: KB, sentences: list[Sentence], context: Context, goal: Sentence, opts: ProofOpts = PROOF
) -> list[Answer | Cut]:
    """Answer a query as if some sentences were stored: stores them, runs the query,
    and rolls them back. It holds the single writer and advances the handle counter.
    opts: max-depth, max-ms.
    """
    sent = arg.sentence(goal, "goal")
    with kb._wlock:
        cid = _write_context(kb, context)
        added: list[int] = []
        kb._preview_owner = threading.get_ident()
        try:
            for s in sentences:
                h, fresh = _assert(kb, s, cid, pending=True)
                if fresh:
                    added.append(h)
            arg.check_arity(kb, sent)
            clock = arg.clock(opts)
            return list(_query(kb, sent, kb.ancestors(cid), opts.max_depth, clock))
        finally:
            kb.drop_pending(added)
            kb._preview_owner = None


@op("clear-caches", kind=WRITE)
def clear_caches(kb: KB) -> dict[str, int]:
    """Drop the engine's caches (context ancestry) and reset its measurement counters;
    answers what was dropped.
    """
    with kb._wlock:
        out = {"ancestors": len(kb._ancestors), **kb.stats}
        kb._ancestors = {}
        kb.stats = dict.fromkeys(kb.stats, 0)
        return out


@op("abduce", kind=WRITE, opts=ProofOpts, clocked=True)
def abduce(kb: KB, goal: Sentence, context: Context, opts: ProofOpts = PROOF) -> Abduction:
    """Find hypotheses that would let a goal follow through the rules, and store them in
    a new scratch context that inherits from the given one (drop it with abduce-discard).
    opts: max-depth, max-ms.
    """
    sent = arg.goal(kb, goal)
    with kb._wlock:
        cid = arg.read_context(kb, context)
        cids = kb.ancestors(cid)
        clock = arg.clock(opts)
        depth = opts.max_depth
        pat = arg.pattern(kb, sent)
        try:
            if Prover(kb, cids, depth, clock).prove(pat):
                return Abduction(None, (), True)
            hyps = _explain(kb, pat, {}, cids, depth, clock)
        except ClockOut:
            raise EngineRefusal("clock-cut", "abduce ran out of time") from None
        if not hyps:
            return Abduction(None, (), False)
        n = 1 + sum(1 for c in arg.context_ids(kb) if str(kb.terms[c]).startswith("CxAbduce"))
        while kb.term_id(symbol(f"CxAbduce{n}")) is not None:
            n += 1
        scratch = symbol(f"CxAbduce{n}")
        sid = kb.intern(scratch)
        kb._scratch.add(sid)
        kb.add(sid, (kb.sid("genlCtx"), sid, cid))
        stored = []
        for hyp in hyps:
            h, _ = kb.add(sid, arg.encode(kb, to_edn(kb, hyp)))
            stored.append(arg.sentex(kb, h))
        proves = Prover(kb, kb.ancestors(sid), depth, arg.clock(opts)).prove(pat)
        return Abduction(scratch, tuple(stored), proves)


def _explain(
    kb: KB, goal: Any, b: dict[Var, Any], cids: tuple[int, ...], depth: int, clock: Clock
) -> list[Any] | None:
    g = subst(goal, b)
    head = g[0] if type(g[0]) is int else -1
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
                got = next(Prover(kb, cids, depth, clock).solve((ant,), b2), None)
                if got is not None:
                    b2 = got[1]
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
                hyps.extend(deeper or [a])
        if not todo and hyps:
            return hyps
    return None


@op("abduce-discard", kind=IRREVERSIBLE)
def abduce_discard(kb: KB, context: Context) -> int:
    """Drop a scratch context made by abduce, with every hypothesis in it; answers how
    many sentexes were dropped. Irreversible. Refused for any other context.
    """
    sym = arg.context_symbol(context)
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
