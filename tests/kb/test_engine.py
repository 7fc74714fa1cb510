"""The engine boundary (`vaelii_llm.engine`) and every op of the embedded engine."""

from __future__ import annotations

import inspect
import itertools
import typing
from pathlib import Path
from typing import Any

import edn_format
import msgspec
import pytest

from tests.conftest import BIG_KB_SENTEXES
from vaelii_llm import _declare as declare
from vaelii_llm import engine
from vaelii_llm import kb
from vaelii_llm.kb import _audits as audits
from vaelii_llm.kb import _ops as ops
from vaelii_llm.kb import _reads as reads
from vaelii_llm.kb import _types as types
from vaelii_llm.kb import _writes as writes

S = edn_format.Symbol
E = engine.embedded()

READS = {
    "find-sentexes",
    "sentexes-in-context",
    "ask?",
    "ask",
    "ask-all",
    "query",
    "query?",
    "why-not",
    "types-of",
    "types",
    "contexts",
    "sentex-count",
    "term-count",
    "find-terms",
    "describe",
    "lookup",
    "escalate",
    "kb-integrity",
    "query-status",
    "argue",
    "search-tree",
    "compare-tacticians",
    "ask-within",
    "prove-within",
    "qualitative-scenarios",
}
UNBOUNDED = {
    "handles",
    "terms",
    "kb-quality",
    "exposed-clashes",
    "explain-levels",
    "all-specified-violations",
    "all-functional-at-instant-violations",
}
WRITES = {
    "assert",
    "retract",
    "edit",
    "edit-with-consequences",
    "forward-chain",
    "preview",
    "clear-caches",
    "abduce",
    "abduce-discard",
}


@pytest.fixture
def k() -> kb.KB:
    return kb.sample()


# -- the description ---------------------------------------------------------------


def test_every_op_the_issue_lists_exists() -> None:
    expected = READS | UNBOUNDED | WRITES | {"kb-diff", "changes-since", "subscribe"}
    assert expected | {"version", "op-names"} == set(E.ops)
    assert E.read_ops == READS
    assert E.kbless_ops == {"version", "op-names"}
    assert E.feed_ops == {"changes-since", "subscribe"}
    assert E.host_path_ops == {"kb-diff"}
    assert E.unbounded_ops == UNBOUNDED
    assert E.write_ops == WRITES
    assert E.refusal is kb.EngineRefusal
    assert E.ops["version"]() == E.version
    assert E.ops["op-names"]() == sorted(E.ops)


def test_every_op_is_declared_once_under_its_table_name() -> None:
    for name, fn in E.ops.items():
        d = engine.declared(fn)
        assert d is not None, name
        assert d.name == name
    # the op table is read off the declarations: no module lists an op by name
    source = Path(ops.__file__).read_text()
    assert '"query"' not in source
    assert '"retract"' not in source


def _bounds(cls: type[engine.Options] | None) -> dict[str, tuple[Any, Any, Any]]:
    """key -> (least, ceiling, default), as msgspec's schema of the Struct says."""
    assert cls is not None
    whole = msgspec.json.schema(cls)
    props = whole["$defs"][cls.__name__]["properties"]
    return {k: (p.get("minimum"), p.get("maximum"), p.get("default")) for k, p in props.items()}


def test_ceilings_and_defaults_are_the_declared_struct() -> None:
    query = _bounds(E.opts("query"))
    assert query["max-depth"] == (0, 12, 6)
    assert query["max-ms"] == (1, 10_000, 10_000)  # a clocked read's default: the ceiling
    assert {"query", "query?", "why-not", "escalate", "kb-integrity"} <= E.clocked
    for op in E.ops:
        opts = E.opts(op)
        if opts is not None:
            param = inspect.signature(E.ops[op], eval_str=True).parameters["opts"]
            assert param.annotation is opts, op  # the body receives the Struct
            assert param.default == opts(), op  # whose defaults are the declared ones
    assert _bounds(E.opts("find-terms"))["limit"] == (0, 100, 100)
    assert _bounds(E.opts("escalate"))["max-depth"] == (0, 12, 12)


def test_an_op_receives_its_options_typed_checked_once() -> None:
    got: list[Any] = []

    @engine.op("probe", opts=declare.ProofOpts, clocked=True)
    def probe(kb: Any, opts: declare.ProofOpts = declare.PROOF) -> None:
        """Records its options."""
        got.append(opts)

    probe(None)
    probe(None, None)
    probe(None, {"max-depth": 3})
    probe(None, opts={edn_format.Keyword("max-ms"): 7})
    given = declare.ProofOpts(max_depth=2)
    probe(None, given)
    assert got == [
        declare.PROOF,
        declare.PROOF,
        declare.ProofOpts(max_depth=3),
        declare.ProofOpts(max_ms=7),
        given,
    ]
    assert got[-1] is given  # an instance of the Struct is not checked again
    with pytest.raises(kb.EngineRefusal, match="over-ceiling"):
        probe(None, {"max-depth": 13})
    with pytest.raises(TypeError, match="opts"):
        engine.op("x", opts=declare.ClockOpts)(lambda kb: None)


def test_a_declaration_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown op kind"):
        engine.op("x", kind="reads")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Options subclass"):
        engine.op("x", opts=dict)  # type: ignore[arg-type]

    @engine.op("wipe", kind="irreversible")
    def wipe(kb: kb.KB) -> None:
        """Erase."""

    assert engine.is_irreversible(wipe)
    # an op nobody declared has no kind, so it is none of the engine's sets
    e2 = E.with_ops({"echo": lambda kb, x: x, "wipe": wipe})
    assert e2.kinds["echo"] is None
    assert "echo" not in e2.read_ops | e2.write_ops
    assert "wipe" in e2.write_ops


def test_irreversible_marks() -> None:
    marked = {op for op, fn in E.ops.items() if engine.is_irreversible(fn)}
    assert marked == {"retract", "abduce-discard"}
    assert marked <= E.write_ops

    @engine.irreversible
    def wipe(kb: kb.KB) -> None:
        """Erase."""

    assert engine.is_irreversible(wipe)
    assert not engine.is_irreversible(reads.query)


def test_signatures_are_readable() -> None:
    hints = typing.get_type_hints(reads.query)
    assert hints["goal"] is engine.Sentence
    assert typing.get_args(hints["context"]) == (engine.Context, type(None))
    assert hints["opts"] is declare.ProofOpts
    assert all(k in engine.ARG_KINDS for k in (engine.Sentence, engine.Context, engine.Term))
    assert engine.Handle in engine.ARG_KINDS
    shapes = typing.get_overloads(reads.why_not)
    assert [list(inspect.signature(s).parameters) for s in shapes] == [
        ["kb", "handle"],
        ["kb", "sentence", "context", "opts"],
    ]
    params = inspect.signature(reads.ask_all).parameters
    assert any(p.kind is p.VAR_POSITIONAL for p in params.values())
    for op, fn in E.ops.items():
        assert fn.__doc__, op
        assert fn.__doc__.strip(), op
        if op not in E.kbless_ops:
            assert next(iter(inspect.signature(fn).parameters)) == "kb", op


def test_replace_adds_an_op() -> None:
    e2 = E.replace(ops={**E.ops, "echo": lambda kb, x: x})
    assert "echo" in e2.ops
    assert "echo" not in E.ops
    assert E.with_ops({"echo": lambda kb, x: x}).ops.keys() == e2.ops.keys()


# -- reads -------------------------------------------------------------------------


def test_reads(k: kb.KB) -> None:
    found = list(reads.find_sentexes(k, "(isa ?x Spider)", "CxNursery"))
    assert {str(r.sentence[1]) for r in found} == {"Muffet", "ItsyBitsy"}
    in_ctx = list(reads.sentexes_in_context(k, "CxPets"))
    assert all(str(r.context) == "CxPets" for r in in_ctx)
    inherited = list(reads.sentexes_in_context(k, "CxPets", {"inherited": True}))
    assert len(inherited) > len(in_ctx)
    assert reads.ask_p(k, "(isa Muffet Spider)", "CxNursery")
    bound = list(reads.ask(k, "(fearsKind ?who ?kind)", "CxNursery"))
    assert {str(a.bindings[S("?who")]) for a in bound} >= {"MissMuffet", "FarmersWife"}
    assert all(len(a.support) == 1 for a in bound)
    conj = list(reads.ask_all(k, "CxNursery", "(owns ?o ?p)", "(isa ?p Lamb)"))
    assert [str(a.bindings[S("?o")]) for a in conj] == ["Mary"]
    assert reads.query_p(k, "(hasLegs Muffet 8)", "CxNursery")
    assert [str(t) for t in reads.types_of(k, S("Muffet"))] == [
        "Animal",
        "Arachnid",
        "Arthropod",
        "Invertebrate",
        "Organism",
        "Spider",
    ]
    assert S("Mammal") in reads.types(k)
    assert reads.sentex_count(k) == sum(c.sentexes for c in reads.contexts(k))
    assert reads.sentex_count(k, "CxPets") == len(in_ctx)
    assert reads.term_count(k) > 100
    assert [t for t in reads.find_terms(k, "muff") if isinstance(t, S)] == [
        S("MissMuffet"),
        S("Muffet"),
    ]
    assert len(reads.find_terms(k, "", {"limit": 5})) == 5
    desc = reads.describe(k, S("Muffet"))
    assert all(S("Muffet") in r.sentence for r in desc)
    assert len(reads.describe(k, S("Muffet"), {"limit": 2})) == 2
    h = desc[0].handle
    assert reads.lookup(k, h) == desc[0]
    assert any(isinstance(r, types.Answer) for r in reads.escalate(k, "(afraidOf ?x Muffet)"))
    assert list(audits.kb_integrity(k)) == []


def test_kb_integrity_finds_problems() -> None:
    bad = kb.load_edn(
        """(likes A B C) (arity likes 2) (likes A B)
        (genlCtx CxA CxB) (genlCtx CxB CxA)
        (implies (nothingSays ?x) (odd ?x ?y))"""
    )
    kinds = {p.kind for p in audits.kb_integrity(bad) if isinstance(p, types.Problem)}
    assert kinds == {"context-cycle", "unsafe-rule", "dead-condition", "arity-mismatch"}


def test_unbounded_reads(k: kb.KB) -> None:
    hs = audits.handles(k)
    assert hs == sorted(hs)
    assert len(hs) == reads.sentex_count(k)
    ts = audits.terms(k)
    assert len(ts) == reads.term_count(k)
    clashes = audits.exposed_clashes(k)
    assert len(clashes) == 2
    assert all("CxFolklore" in p.detail for p in clashes)
    assert all(isinstance(p, types.Problem) for p in audits.kb_quality(k))


# -- laziness on a big KB ----------------------------------------------------------


def test_laziness_over_a_big_kb(big_kb: kb.KB) -> None:
    assert reads.sentex_count(big_kb, "CxSynthetic") >= 0.98 * BIG_KB_SENTEXES
    for read in (
        lambda: reads.sentexes_in_context(big_kb, "CxSynthetic"),
        lambda: reads.find_sentexes(big_kb, "(rel3 ?x ?y)", "CxSynthetic"),
        lambda: reads.query(big_kb, "(isa ?x ?t)", "CxSynthetic"),
    ):
        big_kb.stats["realized"] = 0
        first = list(itertools.islice(read(), 10))
        assert len(first) == 10
        assert big_kb.stats["realized"] <= 30


def test_bound_lookup_does_not_scan(big_kb: kb.KB) -> None:
    small = kb.synthetic(1000)
    pat = edn_format.loads("(?p E7 ?x)")
    assert len(list(reads.find_sentexes(big_kb, pat))) == len(list(reads.find_sentexes(small, pat)))


# -- options and refusals ----------------------------------------------------------


def _realize(fn: Any, *args: Any) -> None:
    r = fn(*args)
    if inspect.isgenerator(r):
        list(r)


def refusal(fn: Any, *args: Any) -> kb.EngineRefusal:
    with pytest.raises(kb.EngineRefusal) as e:
        _realize(fn, *args)
    return e.value


def test_unknown_option_names_the_key_and_the_accepted(k: kb.KB) -> None:
    e = refusal(reads.query, k, "(isa ?x Dog)", "CxPets", {"max-dept": 3})
    assert e.type == "unknown-option"
    assert e.data == {"key": "max-dept", "accepted": ["max-depth", "max-ms"]}
    assert "max-depth" in str(e)
    assert "unknown-option" in str(e)
    assert refusal(reads.find_terms, k, "x", {"max-ms": 3}).type == "unknown-option"
    # EDN keyword keys read as their names
    kw = edn_format.Keyword("max-depth")
    assert list(reads.query(k, "(isa Rex Dog)", "CxPets", {kw: 1}))


def test_option_values_and_ceilings(k: kb.KB) -> None:
    assert refusal(reads.query, k, "(isa ?x Dog)", None, {"max-depth": 13}).type == "over-ceiling"
    assert refusal(reads.query, k, "(isa ?x Dog)", None, {"max-ms": 10_001}).type == "over-ceiling"
    assert refusal(reads.query, k, "(isa ?x Dog)", None, {"max-depth": "3"}).type == "bad-option"
    assert refusal(reads.query, k, "(isa ?x Dog)", None, {"max-ms": 0}).type == "bad-option"
    assert refusal(reads.query, k, "(isa ?x Dog)", None, {"max-depth": True}).type == "bad-option"
    assert refusal(reads.query, k, "(isa ?x Dog)", None, [1]).type == "bad-option"
    assert refusal(reads.sentexes_in_context, k, "CxPets", {"inherited": 1}).type == "bad-option"


def test_a_limit_is_held_by_the_engine_too() -> None:
    many = kb.synthetic(5_000)  # 500 entities: more terms than the limit
    assert len(reads.find_terms(many, "E")) == 100  # none named: the declared default
    assert len(reads.find_terms(many, "E", {"limit": 3})) == 3
    assert refusal(reads.find_terms, many, "E", {"limit": 101}).type == "over-ceiling"
    assert len(reads.describe(many, S("isa"))) == 100
    assert refusal(reads.describe, many, S("isa"), {"limit": -1}).type == "bad-option"


async def test_the_engine_and_the_tools_refuse_an_option_in_the_same_words(k: kb.KB) -> None:
    from vaelii_llm import tools

    for bad in ({"max-depth": 13}, {"max-ms": 0}, {"max-depth": 2.5}, {"inherited": 1}):
        op, fn, given = (
            ("sentexes-in-context", reads.sentexes_in_context, {"context": "CxPets"})
            if "inherited" in bad
            else ("query", reads.query, {"goal": "(isa ?x Dog)", "context": "CxPets"})
        )
        args = [k, *given.values(), bad]
        engine_says = str(refusal(fn, *args))
        out = await tools.call(k, tools.tool_name(op), {**given, "opts": bad})
        assert out.error == engine_says, bad


def test_refusals(k: kb.KB) -> None:
    assert refusal(reads.query, k, "(isa ?x", "CxPets").type == "malformed-sentence"
    assert refusal(reads.query, k, "[isa ?x Dog]", "CxPets").type == "malformed-sentence"
    assert refusal(reads.query, k, "(:isa ?x Dog)", "CxPets").type == "malformed-sentence"
    assert refusal(reads.query, k, '(isa ?x #inst "2020")', None).type == "malformed-sentence"
    assert refusal(reads.query, k, "(" * 100_000, None).type == "malformed-sentence"
    assert refusal(reads.query, k, "(isa ?x Dog)", "CxNope").type == "unknown-context"
    assert refusal(reads.query, k, "(isa ?x Dog)", "(x)").type == "malformed-context"
    assert refusal(reads.lookup, k, 10**9).type == "unknown-handle"
    assert refusal(reads.lookup, k, "7").type == "bad-argument"
    e = refusal(reads.query, k, "(isa Rex Dog Extra)", "CxPets")
    assert e.type == "arity-mismatch"
    assert e.data["expected"] == 2
    assert e.data["given"] == 3
    assert refusal(writes.assert_sentence, k, "(isa Rex)", "CxPets").type == "arity-mismatch"
    rule = refusal(writes.assert_sentence, k, "(implies (a ?x))", "CxPets")
    assert rule.type == "malformed-sentence"
    assert refusal(reads.why_not, k, 1, "CxPets").type == "bad-argument"
    assert refusal(reads.why_not, k, "(isa Rex Dog)").type == "bad-argument"
    assert refusal(reads.describe, k, [1]).type == "malformed-term"
    assert refusal(writes.abduce_discard, k, "CxPets").type == "not-scratch"


# -- writes ------------------------------------------------------------------------


def test_assert_retract_edit(k: kb.KB) -> None:
    h = writes.assert_sentence(k, "(isa Bolt Dog)", "CxPets")
    assert writes.assert_sentence(k, "(isa Bolt Dog)", "CxPets") == h
    assert reads.query_p(k, "(isa Bolt Mammal)", "CxPets")
    h2 = writes.edit(k, h, "(isa Bolt Cat)")
    assert h2 > h
    assert refusal(reads.lookup, k, h).type == "unknown-handle"
    assert reads.lookup(k, h2).sentence == (S("isa"), S("Bolt"), S("Cat"))
    gone = writes.retract(k, h2)
    assert gone.handle == h2
    assert refusal(writes.retract, k, h2).type == "unknown-handle"
    assert not reads.ask_p(k, "(isa Bolt ?k)", "CxPets")


def test_forward_chain_and_edit_with_consequences() -> None:
    k = kb.load_edn(
        """(in-context C) (parent Ann Bob) (parent Bob Cid)
        (implies (and (parent ?g ?p) (parent ?p ?c)) (grandparent ?g ?c))"""
    )
    derived = writes.forward_chain(k, "C")
    assert [r.sentence for r in derived] == [(S("grandparent"), S("Ann"), S("Cid"))]
    assert reads.ask_p(k, "(grandparent Ann Cid)", "C")
    assert writes.forward_chain(k, "C") == []
    h = next(r.handle for r in reads.find_sentexes(k, "(parent Bob Cid)"))
    out = writes.edit_with_consequences(k, h, "(parent Bob Dee)")
    assert len(out.retracted) == 1
    assert [r.sentence for r in out.derived] == [(S("grandparent"), S("Ann"), S("Dee"))]
    assert not reads.ask_p(k, "(grandparent Ann Cid)", "C")


def test_preview_rolls_back_but_advances_the_counter(k: kb.KB) -> None:
    before = (reads.sentex_count(k), k.counter)
    got = writes.preview(k, ["(isa Fluffy Spider)"], "CxPets", "(afraidOf Bob ?y)")
    assert {"Fluffy", "Fang"} <= {
        str(a.bindings[S("?y")]) for a in got if isinstance(a, types.Answer)
    }
    assert reads.sentex_count(k) == before[0]
    assert k.counter == before[1] + 1
    assert not reads.ask_p(k, "(isa Fluffy Spider)", "CxPets")
    assert list(reads.changes_since(k, before[1])) == []


def test_clear_caches(k: kb.KB) -> None:
    list(reads.query(k, "(isa ?x Mammal)", "CxPets"))
    out = writes.clear_caches(k)
    assert out["queries"] >= 1
    assert out["ancestors"] >= 1
    assert k.stats["queries"] == 0


def test_abduce_and_discard(k: kb.KB) -> None:
    ab = writes.abduce(k, "(afraidOf Alice Fang)", "CxPets")
    assert ab.proves
    assert ab.context is not None
    assert ab.hypotheses[0].sentence[:2] == (S("fearsKind"), S("Alice"))
    assert reads.query_p(k, "(afraidOf Alice Fang)", ab.context)
    assert not reads.query_p(k, "(afraidOf Alice Fang)", "CxPets")
    assert writes.abduce_discard(k, ab.context) == 1 + len(ab.hypotheses)
    assert not reads.query_p(k, "(afraidOf Alice Fang)", ab.context)
    assert writes.abduce(k, "(isa Rex Dog)", "CxPets") == writes.Abduction(None, (), True)


# -- host path, feed ---------------------------------------------------------------


def test_kb_diff(tmp_path: Path) -> None:
    k = kb.load_edn("(in-context C) (isa A B) (isa C D)")
    (tmp_path / "one.edn").write_text("(in-context C) (isa A B) (isa E F)")
    d = audits.kb_diff(k, str(tmp_path))
    assert [s.sentence for s in d.only_in_kb] == [(S("isa"), S("C"), S("D"))]
    assert d.only_in_path == ((S("C"), (S("isa"), S("E"), S("F"))),)
    assert refusal(audits.kb_diff, k, str(tmp_path / "nope")).type == "bad-path"


def test_changes_since_and_subscribe(k: kb.KB) -> None:
    start = k.counter
    seen: list[types.Change] = []
    with reads.subscribe(k, seen.append):
        h = writes.assert_sentence(k, "(isa Bolt Dog)", "CxPets")
        writes.retract(k, h)
    writes.assert_sentence(k, "(isa Bolt2 Dog)", "CxPets")
    feed = list(reads.changes_since(k, start))
    assert [(c.kind, c.handle) for c in feed] == [("assert", h), ("retract", h), ("assert", h + 2)]
    assert seen == feed[:2]
