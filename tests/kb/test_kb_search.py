"""The reads about proof search: query-status, argue, search-tree, compare-tacticians,
ask-within, prove-within and qualitative-scenarios, on the sample KB and through the
tools, with their refusals, their bounds and their laziness."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import edn_format
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._declare import MAX_MS_CEILING
from vaelii_llm._declare import declared
from vaelii_llm.kb import EngineRefusal
from vaelii_llm.kb import _args as args
from vaelii_llm.kb import _ops as ops
from vaelii_llm.kb import _prover as prover_mod
from vaelii_llm.kb import _reads as reads
from vaelii_llm.kb import _scenarios
from vaelii_llm.kb import _search_tree
from vaelii_llm.kb import _tacticians
from vaelii_llm.kb import _verdicts
from vaelii_llm.kb import _within
from vaelii_llm.kb._query import Bindings
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._query import Var
from vaelii_llm.kb._query import candidates
from vaelii_llm.kb._query import order_goals
from vaelii_llm.kb._query import rename
from vaelii_llm.kb._query import subst
from vaelii_llm.kb._query import unify
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._store import symbol
from vaelii_llm.kb._types import Answer
from vaelii_llm.kb._types import Cut
from vaelii_llm.kb._types import Sentex

#: the search reads, each from its own module, and the prover they share
search = SimpleNamespace(
    **{
        name: getattr(module, name)
        for module in (_verdicts, _search_tree, _tacticians, _within, _scenarios, prover_mod)
        for name in module.__all__
    }
)
SEARCH_MODULES = {m.__name__ for m in (_verdicts, _search_tree, _tacticians, _within, _scenarios)}


class Oracle:
    """The slow reference the prover is property-tested against: SLD resolution as
    nested generators, the engine's order (facts, then rules; the goal with the most
    bound arguments first), written as plainly as it can be."""

    def __init__(self, kb_: KB, cids: tuple[int, ...] | None, max_depth: int) -> None:
        self.kb = kb_
        self.cids = cids
        self.max_depth = max_depth
        self.different = kb_.term_id(symbol("different"))

    def solve(
        self, goals: tuple[Any, ...], b: Bindings, depth: int, support: tuple[int, ...], used: int
    ) -> Iterator[tuple[Bindings, tuple[int, ...], int]]:
        """Every proof of all `goals` under `b`: (bindings, support, depth used)."""
        if not goals:
            yield b, support, used
            return
        if len(goals) > 1:
            goals = order_goals(goals, b, self.different)
        goal, rest = goals[0], goals[1:]
        g = subst(goal, b)
        if self.different is not None and g[0] == self.different:
            args_ = g[1:]
            if not any(type(a) is Var for a in args_) and len(set(args_)) == len(args_):
                yield from self.solve(rest, b, depth, support, used)
            return
        for h in candidates(self.kb, g, self.cids):
            got = unify(g, self.kb.row(h), b)
            if got is not None:
                yield from self.solve(rest, got, depth, (*support, h), used)
        if depth >= self.max_depth:
            return
        for rule in self.kb.rules_for(g[0] if type(g[0]) is int else -1, self.cids):
            ants, cons = rename(self.kb, rule)
            b2 = unify(cons, g, b)
            if b2 is None:
                continue
            deeper = (*support, rule.handle)
            for b3, sup, u in self.solve(ants, b2, depth + 1, deeper, max(used, depth + 1)):
                yield from self.solve(rest, b3, depth, sup, u)


S = edn_format.Symbol


def sym(text: str) -> Any:
    return edn_format.loads(text)


@pytest.fixture(scope="module")
def sample() -> KB:
    return kb.sample()


@pytest.fixture(scope="module")
def wide() -> KB:
    """100,000 (p Ai Bj) facts and a rule whose condition (p ?x ?x) matches none of them:
    proving (q Z) reads every one, far longer than a few milliseconds."""
    base = kb.load_edn("(in-context CxWide)\n(implies (p ?x ?x) (q Z))\n(p Seed Other)\n")
    cid = base.term_id(S("CxWide"))
    p = base.term_id(S("p"))
    assert cid is not None
    assert p is not None
    a = [base.intern(S(f"A{i}")) for i in range(500)]
    b = [base.intern(S(f"B{j}")) for j in range(200)]
    base.bulk_add(cid, ((p, x, y) for y in b for x in a))
    return base


def handle_of(k: KB, text: str, context: str) -> int:
    got = [s for s in reads.find_sentexes(k, text, context) if isinstance(s, Sentex)]
    assert len(got) == 1, got
    return got[0].handle


def bindings(answer: Answer) -> dict[str, str]:
    return {str(k): edn_format.dumps(v) for k, v in answer.bindings.items()}


# -- query-status -----------------------------------------------------------------------


def test_query_status_proved_with_its_proof(sample: KB) -> None:
    st = search.query_status(sample, "(afraidOf MissMuffet Muffet)", "CxNursery")
    assert st.status == "proved"
    assert st.stopped_by is None
    assert st.refutation is None
    assert st.proof is not None
    assert st.proof.depth == 2
    support = {reads.lookup(sample, h).sentence for h in st.proof.support}
    assert sym("(isa Muffet Spider)") in support
    assert sym("(fearsKind MissMuffet Arachnid)") in support


def test_query_status_refuted_by_a_stated_negation(sample: KB) -> None:
    st = search.query_status(sample, "(isa Moby Fish)", "CxWell")
    assert st.status == "refuted"
    assert st.proof is None
    assert st.refutation is not None
    assert st.refutation.support == (handle_of(sample, "(not (isa Moby Fish))", "CxWell"),)


def test_query_status_contested_where_folklore_states_it_too(sample: KB) -> None:
    st = search.query_status(sample, "(isa Moby Fish)", "CxFolklore")
    assert st.status == "contested"
    assert st.proof is not None
    assert st.refutation is not None
    assert st.proof.support == (handle_of(sample, "(isa Moby Fish)", "CxFolklore"),)


def test_query_status_of_a_negation_is_refuted_by_the_sentence(sample: KB) -> None:
    st = search.query_status(sample, "(not (isa Muffet Spider))", "CxNursery")
    assert st.status == "refuted"
    assert st.refutation is not None
    assert st.refutation.support == (handle_of(sample, "(isa Muffet Spider)", "CxNursery"),)


def test_query_status_unknown_when_the_search_ends(sample: KB) -> None:
    st = search.query_status(sample, "(owns Mary Muffet)", "CxNursery")
    assert (st.status, st.stopped_by, st.bound) == ("unknown", None, None)


def test_query_status_cut_by_the_depth_names_the_bound(sample: KB) -> None:
    st = search.query_status(sample, "(afraidOf MissMuffet Muffet)", "CxNursery", {"max-depth": 1})
    assert (st.status, st.stopped_by, st.bound) == ("cut", "max-depth", 1)
    assert st.proof is None


def test_query_status_cut_by_the_clock(wide: KB) -> None:
    st = search.query_status(wide, "(q Z)", "CxWide", {"max-ms": 5})
    assert (st.status, st.stopped_by, st.bound) == ("cut", "max-ms", 5)  # the clock ended it


# -- argue -------------------------------------------------------------------------------


def test_argue_for_and_against_a_functional_value(sample: KB) -> None:
    recs = list(search.argue(sample, "(hasLegs MissMuffet 4)", "CxNursery"))
    args_ = [r for r in recs if isinstance(r, search.Argument)]
    sides = [(a.side, a.by, edn_format.dumps(a.sentence)) for a in args_]
    assert sides == [
        ("for", "proof", "(hasLegs MissMuffet 4)"),
        ("against", "functional", "(hasLegs MissMuffet 2)"),
    ]
    against = args_[1]
    support = {reads.lookup(sample, h).sentence for h in against.support}
    assert sym("(legCount Human 2)") in support
    assert isinstance(recs[-1], Cut)
    assert recs[-1].reason == "max-depth"


def test_argue_against_by_a_stated_negation(sample: KB) -> None:
    recs = list(search.argue(sample, "(isa Moby Fish)", "CxFolklore"))
    got = [(r.side, r.by) for r in recs if isinstance(r, search.Argument)]
    assert got == [("for", "proof"), ("against", "negation")]
    neg = next(r for r in recs if isinstance(r, search.Argument) and r.side == "against")
    assert neg.sentence == sym("(not (isa Moby Fish))")


def test_argue_lists_distinct_proofs_up_to_the_limit(sample: KB) -> None:
    # folklore's Stellaluna flies as a bat and as a bird: two proofs
    every = [
        r
        for r in search.argue(sample, "(canFly Stellaluna)", "CxFolklore", {"limit": 100})
        if isinstance(r, search.Argument)
    ]
    assert [a.side for a in every] == ["for", "for"]
    kinds = [
        {reads.lookup(sample, h).sentence for h in a.support}
        & {sym("(isa Stellaluna Bat)"), sym("(isa Stellaluna Bird)")}
        for a in every
    ]
    assert kinds == [{sym("(isa Stellaluna Bat)")}, {sym("(isa Stellaluna Bird)")}]
    recs = list(search.argue(sample, "(canFly Stellaluna)", "CxFolklore", {"limit": 1}))
    assert [type(r) for r in recs] == [search.Argument, Cut]
    assert isinstance(recs[-1], Cut)
    assert (recs[-1].reason, recs[-1].bound) == ("limit", 1)


def test_argue_is_lazy(sample: KB) -> None:
    before = sample.stats["realized"]
    recs = search.argue(sample, "(canFly Stellaluna)", "CxFolklore", {"limit": 100})
    assert sample.stats["realized"] == before  # nothing searched yet
    first = next(iter(recs))
    assert isinstance(first, search.Argument)
    assert sample.stats["realized"] == before + 1


def test_argue_cut_by_the_clock(wide: KB) -> None:
    recs = list(search.argue(wide, "(q Z)", "CxWide", {"max-ms": 5}))
    assert isinstance(recs[-1], Cut)
    assert (recs[-1].reason, recs[-1].bound) == ("max-ms", 5)


# -- search-tree -------------------------------------------------------------------------


def nodes(n: search.SearchNode) -> Iterator[search.SearchNode]:
    yield n
    for c in n.children:
        yield from nodes(c)


def test_search_tree_shows_the_rules_facts_and_answers(sample: KB) -> None:
    tree = search.search_tree(sample, "(afraidOf MissMuffet ?y)", "CxNursery", {"limit": 12})
    assert tree.outcome == "proved"
    assert tree.nodes == 12 == sum(1 for _ in nodes(tree.root))
    assert tree.cut is not None
    assert (tree.cut.reason, tree.cut.bound) == ("limit", 12)
    root = tree.root
    assert (root.by, root.goal, root.outcome) == ("goal", sym("(afraidOf MissMuffet ?y)"), "proved")
    first = root.children[0]  # the fears-a-kind rule
    assert first.by == "rule"
    assert reads.lookup(sample, first.handle).sentence[0] == S("implies")
    assert first.goal == sym("(fearsKind MissMuffet ?k)")
    found = [n for n in nodes(root) if n.outcome == "answer"]
    assert [edn_format.dumps(n.bindings) for n in found] == ["{?y Muffet}", "{?y ItsyBitsy}"]
    assert tree.answers == 2
    assert all(n.goal is None and n.by == "fact" for n in found)
    assert any(n.outcome == "failed" for n in nodes(root))
    assert any(n.outcome == "unexplored" for n in nodes(root))  # the limit stopped it


def test_search_tree_answers_match_query(sample: KB) -> None:
    tree = search.search_tree(sample, "(isa ?x Spider)", "CxNursery", {"limit": 100})
    assert tree.cut is None
    got = [edn_format.dumps(n.bindings) for n in nodes(tree.root) if n.outcome == "answer"]
    want = [
        "{" + " ".join(f"{k} {v}" for k, v in bindings(a).items()) + "}"
        for a in reads.query(sample, "(isa ?x Spider)", "CxNursery")
        if isinstance(a, Answer)
    ]
    assert got == want == ["{?x Muffet}", "{?x ItsyBitsy}"]


def test_search_tree_marks_the_depth_bound(sample: KB) -> None:
    tree = search.search_tree(
        sample, "(afraidOf MissMuffet Muffet)", "CxNursery", {"max-depth": 1, "limit": 100}
    )
    assert tree.outcome == "max-depth"
    assert tree.cut is None
    assert tree.answers == 0
    assert any(n.outcome == "max-depth" and not n.children for n in nodes(tree.root))


def test_search_tree_cut_by_the_clock(wide: KB) -> None:
    tree = search.search_tree(wide, "(q Z)", "CxWide", {"max-ms": 5, "limit": 100})
    assert tree.cut is not None
    assert tree.cut.reason == "max-ms"
    assert tree.outcome == "unexplored"


# -- the prover and the strategies ---------------------------------------------------------


@pytest.mark.parametrize(
    ("goal", "context"),
    [
        ("(afraidOf ?who Muffet)", "CxNursery"),
        ("(isa ?x Mammal)", "CxPets"),
        ("(avoids ?x ?y)", "CxNursery"),
        ("(livesNear ?x ?y)", "CxPets"),
        ("(hasLegs ?x ?n)", None),
    ],
)
def test_depth_first_makes_the_oracles_search(sample: KB, goal: str, context: str | None) -> None:
    cids = args.visible_contexts(sample, context)
    pat = args.pattern(sample, edn_format.loads(goal), {})
    solved = Oracle(sample, cids, 4).solve((pat,), {}, 0, (), 0)
    engine = [(s, u) for _, s, u in solved]
    prover = search.Prover(sample, cids, 4, Clock(None))
    mine = [(st[2], st[3]) for st in search.depth_first(prover, prover.root((pat,)))]
    assert mine == engine
    assert len(mine) > 0


def test_breadth_first_and_iterative_deepening_find_the_same_answers(sample: KB) -> None:
    cids = args.visible_contexts(sample, "CxNursery")
    pat = args.pattern(sample, edn_format.loads("(afraidOf ?who Muffet)"), {})
    dfs = search.Prover(sample, cids, 3, Clock(None))
    bfs = search.Prover(sample, cids, 3, Clock(None))
    depth_first = {st[2] for st in search.depth_first(dfs, dfs.root((pat,)))}
    breadth_first = [st[2] for st in search.breadth_first(bfs, bfs.root((pat,)))]
    assert set(breadth_first) == depth_first
    assert bfs.steps == dfs.steps  # the same tree, whole, in another order
    provers: list[search.Prover] = []
    ids = list(search.iterative_deepening(sample, cids, (pat,), 3, Clock(None), provers))
    assert {st[2] for st in ids} <= depth_first
    assert min(st[3] for st in ids) == max(st[3] for st in ids) == 2  # the shallowest depth
    assert [p.max_depth for p in provers] == [0, 1, 2]


CONSTANTS = ["a", "b", "c"]
FACTS = [f"(p {x} {y})" for x in CONSTANTS for y in CONSTANTS] + [f"(s {x})" for x in CONSTANTS]
RULES = [
    "(implies (and (p ?x ?y) (q ?y ?z)) (r ?x ?z))",
    "(implies (r ?x ?y) (q ?y ?x))",
    "(implies (and (s ?x) (p ?x ?y)) (q ?x ?y))",
    "(implies (and (p ?x ?y) (different ?x ?y)) (r ?x ?y))",
    "(implies (q ?x ?y) (s ?y))",
]
TERMS = [*CONSTANTS, "?u", "?v"]


@st.composite
def small_kbs(draw: st.DrawFn) -> tuple[str, str, int]:
    facts = draw(st.lists(st.sampled_from(FACTS), max_size=6, unique=True))
    rules = draw(st.lists(st.sampled_from(RULES), min_size=1, max_size=4, unique=True))
    pred = draw(st.sampled_from(["p", "q", "r", "s"]))
    arity = 1 if pred == "s" else 2
    goal = (
        "("
        + " ".join([pred, *draw(st.lists(st.sampled_from(TERMS), min_size=arity, max_size=arity))])
        + ")"
    )
    text = "(in-context CxR)\n" + "\n".join([*facts, *rules])
    return text, goal, draw(st.integers(min_value=0, max_value=4))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_kbs())
def test_the_strategies_search_the_same_tree_as_the_oracle(case: tuple[str, str, int]) -> None:
    text, goal, depth = case
    k = kb.load_edn(text)
    cids = args.visible_contexts(k, "CxR")
    pat = args.pattern(k, edn_format.loads(goal), {})
    solved = Oracle(k, cids, depth).solve((pat,), {}, 0, (), 0)
    engine = [(s, u) for _, s, u in solved]
    dfs = search.Prover(k, cids, depth, Clock(None))
    mine = [(st_[2], st_[3]) for st_ in search.depth_first(dfs, dfs.root((pat,)))]
    assert mine == engine  # the same proofs in the same order
    bfs = search.Prover(k, cids, depth, Clock(None))
    wide = [(st_[2], st_[3]) for st_ in search.breadth_first(bfs, bfs.root((pat,)))]
    assert sorted(wide) == sorted(mine)  # the same tree, level by level
    assert bfs.steps == dfs.steps
    provers: list[search.Prover] = []
    ids = [
        (st_[2], st_[3])
        for st_ in search.iterative_deepening(k, cids, (pat,), depth, Clock(None), provers)
    ]
    assert set(ids) <= set(mine)
    if mine:  # the shallowest proofs, and only those
        assert ids
        assert {u for _, u in ids} == {min(u for _, u in mine)}


def test_compare_tacticians_runs_three_strategies(sample: KB) -> None:
    runs = search.compare_tacticians(sample, "(afraidOf MissMuffet Muffet)", "CxNursery")
    assert [r.strategy for r in runs] == ["depth-first", "breadth-first", "iterative-deepening"]
    assert all(r.status == "proved" and r.answer is not None for r in runs)
    for r in runs:
        assert r.answer is not None
        support = {reads.lookup(sample, h).sentence for h in r.answer.support}
        assert sym("(isa Muffet Spider)") in support
        assert r.steps > 0
        assert r.ms >= 0
    dfs, bfs, ids = runs
    assert dfs.steps < bfs.steps  # the first proof lies down the first branch
    assert ids.steps > dfs.steps  # depths 0 and 1 are searched before depth 2


def test_compare_tacticians_unknown_and_depth_cut(sample: KB) -> None:
    runs = search.compare_tacticians(sample, "(owns Mary Muffet)", "CxNursery")
    assert [r.status for r in runs] == ["unknown"] * 3
    cut = search.compare_tacticians(
        sample, "(afraidOf MissMuffet Muffet)", "CxNursery", {"max-depth": 1}
    )
    assert [(r.status, r.cut and r.cut.reason) for r in cut] == [("cut", "max-depth")] * 3


def test_compare_tacticians_differ_where_the_first_branch_is_deep(sample: KB) -> None:
    runs = search.compare_tacticians(sample, "(avoids ?x ?y)", "CxPets")
    assert all(r.status == "proved" for r in runs)
    steps = {r.strategy: r.steps for r in runs}
    # depth-first dives into the deep isa chains first; iterative deepening finds the
    # depth-3 proof after the shallow levels; breadth-first widens every level
    assert steps["iterative-deepening"] < steps["depth-first"] < steps["breadth-first"]
    depths = {r.strategy: r.answer.depth for r in runs if r.answer is not None}
    assert depths["iterative-deepening"] <= min(depths.values())


def test_breadth_first_is_cut_when_its_frontier_is_full(
    sample: KB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prover_mod, "MAX_FRONTIER", 5)
    runs = search.compare_tacticians(sample, "(avoids ?x ?y)", "CxPets")
    bfs = next(r for r in runs if r.strategy == "breadth-first")
    assert bfs.status == "cut"
    assert bfs.cut is not None
    assert (bfs.cut.reason, bfs.cut.bound) == ("max-frontier", 5)
    assert [r.status for r in runs if r is not bfs] == ["proved", "proved"]


def test_compare_tacticians_shares_the_clock(wide: KB) -> None:
    runs = search.compare_tacticians(wide, "(q Z)", "CxWide", {"max-ms": 30})
    assert [(r.status, r.cut and r.cut.reason) for r in runs] == [("cut", "max-ms")] * 3
    assert all(r.cut is not None and r.cut.bound == 10 for r in runs)  # a third each


# -- ask-within and prove-within ------------------------------------------------------------


def test_ask_within_answers_stored_facts_and_says_it_is_complete(sample: KB) -> None:
    w = search.ask_within(sample, "(isa ?x Spider)", "CxNursery", {"max-ms": 500})
    assert [bindings(a) for a in w.answers] == [{"?x": "Muffet"}, {"?x": "ItsyBitsy"}]
    assert (w.complete, w.cut, w.budget_ms) == (True, None, 500)
    # no rules: what only follows from them is not an answer
    none = search.ask_within(sample, "(isa Muffet Animal)", "CxNursery", {"max-ms": 500})
    assert (none.answers, none.complete) == ((), True)


def test_prove_within_proves_with_rules(sample: KB) -> None:
    w = search.prove_within(sample, "(afraidOf ?who Muffet)", "CxNursery", {"max-ms": 2000})
    who = {bindings(a)["?who"] for a in w.answers}
    assert {"MissMuffet", "TheFly", "TheBeetle"} <= who
    assert w.budget_ms == 2000
    assert w.complete is False
    assert w.cut is not None
    assert w.cut.reason == "max-depth"
    one = search.prove_within(sample, "(afraidOf ?who Muffet)", "CxNursery", {"limit": 1})
    assert len(one.answers) == 1
    assert one.cut is not None
    assert (one.cut.reason, one.cut.bound) == ("limit", 1)
    assert one.budget_ms == MAX_MS_CEILING  # no max-ms: the ceiling


def test_the_within_reads_stop_at_their_budget(wide: KB) -> None:
    for w in (
        search.ask_within(wide, "(p ?x ?x)", "CxWide", {"max-ms": 5}),
        search.prove_within(wide, "(q Z)", "CxWide", {"max-ms": 5}),
    ):
        assert w.complete is False
        assert w.cut is not None
        assert (w.cut.reason, w.cut.bound) == ("max-ms", 5)
        assert w.budget_ms == 5


# -- qualitative-scenarios ----------------------------------------------------------------------


def scenario_set(recs: Any) -> list[tuple[list[str], list[str]]]:
    return [
        ([edn_format.dumps(s) for s in r.true], [edn_format.dumps(s) for s in r.false])
        for r in recs
        if isinstance(r, search.Scenario)
    ]


def test_qualitative_scenarios_drop_the_inconsistent_assignment(sample: KB) -> None:
    recs = list(
        search.qualitative_scenarios(
            sample, ["(isa Humpty Horse)", "(afraidOf Humpty Humpty)"], "CxNursery"
        )
    )
    assert scenario_set(recs) == [
        (["(isa Humpty Horse)", "(afraidOf Humpty Humpty)"], []),
        (["(afraidOf Humpty Humpty)"], ["(isa Humpty Horse)"]),
        ([], ["(isa Humpty Horse)", "(afraidOf Humpty Humpty)"]),
    ]


def test_qualitative_scenarios_respect_negations_and_proofs(sample: KB) -> None:
    # CxWell states (not (isa Moby Fish)); CxNursery proves (isa Muffet Animal)
    got = scenario_set(
        search.qualitative_scenarios(sample, "((isa Moby Fish) (isa Muffet Animal))", "CxNursery")
    )
    assert got == [(["(isa Muffet Animal)"], ["(isa Moby Fish)"])]


def test_qualitative_scenarios_respect_functional_predicates(sample: KB) -> None:
    got = scenario_set(
        search.qualitative_scenarios(sample, ["(legCount Egg 2)", "(legCount Egg 3)"], "CxNursery")
    )
    assert (["(legCount Egg 2)", "(legCount Egg 3)"], []) not in got
    assert len(got) == 3


def test_qualitative_scenarios_limit_and_laziness(sample: KB) -> None:
    sents = [f"(livesIn Jack Place{i})" for i in range(8)]  # 256 consistent assignments
    before = sample.stats["realized"]
    recs = search.qualitative_scenarios(sample, sents, "CxNursery", {"limit": 100})
    assert sample.stats["realized"] == before
    assert len(list(itertools.islice(recs, 3))) == 3
    assert sample.stats["realized"] == before + 3
    capped = list(search.qualitative_scenarios(sample, sents, "CxNursery", {"limit": 5}))
    assert len(capped) == 6
    assert isinstance(capped[-1], Cut)
    assert (capped[-1].reason, capped[-1].bound) == ("limit", 5)


def test_qualitative_scenarios_refusals(sample: KB) -> None:
    with pytest.raises(EngineRefusal) as too_many:
        search.qualitative_scenarios(sample, [f"(p A{i})" for i in range(13)], "CxNursery")
    assert too_many.value.type == "over-ceiling"
    with pytest.raises(EngineRefusal) as open_:
        search.qualitative_scenarios(sample, ["(isa ?x Spider)"], "CxNursery")
    assert open_.value.type == "bad-argument"
    with pytest.raises(EngineRefusal) as empty:
        search.qualitative_scenarios(sample, [], "CxNursery")
    assert empty.value.type == "bad-argument"
    with pytest.raises(EngineRefusal) as bad:
        search.qualitative_scenarios(sample, 7, "CxNursery")  # type: ignore[arg-type]
    assert bad.value.type == "bad-argument"


def test_qualitative_scenarios_cut_by_the_clock(wide: KB) -> None:
    recs = list(search.qualitative_scenarios(wide, ["(q Z)"], "CxWide", {"max-ms": 5}))
    assert isinstance(recs[-1], Cut)
    assert recs[-1].reason == "max-ms"


# -- declarations, refusals, bounds ------------------------------------------------------------

CALLS: dict[str, tuple[Any, ...]] = {
    "query-status": ("(afraidOf MissMuffet ?y)", "CxNursery"),
    "argue": ("(isa Muffet Animal)", "CxNursery"),
    "search-tree": ("(afraidOf MissMuffet ?y)", "CxNursery"),
    "compare-tacticians": ("(isa Muffet Animal)", "CxNursery"),
    "ask-within": ("(isa ?x Spider)", "CxNursery"),
    "prove-within": ("(isa ?x Animal)", "CxNursery"),
    "qualitative-scenarios": (["(isa Humpty Horse)"], "CxNursery"),
}
TOOL_INPUTS: dict[str, dict[str, Any]] = {
    "query-status": {"goal": "(afraidOf MissMuffet ?y)", "context": "CxNursery"},
    "argue": {"sentence": "(isa Muffet Animal)", "context": "CxNursery"},
    "search-tree": {"goal": "(afraidOf MissMuffet ?y)", "context": "CxNursery"},
    "compare-tacticians": {"goal": "(isa Muffet Animal)", "context": "CxNursery"},
    "ask-within": {"sentence": "(isa ?x Spider)", "context": "CxNursery"},
    "prove-within": {"goal": "(isa ?x Animal)", "context": "CxNursery"},
    "qualitative-scenarios": {"sentences": ["(isa Humpty Horse)"], "context": "CxNursery"},
}
HAS_DEPTH = [
    "query-status",
    "argue",
    "search-tree",
    "compare-tacticians",
    "prove-within",
    "qualitative-scenarios",
]
HAS_LIMIT = ["argue", "search-tree", "ask-within", "prove-within", "qualitative-scenarios"]


def realize(x: Any) -> Any:
    return list(x) if isinstance(x, Iterator) else x


def test_every_read_is_declared_a_clocked_read_in_the_op_table() -> None:
    for name in CALLS:
        fn = ops.OPS[name]
        d = declared(fn)
        assert d is not None
        assert (d.name, d.kind, d.clocked) == (name, "read", True)
        assert fn.__module__ in SEARCH_MODULES
        assert fn.__doc__
        assert len(fn.__doc__) > 200


@pytest.mark.parametrize(
    ("name", "opts"),
    [(n, {"max-ms": MAX_MS_CEILING + 1}) for n in CALLS]
    + [(n, {"max-depth": 13}) for n in HAS_DEPTH]
    + [(n, {"limit": 101}) for n in HAS_LIMIT],
)
def test_a_bound_past_the_ceiling_is_refused(sample: KB, name: str, opts: dict[str, Any]) -> None:
    with pytest.raises(EngineRefusal) as err:
        realize(ops.OPS[name](sample, *CALLS[name], opts))
    assert err.value.type == "over-ceiling"
    assert err.value.data["ceiling"] in (MAX_MS_CEILING, 12, 100)


@pytest.mark.parametrize("name", list(CALLS))
def test_unknown_options_and_bad_arguments_are_refused(sample: KB, name: str) -> None:
    fn = ops.OPS[name]
    with pytest.raises(EngineRefusal) as unknown:
        realize(fn(sample, *CALLS[name], {"inherited": True}))
    assert unknown.value.type == "unknown-option"
    with pytest.raises(EngineRefusal) as ctx:
        realize(fn(sample, CALLS[name][0], "CxNowhere"))
    assert ctx.value.type == "unknown-context"
    bad = ["(isa Humpty"] if name == "qualitative-scenarios" else "(isa Humpty"
    with pytest.raises(EngineRefusal) as malformed:
        realize(fn(sample, bad, "CxNursery"))
    assert malformed.value.type == "malformed-sentence"


@pytest.mark.parametrize("name", list(CALLS))
def test_bounds_at_the_ceiling_run(sample: KB, name: str) -> None:
    opts: dict[str, Any] = {"max-ms": MAX_MS_CEILING}
    if name in HAS_DEPTH:
        opts["max-depth"] = 12
    if name in HAS_LIMIT:
        opts["limit"] = 100
    assert realize(ops.OPS[name](sample, *CALLS[name], opts))


# -- through the tools ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CALLS))
async def test_a_tool_naming_no_max_ms_runs_under_the_ceiling(
    sample: KB, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int | None] = []
    real = args.clock

    def spy(*o: Any) -> Clock:
        c = real(*o)
        seen.append(c.budget_ms)
        return c

    monkeypatch.setattr(args, "clock", spy)
    tool = tools.tool_name(name)
    assert tools.op_of(tool) == name
    result = await tools.call(sample, tool, TOOL_INPUTS[name])
    assert result.ok, result.error
    assert seen == [MAX_MS_CEILING]
    seen.clear()
    given = {**TOOL_INPUTS[name], "opts": {"max-ms": 250}}
    assert (await tools.call(sample, tool, given)).ok
    assert seen == [250]


@pytest.mark.parametrize(
    ("name", "opts"),
    [(n, {"max-ms": 10**9}) for n in CALLS]
    + [(n, {"max-depth": 99}) for n in HAS_DEPTH]
    + [(n, {"limit": 101}) for n in HAS_LIMIT],
)
async def test_a_tool_past_a_ceiling_is_refused(
    sample: KB, name: str, opts: dict[str, Any]
) -> None:
    result = await tools.call(sample, tools.tool_name(name), {**TOOL_INPUTS[name], "opts": opts})
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("over-ceiling:"), result.error


@pytest.mark.parametrize(
    ("tool", "given", "expect"),
    [
        ("kb_query_status", {"goal": "(isa Moby Fish)", "context": "CxWell"}, ':status "refuted"'),
        (
            "kb_argue",
            {"sentence": "(hasLegs MissMuffet 4)", "context": "CxNursery"},
            ":sentence (hasLegs MissMuffet 2)",
        ),
        (
            "kb_search_tree",
            {"goal": "(isa ?x Spider)", "context": "CxNursery"},
            ":bindings {?x ItsyBitsy}",
        ),
        (
            "kb_compare_tacticians",
            {"goal": "(isa Muffet Animal)", "context": "CxNursery"},
            ':strategy "iterative-deepening", :status "proved"',
        ),
        (
            "kb_ask_within",
            {"sentence": "(isa ?x Spider)", "context": "CxNursery"},
            ":bindings {?x Muffet}",
        ),
        (
            "kb_prove_within",
            {"goal": "(afraidOf ?who Muffet)", "context": "CxNursery"},
            ":bindings {?who TheFly}",
        ),
        (
            "kb_qualitative_scenarios",
            {"sentences": "((isa Humpty Horse) (afraidOf Humpty Humpty))", "context": "CxNursery"},
            ':kind "scenario", :true ((afraidOf Humpty Humpty)), :false ((isa Humpty Horse))',
        ),
    ],
)
async def test_each_read_answers_through_its_tool(
    sample: KB, tool: str, given: dict[str, Any], expect: str
) -> None:
    result = await tools.call(sample, tool, given)
    assert result.ok, result.error
    assert result.result is not None
    assert expect in result.result, result.result
