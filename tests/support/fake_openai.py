"""A fake OpenAI-compatible server on loopback, writing the wire as vLLM, OpenAI and llama.cpp do.

``POST /v1/chat/completions`` answers a :class:`Transcript`: streamed
(``"stream": true``), it is SSE, one ``data: {chunk}`` frame each, then
``data: [DONE]``; whole, it is the ``chat.completion`` the same turn gives.
The chunk shapes follow each server's own:

* every style opens with a chunk whose delta is ``{"role": "assistant",
  "content": ""}``; tool calls come by ``index``, the first delta of each
  carrying ``id``, ``type`` and ``function.name`` with empty ``arguments``,
  the following ones argument pieces only; ``finish_reason`` comes on a
  chunk of its own with an empty delta;
* ``"vllm"``: reasoning as ``reasoning_content``, ``"usage": null`` on every
  chunk, a ``stop_reason`` beside ``finish_reason`` (the stop string when
  one matched), and with ``stream_options.include_usage`` a last chunk whose
  ``choices`` is empty carrying the usage;
* ``"openai"``: no reasoning, a ``refusal`` field (null, or the refusal in
  pieces), ``system_fingerprint``, the same last usage chunk, cached tokens
  under ``prompt_tokens_details``;
* ``"llamacpp"``: reasoning as ``reasoning_content``, no usage chunk: the
  usage and ``timings`` ride on the finish chunk.

``GET /v1/models`` lists :data:`MODELS`, and ``GET /props`` answers ``props``
when given (llama.cpp's server's own, ``chat_template_caps`` in it); a ``Bearer`` key other than
``key`` (when set) is a 401 with OpenAI's error body. ``mode`` switches on a
hostile behaviour (the :class:`FakeOpenAI` docstring).

Used by tests/providers/test_openai*.py, tests/providers/test_neutral_loop.py and
tests/bench/bench_openai.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Literal

from aiohttp import web

from tests.support.loopback import FakeServer

MODEL = "Qwen/Qwen3-8B"
MODELS = [MODEL, "meta-llama/Llama-3.1-8B-Instruct"]
CREATED = 1_767_225_600
Style = Literal["vllm", "openai", "llamacpp"]


@dataclass
class Call:
    """A tool call as a turn writes it: its id, name and arguments string, in pieces."""

    id: str
    name: str
    pieces: list[str]

    @property
    def arguments(self) -> str:
        return "".join(self.pieces)


@dataclass
class Turn:
    """One assistant turn, in the pieces its stream sends."""

    thinking: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    finish_reason: str | None = "stop"
    stop_string: str | None = None
    usage: dict[str, Any] = field(
        default_factory=lambda: {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}
    )
    id: str = "chatcmpl-fake-1"
    model: str = MODEL


@dataclass
class Transcript:
    """A turn as SSE chunks (each frame's JSON, ``[DONE]`` apart) and as the whole completion."""

    chunks: list[dict[str, Any]]
    completion: dict[str, Any]

    def sse(self, *, done: bool = True) -> bytes:
        frames = [f"data: {json.dumps(c, separators=(',', ':'))}\n\n" for c in self.chunks]
        if done:
            frames.append("data: [DONE]\n\n")
        return "".join(frames).encode()


def transcript(turn: Turn, style: Style = "vllm", *, include_usage: bool = True) -> Transcript:
    """``turn`` written as ``style``'s server writes it."""
    head: dict[str, Any] = {
        "id": turn.id,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": turn.model,
    }
    if style == "openai":
        head["system_fingerprint"] = "fp_fake"
    return Transcript(_chunks(turn, style, head, include_usage), _completion(turn, style))


def _chunks(
    turn: Turn, style: Style, head: dict[str, Any], include_usage: bool
) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
        choice["finish_reason"] = finish
        if style == "vllm":
            choice["stop_reason"] = turn.stop_string if finish else None
        out = {**head, "choices": [choice], **extra}
        if style in ("vllm", "openai") and include_usage and "usage" not in out:
            out["usage"] = None
        return out

    opening: dict[str, Any] = {"role": "assistant", "content": ""}
    if style == "openai":
        opening["refusal"] = None
    chunks = [chunk(opening)]
    chunks += [chunk({"reasoning_content": p}) for p in turn.thinking if style != "openai"]
    chunks += [chunk({"content": piece}) for piece in turn.text]
    chunks += [chunk({"refusal": piece}) for piece in turn.refusal]
    for index, call in enumerate(turn.calls):
        function = {"name": call.name, "arguments": ""}
        opened = {"index": index, "id": call.id, "type": "function", "function": function}
        chunks.append(chunk({"tool_calls": [opened]}))
        for piece in call.pieces:
            more = {"index": index, "function": {"arguments": piece}}
            chunks.append(chunk({"tool_calls": [more]}))
    if turn.finish_reason is not None:
        if style == "llamacpp":
            timings = {"prompt_n": 31, "predicted_n": 12, "predicted_per_second": 52.1}
            chunks.append(chunk({}, turn.finish_reason, usage=turn.usage, timings=timings))
        else:
            chunks.append(chunk({}, turn.finish_reason))
            if include_usage:
                chunks.append({**head, "choices": [], "usage": turn.usage})
    return chunks


def _completion(turn: Turn, style: Style) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(turn.text) or None}
    if turn.thinking and style != "openai":
        message["reasoning_content"] = "".join(turn.thinking)
    if style == "openai" or turn.refusal:
        message["refusal"] = "".join(turn.refusal) or None
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.calls
        ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": turn.finish_reason,
    }
    if style == "vllm":
        choice["stop_reason"] = turn.stop_string
    return {
        "id": turn.id,
        "object": "chat.completion",
        "created": CREATED,
        "model": turn.model,
        "choices": [choice],
        "usage": turn.usage,
    }


# -- random turns --------------------------------------------------------------------


def split(rng: random.Random, text: str, most: int = 6) -> list[str]:
    """``text`` in 1..most pieces at random cut points (empty pieces dropped)."""
    if not text:
        return []
    cuts = sorted(rng.randint(0, len(text)) for _ in range(rng.randint(0, most - 1)))
    points = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def words(rng: random.Random, n: int) -> str:
    alphabet = string.ascii_letters + '  ,.é—\n"\\/{}ü😀'
    return "".join(rng.choice(alphabet) for _ in range(n))


def json_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randint(0, 5 if depth < 3 else 3)
    if pick == 0:
        return rng.randint(-(10**6), 10**6)
    if pick == 1:
        return words(rng, rng.randint(0, 20))
    if pick == 2:
        return rng.choice([True, False, None])
    if pick == 3:
        return rng.random() * 100
    if pick == 4:
        return {f"k{i}": json_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def random_turn(rng: random.Random, *, calls: int | None = None) -> Turn:
    """Reasoning, text and tool calls in random measure, each split at random points."""
    turn = Turn(id=f"chatcmpl-{rng.randrange(10**9)}")
    if rng.random() < 0.5:
        turn.thinking = split(rng, words(rng, rng.randint(1, 80)))
    if rng.random() < 0.7:
        turn.text = split(rng, words(rng, rng.randint(1, 120)))
    for n in range(rng.randint(0, 3) if calls is None else calls):
        arguments = json.dumps({f"a{i}": json_value(rng) for i in range(rng.randint(0, 4))})
        turn.calls.append(Call(f"call_{rng.randrange(10**9)}_{n}", f"kb_tool_{n}", []))
        turn.calls[-1].pieces = split(rng, arguments, 8)
    turn.finish_reason = "tool_calls" if turn.calls else rng.choice(["stop", "stop", "length"])
    if turn.finish_reason == "length":
        turn.calls = []
    turn.usage = {
        "prompt_tokens": rng.randint(1, 5000),
        "completion_tokens": rng.randint(1, 5000),
        "total_tokens": 0,
    }
    if rng.random() < 0.3:
        turn.usage["prompt_tokens_details"] = {"cached_tokens": rng.randint(0, 100)}
    return turn


# -- the server ----------------------------------------------------------------------

Script = Callable[[dict[str, Any]], Transcript]


def hello(_body: dict[str, Any]) -> Transcript:
    return transcript(Turn(text=["Hello", "! How are you", " today?"]))


@dataclass
class FakeOpenAI(FakeServer):
    """The fake server. ``script`` maps a request body to its transcript;
    ``mode`` switches on a hostile behaviour for ``/chat/completions``:

    ``"error_mid_stream"`` a ``data: {"error": …}`` frame after two chunks;
    ``"error_event"`` an ``event: error`` frame after two chunks;
    ``"error_200"`` a whole answer that is OpenAI's error object, status 200;
    ``"stall"`` two chunks, then nothing (the connection stays open);
    ``"drip"`` the stream one byte at a time, 50 ms apart;
    ``"html"`` a proxy's 200 HTML page; ``"bad_gateway"`` a proxy's 502 HTML page;
    ``"cut"`` two chunks, then the connection dropped mid-body;
    ``"truncated"`` the transcript without its finish chunk, usage and
    ``[DONE]``, then EOF;
    ``"no_done"`` the transcript without ``[DONE]``, then EOF;
    ``"huge"`` one frame over the SSE decoder's 16 MiB cap (whole: 40 MiB);
    ``"deep"`` a chunk nested 100,000 arrays deep;
    ``"held_after_done"`` the whole transcript, then nothing (the body never ends).
    """

    script: Script = hello
    mode: str | None = None
    key: str | None = None
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    peers: set[Any] = field(default_factory=set)
    disconnects: int = 0
    cache: bool = False
    """Encode each transcript once (by identity), for the benchmark."""
    props: dict[str, Any] | None = None
    """What ``GET /props`` answers, as llama.cpp's server does (None: no such route)."""
    _encoded: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    _disconnected: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        if self.props is not None:
            app.router.add_get("/props", self._props)
        return app

    async def wait_disconnects(self, count: int) -> None:
        """Return once ``count`` clients have gone mid-response (an event, no clock)."""
        while self.disconnects < count:
            self._disconnected = asyncio.Event()
            await self._disconnected.wait()

    @property
    def connections(self) -> int:
        return len(self.peers)

    def _refused(self, request: web.Request) -> web.Response | None:
        self.headers.append(dict(request.headers))
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        if self.key is not None and request.headers.get("Authorization") != f"Bearer {self.key}":
            error = {
                "message": "Incorrect API key provided.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
            return web.json_response({"error": error}, status=401)
        return None

    async def _props(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        return web.json_response(self.props)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        data = [
            {"id": m, "object": "model", "created": CREATED, "owned_by": "vllm"} for m in MODELS
        ]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        body = await request.json()
        self.bodies.append(body)
        model = body.get("model")
        if model is not None and model not in MODELS:
            error = {
                "message": f"The model `{model}` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            }
            return web.json_response({"error": error}, status=404)
        mode = self.mode
        if mode == "html":
            return web.Response(
                text="<html><body>Welcome to nginx!</body></html>", content_type="text/html"
            )
        if mode == "bad_gateway":
            return web.Response(
                status=502,
                content_type="text/html",
                text="<html><head><title>502 Bad Gateway</title></head></html>",
            )
        if mode == "error_200":
            error = {"message": "The server had an error", "type": "server_error", "code": None}
            return web.json_response({"error": error})
        if mode == "deep":
            return web.Response(
                body=b"data: " + b"[" * 100_000 + b"\n\n", content_type="text/event-stream"
            )
        if mode == "huge" and not body.get("stream"):
            return web.Response(
                body=b'{"x": "' + b"a" * (40 * 2**20) + b'"}', content_type="application/json"
            )
        script = self.script(body)
        if self.cache and mode is None:
            return await self._cached(request, body, script)
        if not body.get("stream"):
            if mode in ("stall", "drip", "cut", "truncated"):
                return await self._whole_misbehaving(request, script)
            return web.json_response(script.completion)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await self._write(request, response, script)
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            if self._disconnected is not None:
                self._disconnected.set()
            raise
        return response

    async def _write(
        self, request: web.Request, response: web.StreamResponse, script: Transcript
    ) -> None:
        mode = self.mode
        frames = [f"data: {json.dumps(c)}\n\n".encode() for c in script.chunks]
        frames.append(b"data: [DONE]\n\n")
        if mode in ("error_mid_stream", "error_event", "stall", "cut"):
            frames = frames[:2]
        elif mode == "truncated":
            frames = frames[:-3]
        elif mode == "no_done":
            frames = frames[:-1]
        elif mode == "huge":
            frames = [frames[0], b"data: " + b"a" * (17 * 2**20) + b"\n\n"]
        for frame in frames:
            if mode == "drip":
                for byte in frame:
                    await response.write(bytes([byte]))
                    await asyncio.sleep(0.05)
            else:
                await response.write(frame)
        if mode == "error_mid_stream":
            await response.write(
                b'data: {"error":{"message":"upstream overloaded","type":"server_error"}}\n\n'
            )
        if mode == "error_event":
            await response.write(b'event: error\ndata: {"error":{"message":"boom"}}\n\n')
        if mode in ("stall", "held_after_done"):
            await asyncio.sleep(3600)
        if mode == "cut":
            assert request.transport is not None
            request.transport.close()
            return
        await response.write_eof()

    async def _whole_misbehaving(
        self, request: web.Request, script: Transcript
    ) -> web.StreamResponse:
        """A whole answer's body stalled, dripped, cut or ended at its half."""
        data = json.dumps(script.completion).encode()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            if self.mode == "drip":
                for byte in data:
                    await response.write(bytes([byte]))
                    await asyncio.sleep(0.05)
            await response.write(data[: len(data) // 2])
            if self.mode == "stall":
                await asyncio.sleep(3600)
            if self.mode == "cut":
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return response

    async def _cached(
        self, request: web.Request, body: dict[str, Any], script: Transcript
    ) -> web.StreamResponse:
        key = id(script)
        if key not in self._encoded:
            self._encoded[key] = (script.sse(), json.dumps(script.completion).encode())
        sse, whole = self._encoded[key]
        if not body.get("stream"):
            return web.Response(body=whole, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        view = memoryview(sse)
        for start in range(0, len(view), 65536):
            await response.write(view[start : start + 65536])
        await response.write_eof()
        return response
