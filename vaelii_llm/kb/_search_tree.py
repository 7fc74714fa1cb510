"""``search-tree``: the proof search for one goal as a tree, in the order query searches."""

from __future__ import annotations

from collections.abc import Iterator
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
from vaelii_llm.kb._prover import State
from vaelii_llm.kb._prover import Step
from vaelii_llm.kb._query import ClockOut
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import answer_bindings
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import to_edn
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import Sentence

__all__ = ["TREE", "SearchNode", "SearchTree", "TreeOpts", "search_tree"]


class SearchNode(msgspec.Struct, frozen=True):
    """One state of the proof search: the goal it works on next.

    ``by`` says how the parent reached it (``goal`` for the root, ``fact`` or ``rule``
    with that sentex's ``handle``, ``builtin`` for a ``(different …)`` test), ``goal``
    the goal selected here (nil once nothing is left to prove), ``waiting`` how many
    more goals wait behind it. ``outcome``: ``answer`` (a proof ends here, its
    ``bindings`` given), ``proved`` (a proof lies below), ``failed`` (nothing below
    proves it), ``max-depth`` (the depth bound stopped it) or ``unexplored`` (the node
    limit or the clock stopped the search before it was finished).
    """

    by: str
    handle: int
    goal: tuple[Any, ...] | None
    waiting: int
    outcome: str
    bindings: dict[Any, Any] | None = None
    children: tuple[SearchNode, ...] = ()


class SearchTree(msgspec.Struct, frozen=True):
    """The search for ``goal`` as a tree, with its size and the bound that cut it."""

    goal: tuple[Any, ...]
    outcome: str
    nodes: int
    answers: int
    cut: Cut | None
    root: SearchNode


class TreeOpts(ProofOpts, frozen=True):
    limit: Annotated[
        int, Meta(ge=1, le=MAX_LIMIT, description="How many nodes of the tree to build.")
    ] = 20


TREE: Final = TreeOpts()


class _Node:
    __slots__ = ("bindings", "by", "children", "depth_cut", "done", "goal", "handle", "waiting")

    def __init__(self, by: str, handle: int, goal: tuple[Any, ...] | None, waiting: int) -> None:
        self.by = by
        self.handle = handle
        self.goal = goal
        self.waiting = waiting
        self.children: list[_Node] = []
        self.bindings: dict[Any, Any] | None = None
        self.done = False  # every child was tried
        self.depth_cut = False


@op("search-tree", kind=READ, opts=TreeOpts, clocked=True)
def search_tree(
    kb: KB, goal: Sentence, context: Context | None = None, opts: TreeOpts = TREE
) -> SearchTree:
    """The proof search for a goal as a tree: the goals tried, the facts and rules used
    and what came of each, in the order query searches.

    Each node is one step of the search: the goal worked on next (with how many more
    wait behind it), reached from its parent by a fact or a rule (its handle) or a
    (different ...) test. A node's outcome is answer (a proof ends there; its bindings
    given), proved (a proof lies below), failed (nothing below proves it), max-depth
    (the depth bound kept a rule from being tried) or unexplored (the node limit or
    the time bound stopped the search first; cut says which). Example: (afraidOf
    MissMuffet ?y) in CxNursery. opts: limit (nodes to build), max-depth, max-ms (see
    the options).
    """
    sent = arg.goal(kb, goal)
    cids = arg.visible_contexts(kb, context)
    clock = arg.clock(opts)
    limit = opts.limit
    names: dict[str, Var] = {}
    pat = arg.pattern(kb, sent, names)
    prover = Prover(kb, cids, opts.max_depth, clock)
    state = prover.root((pat,))
    root = _node(kb, prover, state, "goal", 0)
    count, answers = 1, 0
    cut: Cut | None = None
    stack: list[tuple[_Node, Iterator[Step]]] = [(root, prover.expand(state))]
    try:
        while stack:
            clock.check()
            node, children = stack[-1]
            cuts = prover.depth_cuts
            step = next(children, None)
            if prover.depth_cuts != cuts:
                node.depth_cut = True
            if step is None:
                node.done = True
                stack.pop()
                continue
            if count >= limit:
                cut = Cut("limit", limit, count)
                break
            child_state, by, handle = step
            child = _node(kb, prover, child_state, by, handle)
            count += 1
            node.children.append(child)
            if child.goal is None:
                child.done = True
                child.bindings = answer_bindings(kb, names, child_state[1])
                answers += 1
                continue
            stack.append((child, prover.expand(child_state)))
    except ClockOut:
        cut = Cut("max-ms", clock.budget_ms or 0, count)
    frozen = _freeze(root)
    return SearchTree(sent, frozen.outcome, count, answers, cut, frozen)


def _node(kb: KB, prover: Prover, state: State, by: str, handle: int) -> _Node:
    if not state[0]:
        return _Node(by, handle, None, 0)
    goal, _, tail = prover.select(state)
    waiting = sum(len(goals) for goals, _ in tail)
    return _Node(by, handle, to_edn(kb, subst(goal, state[1])), waiting)


def _freeze(node: _Node) -> SearchNode:
    children = tuple(_freeze(c) for c in node.children)
    outcomes = {c.outcome for c in children}
    if node.goal is None:
        outcome = "answer"
    elif outcomes & {"answer", "proved"}:
        outcome = "proved"
    elif not node.done or "unexplored" in outcomes:
        outcome = "unexplored"
    elif node.depth_cut or "max-depth" in outcomes:
        outcome = "max-depth"
    else:
        outcome = "failed"
    return SearchNode(
        node.by, node.handle, node.goal, node.waiting, outcome, node.bindings, children
    )
