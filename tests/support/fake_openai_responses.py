"""A fake Responses API server on loopback, writing the wire as OpenAI's API reference shows it.

``POST /v1/responses`` answers a :class:`Turn`: whole, the ``response``
object; streamed (``"stream": true``), SSE with an ``event:`` line naming
each event's ``type`` and a growing ``sequence_number``, in the order the
reference's streaming-events page lists them: ``response.created``,
``response.in_progress``, then per output item ``response.output_item.added``,
its parts and deltas (``response.content_part.added``,
``response.output_text.delta``…, ``response.reasoning_summary_part.added``,
``response.reasoning_summary_text.delta``…,
``response.function_call_arguments.delta``…), their ``.done`` events and
``response.output_item.done`` with the item whole; last
``response.completed`` (or ``response.incomplete``) holding the response
the whole answer is. ``POST /v1/responses/input_tokens`` answers
``{"object": "response.input_tokens", "input_tokens": n}``; ``GET
/v1/models`` lists :data:`MODELS`. Every answer carries ``x-request-id``
and OpenAI's ``x-ratelimit-*`` headers. ``mode`` switches on a hostile
behaviour (the :class:`FakeResponses` docstring).

Used by tests/providers/test_openai_responses.py, tests/providers/test_neutral_loop.py,
tests/providers/test_providers.py, tests/transport/test_http_skeleton.py and
tests/bench/bench_responses.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from aiohttp import web

from tests.support.loopback import FakeServer

MODEL = "gpt-fake-1"
MODELS = [MODEL]
CREATED = 1_767_225_600
REQUEST_ID = "req_0123456789abcdef"
RATE_HEADERS = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-reset-requests": "120ms",
}


@dataclass
class Item:
    """One output item in the pieces its stream sends: ``kind`` is
    ``message`` (text pieces, or a refusal's), ``reasoning`` (summary parts,
    each in pieces; ``encrypted`` its ``encrypted_content``) or
    ``function_call`` (``name``, ``call_id``, argument pieces)."""

    kind: str
    pieces: list[str] = field(default_factory=list)
    parts: list[list[str]] = field(default_factory=list)
    name: str = ""
    call_id: str = ""
    refusal: bool = False
    encrypted: str | None = None
    status: str = "completed"
    id: str = ""

    def whole(self) -> dict[str, Any]:
        """The item as ``response.output_item.done`` and the final response list it."""
        if self.kind == "message":
            text = "".join(self.pieces)
            part: dict[str, Any] = (
                {"type": "refusal", "refusal": text}
                if self.refusal
                else {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            )
            return {
                "id": self.id,
                "type": "message",
                "status": self.status,
                "role": "assistant",
                "content": [part],
            }
        if self.kind == "reasoning":
            out: dict[str, Any] = {
                "id": self.id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "".join(p)} for p in self.parts],
            }
            if self.encrypted is not None:
                out["encrypted_content"] = self.encrypted
            return out
        return {
            "id": self.id,
            "type": "function_call",
            "status": self.status,
            "arguments": "".join(self.pieces),
            "call_id": self.call_id,
            "name": self.name,
        }

    def opened(self) -> dict[str, Any]:
        """The item as ``response.output_item.added`` shows it: nothing said yet."""
        whole = self.whole()
        if self.kind == "message":
            return {**whole, "status": "in_progress", "content": []}
        if self.kind == "reasoning":
            return {**whole, "summary": []}
        return {**whole, "status": "in_progress", "arguments": ""}


@dataclass
class Turn:
    """One response: its items, its status and usage."""

    items: list[Item] = field(default_factory=list)
    status: str = "completed"
    reason: str | None = None
    usage: dict[str, Any] = field(
        default_factory=lambda: {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 87,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 123,
        }
    )
    id: str = "resp_fake_1"
    model: str = MODEL

    def __post_init__(self) -> None:
        prefix = {"message": "msg", "reasoning": "rs", "function_call": "fc"}
        for n, item in enumerate(self.items):
            item.id = item.id or f"{prefix[item.kind]}_{n}"

    def response(self, *, final: bool = True) -> dict[str, Any]:
        """The ``response`` object: as the whole answer and the last event
        hold it, or (``final=False``) as ``response.created`` shows it."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": CREATED,
            "status": self.status if final else "in_progress",
            "error": None,
            "incomplete_details": {"reason": self.reason} if final and self.reason else None,
            "instructions": None,
            "model": self.model,
            "output": [item.whole() for item in self.items] if final else [],
            "parallel_tool_calls": True,
            "store": False,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "usage": self.usage if final else None,
        }

    def events(self) -> list[dict[str, Any]]:
        """The streamed events, in order, without their ``sequence_number``."""
        out: list[dict[str, Any]] = [
            {"type": "response.created", "response": self.response(final=False)},
            {"type": "response.in_progress", "response": self.response(final=False)},
        ]
        for index, item in enumerate(self.items):
            at = {"output_index": index}
            on = {"item_id": item.id, **at}
            out.append({"type": "response.output_item.added", **at, "item": item.opened()})
            if item.kind == "message":
                kind = "refusal" if item.refusal else "output_text"
                part = item.whole()["content"][0]
                empty = {**part, kind if item.refusal else "text": ""}
                out.append(
                    {"type": "response.content_part.added", **on, "content_index": 0, "part": empty}
                )
                for piece in item.pieces:
                    delta = {
                        "type": f"response.{kind}.delta",
                        **on,
                        "content_index": 0,
                        "delta": piece,
                    }
                    if not item.refusal:
                        delta["logprobs"] = []
                    out.append(delta)
                done = {"type": f"response.{kind}.done", **on, "content_index": 0}
                done["refusal" if item.refusal else "text"] = "".join(item.pieces)
                if not item.refusal:
                    done["logprobs"] = []
                out.append(done)
                out.append(
                    {"type": "response.content_part.done", **on, "content_index": 0, "part": part}
                )
            elif item.kind == "reasoning":
                for n, pieces in enumerate(item.parts):
                    summary = {**on, "summary_index": n}
                    text = "".join(pieces)
                    out.append(
                        {
                            "type": "response.reasoning_summary_part.added",
                            **summary,
                            "part": {"type": "summary_text", "text": ""},
                        }
                    )
                    out.extend(
                        {"type": "response.reasoning_summary_text.delta", **summary, "delta": piece}
                        for piece in pieces
                    )
                    out.append(
                        {"type": "response.reasoning_summary_text.done", **summary, "text": text}
                    )
                    out.append(
                        {
                            "type": "response.reasoning_summary_part.done",
                            **summary,
                            "part": {"type": "summary_text", "text": text},
                        }
                    )
            else:
                out.extend(
                    {"type": "response.function_call_arguments.delta", **on, "delta": piece}
                    for piece in item.pieces
                )
                out.append(
                    {
                        "type": "response.function_call_arguments.done",
                        **on,
                        "name": item.name,
                        "arguments": "".join(item.pieces),
                    }
                )
            out.append({"type": "response.output_item.done", **at, "item": item.whole()})
        terminal = "response.incomplete" if self.status == "incomplete" else "response.completed"
        out.append({"type": terminal, "response": self.response()})
        return out


def sse(events: list[dict[str, Any]]) -> bytes:
    """``events`` numbered and written as SSE frames, an ``event:`` line each."""
    frames = []
    for number, event in enumerate(events):
        data = json.dumps({**event, "sequence_number": number}, separators=(",", ":"))
        frames.append(f"event: {event['type']}\ndata: {data}\n\n")
    return "".join(frames).encode()


def hello(_body: dict[str, Any]) -> Turn:
    return Turn(items=[Item("message", ["Hello", "! How can I", " help?"])])


FAILURE = {"code": "server_error", "message": "The model failed to generate a response."}


@dataclass
class FakeResponses(FakeServer):
    """The fake server. ``script`` maps a request body to its turn; ``mode``:

    ``"failed"`` (streamed: created, then ``response.failed``; whole: the
    failed response, status 200); ``"error_event"`` two events, then an
    ``error`` event; ``"error_200"`` a whole answer that is OpenAI's error
    object; ``"stall"`` two events, then nothing; ``"cut"`` two events, then
    the connection dropped; ``"truncated"`` every event but the last, then
    EOF; ``"html"`` a proxy's 200 HTML page; ``"no_count"`` no
    ``/responses/input_tokens`` route (a 404).
    """

    script: Callable[[dict[str, Any]], Turn] = hello
    mode: str | None = None
    count: int = 42
    bodies: list[dict[str, Any]] = field(default_factory=list)
    counted: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    disconnects: int = 0

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/responses", self._responses)
        if self.mode != "no_count":
            app.router.add_post("/v1/responses/input_tokens", self._count)
        app.router.add_get("/v1/models", self._models)
        return app

    def _answer(self, payload: Any, status: int = 200) -> web.Response:
        return web.json_response(
            payload, status=status, headers={"x-request-id": REQUEST_ID, **RATE_HEADERS}
        )

    async def _models(self, request: web.Request) -> web.StreamResponse:
        data = [
            {"id": m, "object": "model", "created": CREATED, "owned_by": "fake"} for m in MODELS
        ]
        return self._answer({"object": "list", "data": data})

    async def _count(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        self.counted.append(await request.json())
        return self._answer({"object": "response.input_tokens", "input_tokens": self.count})

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        body = await request.json()
        self.bodies.append(body)
        mode = self.mode
        if mode == "html":
            return web.Response(
                text="<html><body>Welcome to nginx!</body></html>", content_type="text/html"
            )
        if mode == "error_200":
            return self._answer({"error": {**FAILURE, "type": "server_error", "param": None}})
        turn = self.script(body)
        if mode == "failed":
            turn.status = "failed"
        if not body.get("stream"):
            whole = turn.response()
            if mode == "failed":
                whole = {**whole, "output": [], "usage": None, "error": FAILURE}
            return self._answer(whole)
        events = turn.events()
        if mode == "failed":
            failed = {**turn.response(), "output": [], "usage": None, "error": FAILURE}
            events = [events[0], {"type": "response.failed", "response": failed}]
        elif mode == "error_event":
            events = [
                *events[:2],
                {
                    "type": "error",
                    "code": "server_error",
                    "message": "upstream overloaded",
                    "param": None,
                },
            ]
        elif mode in ("stall", "cut"):
            events = events[:2]
        elif mode == "truncated":
            events = events[:-1]
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "x-request-id": REQUEST_ID,
                **RATE_HEADERS,
            }
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(sse(events))
            if mode == "stall":
                await asyncio.sleep(3600)
            if mode == "cut":
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return response
