"""Quickstart: a model reads the embedded sample KB through its read-only tools.

Run ``python examples/quickstart.py``. With no configuration the scripted stub
plays the model (so this runs with no key, no socket and no model) while the
tool calls run for real against the sample KB. Set ``VAELII_LLM_PROVIDER=ollama``
(an Ollama running, ``VAELII_OLLAMA_MODEL`` pulled), ``anthropic`` (a
credential in ``ANTHROPIC_API_KEY``), ``openai`` (a server at
``OPENAI_BASE_URL`` on the Chat Completions wire: vLLM, llama.cpp's server,
LM Studio, OpenAI) or ``openai-responses`` (the same server's Responses API)
to let a real model drive; an unreachable backend falls back to the stub with
a warning. The first lines say which answers.

The loop is the caller's to write, and it is short: send the turn, run every
``tool_use`` block through :func:`vaelii_llm.tools.call` (which never raises),
send the results back, stop when the model asks for nothing more.
"""

from __future__ import annotations

import sys
from contextlib import aclosing

import msgspec
from _answering import Progress
from _answering import run
from _answering import say_if_tools_dropped
from _answering import who_answers

from vaelii_llm import Message
from vaelii_llm import Provider
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import ToolSchema
from vaelii_llm import ToolUseBlock
from vaelii_llm import config
from vaelii_llm import kb
from vaelii_llm import pool
from vaelii_llm import providers
from vaelii_llm import tools

QUESTION = "Who is Miss Muffet afraid of, and what kind of thing is Muffet?"

# What the stub answers when no real model is configured: two tool calls, then prose.
STUB_ANSWER = (
    "Miss Muffet is afraid of the spiders Muffet, ItsyBitsy and Fang; "
    "Muffet is a Spider, an Arachnid and an Arthropod."
)
STUB_TURNS = [
    {"tool": "kb_query", "input": {"goal": "(afraidOf MissMuffet ?who)"}},
    {"tool": "kb_types_of", "input": {"term": "Muffet"}},
    STUB_ANSWER,
    "(streamed) " + STUB_ANSWER,
]


async def read_loop(model: Provider, base: kb.KB, request: Request, turns: int = 6) -> Response:
    """Run turns until the model stops asking for tools (or ``turns`` run out)."""
    messages = list(request.messages)
    for _ in range(turns):
        async with Progress():  # a terminal sees how long the turn has taken
            response = await model.complete(msgspec.structs.replace(request, messages=messages))
        calls = [block for block in response.content if isinstance(block, ToolUseBlock)]
        if not calls:
            return response
        results = []
        for use in calls:
            result = await tools.call(base, use.name, use.input)
            print(f"  tool {use.name}({use.input}) -> {result.text[:100]}")
            results.append(result.block(use.id))
        messages += [
            Message(role="assistant", content=response.content),
            Message(role="user", content=list(results)),
        ]
    return response


async def offered_tools() -> list[ToolSchema]:
    """The tool schemas, unless the configured Ollama model cannot call tools:
    then they would only spend its context length."""
    if config.provider_kind() == "ollama" and await providers.available("ollama"):
        from vaelii_llm.providers import ollama

        if not await ollama.supports_tools():
            print("the configured Ollama model has no tools capability: asking without tools")
            return []
    return tools.schemas()


async def main() -> None:
    base = kb.sample()
    count = await tools.call(base, "kb_sentex_count", {})
    print(f"sample KB: {count.text} sentexes; {len(tools.schemas())} read tools")
    request = Request(
        system="Answer from the knowledge base only, using its tools.",
        messages=[Message(role="user", content=QUESTION)],
        tools=await offered_tools(),
        max_tokens=1024,
        timeout_ms=120_000,
    )
    model = await providers.provider(stub={"script": STUB_TURNS})
    async with model:
        print(await who_answers(model))
        if request.tools:
            await say_if_tools_dropped(model)
        print(f"Q: {QUESTION}")
        answer = await read_loop(model, base, request)
        print("A:", " ".join(b.text for b in answer.content if isinstance(b, TextBlock)))

        print("streaming one more turn (whole blocks, then the final Response):")
        follow_up = msgspec.structs.replace(request, tools=[])
        async with aclosing(model.stream(follow_up)) as items:
            async for item in items:
                if isinstance(item, Response):
                    print(f"  done: stop_reason={item.stop_reason}")
                else:
                    print(f"  {item.type} block: {getattr(item, 'text', '')[:100]}")

    voters = (
        await pool.pool_from_config()
        if await providers.active_kind() in ("ollama", "openai")
        else pool.stub_pool(script=["Yes.", "No - a spider is an arachnid.", "No."])
    )
    async with voters:
        outcome = await pool.vote(voters, "Is a spider an insect? Answer yes or no first.")
    print(f"vote: {outcome.verdict} (votes {outcome.votes}, failed {outcome.failed})")


if __name__ == "__main__":
    sys.exit(run(main()))
