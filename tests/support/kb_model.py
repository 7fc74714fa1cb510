"""Pretend models that read the sample KB: they ask ``kb_query`` for whom Miss
Muffet fears, then answer from the names in the engine's result.

``ollama_reader`` is a :class:`fake_ollama.FakeOllama` script (the real wire);
:class:`KBModel` is an in-process :class:`~vaelii_llm._protocol.Provider` whose
turns can be held on an event, refuse, or fail, for the web backend's tests.
``echoer`` and ``keeps_asking`` are scripts for a model beside an MCP server's
``echo`` and ``die`` tools (tests/support/mcp_tools_server.py).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import tool_call
from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm.providers import stub

GOAL = "(afraidOf MissMuffet ?who)"
QUESTION = "Who is Miss Muffet afraid of?"
NAMES = ("Muffet", "ItsyBitsy", "Fang")
ANSWER = "Miss Muffet is afraid of Muffet, ItsyBitsy and Fang."


def answer_from(result: str) -> str:
    """The answer a model would write from the engine's bindings, and only from them."""
    names = re.findall(r"\?who (\w+)\}", result)
    if not names:
        return "The knowledge base names no one."
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"Miss Muffet is afraid of {listed}."


def ollama_reader(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Ask for kb_query; once its result is back, stream the answer word by word."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return [chunk(tool_calls=[tool_call("kb_query", {"goal": GOAL})]), final()]
    words = re.findall(r"\S+\s*", answer_from(results[-1]["content"]))
    return [chunk(word) for word in words] + [final()]


def ollama_keeps_asking(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [chunk(tool_calls=[tool_call("kb_query", {"goal": GOAL})]), final()]


def ollama_truncated(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [chunk("Miss Muffet is afraid"), final(done_reason="length")]


def _question(request: Request) -> str:
    first = request.messages[0].content
    return first if isinstance(first, str) else ""


def _tool_results(message: Message) -> list[ToolResultBlock]:
    if isinstance(message.content, str):
        return []
    return [b for b in message.content if isinstance(b, ToolResultBlock)]


class KBModel(ProviderBase):
    """Reads the KB like ``ollama_reader``; the question's words change its turn:

    ``slow``     the turn waits for :attr:`gate`, within the request's ``timeout_ms``
                 (past it: :class:`~vaelii_llm.errors.LLMTimeout`, as a backend raises);
    ``refuse``   the first turn refuses;
    ``explode``  the turn after the tool result fails with an LLMApiError (a 500);
    ``bug``      the first turn raises a RuntimeError, a bug in the provider.
    """

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = 0
        self.arrivals: asyncio.Queue[None] = asyncio.Queue()  # one item per slow turn held
        self.closed = False
        self._ids = itertools.count(1)

    async def aclose(self) -> None:
        self.closed = True

    async def _respond(self, request: Request) -> Response:
        question = _question(request)
        results = _tool_results(request.messages[-1])
        if "slow" in question:
            self.waiting += 1
            self.arrivals.put_nowait(None)
            try:
                async with asyncio.timeout(request.timeout_ms / 1000):
                    await self.gate.wait()
            except TimeoutError:
                raise errors.LLMTimeout("kb model", request.timeout_ms, "body") from None
            finally:
                self.waiting -= 1
        if "bug" in question:
            raise RuntimeError("a bug in the provider")
        if "refuse" in question:
            return Response(content=[], stop_reason="refusal")
        if results:
            if "explode" in question:
                raise errors.LLMApiError("kb model", 500, "the model fell over")
            text = answer_from(results[-1].content)
            return Response(content=[TextBlock(text=text)], stop_reason="end_turn")
        use = ToolUseBlock(id=f"call_{next(self._ids)}", name="kb_query", input={"goal": GOAL})
        return Response(content=[use], stop_reason="tool_use")

    async def complete(self, request: Request) -> Response:
        return await self._respond(request)

    async def stream(
        self, request: Request, *, deltas: bool = False
    ) -> AsyncGenerator[StreamItem, None]:
        response = await self._respond(request)
        async with (
            stub.provider(script=[response]) as words,  # the stub's delta shapes
            aclosing(words.stream(request, deltas=deltas)) as items,
        ):
            async for item in items:
                yield item


def echoer(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Calls ``echo`` (then ``die`` when asked to), then answers with what came back."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    plan = ["die", "echo"] if "die" in question else ["echo"]
    if len(results) < len(plan):
        name = plan[len(results)]
        given = {"text": "from the server"} if name == "echo" else {}
        return [chunk(tool_calls=[tool_call(name, given)]), final()]
    return [chunk("The server said: " + results[-1]["content"]), final()]


def keeps_asking(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [chunk(tool_calls=[tool_call("echo", {"text": "again"})]), final()]
