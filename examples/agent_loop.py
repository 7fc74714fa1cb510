"""The whole tool loop over the KB, written out by hand against the neutral types.

Run ``python examples/agent_loop.py``. This is the loop ``vaelii-llm ask`` runs
(:func:`vaelii_llm.agent.run` is the library's copy, with events for watchers);
it is spelt out here to show each decision a loop over any backend makes:

1. send the conversation; branch on ``stop_reason`` first, since a refusal or
   a truncation comes with empty or partial content;
2. on ``tool_use``, run each ``tool_use`` block through the toolset (never one
   marked ``partial``: ``max_tokens`` cut it inside its input), and send one
   ``tool_result`` block per call back, ``is_error`` set for a refusal;
3. echo the assistant's content back as the blocks it came in: each keeps its
   original JSON in ``raw``, which the Messages API needs unedited (thinking
   signatures);
4. stop on end of turn, a refusal, ``max_tokens`` or the turn limit.

With nothing configured the scripted stub plays the model (the tool calls run
for real on the sample KB); the first line says which backend answers. To
let a real model drive, set ``VAELII_LLM_PROVIDER=ollama`` (an Ollama at
``VAELII_OLLAMA_HOST`` with a model that can call tools in
``VAELII_OLLAMA_MODEL``, e.g. ``llama3.2``), ``VAELII_LLM_PROVIDER=anthropic``
with ``ANTHROPIC_API_KEY`` set, or ``VAELII_LLM_PROVIDER=openai`` with a
server at ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import sys

import msgspec
from _answering import Progress
from _answering import run
from _answering import say_if_tools_dropped
from _answering import who_answers

from vaelii_llm import Block
from vaelii_llm import Message
from vaelii_llm import Provider
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import ToolResultBlock
from vaelii_llm import ToolUseBlock
from vaelii_llm import kb
from vaelii_llm import providers
from vaelii_llm import tools

QUESTION = "Who is Miss Muffet afraid of, and what kind of thing is Muffet?"
SYSTEM = "Answer from the knowledge base, reading it with the tools given."

# What the stub answers when no real model is configured: two reads, then prose.
STUB_TURNS = [
    {"tool": "kb_query", "input": {"goal": "(afraidOf MissMuffet ?who)"}},
    {"tool": "kb_types_of", "input": {"term": "Muffet"}},
    "Miss Muffet is afraid of Muffet, ItsyBitsy and Fang; Muffet is a Spider.",
]


MAX_TOKENS = 1024
"""Each turn's output bound: a turn that reaches it is cut (``max_tokens``)."""

NEXT_STEP = {
    "max_tokens": f"the answer was cut at max_tokens ({MAX_TOKENS}): raise max_tokens in "
    "the Request, or ask for a shorter answer",
    "max_turns": "the model was still asking for tools: raise max_turns, or ask a "
    "narrower question",
    "refusal": "the model declined to answer: rephrase the question, or try another model",
}
"""What to do when the loop stops short of an answer, by why it stopped."""


async def tool_loop(
    model: Provider, toolset: tools.Toolset, question: str, max_turns: int = 8
) -> tuple[str, str, list[str]]:
    """Run the loop; return the answer, why it stopped and a line per tool call."""
    request = Request(
        system=SYSTEM,
        messages=[Message(role="user", content=question)],
        tools=toolset.schemas(),
        max_tokens=MAX_TOKENS,
        timeout_ms=120_000,
    )
    messages = list(request.messages)
    calls: list[str] = []
    for turn in range(1, max_turns + 1):
        turn_request = msgspec.structs.replace(request, messages=list(messages))
        async with Progress():  # a terminal sees how long the turn has taken
            response: Response = await model.complete(turn_request)
        answer = "".join(b.text for b in response.content if isinstance(b, TextBlock))
        if response.stop_reason == "refusal":
            return answer, "refusal", calls
        if response.stop_reason == "max_tokens":
            return answer, "max_tokens", calls
        if response.stop_reason not in ("tool_use", "pause_turn"):
            return answer, "answered", calls  # end_turn, stop_sequence (or none given)
        if turn == max_turns:
            return answer, "max_turns", calls
        messages.append(Message(role="assistant", content=list(response.content)))
        if response.stop_reason == "pause_turn":
            continue  # the far end goes on from its own content
        results: list[Block] = []
        for block in response.content:
            if not isinstance(block, ToolUseBlock):
                continue
            if block.partial:
                results.append(
                    ToolResultBlock(tool_use_id=block.id, content="not run", is_error=True)
                )
                continue
            result = await toolset.call(block.name, block.input)
            calls.append(f"{block.name} {block.input} -> {'ok' if result.ok else 'refused'}")
            results.append(
                ToolResultBlock(tool_use_id=block.id, content=result.text, is_error=not result.ok)
            )
        messages.append(Message(role="user", content=results))
    raise AssertionError("unreachable: the last turn returns")


async def main() -> int:
    toolset = tools.Toolset(kb.sample())
    async with await providers.provider(stub={"script": STUB_TURNS}) as model:
        print(await who_answers(model))
        await say_if_tools_dropped(model)
        answer, stopped, calls = await tool_loop(model, toolset, QUESTION)
    for line in calls:
        print(f"  tool {line}")
    print(f"A: {answer}")
    print(f"stopped: {stopped}")
    if stopped in NEXT_STEP:
        print(NEXT_STEP[stopped], file=sys.stderr)
    return 0 if stopped == "answered" else 1


if __name__ == "__main__":
    sys.exit(run(main()))
