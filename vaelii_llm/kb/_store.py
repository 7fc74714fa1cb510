"""The embedded engine's store: interned terms, compact sentex rows, indexes.

Layout (what keeps 10^6 sentexes in well under 500 bytes each):

* Every constant and variable is interned once: ``terms[i]`` is the object (an
  edn_format ``Symbol`` or a literal), ``_ids`` maps it back. Internally a sentence is
  a tuple of term ids (nested tuples for nested lists).
* Rows are columns indexed by ``handle - 1``: ``_flat`` (``array('i')``, the term ids
  of every row back to back; a nested list is written as ``-k`` then its ``k``
  members), ``_ends`` (where each row ends in ``_flat``), ``_ctx`` (the row's context
  id, ``-1`` for a tick that stored nothing) and ``_state`` (a ``bytearray``: 0 gone,
  1 live, 2 pending in a preview).
* Per context, ``keys`` maps ``term_id * KEY_POSITIONS + position`` (position 0 is the predicate,
  positions 0-7 are indexed) to one handle or an ``array('q')`` of handles, and
  ``all`` lists the context's handles in order. A lookup with one bound constant reads
  one list; it never scans the KB.

Concurrency: many readers and one writer. Writers serialize on ``_wlock``. The row
columns and index lists only ever grow (a retraction flips ``_state``), and a row's
state is appended last, so a reader that checks `visible` never sees half a row.
The small derived tables (context parents, rules, declared arities) are updated in
place, one entry at a time, each entry replaced whole (a tuple) or only appended to
(a rule list), so a sentence costs what it changes and a load is linear in its
file; a reader looks entries up, and a reader that walks a table walks a snapshot
taken in one call (``list(table)``), never the dict itself. The ancestors cache is
dropped after each change of the parents, so nothing stale is kept past it.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import TypeVar

from vaelii_llm.kb._types import Change
from vaelii_llm.kb._types import EngineRefusal

V = TypeVar("V")

__all__ = ["KB", "Rule", "edn_module", "handles_in", "is_symbol", "symbol"]

#: positions 0..KEY_POSITIONS-1 of a sentence are indexed by constant.
KEY_POSITIONS: Final = 8
GONE: Final = 0
LIVE: Final = 1
PENDING: Final = 2
NO_CONTEXT: Final = -1
ROLLED_BACK: Final = -2

DEFAULT_CONTEXT: Final = "CxBase"


def edn_module() -> Any:
    """edn_format, imported on first use (its import builds parser tables)."""
    import edn_format

    return edn_format


def symbol(name: str) -> Any:
    """An edn_format ``Symbol``."""
    return edn_module().Symbol(name)


def is_symbol(x: object) -> bool:
    """Whether `x` is an edn_format ``Symbol`` (without importing edn_format)."""
    mod = sys.modules.get("edn_format")
    return mod is not None and isinstance(x, mod.Symbol)


def term_name(x: object) -> str:
    """How a term reads: a symbol's name, a literal as EDN would print it."""
    if is_symbol(x):
        return str(x)
    if isinstance(x, str):
        return x
    if x is True:
        return "true"
    if x is False:
        return "false"
    return repr(x)


def handles_in(v: int | array[int] | None) -> Sequence[int]:
    """An index entry (one handle or an array of them) as a sequence."""
    if v is None:
        return ()
    return (v,) if isinstance(v, int) else v


def _key(x: object) -> object:
    # Symbols are interned by themselves; a literal by (type, value), so 1, 1.0 and
    # True stay three different terms.
    return x if is_symbol(x) else (type(x), x)


@dataclass(frozen=True, slots=True)
class Rule:
    """A compiled ``(implies antecedent(s) consequent)`` sentex."""

    handle: int
    context: int
    antecedents: tuple[tuple[Any, ...], ...]
    consequent: tuple[Any, ...]


def _index_key(term_id: int, pos: int) -> int:
    # the one place the index key is spelled: a term id and a position in one int
    return term_id * KEY_POSITIONS + pos


def _push(index: dict[int, int | array[int]], key: int, h: int) -> None:
    """Add handle `h` under `key`: one handle, then an array of them."""
    v = index.get(key)
    if v is None:
        index[key] = h
    elif isinstance(v, int):
        index[key] = array("q", (v, h))
    else:
        v.append(h)


def _is_nested(enc: tuple[Any, ...]) -> bool:
    return any(type(x) is tuple for x in enc)


class _Ctx:
    """One context's index: ``keys`` (term at a position -> handles), ``all`` (every
    handle stored in it, oldest first), how many of them are live, and ``nested``
    (a sentence holding a nested list, a rule or a negation, by its hash -> handles),
    so the duplicate check of such a sentence, whose only indexed term is often its
    predicate, reads a few handles, not every rule of the context. ``nested`` is
    None in a reopened snapshot until a write needs it (:meth:`KB.find_in_context`)."""

    __slots__ = ("all", "keys", "live", "nested")

    def __init__(self) -> None:
        self.keys: dict[int, int | array[int]] = {}
        self.all: array[int] = array("q")
        self.live = 0
        self.nested: dict[int, int | array[int]] | None = {}

    def entry(self, term_id: int, pos: int) -> int | array[int] | None:
        """The index entry of a term at a top-level position (0 is the predicate):
        one handle, an array of them, or None."""
        return self.keys.get(_index_key(term_id, pos))

    def mentioning(self, term_id: int, pos: int) -> Sequence[int]:
        """The handles (live or not) whose sentence has the term at position `pos`."""
        return handles_in(self.keys.get(_index_key(term_id, pos)))

    def add(self, h: int, enc: tuple[Any, ...]) -> None:
        """Index handle `h` of sentence `enc` (caller holds the writer lock)."""
        self.all.append(h)
        keys = self.keys
        for pos, x in enumerate(enc[:KEY_POSITIONS]):
            if type(x) is int:
                _push(keys, _index_key(x, pos), h)
        if self.nested is not None and _is_nested(enc):
            _push(self.nested, hash(enc), h)


class Subscription:
    """A change-feed subscription; `close` (or leaving a ``with``) ends it."""

    def __init__(self, kb: KB, callback: Callable[[Change], None]) -> None:
        self._kb = kb
        self.callback = callback

    def close(self) -> None:
        self._kb._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KB:
    """An in-memory knowledge base: the embedded engine's state.

    Build one with `vaelii_llm.kb.load_edn`, `vaelii_llm.kb.sample`,
    `vaelii_llm.kb.synthetic` or `vaelii_llm.kb.open`; read and write it through the
    op table (`vaelii_llm.kb._ops.OPS`).
    """

    def __init__(self) -> None:
        self._wlock = threading.RLock()
        self.terms: list[object] = []
        self._ids: dict[object, int] = {}
        self._is_var = bytearray()
        self._flat: array[int] = array("i")
        self._ends: array[int] = array("q")
        self._ctx: array[int] = array("i")
        self._state = bytearray()
        self._contexts: dict[int, _Ctx] = {}
        # derived tables (see the module docstring)
        self._parents: dict[int, tuple[int, ...]] = {}
        self._genl_rows: dict[int, dict[int, int]] = {}  # child -> {genlCtx handle: parent}
        self._ancestors: dict[int, tuple[int, ...]] = {}
        self._rules: dict[int, dict[int, list[Rule]]] = {}
        self._arity_rows: dict[int, dict[int, int]] = {}  # pred -> {arity handle: n}
        self._arity: dict[int, int] = {}
        self._type_counts: dict[int, int] = {}
        # feed and bookkeeping
        self._retract_ticks: dict[int, int] = {}  # tick -> retracted handle
        self._derived: dict[int, tuple[int, ...]] = {}  # forward-chained handle -> support
        self._scratch: set[int] = set()
        self._preview_owner: int | None = None
        self._subscribers: tuple[Subscription, ...] = ()
        self.stats: dict[str, int] = {"realized": 0, "inferences": 0, "queries": 0}
        self._special: dict[str, int] = {}
        for name in ("genlCtx", "implies", "and", "arity", "isa", "genls", "not"):
            self._special[name] = self.intern(symbol(name))

    # -- terms -----------------------------------------------------------------

    def intern(self, x: object) -> int:
        """The id of term `x`, interning it on first sight."""
        k = _key(x)
        i = self._ids.get(k)
        if i is None:
            with self._wlock:
                i = self._ids.get(k)
                if i is None:
                    i = len(self.terms)
                    self.terms.append(x)
                    self._is_var.append(1 if is_symbol(x) and str(x).startswith("?") else 0)
                    self._ids[k] = i
        return i

    def term_id(self, x: object) -> int | None:
        """The id of term `x`, or None when the KB has never seen it."""
        return self._ids.get(_key(x))

    def is_var(self, i: int) -> bool:
        return self._is_var[i] == 1

    def sid(self, name: str) -> int:
        """The id of one of the special predicates (``isa``, ``genlCtx`` ...)."""
        return self._special[name]

    def to_edn(self, enc: tuple[Any, ...]) -> tuple[Any, ...]:
        """An internal sentence as edn_format values."""
        terms = self.terms
        return tuple(terms[x] if type(x) is int else self.to_edn(x) for x in enc)

    # -- rows ------------------------------------------------------------------

    @property
    def counter(self) -> int:
        """The handle counter: the last tick taken (the newest handle, or a retraction)."""
        return len(self._state)

    def row(self, h: int) -> tuple[Any, ...]:
        """The internal sentence of handle `h` (whatever its state)."""
        end = self._ends[h - 1]
        start = self._ends[h - 2] if h > 1 else 0
        items = self._flat[start:end]
        if not items or min(items) >= 0:
            return tuple(items)
        out, _ = _decode(items, 0, len(items))
        return out

    def row_context(self, h: int) -> int:
        return self._ctx[h - 1]

    def exists(self, h: int) -> bool:
        """Whether `h` names a row that stored a sentence (live or not)."""
        return 0 < h <= len(self._state) and self._ctx[h - 1] >= 0

    def visible(self, h: int) -> bool:
        """Whether handle `h` is live for the calling thread."""
        if h > len(self._state) or h < 1:
            return False
        s = self._state[h - 1]
        if s == LIVE:
            return True
        return s == PENDING and self._preview_owner == threading.get_ident()

    def context_index(self, cid: int) -> _Ctx | None:
        return self._contexts.get(cid)

    def context_ids(self) -> list[int]:
        return list(self._contexts)

    def _append_row(self, cid: int, enc: tuple[Any, ...], state: int) -> int:
        # caller holds _wlock
        h = len(self._state) + 1
        flat = self._flat
        if all(type(x) is int for x in enc):
            flat.extend(enc)
        else:
            _flatten(enc, flat)
        self._ends.append(len(flat))
        self._ctx.append(cid)
        c = self._contexts.get(cid)
        if c is None:
            c = self._contexts[cid] = _Ctx()
        c.add(h, enc)
        self._state.append(state)
        if state == LIVE:
            c.live += 1
        self._note_special(h, cid, enc, added=True)
        return h

    def _tick(self) -> int:
        # a tick that stores nothing (a retraction): caller holds _wlock
        self._ends.append(len(self._flat))
        self._ctx.append(NO_CONTEXT)
        self._state.append(GONE)
        return len(self._state)

    def find_in_context(self, cid: int, enc: tuple[Any, ...]) -> int | None:
        """A live handle of exactly `enc` stored in context `cid` itself, if any."""
        c = self._contexts.get(cid)
        if c is None:
            return None
        if _is_nested(enc):
            if c.nested is None:  # a reopened snapshot: built once, at the first write
                c.nested = {}
                for h in c.all:
                    row = self.row(h)
                    if _is_nested(row):
                        _push(c.nested, hash(row), h)
            for h in handles_in(c.nested.get(hash(enc))):
                if self._state[h - 1] == LIVE and self.row(h) == enc:
                    return h
            return None
        best: Sequence[int] | None = None
        for pos, x in enumerate(enc[:KEY_POSITIONS]):
            if type(x) is int:
                seq = c.mentioning(x, pos)
                if not seq:
                    return None
                if best is None or len(seq) < len(best):
                    best = seq
        for h in best if best is not None else c.all:
            if self._state[h - 1] == LIVE and self.row(h) == enc:
                return h
        return None

    def add(self, cid: int, enc: tuple[Any, ...], *, state: int = LIVE) -> tuple[int, bool]:
        """Store `enc` in context `cid`: (handle, whether it is new).

        An identical live sentex already in that context is answered instead of a
        second copy. Validation (arity, rule shape) is the caller's.
        """
        with self._wlock:
            if state == LIVE:
                old = self.find_in_context(cid, enc)
                if old is not None:
                    return old, False
            h = self._append_row(cid, enc, state)
            if state == LIVE and self._subscribers:
                self._publish(Change(h, "assert", h, self.terms[cid], self.to_edn(enc)))
            return h, True

    def bulk_add(self, cid: int, encs: Iterable[tuple[int, ...]]) -> int:
        """Store many flat sentences without the duplicate check (for generators)."""
        n = 0
        with self._wlock:
            for enc in encs:
                self._append_row(cid, enc, LIVE)
                n += 1
        return n

    def retract(self, h: int) -> tuple[int, tuple[Any, ...]]:
        """Make `h` gone; returns (context id, sentence). Takes one tick."""
        with self._wlock:
            if not self.exists(h) or self._state[h - 1] != LIVE:
                raise EngineRefusal("unknown-handle", f"no live sentex has handle {h}", handle=h)
            cid = self._ctx[h - 1]
            enc = self.row(h)
            self._state[h - 1] = GONE
            self._contexts[cid].live -= 1
            self._note_special(h, cid, enc, added=False)
            self._derived.pop(h, None)
            tick = self._tick()
            self._retract_ticks[tick] = h
            if self._subscribers:
                self._publish(Change(tick, "retract", h, self.terms[cid], self.to_edn(enc)))
            return cid, enc

    def drop_pending(self, handles: Iterable[int]) -> None:
        """Roll back a preview's rows: they become gone and leave the feed."""
        with self._wlock:
            for h in handles:
                if self._state[h - 1] == PENDING:
                    cid = self._ctx[h - 1]
                    self._state[h - 1] = GONE
                    self._note_special(h, cid, self.row(h), added=False)
                    self._ctx[h - 1] = ROLLED_BACK

    # -- derived tables (updated in place: see the module docstring) -------------

    def _note_special(self, h: int, cid: int, enc: tuple[Any, ...], *, added: bool) -> None:
        pred = enc[0] if enc else None
        sp = self._special
        if pred == sp["genlCtx"] and len(enc) == 3 and type(enc[1]) is int:
            self._note_genl(h, enc[1], enc[2], added)
        elif pred == sp["implies"]:
            rule = compile_rule(h, cid, enc, sp["and"])
            if rule is not None:
                self._note_rule(h, cid, rule, added)
        elif pred == sp["arity"] and len(enc) == 3 and type(enc[1]) is int:
            n = self.terms[enc[2]] if type(enc[2]) is int else None
            if type(n) is int:
                self._note_arity(h, enc[1], n, added)
        if pred in (sp["isa"], sp["genls"]) and len(enc) == 3:
            counts = self._type_counts
            places = (enc[2],) if pred == sp["isa"] else (enc[1], enc[2])
            for t in places:
                if type(t) is int:
                    counts[t] = counts.get(t, 0) + (1 if added else -1)
                    if counts[t] <= 0:
                        del counts[t]

    def _note_genl(self, h: int, child: int, parent: Any, added: bool) -> None:
        rows = self._genl_rows.setdefault(child, {})
        _set_row(rows, h, parent, added)
        # the child's parents in the order their rows were stored, each once
        parents = tuple(dict.fromkeys(rows.values()))
        if parents:
            self._parents[child] = parents
        else:
            self._parents.pop(child, None)
            del self._genl_rows[child]
        self._ancestors = {}

    def _note_rule(self, h: int, cid: int, rule: Rule, added: bool) -> None:
        head = rule.consequent[0] if type(rule.consequent[0]) is int else -1
        if head >= 0 and self.is_var(head):
            head = -1
        per = self._rules.setdefault(cid, {})
        if added:
            per.setdefault(head, []).append(rule)
        else:
            per[head] = [r for r in per.get(head, ()) if r.handle != h]

    def _note_arity(self, h: int, pred: int, n: int, added: bool) -> None:
        declared = self._arity_rows.setdefault(pred, {})
        _set_row(declared, h, n, added)
        if declared:  # the last row stored wins
            self._arity[pred] = next(reversed(declared.values()))
        else:
            self._arity.pop(pred, None)
            del self._arity_rows[pred]

    def parents(self, cid: int) -> tuple[int, ...]:
        return self._parents.get(cid, ())

    def all_parents(self) -> dict[int, tuple[int, ...]]:
        return self._parents

    def ancestors(self, cid: int) -> tuple[int, ...]:
        """`cid` and every context it inherits from, nearest first (cycles tolerated)."""
        cache = self._ancestors
        got = cache.get(cid)
        if got is not None:
            return got
        parents = self._parents
        out = [cid]
        seen = {cid}
        i = 0
        while i < len(out):
            for p in parents.get(out[i], ()):
                if p not in seen:
                    seen.add(p)
                    out.append(p)
            i += 1
        got = tuple(out)
        cache[cid] = got
        return got

    def rules_for(self, pred: int, cids: Iterable[int] | None) -> list[Rule]:
        """The live rules visible in `cids` (None: every context) that may conclude `pred`."""
        rules = self._rules
        out: list[Rule] = []
        for cid in list(rules) if cids is None else cids:
            per = rules.get(cid)
            if per:
                if pred >= 0:
                    out.extend(per.get(pred, ()))
                    out.extend(per.get(-1, ()))
                else:
                    for rs in list(per.values()):
                        out.extend(rs)
        return [r for r in out if self.visible(r.handle)]

    def all_rules(self) -> list[Rule]:
        return self.rules_for(-1, None)

    def declared_arity(self, pred: int) -> int | None:
        return self._arity.get(pred)

    def type_ids(self) -> list[int]:
        return list(self._type_counts)

    # -- the change feed ---------------------------------------------------------

    def subscribe(self, callback: Callable[[Change], None]) -> Subscription:
        sub = Subscription(self, callback)
        with self._wlock:
            self._subscribers = (*self._subscribers, sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._wlock:
            self._subscribers = tuple(s for s in self._subscribers if s is not sub)

    def _publish(self, change: Change) -> None:
        for sub in self._subscribers:
            try:
                sub.callback(change)
            except Exception:  # a subscriber's bug must not undo a committed write
                continue

    def changes(self, after: int) -> Iterator[Change]:
        """The changes whose tick is above `after`, oldest first (lazy)."""
        tick = max(after, 0)
        while tick < len(self._state):
            tick += 1
            cid = self._ctx[tick - 1]
            if cid >= 0:
                if self._state[tick - 1] == PENDING:
                    continue
                yield Change(tick, "assert", tick, self.terms[cid], self.to_edn(self.row(tick)))
            elif cid == NO_CONTEXT:
                h = self._retract_ticks.get(tick)
                if h is not None:
                    yield Change(
                        tick, "retract", h, self.terms[self._ctx[h - 1]], self.to_edn(self.row(h))
                    )


def compile_rule(h: int, cid: int, enc: tuple[Any, ...], and_id: int) -> Rule | None:
    """``(implies A C)`` / ``(implies (and A B ...) C)`` as a `Rule`, None if malformed."""
    if len(enc) != 3 or not isinstance(enc[1], tuple) or not isinstance(enc[2], tuple):
        return None
    ante, cons = enc[1], enc[2]
    if not cons or not ante:
        return None
    if ante[0] == and_id:
        parts = ante[1:]
        if not parts or not all(isinstance(p, tuple) and p for p in parts):
            return None
        return Rule(h, cid, tuple(parts), cons)
    return Rule(h, cid, (ante,), cons)


def _flatten(enc: tuple[Any, ...], out: array[int]) -> None:
    for x in enc:
        if type(x) is int:
            out.append(x)
        else:
            out.append(-len(x))
            _flatten(x, out)


def _decode(items: array[int], i: int, n: int) -> tuple[tuple[Any, ...], int]:
    # read `n` members starting at items[i]
    out: list[Any] = []
    while len(out) < n and i < len(items):
        x = items[i]
        i += 1
        if x >= 0:
            out.append(x)
        else:
            sub, i = _decode(items, i, -x)
            out.append(sub)
    return tuple(out), i


def _set_row(rows: dict[int, V], handle: int, value: V, added: bool) -> None:
    """A stored row's value under its handle, or a retracted one's gone."""
    if added:
        rows[handle] = value
    else:
        rows.pop(handle, None)
