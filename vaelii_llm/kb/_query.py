"""Matching and unification over a `KB`, under a cooperative clock (the backward
chaining built on them is `vaelii_llm.kb._prover`).

A pattern is an internal sentence whose members are term ids (constants), `Var`
objects (variables), `Foreign` objects (a constant the KB has never seen: it matches
nothing stored, but a rule may still bind it) or nested pattern tuples.

The clock is cooperative: threads cannot be killed, so every loop here calls
`Clock.check`, which raises `ClockOut` once the deadline has passed. The read that
owns the generator catches it and ends with a `Cut` record, so a cut is never silent.
Because the deadline is absolute, a lazy consumer that realizes answers slowly is
held to the same deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import KEY_POSITIONS
from vaelii_llm.kb._store import Rule
from vaelii_llm.kb._store import symbol

__all__ = [
    "Bindings",
    "Clock",
    "ClockOut",
    "Foreign",
    "Var",
    "answer_bindings",
    "candidates",
    "is_functional",
    "is_ground",
    "ms_since",
    "negation",
    "order_goals",
    "other_value",
    "rename",
    "subst",
    "to_edn",
    "unify",
]


class ClockOut(Exception):
    """The read's deadline passed (internal: the read turns it into a `Cut`)."""


class Clock:
    """A deadline ``budget_ms`` after the read was called (``None``: no deadline)."""

    __slots__ = ("budget_ms", "deadline")

    def __init__(self, budget_ms: int | None) -> None:
        self.budget_ms = budget_ms
        self.deadline = None if budget_ms is None else time.monotonic() + budget_ms / 1000

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise ClockOut

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


class Var:
    """A variable of a pattern; one object per variable per rule application."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Foreign:
    """A constant the KB has not interned (it matches no stored sentence)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Foreign)
            and type(other.value) is type(self.value)
            and other.value == self.value
        )

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))


Bindings = dict[Var, Any]


def walk(x: Any, b: Bindings) -> Any:
    while type(x) is Var and x in b:
        x = b[x]
    return x


def subst(p: Any, b: Bindings) -> Any:
    """`p` with every bound variable replaced, deeply."""
    if type(p) is Var:
        x = walk(p, b)
        return x if type(x) is Var else subst(x, b)
    if type(p) is tuple:
        return tuple(subst(x, b) for x in p)
    return p


def unify(a: Any, c: Any, b: Bindings) -> Bindings | None:
    """Extend bindings `b` so `a` and `c` are equal; None when they cannot be."""
    a = walk(a, b)
    c = walk(c, b)
    if a is c:
        return b
    if type(a) is Var:
        out = dict(b)
        out[a] = c
        return out
    if type(c) is Var:
        out = dict(b)
        out[c] = a
        return out
    if type(a) is tuple:
        if type(c) is not tuple or len(a) != len(c):
            return None
        for x, y in zip(a, c, strict=True):
            got = unify(x, y, b)
            if got is None:
                return None
            b = got
        return b
    if type(a) is not type(c):
        return None
    return b if a == c else None


def candidates(kb: KB, pattern: tuple[Any, ...], cids: Iterable[int] | None) -> Iterator[int]:
    """Handles whose rows may match `pattern` (visible ones, index-driven, lazy).

    In each context the shortest index list among the pattern's bound top-level
    constants is read; a pattern with no bound constant reads the context's list.
    """
    for cid in kb.context_ids() if cids is None else cids:
        c = kb.context_index(cid)
        if c is None:
            continue
        best: Any = None
        best_len = -1
        dead = False
        for pos, x in enumerate(pattern[:KEY_POSITIONS]):
            if type(x) is int:
                v = c.entry(x, pos)
                if v is None:
                    dead = True
                    break
                n = 1 if isinstance(v, int) else len(v)
                if best is None or n < best_len:
                    best, best_len = v, n
            elif type(x) is Foreign:
                dead = True
                break
        if dead:
            continue
        if best is None:
            best = c.all
            best_len = len(best)
        if type(best) is int:
            if kb.visible(best):
                yield best
            continue
        for i in range(best_len):  # a snapshot of the list's length: a writer only appends
            h = best[i]
            if kb.visible(h):
                yield h


def to_pattern(kb: KB, x: Any, names: dict[int, Var]) -> Any:
    """A stored internal sentence as a pattern, its variables renamed apart."""
    if type(x) is int:
        if kb.is_var(x):
            v = names.get(x)
            if v is None:
                v = names[x] = Var(str(kb.terms[x]))
            return v
        return x
    return tuple(to_pattern(kb, y, names) for y in x)


def to_edn(kb: KB, x: Any) -> Any:
    """A pattern member as an edn_format value (unbound variables as ``?name`` symbols)."""
    t = type(x)
    if t is int:
        return kb.terms[x]
    if t is Var:
        return symbol(x.name)
    if t is Foreign:
        return x.value
    return tuple(to_edn(kb, y) for y in x)


def order_goals(goals: tuple[Any, ...], b: Bindings, different: int | None) -> tuple[Any, ...]:
    """``goals`` with the one to work on next first: the goal with the most bound
    arguments (fewest candidates); a ``(different ...)`` test waits until its
    arguments are bound. Every search strategy orders goals this one way."""
    best_i, best_score = 0, -2
    for i, goal in enumerate(goals):
        g = subst(goal, b)
        bound = sum(1 for x in g[1:] if type(x) is not Var)
        if different is not None and g[0] == different:
            score = 100 if bound == len(g) - 1 else -1
        else:
            score = bound
        if score > best_score:
            best_i, best_score = i, score
    if best_i == 0:
        return goals
    return (goals[best_i], *goals[:best_i], *goals[best_i + 1 :])


def answer_bindings(kb: KB, names: Mapping[str, Var], b: Mapping[Var, Any]) -> dict[Any, Any]:
    """An answer's bindings as EDN: each goal variable's name to what it is bound to."""
    return {symbol(name): to_edn(kb, subst(v, dict(b))) for name, v in names.items()}


def rename(kb: KB, rule: Rule) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    names: dict[int, Var] = {}
    ants = tuple(to_pattern(kb, a, names) for a in rule.antecedents)
    return ants, to_pattern(kb, rule.consequent, names)


def is_ground(p: Any) -> bool:
    """Whether a pattern holds no variable."""
    return all(is_ground(x) if type(x) is tuple else type(x) is not Var for x in p)


def negation(kb: KB, pat: tuple[Any, ...]) -> tuple[Any, ...]:
    """``(not S)`` for S, and S for ``(not S)``."""
    not_id = kb.sid("not")
    if len(pat) == 2 and pat[0] == not_id and type(pat[1]) is tuple:
        return tuple(pat[1])
    return (not_id, pat)


def is_functional(kb: KB, pred: Any, cids: tuple[int, ...] | None) -> bool:
    """Whether a ``(functional pred)`` declaration is visible in `cids`."""
    fid = kb.term_id(symbol("functional"))
    if fid is None or type(pred) is not int:
        return False
    return any(kb.row(h) == (fid, pred) for h in candidates(kb, (fid, pred), cids))


def other_value(pat: tuple[Any, ...]) -> tuple[tuple[Any, ...], Var]:
    """`pat` with its last argument replaced by a fresh variable."""
    v = Var("?other")
    return (*pat[:-1], v), v


def ms_since(t0: float) -> float:
    """Milliseconds since `time.perf_counter` read `t0`, to the microsecond."""
    return round((time.perf_counter() - t0) * 1000, 3)
