"""The scripted stub: shorthands, default, expand, read-back, stream equals complete."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any
from typing import get_args

import pytest

from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolInputDelta
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm.providers import stub

if TYPE_CHECKING:
    from tests.conftest import Collect


def ask(text: str) -> Request:
    return Request(messages=[Message(role="user", content=text)])


async def test_script_is_answered_in_order_then_default() -> None:
    p = stub.provider(script=["one", "two"])
    assert (await p.complete(ask("a"))).content == [TextBlock(text="one")]
    assert (await p.complete(ask("b"))).content == [TextBlock(text="two")]
    past = await p.complete(ask("c"))
    assert past.content == []
    assert past.stop_reason == "end_turn"


async def test_default_answers_every_turn_past_the_script() -> None:
    p = stub.provider(default="again")
    for _ in range(3):
        assert (await p.complete(ask("x"))).content == [TextBlock(text="again")]


async def test_tool_shorthand_builds_a_tool_use_turn() -> None:
    p = stub.provider(script=[{"tool": "kb_types_of", "input": {"x": "Muffet"}}])
    resp = await p.complete(ask("what is Muffet?"))
    assert resp.stop_reason == "tool_use"
    (block,) = resp.content
    assert isinstance(block, ToolUseBlock)
    assert (block.name, block.input) == ("kb_types_of", {"x": "Muffet"})


async def test_several_tools_get_distinct_ids() -> None:
    calls = [{"tool": "a"}, {"tool": "b", "id": "mine"}]
    p = stub.provider(script=[{"tools": calls, "text": "hm"}])
    resp = await p.complete(ask("q"))
    ids = [b.id for b in resp.content if isinstance(b, ToolUseBlock)]
    assert ids == ["stub_tool_1", "mine"]
    assert resp.content[0] == TextBlock(text="hm")


async def test_refusal_shorthand_fabricates_no_text() -> None:
    p = stub.provider(script=[{"refusal": ""}, {"refusal": "I can"}])
    empty = await p.complete(ask("q"))
    assert empty.stop_reason == "refusal"
    assert empty.content == []
    partial = await p.complete(ask("q"))
    assert partial.content == [TextBlock(text="I can")]


@pytest.mark.parametrize("reason", get_args(StopReason))
async def test_stop_reason_shorthand_takes_every_neutral_word(reason: str) -> None:
    p = stub.provider(script=[{"text": "Ye", "stop_reason": reason}])
    assert (await p.complete(ask("q"))).stop_reason == reason


@pytest.mark.parametrize("word", ["stop", "length", "END_TURN", "", None])
async def test_stop_reason_shorthand_refuses_a_word_outside_the_vocabulary(word: Any) -> None:
    p = stub.provider(script=[{"text": "Ye", "stop_reason": word}])
    with pytest.raises(ValueError, match="stop_reason must be one of"):
        await p.complete(ask("q"))


async def test_every_shorthand_answers_in_the_neutral_vocabulary() -> None:
    script: list[Any] = ["prose", {"tool": "t"}, {"refusal": ""}, {"text": "x"}, None]
    p = stub.provider(script=script)
    reasons = [(await p.complete(ask("q"))).stop_reason for _ in script]
    assert reasons == ["end_turn", "tool_use", "refusal", "end_turn", "end_turn"]
    assert set(reasons) <= set(get_args(StopReason))


@pytest.mark.parametrize(
    "kind",
    [
        "llm-api-error",
        "llm-bad-answer",
        "llm-bad-credential",
        "llm-bad-hosts",
        "llm-bad-response",
        "llm-closed",
        "llm-encode",
        "llm-no-credential",
        "llm-pool-timeout",
        "llm-timeout",
        "llm-unreachable",
        "llm-unsupported",
    ],
)
async def test_raise_shorthand_raises_the_typed_error(kind: str) -> None:
    p = stub.provider(script=[{"raise": kind}])
    with pytest.raises(errors.LLMError) as info:
        await p.complete(ask("q"))
    assert info.value.type == kind


async def test_an_error_instance_is_raised_as_is_on_both_paths(collect: Collect) -> None:
    err = errors.LLMUnreachable("host", "refused")
    p = stub.provider(script=[err, err])
    with pytest.raises(errors.LLMUnreachable) as info:
        await p.complete(ask("q"))
    assert info.value is err
    with pytest.raises(errors.LLMUnreachable):
        await collect(p, ask("q"))


async def test_unknown_shorthand_is_refused() -> None:
    p = stub.provider(script=[{"bogus": 1}, {"raise": "llm-nope"}, 42])
    with pytest.raises(ValueError, match="bogus"):
        await p.complete(ask("q"))
    with pytest.raises(ValueError, match="llm-nope"):
        await p.complete(ask("q"))
    with pytest.raises(TypeError):
        await p.complete(ask("q"))


async def test_expand_runs_on_mapping_entries_only() -> None:
    seen: list[Any] = []

    def expand(entry: Any) -> Any:
        seen.append(entry)
        if "verdict" in entry:
            return f"{entry['verdict']}."
        return entry

    script = [{"verdict": "Yes"}, "plain", Response(content=[], stop_reason="end_turn")]
    p = stub.provider(script=script, default={"verdict": "No"}, expand=expand)
    texts = []
    for _ in range(4):
        blocks = (await p.complete(ask("q"))).content
        texts.append(blocks[0].text if blocks and isinstance(blocks[0], TextBlock) else None)
    assert texts == ["Yes.", "plain", None, "No."]
    assert seen == [{"verdict": "Yes"}, {"verdict": "No"}]
    empty = stub.provider(expand=expand)
    assert (await empty.complete(ask("q"))).content == []
    assert len(seen) == 2  # the None past an empty script is not an entry to expand


async def test_full_response_passes_through() -> None:
    resp = Response(content=[TextBlock(text="x")], stop_reason="stop_sequence", stop_sequence="##")
    p = stub.provider(script=[resp])
    assert await p.complete(ask("q")) is resp


async def test_stream_yields_blocks_then_the_response_complete_returns(collect: Collect) -> None:
    script: list[Any] = ["prose", {"tool": "kb_ask", "input": {"sentence": "(a b)"}, "id": "t1"}]
    via_complete = stub.provider(script=script)
    via_stream = stub.provider(script=script)
    for _ in script:
        req = ask("q")
        expected = await via_complete.complete(req)
        items = await collect(via_stream, req)
        assert items[-1] == expected
        assert items[:-1] == expected.content


async def test_requests_and_last_user_text_read_back_what_was_sent() -> None:
    p = stub.provider()
    assert p.last_user_text() is None
    await p.complete(ask("first"))
    follow_up = Request(
        messages=[
            Message(role="user", content="first"),
            Message(role="assistant", content=[ToolUseBlock(id="1", name="kb_ask", input={})]),
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id="1", content="true"), TextBlock(text="so?")],
            ),
        ]
    )
    await p.complete(follow_up)
    assert [len(r.messages) for r in p.requests()] == [1, 3]
    assert p.last_user_text() == "so?"


async def test_stub_is_always_available_and_closes() -> None:
    assert await stub.available() is True
    async with stub.provider() as p:
        assert isinstance(p, stub.StubProvider)


async def test_a_closed_stub_refuses_both_paths_with_llm_closed(collect: Collect) -> None:
    p = stub.provider(script=["never answered"])
    await p.aclose()
    await p.aclose()  # closing twice is harmless
    with pytest.raises(errors.LLMClosed, match="the stub is closed") as info:
        await p.complete(ask("q"))
    assert info.value.type == "llm-closed"
    with pytest.raises(errors.LLMClosed):
        await collect(p, ask("q"))
    assert p.requests() == []  # a refused turn is not recorded and takes no script entry


async def test_deltas_come_before_each_block_and_the_response_is_unchanged(
    collect: Collect,
) -> None:
    turn = Response(
        content=[
            ThinkingBlock(thinking="Muffet is a spider", signature="sig"),
            TextBlock(text="Not an  insect."),
            ToolUseBlock(id="t1", name="kb_ask", input={"sentence": "(isa Muffet Insect)"}),
        ],
        stop_reason="tool_use",
    )
    items = await collect(stub.provider(script=[turn]), ask("q"), deltas=True)
    assert items == [
        ThinkingDelta(index=0, thinking="Muffet "),
        ThinkingDelta(index=0, thinking="is "),
        ThinkingDelta(index=0, thinking="a "),
        ThinkingDelta(index=0, thinking="spider"),
        turn.content[0],
        TextDelta(index=1, text="Not "),
        TextDelta(index=1, text="an  "),
        TextDelta(index=1, text="insect."),
        turn.content[1],
        ToolUseStart(index=2, id="t1", name="kb_ask"),
        ToolInputDelta(index=2, partial_json='{"sentence":"(isa Muffet Insect)"'),
        ToolInputDelta(index=2, partial_json="}"),
        turn.content[2],
        turn,
    ]
    # The deltas of a block join to its text; without the flag, no delta at all.
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Not an  insect."
    plain = await collect(stub.provider(script=[turn]), ask("q"))
    assert plain == [*turn.content, turn]
