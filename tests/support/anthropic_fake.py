"""A fake Messages API on loopback, and generated SSE transcripts for it.

Transcripts follow the API's streaming documentation: ``message_start`` with
empty content, then per block ``content_block_start``, its deltas and
``content_block_stop``, ``ping`` events anywhere after the start, one
``message_delta`` with the stop reason and cumulative usage, and
``message_stop``. Each transcript also carries the message the non-streamed
API would return for the same turn, so a test can check that a reassembled
block's ``raw`` equals it.

The fake also counts tokens (``POST /v1/messages/count_tokens``) and, with
``caching=True``, honours ``cache_control`` as the API does
(:class:`PromptCache`).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import json
import random
import string
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from aiohttp import web

from tests.support.loopback import FakeServer

Event = tuple[str, dict[str, Any]]


@dataclass
class Transcript:
    events: list[Event]
    message: dict[str, Any]  # what the non-streamed API returns
    error: bool = False  # ends with an error event instead of message_stop

    def sse(self) -> bytes:
        return b"".join(frame(name, data) for name, data in self.events)


def frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _split(rng: random.Random, text: str, most: int) -> list[str]:
    """``text`` in 1..most pieces at random cut points (empty pieces allowed)."""
    if not text:
        return [""]
    cuts = sorted(rng.randint(0, len(text)) for _ in range(rng.randint(0, most - 1)))
    points = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(points)]


def _words(rng: random.Random, n: int) -> str:
    alphabet = string.ascii_letters + '  ,.é—\n"\\/{}ü😀'
    return "".join(rng.choice(alphabet) for _ in range(n))


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randint(0, 6 if depth < 3 else 3)
    if pick == 0:
        return rng.randint(-(10**6), 10**6)
    if pick == 1:
        return _words(rng, rng.randint(0, 30))
    if pick == 2:
        return rng.choice([True, False, None])
    if pick == 3:
        return rng.random() * 100
    if pick in (4, 5):
        return {
            f"k{i}_{_words(rng, 3)}": _json_value(rng, depth + 1) for i in range(rng.randint(0, 4))
        }
    return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def _ping(rng: random.Random, events: list[Event]) -> None:
    if rng.random() < 0.3:
        events.append(("ping", {"type": "ping"}))


def _block(rng: random.Random, index: int, kind: str, events: list[Event]) -> dict[str, Any]:
    """Append one block's events; return the block as the non-streamed API has it."""

    def start(block: dict[str, Any]) -> None:
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        _ping(rng, events)

    def delta(d: dict[str, Any]) -> None:
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        )
        _ping(rng, events)

    if kind == "text":
        text = _words(rng, rng.randint(0, 400))
        cited = rng.random() < 0.25
        start({"type": "text", "text": "", **({"citations": []} if cited else {})})
        final: dict[str, Any] = {"type": "text", "text": text}
        citations = []
        for piece in _split(rng, text, 12):
            delta({"type": "text_delta", "text": piece})
            if cited and rng.random() < 0.3:
                citation = {
                    "type": "char_location",
                    "cited_text": _words(rng, 20),
                    "document_index": 0,
                    "document_title": "Doc",
                    "start_char_index": 0,
                    "end_char_index": 20,
                }
                citations.append(citation)
                delta({"type": "citations_delta", "citation": citation})
        if cited:
            final["citations"] = citations
    elif kind == "thinking":
        thinking = _words(rng, rng.randint(0, 300))
        signature = "".join(
            rng.choice(string.ascii_letters + string.digits + "+/=") for _ in range(120)
        )
        start({"type": "thinking", "thinking": "", "signature": ""})
        for piece in _split(rng, thinking, 8):
            delta({"type": "thinking_delta", "thinking": piece})
        delta({"type": "signature_delta", "signature": signature})
        final = {"type": "thinking", "thinking": thinking, "signature": signature}
    elif kind == "redacted_thinking":
        final = {"type": "redacted_thinking", "data": _words(rng, 60)}
        start(dict(final))
    elif kind == "tool_use":
        tool_input = {f"arg{i}": _json_value(rng) for i in range(rng.randint(0, 5))}
        tool_id = "toolu_" + "".join(rng.choice(string.ascii_letters) for _ in range(20))
        start({"type": "tool_use", "id": tool_id, "name": "kb_query", "input": {}})
        text = json.dumps(tool_input, ensure_ascii=rng.random() < 0.5) if tool_input else ""
        delta({"type": "input_json_delta", "partial_json": ""})
        for piece in _split(rng, text, 25):
            delta({"type": "input_json_delta", "partial_json": piece})
        final = {"type": "tool_use", "id": tool_id, "name": "kb_query", "input": tool_input}
    else:  # a vendor type nobody models, with a delta type nobody knows (the generic rule)
        final = {"type": "mystery_block", "payload": {"n": rng.randint(0, 9)}}
        start(dict(final))
        note = "ab"[: rng.randint(0, 2)]
        delta({"type": "mystery_delta", "anything": 1, "note": note})
        final |= {"anything": 1, "note": note}
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    _ping(rng, events)
    return final


def generate(
    rng: random.Random,
    *,
    kinds: list[str] | None = None,
    stop_reason: str | None = None,
    error: bool = False,
    unknown: bool = True,
) -> Transcript:
    """One transcript: random blocks (or ``kinds``), pings, stop reason and usage."""
    choices = ["text", "thinking", "tool_use", "redacted_thinking"]
    if unknown:
        choices.append("mystery_block")
    if kinds is None:
        kinds = [rng.choice(choices) for _ in range(rng.randint(0, 5))]
    msg_id = "msg_" + "".join(rng.choice(string.ascii_letters) for _ in range(24))
    start_usage = {
        "input_tokens": rng.randint(1, 5000),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": rng.randint(0, 100),
        "output_tokens": 1,
    }
    events: list[Event] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-opus-5-5",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    ]
    _ping(rng, events)
    blocks = [_block(rng, i, kind, events) for i, kind in enumerate(kinds)]
    if stop_reason is None:
        stop_reason = rng.choice(["end_turn", "tool_use", "max_tokens", "refusal", "stop_sequence"])
    stop_sequence = "STOP" if stop_reason == "stop_sequence" else None
    stop_details = (
        {"type": "refusal", "category": "cyber", "explanation": "declined"}
        if stop_reason == "refusal"
        else None
    )
    end_usage: dict[str, Any] = {"output_tokens": rng.randint(1, 5000)}
    if rng.random() < 0.5:
        end_usage["input_tokens"] = start_usage["input_tokens"]
        end_usage["cache_read_input_tokens"] = rng.randint(0, 100)
    usage = {**start_usage, **end_usage}
    if error:
        events.append(
            (
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            )
        )
    else:
        delta_body: dict[str, Any] = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        if stop_details is not None:
            delta_body["stop_details"] = stop_details
        events.append(
            ("message_delta", {"type": "message_delta", "delta": delta_body, "usage": end_usage})
        )
        events.append(("message_stop", {"type": "message_stop"}))
    message = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-5-5",
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }
    if stop_details is not None:
        message["stop_details"] = stop_details
    return Transcript(events, message, error)


def tokens(unit: Any) -> int:
    """What the fake charges for one part of a prompt: a token per 4 bytes of its JSON."""
    return max(1, len(json.dumps(unit, separators=(",", ":")).encode()) // 4)


def _plain(unit: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in unit.items() if k != "cache_control"}


def prompt_units(body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """The prompt in the order the API reads it (each tool, each system block,
    each message block with its role), ``cache_control`` left out, and the
    positions of its breakpoints (the automatic one on the last unit)."""
    units: list[Any] = []
    marks: list[int] = []
    for tool in body.get("tools") or []:
        units.append(["tool", _plain(tool)])
        if "cache_control" in tool:
            marks.append(len(units) - 1)
    system = body.get("system")
    if isinstance(system, str):
        units.append(["system", system])
    for block in system if isinstance(system, list) else []:
        units.append(["system", _plain(block)])
        if "cache_control" in block:
            marks.append(len(units) - 1)
    for message in body.get("messages") or []:
        content = message["content"]
        for block in [content] if isinstance(content, str) else content:
            units.append([message["role"], block if isinstance(block, str) else _plain(block)])
            if isinstance(block, dict) and "cache_control" in block:
                marks.append(len(units) - 1)
    if body.get("cache_control") is not None and units:
        marks.append(len(units) - 1)
    return units, sorted(set(marks))


LOOKBACK = 20
"""How many blocks before a breakpoint the API looks for a prefix it wrote."""


@dataclass
class PromptCache:
    """The API's prompt cache, as its documentation describes it: a request
    writes the prefix up to each of its breakpoints (``cache_creation_input_tokens``,
    beyond what it read) and reads the longest prefix an earlier request wrote
    with the same bytes and model, ending at a breakpoint or up to
    :data:`LOOKBACK` blocks before one (``cache_read_input_tokens``);
    ``input_tokens`` is the rest. Nothing is written or read without a
    breakpoint. (The API's minimum cacheable length is not modelled.)"""

    written: dict[str, int] = field(default_factory=dict)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        units, marks = prompt_units(body)
        sizes = list(itertools.accumulate(tokens(u) for u in units))
        total = sizes[-1] if sizes else 0

        def key(mark: int) -> str:
            text = json.dumps([body.get("model"), units[: mark + 1]], sort_keys=True)
            return hashlib.sha256(text.encode()).hexdigest()

        # each breakpoint looks back over the LOOKBACK blocks up to it for a prefix written before
        hits = (
            sizes[at]
            for mark in reversed(marks)
            for at in range(mark, max(-1, mark - LOOKBACK), -1)
            if key(at) in self.written
        )
        read = next(hits, 0)
        created = sizes[marks[-1]] - read if marks else 0
        for mark in marks:
            self.written[key(mark)] = sizes[mark]
        return {
            "input_tokens": total - read - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }


def with_usage(transcript: Transcript, counts: dict[str, int]) -> Transcript:
    """``transcript`` reporting ``counts`` (input and cache counts) on both paths."""
    events = copy.deepcopy(transcript.events)
    for name, data in events:
        if name == "message_start":
            data["message"]["usage"].update(counts)
        elif name == "message_delta":
            for key in counts:
                data["usage"].pop(key, None)
    message = copy.deepcopy(transcript.message)
    message["usage"].update(counts)
    return Transcript(events, message, transcript.error)


@dataclass
class Seen:
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeMessagesAPI(FakeServer):
    """``POST /v1/messages`` answering ``transcript`` (SSE when the body asks to
    stream, the JSON message otherwise), or ``status`` with an error body.
    SSE bytes are written in pieces cut at random points, so frames and even
    UTF-8 sequences straddle writes."""

    transcript: Transcript | None = None
    status: int = 200
    seed: int = 0
    chunk_most: int = 200
    seen: list[Seen] = field(default_factory=list)
    payload: bytes | None = None  # a whole SSE body to send instead of the transcript's
    stalled: bool = False  # write the body, then nothing until ``released`` is set
    released: asyncio.Event = field(default_factory=asyncio.Event)
    cut: bool = False  # write the body, then drop the connection without ending it
    script: list[Transcript] = field(default_factory=list)  # answered first, one a turn
    caching: bool = False  # honour cache_control (PromptCache) in the usage answered
    cache: PromptCache = field(default_factory=PromptCache)
    counted: list[Seen] = field(default_factory=list)  # the count_tokens requests
    props: dict[str, Any] | None = None  # GET /props, as llama.cpp's server answers it
    models: list[str] | None = None  # GET /v1/models lists these, as a local server does

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self.handle)
        app.router.add_post("/v1/messages/count_tokens", self.count)
        if self.props is not None:
            props = self.props

            async def answer_props(_: web.Request) -> web.Response:
                return web.json_response(props)

            app.router.add_get("/props", answer_props)
        if self.models is not None:
            listed = {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}

            async def answer_models(_: web.Request) -> web.Response:
                return web.json_response(listed)

            app.router.add_get("/v1/models", answer_models)
        return app

    def _refusal(self) -> web.Response | None:
        if self.status == 200:
            return None
        kind = "overloaded_error" if self.status == 529 else "rate_limit_error"
        return web.json_response(
            {"type": "error", "error": {"type": kind, "message": "busy"}}, status=self.status
        )

    async def count(self, request: web.Request) -> web.Response:
        """The input tokens the body's prompt takes, as a turn would be charged them."""
        body = await request.json()
        self.counted.append(Seen(dict(request.headers), body))
        refused = self._refusal()
        if refused is not None:
            return refused
        units, _ = prompt_units(body)
        return web.json_response({"input_tokens": sum(tokens(u) for u in units)})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(Seen(dict(request.headers), body))
        refused = self._refusal()
        if refused is not None:
            return refused
        if self.script:
            self.transcript = self.script.pop(0)
        if self.caching and self.transcript is not None:
            self.transcript = with_usage(self.transcript, self.cache.usage(body))
        assert self.transcript is not None or self.payload is not None
        if not body.get("stream"):
            assert self.transcript is not None
            return web.json_response(self.transcript.message)
        resp = web.StreamResponse(
            headers={
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
            }
        )
        await resp.prepare(request)
        data = self.payload if self.payload is not None else self.transcript.sse()  # type: ignore[union-attr]
        rng = random.Random(self.seed + len(self.seen))
        pos = 0
        while pos < len(data):
            step = rng.randint(1, self.chunk_most)
            await resp.write(data[pos : pos + step])
            pos += step
        if self.stalled:
            await self.released.wait()
        if self.cut:
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp
