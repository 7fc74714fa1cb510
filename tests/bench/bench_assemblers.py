"""Instructions per streamed turn of each wire's reassembly, sans-IO.

Run: ``valgrind --tool=callgrind python tests/bench/bench_assemblers.py WIRE N
DELTAS`` (``WIRE`` one of ollama, chat, responses, anthropic; ``DELTAS`` 0 or
1), once with ``N`` turns and once with none: the difference over ``N`` is
one turn's instructions, load-independent. A turn is the wire's own bytes,
built here: reasoning in 200 pieces, text in 2,000, three tool calls whose
arguments come in 50 pieces each, split in 64 KiB chunks as a socket hands
them over, each fed to the wire's frame decoder and then its assembler.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from vaelii_llm._wire import NDJSONDecoder
from vaelii_llm._wire import SSEDecoder

THINKING, TEXT, CALLS, ARGUMENTS = 200, 2000, 3, 50
WORDS = ["the ", "spider ", "sat ", "beside ", "Miss ", "Muffet, ", "and ", "— ", "ü "]


def _word(n: int) -> str:
    return WORDS[n % len(WORDS)]


def _argument_pieces(call: int) -> list[str]:
    whole = json.dumps({"rows": [{"i": i, "call": call} for i in range(ARGUMENTS)]})
    size = -(-len(whole) // ARGUMENTS)
    return [whole[i : i + size] for i in range(0, len(whole), size)]


def _sse(events: list[tuple[str, dict[str, Any] | str]]) -> bytes:
    out = []
    for event, data in events:
        body = data if isinstance(data, str) else json.dumps(data)
        out.append(f"event: {event}\ndata: {body}\n\n" if event else f"data: {body}\n\n")
    return "".join(out).encode()


def ollama() -> bytes:
    lines: list[dict[str, Any]] = []
    head = {"model": "m", "created_at": "2026-01-01T00:00:00Z"}
    for n in range(THINKING):
        lines.append(
            {
                **head,
                "message": {"role": "assistant", "content": "", "thinking": _word(n)},
                "done": False,
            }
        )
    for n in range(TEXT):
        lines.append({**head, "message": {"role": "assistant", "content": _word(n)}, "done": False})
    calls = [
        {"function": {"name": f"f{c}", "arguments": json.loads("".join(_argument_pieces(c)))}}
        for c in range(CALLS)
    ]
    lines.append(
        {
            **head,
            "message": {"role": "assistant", "content": "", "tool_calls": calls},
            "done": False,
        }
    )
    lines.append(
        {
            **head,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "eval_count": 9,
            "prompt_eval_count": 3,
        }
    )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat() -> bytes:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, dict[str, Any]]:
        return "", {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": _word(n)}) for n in range(THINKING)]
    events += [chunk({"content": _word(n)}) for n in range(TEXT)]
    for c in range(CALLS):
        pieces = _argument_pieces(c)
        opening = {
            "index": c,
            "id": f"call_{c}",
            "type": "function",
            "function": {"name": f"f{c}", "arguments": ""},
        }
        events.append(chunk({"tool_calls": [opening]}))
        events += [
            chunk({"tool_calls": [{"index": c, "function": {"arguments": p}}]}) for p in pieces
        ]
    events.append(chunk({}, "tool_calls"))
    events.append(
        ("", {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}})
    )
    events.append(("", "[DONE]"))
    return _sse(events)


def responses() -> bytes:
    events: list[tuple[str, dict[str, Any] | str]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, **fields}))

    add(
        "response.created",
        response={"id": "r1", "model": "m", "status": "in_progress", "output": []},
    )
    reasoning = {"type": "reasoning", "id": "rs1", "summary": []}
    add("response.output_item.added", output_index=0, item=reasoning)
    for n in range(THINKING):
        add(
            "response.reasoning_summary_text.delta",
            output_index=0,
            summary_index=0,
            item_id="rs1",
            delta=_word(n),
        )
    thought = "".join(_word(n) for n in range(THINKING))
    done_reasoning = {**reasoning, "summary": [{"type": "summary_text", "text": thought}]}
    add("response.output_item.done", output_index=0, item=done_reasoning)
    message = {
        "type": "message",
        "id": "m1",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    add("response.output_item.added", output_index=1, item=message)
    for n in range(TEXT):
        add(
            "response.output_text.delta",
            output_index=1,
            content_index=0,
            item_id="m1",
            delta=_word(n),
        )
    text = "".join(_word(n) for n in range(TEXT))
    done_message = {
        **message,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    add("response.output_item.done", output_index=1, item=done_message)
    items = [done_reasoning, done_message]
    for c in range(CALLS):
        index = 2 + c
        call = {
            "type": "function_call",
            "id": f"fc{c}",
            "call_id": f"call_{c}",
            "name": f"f{c}",
            "arguments": "",
            "status": "in_progress",
        }
        add("response.output_item.added", output_index=index, item=call)
        pieces = _argument_pieces(c)
        for p in pieces:
            add(
                "response.function_call_arguments.delta",
                output_index=index,
                item_id=f"fc{c}",
                delta=p,
            )
        done_call = {**call, "arguments": "".join(pieces), "status": "completed"}
        add("response.output_item.done", output_index=index, item=done_call)
        items.append(done_call)
    add(
        "response.completed",
        response={
            "id": "r1",
            "model": "m",
            "status": "completed",
            "output": items,
            "usage": {"input_tokens": 3, "output_tokens": 9},
        },
    )
    return _sse(events)


def anthropic() -> bytes:
    events: list[tuple[str, dict[str, Any] | str]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, **fields}))

    add(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    )
    add(
        "content_block_start",
        index=0,
        content_block={"type": "thinking", "thinking": "", "signature": ""},
    )
    for n in range(THINKING):
        add("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": _word(n)})
    add("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "sig"})
    add("content_block_stop", index=0)
    add("content_block_start", index=1, content_block={"type": "text", "text": ""})
    for n in range(TEXT):
        add("content_block_delta", index=1, delta={"type": "text_delta", "text": _word(n)})
        if n % 200 == 0:
            events.append(("ping", {"type": "ping"}))
    add("content_block_stop", index=1)
    for c in range(CALLS):
        index = 2 + c
        add(
            "content_block_start",
            index=index,
            content_block={"type": "tool_use", "id": f"toolu_{c}", "name": f"f{c}", "input": {}},
        )
        for p in _argument_pieces(c):
            add(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": p},
            )
        add("content_block_stop", index=index)
    add(
        "message_delta",
        delta={"stop_reason": "tool_use", "stop_sequence": None},
        usage={"output_tokens": 9},
    )
    add("message_stop")
    return _sse(events)


def _assembler(wire: str, deltas: bool) -> Any:
    if wire == "ollama":
        from vaelii_llm.providers.ollama._assemble import ChatAssembler

        return ChatAssembler(deltas=deltas), NDJSONDecoder
    if wire == "chat":
        from vaelii_llm.providers.openai._assemble import ChunkAssembler

        return ChunkAssembler(deltas=deltas), SSEDecoder
    if wire == "responses":
        from vaelii_llm.providers.openai._responses_assemble import EventAssembler

        return EventAssembler(deltas=deltas), SSEDecoder
    from vaelii_llm.providers.anthropic._stream import StreamAssembler

    return StreamAssembler(deltas=deltas), SSEDecoder


def turn(wire: str, body: bytes, deltas: bool) -> int:
    """One streamed turn: the items handed over."""
    assembler, decoder_type = _assembler(wire, deltas)
    if decoder_type is NDJSONDecoder:
        feed = NDJSONDecoder("bench").feed
    else:  # the Messages API's decoder names its events once (identity, not equality)
        names: dict[bytes, bytes] | None = {} if wire == "anthropic" else None
        feed = SSEDecoder("bench", names=names).feed_frames
    handed = 0
    for start in range(0, len(body), 65536):
        for _item in assembler.feed(feed(body[start : start + 65536])):
            handed += 1
        handed += assembler.pieces * 0  # the pump reads it after every chunk
    for _item in assembler.feed(feed(b"")):
        handed += 1
    assembler.result()
    return handed


def main() -> None:
    wire, turns, deltas = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    body = globals()[wire]()
    _assembler(wire, deltas)  # every import done before the turns
    for _ in range(turns):
        turn(wire, body, deltas)


if __name__ == "__main__":
    main()
