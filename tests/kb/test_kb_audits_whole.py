"""The unbounded reads: explain-levels and the whole-KB audits of what the KB declares
about its predicates. Real ops of the engine, never tools; the narrower bounded reads
keep answering."""

from __future__ import annotations

from typing import Any

import edn_format
import pytest

from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._declare import MAX_DEPTH_CEILING
from vaelii_llm._declare import declared
from vaelii_llm.kb import _audits_whole as audits_whole
from vaelii_llm.kb import _ops as ops
from vaelii_llm.kb import _reads as reads
from vaelii_llm.kb._prover import Prover
from vaelii_llm.kb._query import Clock
from vaelii_llm.kb._store import KB
from vaelii_llm.kb._types import Problem
from vaelii_llm.kb._types import Sentex

S = edn_format.Symbol
UNBOUNDED = ("explain-levels", "all-specified-violations", "all-functional-at-instant-violations")


def sym(text: str) -> Any:
    return edn_format.loads(text)


@pytest.fixture(scope="module")
def sample() -> KB:
    return kb.sample()


def handle_of(k: KB, text: str, context: str) -> int:
    got = [s for s in reads.find_sentexes(k, text, context) if isinstance(s, Sentex)]
    assert len(got) == 1, got
    return got[0].handle


def stored(k: KB, text: str, context: str) -> int:
    """The handle of a sentence stored in the context itself (any arity)."""
    want = sym(text)
    [h] = [
        s.handle
        for s in reads.sentexes_in_context(k, context)
        if isinstance(s, Sentex) and s.sentence == want
    ]
    return h


# -- explain-levels ----------------------------------------------------------------------------


def test_explain_levels_gives_every_level_of_the_proof(sample: KB) -> None:
    [proof] = audits_whole.explain_levels(sample, "(afraidOf MissMuffet Muffet)", "CxNursery")
    assert (proof.proof, proof.depth) == (1, 2)
    levels = [[(edn_format.dumps(s.sentence), s.by) for s in lv.steps] for lv in proof.levels]
    assert levels == [
        [("(afraidOf MissMuffet Muffet)", "rule")],
        [("(fearsKind MissMuffet Arachnid)", "fact"), ("(isa Muffet Arachnid)", "rule")],
        [("(isa Muffet Spider)", "fact"), ("(genls Spider Arachnid)", "fact")],
    ]
    assert [lv.level for lv in proof.levels] == [0, 1, 2]
    facts = [s for lv in proof.levels for s in lv.steps if s.by == "fact"]
    for step in facts:  # each fact step names the sentex that states it
        assert reads.lookup(sample, step.handle).sentence == step.sentence
    rule = proof.levels[0].steps[0]
    assert reads.lookup(sample, rule.handle).sentence[0] == S("implies")


def test_explain_levels_builds_every_proof(sample: KB) -> None:
    got = audits_whole.explain_levels(sample, "(canFly Stellaluna)", "CxFolklore")
    assert [e.proof for e in got] == [1, 2]
    cid = sample.term_id(S("CxFolklore"))
    assert cid is not None
    goal = (sample.term_id(S("canFly")), sample.term_id(S("Stellaluna")))
    want = list(
        Prover(sample, sample.ancestors(cid), MAX_DEPTH_CEILING, Clock(None)).solve((goal,))
    )
    assert len(got) == len(want)
    kinds = {
        edn_format.dumps(s.sentence)
        for e in got
        for s in e.levels[1].steps
        if s.sentence[0] == S("isa")
    }
    assert kinds == {"(isa Stellaluna Bat)", "(isa Stellaluna Bird)"}


def test_explain_levels_binds_an_open_goal(sample: KB) -> None:
    got = audits_whole.explain_levels(sample, "(isa ?x Spider)", "CxNursery")
    assert [{str(k): str(v) for k, v in e.bindings.items()} for e in got] == [
        {"?x": "Muffet"},
        {"?x": "ItsyBitsy"},
    ]
    assert all(e.levels[0].steps[0].by == "fact" for e in got)


# -- all-specified-violations ---------------------------------------------------------------


def test_all_specified_violations_finds_an_argument_of_the_wrong_type(sample: KB) -> None:
    found = audits_whole.all_specified_violations(sample)
    assert [p.kind for p in found] == ["arg-isa-violation"]
    [p] = found
    assert p.handles == (
        handle_of(sample, "(fearsKind Humpty Horse)", "CxNursery"),
        handle_of(sample, "(argIsa fearsKind 1 Animal)", "CxWell"),
    )
    assert "Humpty" in p.detail
    assert "Animal" in p.detail


def test_all_specified_violations_checks_arities_and_the_declarations_context() -> None:
    k = kb.load_edn(
        "(in-context CxTop)\n"
        "(likes Ann Bob)\n(likes Ann)\n(isa Ann Person)\n(isa Bob Person)\n"
        "(arity likes 2)\n"
        "(genlCtx CxKid CxTop)\n"
        "(in-context CxKid)\n(argIsa likes 2 Person)\n(likes Bob Rock)\n(likes Ann Cat)\n"
        "(isa Cat Person)\n"
    )
    found = audits_whole.all_specified_violations(k)
    assert sorted((p.kind, p.handles[0]) for p in found) == sorted(
        [
            ("arity-violation", stored(k, "(likes Ann)", "CxTop")),
            ("arg-isa-violation", handle_of(k, "(likes Bob Rock)", "CxKid")),
        ]
    )  # CxTop's (likes Ann Bob) does not see CxKid's argIsa; (likes Ann Cat) is typed


# -- all-functional-at-instant-violations --------------------------------------------------------


def test_functional_violations_in_the_sample(sample: KB) -> None:
    found = audits_whole.all_functional_at_instant_violations(sample)
    assert found
    assert {p.kind for p in found} == {"functional-violation"}
    muffet = [p for p in found if "(hasLegs MissMuffet" in p.detail]
    assert len(muffet) == 1
    assert "2, 4" in muffet[0].detail
    assert "CxNursery" in muffet[0].detail
    support = {reads.lookup(sample, h).sentence for h in muffet[0].handles}
    assert {sym("(legCount Human 2)"), sym("(legCount Mammal 4)")} <= support
    assert sym("(functional hasLegs)") in support
    assert not any("(hasLegs Muffet " in p.detail for p in found)  # a spider has 8 legs only


def test_functional_violations_are_per_instant_and_reported_once() -> None:
    k = kb.load_edn(
        "(in-context CxBase)\n(functional colour)\n"
        "(genlCtx CxA CxBase)\n(genlCtx CxB CxBase)\n(genlCtx CxAKid CxA)\n"
        "(in-context CxA)\n(colour Rex Brown)\n(colour Tom Grey)\n(colour Tom Black)\n"
        "(in-context CxB)\n(colour Rex Black)\n"
        "(in-context CxAKid)\n(colour Fido Gold)\n"
    )
    found = audits_whole.all_functional_at_instant_violations(k)
    # Rex is brown in CxA and black in CxB: no context sees both, so no instant has two
    # values; Tom has two in CxA, reported there and not again for CxAKid
    assert [p.detail for p in found] == ["(colour Tom …) has 2 values in CxA: Black, Grey"]
    assert set(found[0].handles) >= {
        handle_of(k, "(colour Tom Grey)", "CxA"),
        handle_of(k, "(colour Tom Black)", "CxA"),
        handle_of(k, "(functional colour)", "CxBase"),
    }


def test_functional_violations_follow_rules() -> None:
    k = kb.load_edn(
        "(in-context CxW)\n(functional mother)\n"
        "(implies (parentF ?m ?c) (mother ?c ?m))\n"
        "(mother Abel Eve)\n(parentF Lilith Abel)\n"
    )
    [p] = audits_whole.all_functional_at_instant_violations(k)
    assert "Eve, Lilith" in p.detail


# -- the ops, and the tools that exclude them --------------------------------------------------


def test_the_unbounded_ops_are_engine_ops_and_never_tools(sample: KB) -> None:
    read_ops = set(tools.read_ops())
    for name in UNBOUNDED:
        fn = ops.OPS[name]
        d = declared(fn)
        assert d is not None
        assert (d.name, d.kind) == (name, "unbounded")
        assert fn.__module__ == "vaelii_llm.kb._audits_whole"
        assert name in tools.UNBOUNDED_OPS
        assert name not in read_ops
        assert tools.op_of(tools.tool_name(name)) is None
    names = {s.name for s in tools.schemas()}
    assert not names & {tools.tool_name(n) for n in UNBOUNDED}


async def test_calling_an_unbounded_op_as_a_tool_is_refused(sample: KB) -> None:
    result = await tools.call(sample, "kb_explain_levels", {"sentence": "(isa Muffet Animal)"})
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("unknown-tool:")


@pytest.mark.parametrize(
    ("tool", "given", "expect"),
    [
        ("kb_sentex_count", {}, "count"),
        ("kb_term_count", {}, "count"),
        ("kb_find_terms", {"search": "Muffet"}, "MissMuffet"),
        (
            "kb_escalate",
            {"goal": "(afraidOf MissMuffet Muffet)", "context": "CxNursery"},
            ":depth 2",
        ),
        ("kb_kb_integrity", {}, "()"),
        (
            "kb_argue",
            {"sentence": "(hasLegs MissMuffet 4)", "context": "CxNursery"},
            "(hasLegs MissMuffet 2)",
        ),
        (
            "kb_why_not",
            {"sentence": "(fearsKind Humpty Horse)", "context": "CxNursery"},
            ":holds true",
        ),
    ],
)
async def test_the_narrower_bounded_reads_keep_answering(
    sample: KB, tool: str, given: dict[str, Any], expect: str
) -> None:
    result = await tools.call(sample, tool, given)
    assert result.ok, result.error
    assert result.result is not None
    if expect == "count":
        op = tools.op_of(tool)
        assert op is not None
        assert int(result.result) == ops.OPS[op](sample) > 100
    elif expect == "()":
        assert result.result in ("()", "[]")  # no problem found
    else:
        assert expect in result.result, result.result


def test_the_sample_passes_the_bounded_integrity_check(sample: KB) -> None:
    # the declarations added for the audits break no arity the bounded check holds
    assert [p for p in reads_integrity(sample) if isinstance(p, Problem)] == []


def reads_integrity(k: KB) -> list[Any]:
    integrity = ops.OPS["kb-integrity"]
    return list(integrity(k))
