"""The embedded engine's audits: the bounded consistency check, the whole-KB reads and
audits no call can bound (declared ``unbounded``, so never a tool), and the host-path
diff against a directory of .edn files (declared ``host-path``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from vaelii_llm._declare import CLOCK
from vaelii_llm._declare import HOST_PATH
from vaelii_llm._declare import READ
from vaelii_llm._declare import UNBOUNDED
from vaelii_llm._declare import ClockOpts
from vaelii_llm._declare import op
from vaelii_llm.kb import _args as arg
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import candidates
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import LIVE
from vaelii_llm.kb._store import is_symbol
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._store import term_name
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.kb._types import Problem
from vaelii_llm.kb._types import Sentex

__all__ = [
    "Diff",
    "exposed_clashes",
    "handles",
    "kb_diff",
    "kb_integrity",
    "kb_quality",
    "terms",
]


@op("kb-integrity", kind=READ, opts=ClockOpts, clocked=True)
def kb_integrity(
    kb: KB, context: Context | None = None, opts: ClockOpts = CLOCK
) -> Iterator[Problem | Cut]:
    """Check the KB's consistency: context inheritance cycles, rules whose conclusion
    has a variable no condition binds, rules with a condition nothing can satisfy, and
    sentences that break a declared (arity pred n). One problem record per finding;
    none means no problem found. opts: max-ms.
    """
    cids = arg.visible_contexts(kb, context)
    return _integrity(kb, cids, arg.clock(opts))


class Diff(msgspec.Struct, frozen=True):
    """Sentexes only in the KB, and (context, sentence) pairs only in the files."""

    only_in_kb: tuple[Sentex, ...]
    only_in_path: tuple[tuple[Any, tuple[Any, ...]], ...]


def _integrity(kb: KB, cids: tuple[int, ...] | None, clock: Clock) -> Iterator[Problem | Cut]:
    n = 0
    try:
        for cid in arg.context_ids(kb) if cids is None else cids:
            clock.check()
            if cid in kb.ancestors(cid)[1:] or any(cid in kb.ancestors(p) for p in kb.parents(cid)):
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
                    "unsafe-rule",
                    f"the conclusion's {names} is bound by no condition",
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


@op("handles", kind=UNBOUNDED)
def handles(kb: KB) -> list[int]:
    """Every live handle in the KB, sorted (the whole KB in one vector)."""
    state = bytes(kb._state)
    return [i + 1 for i, s in enumerate(state) if s == LIVE]


@op("terms", kind=UNBOUNDED)
def terms(kb: KB) -> list[Any]:
    """Every constant in the KB, sorted by name (the whole vocabulary in one vector)."""
    ts = kb.terms
    return sorted((ts[i] for i in range(len(ts)) if not kb.is_var(i)), key=term_name)


@op("kb-quality", kind=UNBOUNDED)
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
                out.append(Problem("duplicate", f"stored twice in {kb.terms[cid]}", (seen[row], h)))
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


@op("exposed-clashes", kind=UNBOUNDED)
def exposed_clashes(kb: KB) -> list[Problem]:
    """Every sentence asserted both plainly and as (not sentence) where some context
    sees both (the same context, or one that inherits from both). Whole-KB audit.
    """
    not_id = kb.sid("not")
    all_cids = arg.context_ids(kb)
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
                        f"{arg.edn_str(kb.to_edn(row[1]))} and its negation are both visible in "
                        + ", ".join(sorted(term_name(kb.terms[c]) for c in where)),
                        (h2, h),
                    )
                )
    return out


@op("kb-diff", kind=HOST_PATH)
def kb_diff(kb: KB, path: str, context: Context | None = None) -> Diff:
    """Compare the KB with a directory of .edn files on this host: what only the KB
    holds and what only the files hold (optionally one context only).
    """
    from vaelii_llm.kb._io import load_edn

    p = Path(os.fspath(path))
    if not p.is_dir():
        raise EngineRefusal("bad-path", f"{p} is not a directory")
    other = KB()
    for f in sorted(p.glob("*.edn")):
        load_edn(f, into=other)
    only_ctx = None if context is None else arg.context_symbol(context)

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
        tuple(
            arg.sentex(kb, h)
            for key, h in sorted(mine.items(), key=lambda kv: kv[1])
            if key not in theirs
        ),
        tuple(key for key, h in sorted(theirs.items(), key=lambda kv: kv[1]) if key not in mine),
    )
