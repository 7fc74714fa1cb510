"""Backward chaining, context inheritance, the depth bound and the cooperative clock."""

from __future__ import annotations

import time
from typing import Any

import edn_format
import pytest

from vaelii_llm import _declare as declare
from vaelii_llm import kb
from vaelii_llm.kb import _reads as reads
from vaelii_llm.kb import _types as types

S = edn_format.Symbol


def answers(records: Any) -> list[dict[str, str]]:
    return [
        {str(k): edn_format.dumps(v) for k, v in r.bindings.items()}
        for r in records
        if isinstance(r, types.Answer)
    ]


def cuts(records: Any) -> list[types.Cut]:
    return [r for r in records if isinstance(r, types.Cut)]


@pytest.fixture(scope="module")
def sample() -> kb.KB:
    return kb.sample()


def test_two_rule_steps_who_muffet_fears(sample: kb.KB) -> None:
    recs = list(reads.query(sample, "(afraidOf MissMuffet ?y)", "CxNursery"))
    got = [a for a in recs if isinstance(a, types.Answer)]
    assert {"?y": "Muffet"} in answers(recs)
    muffet = next(a for a in got if str(a.bindings[S("?y")]) == "Muffet")
    assert muffet.depth == 2  # afraidOf rule, then the isa/genls rule
    # the support names the two rules and the facts
    support = [reads.lookup(sample, h).sentence for h in muffet.support]
    assert (S("isa"), S("Muffet"), S("Spider")) in support
    assert (S("fearsKind"), S("MissMuffet"), S("Arachnid")) in support
    assert sum(1 for s in support if s[0] == S("implies")) == 2


def test_who_is_afraid_of_muffet(sample: kb.KB) -> None:
    who = {a["?who"] for a in answers(reads.query(sample, "(afraidOf ?who Muffet)", "CxNursery"))}
    assert {"MissMuffet", "TheFly", "TheBeetle"} <= who


def test_what_is_a_mammal(sample: kb.KB) -> None:
    mammals = {a["?x"] for a in answers(reads.query(sample, "(isa ?x Mammal)", "CxNursery"))}
    assert {"MissMuffet", "MarysLamb", "DiddleCat", "LittleDog"} <= mammals
    assert "Muffet" not in mammals


def test_context_inheritance(sample: kb.KB) -> None:
    # CxPets inherits CxWell's rules and taxonomy but not CxNursery's facts
    assert reads.query_p(sample, "(isa Rex Mammal)", "CxPets")
    assert not reads.query_p(sample, "(isa Muffet Spider)", "CxPets")
    assert reads.ask_p(sample, "(isa Muffet Spider)", "CxNursery")
    assert not reads.ask_p(sample, "(isa Muffet Spider)", "CxWell")  # parents do not see children
    # without a context, every context is read
    assert reads.query_p(sample, "(isa Muffet Animal)")


def test_depth_bound_is_visible_and_limits(sample: kb.KB) -> None:
    shallow = list(reads.query(sample, "(isa Muffet Organism)", "CxNursery", {"max-depth": 2}))
    assert answers(shallow) == []
    assert cuts(shallow) == [types.Cut("max-depth", 2, 0)]
    deep = list(reads.query(sample, "(isa Muffet Organism)", "CxNursery", {"max-depth": 6}))
    assert answers(deep) == [{}]
    # a goal nothing can prove: no answers and no cut
    assert list(reads.query(sample, "(colour Muffet Purple)", "CxNursery")) == []


def chain_kb(steps: int) -> kb.KB:
    lines = ["(in-context CxChain)", "(p0 A)"]
    lines += [f"(implies (p{i} ?x) (p{i + 1} ?x))" for i in range(steps)]
    return kb.load_edn("\n".join(lines))


def test_chaining_to_depth() -> None:
    k = chain_kb(8)
    recs = list(reads.query(k, "(p8 ?x)", "CxChain", {"max-depth": 8}))
    assert answers(recs) == [{"?x": "A"}]
    assert recs[0].depth == 8
    assert len(recs[0].support) == 9
    assert not reads.query_p(k, "(p8 A)", "CxChain", {"max-depth": 7})
    esc = list(reads.escalate(k, "(p5 ?x)", "CxChain"))
    assert [r.depth for r in esc if isinstance(r, types.Answer)] == [5]


def test_escalate_stops_at_exhaustion_or_ceiling() -> None:
    k = chain_kb(3)
    assert list(reads.escalate(k, "(p3 B)", "CxChain")) == []  # exhausted at depth 3, no cut
    loop = kb.load_edn("(in-context C) (implies (q ?x) (q ?x))")
    assert list(reads.escalate(loop, "(q A)", "C", {"max-depth": 4})) == [
        types.Cut("max-depth", 4, 0)
    ]


def explosive_kb() -> kb.KB:
    lines = ["(in-context CxG)"]
    lines += [f"(link N{i} N{j})" for i in range(30) for j in range(30) if i != j]
    lines += [
        "(implies (link ?x ?y) (reach ?x ?y))",
        "(implies (and (link ?x ?y) (reach ?y ?z)) (reach ?x ?z))",
    ]
    return kb.load_edn("\n".join(lines))


def test_clock_cut_is_visible() -> None:
    k = explosive_kb()
    recs = list(reads.query(k, "(reach N0 Nowhere)", "CxG", {"max-depth": 12, "max-ms": 50}))
    assert recs == [types.Cut("max-ms", 50, 0)]  # the search itself never ends: the clock did
    with pytest.raises(kb.EngineRefusal) as e:
        reads.query_p(k, "(reach N0 Nowhere)", "CxG", {"max-depth": 12, "max-ms": 30})
    assert e.value.type == "clock-cut"


def test_clock_holds_a_slow_lazy_consumer() -> None:
    k = explosive_kb()
    gen = reads.query(k, "(reach N0 ?z)", "CxG", {"max-depth": 12, "max-ms": 100})
    got: list[Any] = []
    for rec in gen:
        got.append(rec)
        time.sleep(0.02)  # the consumer is slow; the deadline is absolute
    assert isinstance(got[-1], types.Cut)
    assert got[-1].reason == "max-ms"
    assert got[-1].yielded == len(got) - 1
    # each pause is at least 20 ms, so past five of them the 100 ms deadline has gone
    # by however loaded the machine is: the clock, not the closure, ended the answers
    assert got[-1].yielded <= 100 // 20 + 1


def test_clocked_reads_default_to_the_ceiling() -> None:
    k = explosive_kb()
    gen = reads.query(k, "(reach N0 Nowhere)", "CxG", {"max-depth": 3})
    # not run to the end here: the clock object carries the ceiling
    frame = gen.gi_frame
    assert frame is not None
    assert frame.f_locals["clock"].budget_ms == declare.MAX_MS_CEILING
    gen.close()


def test_different_and_variable_sharing() -> None:
    k = kb.load_edn(
        """(in-context C)
        (parent Ann Bob) (parent Bob Cid) (parent Bob Dee)
        (implies (and (parent ?g ?p) (parent ?p ?c)) (grandparent ?g ?c))
        (implies (and (parent ?p ?a) (parent ?p ?b) (different ?a ?b)) (sibling ?a ?b))"""
    )
    assert answers(reads.query(k, "(grandparent Ann ?c)", "C")) == [{"?c": "Cid"}, {"?c": "Dee"}]
    assert answers(reads.query(k, "(sibling Cid ?s)", "C")) == [{"?s": "Dee"}]


def test_nested_sentences_and_literals() -> None:
    k = kb.load_edn(
        '(in-context C) (says Ann (likes Bob "tea")) (age Ann 42) (ratio Ann 0.5) (flag Ann true)'
    )
    assert answers(reads.query(k, "(says Ann (likes ?who ?what))", "C")) == [
        {"?who": "Bob", "?what": '"tea"'}
    ]
    assert reads.ask_p(k, "(age Ann 42)", "C")
    assert not reads.ask_p(k, "(age Ann 42.0)", "C")  # 42 and 42.0 are different terms
    assert reads.ask_p(k, "(flag Ann true)", "C")
    assert not reads.ask_p(k, "(flag Ann 1)", "C")


def test_why_not_both_shapes(sample: kb.KB) -> None:
    recs = list(reads.why_not(sample, "(afraidOf Jack Muffet)", "CxNursery"))
    fears = [r for r in recs if isinstance(r, types.WhyNot)]
    assert fears
    assert not any(r.holds for r in fears)
    fears_rule = [r for r in fears if any(m[:2] == (S("fearsKind"), S("Jack")) for m in r.missing)]
    assert fears_rule  # Muffet is a spider: what is missing is Jack fearing that kind
    assert (S("isa"), S("Muffet"), S("Spider")) in fears_rule[0].supported
    # the handle shape: would (isa Muffet Spider) still hold without its sentex? no
    h = next(r.handle for r in reads.find_sentexes(sample, "(isa Muffet Spider)"))
    rec = list(reads.why_not(sample, h))
    assert rec
    assert not rec[0].holds
    # a derived sentence holds
    assert next(iter(reads.why_not(sample, "(isa Muffet Animal)", "CxNursery"))).holds
