"""Prompt caching: the neutral :class:`Cache` written as the Messages API's
``cache_control``, refused before sending where the API would refuse it,
honoured by the loopback Messages API as the API honours it; the agent loop's
default and its switch; the backends that cache on their own send nothing."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestServer

from tests.support.anthropic_fake import FakeMessagesAPI
from tests.support.anthropic_fake import generate
from tests.support.anthropic_fake import prompt_units
from tests.support.anthropic_fake import tokens
from vaelii_llm import agent
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._protocol import Cache
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.errors import LLMEncode
from vaelii_llm.providers import anthropic
from vaelii_llm.providers.anthropic._encode import build_body
from vaelii_llm.providers.ollama._chat import chat_body as ollama_body
from vaelii_llm.providers.openai._assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._assemble import response_of
from vaelii_llm.providers.openai._chat import chat_body as openai_body

EPHEMERAL = {"type": "ephemeral", "ttl": "5m"}
TOOLS = [
    ToolSchema(name="kb_a", description="A.", input_schema={"type": "object"}),
    ToolSchema(name="kb_b", description="B.", input_schema={"type": "object"}),
]


pytestmark = pytest.mark.usefixtures("_no_ambient_credential")


@pytest.fixture(autouse=True)
def _no_prompt_cache_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VAELII_PROMPT_CACHE", raising=False)


def conversation() -> list[Message]:
    call = ToolUseBlock(id="t1", name="kb_a", input={"x": 1})
    return [
        Message(role="user", content="Who is afraid of whom?"),
        Message(role="assistant", content=[ThinkingBlock(thinking="hm", signature="s"), call]),
        Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content="(a b)")]),
    ]


def body(cache: Cache | None, **fields: Any) -> dict[str, Any]:
    fields.setdefault("messages", conversation())
    fields.setdefault("tools", TOOLS)
    fields.setdefault("system", "Answer from the KB.")
    return build_body(Request(cache=cache, **fields))


def marks(built: dict[str, Any]) -> list[str]:
    """Where ``cache_control`` is, by name, in the API's reading order."""
    found = [f"tool {t['name']}" for t in built.get("tools", []) if "cache_control" in t]
    system = built.get("system")
    if isinstance(system, list):
        found += [f"system {n}" for n, b in enumerate(system) if "cache_control" in b]
    for m, message in enumerate(built["messages"]):
        content = message["content"]
        if isinstance(content, list):
            found += [
                f"message {m} block {n}" for n, b in enumerate(content) if "cache_control" in b
            ]
    if "cache_control" in built:
        found.append("auto")
    return found


# -- the body -------------------------------------------------------------------------


def test_no_cache_sends_no_cache_control() -> None:
    built = body(None)
    assert marks(built) == []
    assert built["system"] == "Answer from the KB."  # a string stays a string


def test_automatic_caching_is_the_top_level_cache_control_with_its_ttl() -> None:
    built = body(Cache(auto=True, ttl="1h"))
    assert built["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert marks(built) == ["auto"]


def test_the_tools_and_the_system_prompt_are_marked_at_their_ends() -> None:
    built = body(Cache(tools=True, system=True))
    assert marks(built) == ["tool kb_b", "system 0"]
    assert built["tools"][-1]["cache_control"] == EPHEMERAL
    assert built["system"] == [
        {"type": "text", "text": "Answer from the KB.", "cache_control": EPHEMERAL}
    ]
    assert built["tools"][0] == msgspec.to_builtins(TOOLS[0])


def test_a_system_prompt_of_blocks_goes_as_blocks_its_last_marked_and_raw_kept() -> None:
    raw = {"type": "text", "text": "Be brief."}
    system = [TextBlock(text="Answer from the KB."), TextBlock(text="Be brief.", raw=raw)]
    assert body(None, system=system)["system"] == [
        {"type": "text", "text": "Answer from the KB."},
        {"type": "text", "text": "Be brief."},
    ]
    built = body(Cache(system=True), system=system)
    assert built["system"][-1] == {**raw, "cache_control": EPHEMERAL}
    assert raw == {"type": "text", "text": "Be brief."}  # the block's raw is never changed
    assert marks(built) == ["system 1"]


def test_a_message_block_is_marked_by_its_position_negative_from_the_end() -> None:
    raw = {"type": "tool_result", "tool_use_id": "t1", "content": "(a b)"}
    messages = conversation()
    messages[2] = Message(
        role="user", content=[ToolResultBlock(tool_use_id="t1", content="(a b)", raw=raw)]
    )
    built = body(Cache(blocks=((-1, -1), (0, 0), (1, 1))), messages=messages)
    assert marks(built) == ["message 0 block 0", "message 1 block 1", "message 2 block 0"]
    # a string content became one text block to carry the breakpoint
    assert built["messages"][0]["content"] == [
        {"type": "text", "text": "Who is afraid of whom?", "cache_control": EPHEMERAL}
    ]
    assert built["messages"][2]["content"][0] == {**raw, "cache_control": EPHEMERAL}
    assert "cache_control" not in raw


def test_a_breakpoint_on_a_part_that_is_absent_is_none() -> None:
    built = body(Cache(tools=True, system=True), tools=[], system=None)
    assert marks(built) == []
    assert "system" not in built


def test_four_breakpoints_are_taken_and_the_same_position_twice_is_one() -> None:
    built = body(Cache(auto=True, tools=True, system=True, blocks=((0, 0), (-3, -1))))
    assert marks(built) == ["tool kb_b", "system 0", "message 0 block 0", "auto"]


@pytest.mark.parametrize(
    ("cache", "why"),
    [
        (Cache(auto=True, tools=True, system=True, blocks=((0, 0), (2, 0))), "5 cache breakpoints"),
        (Cache(auto=True, tools=True, blocks=((0, 0), (1, 1), (-1, -1))), "5 cache breakpoints"),
        (Cache(blocks=((3, 0),)), "message 3 of 3"),
        (Cache(blocks=((-4, 0),)), "message -4 of 3"),
        (Cache(blocks=((1, 2),)), "block 2 of message 1, which has 2"),
        (Cache(blocks=((1, 0),)), "a thinking block, which takes none"),
    ],
)
def test_what_the_api_would_refuse_is_refused_typed(cache: Cache, why: str) -> None:
    with pytest.raises(LLMEncode, match=why) as info:
        body(cache)
    assert info.value.type == "llm-encode"
    assert info.value.block_type == "cache_control"


def test_an_empty_text_block_takes_no_breakpoint() -> None:
    messages = [Message(role="user", content=[TextBlock(text="")])]
    with pytest.raises(LLMEncode, match="an empty text block"):
        body(Cache(blocks=((0, 0),)), messages=messages)


def test_ollama_and_openai_send_nothing_for_a_cache() -> None:
    blocks = [TextBlock(text="Answer from the KB."), TextBlock(text="Be brief.")]
    joined = "Answer from the KB.\n\nBe brief."
    cached = Cache(auto=True, tools=True, system=True, blocks=((0, 0),))
    plain = Request(messages=conversation()[:1], tools=TOOLS, system=joined)
    marked = Request(messages=conversation()[:1], tools=TOOLS, system=blocks, cache=cached)
    for build in (
        lambda r: ollama_body(r, model="m", num_ctx=8, keep_alive="1m", stream=True),
        lambda r: openai_body(r, model="m", max_tokens_field="max_tokens", stream=True),
    ):
        assert build(marked) == build(plain)


def test_openai_reports_what_its_prefix_cache_read() -> None:
    completion = {
        "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 1920},
        },
    }
    usage = response_of(WHOLE_DECODER.decode(json.dumps(completion))).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (2006, 1920)


# -- the loopback Messages API --------------------------------------------------------


@contextlib.asynccontextmanager
async def messages_api(api: FakeMessagesAPI) -> AsyncIterator[anthropic.AnthropicProvider]:
    server = TestServer(api.app(), host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    try:
        async with anthropic.provider(credential="sk-test", base_url=url) as model:
            yield model
    finally:
        await server.close()


def text_turn(seed: int) -> Any:
    return generate(random.Random(seed), kinds=["text"], stop_reason="end_turn")


async def test_a_fifth_breakpoint_is_refused_before_any_byte_is_sent() -> None:
    api = FakeMessagesAPI(transcript=text_turn(1))
    five = Request(
        messages=conversation(),
        tools=TOOLS,
        system="S",
        cache=Cache(auto=True, tools=True, system=True, blocks=((0, 0), (2, 0))),
    )
    async with messages_api(api) as model:
        with pytest.raises(LLMEncode, match="at most 4"):
            await model.complete(five)
        with pytest.raises(LLMEncode, match="at most 4"):
            async for _ in model.stream(five, deltas=True):
                pass
        with pytest.raises(LLMEncode, match="at most 4"):
            await model.count_tokens(five)
        await model.complete(msgspec.structs.replace(five, cache=Cache(auto=True)))  # it answers
    assert len(api.seen) == 1  # the refused ones sent nothing
    assert api.counted == []


async def test_the_fake_writes_then_reads_a_prefix_as_the_api_does() -> None:
    api = FakeMessagesAPI(transcript=text_turn(2), caching=True)
    first = Request(
        messages=conversation()[:1], tools=TOOLS, system="S", cache=Cache(tools=True, system=True)
    )
    units, _ = prompt_units(build_body(first))
    prefix = sum(tokens(u) for u in units[:3])  # two tools and the system prompt
    async with messages_api(api) as model:
        wrote = (await model.complete(first)).usage
        read = (await model.complete(first)).usage
        longer = msgspec.structs.replace(first, messages=conversation())
        read_longer = (await model.complete(longer)).usage
        other_tool = msgspec.structs.replace(first, tools=[TOOLS[1], TOOLS[0]])
        missed = (await model.complete(other_tool)).usage
        uncached = (await model.complete(msgspec.structs.replace(first, cache=None))).usage
    assert (wrote.cache_creation_input_tokens, wrote.cache_read_input_tokens) == (prefix, 0)
    assert (read.cache_creation_input_tokens, read.cache_read_input_tokens) == (0, prefix)
    assert read.input_tokens == wrote.input_tokens  # the rest is charged as before
    assert read_longer.cache_read_input_tokens == prefix
    assert missed.cache_read_input_tokens == 0  # other bytes before the breakpoint
    assert (uncached.cache_creation_input_tokens, uncached.cache_read_input_tokens) == (0, 0)


# -- the agent loop -------------------------------------------------------------------


def two_turns() -> list[Any]:
    call = generate(random.Random(5), kinds=["tool_use"], stop_reason="tool_use")
    return [call, text_turn(6)]


async def run_agent(api: FakeMessagesAPI, **kw: Any) -> agent.AgentResult:
    api.script = two_turns()
    async with messages_api(api) as model:
        return await agent.run(model, tools.Toolset(kb.sample()), "Who is afraid?", **kw)


async def test_a_two_turn_agent_run_reads_its_prefix_from_the_cache_on_turn_two() -> None:
    api = FakeMessagesAPI(caching=True)
    result = await run_agent(api)
    assert result.turns == 2
    first, second = (seen.body for seen in api.seen)
    for sent in (first, second):
        assert sent["tools"][-1]["cache_control"] == EPHEMERAL
        assert sent["system"][-1]["cache_control"] == EPHEMERAL
        assert [t for t in sent["tools"][:-1] if "cache_control" in t] == []
    units, marked = prompt_units(first)
    prefix = sum(tokens(u) for u in units[: marked[-1] + 1])
    assert result.usage.cache_creation_input_tokens == prefix  # written on turn one only
    assert result.response.usage.cache_read_input_tokens == prefix  # read on turn two
    assert result.usage.cache_read_input_tokens == prefix


@pytest.mark.parametrize("switch", ["argument", "environment"])
async def test_with_the_switch_off_the_loop_never_reads_from_the_cache(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = FakeMessagesAPI(caching=True)
    if switch == "environment":
        monkeypatch.setenv("VAELII_PROMPT_CACHE", "0")
        result = await run_agent(api)
    else:
        result = await run_agent(api, cache=False)
    assert result.turns == 2
    assert all(marks(seen.body) == [] for seen in api.seen)
    assert result.usage.cache_read_input_tokens == 0
    assert result.usage.cache_creation_input_tokens == 0


async def test_a_first_request_with_its_own_cache_keeps_it() -> None:
    api = FakeMessagesAPI(caching=True)
    own = agent.request("Who is afraid?", tools.Toolset(kb.sample()), cache=Cache(auto=True))
    result = await run_agent_with(api, own)
    assert result.turns == 2
    assert [marks(seen.body) for seen in api.seen] == [["auto"], ["auto"]]
    assert result.response.usage.cache_read_input_tokens  # the conversation so far, read


async def run_agent_with(api: FakeMessagesAPI, first: Request) -> agent.AgentResult:
    api.script = two_turns()
    async with messages_api(api) as model:
        return await agent.run(model, tools.Toolset(kb.sample()), first)


# -- vaelii-llm ask -------------------------------------------------------------------


@pytest.mark.parametrize("flag", [None, "--no-cache"])
async def test_ask_caches_its_prefix_unless_told_not_to(
    flag: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.cli_runs import run_cli
    from tests.support.loopback import serve

    api = FakeMessagesAPI(caching=True, script=two_turns())
    async with serve(api.app()) as url:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        argv = ["ask", "Who is afraid?", "--provider", "anthropic", "--json"]
        code, out, _ = await run_cli(capsys, *argv, *([flag] if flag else []))
    assert code == 0
    usage = json.loads(out)["usage"]
    assert len(api.seen) == 2
    if flag is None:
        where = [[mark.split()[0] for mark in marks(seen.body)] for seen in api.seen]
        assert where == [["tool", "system"]] * 2  # the last tool and the system prompt
        assert usage["cache_read_input_tokens"] > 0
    else:
        assert all(marks(seen.body) == [] for seen in api.seen)
        assert usage["cache_read_input_tokens"] == 0
