"""OpenTelemetry GenAI spans and metrics, read back from the real SDK's
in-memory span exporter and metric reader (never a global provider: each test
passes its own to ``telemetry.enable`` and the ``otel`` fixture, in
conftest.py, disables it)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import subprocess
import sys
import types
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest
from aiohttp import web
from anthropic_fake import FakeMessagesAPI
from anthropic_fake import generate
from fake_ollama import FakeOllama
from fake_ollama import chunk
from fake_ollama import final
from fake_openai import MODEL as OPENAI_MODEL
from fake_openai import FakeOpenAI
from loopback import serve
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace import StatusCode

from vaelii_llm import kb
from vaelii_llm import pool
from vaelii_llm import telemetry
from vaelii_llm import tools
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import Usage
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import stub
from vaelii_llm.providers.stub import StubProvider

if TYPE_CHECKING:
    from conftest import Collect
    from conftest import Recorded

SECRET = "sk-ant-api03-TELEMETRY-SECRET-never-recorded-0123456789"
ASK = Request(
    messages=[Message(role="user", content="Is a spider an insect? PROMPT-MARK")], max_tokens=77
)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --------------------------------------------------------------------------
# Names


def test_every_name_is_the_conventions_own() -> None:
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as gm
    from opentelemetry.semconv.attributes import error_attributes
    from opentelemetry.semconv.attributes import server_attributes

    assert telemetry.OPERATION == ga.GEN_AI_OPERATION_NAME
    assert telemetry.PROVIDER_NAME == ga.GEN_AI_PROVIDER_NAME
    assert telemetry.REQUEST_MODEL == ga.GEN_AI_REQUEST_MODEL
    assert telemetry.REQUEST_MAX_TOKENS == ga.GEN_AI_REQUEST_MAX_TOKENS
    assert telemetry.REQUEST_TEMPERATURE == ga.GEN_AI_REQUEST_TEMPERATURE
    assert telemetry.REQUEST_STOP_SEQUENCES == ga.GEN_AI_REQUEST_STOP_SEQUENCES
    assert telemetry.REQUEST_STREAM == ga.GEN_AI_REQUEST_STREAM
    assert telemetry.RESPONSE_MODEL == ga.GEN_AI_RESPONSE_MODEL
    assert telemetry.RESPONSE_ID == ga.GEN_AI_RESPONSE_ID
    assert telemetry.RESPONSE_FINISH_REASONS == ga.GEN_AI_RESPONSE_FINISH_REASONS
    assert telemetry.RESPONSE_TIME_TO_FIRST_CHUNK == ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
    assert telemetry.USAGE_INPUT_TOKENS == ga.GEN_AI_USAGE_INPUT_TOKENS
    assert telemetry.USAGE_OUTPUT_TOKENS == ga.GEN_AI_USAGE_OUTPUT_TOKENS
    assert telemetry.USAGE_CACHE_READ == ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
    assert telemetry.USAGE_CACHE_CREATION == ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
    assert telemetry.TOKEN_TYPE == ga.GEN_AI_TOKEN_TYPE
    assert telemetry.TOOL_NAME == ga.GEN_AI_TOOL_NAME
    assert telemetry.TOOL_CALL_ARGUMENTS == ga.GEN_AI_TOOL_CALL_ARGUMENTS
    assert telemetry.TOOL_CALL_RESULT == ga.GEN_AI_TOOL_CALL_RESULT
    assert telemetry.WORKFLOW_NAME == ga.GEN_AI_WORKFLOW_NAME
    assert telemetry.INPUT_MESSAGES == ga.GEN_AI_INPUT_MESSAGES
    assert telemetry.OUTPUT_MESSAGES == ga.GEN_AI_OUTPUT_MESSAGES
    assert telemetry.SYSTEM_INSTRUCTIONS == ga.GEN_AI_SYSTEM_INSTRUCTIONS
    assert telemetry.SERVER_ADDRESS == server_attributes.SERVER_ADDRESS
    assert telemetry.SERVER_PORT == server_attributes.SERVER_PORT
    assert telemetry.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert telemetry.METRIC_DURATION == gm.GEN_AI_CLIENT_OPERATION_DURATION
    assert telemetry.METRIC_TOKEN_USAGE == gm.GEN_AI_CLIENT_TOKEN_USAGE
    assert telemetry.METRIC_TIME_TO_FIRST_CHUNK == gm.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK
    assert (
        telemetry.METRIC_TIME_PER_OUTPUT_CHUNK == gm.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK
    )
    operations = {"chat", "execute_tool", "invoke_workflow"}
    assert operations <= {v.value for v in ga.GenAiOperationNameValues}  # type: ignore[attr-defined]
    assert "anthropic" in {v.value for v in ga.GenAiProviderNameValues}  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# Off: nothing recorded, nothing imported, nothing in between


async def test_nothing_is_recorded_before_enable(otel: Recorded) -> None:
    built = stub.provider(script=["Yes."])
    assert type(built) is StubProvider  # the provider itself, no wrapper
    await built.complete(ASK)
    await tools.call(kb.sample(), "kb_query", {"goal": "(isa ?x Spider)"})
    async with pool.stub_pool(script=["Yes."] * 3) as voters:
        await pool.vote(voters, "Is it?")
    assert otel.finished() == []
    assert otel.points(telemetry.METRIC_DURATION) == []


async def test_enable_and_disable_reach_a_stub_built_before_them(
    otel: Recorded, collect: Collect
) -> None:
    built = stub.provider(default="Yes.")  # built first, as a web app does at start-up
    otel.enable()  # then enabled, elsewhere
    await built.complete(ASK)
    await collect(built, ASK)
    assert otel.names() == ["chat stub", "chat stub"]
    assert [attrs(s)["gen_ai.request.stream"] for s in otel.finished()] == [False, True]
    telemetry.disable()
    assert not telemetry.enabled()
    await built.complete(ASK)
    assert [type(i).__name__ for i in await collect(built, ASK)] == ["TextBlock", "Response"]
    assert otel.names() == ["chat stub", "chat stub"]  # none more
    assert len(otel.points(telemetry.METRIC_DURATION)) == 1  # one data point, two turns
    otel.enable()
    await built.complete(ASK)  # and on again
    assert otel.names() == ["chat stub"] * 3


async def test_enable_and_disable_reach_an_http_backend_built_before_them(
    otel: Recorded, collect: Collect
) -> None:
    fake = await FakeOllama().start()
    try:
        async with ollama.provider(host=fake.url) as model:
            otel.enable()
            await model.complete(ASK)
            await collect(model, ASK)
            assert otel.names() == ["chat phi4:14b", "chat phi4:14b"]
            assert attrs(otel.finished()[0])["server.address"] == "127.0.0.1"
            telemetry.disable()
            await model.complete(ASK)
            await collect(model, ASK)
    finally:
        await fake.stop()
    assert len(fake.bodies) == 4  # every turn reached the server
    assert otel.names() == ["chat phi4:14b", "chat phi4:14b"]  # the last two recorded none


PROBE_OFF = """
import asyncio, json, sys
from contextlib import aclosing
from vaelii_llm import kb, pool, providers, telemetry, tools
from vaelii_llm._protocol import Message, Request

async def main():
    req = Request(messages=[Message(role="user", content="hi")])
    p = await providers.provider("stub", stub={"script": ["Yes.", "No."]})
    await p.complete(req)
    async with aclosing(p.stream(req)) as items:
        async for _ in items:
            pass
    await tools.call(kb.sample(), "kb_query", {"goal": "(isa ?x Spider)"})
    async with pool.stub_pool(script=["Yes."] * 3) as voters:
        await pool.vote(voters, "Is it?")
    return type(p).__name__

name = asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
spans = sorted(s.name for s in SPANS.get_finished_spans()) if "SPANS" in globals() else None
print(json.dumps([name, telemetry.enabled(), loaded, spans]))
"""

GLOBAL_SDK = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
SPANS = InMemorySpanExporter()
_global = TracerProvider()
_global.add_span_processor(SimpleSpanProcessor(SPANS))
trace.set_tracer_provider(_global)
"""


def _probe(env: dict[str, str], prelude: str = "") -> tuple[list[Any], str]:
    import os

    full = {k: v for k, v in os.environ.items() if k != "VAELII_LLM_OTEL"} | env
    out = subprocess.run(
        [sys.executable, "-c", prelude + PROBE_OFF],
        capture_output=True,
        text=True,
        check=True,
        env=full,
        cwd=Path(__file__).resolve().parents[2],
    )
    result: list[Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result, out.stderr


def test_off_imports_nothing_of_opentelemetry() -> None:
    (name, on, loaded, _), _ = _probe({})
    assert (name, on, loaded) == ("StubProvider", False, [])


def test_the_environment_switch_turns_it_on_when_a_provider_is_built() -> None:
    (name, on, loaded, _), _ = _probe({"VAELII_LLM_OTEL": "1"})
    assert name == "StubProvider"  # its own class: traced through the hooks
    assert on is True
    assert "opentelemetry.trace" in loaded


def test_the_environment_switch_records_on_the_global_providers() -> None:
    (_, on, _, spans), _ = _probe({"VAELII_LLM_OTEL": "1"}, prelude=GLOBAL_SDK)
    assert on is True
    turns = ["chat stub"] * 5  # complete, stream, and the vote's three
    assert spans == sorted([*turns, "execute_tool kb_query", "invoke_workflow vote"])


def test_the_environment_switch_without_the_package_warns_and_stays_off() -> None:
    blocked = "import sys\nsys.modules['opentelemetry'] = None\n"
    (name, on, _, _), stderr = _probe({"VAELII_LLM_OTEL": "1"}, prelude=blocked)
    assert (name, on) == ("StubProvider", False)
    assert stderr.count("opentelemetry-api is not installed") == 1  # once, not per provider


def test_enable_without_the_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError, match=r"vaelii-llm\[otel\]"):
        telemetry.enable()
    assert not telemetry.enabled()


async def test_a_traced_provider_keeps_its_class_and_its_methods(otel: Recorded) -> None:
    otel.enable()
    built = stub.provider(script=["one"])
    assert type(built) is StubProvider  # enable rewrites no class
    async with built as inside:
        assert inside is built
        await inside.complete(ASK)
        assert [r.messages for r in built.requests()] == [ASK.messages]
        assert built.last_user_text() == ASK.messages[0].content
    from vaelii_llm.errors import LLMClosed

    with pytest.raises(LLMClosed):
        await built.complete(ASK)


# --------------------------------------------------------------------------
# Turns


SERVED = Response(
    content=[TextBlock(text="Yes.")],
    stop_reason="end_turn",
    model="stub-served",
    id="resp_1",
    usage=Usage(input_tokens=12, output_tokens=3, cache_read_input_tokens=5),
)


async def test_a_stub_turn_is_a_chat_span_with_the_conventions_attributes(otel: Recorded) -> None:
    otel.enable()
    await stub.provider(script=[SERVED]).complete(ASK)
    span = otel.one("chat stub")
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "stub",
        "gen_ai.request.model": "stub",
        "gen_ai.request.max_tokens": 77,
        "gen_ai.request.stream": False,
        "gen_ai.response.model": "stub-served",
        "gen_ai.response.id": "resp_1",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.cache_read.input_tokens": 5,
    }


async def test_a_turn_records_the_client_histograms(otel: Recorded) -> None:
    otel.enable()
    await stub.provider(script=[SERVED]).complete(ASK)
    [(unit, duration)] = otel.points(telemetry.METRIC_DURATION)
    assert unit == "s"
    assert duration.count == 1
    assert duration.explicit_bounds[:3] == (0.01, 0.02, 0.04)
    assert dict(duration.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "stub",
        "gen_ai.request.model": "stub",
        "gen_ai.response.model": "stub-served",
    }
    tokens = {
        p.attributes["gen_ai.token.type"]: (u, p)
        for u, p in otel.points(telemetry.METRIC_TOKEN_USAGE)
    }
    assert set(tokens) == {"input", "output"}
    assert tokens["input"][0] == "{token}"
    assert (tokens["input"][1].sum, tokens["output"][1].sum) == (12, 3)
    assert tokens["input"][1].explicit_bounds[:4] == (1, 4, 16, 64)
    assert otel.points(telemetry.METRIC_TIME_TO_FIRST_CHUNK) == []  # not streamed


async def test_a_streamed_turns_span_covers_the_whole_stream(otel: Recorded) -> None:
    otel.enable()
    built = stub.provider(script=[{"text": "Yes, indeed it is.", "stop_reason": "max_tokens"}])
    seen_open: list[list[str]] = []
    async with aclosing(built.stream(ASK, deltas=True)) as items:
        async for item in items:
            seen_open.append(otel.names())  # what had ended as each item arrived
            if isinstance(item, Response):
                await asyncio.sleep(0)  # the caller dawdles before asking for the end
                seen_open.append(otel.names())
    assert all(names == [] for names in seen_open)  # open from the call to the end
    span = otel.one("chat stub")
    assert span.start_time is not None
    assert span.end_time is not None
    a = attrs(span)
    assert a["gen_ai.request.stream"] is True
    assert a["gen_ai.response.finish_reasons"] == ("max_tokens",)
    assert 0 <= a["gen_ai.response.time_to_first_chunk"] < (span.end_time - span.start_time) / 1e9
    assert [e.name for e in span.events] == ["vaelii_llm.first_block"]
    assert "vaelii_llm.stream.closed_early" not in a
    [(unit, first)] = otel.points(telemetry.METRIC_TIME_TO_FIRST_CHUNK)
    assert (unit, first.count) == ("s", 1)


async def test_a_caller_that_stops_at_the_response_had_the_whole_turn(otel: Recorded) -> None:
    otel.enable()
    async with aclosing(stub.provider(script=[SERVED]).stream(ASK)) as items:
        async for item in items:
            if isinstance(item, Response):
                break
    a = attrs(otel.one("chat stub"))
    assert "vaelii_llm.stream.closed_early" not in a
    assert a["gen_ai.usage.output_tokens"] == 3
    assert len(otel.points(telemetry.METRIC_DURATION)) == 1


async def test_a_stream_that_ends_without_its_response_is_an_error(
    otel: Recorded, collect: Collect
) -> None:
    otel.enable()

    class Truncated(StubProvider):
        async def stream(self, request: Request, *, deltas: bool = False) -> AsyncIterator[Any]:  # type: ignore[override]
            yield TextBlock(text="half")

    await collect(Truncated(), ASK)
    span = otel.one("chat stub")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "_OTHER"


async def test_a_stop_reason_refusal_is_an_answer_not_an_error(otel: Recorded) -> None:
    otel.enable()
    await stub.provider(script=[{"refusal": "I won't"}]).complete(ASK)
    span = otel.one("chat stub")
    assert attrs(span)["gen_ai.response.finish_reasons"] == ("refusal",)
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(span)


async def test_a_refused_turn_ends_in_error_with_the_refusals_type(otel: Recorded) -> None:
    otel.enable()
    with pytest.raises(LLMApiError):
        await stub.provider(script=[{"raise": "llm-api-error"}]).complete(ASK)
    span = otel.one("chat stub")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "llm-api-error"
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].attributes is not None
    assert span.events[0].attributes["exception.type"].endswith("LLMApiError")
    [(_, duration)] = otel.points(telemetry.METRIC_DURATION)
    assert duration.attributes["error.type"] == "llm-api-error"
    assert otel.points(telemetry.METRIC_TOKEN_USAGE) == []


async def test_each_item_after_the_first_records_its_time_per_output_chunk(
    otel: Recorded,
) -> None:
    otel.enable()
    built = stub.provider(script=["Yes, indeed it is."])
    async with aclosing(built.stream(ASK, deltas=True)) as items:
        content = [item async for item in items if not isinstance(item, Response)]
    assert len(content) >= 2
    [(unit, gaps)] = otel.points(telemetry.METRIC_TIME_PER_OUTPUT_CHUNK)
    assert (unit, gaps.count) == ("s", len(content) - 1)
    await built.complete(ASK)
    assert otel.points(telemetry.METRIC_TIME_PER_OUTPUT_CHUNK)[0][1].count == len(content) - 1


async def test_a_stall_is_the_spans_error_with_its_phase(otel: Recorded) -> None:
    """A far end that answers its head and then only keep-alives (#51)."""

    async def quiet(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        while True:
            await response.write(json.dumps(chunk("")).encode() + b"\n")
            await asyncio.sleep(0.05)

    otel.enable()
    async with serve(quiet) as url, ollama.provider(host=url) as model:
        request = Request(messages=ASK.messages, stall_ms=300, timeout_ms=30_000)

        async def drained() -> None:
            async with aclosing(model.stream(request)) as items:
                async for _ in items:
                    pass

        with pytest.raises(LLMTimeout):
            await drained()
    [span] = [s for s in otel.finished() if s.name.startswith("chat")]
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "llm-timeout"
    assert attrs(span)["vaelii_llm.timeout.phase"] == "stall"


async def test_a_stream_closed_from_another_task_is_closed_early_not_an_error(
    otel: Recorded,
) -> None:
    async def opening(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(json.dumps(chunk("Hi")).encode() + b"\n")
        await asyncio.sleep(3600)
        return response

    otel.enable()
    async with serve(opening) as url, ollama.provider(host=url) as model:
        items = model.stream(ASK, deltas=True)
        first = asyncio.Event()

        async def reader() -> None:
            async for _ in items:
                first.set()

        task = asyncio.create_task(reader())
        await first.wait()
        await items.aclose()
        await task
    [span] = [s for s in otel.finished() if s.name.startswith("chat")]
    assert attrs(span)["vaelii_llm.stream.closed_early"] is True
    assert "error.type" not in attrs(span)
    assert span.status.status_code is StatusCode.UNSET


async def test_a_bug_in_a_backend_is_named_by_its_class(otel: Recorded) -> None:
    otel.enable()

    def broken(_entry: Any) -> Any:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        await stub.provider(script=[{"x": 1}], expand=broken).complete(ASK)
    assert attrs(otel.one("chat stub"))["error.type"] == "KeyError"


async def test_content_is_recorded_only_when_asked(otel: Recorded) -> None:
    req = Request(messages=[Message(role="user", content="PROMPT-MARK")], system="SYSTEM-MARK")
    otel.enable()
    await stub.provider(script=["ANSWER-MARK"]).complete(req)
    await tools.call(kb.sample(), "kb_query", {"goal": "(isa ?x Spider)"})
    plain = json.dumps([s.to_json() for s in otel.finished()])
    for mark in ("PROMPT-MARK", "SYSTEM-MARK", "ANSWER-MARK", "Spider"):
        assert mark not in plain
    otel.spans.clear()

    otel.enable(capture_content=True)
    await stub.provider(script=["ANSWER-MARK"]).complete(req)
    await tools.call(kb.sample(), "kb_query", {"goal": "(isa ?x Spider)"})
    chat = attrs(otel.one("chat stub"))
    assert json.loads(chat["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "PROMPT-MARK"}]}
    ]
    assert json.loads(chat["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "SYSTEM-MARK"}
    ]
    assert json.loads(chat["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "ANSWER-MARK"}],
            "finish_reason": "end_turn",
        }
    ]
    tool = attrs(otel.one("execute_tool kb_query"))
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"goal": "(isa ?x Spider)"}
    assert "Muffet" in tool["gen_ai.tool.call.result"]


async def test_the_conventions_environment_switch_captures_content(
    otel: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_ENV, "true")
    otel.enable()
    await stub.provider(script=["ANSWER-MARK"]).complete(ASK)
    assert "ANSWER-MARK" in attrs(otel.one("chat stub"))["gen_ai.output.messages"]


# --------------------------------------------------------------------------
# Loopback backends


async def test_an_ollama_turn_on_loopback(otel: Recorded) -> None:
    otel.enable()
    fake = await FakeOllama().start()
    try:
        async with ollama.provider(host=fake.url) as model:
            await model.complete(ASK)
            async with aclosing(model.stream(ASK)) as items:
                async for _ in items:
                    pass
    finally:
        await fake.stop()
    port = int(fake.url.rsplit(":", 1)[1])
    spans = otel.finished()
    assert [s.name for s in spans] == ["chat phi4:14b", "chat phi4:14b"]
    for span, streamed in zip(spans, (False, True), strict=True):
        a = attrs(span)
        assert a["gen_ai.provider.name"] == "ollama"
        assert a["gen_ai.request.model"] == "phi4:14b"
        assert a["gen_ai.response.model"] == "phi4:14b"
        assert (a["server.address"], a["server.port"]) == ("127.0.0.1", port)
        assert a["gen_ai.request.stream"] is streamed
        assert span.status.status_code is StatusCode.UNSET
    assert "gen_ai.response.time_to_first_chunk" in attrs(spans[1])


async def test_an_ollama_turn_reports_the_neutral_stop_reason_and_counts(otel: Recorded) -> None:
    otel.enable()
    fake = await FakeOllama().start()
    try:
        async with ollama.provider(host=fake.url) as model:
            await model.complete(ASK)
    finally:
        await fake.stop()
    a = attrs(otel.one("chat phi4:14b"))
    assert a["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (26, 282)


async def test_an_openai_compatible_turn_on_loopback(otel: Recorded) -> None:
    otel.enable()
    fake = await FakeOpenAI().start()
    try:
        async with openai.provider(base_url=fake.base_url, model=OPENAI_MODEL) as model:
            await model.complete(ASK)
            async with aclosing(model.stream(ASK)) as items:
                async for _ in items:
                    pass
    finally:
        await fake.stop()
    port = int(fake.url.rsplit(":", 1)[1])
    spans = otel.finished()
    assert [s.name for s in spans] == [f"chat {OPENAI_MODEL}"] * 2
    for span, streamed in zip(spans, (False, True), strict=True):
        a = attrs(span)
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == OPENAI_MODEL
        assert a["gen_ai.response.finish_reasons"] == ("end_turn",)
        assert (a["server.address"], a["server.port"]) == ("127.0.0.1", port)
        assert a["gen_ai.request.stream"] is streamed
        assert span.status.status_code is StatusCode.UNSET


async def test_a_messages_api_turn_on_loopback(otel: Recorded) -> None:
    otel.enable()
    transcript = generate(random.Random(7), kinds=["thinking", "text"], stop_reason="end_turn")
    fake = FakeMessagesAPI(transcript=transcript)
    async with (
        serve(fake.app()) as url,
        anthropic.provider(credential=SECRET, base_url=url) as model,
    ):
        await model.complete(ASK)
        async with aclosing(model.stream(ASK)) as items:
            async for _ in items:
                pass
    port = int(url.rsplit(":", 1)[1])
    message = transcript.message
    spans = otel.finished()
    assert [s.name for s in spans] == ["chat claude-opus-5-5"] * 2
    for span in spans:
        a = attrs(span)
        assert a["gen_ai.provider.name"] == "anthropic"
        assert a["gen_ai.request.model"] == "claude-opus-5-5"
        assert a["gen_ai.response.model"] == message["model"]
        assert a["gen_ai.response.id"] == message["id"]
        assert a["gen_ai.response.finish_reasons"] == ("end_turn",)
        counted = message["usage"]
        assert a["gen_ai.usage.input_tokens"] == counted["input_tokens"] + (
            counted.get("cache_creation_input_tokens") or 0
        ) + (counted.get("cache_read_input_tokens") or 0)
        assert a["gen_ai.usage.output_tokens"] == message["usage"]["output_tokens"]
        assert (a["server.address"], a["server.port"]) == ("127.0.0.1", port)
    assert [e.name for e in spans[1].events] == ["vaelii_llm.first_block"]


async def test_a_timeout_ends_the_span_in_error(otel: Recorded, collect: Collect) -> None:
    otel.enable()
    fake = await FakeOllama(mode="stall").start()  # the stall lasts an hour
    try:
        async with ollama.provider(host=fake.url) as model:
            with pytest.raises(LLMTimeout):
                await collect(model, Request(messages=ASK.messages, timeout_ms=300))
    finally:
        await fake.stop()
    span = otel.one("chat phi4:14b")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "llm-timeout"


async def test_a_stream_its_caller_closes_early_is_not_an_error(otel: Recorded) -> None:
    otel.enable()
    fake = await FakeOllama().start()
    try:
        async with ollama.provider(host=fake.url) as model:
            async with aclosing(model.stream(ASK)) as items:
                async for _ in items:
                    break
            span = otel.one("chat phi4:14b")  # ended by the time aclosing returns
    finally:
        await fake.stop()
    assert attrs(span)["vaelii_llm.stream.closed_early"] is True
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(span)
    assert "gen_ai.response.finish_reasons" not in attrs(span)
    assert otel.points(telemetry.METRIC_DURATION) == []


def thinks_then_says(_body: dict[str, Any]) -> list[dict[str, Any]]:
    return [chunk(thinking="Let me think."), chunk("Hello"), chunk(" there"), final()]


async def test_a_cancelled_stream_is_recorded_as_cancelled(otel: Recorded) -> None:
    otel.enable()
    # The first thinking delta arrives; then the host stalls.
    fake = await FakeOllama(script=thinks_then_says, mode="stall").start()
    first = asyncio.Event()

    async def read(model: Any) -> None:
        async with aclosing(model.stream(ASK, deltas=True)) as items:
            async for _ in items:
                first.set()

    try:
        async with ollama.provider(host=fake.url) as model:
            task = asyncio.create_task(read(model))
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await fake.stop()
    span = otel.one("chat phi4:14b")
    assert attrs(span)["vaelii_llm.cancelled"] is True
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(span)


async def test_no_credential_in_any_span_event_metric_or_log(
    otel: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    otel.enable(capture_content=True)
    transcript = generate(random.Random(3), kinds=["text", "tool_use"], stop_reason="tool_use")
    ok = FakeMessagesAPI(transcript=transcript)
    busy = FakeMessagesAPI(status=529)
    async with serve(ok.app()) as url, serve(busy.app()) as busy_url:
        # The secret travels as the credential and as a gateway URL's password.
        with_password = url.replace("http://", f"http://gateway:{SECRET}@")
        async with anthropic.provider(credential=SECRET, base_url=with_password) as model:
            await model.complete(ASK)
            async with aclosing(model.stream(ASK)) as items:
                async for _ in items:
                    pass
        async with anthropic.provider(credential=SECRET, base_url=busy_url) as model:
            with pytest.raises(LLMApiError):
                await model.complete(ASK)
    assert ok.seen[0].headers["x-api-key"] == SECRET  # it did travel
    spans = otel.finished()
    assert len(spans) == 3
    exported = json.dumps([s.to_json() for s in spans])
    data = otel.metrics.get_metrics_data()
    assert data is not None
    exported += data.to_json()
    exported += caplog.text
    exported += "\n".join(str(r.__dict__) for r in caplog.records)
    assert "PROMPT-MARK" in exported  # content capture was on
    assert SECRET not in exported
    assert "gateway" not in exported


# --------------------------------------------------------------------------
# Tool calls and votes


async def test_a_tool_call_is_an_execute_tool_span(otel: Recorded) -> None:
    otel.enable()
    result = await tools.call(kb.sample(), "kb_query", {"goal": "(isa ?x Spider)"})
    assert result.ok
    span = otel.one("execute_tool kb_query")
    assert span.kind is SpanKind.INTERNAL
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "kb_query"}


async def test_a_refused_tool_call_sets_the_refusals_type(otel: Recorded) -> None:
    otel.enable()
    toolset = tools.Toolset(kb.sample())
    result = await toolset.call("kb_query", {"goal": "(isa ?x Spider)", "bogus": 1})
    assert not result.ok
    refused = await toolset.call("kb_nonesuch", {})
    assert refused.error is not None
    assert refused.error.startswith("unknown-tool")
    first = otel.one("execute_tool kb_query")
    assert result.error is not None
    assert attrs(first)["error.type"] == re.split(r"[:\s]", result.error, maxsplit=1)[0]
    assert first.status.status_code is StatusCode.ERROR
    assert attrs(otel.one("execute_tool kb_nonesuch"))["error.type"] == "unknown-tool"


async def test_a_vote_span_holds_its_turns(otel: Recorded) -> None:
    otel.enable()
    script = ["Yes.", "No.", "Yes.", {"raise": "llm-timeout"}]
    async with pool.stub_pool(script=script, size=4) as voters:
        outcome = await pool.vote(voters, "Is a spider an insect?", votes=4)
    assert (outcome.verdict, outcome.failed) == ("yes", 1)
    vote = otel.one("invoke_workflow vote")
    assert attrs(vote) == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "vote",
        "vaelii_llm.vote.verdict": "yes",
        "vaelii_llm.vote.yes": 2,
        "vaelii_llm.vote.no": 1,
        "vaelii_llm.vote.failed": 1,
        "vaelii_llm.vote.calls": 4,
    }
    turns = [s for s in otel.finished() if s.name == "chat stub"]
    assert len(turns) == 4
    assert vote.context is not None
    for turn in turns:
        assert turn.parent is not None
        assert turn.parent.span_id == vote.context.span_id
        assert turn.context is not None
        assert turn.context.trace_id == vote.context.trace_id
    assert sorted(attrs(t).get("error.type", "") for t in turns) == ["", "", "", "llm-timeout"]


async def test_a_cancelled_vote_is_recorded_as_cancelled(otel: Recorded) -> None:
    otel.enable()
    arrived: list[web.Request] = []
    all_arrived = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        arrived.append(request)
        if len(arrived) == 3:
            all_arrived.set()
        await asyncio.Event().wait()  # never answers; cancelled when the client goes
        raise AssertionError

    async with serve(stall) as url:
        voters = pool.Pool([ollama.provider(host=url)] * 3)
        task = asyncio.create_task(pool.vote(voters, "Is it?"))
        await all_arrived.wait()  # every turn is in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await voters.aclose()
    vote = otel.one("invoke_workflow vote")
    assert attrs(vote)["vaelii_llm.cancelled"] is True
    assert vote.status.status_code is StatusCode.UNSET
    turns = [s for s in otel.finished() if s.name == "chat phi4:14b"]
    assert len(turns) == 3
    assert all(attrs(t)["vaelii_llm.cancelled"] is True for t in turns)


# --------------------------------------------------------------------------
# The web backends guide's Tracing section


def test_the_docs_tracing_block_sends_spans(
    otel: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "guides" / "web-backends.md"
    section = page.read_text().split("## Tracing", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    code = block.group(1)
    # The OTLP exporter posts to a collector; here it is the SDK's in-memory one.
    captured = InMemorySpanExporter()
    otlp = types.ModuleType("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    otlp.OTLPSpanExporter = lambda: captured  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, otlp.__name__, otlp)
    namespace: dict[str, Any] = {}
    exec(compile(code, "web-backends.md", "exec"), namespace)
    asyncio.run(stub.provider(script=["Yes."]).complete(ASK))
    namespace["tracer_provider"].force_flush()
    assert [s.name for s in captured.get_finished_spans()] == ["chat stub"]
    namespace["tracer_provider"].shutdown()


async def test_a_system_prompt_of_blocks_is_recorded_a_part_a_block(otel: Recorded) -> None:
    system = [TextBlock(text="SYSTEM-ONE"), TextBlock(text="SYSTEM-TWO")]
    req = Request(messages=[Message(role="user", content="q")], system=system)
    otel.enable(capture_content=True)
    await stub.provider(script=["ok"]).complete(req)
    assert json.loads(attrs(otel.one("chat stub"))["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "SYSTEM-ONE"},
        {"type": "text", "content": "SYSTEM-TWO"},
    ]


def _answering(status: int, text: str) -> Any:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            status=status,
            text=text,
            content_type="application/json",
            headers={"request-id": "req_123", "x-api-key": SECRET},
        )

    return handler


async def test_a_turns_span_carries_the_far_ends_request_id(otel: Recorded) -> None:
    otel.enable()
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "No."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    async with (
        serve(_answering(200, json.dumps(message))) as url,
        anthropic.provider(credential=SECRET, base_url=url) as model,
    ):
        await model.complete(ASK)
    a = attrs(otel.one("chat claude-opus-5-5"))
    assert (a["gen_ai.response.id"], a["vaelii_llm.response.request_id"]) == ("msg_1", "req_123")
    assert SECRET not in repr(a)


async def test_a_refused_turns_span_carries_the_far_ends_request_id(otel: Recorded) -> None:
    otel.enable()
    async with (
        serve(_answering(429, '{"error": "slow down"}')) as url,
        anthropic.provider(credential=SECRET, base_url=url) as model,
    ):
        with pytest.raises(LLMApiError):
            await model.complete(ASK)
    span = otel.one("chat claude-opus-5-5")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["vaelii_llm.response.request_id"] == "req_123"


# --------------------------------------------------------------------------
# One wrapper: a backend with no telemetry code of its own


OWN_BACKEND = '''
from vaelii_llm._protocol import ProviderBase, Response, TextBlock, Usage, TextDelta


class Yonder(ProviderBase):
    """A provider of its own: no import of telemetry, no span code."""

    def __init__(self, base_url="http://yonder.example:8123/v1", model="yonder-1"):
        self.base_url = base_url
        self.model = model

    def _answer(self):
        return Response(
            content=[TextBlock(text="Yes.")],
            stop_reason="end_turn",
            usage=Usage(input_tokens=5, output_tokens=1),
            model=self.model,
        )

    async def complete(self, request):
        return self._answer()

    async def stream(self, request, *, deltas=False):
        if deltas:
            yield TextDelta(index=0, text="Yes.")
        yield TextBlock(text="Yes.")
        yield await self.complete(request)  # its own complete: still one turn, one span


class Slotted:
    """A provider class whose instances keep no __dict__."""

    __slots__ = ()

    async def complete(self, request):
        raise NotImplementedError

    def stream(self, request, *, deltas=False):
        raise NotImplementedError


def provider(base_url="http://yonder.example:8123/v1", model="yonder-1"):
    return Yonder(base_url, model)


def slotted(base_url="http://yonder.example:8123/v1", model="yonder-1"):
    return Slotted()


async def available(base_url="http://yonder.example:8123/v1"):
    return True
'''


@pytest.fixture
def yonder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A backend module outside the package, registered for the test only."""
    from vaelii_llm import providers
    from vaelii_llm.providers import Backend

    (tmp_path / "yonder_backend.py").write_text(OWN_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    providers.register(
        Backend(
            "yonder",
            "yonder_backend",
            ("base_url",),
            host_option="base_url",
            hosts_switch="YONDER_HOSTS",
        )
    )
    import yonder_backend

    return yonder_backend  # the registry is restored after the test (conftest.py)


def _shape(span: ReadableSpan) -> tuple[str, SpanKind, set[str]]:
    return span.name.split(" ")[0], span.kind, set(attrs(span))


async def test_a_registered_backend_gets_the_built_in_chat_span(
    otel: Recorded, yonder: Any
) -> None:
    from vaelii_llm import providers

    otel.enable()
    model = await providers.provider("yonder")
    assert type(model) is yonder.Yonder  # handed out as itself, not a wrapper
    await model.complete(ASK)
    async with aclosing(model.stream(ASK, deltas=True)) as items:
        assert [type(item).__name__ async for item in items] == [
            "TextDelta",
            "TextBlock",
            "Response",
        ]
    whole, streamed = otel.finished()
    assert whole.name == streamed.name == "chat yonder-1"
    assert attrs(whole)["gen_ai.provider.name"] == "yonder"
    assert attrs(whole)["server.address"] == "yonder.example"
    assert attrs(whole)["server.port"] == 8123
    assert attrs(whole)["gen_ai.response.model"] == "yonder-1"
    assert attrs(streamed)["gen_ai.request.stream"] is True
    assert "gen_ai.response.time_to_first_chunk" in attrs(streamed)
    await stub.provider(script=[await model.complete(ASK)]).complete(ASK)
    built_in = otel.finished()[-1]
    assert _shape(whole)[:2] == _shape(built_in)[:2]
    # The stub has no server; otherwise the span carries the same attributes.
    assert _shape(whole)[2] - {"server.address", "server.port"} == _shape(built_in)[2]
    durations = [
        p.attributes["gen_ai.provider.name"]
        for _, p in otel.points("gen_ai.client.operation.duration")
    ]
    assert sorted(durations) == ["stub", "yonder"]


async def test_the_vote_pool_hands_out_a_registered_backend_traced(
    otel: Recorded, yonder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YONDER_HOSTS", "http://a.example:1/v1,http://b.example:2/v1")
    otel.enable()
    async with await pool.pool_from_config(kind="yonder") as voters:
        verdict = await pool.vote(voters, ASK)
    assert verdict.verdict == "yes"
    chats = [s for s in otel.finished() if s.name == "chat yonder-1"]
    assert len(chats) == verdict.calls
    assert {attrs(s)["server.address"] for s in chats} <= {"a.example", "b.example"}


async def test_instrumenting_twice_changes_nothing_and_telemetry_can_come_later(
    otel: Recorded, yonder: Any
) -> None:
    built = yonder.provider()
    assert telemetry.instrument(built, "yonder") is built
    telemetry.instrument(built, "another-name")  # already instrumented: kept as it was
    await built.complete(ASK)
    assert otel.finished() == []  # instrumented while off: nothing recorded
    otel.enable()
    await built.complete(ASK)
    (span,) = otel.finished()
    assert attrs(span)["gen_ai.provider.name"] == "yonder"


async def test_a_provider_without_an_instance_dict(
    otel: Recorded, yonder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(TypeError, match="Slotted has none"):
        telemetry.instrument(yonder.slotted(), "yonder")
    otel.enable()
    with caplog.at_level(logging.WARNING, logger="vaelii_llm.telemetry"):
        handed = telemetry.instrument_built(yonder.slotted(), "yonder")
        telemetry.instrument_built(yonder.slotted(), "yonder")
    assert type(handed) is yonder.Slotted  # handed out untraced, never refused
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "provider yonder (Slotted) has no instance __dict__: its turns are not traced"
    ]
