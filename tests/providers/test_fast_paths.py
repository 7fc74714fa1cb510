"""The streamed paths' quick steps agree with the one-at-a-time rules.

``StreamAssembler.feed`` (its quick step for text deltas against the rule
for any one event, ``_event``) exists for speed (see the benchmarks); it must
hand over exactly what the reference does, refusals included, on any input
and any split, with deltas and without. (The SSE decoder's one line path is
held to its reference in test_wire_sse.py.) With deltas, the blocks and the
final Response are what they are without, and each block's deltas, joined,
are its text.

Ollama's whole answer (``response_of``) is built straight from its one
object; it must equal, refusals included, what the streamed assembler makes
of that object as its only line. A whole Chat Completions answer is built
straight from its one message too, held to the way the stream's turn reads
it (the oracle :func:`_reference_completion`).

Ollama's ``ChatAssembler.feed`` reads a line that only continues the last
piece's kind with a narrow decoder; it is checked against :func:`reference`,
the slow path kept here as an oracle: every line decoded whole and applied in
full. One difference is by design and pinned on its own: the fast path does
not read the fields such a line carries unused (its model, ``done_reason``,
counts and durations), so a wrong type there is not refused, where decoding
the whole line refuses it.
"""

from __future__ import annotations

import random
from typing import Any
from typing import get_args

import msgspec
import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.anthropic_fake import generate
from vaelii_llm._protocol import Block
from vaelii_llm._protocol import Delta
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import TextDelta
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ThinkingDelta
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import ToolUseStart
from vaelii_llm._protocol import Usage
from vaelii_llm._wire.ndjson import NDJSONDecoder
from vaelii_llm._wire.ndjson import refuse_line
from vaelii_llm._wire.sse import SSEDecoder
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.errors import LLMError
from vaelii_llm.providers._turn import MAX_TOOL_CALLS
from vaelii_llm.providers.anthropic._stream import StreamAssembler
from vaelii_llm.providers.ollama._assemble import CHUNK_DECODER
from vaelii_llm.providers.ollama._assemble import ChatAssembler
from vaelii_llm.providers.ollama._assemble import ChatChunk
from vaelii_llm.providers.ollama._assemble import _InMessage
from vaelii_llm.providers.ollama._assemble import response_of
from vaelii_llm.providers.ollama._assemble import stop_reason
from vaelii_llm.providers.openai._assemble import WHOLE_DECODER
from vaelii_llm.providers.openai._assemble import Completion
from vaelii_llm.providers.openai._assemble import _refuse_error
from vaelii_llm.providers.openai._assemble import _text_of
from vaelii_llm.providers.openai._assemble import _Turn
from vaelii_llm.providers.openai._assemble import response_of as completion_response


def anthropic_run(stream: bytes, cuts: list[int], frames: bool, deltas: bool = False) -> list[Any]:
    decoder = SSEDecoder("t")
    assembler = StreamAssembler("t", deltas=deltas)
    out: list[Any] = []
    pos = 0
    try:
        for cut in [*sorted(set(cuts)), len(stream)]:
            piece, pos = stream[pos:cut], cut
            if not piece:  # b"" would end the stream
                continue
            if frames:
                out.extend(assembler.feed(decoder.feed_frames(piece)))
            else:  # the oracle: the rule for any one event, the quick step never taken
                for event in decoder.feed(piece):
                    out.extend(assembler._event(event.event.encode(), event.data.encode()))
        out.append(assembler.result())
    except LLMError as exc:
        out.append((type(exc), str(exc)))
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.booleans(), st.lists(st.integers(0, 10**6), max_size=12))
def test_stream_assembler_feed_equals_the_per_event_rule(
    seed: int, error: bool, cuts: list[int]
) -> None:
    stream = generate(random.Random(seed), error=error).sse()
    cuts = [c % (len(stream) + 1) for c in cuts]
    batched = anthropic_run(stream, cuts, True)
    assert batched == anthropic_run(stream, cuts, False)
    assert batched == anthropic_run(stream, [], True)  # the split changes nothing
    with_deltas = anthropic_run(stream, cuts, True, deltas=True)
    assert with_deltas == anthropic_run(stream, cuts, False, deltas=True)
    check_deltas(with_deltas, batched)


def _sse(*events: tuple[str, str]) -> bytes:
    return b"".join(f"event: {name}\ndata: {data}\n\n".encode() for name, data in events)


_START = ("message_start", '{"type":"message_start","message":{"id":"m","model":"x","usage":{}}}')


def _text_delta(index: int) -> tuple[str, str]:
    return (
        "content_block_delta",
        (
            f'{{"type":"content_block_delta","index":{index},'
            '"delta":{"type":"text_delta","text":"a"}}'
        ),
    )


def _block(event: str, index: int, kind: str = "text") -> tuple[str, str]:
    if event == "content_block_start":
        body = f'"content_block":{{"type":"{kind}","text":""}}'
        return (event, f'{{"type":"{event}","index":{index},{body}}}')
    return (event, f'{{"type":"{event}","index":{index}}}')


def test_stream_assembler_a_delta_after_its_block_stopped_in_one_batch() -> None:
    """The quick step remembers the open text block it last saw; a block
    closed or opened within the same batch is seen anew, as feed sees it."""
    for tail in (
        [_block("content_block_stop", 0), _text_delta(0)],  # refused: block 0 is closed
        [_block("content_block_stop", 0), _block("content_block_start", 1), _text_delta(1)],
        [
            _block("content_block_stop", 0),
            _block("content_block_start", 1, "thinking"),
            _text_delta(1),  # a text_delta on a thinking block: skipped, not appended
            _block("content_block_stop", 1),
            ("message_stop", '{"type":"message_stop"}'),
        ],
    ):
        stream = _sse(_START, _block("content_block_start", 0), _text_delta(0), *tail)
        assert anthropic_run(stream, [], True) == anthropic_run(stream, [], False)


_CALL = msgspec.Raw(b'{"function":{"name":"f","arguments":{}}}')
_messages = st.builds(
    _InMessage,
    content=st.sampled_from(["", "a", "b"]),
    thinking=st.sampled_from(["", "t"]),
    tool_calls=st.sampled_from([None, (), (_CALL,), (msgspec.Raw(b'{"bad":1}'),)]),
)
_chunks = st.builds(
    ChatChunk,
    model=st.sampled_from([None, "m", "n"]),
    message=st.none() | _messages,
    done=st.sampled_from([False, False, False, True]),
    done_reason=st.sampled_from([None, "stop"]),
    error=st.sampled_from([None] * 8 + ["boom"]),
)


NDJSON_ATOMS = [
    b"\n",
    b"\r\n",
    b" ",
    b"\r",
    b"{}",
    b"[",
    b"]",
    b"1",
    b",",
    b"\xff",
    b'"x"',
    b'{"done":true}',
    b'{"message":{"content":"a"}}',
    b'{"model":5}',
    b"\x00",
]


def ndjson_run(stream: bytes, cuts: list[int], cap: int) -> tuple[list[bytes], str | None]:
    """The lines the decoder hands over for ``stream`` fed at ``cuts`` (its end
    line included), and the reason it refused a line, if it did."""
    decoder = NDJSONDecoder("t", max_line_bytes=cap)
    lines: list[bytes] = []
    pos = 0
    try:
        for cut in [*sorted(set(cuts)), len(stream)]:
            piece, pos = stream[pos:cut], cut
            if piece:
                lines += decoder.feed(piece)
        lines += decoder.feed(b"")
    except LLMBadResponse as exc:
        return lines, exc.reason
    return lines, None


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(NDJSON_ATOMS) | st.binary(max_size=6), max_size=40),
    st.lists(st.integers(0, 300), max_size=8),
    st.sampled_from([4, 16, 64, 10**6]),
)
def test_ndjson_lines_at_any_split_are_the_streams_lines(
    atoms: list[bytes], cuts: list[int], cap: int
) -> None:
    """The oracle is the whole stream split at once: the same lines at any
    split, and a refusal exactly when some line is over the cap."""
    stream = b"".join(atoms)
    cuts = [c for c in cuts if c < len(stream)]
    whole = stream.split(b"\n")
    lines, refused = ndjson_run(stream, cuts, cap)
    if any(len(line) > cap for line in whole):
        assert refused == f"sent a line over the {cap}-byte cap (its opening is kept)"
    else:
        assert (lines, refused) == (whole, None)


def _line(chunk: ChatChunk) -> bytes:
    return msgspec.json.encode(chunk)


_ODD_LINES = [
    b"",
    b" ",
    b"\r",
    b"{not json",
    b'{"message": {"content": 5}}',
    # lines the continuation decoders refuse (each decoded whole instead):
    b'{"message": {"content": "a", "tool_calls": []}}',
    b'{"message": {"content": "a", "tool_calls": {}}}',
    b'{"message": {"content": "a", "thinking": null}}',
    b'{"message": {"content": "a", "thinking": 5}}',
    b'{"message": {"thinking": "t", "content": ""}}',
    b'{"message": {"content": "", "thinking": ""}}',
    b'{"message": null}',
    b'{"message": {"content": "a"}, "done": "no"}',
    b'{"message": {"content": "a"}, "done": null}',
    b'{"message": {"content": "a"}, "error": "boom"}',
    b'{"message": {"content": "a"}, "error": 5}',
    b'{"message": {"content": "a"}, "done": true, "done": false}',
    b'{"message": {"content": "a"}, "message": {"thinking": "t"}}',
    b'{"message": {"content": "\\ud800"}}',
    b'{"message": {"content": "a\xff"}}',
    b'[{"message": {"content": "a"}}]',
    # what a continuation carries unused, well typed: accepted either way
    b'{"model": "x", "message": {"content": "b"}, "eval_count": 3, "done_reason": "stop"}',
    # unused fields of the wrong type on a line that is never a continuation
    b'{"done": true, "eval_count": "x"}',
    b'{"model": 5}',
]
_ABSENT = object()


def _keys(**choices: list[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with each key drawn from its choices, ``_ABSENT`` leaving it out."""
    fields = {key: st.sampled_from(values) for key, values in choices.items()}
    return st.fixed_dictionaries(fields).map(
        lambda obj: {k: v for k, v in obj.items() if v is not _ABSENT}
    )


_CALLS = [{"function": {"name": "f", "arguments": {}}}]
_wire_message = _keys(
    role=["assistant", _ABSENT],
    content=["a", "b"] * 12 + ["", _ABSENT, _ABSENT, None],
    thinking=[_ABSENT] * 20 + ["t", "u", "t", "u", ""] + [None],
    tool_calls=[_ABSENT] * 16 + [None, [], _CALLS],
)
_wire_object = st.builds(
    lambda extra, message: {**extra, **message},
    _keys(
        model=[_ABSENT] * 4 + ["m", "n", None],
        done=[_ABSENT] * 60 + [False] * 6 + [True],
        error=[_ABSENT] * 60 + [None] * 6 + ["boom"],
        eval_count=[_ABSENT, 3],
    ),
    st.sampled_from([{}, {"message": None}]) | _wire_message.map(lambda m: {"message": m}),
)
_wire_done = st.builds(
    lambda extra, message: {"done": True, **extra, **message},
    _keys(model=[_ABSENT, "m", "n"], done_reason=["stop", _ABSENT], eval_count=[_ABSENT, 3]),
    st.sampled_from([{}, {"message": {"role": "assistant", "content": ""}}])
    | _wire_message.map(lambda m: {"message": m}),
)
_wire_lines = st.builds(
    lambda first, middle, last: [*map(msgspec.json.encode, [first, *middle, *last])],
    _keys(model=["m", _ABSENT], message=[{"content": "a"}, {"thinking": "t"}]),
    st.lists(_wire_object, max_size=30),
    st.builds(lambda done, after: [done, *after], _wire_done, st.lists(_wire_object, max_size=1)),
)
"""Lines as Ollama writes them, keys present or absent: after a first line
that opens a run (naming the model or not), mostly lines that continue or
change the open run, then mostly a done line."""
_lines = st.lists(_chunks.map(_line) | st.sampled_from(_ODD_LINES), max_size=30) | _wire_lines


class _RefFunction(msgspec.Struct):
    name: str
    arguments: dict[str, Any] = {}


class _RefCall(msgspec.Struct):
    function: _RefFunction
    id: str | None = None


def _reference_calls(message: _InMessage, before: int) -> list[ToolUseBlock]:
    calls: list[ToolUseBlock] = []
    for raw in message.tool_calls or ():
        try:
            call = msgspec.json.decode(raw, type=_RefCall)
            original = msgspec.json.decode(raw, type=dict[str, Any])
        except msgspec.MsgspecError as exc:
            raise LLMBadResponse("t", "sent a tool call that will not decode", bytes(raw)) from exc
        use_id = call.id or f"call_{before + len(calls)}"
        fn = call.function
        calls.append(ToolUseBlock(id=use_id, name=fn.name, input=fn.arguments, raw=original))
    return calls


def _reference_end(
    chunk: ChatChunk,
    model: str | None,
    pieces: tuple[list[str], list[str]],
    calls: list[ToolUseBlock],
    deltas: bool,
) -> tuple[list[Any], Response]:
    thinking, text = pieces
    content: list[Block] = [ThinkingBlock(thinking="".join(thinking))] if thinking else []
    content += [TextBlock(text="".join(text))] if text else []
    out: list[Any] = list(content)
    for call in calls:
        if deltas:
            out.append(ToolUseStart(index=len(content), id=call.id, name=call.name))
        out.append(call)
        content.append(call)
    usage = Usage(
        input_tokens=chunk.prompt_eval_count,
        output_tokens=chunk.eval_count,
        prompt_eval_count=chunk.prompt_eval_count,
        eval_count=chunk.eval_count,
        total_duration=chunk.total_duration,
        load_duration=chunk.load_duration,
        prompt_eval_duration=chunk.prompt_eval_duration,
        eval_duration=chunk.eval_duration,
    )
    final = Response(
        content=content,
        stop_reason=stop_reason(chunk.done_reason, bool(calls)),
        vendor_stop_reason=chunk.done_reason,
        model=chunk.model or model,
        usage=usage,
    )
    return out, final


def reference(lines: list[bytes], deltas: bool = False) -> list[Any]:
    """The slow path, as an oracle: each line decoded whole (as ``CHUNK_DECODER``
    decodes it; an empty line skipped, another that fails to the one rule,
    ``refuse_line``) and applied in full. What the stream hands over, then the
    Response, or the refusal."""
    thinking: list[str] = []
    text: list[str] = []
    calls: list[ToolUseBlock] = []
    model: str | None = None
    final: Response | None = None
    out: list[Any] = []
    try:
        for line in lines:
            try:
                chunk = CHUNK_DECODER.decode(line)
            except Exception as exc:
                if line:
                    refuse_line("t", line, exc)
                continue
            if chunk.error is not None:
                raise LLMApiError("t", 200, chunk.error)
            if final is not None:
                raise LLMBadResponse("t", "sent a chunk after done: true")
            model = model if model is not None else chunk.model
            message = chunk.message or _InMessage()
            calls += _reference_calls(message, len(calls))
            if message.thinking:
                thinking.append(message.thinking)
                out += [ThinkingDelta(index=0, thinking=message.thinking)] if deltas else []
            if message.content:
                text.append(message.content)
                index = 1 if thinking else 0
                out += [TextDelta(index=index, text=message.content)] if deltas else []
            if chunk.done:
                items, final = _reference_end(chunk, model, (thinking, text), calls, deltas)
                out += items
        if final is None:
            raise LLMBadResponse("t", "ended the stream without done: true")
        out.append(final)
    except LLMError as exc:
        out.append((type(exc), str(exc)))
    return out


def ollama_lines_run(lines: list[bytes], batch: int, deltas: bool = False) -> list[Any]:
    """``ChatAssembler.feed`` in batches of ``batch``: what it hands over, then
    the Response, or the refusal."""
    assembler = ChatAssembler("t", deltas=deltas)
    out: list[Any] = []
    try:
        for i in range(0, len(lines), batch):
            out.extend(assembler.feed(lines[i : i + batch]))
        out.append(assembler.result())
    except LLMError as exc:
        out.append((type(exc), str(exc)))
    return out


@settings(max_examples=400, deadline=None)
@given(_lines, st.integers(1, 10))
@example(  # the model named first by a line that continues the run
    [
        b'{"message": {"content": "a"}}',
        b'{"model": "m", "message": {"content": "b"}}',
        b'{"done": true}',
    ],
    1,
)
def test_chat_assembler_feed_equals_the_reference(lines: list[bytes], batch: int) -> None:
    plain = reference(lines)
    assert ollama_lines_run(lines, batch) == plain
    with_deltas = ollama_lines_run(lines, batch, deltas=True)
    assert with_deltas == reference(lines, deltas=True)
    assert [x for x in with_deltas if not isinstance(x, DELTAS)] == plain


@pytest.mark.parametrize(
    "unused",
    [b'"model": 5', b'"done_reason": []', b'"eval_count": "x"', b'"total_duration": 1.5'],
)
def test_a_continuation_line_is_not_read_for_what_it_carries_unused(unused: bytes) -> None:
    """The one difference from decoding each line whole, by design: a line that
    only continues the open run is read for its message alone. Elsewhere (the
    first line, the done line, a line that changes the run) the same field is
    refused as the whole decode refuses it."""
    first = b'{"model": "m", "message": {"content": "a"}}'
    done = b'{"done": true, "done_reason": "stop"}'
    odd = b'{"message": {"content": "b"}, ' + unused + b"}"
    assembler = ChatAssembler("t")
    assert list(assembler.feed([first, odd, done])) == [TextBlock(text="ab")]
    assert assembler.result().content == [TextBlock(text="ab")]
    with pytest.raises(msgspec.ValidationError):  # decoded whole, it is refused
        CHUNK_DECODER.decode(odd)
    changes_run = b'{"message": {"thinking": "t"}, ' + unused + b"}"
    odd_done = done[:-1] + b", " + unused + b"}"
    for lines in ([odd, done], [first, changes_run, done], [first, odd_done]):
        with pytest.raises(LLMBadResponse, match="not the expected JSON"):
            list(ChatAssembler("t").feed(lines))


def test_a_line_that_will_not_decode_is_refused_by_the_one_rule() -> None:
    """The assembler's refusal of a bad line is ``refuse_line``'s, word for word."""
    bad = b'{"done": "yes"}'
    with pytest.raises(LLMBadResponse) as via_feed:
        list(ChatAssembler("t").feed([bad]))
    try:
        CHUNK_DECODER.decode(bad)
    except msgspec.ValidationError as exc:
        with pytest.raises(LLMBadResponse) as via_rule:
            refuse_line("t", bad, exc)
    assert str(via_feed.value) == str(via_rule.value)
    assert via_feed.value.text == via_rule.value.text == bad.decode()


DELTAS = get_args(Delta)


def check_deltas(with_deltas: list[Any], plain: list[Any]) -> None:
    """Deltas only add: dropped, the run is the plain one (blocks, final
    Response, refusal). Each block's deltas come before it, at its index in the
    final content, and joined they are its text; a tool call's start names it."""
    assert [x for x in with_deltas if not isinstance(x, DELTAS)] == plain
    final = with_deltas[-1] if isinstance(with_deltas[-1], Response) else None
    pieces: dict[int, list[str]] = {}
    started: dict[int, ToolUseStart] = {}
    for item in with_deltas:
        if isinstance(item, TextDelta):
            pieces.setdefault(item.index, []).append(item.text)
        elif isinstance(item, ThinkingDelta):
            pieces.setdefault(item.index, []).append(item.thinking)
        elif isinstance(item, ToolUseStart):
            started[item.index] = item
        elif isinstance(item, TextBlock | ThinkingBlock | ToolUseBlock) and final is not None:
            index = next(i for i, b in enumerate(final.content) if b is item)
            if isinstance(item, ToolUseBlock):
                assert (started[index].id, started[index].name) == (item.id, item.name)
            else:
                text = item.text if isinstance(item, TextBlock) else item.thinking
                assert "".join(pieces.get(index, [])) == text


def _assembled_whole(chunk: ChatChunk) -> Response | tuple[type, str]:
    """The oracle for a whole answer: the streamed assembler fed it as its one line."""
    assembler = ChatAssembler("t")
    try:
        list(assembler.feed([_line(chunk)]))
        return assembler.result()
    except LLMError as exc:
        return type(exc), str(exc)


def _built_whole(chunk: ChatChunk) -> Response | tuple[type, str]:
    try:
        return response_of(chunk, "t")
    except LLMError as exc:
        return type(exc), str(exc)


_many_calls = st.integers(MAX_TOOL_CALLS - 1, MAX_TOOL_CALLS + 1).map(
    lambda n: _InMessage(content="a", tool_calls=(_CALL,) * n)
)


@settings(max_examples=300, deadline=None)
@given(
    _chunks
    | st.builds(
        ChatChunk,
        model=st.sampled_from([None, "m"]),
        message=_messages | _many_calls,
        done=st.just(True),
        done_reason=st.sampled_from([None, "stop", "length", "load"]),
        eval_count=st.sampled_from([None, 3]),
        total_duration=st.sampled_from([None, 7]),
    )
)
def test_a_whole_answer_is_what_the_streamed_assembler_makes_of_it(chunk: ChatChunk) -> None:
    assert _built_whole(chunk) == _assembled_whole(chunk)


def _reference_completion(parsed: Completion, label: str) -> Response:
    """The oracle for a whole Chat Completions answer: its one message fed
    to the stream's turn (the accumulator and :class:`_Turn`), as it was read
    before the direct path."""
    _refuse_error(parsed, label)
    if not parsed.choices:
        raise LLMBadResponse(label, "answered a completion with no choices")
    choice = parsed.choices[0]
    message = choice.message
    turn = _Turn(label)
    parts = turn
    turn.id, turn.model, turn.usage = parsed.id, parsed.model, parsed.usage
    turn.finish = choice.finish_reason
    if type(choice.stop_reason) is str:
        turn.stop_string = choice.stop_reason
    thinking = _text_of(message.reasoning_content)
    parts.thinking_field = "reasoning_content" if thinking else "reasoning"
    thinking = thinking or _text_of(message.reasoning)
    out: list[Any] = []
    if thinking:
        parts.add_thinking(thinking, out)
    if message.content:
        parts.add_text(message.content, out)
    if message.refusal:
        turn.refusal.append(message.refusal)
    for call in message.tool_calls or ():
        parts.add_arguments(
            parts.open_call(call.id, call.function.name), call.function.arguments, out
        )
    return turn.response(parts.blocks(turn.tool_use()))


def _outcome(build: Any, parsed: Completion) -> Response | tuple[type, str]:
    try:
        result: Response = build(parsed, "t")
    except LLMError as exc:
        return type(exc), str(exc)
    return result


_ARGUMENTS = ["", " ", "{}", '{"a": 1}', '{"a": "cut', "[1]", "null", "nope", '{"a": 1}{']
_completion_call = _keys(
    id=["c1", None, _ABSENT],
    function=[{"name": "f", "arguments": a} for a in _ARGUMENTS]
    + [{"name": "g"}, {"arguments": "{}"}],
)
_completion_message = st.builds(
    lambda fields, calls: {**fields, **({} if calls is None else {"tool_calls": calls})},
    _keys(
        content=["Yes.", "", None, _ABSENT],
        reasoning_content=["t", "", 5, {"x": 1}, None, _ABSENT, _ABSENT],
        reasoning=["r", {"text": "r"}, _ABSENT, _ABSENT],
        refusal=["no.", "", None, _ABSENT, _ABSENT, _ABSENT],
    ),
    st.none() | st.lists(_completion_call, max_size=4),
)
_completions = st.builds(
    lambda top, choice, message: {
        **top,
        "choices": [] if choice is None else [{**choice, "message": message}],
    },
    _keys(
        id=["x", None, _ABSENT],
        model=["m", None, _ABSENT],
        usage=[
            _ABSENT,
            None,
            {},
            {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}, "x": None},
            {"prompt_tokens": "3", "completion_tokens": -1},
        ],
        error=[_ABSENT] * 12 + [None, {"message": "boom"}],
        object=[_ABSENT] * 12 + ["chat.completion", "error"],
        message=[_ABSENT, "why"],
    ),
    st.sampled_from([None])
    | _keys(
        finish_reason=["stop", "length", "tool_calls", "content_filter", "eos", None, _ABSENT],
        stop_reason=[_ABSENT, None, "END", 7],
    ),
    _completion_message,
)


@settings(max_examples=400, deadline=None)
@given(_completions)
@example(
    {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]
                    * (MAX_TOOL_CALLS + 1)
                },
            }
        ]
    }
)
def test_a_whole_completion_is_what_the_streams_turn_makes_of_it(wire: dict[str, Any]) -> None:
    parsed = WHOLE_DECODER.decode(msgspec.json.encode(wire))
    assert _outcome(completion_response, parsed) == _outcome(_reference_completion, parsed)
