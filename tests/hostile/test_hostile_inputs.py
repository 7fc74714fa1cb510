"""What a hostile tool input, KB file or client could do to the tool surface, the
engine's loading, the tool call's telemetry and the MCP face (issue 26, items 4-9).

Each test asserts the size, count or type that the red-team pass found wrong:
a result over its bound, an input read before it was refused, a bare
``RecursionError``, a quadratic load, a span that raised, a loopback server
without the DNS-rebinding check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from vaelii_llm import _edn
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.kb import _args
from vaelii_llm.kb import _io
from vaelii_llm.kb import _reads
from vaelii_llm.kb._scenarios import MAX_SCENARIO_SENTENCES
from vaelii_llm.kb._types import MAX_NESTING
from vaelii_llm.kb._types import EngineRefusal
from vaelii_llm.telemetry import _content as _telemetry_content
from vaelii_llm.tools import _args as _tool_args

if TYPE_CHECKING:
    from tests.conftest import Recorded

SENTENCE = "(isa Humpty Horse)"


@pytest.fixture(scope="module")
def nursery() -> kb.KB:
    return kb.sample()


@pytest.fixture
def edn_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every EDN text the tools read, in order (the reader itself still runs)."""
    seen: list[str] = []
    real = _edn.read

    def counted(text: object, what: str = "argument") -> Any:
        seen.append(text if isinstance(text, str) else repr(type(text)))
        return real(text, what)

    monkeypatch.setattr(_edn, "read", counted)
    return seen


# -- item 4: the bound counts the marker -----------------------------------------------

REFUSED_CALLS: list[tuple[Any, Any]] = [
    ("kb_nonesuch", {}),  # unknown-tool, which lists every tool
    ("kb_query", ["not", "an", "object"]),  # bad-input
    ("kb_query", {}),  # missing-argument
    ("kb_query", {"goal": "(a)", "bogus": 1}),  # unexpected-argument
    ("kb_query", {"goal": "(fears ?x"}),  # edn-syntax
    ("kb_query", {"goal": "(a)", "opts": {"max-depth": 10**9}}),  # over-ceiling
    ("kb_query", {"goal": "(a)", "context": "CxNowhere"}),  # the engine's unknown-context
    ("kb_qualitative_scenarios", {"sentences": [SENTENCE] * 13, "context": "CxNursery"}),
    ("kb_query", {"goal": "x" * 70_000}),  # input-too-large
]


@pytest.mark.parametrize("bound", [1, 10, 50, 200])
async def test_every_refusal_is_within_max_result_chars(nursery: kb.KB, bound: int) -> None:
    toolset = tools.Toolset(nursery, max_result_chars=bound)
    for name, given in REFUSED_CALLS:
        result = await toolset.call(name, given)
        assert not result.ok
        assert len(result.text) <= bound, (name, result.text)
    unknown = await toolset.call("kb_nonesuch", {})
    if bound >= 50:
        assert unknown.text.startswith("unknown-tool: ")
        assert unknown.text.endswith("…")


async def test_a_cut_answer_is_max_result_chars_with_its_marker(nursery: kb.KB) -> None:
    result = await tools.call(nursery, "kb_sentexes_in_context", {"context": "CxWell"})
    assert result.ok
    assert len(result.text) == tools._MAX_RESULT_CHARS  # was 4,074: 4,000 plus the marker
    assert result.text.endswith(_edn.CUT_MARKER)
    small = await tools.call(nursery, "kb_sentexes_in_context", {"context": "CxWell"}, 50)
    assert small.text == _edn.CUT_MARKER[:50]


def test_a_bound_below_one_is_refused(nursery: kb.KB) -> None:
    for bound in (0, -5, 1.5, None):
        with pytest.raises(ValueError, match="max_result_chars"):
            tools.Toolset(nursery, max_result_chars=bound)  # type: ignore[arg-type]


# -- item 5: every input bounded before it is read ---------------------------------------


def test_the_declared_array_bound_is_in_the_schema() -> None:
    sentences = tools.schema("qualitative-scenarios").input_schema["properties"]["sentences"]
    assert sentences["maxItems"] == MAX_SCENARIO_SENTENCES


@pytest.mark.parametrize("copies", [13, 50, 2000])
async def test_an_array_past_its_declared_bound_is_refused_before_any_is_read(
    nursery: kb.KB, edn_reads: list[str], copies: int
) -> None:
    result = await tools.call(
        nursery,
        "kb_qualitative_scenarios",
        {"sentences": [SENTENCE] * copies, "context": "CxNursery"},
    )
    assert result.error is not None
    assert result.error.startswith("over-ceiling: ")
    assert f"{copies} items, over the ceiling of {MAX_SCENARIO_SENTENCES}" in result.error
    assert edn_reads == []  # not one sentence was parsed


async def test_an_input_over_the_cap_is_refused_before_any_is_read(
    nursery: kb.KB, edn_reads: list[str]
) -> None:
    # the red-team case: 50,000 copies, 1.2 MB of JSON, spent 17.9 s parsing
    given = {"sentences": [SENTENCE] * 50_000, "context": "CxNursery"}
    assert len(json.dumps(given)) > 1_000_000
    result = await tools.call(nursery, "kb_qualitative_scenarios", given)
    assert result.error is not None
    assert result.error.startswith("input-too-large: ")
    assert str(_tool_args.MAX_INPUT_CHARS) in result.error
    assert edn_reads == []


def test_the_size_walk_stops_at_the_cap() -> None:
    steps = 0

    class Counted(list[Any]):
        def __iter__(self) -> Iterator[Any]:
            nonlocal steps
            for item in super().__iter__():
                steps += 1
                yield item

    huge = Counted(["x"] * 10**6)
    assert _tool_args.input_chars({"a": huge}, 1000) > 1000
    assert steps <= 1000  # the cap bounds the walk, not the input
    deep: list[Any] = []
    for _ in range(10**5):
        deep = [deep]
    assert _tool_args.input_chars(deep, 1000) > 1000  # iterative: no RecursionError


async def test_arguments_are_read_under_the_calls_clock(
    nursery: kb.KB, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = 0
    real = _edn.read

    def slow(text: object, what: str = "argument") -> Any:
        nonlocal reads
        reads += 1
        time.sleep(0.05)  # a slow parse: what 2,000 forms cost edn-format
        return real(text, what)

    monkeypatch.setattr(_edn, "read", slow)
    given = {
        "sentences": [f"(isa Humpty T{i})" for i in range(MAX_SCENARIO_SENTENCES)],
        "context": "CxNursery",
        "opts": {"max-ms": 1},
    }
    result = await tools.call(nursery, "kb_qualitative_scenarios", given)
    assert result.error is not None
    assert result.error.startswith("max-ms: reading the arguments of kb_qualitative_scenarios")
    # the clock (1 ms plus the printer's grace) ended the reading before the last sentence
    assert reads < MAX_SCENARIO_SENTENCES


@asynccontextmanager
async def mcp_http(address: str) -> AsyncIterator[str]:
    """What ``vaelii-llm mcp --http ADDRESS`` serves, in this process: the
    command's own parse of the address, then ``serve_http`` on the sample KB;
    yields the URL it announced, and stops it by cancelling it."""
    from vaelii_llm.integrations import mcp as mcp_face

    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        mcp_face.serve_http(
            tools.Toolset(kb.sample()), *mcp_face.parse_address(address), ready=ready.set_result
        )
    )
    try:
        await asyncio.wait([ready, serving], return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            serving.result()  # it failed to start: its error, here
        yield ready.result()
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def test_a_cancelled_http_server_stops_whole(caplog: pytest.LogCaptureFixture) -> None:
    from mcp import Client

    async with mcp_http("127.0.0.1:0") as url:
        async with Client(url, read_timeout_seconds=60) as client:
            listed = await client.list_tools()
        assert "kb_query" in {tool.name for tool in listed.tools}
        assert asyncio.all_tasks() - {asyncio.current_task()}  # the server's own, serving
    assert asyncio.all_tasks() == {asyncio.current_task()}  # none left behind
    port = urlsplit(url).port
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_over_mcp_a_huge_call_is_refused_before_it_is_read() -> None:
    from mcp import Client

    # the red-team case held a worker 67 s with 3.9 MB; the cap refuses it on the loop
    given = {"sentences": [SENTENCE] * 160_000, "context": "CxNursery"}
    async with mcp_http("127.0.0.1:0") as url, Client(url, read_timeout_seconds=60) as client:
        result = await client.call_tool("kb_qualitative_scenarios", given)
        after = await client.call_tool("kb_query", {"goal": "(afraidOf MissMuffet ?who)"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("input-too-large: ")
    assert not after.is_error  # and the server answers the next call


# -- item 6: one nesting cap for every EDN reader -----------------------------------------

DEEP = 5000
NESTINGS = {
    "list": ("(", ")"),
    "vector": ("[", "]"),
    "map": ("{:k ", "}"),
    "set": ("#{", "}"),
}


def deep_sentence(kind: str, depth: int = DEEP) -> str:
    opener, closer = NESTINGS[kind]
    return "(isa x " + opener * depth + "1" + closer * depth + ")"


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_load_edn_refuses_deep_nesting_typed(kind: str) -> None:
    with pytest.raises(EngineRefusal) as refused:
        kb.load_edn(deep_sentence(kind))
    assert refused.value.type == "malformed-sentence"
    assert f"nested deeper than {MAX_NESTING}" in str(refused.value)
    assert "line 1, column" in str(refused.value)


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_every_reader_holds_the_one_cap(kind: str) -> None:
    text = deep_sentence(kind)
    with pytest.raises(_edn.EDNRefusal) as tool_read:
        _edn.read(text)
    assert tool_read.value.type == "edn-too-deep"
    with pytest.raises(EngineRefusal) as engine_read:
        _args.parse_edn(text, "sentence")
    assert engine_read.value.type == "malformed-sentence"


def test_a_file_at_the_cap_loads() -> None:
    at_cap = "(p " * MAX_NESTING + ")" * MAX_NESTING
    wrapped = "{:context CxDeep :sentences [" + at_cap + "]}"
    base = kb.load_edn(at_cap + "\n" + wrapped)
    assert _reads.sentex_count(base, "CxDeep") == 1
    assert _reads.sentex_count(base) == 2


def test_the_command_prints_the_refusal_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "deep.edn"
    path.write_text(deep_sentence("vector") + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "vaelii_llm.cli", "call", "--kb", str(path), "kb_contexts"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert "RecursionError" not in output
    assert f"malformed-sentence: {path}, line 1, column" in output


# -- item 7: loading is linear -----------------------------------------------------------


def _traced_lines(text: str) -> int:
    """Python lines run while the forms of ``text`` are stored (parsed beforehand)."""
    forms = _io._read_forms(text, "bench")
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        _io._load_forms(forms, "bench", None)
    finally:
        sys.settrace(None)
    return count


def chain(n: int) -> str:
    """A genlCtx chain: each context inherits from the one before (ontologies hold these)."""
    return "\n".join(f"(genlCtx C{i + 1} C{i})" for i in range(n))


def rules(n: int) -> str:
    """Rules whose only indexed term is ``implies``: the duplicate check's worst case."""
    return "\n".join(f"(implies (q{i} ?x) (isa ?x T))" for i in range(n))


@pytest.mark.parametrize("lines", [chain, rules], ids=["genlCtx-chain", "rules"])
def test_loading_is_linear_work(lines: Any) -> None:
    small, large = _traced_lines(lines(400)), _traced_lines(lines(1600))
    # linear work grows 4x; rebuilding the parent table per line, or checking each
    # rule against every rule before it, grew it ~16x
    assert large / small < 5, (small, large)


def test_a_duplicate_rule_is_found_after_a_snapshot_reopen(tmp_path: Path) -> None:
    from vaelii_llm.kb import _writes as writes

    base = kb.load_edn(rules(50) + "\n(implies (q7 ?x) (isa ?x T))\n(not (q1 a))\n(not (q1 a))")
    assert _reads.sentex_count(base) == 51  # each duplicate answered, not stored twice
    kb.save(base, tmp_path / "kb.snap")
    again = kb.open(tmp_path / "kb.snap")
    h = writes.assert_sentence(again, "(implies (q7 ?x) (isa ?x T))", "CxBase")
    assert h == 8
    assert _reads.sentex_count(again) == 51


def test_the_derived_tables_follow_adds_and_retractions() -> None:
    from vaelii_llm.kb import _writes as writes

    base = kb.load_edn("(genlCtx A B)\n(genlCtx A C)\n(genlCtx A B)\n(arity p 2)\n(arity p 3)")
    a = base.term_id(kb._store.symbol("A"))
    b, c = (base.term_id(kb._store.symbol(n)) for n in "BC")
    p = base.term_id(kb._store.symbol("p"))
    assert base.parents(a) == (b, c)  # each parent once, in the order stored
    assert base.declared_arity(p) == 3  # the last declaration wins
    handles = {
        _args.edn_str(s.sentence): s.handle for s in _reads.sentexes_in_context(base, "CxBase")
    }
    writes.retract(base, handles["(arity p 3)"])
    assert base.declared_arity(p) == 2
    writes.retract(base, handles["(genlCtx A B)"])
    assert base.parents(a) == (c,)
    assert base.ancestors(a) == (a, c)


# -- item 8: a traced tool call never raises ---------------------------------------------


async def test_a_traced_call_with_a_deep_input_answers_and_records_a_bound(
    otel: Recorded, nursery: kb.KB
) -> None:
    deep: list[Any] = []
    for _ in range(10**5):
        deep = [deep]
    otel.enable(capture_content=True)
    result = await tools.Toolset(nursery).call("kb_query", {"goal": deep})
    assert result.error is not None
    assert not result.ok
    span = otel.one("execute_tool kb_query")
    recorded = dict(span.attributes or {})["gen_ai.tool.call.arguments"]
    assert isinstance(recorded, str)
    assert len(recorded) <= 4000
    assert recorded.startswith('{"goal":[[[[')
    assert recorded.endswith("…")


async def test_a_traced_call_records_whole_arguments_as_json(
    otel: Recorded, nursery: kb.KB
) -> None:
    otel.enable(capture_content=True)
    given = {"goal": "(isa ?x Spider)", "opts": {"max-ms": 500, "x": [1, 2.5, None, True]}}
    await tools.Toolset(nursery).call("kb_query", given)
    span = otel.one("execute_tool kb_query")
    assert json.loads(str(dict(span.attributes or {})["gen_ai.tool.call.arguments"])) == given


# -- item 9: DNS-rebinding protection by the bound address --------------------------------


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


#: How the command is told its host, and the address it then binds.
LOOPBACK_SPELLINGS = {
    "127.0.0.1": "127.0.0.1",
    "localhost": "127.0.0.1",
    "127.1": "127.0.0.1",
    "0x7f.1": "127.0.0.1",
    "2130706433": "127.0.0.1",
    "127.0.0.2": "127.0.0.2",
    "[::1]": "[::1]",
}


@pytest.mark.parametrize("host", sorted(LOOPBACK_SPELLINGS))
async def test_every_loopback_spelling_gets_the_rebinding_check(host: str) -> None:
    if host == "[::1]" and not _ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with mcp_http(f"{host}:0") as url, aiohttp.ClientSession() as http:
        port = urlsplit(url).port
        bound = f"http://{LOOPBACK_SPELLINGS[host]}:{port}/mcp"  # aiohttp wants it canonical
        evil = {**accept, "Host": "evil.example", "Origin": "http://evil.example"}
        async with http.post(bound, json=body, headers=evil) as refused:
            assert refused.status in (403, 421), await refused.text()
        evil_origin = {**accept, "Host": f"{host}:{port}", "Origin": "http://evil.example"}
        async with http.post(bound, json=body, headers=evil_origin) as refused:
            assert refused.status in (403, 421), await refused.text()
        good = {**accept, "Host": f"{host}:{port}", "Origin": f"http://{host}:{port}"}
        async with http.post(bound, json=body, headers=good) as served:
            assert served.status not in (403, 421), await served.text()


def test_a_non_loopback_address_gets_no_host_check() -> None:
    from vaelii_llm.integrations import mcp as mcp_face

    assert mcp_face._rebinding_protection("0.0.0.0", "0.0.0.0") is None
    assert mcp_face._rebinding_protection("192.0.2.7", "example.test") is None
    settings = mcp_face._rebinding_protection("127.0.0.1", "127.1")
    assert settings is not None
    assert "127.1:*" in settings.allowed_hosts
    assert "http://127.1:*" in settings.allowed_origins
    assert "evil.example:*" not in settings.allowed_hosts


def test_a_message_too_deep_for_the_encoder_is_recorded_bounded() -> None:

    deep: list[Any] = []
    for _ in range(10**5):
        deep = [deep]
    recorded = _telemetry_content.as_json(
        [{"role": "assistant", "input": deep}]
    )  # msgspec: RecursionError
    assert len(recorded) <= _telemetry_content.ARGUMENTS_CHARS
    assert recorded.startswith('[{"role":"assistant","input":[[[')
