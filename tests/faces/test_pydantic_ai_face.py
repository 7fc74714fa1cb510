"""The pydantic-ai face, driven by pydantic-ai's own ``Agent``.

On the scripted stub: the tool's return is the engine's real answer, a refusal
goes back to the model as an ``is_error`` tool result without spending the run's
retries, thinking travels back with its ``raw`` unedited, usage, finish reasons,
the model name, refusals and errors map to pydantic-ai's. On a loopback Messages
API and a loopback Ollama: ``run`` and ``run_stream`` give the answer through a
real tool round trip on the wire.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai import exceptions as pai_errors
from pydantic_ai import messages as pai

from tests.support import fake_ollama
from tests.support import fake_openai
from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import Transcript
from tests.support.loopback import serve
from tests.support.messages_transcripts import message
from tests.support.messages_transcripts import transcript
from vaelii_llm import DocumentBlock
from vaelii_llm import ImageBlock
from vaelii_llm import Message
from vaelii_llm import OpaqueBlock
from vaelii_llm import RedactedThinkingBlock
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import ThinkingBlock
from vaelii_llm import ToolResultBlock
from vaelii_llm import ToolUseBlock
from vaelii_llm import Usage
from vaelii_llm import errors as verrors
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm.integrations.pydantic_ai import KBToolset
from vaelii_llm.integrations.pydantic_ai import VaeliiModel
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import stub

ROOT = Path(__file__).resolve().parents[2]
GOAL = "(afraidOf MissMuffet ?who)"
QUERY = {"tool": "kb_query", "input": {"goal": GOAL}}
ANSWER = "Miss Muffet is afraid of Muffet, ItsyBitsy and Fang."


def tool_results(request: Request) -> list[ToolResultBlock]:
    return [
        block
        for message in request.messages
        if isinstance(message.content, list)
        for block in message.content
        if isinstance(block, ToolResultBlock)
    ]


async def run_agent(agent: Agent[None, str], prompt: str, streamed: bool) -> str:
    """The run's output, through ``run_stream`` or ``run``."""
    if streamed:
        async with agent.run_stream(prompt) as run:
            return await run.get_output()
    return (await agent.run(prompt)).output


async def engine_answer() -> str:
    result = await tools.Toolset(kb.sample()).call("kb_query", {"goal": GOAL})
    assert result.ok
    return result.text


# -- on the stub ---------------------------------------------------------------------


async def test_a_tool_call_returns_the_engines_answer_and_the_prose_is_the_output() -> None:
    provider = stub.provider(script=[QUERY, ANSWER])
    agent = Agent(
        VaeliiModel(provider),
        toolsets=[KBToolset(kb.sample())],
        system_prompt="Answer from the KB.",
    )
    result = await agent.run("Who is Miss Muffet afraid of?")
    assert result.output == ANSWER
    returns = [
        part
        for message in result.all_messages()
        for part in getattr(message, "parts", [])
        if isinstance(part, pai.ToolReturnPart)
    ]
    assert [r.content for r in returns] == [await engine_answer()]
    first, second = provider.requests()
    assert first.system == "Answer from the KB."
    assert first.messages == [
        Message(role="user", content=[TextBlock(text="Who is Miss Muffet afraid of?")])
    ]
    assert [t.name for t in first.tools] == [s.name for s in tools.Toolset(kb.sample()).schemas()]
    assert first.tools[0].input_schema == tools.Toolset(kb.sample()).schemas()[0].input_schema
    assert second.messages[1] == Message(
        role="assistant",
        content=[ToolUseBlock(id="stub_tool_1", name="kb_query", input={"goal": GOAL})],
    )
    assert tool_results(second) == [
        ToolResultBlock(tool_use_id="stub_tool_1", content=await engine_answer(), is_error=False)
    ]


async def test_a_refusal_goes_back_as_an_error_result_and_spends_no_retry() -> None:
    bad_shape = {"tool": "kb_query", "input": {"goal": GOAL, "bogus": 1}}
    write = {"tool": "kb_assert", "input": {"sentence": "(isa Me Spider)"}}
    provider = stub.provider(script=[bad_shape, bad_shape, QUERY, ANSWER])
    # max_retries=0: a refusal that spent a retry would end the run with an error.
    agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample(), max_retries=0)])
    result = await agent.run("Who is Miss Muffet afraid of?")
    assert result.output == ANSWER
    seen = provider.requests()
    refused = tool_results(seen[1])[-1]
    assert refused.is_error
    assert refused.content.startswith("unexpected-argument: ")
    assert refused.tool_use_id == "stub_tool_1"
    assert tool_results(seen[2])[-1].is_error
    answered = tool_results(seen[3])[-1]
    assert not answered.is_error
    assert answered.content == await engine_answer()

    # A write's name is not a tool of this toolset: pydantic-ai answers the model itself.
    provider = stub.provider(script=[write, ANSWER])
    agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())])
    assert (await agent.run("Add me.")).output == ANSWER
    unknown = tool_results(provider.requests()[1])[-1]
    assert unknown.is_error
    assert "kb_assert" in unknown.content


async def test_the_toolset_is_the_read_surface() -> None:
    toolset = KBToolset(tools.Toolset(kb.sample()), exclude=["kb_why_not"])
    listed = await toolset.get_tools(None)  # type: ignore[arg-type]  # the context is unused
    expected = tools.Toolset(kb.sample()).schemas(exclude=["kb_why_not"])
    assert list(listed) == [s.name for s in expected]
    for schema in expected:
        tool_def = listed[schema.name].tool_def
        assert tool_def.parameters_json_schema == schema.input_schema
        assert tool_def.description == schema.description
    assert not {tools.tool_name(op) for op in tools.WRITE_OPS} & set(listed)


async def test_thinking_travels_back_with_its_raw_block_and_signature() -> None:
    raw = {"type": "thinking", "thinking": "Look it up.", "signature": "c2lnbmF0dXJl", "x": [1]}
    thinking = ThinkingBlock(thinking="Look it up.", signature="c2lnbmF0dXJl", raw=raw)
    redacted = RedactedThinkingBlock(
        data="ZW5jcnlwdGVk", raw={"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}
    )
    opaque = OpaqueBlock(type="mystery_block", raw={"type": "mystery_block", "payload": {"n": 1}})
    call = ToolUseBlock(id="toolu_1", name="kb_query", input={"goal": GOAL})
    turn = Response(content=[thinking, redacted, opaque, call], stop_reason="tool_use")
    for streamed in (False, True):
        provider = stub.provider(script=[turn, ANSWER])
        agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())])
        assert await run_agent(agent, "Who?", streamed) == ANSWER
        echoed = provider.requests()[1].messages[1]
        assert echoed == Message(role="assistant", content=turn.content), streamed


@pytest.mark.parametrize("streamed", [False, True])
async def test_usage_finish_reason_and_model_name(streamed: bool) -> None:
    usage = Usage(
        input_tokens=11,
        output_tokens=7,
        cache_read_input_tokens=3,
        cache_creation_input_tokens=2,
        eval_count=7,
        total_duration=1234,
    )
    turn = Response(
        content=[TextBlock(text=ANSWER)],
        stop_reason="end_turn",
        vendor_stop_reason="stop",
        model="served-model",
        id="msg_1",
        usage=usage,
    )
    model = VaeliiModel(stub.provider(script=[turn]))
    agent = Agent(model)
    if streamed:
        async with agent.run_stream("Who?") as run:
            assert await run.get_output() == ANSWER
            history = run.all_messages()
    else:
        history = (await agent.run("Who?")).all_messages()
    response = history[-1]
    assert isinstance(response, pai.ModelResponse)
    assert response.model_name == "served-model"
    assert response.finish_reason == "stop"
    assert response.provider_response_id == "msg_1"
    assert response.provider_details is not None
    assert response.provider_details["finish_reason"] == "stop"
    assert response.usage.input_tokens == 11
    assert response.usage.output_tokens == 7
    assert response.usage.cache_read_tokens == 3
    assert response.usage.cache_write_tokens == 2
    assert response.usage.details == {"eval_count": 7, "total_duration": 1234}
    assert model.model_name == "stub"


async def test_settings_reach_the_request_and_an_ignored_guarantee_warns() -> None:
    provider = stub.provider(script=[ANSWER, ANSWER])
    agent = Agent(VaeliiModel(provider, model_name="llama3.2"))
    settings = {"max_tokens": 321, "temperature": 0.5, "stop_sequences": ["STOP"], "timeout": 2.5}
    await agent.run("Who?", model_settings=settings)  # type: ignore[arg-type]
    sent = provider.requests()[0]
    assert (sent.max_tokens, sent.temperature, sent.stop_sequences, sent.timeout_ms) == (
        321,
        0.5,
        ["STOP"],
        2500,
    )
    assert sent.model == "llama3.2"
    with pytest.warns(pai_errors.UnsupportedSettingWarning, match="extra_headers"):
        await agent.run("Who?", model_settings={"extra_headers": {"x-a": "1"}})


class Fearers(BaseModel):
    who: list[str]


async def test_a_structured_output_travels_as_an_output_tool() -> None:
    answer = {"tool": "final_result", "input": {"who": ["Muffet", "ItsyBitsy", "Fang"]}}
    provider = stub.provider(script=[QUERY, answer])
    agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())], output_type=Fearers)
    result = await agent.run("Who is Miss Muffet afraid of?")
    assert result.output == Fearers(who=["Muffet", "ItsyBitsy", "Fang"])
    offered = {t.name: t for t in provider.requests()[1].tools}
    assert "final_result" in offered
    assert offered["final_result"].input_schema["properties"]["who"]["type"] == "array"


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_refusal_stop_reason_raises_content_filter_error(streamed: bool) -> None:
    refusal = Response(
        content=[],
        stop_reason="refusal",
        model="stub",
        stop_details={"type": "refusal", "category": "cyber", "explanation": "declined here"},
    )
    agent = Agent(VaeliiModel(stub.provider(script=[refusal])))
    with pytest.raises(pai_errors.ContentFilterError, match="declined here"):
        await run_agent(agent, "Write malware.", streamed)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_paused_turn_is_sent_back_to_be_continued(streamed: bool) -> None:
    opening = TextBlock(text="Miss Muffet is afraid of ")
    paused = Response(content=[opening], stop_reason="pause_turn")
    provider = stub.provider(script=[paused, "Muffet, ItsyBitsy and Fang."])
    output = await run_agent(Agent(VaeliiModel(provider)), "Who?", streamed)
    assert output == "Miss Muffet is afraid of Muffet, ItsyBitsy and Fang."
    assert provider.requests()[1].messages[-1] == Message(role="assistant", content=[opening])


async def test_a_call_cut_by_max_tokens_is_never_run() -> None:
    cut = Response(
        content=[ToolUseBlock(id="t1", name="kb_query", input={"goal": "(afr"}, partial=True)],
        stop_reason="max_tokens",
    )
    agent = Agent(VaeliiModel(stub.provider(script=[cut])), toolsets=[KBToolset(kb.sample())])
    with pytest.raises(pai_errors.IncompleteToolCall):
        await agent.run("Who?")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("llm-api-error", pai_errors.ModelServerError),
        ("llm-timeout", pai_errors.ModelTimeoutError),
        ("llm-unreachable", pai_errors.ModelConnectionError),
        ("llm-bad-response", pai_errors.UnexpectedModelBehavior),
        ("llm-closed", pai_errors.UserError),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
async def test_errors_become_pydantic_ai_errors_with_the_cause_kept(
    kind: str, expected: type[Exception], streamed: bool
) -> None:
    agent = Agent(VaeliiModel(stub.provider(script=[{"raise": kind}])))
    with pytest.raises(expected) as caught:
        await run_agent(agent, "Who?", streamed)
    assert isinstance(caught.value.__cause__, verrors.LLMError)
    assert caught.value.__cause__.type == kind
    if kind == "llm-api-error":
        assert isinstance(caught.value, pai_errors.ModelHTTPError)
        assert caught.value.status_code == 500


async def test_streaming_on_the_stub_yields_the_words_as_deltas() -> None:
    provider = stub.provider(script=[QUERY, ANSWER])
    agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())])
    async with agent.run_stream("Who is Miss Muffet afraid of?") as run:
        pieces = [piece async for piece in run.stream_text(delta=True, debounce_by=None)]
    assert "".join(pieces) == ANSWER
    assert len(pieces) > 1
    assert tool_results(provider.requests()[1])[-1].content == await engine_answer()


PNG = (ROOT / "examples" / "red_square.png").read_bytes()
PDF_BYTES = b"%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n"


async def test_images_and_documents_in_a_prompt_become_blocks() -> None:
    provider = stub.provider(script=["A red square."])
    agent = Agent(VaeliiModel(provider))
    prompt: list[pai.UserContent] = [
        "What is in these?",
        pai.BinaryContent(PNG, media_type="image/png"),
        pai.ImageUrl("https://example.test/cat.jpg"),
        pai.DocumentUrl("https://example.test/report.pdf"),
        pai.BinaryContent(PDF_BYTES, media_type="application/pdf"),
        pai.BinaryContent(b"a,b\n1,2\n", media_type="text/csv"),
    ]
    assert (await agent.run(prompt)).output == "A red square."
    (request,) = provider.requests()
    assert request.messages == [
        Message(
            role="user",
            content=[
                TextBlock(text="What is in these?"),
                ImageBlock(data=PNG, media_type="image/png"),
                ImageBlock(url="https://example.test/cat.jpg"),
                DocumentBlock(url="https://example.test/report.pdf"),
                DocumentBlock(data=PDF_BYTES, media_type="application/pdf"),
                DocumentBlock(text="a,b\n1,2\n"),
            ],
        )
    ]


@pytest.mark.parametrize(
    ("item", "named", "why"),
    [
        (pai.BinaryContent(b"RIFF....WAVE", media_type="audio/wav"), "(audio/wav)", "sends text"),
        (pai.VideoUrl("https://example.test/clip.mp4"), "VideoUrl", "sends text"),
        (pai.BinaryContent(PDF_BYTES, media_type="image/png"), "(image/png)", "not an image"),
        (pai.DocumentUrl("https://example.test/notes.docx"), "DocumentUrl", "is a PDF here"),
        (pai.BinaryContent(b"\xff\xfe", media_type="text/csv"), "(text/csv)", "not UTF-8"),
    ],
)
async def test_what_no_backend_takes_is_a_user_error_naming_it(
    item: pai.UserContent, named: str, why: str
) -> None:
    provider = stub.provider(script=["never"])
    with pytest.raises(pai_errors.UserError, match="VaeliiModel cannot send this") as info:
        await Agent(VaeliiModel(provider)).run(["Look:", item])
    assert named in str(info.value)
    assert why in str(info.value)
    assert provider.requests() == []  # nothing was sent


async def test_an_image_reaches_the_messages_api_as_an_image_block() -> None:
    fake = ScriptedMessagesAPI([messages_turn([{"type": "text", "text": "Red."}], "end_turn", "m")])
    async with (
        serve(fake.app()) as url,
        anthropic.provider(credential="sk-test", base_url=url) as provider,
    ):
        agent = Agent(VaeliiModel(provider))
        output = await agent.run(["Colour?", pai.BinaryContent(PNG, media_type="image/png")])
    assert output.output == "Red."
    (seen,) = fake.seen
    image = seen.body["messages"][0]["content"][1]
    assert image["type"] == "image"
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG


# -- on a loopback Messages API ----------------------------------------------------


def messages_turn(blocks: list[dict[str, Any]], stop_reason: str, msg_id: str) -> Transcript:
    """One Messages API turn, streamed as the API documents it and whole."""
    usage = {"input_tokens": 30, "output_tokens": 12}
    return transcript(message(blocks, stop_reason=stop_reason, id=msg_id, usage=usage))


THINKING = {"type": "thinking", "thinking": "The KB knows.", "signature": "U0lHTkFUVVJF"}
TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "kb_query", "input": {"goal": GOAL}}


class ScriptedMessagesAPI(FakeMessagesAPI):
    """The fake Messages API answering one turn per request, in order."""

    def __init__(self, turns: list[Transcript]) -> None:
        super().__init__()
        self.turns = turns

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.transcript = self.turns[min(len(self.seen), len(self.turns) - 1)]
        return await super().handle(request)


@pytest.fixture
async def messages_api() -> AsyncIterator[tuple[ScriptedMessagesAPI, str]]:
    fake = ScriptedMessagesAPI(
        [
            messages_turn([THINKING, TOOL_USE], "tool_use", "msg_1"),
            messages_turn([{"type": "text", "text": ANSWER}], "end_turn", "msg_2"),
        ]
    )
    async with serve(fake.app()) as url:
        yield fake, url


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agent_on_a_loopback_messages_api(
    messages_api: tuple[ScriptedMessagesAPI, str], streamed: bool
) -> None:
    fake, url = messages_api
    async with anthropic.provider(credential="sk-test", base_url=url) as provider:
        agent = Agent(
            VaeliiModel(provider),
            toolsets=[KBToolset(kb.sample())],
            system_prompt="Answer from the KB.",
        )
        output = await run_agent(agent, "Who is Miss Muffet afraid of?", streamed)
    assert output == ANSWER
    assert [s.body.get("stream", False) for s in fake.seen] == [streamed, streamed]
    second = fake.seen[1].body
    assert second["system"] == "Answer from the KB."
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == THINKING  # the thinking block, signature and all, unedited
    assert assistant["content"][1]["id"] == "toolu_01"
    result = second["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_01"
    assert not result.get("is_error", False)
    assert result["content"] == await engine_answer()


async def test_a_429_from_the_messages_api_is_a_rate_limit_http_error() -> None:
    fake = FakeMessagesAPI(status=429)
    async with (
        serve(fake.app()) as url,
        anthropic.provider(credential="sk-test", base_url=url) as provider,
    ):
        with pytest.raises(pai_errors.ModelRateLimitError) as caught:
            await Agent(VaeliiModel(provider)).run("Who?")
    assert isinstance(caught.value, pai_errors.ModelHTTPError)
    assert caught.value.status_code == 429
    assert isinstance(caught.value.__cause__, verrors.LLMApiError)
    assert "sk-test" not in str(caught.value)


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_error_inside_a_200_gets_the_status_of_its_type(streamed: bool) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    transcript = Transcript(
        [messages_turn([], "end_turn", "msg_0").events[0], ("error", overloaded)], overloaded
    )
    fake = FakeMessagesAPI(transcript=transcript)
    async with (
        serve(fake.app()) as url,
        anthropic.provider(credential="sk-test", base_url=url) as provider,
    ):
        agent = Agent(VaeliiModel(provider))
        with pytest.raises(pai_errors.ModelOverloadedError) as caught:
            await run_agent(agent, "Who?", streamed)
    assert isinstance(caught.value, pai_errors.ModelHTTPError)
    assert caught.value.status_code == 529
    assert caught.value.in_stream is streamed
    assert caught.value.provider_error_type == "overloaded_error"
    assert isinstance(caught.value.__cause__, verrors.LLMApiError)


# -- on a loopback Ollama ----------------------------------------------------------


def ollama_script(body: dict[str, Any]) -> fake_ollama.Transcript:
    """A tool call first; prose once the tool's result is in the conversation."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return [
            fake_ollama.chunk("Miss Muffet is afraid of"),
            fake_ollama.chunk(" Muffet, ItsyBitsy and Fang."),
            fake_ollama.final(model="llama3.2"),
        ]
    call = fake_ollama.tool_call("kb_query", {"goal": GOAL})
    return [
        fake_ollama.chunk("", tool_calls=[call], model="llama3.2"),
        fake_ollama.final(model="llama3.2"),
    ]


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agent_on_a_loopback_ollama(streamed: bool) -> None:
    fake = await fake_ollama.FakeOllama(script=ollama_script).start()
    try:
        async with ollama.provider(host=fake.url, model="llama3.2") as provider:
            agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())])
            output = await run_agent(agent, "Who is Miss Muffet afraid of?", streamed)
    finally:
        await fake.stop()
    assert output == ANSWER
    assert len(fake.bodies) == 2
    tool_message = [m for m in fake.bodies[1]["messages"] if m.get("role") == "tool"]
    assert [m["content"] for m in tool_message] == [await engine_answer()]


def openai_script(body: dict[str, Any]) -> fake_openai.Transcript:
    """A tool call first; prose once the tool's result is in the conversation."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        prose = ["Miss Muffet is afraid of", " Muffet, ItsyBitsy and Fang."]
        return fake_openai.transcript(fake_openai.Turn(text=prose))
    arguments = json.dumps({"goal": GOAL})
    call = fake_openai.Call("call_kb_1", "kb_query", [arguments[:9], arguments[9:]])
    return fake_openai.transcript(fake_openai.Turn(calls=[call], finish_reason="tool_calls"))


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agent_on_a_loopback_openai_compatible_server(streamed: bool) -> None:
    fake = await fake_openai.FakeOpenAI(script=openai_script).start()
    try:
        async with openai.provider(base_url=fake.base_url, model=fake_openai.MODEL) as provider:
            agent = Agent(VaeliiModel(provider), toolsets=[KBToolset(kb.sample())])
            output = await run_agent(agent, "Who is Miss Muffet afraid of?", streamed)
    finally:
        await fake.stop()
    assert output == ANSWER
    assert len(fake.bodies) == 2
    tool_message = [m for m in fake.bodies[1]["messages"] if m.get("role") == "tool"]
    assert [m["content"] for m in tool_message] == [await engine_answer()]
    assert [m["tool_call_id"] for m in tool_message] == ["call_kb_1"]
