"""The tool loop (vaelii_llm.agent) on the stub, with the real tools over the sample KB."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import msgspec
import pytest

from vaelii_llm import agent
from vaelii_llm import errors
from vaelii_llm import kb
from vaelii_llm import tools
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import Usage
from vaelii_llm.providers import stub

QUERY = {"tool": "kb_query", "input": {"goal": "(afraidOf MissMuffet ?who)"}}


@pytest.fixture(scope="module")
def toolset() -> tools.Toolset:
    return tools.Toolset(kb.sample())


async def test_a_tool_turn_then_an_answer(toolset: tools.Toolset) -> None:
    model = stub.provider(script=[QUERY, "She fears Muffet."])
    result = await agent.run(model, toolset, "Who is Miss Muffet afraid of?")
    assert (result.answer, result.stop_reason, result.stopped, result.turns) == (
        "She fears Muffet.",
        "end_turn",
        "answered",
        2,
    )
    [call] = result.tool_calls
    assert (call.name, call.ok) == ("kb_query", True)
    assert "Muffet" in call.result
    sent = model.requests()
    assert sent[0].system == agent.SYSTEM
    assert [t.name for t in sent[0].tools] == [t.name for t in toolset.schemas()]
    second = sent[1].messages
    assert [m.role for m in second] == ["user", "assistant", "user"]
    [back] = second[2].content
    assert isinstance(back, ToolResultBlock)
    assert (back.tool_use_id, back.content, back.is_error) == (call.id, call.result, False)
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]


async def test_assistant_content_goes_back_as_its_blocks_raw_included(
    toolset: tools.Toolset,
) -> None:
    thinking = ThinkingBlock(
        thinking="look it up",
        signature="sig",
        raw={"type": "thinking", "thinking": "look it up", "signature": "sig"},
    )
    use = ToolUseBlock(
        id="tu_1",
        name="kb_types_of",
        input={"term": "Muffet"},
        raw={
            "type": "tool_use",
            "id": "tu_1",
            "name": "kb_types_of",
            "input": {"term": "Muffet"},
            "vendor": 1,
        },
    )
    first = Response(content=[thinking, use], stop_reason="tool_use")
    model = stub.provider(script=[first, "A spider."])
    await agent.run(model, toolset, "What is Muffet?")
    echoed = model.requests()[1].messages[1]
    assert echoed.role == "assistant"
    assert echoed.content == [thinking, use]
    assert [b.raw for b in echoed.content if not isinstance(b, str)] == [thinking.raw, use.raw]


async def test_a_tool_refusal_goes_back_marked_as_an_error(toolset: tools.Toolset) -> None:
    model = stub.provider(
        script=[{"tool": "kb_assert", "input": {"sentence": "(isa Me X)"}}, "I may not write."]
    )
    result = await agent.run(model, toolset, "Assert something")
    [call] = result.tool_calls
    assert not call.ok
    assert call.result.startswith("unknown-tool")
    [back] = model.requests()[1].messages[2].content
    assert isinstance(back, ToolResultBlock)
    assert back.is_error
    assert agent.summarize(call).startswith("refused: unknown-tool")


async def test_a_refusal_stops_the_loop(toolset: tools.Toolset) -> None:
    model = stub.provider(script=[QUERY, {"refusal": "I cannot"}, "never asked"])
    result = await agent.run(model, toolset, "q")
    assert (result.stopped, result.stop_reason, result.answer, result.turns) == (
        "refusal",
        "refusal",
        "I cannot",
        2,
    )
    assert len(model.requests()) == 2


async def test_a_partial_tool_call_is_never_run(toolset: tools.Toolset) -> None:
    cut = Response(
        content=[
            TextBlock(text="Let me"),
            ToolUseBlock(id="t", name="kb_query", input={"goal": "(afr"}, partial=True),
        ],
        stop_reason="max_tokens",
    )
    model = stub.provider(script=[cut])
    result = await agent.run(model, toolset, "q")
    assert (result.stopped, result.tool_calls, result.answer) == ("max_tokens", [], "Let me")


async def test_a_partial_call_under_tool_use_gets_an_error_result_not_a_run(
    toolset: tools.Toolset,
) -> None:
    odd = Response(
        content=[ToolUseBlock(id="t", name="kb_query", input={}, partial=True)],
        stop_reason="tool_use",
    )
    model = stub.provider(script=[odd, "done"])
    result = await agent.run(model, toolset, "q")
    assert result.tool_calls == []
    [back] = model.requests()[1].messages[2].content
    assert isinstance(back, ToolResultBlock)
    assert back.is_error
    assert back.tool_use_id == "t"


async def test_the_turn_limit_stops_a_model_that_keeps_asking(toolset: tools.Toolset) -> None:
    model = stub.provider(default=QUERY)
    result = await agent.run(model, toolset, "q", max_turns=3)
    assert (result.stopped, result.stop_reason, result.turns) == ("max_turns", "tool_use", 3)
    assert len(result.tool_calls) == 2  # the third turn's call had no turn left to answer
    assert len(model.requests()) == 3


async def test_pause_turn_sends_the_content_back_and_goes_on(toolset: tools.Toolset) -> None:
    paused = Response(content=[TextBlock(text="searching")], stop_reason="pause_turn")
    model = stub.provider(script=[paused, "found it"])
    result = await agent.run(model, toolset, "q")
    assert (result.answer, result.turns) == ("found it", 2)
    assert [m.role for m in model.requests()[1].messages] == ["user", "assistant"]


async def test_usage_is_summed_over_the_turns(toolset: tools.Toolset) -> None:
    one = Response(
        content=[ToolUseBlock(id="a", name="kb_sentex_count", input={})],
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=3),
    )
    two = Response(
        content=[TextBlock(text="many")],
        stop_reason="end_turn",
        usage=Usage(input_tokens=20, output_tokens=4, eval_duration=7),
    )
    result = await agent.run(stub.provider(script=[one, two]), toolset, "q")
    assert result.usage == Usage(input_tokens=30, output_tokens=7, eval_duration=7)
    assert result.summary()["usage"] == {"input_tokens": 30, "output_tokens": 7, "eval_duration": 7}


async def test_events_come_in_order_with_words_as_deltas(toolset: tools.Toolset) -> None:
    model = stub.provider(script=[QUERY, "She fears three spiders."])
    seen: list[Any] = []
    async with aclosing(agent.events(model, toolset, "q")) as items:
        async for item in items:
            seen.append(item)
    kinds = [type(item).__name__ for item in seen]
    pieces = [item for item in seen if isinstance(item, agent.ToolInputArrived)]
    assert kinds[: len(pieces) + 2] == [
        *["ToolInputArrived"] * len(pieces),
        "ToolCallStarted",
        "ToolCallFinished",
    ]
    started = seen[len(pieces)]
    assert isinstance(started, agent.ToolCallStarted)
    assert {(p.turn, p.id, p.name) for p in pieces} == {(1, started.id, started.name)}
    assert json.loads("".join(p.partial_json for p in pieces)) == started.input
    assert kinds[-1] == "AgentResult"
    words = [item.text for item in seen if isinstance(item, agent.TextArrived)]
    assert words == ["She ", "fears ", "three ", "spiders."]
    finished = seen[len(pieces) + 1]
    assert isinstance(finished, agent.ToolCallFinished)
    assert finished.summary.startswith("ok: ")
    assert len(finished.summary) <= agent.SUMMARY_CHARS + 4


async def test_without_deltas_text_arrives_a_block_at_a_time(toolset: tools.Toolset) -> None:
    seen: list[agent.Event] = []
    await agent.run(stub.provider(script=["Two words."]), toolset, "q", on_event=seen.append)
    assert seen == [agent.TextArrived(turn=1, text="Two words.")]


async def test_a_model_error_propagates_unchanged(toolset: tools.Toolset) -> None:
    model = stub.provider(script=[QUERY, {"raise": "llm-timeout"}])
    with pytest.raises(errors.LLMTimeout):
        await agent.run(model, toolset, "q")


async def test_a_whole_request_is_sent_as_given(toolset: tools.Toolset) -> None:
    model = stub.provider(script=["ok"])
    first = Request(messages=[Message(role="user", content="q")], max_tokens=7, timeout_ms=900)
    await agent.run(model, toolset, first)
    [sent] = model.requests()
    assert (sent.tools, sent.system, sent.max_tokens, sent.timeout_ms) == ([], None, 7, 900)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
async def test_max_turns_must_be_a_positive_whole_number(toolset: tools.Toolset, bad: Any) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        await agent.run(stub.provider(), toolset, "q", max_turns=bad)


async def test_tool_use_naming_no_tool_ends_the_loop_rather_than_send_nothing_back(
    toolset: tools.Toolset,
) -> None:
    odd = Response(content=[TextBlock(text="hmm")], stop_reason="tool_use")
    model = stub.provider(script=[odd, "never asked"])
    result = await agent.run(model, toolset, "q")
    assert (result.stopped, result.answer, result.turns) == ("answered", "hmm", 1)
    assert len(model.requests()) == 1


class Counting:
    """A tool source that counts the calls that reach it."""

    def __init__(self, inner: tools.Toolset) -> None:
        self.inner = inner
        self.name = inner.name
        self.ran = 0

    def schemas(self) -> Any:
        return self.inner.schemas()

    async def call(self, name: str, input: Any = None) -> Any:
        self.ran += 1
        return await self.inner.call(name, input)


def asking(calls: int, **usage: int) -> Response:
    uses = [ToolUseBlock(id=f"t{i}", name="kb_sentex_count", input={}) for i in range(calls)]
    return Response(content=list(uses), stop_reason="tool_use", usage=Usage(**usage))


async def test_a_turn_asking_50_calls_runs_10_under_a_per_turn_limit(
    toolset: tools.Toolset,
) -> None:
    counting = Counting(toolset)
    model = stub.provider(script=[asking(50), "never asked"])
    result = await agent.run(model, counting, "q", max_tool_calls_per_turn=10)
    assert (result.stopped, result.turns, counting.ran) == ("max_tool_calls_per_turn", 1, 10)
    assert [c.id for c in result.tool_calls] == [f"t{i}" for i in range(10)]
    back = result.messages[-1].content
    assert isinstance(back, list)
    assert len(back) == 50  # every call answered: the ten run, the rest refused
    refused = [b for b in back if isinstance(b, ToolResultBlock) and b.is_error]
    assert [b.tool_use_id for b in refused] == [f"t{i}" for i in range(10, 50)]
    assert len(model.requests()) == 1


async def test_the_run_limit_on_tool_calls_counts_every_turn(toolset: tools.Toolset) -> None:
    counting = Counting(toolset)
    model = stub.provider(script=[asking(3), asking(3), "never asked"])
    result = await agent.run(model, counting, "q", max_tool_calls=4)
    assert (result.stopped, result.turns, counting.ran) == ("max_tool_calls", 2, 4)


@pytest.mark.parametrize(
    ("limit", "stopped"),
    [
        ({"max_input_tokens": 25}, "max_input_tokens"),
        ({"max_output_tokens": 5}, "max_output_tokens"),
    ],
)
async def test_a_token_budget_stops_the_run_between_turns(
    toolset: tools.Toolset, limit: dict[str, int], stopped: str
) -> None:
    counting = Counting(toolset)
    turn = asking(1, input_tokens=15, output_tokens=3)
    model = stub.provider(script=[turn, turn, turn, "never asked"])
    result = await agent.run(model, counting, "q", **limit)  # type: ignore[arg-type]
    assert (result.stopped, result.turns, counting.ran) == (stopped, 2, 1)
    assert result.usage == Usage(input_tokens=30, output_tokens=6)
    assert len(model.requests()) == 2


@pytest.mark.parametrize("name", ["max_input_tokens", "max_tool_calls_per_turn"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
async def test_a_budget_that_is_no_whole_number_is_refused(
    toolset: tools.Toolset, name: str, value: Any
) -> None:
    with pytest.raises(ValueError, match=name):
        await agent.run(stub.provider(script=["x"]), toolset, "q", **{name: value})


# -- #48 item 5: a far end that ignored the tools is said once ------------------------


def answering(text: str, **usage: int) -> Response:
    return Response(content=[TextBlock(text=text)], stop_reason="end_turn", usage=Usage(**usage))


async def collected(model: Any, toolset: tools.Toolset) -> list[Any]:
    async with aclosing(agent.events(model, toolset, "Who is afraid of spiders?")) as items:
        return [item async for item in items]


async def test_input_tokens_that_could_not_hold_the_tools_are_said_once(
    toolset: tools.Toolset,
) -> None:
    """llama-server with SmolLM2's own template read 74 input tokens of a
    request offering every KB tool: the model answered without them."""
    model = stub.provider(
        script=[asking(1, input_tokens=74), answering("Nobody.", input_tokens=80)]
    )
    seen = await collected(model, toolset)
    ignored = [item for item in seen if isinstance(item, agent.ToolsIgnored)]
    assert len(ignored) == 1  # once, though both turns read too few
    floor = len(msgspec.json.encode(toolset.schemas())) // agent.BYTES_PER_TOKEN_CEILING
    assert ignored[0] == agent.ToolsIgnored(
        turn=1,
        input_tokens=74,
        tools_floor=floor,
        message=(
            f"the far end ignored the {len(toolset.schemas())} tool(s) it was offered: it read "
            f"74 input tokens, where the tools alone take at least {floor}, so the answer does "
            f"not come from them; {agent.TOOLS_FIX}"
        ),
    )
    assert ignored[0].type == "tools_ignored"
    assert isinstance(seen[-1], agent.AgentResult)
    assert seen[-1].answer == "Nobody."


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 9000},  # the tools were read
        {},  # a far end that counts nothing
        {"input_tokens": 74, "prompt_eval_count": 74},  # Ollama's own count is not read
    ],
)
async def test_no_word_when_the_tools_were_read_or_nothing_is_known(
    toolset: tools.Toolset, usage: dict[str, int]
) -> None:
    seen = await collected(stub.provider(script=[answering("Muffet.", **usage)]), toolset)
    assert not [item for item in seen if isinstance(item, agent.ToolsIgnored)]
