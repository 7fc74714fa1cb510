"""vaelii_llm.tools: derived schemas, excluded sets, dispatch, ceilings, bounded lazy results."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import functools
import inspect
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import overload

import edn_format
import msgspec
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.conftest import BIG_KB_SENTEXES
from tests.support.hypothesis_helpers import recursive
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import _declare as declare
from vaelii_llm import engine as engine_mod
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._edn import CLOCK_MARKER
from vaelii_llm._edn import CUT_MARKER
from vaelii_llm.kb import KB
from vaelii_llm.kb._types import Context
from vaelii_llm.kb._types import Handle
from vaelii_llm.kb._types import Sentence
from vaelii_llm.tools import MAX_LIMIT
from vaelii_llm.tools import ToolResult

NURSERY = """
(in-context CxWell)
(isa Muffet Girl)
(isa Spider Arachnid)
(implies (isa ?x Arachnid) (scary ?x))
(implies (and (scary ?y) (isa ?x Girl)) (fears ?x ?y))
(genlCtx CxNursery CxWell)
(in-context CxNursery)
(isa Itsy Arachnid)
"""

EMBEDDED = engine_mod.embedded()


@pytest.fixture(scope="module")
def nursery() -> KB:
    return kb.load_edn(NURSERY)


def _with_ops(
    base: engine_mod.Engine = EMBEDDED, /, **ops: Callable[..., Any]
) -> engine_mod.Engine:
    """`base` with `ops` added, each declared a read of its name unless its function
    already carries a declaration (a `functools.wraps` copy carries the original's)."""
    for name, fn in ops.items():
        if engine_mod.declared(fn) is None:
            engine_mod.op(name)(fn)
    return base.with_ops(ops)


async def _call(
    eng: engine_mod.Engine,
    kb_: Any,
    name: str,
    input: Any = None,
    max_result_chars: int = tools._MAX_RESULT_CHARS,
) -> ToolResult:
    return await tools.Toolset(kb_, engine=eng, max_result_chars=max_result_chars).call(name, input)


#: Every op the spec keeps from a model, by name: the writes (``preview`` and
#: ``clear-caches`` included), the host-path read, the unbounded reads and audits, the
#: change feed and the kb-less ops. Listed here by hand, not read off the declarations,
#: so a write mis-declared a read still fails the suite.
SPEC_EXCLUDED = frozenset(
    {
        "assert",
        "retract",
        "edit",
        "edit-with-consequences",
        "forward-chain",
        "preview",
        "clear-caches",
        "abduce",
        "abduce-discard",
        "kb-diff",
        "handles",
        "terms",
        "kb-quality",
        "exposed-clashes",
        "explain-levels",
        "all-specified-violations",
        "all-functional-at-instant-violations",
        "changes-since",
        "subscribe",
        "version",
        "op-names",
    }
)


def _leaks(toolset: tools.Toolset) -> set[str]:
    """The excluded ops a toolset would hand a model: as ops, as schemas, as names."""
    names = {s.name for s in toolset.schemas()}
    return {
        op
        for op in SPEC_EXCLUDED
        if op in toolset.ops
        or tools.tool_name(op) in names
        or toolset.op_of(tools.tool_name(op)) is not None
    }


# -- the exposed set -----------------------------------------------------------------


def test_schemas_list_every_read_except_the_excluded() -> None:
    names = [s.name for s in tools.schemas()]
    for expected in (
        "kb_find_sentexes",
        "kb_sentexes_in_context",
        "kb_ask_p",
        "kb_ask",
        "kb_query",
        "kb_query_p",
        "kb_why_not",
        "kb_types_of",
        "kb_types",
        "kb_contexts",
        "kb_sentex_count",
        "kb_term_count",
        "kb_find_terms",
        "kb_describe",
        "kb_lookup",
        "kb_escalate",
        "kb_kb_integrity",
        "kb_query_status",
        "kb_argue",
        "kb_search_tree",
        "kb_compare_tacticians",
        "kb_ask_within",
        "kb_prove_within",
        "kb_qualitative_scenarios",
    ):
        assert expected in names
    assert len(names) == 24  # the spec's 24 named reads (ask-all is variadic: not a tool)
    assert list(tools.read_ops()) == sorted(tools.read_ops())  # sorted by op: byte-stable
    excluded = (
        tools.WRITE_OPS
        | EMBEDDED.feed_ops
        | tools.HOST_PATH_OPS
        | tools.UNBOUNDED_OPS
        | EMBEDDED.kbless_ops
    )
    irreversible = {op for op, fn in EMBEDDED.ops.items() if engine_mod.is_irreversible(fn)}
    variadic = {
        op
        for op, fn in EMBEDDED.ops.items()
        if any(
            p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            for p in inspect.signature(fn).parameters.values()
        )
    }
    assert "ask-all" in variadic  # the engine has one, so the rule is exercised
    expected_ops = sorted(set(EMBEDDED.ops) - excluded - irreversible - variadic)
    assert list(tools.read_ops()) == expected_ops
    assert [tools.op_of(n) for n in names] == expected_ops


@pytest.mark.parametrize(
    "excluded",
    [
        pytest.param(EMBEDDED.write_ops, id="engine-write-set"),
        pytest.param(tools.WRITE_OPS, id="WRITE_OPS"),
        pytest.param(EMBEDDED.feed_ops, id="feed-ops"),
        pytest.param(tools.HOST_PATH_OPS, id="HOST_PATH_OPS"),
        pytest.param(tools.UNBOUNDED_OPS, id="UNBOUNDED_OPS"),
        pytest.param(EMBEDDED.kbless_ops, id="kbless-ops"),
        pytest.param(SPEC_EXCLUDED, id="the-spec's-list"),
    ],
)
def test_no_excluded_op_is_a_tool(excluded: frozenset[str]) -> None:
    assert excluded
    assert excluded <= set(EMBEDDED.ops)  # each exists, so excluding it excludes something
    exposed = set(tools.read_ops())
    names = {s.name for s in tools.schemas()}
    for op in excluded:
        assert op not in exposed
        assert tools.tool_name(op) not in names
        assert tools.op_of(tools.tool_name(op)) is None


def test_the_spec_exclusions_are_the_engine_declarations() -> None:
    declared = (
        EMBEDDED.write_ops
        | EMBEDDED.feed_ops
        | EMBEDDED.host_path_ops
        | EMBEDDED.unbounded_ops
        | EMBEDDED.kbless_ops
    )
    assert declared == SPEC_EXCLUDED
    assert _leaks(tools.Toolset(None)) == set()


@pytest.mark.parametrize("op", sorted(SPEC_EXCLUDED))
def test_an_excluded_op_declared_a_read_is_caught(op: str) -> None:
    # The check above would fail if an excluded op slipped into the read set: here one
    # is re-declared a read (a copy of its function, so the real one is untouched).
    real = EMBEDDED.ops[op]
    if op in ("version", "op-names"):

        def leaked(kb: KB) -> Any:
            """A kb-less op given a KB parameter, declared a read."""
            return real()
    else:

        @functools.wraps(real)
        def leaked(*args: Any, **kwargs: Any) -> Any:
            return real(*args, **kwargs)

        # a copy with no trace of the original's irreversible mark, same signature
        del leaked.__wrapped__
        leaked.__dict__.pop(engine_mod.IRREVERSIBLE_ATTR, None)
        leaked.__signature__ = inspect.signature(real, eval_str=True)  # type: ignore[attr-defined]
    engine_mod.op(op)(leaked)
    eng = EMBEDDED.with_ops({op: leaked})
    assert _leaks(tools.Toolset(None, engine=eng)) == {op}


def test_an_undeclared_new_op_is_not_a_tool() -> None:
    def wipe_context(kb: KB, context: Context) -> int:
        """Deletes every sentex of a context (a write nobody declared)."""
        return 0

    eng = EMBEDDED.with_ops({"wipe-context": wipe_context})
    assert "wipe-context" in eng.ops
    assert "wipe-context" not in tools.Toolset(None, engine=eng).ops
    assert tools.Toolset(None, engine=eng).op_of("kb_wipe_context") is None
    # declared a write it stays out; only a declared read becomes a tool
    engine_mod.op("wipe-context", kind="write")(wipe_context)
    assert "wipe-context" in eng.write_ops
    assert "wipe-context" not in tools.Toolset(None, engine=eng).ops


def test_an_irreversible_op_is_never_exposed_whatever_its_declaration_says() -> None:
    @engine_mod.irreversible
    def purge(kb: KB, context: Context) -> int:
        """Declared a read; its function says otherwise."""
        return 0

    engine_mod.op("purge")(purge)
    eng = EMBEDDED.with_ops({"purge": purge})
    assert "purge" not in tools.Toolset(None, engine=eng).ops
    assert tools.Toolset(None, engine=eng).op_of("kb_purge") is None
    assert "purge" in eng.write_ops
    assert engine_mod.is_irreversible(EMBEDDED.ops["retract"])
    assert "retract" not in tools.Toolset(None, engine=eng).ops


def test_a_new_read_becomes_a_tool_with_no_edit() -> None:
    def neighbours(kb: KB, term: Any, context: Context | None = None) -> list[Any]:
        """The terms a term shares a sentence with."""
        return []

    eng = _with_ops(neighbours=neighbours)
    assert "neighbours" in tools.Toolset(None, engine=eng).ops
    s = tools.Toolset(None, engine=eng).schema("neighbours")
    assert s.name == "kb_neighbours"
    assert s.description.startswith("The terms a term shares a sentence with.")
    assert s.description.endswith("(term) | (term, context)")
    assert s.input_schema["required"] == ["term"]


def test_tools_reach_the_engine_only_through_the_boundary() -> None:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(tools))):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.update(f"{node.module}.{a.name}" for a in node.names)
    assert "vaelii_llm.engine" in imported
    assert not {m for m in imported if m.startswith("vaelii_llm.kb")}


def test_ops_with_no_single_signature_are_not_tools() -> None:
    def spread(kb: KB, *sentences: Sentence) -> int:
        return 0

    def keyed(kb: KB, **opts: Any) -> int:
        return 0

    def bare() -> int:
        return 0

    eng = _with_ops(spread=spread, keyed=keyed, bare=bare)
    exposed = tools.Toolset(None, engine=eng).ops
    for op in ("spread", "keyed", "bare"):
        assert op not in exposed


# -- names and schemas ---------------------------------------------------------------


def test_tool_names() -> None:
    assert tools.tool_name("find-sentexes") == "kb_find_sentexes"
    assert tools.tool_name("ask?") == "kb_ask_p"
    assert tools.tool_name("ask") == "kb_ask"
    assert tools.tool_name("x" * 100) == ("kb_" + "x" * 100)[:64]
    grammar = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
    names = [s.name for s in tools.schemas()]
    assert all(grammar.match(n) for n in names)
    assert len(set(names)) == len(names)
    assert tools.op_of("kb_ask_p") == "ask?"
    assert tools.op_of("kb_ask") == "ask"
    for write in ("kb_assert", "kb_retract", "kb_preview", "kb_clear_caches", "kb_kb_diff"):
        assert tools.op_of(write) is None
    assert tools.op_of("nonsense") is None


def test_schema_shapes() -> None:
    query = tools.schema("query")
    assert list(query.input_schema["properties"]) == ["goal", "context", "opts"]
    assert query.input_schema["required"] == ["goal"]
    assert query.strict is None
    assert "Shapes" in query.description

    why = tools.schema("why-not")
    assert list(why.input_schema["properties"]) == ["handle", "sentence", "context", "opts"]
    assert why.input_schema["required"] == []
    assert why.strict is None

    ask_p = tools.schema("ask?")
    assert ask_p.input_schema["required"] == ["sentence", "context"]
    assert ask_p.strict is True
    assert tools.schema("types").strict is True  # no parameters: every one is required

    sentence = ask_p.input_schema["properties"]["sentence"]
    assert sentence["type"] == "string"
    assert "EDN" in sentence["description"]
    assert '"(isa Muffet Spider)"' in sentence["description"]
    context = ask_p.input_schema["properties"]["context"]
    assert context["type"] == "string"
    assert '"CxWell"' in context["description"]
    assert tools.schema("lookup").input_schema["properties"]["handle"]["type"] == "integer"
    assert tools.schema("find-terms").input_schema["properties"]["opts"]["type"] == "object"
    doc = inspect.getdoc(EMBEDDED.ops["find-sentexes"])
    assert doc is not None
    assert tools.schema("find-sentexes").description.startswith(doc)


def test_schema_merges_overloads_with_conflicting_kinds() -> None:
    @overload
    def pick(kb: KB, target: Handle) -> int: ...
    @overload
    def pick(kb: KB, target: Sentence, context: Context) -> int: ...
    def pick(kb: KB, target: Any, context: Any = None) -> int:
        """Pick one."""
        return 0

    s = tools.Toolset(None, engine=_with_ops(pick=pick)).schema("pick")
    assert s.input_schema["required"] == ["target"]
    kinds = [p["type"] for p in s.input_schema["properties"]["target"]["anyOf"]]
    assert kinds == ["integer", "string"]


def test_schemas_only_and_exclude() -> None:
    assert [s.name for s in tools.schemas(only={"query", "ask?"})] == ["kb_ask_p", "kb_query"]
    assert [s.name for s in tools.schemas(only={"assert", "kb-diff"})] == []
    every = tools.schemas()
    rest = tools.schemas(exclude={"query"})
    assert len(rest) == len(every) - 1
    assert "kb_query" not in [s.name for s in rest]
    with pytest.raises(KeyError):
        tools.schema("assert")


def test_request_takes_the_schemas_as_they_are() -> None:
    req = Request(messages=[Message(role="user", content="hi")], tools=tools.schemas())
    wire = msgspec.json.decode(msgspec.json.encode(req))
    assert wire["tools"][0]["name"] == tools.schemas()[0].name


def test_schemas_are_byte_stable_across_processes() -> None:
    code = (
        "import sys, msgspec; from vaelii_llm import tools; "
        "sys.stdout.buffer.write(msgspec.json.encode(tools.schemas()))"
    )
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, check=True, env=env
        )
        outs.append(done.stdout)
    assert outs[0] == outs[1]
    assert outs[0] == msgspec.json.encode(tools.schemas())


# -- calls ---------------------------------------------------------------------------


def _edn(result: ToolResult) -> Any:
    assert result.ok, result.error
    assert result.result is not None
    return edn_format.loads(result.result)


async def test_a_read_answers_as_edn(nursery: KB) -> None:
    result = await tools.call(
        nursery, "kb_query", {"goal": "(fears Muffet ?who)", "context": "CxNursery"}
    )
    answers = _edn(result)
    who = {a[edn_format.Keyword("bindings")][edn_format.Symbol("?who")] for a in answers}
    assert who == {edn_format.Symbol("Itsy"), edn_format.Symbol("Spider")}
    assert (
        await tools.call(
            nursery, "kb_ask_p", {"sentence": "(isa Muffet Girl)", "context": "CxWell"}
        )
    ).result == "true"


async def test_a_cut_record_says_it_is_a_cut(nursery: KB) -> None:
    result = await tools.call(
        nursery,
        "kb_query",
        {"goal": "(fears Muffet ?who)", "context": "CxNursery", "opts": {"max-depth": 0}},
    )
    assert result.text == '[{:kind "cut", :reason "max-depth", :bound 0, :yielded 0}]'


async def test_the_nested_shape_refusal(nursery: KB) -> None:
    result = await tools.call(
        nursery, "kb_query", {"goal": "(fears Muffet ?who)", "opts": {"max-depth": 3}}
    )
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("unexpected-argument")
    assert "'opts'" in result.error
    assert "selected, (goal)," in result.error  # the shape the input selected
    assert "(goal) | (goal, context) | (goal, context, opts)" in result.error  # every shape
    assert "also needs 'context'" in result.error


async def test_why_not_dispatches_on_the_shape_given(nursery: KB) -> None:
    by_sentence = _edn(
        await tools.call(
            nursery, "kb_why_not", {"sentence": "(fears Muffet Itsy)", "context": "CxWell"}
        )
    )
    assert by_sentence[0][edn_format.Keyword("rule")] != 0
    by_handle = _edn(await tools.call(nursery, "kb_why_not", {"handle": 2}))
    sentence = by_handle[0][edn_format.Keyword("sentence")]
    assert sentence == edn_format.loads("(isa Spider Arachnid)")
    both = await tools.call(
        nursery,
        "kb_why_not",
        {"handle": 2, "sentence": "(isa Spider Arachnid)", "context": "CxWell"},
    )
    assert not both.ok
    assert both.error is not None
    assert both.error.startswith("unexpected-argument: kb_why_not was given 'handle'")
    assert "(handle) | (sentence, context) | (sentence, context, opts)" in both.error
    missing = await tools.call(nursery, "kb_why_not", {"sentence": "(isa Spider Arachnid)"})
    assert missing.error is not None
    assert missing.error.startswith("missing-argument")


async def test_dispatch_calls_the_chosen_shape_positionally() -> None:
    seen: list[tuple[Any, ...]] = []

    def probe(
        kb: KB,
        goal: Sentence,
        context: Context | None = None,
        opts: declare.ProofOpts | None = None,
    ) -> str:
        """Records what it was given."""
        seen.append((goal, context, opts))
        return "ok"

    eng = _with_ops(probe=probe)
    assert (await _call(eng, None, "kb_probe", {"goal": "(a ?x)"})).ok
    assert (await _call(eng, None, "kb_probe", {"goal": "(a)", "context": "Cx", "opts": None})).ok
    assert seen == [
        (edn_format.loads("(a ?x)"), None, None),
        (edn_format.loads("(a)"), edn_format.Symbol("Cx"), None),
    ]


@pytest.mark.parametrize(
    ("name", "given", "refusal"),
    [
        ("kb_nope", {}, "unknown-tool"),
        (None, {}, "unknown-tool"),
        ("kb_assert", {"sentence": "(a b)", "context": "CxWell"}, "unknown-tool"),
        ("kb_types", [1, 2], "bad-input"),
        ("kb_types", "{}", "bad-input"),
        ("kb_types", 3, "bad-input"),
        ("kb_query", None, "missing-argument"),
        ("kb_query", {"goal": "(fears ?x"}, "edn-syntax"),
        ("kb_query", {"goal": "#foo (a)"}, "edn-unknown-tag"),
        ("kb_query", {"goal": "(" * 40_000}, "edn-too-long"),
        ("kb_query", {"goal": "(" * 100_000}, "input-too-large"),
        ("kb_query", {"goal": "(" * 5000 + ")" * 5000}, "edn-too-deep"),
        ("kb_query", {"goal": ["fears", "?x"]}, "edn-not-a-string"),
        ("kb_query", {"goal": "(a) (b)"}, "edn-trailing"),
        ("kb_query", {"goal": "(fears ?x ?y)", "junk": 1}, "unexpected-argument"),
        ("kb_lookup", {"handle": "2"}, "bad-argument"),
        ("kb_lookup", {"handle": True}, "bad-argument"),
        ("kb_lookup", {"handle": 10**9}, "unknown-handle"),
        ("kb_query", {"goal": "3"}, "malformed-sentence"),
        ("kb_query", {"goal": "(a)", "context": "CxNowhere"}, "unknown-context"),
        ("kb_query", {"goal": "(a)", "context": "CxWell", "opts": {"bogus": 1}}, "unknown-option"),
        ("kb_query", {"goal": "(a)", "context": "CxWell", "opts": [1]}, "bad-argument"),
    ],
)
async def test_refusals_name_their_type(nursery: KB, name: Any, given: Any, refusal: str) -> None:
    result = await tools.call(nursery, name, given)
    assert isinstance(result, ToolResult)
    assert not result.ok
    assert result.result is None
    assert result.error is not None
    assert result.error.startswith(refusal + ":"), result.error
    assert result.block("t1").is_error


async def test_a_missing_input_reads_as_no_arguments(nursery: KB) -> None:
    result = await tools.call(nursery, "kb_term_count", None)
    assert result.ok
    assert int(result.text) > 0
    block = result.block("toolu_1")
    assert (block.tool_use_id, block.content, block.is_error) == ("toolu_1", result.text, False)


async def test_an_engine_bug_is_a_result_not_a_raise(nursery: KB) -> None:
    def broken(kb: KB) -> int:
        """Divides by zero."""
        return 1 // 0

    def half(kb: KB) -> Iterator[int]:
        """Refuses half way."""
        yield 1
        raise engine_mod.EngineRefusal("clock-cut", "gave up")

    eng = _with_ops(broken=broken, half=half)
    bug = await _call(eng, nursery, "kb_broken", {})
    assert bug.error is not None
    assert bug.error.startswith("engine-error: ZeroDivisionError")
    midway = await _call(eng, nursery, "kb_half", {})
    assert midway.error == "clock-cut: gave up"


async def test_an_engine_bug_that_cannot_be_printed_is_still_a_result(nursery: KB) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    class UnprintableRefusal(engine_mod.EngineRefusal):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    def bug(kb: KB) -> int:
        """Raises an exception whose message itself raises."""
        raise Unprintable

    def refusal(kb: KB) -> int:
        """Refuses with a refusal whose message itself raises."""
        raise UnprintableRefusal("clock-cut", "gave up")

    eng = _with_ops(bug=bug, refusal=refusal)
    result = await _call(eng, nursery, "kb_bug", {})
    assert result.error is not None
    assert result.error.startswith("engine-error: Unprintable")
    refused = await _call(eng, nursery, "kb_refusal", {})
    assert refused.error is not None
    assert refused.error.startswith("clock-cut")


# -- ceilings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "given"),
    [
        ("kb_query", {"goal": "(a ?x)", "context": "CxWell", "opts": {"max-depth": 13}}),
        ("kb_query", {"goal": "(a ?x)", "context": "CxWell", "opts": {"max-ms": 10_001}}),
        ("kb_query", {"goal": "(a ?x)", "context": "CxWell", "opts": {"max-ms": 1e12}}),
        ("kb_escalate", {"goal": "(a ?x)", "context": "CxWell", "opts": {"max-ms": 10**9}}),
        ("kb_why_not", {"sentence": "(a b)", "context": "CxWell", "opts": {"max-depth": 99}}),
        ("kb_find_terms", {"search": "", "opts": {"limit": MAX_LIMIT + 1}}),
        ("kb_describe", {"term": "Muffet", "opts": {"limit": 10**6}}),
    ],
)
async def test_a_bound_past_the_ceiling_is_refused(
    nursery: KB, tool: str, given: dict[str, Any]
) -> None:
    result = await tools.call(nursery, tool, given)
    assert result.error is not None
    assert result.error.startswith("over-ceiling:"), result.error


async def test_bounds_at_the_ceiling_run(nursery: KB) -> None:
    opts = {"max-depth": declare.MAX_DEPTH_CEILING, "max-ms": declare.MAX_MS_CEILING}
    result = await tools.call(
        nursery, "kb_query", {"goal": "(fears ?x ?y)", "context": "CxNursery", "opts": opts}
    )
    assert result.ok
    limit = await tools.call(nursery, "kb_find_terms", {"search": "", "opts": {"limit": 100}})
    assert limit.ok


async def test_a_clocked_read_naming_no_max_ms_runs_under_the_ceiling(nursery: KB) -> None:
    seen: list[Any] = []
    real = EMBEDDED.ops["query"]

    @functools.wraps(real)
    def query(*args: Any) -> Any:
        seen.append(args[1:])
        return real(*args)

    eng = _with_ops(query=query)
    ceiling = declare.MAX_MS_CEILING
    assert "query" in EMBEDDED.clocked
    assert (await _call(eng, nursery, "kb_query", {"goal": "(fears ?x ?y)"})).ok
    assert len(seen[-1]) == 1  # no options named: the op runs under its declared defaults
    assert engine_mod.embedded().declaration("query").defaults.max_ms == ceiling  # type: ignore[union-attr]
    given = {"goal": "(fears ?x ?y)", "context": "CxWell", "opts": {"max-depth": 2}}
    assert (await _call(eng, nursery, "kb_query", given)).ok
    assert seen[-1][2] == declare.ProofOpts(max_depth=2, max_ms=ceiling)  # the typed Struct
    given["opts"] = {"max-ms": 50}
    assert (await _call(eng, nursery, "kb_query", given)).ok
    assert seen[-1][2] == declare.ProofOpts(max_ms=50)


async def test_a_calls_options_are_checked_once_into_the_declared_struct(
    nursery: KB, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[Any] = []
    real = msgspec.convert

    def counting(value: Any, cls: Any, **kw: Any) -> Any:
        checked.append(cls)
        return real(value, cls, **kw)

    monkeypatch.setattr(msgspec, "convert", counting)
    given = {"goal": "(fears ?x ?y)", "context": "CxWell", "opts": {"max-depth": 2}}
    assert (await tools.call(nursery, "kb_query", given)).ok
    assert checked == [declare.ProofOpts]  # by the tools; the op takes the Struct as it is
    checked.clear()
    assert (await tools.call(nursery, "kb_query", {"goal": "(fears ?x ?y)"})).ok
    assert checked == []  # none named: the declared defaults, nothing to check


async def test_the_printer_holds_a_clocked_answer_the_engine_does_not(nursery: KB) -> None:
    def drip(kb: KB, opts: declare.ClockOpts = declare.CLOCK) -> Iterator[int]:
        """Answers slowly, never checking a clock."""
        for n in itertools.count():
            time.sleep(0.01)
            yield n

    eng = _with_ops(drip=engine_mod.op("drip", opts=declare.ClockOpts, clocked=True)(drip))
    result = await _call(eng, nursery, "kb_drip", {"opts": {"max-ms": 100}})
    assert result.ok
    assert result.text.endswith(CLOCK_MARKER)  # drip never ends: the printer ended it


async def test_find_terms_naming_no_limit_gets_the_max() -> None:
    seen: list[Any] = []
    real = EMBEDDED.ops["find-terms"]

    @functools.wraps(real)
    def find_terms(*args: Any) -> Any:
        seen.append(args[1:])
        return real(*args)

    many = kb.synthetic(5_000)  # 500 entities: more terms than the limit
    eng = _with_ops(**{"find-terms": find_terms})
    result = await _call(eng, many, "kb_find_terms", {"search": "E"}, max_result_chars=10**6)
    assert seen[-1] == ("E",)  # no options named: the declared default limit
    assert len(_edn(result)) == MAX_LIMIT
    await _call(eng, many, "kb_find_terms", {"search": "E", "opts": {"limit": 3}})
    assert seen[-1] == ("E", declare.LimitOpts(limit=3))


async def test_describe_naming_no_limit_gets_the_max() -> None:
    # describe builds every sentex mentioning the term before the printer starts, so
    # a call naming no limit is held to MAX_LIMIT as find-terms is.
    seen: list[Any] = []
    real = EMBEDDED.ops["describe"]

    @functools.wraps(real)
    def describe(*args: Any) -> Any:
        seen.append(args[1:])
        return real(*args)

    many = kb.synthetic(5_000)  # isa is mentioned by 500 sentexes
    eng = _with_ops(describe=describe)
    before = many.stats["realized"]
    result = await _call(eng, many, "kb_describe", {"term": "isa"})
    assert result.ok
    assert seen[-1] == (edn_format.Symbol("isa"),)
    assert many.stats["realized"] - before <= MAX_LIMIT
    await _call(eng, many, "kb_describe", {"term": "isa", "opts": {"limit": 3}})
    assert seen[-1] == (edn_format.Symbol("isa"), declare.LimitOpts(limit=3))
    opts = tools.schema("describe").input_schema["properties"]["opts"]["properties"]
    assert opts["limit"]["default"] == MAX_LIMIT  # the declared default, published


# -- bounded, lazy results -----------------------------------------------------------


async def test_laziness_over_a_big_kb(big_kb: KB) -> None:
    before = big_kb.stats["realized"]
    result = await tools.call(big_kb, "kb_sentexes_in_context", {"context": "CxSynthetic"})
    realized = big_kb.stats["realized"] - before
    assert result.ok
    assert result.text.endswith(CUT_MARKER)
    assert len(result.text) == tools._MAX_RESULT_CHARS  # the marker included
    printed = result.text.count(":handle")
    # realized as far as the bound reaches (the marker's room included), one past it
    assert realized <= printed + len(CUT_MARKER) // len(":handle 0") + 1
    assert realized < 100  # a few dozen (over 10^6, and the cost: tests/bench/bench_tools.py)
    count = await tools.call(big_kb, "kb_sentex_count", {"context": "CxSynthetic"})
    assert int(count.text) > 0.9 * BIG_KB_SENTEXES


async def test_max_result_chars_bounds_every_answer(nursery: KB) -> None:
    result = await tools.call(nursery, "kb_types", {}, max_result_chars=5)
    assert result.ok
    assert result.text == CUT_MARKER[:5]  # the bound holds, the marker included
    result = await tools.call(
        nursery, "kb_sentexes_in_context", {"context": "CxWell"}, max_result_chars=100
    )
    assert result.text.endswith(CUT_MARKER)
    assert len(result.text) == 100


@pytest.mark.parametrize(
    "answer",
    [
        lambda: itertools.count(),
        lambda: itertools.cycle([edn_format.Symbol("a"), (edn_format.Symbol("b"),)]),
        lambda: itertools.repeat({"k": itertools.count()}),
    ],
    ids=["count", "cycle", "repeat-nested"],
)
async def test_infinite_answers_print_and_return(
    nursery: KB, answer: Callable[[], Iterator[Any]]
) -> None:
    def forever(kb: KB) -> Iterator[Any]:
        """Never ends."""
        return answer()

    eng = _with_ops(forever=forever)
    result = await _call(eng, nursery, "kb_forever", {}, max_result_chars=500)
    assert result.ok
    assert result.text.endswith(CUT_MARKER)
    assert len(result.text) == 500


# -- the worker threads --------------------------------------------------------------


class _Running:
    """How many reads run at once (at most), and each finished read's thread
    and wall-clock duration."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.reads: list[tuple[int, float]] = []
        self.started = threading.Event()  # a read has begun

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        self.started.set()

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1

    def finished(self, took: float) -> None:
        with self.lock:
            self.reads.append((threading.get_ident(), took))


def _slow_engine(
    record: Callable[[], None] | None = None, running: _Running | None = None
) -> engine_mod.Engine:
    def slow(kb: KB, n: int) -> Iterator[int]:
        """CPU-bound: n steps of about 2 ms each, holding the GIL as a pure-Python
        engine does."""
        if running is not None:
            running.__enter__()
        started = time.perf_counter()
        try:
            for i in range(n):
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
                yield i
        finally:
            if running is not None:
                running.__exit__()
                running.finished(time.perf_counter() - started)
            if record is not None:
                record()

    return _with_ops(slow=slow)


async def test_the_loop_stays_responsive_while_8_slow_reads_run(nursery: KB) -> None:
    running = _Running()
    eng = _slow_engine(running=running)
    during: list[int] = []  # how many reads were running at each turn of the loop
    done = asyncio.Event()

    async def monitor() -> None:
        while not done.is_set():
            await asyncio.sleep(0.001)
            during.append(running.now)

    watcher = asyncio.create_task(monitor())
    shared = tools.Toolset(nursery, engine=eng)  # one toolset: one bound
    results = await asyncio.gather(*(shared.call("kb_slow", {"n": 100}) for _ in range(8)))
    done.set()
    await watcher
    assert all(r.ok for r in results)
    assert 1 < running.most <= tools._READ_WORKERS  # in threads, and bounded
    assert len(running.reads) == 8
    assert threading.get_ident() not in {thread for thread, _ in running.reads}  # off the loop
    # A read run on the loop would hold it for the read's whole duration, so no turn
    # of the loop could see one running. In threads, the loop turns while they run:
    # bound by events (turns seen mid-read), not by a lag figure a loaded machine
    # stretches (the lag itself: tests/bench/bench_tools.py).
    assert sum(1 for n in during if n) > 8, during


async def test_cancellation_propagates_and_stops_the_worker(nursery: KB) -> None:
    stopped = threading.Event()
    running = _Running()
    eng = _slow_engine(stopped.set, running)
    task = asyncio.create_task(_call(eng, nursery, "kb_slow", {"n": 10**9}))
    await asyncio.to_thread(running.started.wait)  # the read runs in its worker
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # returns at once: the read itself would run for weeks
    await asyncio.to_thread(stopped.wait)  # and the worker closed the generator


# -- never raises --------------------------------------------------------------------

_json = recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False),
        st.text(max_size=20),
        st.sampled_from(
            [
                "(fears ?x ?y)",
                "(isa Muffet Girl)",
                "(isa ?x Arachnid)",
                "CxWell",
                "CxNursery",
                "Muffet",
                '"Little Miss"',
                "((((",
                "#foo 1",
                '#inst "2020-01-01"',
                "^:m x",
                "",
                "(" * 300,
            ]
        ),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(["max-depth", "max-ms", "limit", "inherited", ":limit"]),
                st.text(max_size=6),
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=10,
)


def _inputs(names: list[str]) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.sampled_from(names), st.text(max_size=8)) if names else st.text(max_size=8)
    return st.one_of(st.dictionaries(keys, _json, max_size=5), _json)


_TOOL_PARAMS = {s.name: list(s.input_schema["properties"]) for s in tools.schemas()}


def test_random_json_inputs_never_raise(nursery: KB) -> None:
    names = [*_TOOL_PARAMS, "kb_assert", "kb_handles", "nonsense"]
    with asyncio.Runner() as runner:

        @settings(
            max_examples=400,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.data())
        def check(data: st.DataObject) -> None:
            name = data.draw(st.sampled_from(names))
            payload = data.draw(_inputs(_TOOL_PARAMS.get(name, [])))
            result = runner.run(tools.call(nursery, name, payload, max_result_chars=300))
            assert isinstance(result, ToolResult)
            assert (result.result is not None) == result.ok
            assert (result.error is not None) != result.ok
            assert len(result.text) <= 300 + len(CUT_MARKER) or not result.ok

        check()


def test_opts_schema_lists_exactly_the_keys_the_engine_reads() -> None:
    eng = engine_mod.embedded()
    for op in tools.read_ops():
        opts = tools.schema(op).input_schema["properties"].get("opts")
        if opts is None:
            continue
        declared = eng.opts(op)
        assert declared is not None, op
        keys = sorted(f.encode_name for f in msgspec.structs.fields(declared))
        assert list(opts["properties"]) == keys
        assert opts["additionalProperties"] is False
        whole = msgspec.json.schema(declared)  # published as msgspec's schema of it
        assert opts["properties"] == whole["$defs"][declared.__name__]["properties"]
    query_opts = tools.schema("query").input_schema["properties"]["opts"]["properties"]
    assert query_opts["max-depth"]["maximum"] == declare.MAX_DEPTH_CEILING
    assert query_opts["max-ms"]["maximum"] == declare.MAX_MS_CEILING
    assert query_opts["max-depth"]["default"] == declare.PROOF.max_depth
    assert query_opts["max-ms"]["default"] == declare.MAX_MS_CEILING  # a clocked read's
    terms_opts = tools.schema("find-terms").input_schema["properties"]["opts"]["properties"]
    assert terms_opts["limit"]["maximum"] == tools.MAX_LIMIT


async def test_an_option_the_read_does_not_take_is_named_before_any_bound(nursery: KB) -> None:
    given = {"goal": "(isa ?x Girl)", "context": "CxWell", "opts": {"limit": 500}}
    out = await tools.call(nursery, "kb_query", given)
    assert not out.ok
    assert out.error is not None
    assert out.error.startswith("unknown-option: kb_query reads no option 'limit'")
    assert "max-depth, max-ms" in out.error


def test_two_ops_that_munge_to_one_tool_name_are_refused() -> None:
    eng = engine_mod.embedded()
    ops = dict(eng.ops)
    ops["ask-p"] = ops["ask?"]
    with pytest.raises(ValueError, match="'ask-p' and 'ask\\?' both become the tool 'kb_ask_p'"):
        tools.Toolset(None, engine=eng.replace(ops=ops))


@pytest.mark.parametrize(
    ("opts", "phrase"),
    [
        ({"max-depth": -1}, "bad-option: max-depth must be a whole number of at least 0"),
        ({"max-depth": 2.5}, "bad-option: max-depth must be a whole number"),
        ({"max-depth": 3.0}, "ok"),
        ({"max-ms": 0}, "bad-option: max-ms must be a whole number of at least 1"),
        ({"max-depth": True}, "bad-option: max-depth must be a whole number"),
    ],
)
async def test_bounds_are_whole_numbers_within_the_published_range(
    nursery: KB, opts: dict[str, Any], phrase: str
) -> None:
    given = {"goal": "(isa ?x Girl)", "context": "CxWell", "opts": opts}
    out = await tools.call(nursery, "kb_query", given)
    if phrase == "ok":  # an integral JSON number is a whole number
        assert out.ok, out.error
        return
    assert out.error is not None
    assert out.error.startswith(phrase), out.error


# -- every clocked read, and the Toolset object ----------------------------------------

_SAMPLE_ARG = {
    "sentence": "(isa ?x Girl)",
    "context": "CxWell",
    "term": "Muffet",
    "handle": 1,
    "integer": 1,
    "string": "x",
    "boolean": False,
    "json": ["(isa Muffet Girl)"],
    "sentences": ["(isa Muffet Girl)"],
}
CLOCKED_READS = sorted(EMBEDDED.clocked & set(tools.read_ops()))


def test_the_clocked_reads_include_every_spec_clocked_read() -> None:
    # the spec's eleven clocked reads that are tools (ask-all, variadic, is not one)
    assert {
        "find-sentexes",
        "sentexes-in-context",
        "ask",
        "query",
        "query?",
        "why-not",
        "escalate",
        "lookup",
        "kb-integrity",
        "query-status",
        "argue",
        "search-tree",
        "compare-tacticians",
        "ask-within",
        "prove-within",
    } <= set(CLOCKED_READS)


@pytest.mark.parametrize("op", CLOCKED_READS)
async def test_a_clocked_read_naming_no_max_ms_is_given_the_ceiling(op: str) -> None:
    real = EMBEDDED.ops[op]
    sig = inspect.signature(real, eval_str=True)
    seen: list[dict[str, Any]] = []

    @functools.wraps(real)  # carries the op's declaration: same options, same clock
    def recorder(*args: Any, **kwargs: Any) -> Any:
        seen.append(dict(sig.bind(*args, **kwargs).arguments))
        return []

    toolset = tools.Toolset(None, engine=EMBEDDED.with_ops({op: recorder}))
    shapes = toolset._table.by_op[op].shapes
    # the shortest call of a shape that has an opts slot (why-not's handle shape has
    # none: the printer's deadline and the engine's own clock hold that one)
    with_opts = [s for s in shapes if any(p.kind == "opts" for p in s.params)]
    shape = min(with_opts or shapes, key=lambda s: s.size)
    given = {p.name: _SAMPLE_ARG[p.kind] for p in shape.taken}
    result = await toolset.call(tools.tool_name(op), given)
    assert result.ok, result.error
    declared = EMBEDDED.opts(op)
    if declared is None or "max_ms" not in declared.__struct_fields__:
        # no max-ms option: the printer's deadline holds it (checked below for ask?)
        assert op == "ask?", op
        return
    ceiling = declare.MAX_MS_CEILING
    assert "opts" not in seen[-1]  # none named: the op's own default, the ceiling
    assert sig.parameters["opts"].default.max_ms == ceiling
    # and a named max-ms is kept, one past the ceiling refused
    widest = max(toolset._table.by_op[op].shapes, key=lambda s: s.size)
    given = {p.name: _SAMPLE_ARG[p.kind] for p in widest.taken if p.kind != "opts"}
    opts_given = {**given, "opts": {"max-ms": 7}}
    named = await toolset.call(tools.tool_name(op), opts_given)
    assert named.ok, named.error
    assert seen[-1]["opts"].max_ms == 7
    over = await toolset.call(tools.tool_name(op), {**given, "opts": {"max-ms": ceiling + 1}})
    assert over.error is not None
    assert over.error.startswith("over-ceiling:")


async def test_a_clocked_read_with_no_max_ms_option_is_held_by_the_printer() -> None:
    def dawdle(kb: KB, sentence: Sentence, context: Context) -> Iterator[int]:
        """Never ends, never checks a clock."""
        for n in itertools.count():
            time.sleep(0.01)
            yield n

    engine_mod.op("dawdle", clocked=True)(dawdle)
    eng = EMBEDDED.with_ops({"dawdle": dawdle})
    tool = tools.Toolset(None, engine=eng)._table.by_op["dawdle"]
    assert tool.defaults == declare.CLOCK  # no options declared: the clock's default
    short = dataclasses.replace(tool, defaults=declare.ClockOpts(max_ms=100))
    toolset = tools.Toolset(None, engine=eng)
    toolset._table.by_name[tool.name] = short
    result = await toolset.call("kb_dawdle", {"sentence": "(a)", "context": "Cx"})
    assert result.ok
    assert result.text.endswith(CLOCK_MARKER)


async def test_a_toolset_bounds_its_own_reads_and_keeps_no_module_state(nursery: KB) -> None:
    running = _Running()
    eng = _slow_engine(running=running)
    one = tools.Toolset(nursery, engine=eng, workers=1)
    assert one.workers == 1
    results = await asyncio.gather(*(one.call("kb_slow", {"n": 5}) for _ in range(4)))
    assert all(r.ok for r in results)
    assert running.most == 1
    running.most = 0
    three = tools.Toolset(nursery, engine=eng, workers=3)
    await asyncio.gather(*(three.call("kb_slow", {"n": 20}) for _ in range(6)))
    assert 1 < running.most <= 3
    # each toolset derives its own table; the module keeps none keyed by id()
    assert not hasattr(tools, "_TABLES")
    assert not hasattr(tools, "_LIMITERS")
    assert one.op_of("kb_slow") == "slow"
    assert tools.op_of("kb_slow") is None
    with pytest.raises(ValueError, match="workers"):
        tools.Toolset(nursery, workers=0)


def test_a_toolset_answers_what_the_module_functions_answer() -> None:
    toolset = tools.Toolset(None)
    assert toolset.ops == tools.read_ops()
    assert msgspec.json.encode(toolset.schemas()) == msgspec.json.encode(tools.schemas())
    assert toolset.schemas(only={"query"}) == tools.schemas(only={"query"})
    assert toolset.schema("query") == tools.schema("query")
    assert toolset.write_ops() == tools.WRITE_OPS
    with pytest.raises(AttributeError):
        tools.NOT_A_SET  # noqa: B018


async def test_a_list_of_sentences_is_an_array_of_edn_strings() -> None:
    prop = tools.schema("qualitative-scenarios").input_schema["properties"]["sentences"]
    assert prop["type"] == "array"
    assert prop["items"]["type"] == "string"
    base = kb.sample()
    pair = ["(isa Humpty Horse)", "(afraidOf Humpty Humpty)"]
    as_array = await tools.call(
        base, "kb_qualitative_scenarios", {"sentences": pair, "context": "CxNursery"}
    )
    as_edn = await tools.call(
        base,
        "kb_qualitative_scenarios",
        {"sentences": "(" + " ".join(pair) + ")", "context": "CxNursery"},
    )
    assert as_array.ok, as_array.error
    assert as_array.text == as_edn.text
    assert as_array.text.count(':kind "scenario"') == 3
    for bad in ([1], [["isa", "A", "B"]], {"a": "(isa A B)"}):
        refused = await tools.call(
            base, "kb_qualitative_scenarios", {"sentences": bad, "context": "CxNursery"}
        )
        assert not refused.ok
        assert refused.text.startswith("bad-argument:"), refused.text
