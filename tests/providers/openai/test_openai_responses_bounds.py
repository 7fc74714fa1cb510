"""The Responses wire's bounds and failures (#58): a terminal event that says
the response failed, a stream beginning an item per event, a stream past a
whole body's byte bound, and a token count past any context window.

Each is refused typed, as the whole answer (or a turn's usage) already was.
The sans-IO tests drive the codec's own decoder and assembler, as the
skeleton's pump does; the count runs against the fake server on loopback.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.fake_openai_responses import MODEL
from tests.support.fake_openai_responses import FakeResponses
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn
from tests.support.fake_openai_responses import sse
from vaelii_llm import errors
from vaelii_llm._protocol import MAX_TOKEN_COUNT
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._transport.boundary import DEFAULT_MAX_BODY_BYTES
from vaelii_llm.providers import openai_responses
from vaelii_llm.providers.openai._responses_assemble import MAX_OUTPUT_ITEMS
from vaelii_llm.providers.openai._responses_assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._responses_assemble import response_of

FAILURE = {"code": "server_error", "message": "The model failed to generate a response."}


def codec() -> Any:
    return openai_responses.provider(base_url="http://127.0.0.1:9/v1", model=MODEL)._codec


def fed(chunks: list[bytes]) -> Response:
    """``chunks`` through the codec's stream decoder and assembler, then the end."""
    parts = codec()
    decoder, assembler = parts.stream_decoder(), parts.assembler(deltas=False)
    for chunk in chunks:
        list(assembler.feed(decoder.feed(chunk)))
        if assembler.finished:
            break
    if not assembler.finished:
        list(assembler.feed(decoder.feed(b"")))
    result: Response = assembler.result()
    return result


def frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def text_delta(index: int, piece: str = "x") -> bytes:
    return frame(
        {
            "type": "response.output_text.delta",
            "item_id": f"msg_{index}",
            "output_index": index,
            "content_index": 0,
            "delta": piece,
        }
    )


def completed(turn: Turn, **fields: Any) -> bytes:
    return frame({"type": "response.completed", "response": {**turn.response(), **fields}})


def test_a_completed_event_saying_failed_raises_as_the_whole_answer_does() -> None:
    """A stream whose ``response.completed`` carried ``status: "failed"`` and
    an error returned a Response with ``stop_reason=None``; ``complete``
    raised. Both raise LLMApiError, status 200, quoting the error."""
    turn = Turn(items=[Item("message", ["hi"])])
    failed = {"status": "failed", "error": FAILURE, "output": [], "usage": None}
    with pytest.raises(errors.LLMApiError, match="server_error") as whole:
        response_of(WHOLE_DECODER.decode(json.dumps({**turn.response(), **failed})))
    events = turn.events()[:-1]
    with pytest.raises(errors.LLMApiError, match="server_error") as streamed:
        fed([sse(events), completed(turn, **failed)])
    assert streamed.value.status == whole.value.status == 200
    assert streamed.value.body == whole.value.body
    assert fed([sse(turn.events())]).stop_reason == "end_turn"  # a completed one still answers


def test_a_stream_beginning_an_item_per_event_is_refused_past_the_item_bound() -> None:
    """One text delta per new ``output_index`` began an open item each, held
    to the end: 300,000 deltas (34 MiB) took +290 MiB. Past
    MAX_OUTPUT_ITEMS items the turn is refused; at the bound it answers."""
    turn = Turn(items=[])
    at_bound = b"".join(text_delta(n) for n in range(MAX_OUTPUT_ITEMS))
    answered = fed([at_bound, completed(turn, output=[])])
    assert len(answered.content) == MAX_OUTPUT_ITEMS
    with pytest.raises(errors.LLMBadResponse, match=r"more than MAX_OUTPUT_ITEMS \(4096\)"):
        fed([at_bound + text_delta(MAX_OUTPUT_ITEMS), completed(turn, output=[])])


def test_a_whole_answer_or_a_final_listing_past_the_item_bound_is_refused() -> None:
    said = {"type": "message", "content": [{"type": "output_text", "text": "a"}]}
    items = [said] * (MAX_OUTPUT_ITEMS + 1)
    many = {**Turn(items=[]).response(), "output": items}
    with pytest.raises(errors.LLMBadResponse, match="MAX_OUTPUT_ITEMS"):
        response_of(WHOLE_DECODER.decode(json.dumps(many)))
    with pytest.raises(errors.LLMBadResponse, match="MAX_OUTPUT_ITEMS"):  # listed only at the end
        fed([completed(Turn(items=[]), output=items)])
    done = b"".join(  # items done that were never begun count all the same
        frame({"type": "response.output_item.done", "output_index": n, "item": items[0]})
        for n in range(MAX_OUTPUT_ITEMS + 1)
    )
    with pytest.raises(errors.LLMBadResponse, match="MAX_OUTPUT_ITEMS"):
        fed([done])


def test_a_stream_past_a_whole_bodys_byte_bound_is_refused() -> None:
    """A whole body is refused past DEFAULT_MAX_BODY_BYTES; a streamed one had
    no bound. Deltas of one item, in 1 MiB chunks, past the bound: refused
    typed, naming it, before the end arrives."""
    piece = "y" * 4000
    chunk = text_delta(0, piece) * (2**20 // len(text_delta(0, piece)))
    chunks = [chunk] * (DEFAULT_MAX_BODY_BYTES // len(chunk) + 1)
    assert sum(map(len, chunks)) > DEFAULT_MAX_BODY_BYTES
    with pytest.raises(errors.LLMBadResponse, match=f"more than {DEFAULT_MAX_BODY_BYTES} bytes"):
        fed([*chunks, completed(Turn(items=[]), output=[])])
    under = fed([*chunks[:8], completed(Turn(items=[]), output=[])])  # under it: the answer
    assert len(under.content) == 1


@pytest.mark.parametrize("count", [MAX_TOKEN_COUNT + 1, 10**30, MAX_TOKEN_COUNT])
async def test_a_token_count_past_any_context_window_is_refused(count: int) -> None:
    """``count_tokens`` took ``input_tokens: 10**30`` where a turn's usage
    past 10**9 is refused: refused the same way (the bound itself answers)."""
    async with (
        FakeResponses(count=count) as server,
        openai_responses.provider(base_url=server.base_url, model=MODEL) as p,
    ):
        asked = p.count_tokens(Request(messages=[Message(role="user", content="hi")]))
        if count <= MAX_TOKEN_COUNT:
            assert await asked == count
            return
        with pytest.raises(errors.LLMBadResponse, match="usage whose input_tokens is") as caught:
            await asked
    assert len(str(caught.value)) < 200
