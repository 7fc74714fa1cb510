"""A pydantic-ai ``Agent`` on a vaelii provider, reading the sample KB.

``python examples/pydantic_ai_agent.py`` runs the agent twice, with ``run`` and
with ``run_stream``: :class:`~vaelii_llm.integrations.pydantic_ai.VaeliiModel`
is the agent's model and :class:`~vaelii_llm.integrations.pydantic_ai.KBToolset`
its tools. With no configuration the scripted stub plays the model (a
``kb_query`` call, then prose; no key, no socket), while the tool runs for real
against the sample KB, so the tool return printed is the engine's answer; the
first line says which backend answers.

To let a real model drive, configure a backend: ``VAELII_LLM_PROVIDER=ollama``
(an Ollama running, ``VAELII_OLLAMA_MODEL`` pulled and able to call tools),
``VAELII_LLM_PROVIDER=anthropic`` (a credential in ``ANTHROPIC_API_KEY``),
``VAELII_LLM_PROVIDER=openai`` (a server at ``OPENAI_BASE_URL`` on the Chat
Completions wire: vLLM, llama.cpp's server, LM Studio, OpenAI) or
``VAELII_LLM_PROVIDER=openai-responses`` (the same server's Responses API). An
unreachable backend falls back to the stub with a warning. Needs
``pip install 'vaelii-llm[pydantic-ai]'``: without it the script says so and exits 2.
"""

from __future__ import annotations

import sys

from _answering import run
from _answering import say_if_tools_dropped
from _answering import who_answers

from vaelii_llm import kb
from vaelii_llm import providers

try:
    from pydantic_ai import Agent
    from pydantic_ai import messages as pai

    from vaelii_llm.integrations.pydantic_ai import KBToolset
    from vaelii_llm.integrations.pydantic_ai import VaeliiModel
except ImportError as missing:  # the extra is not installed: say how, as the command does
    if (missing.name or "").partition(".")[0] != "pydantic_ai":
        raise
    print(
        f"this example needs the pydantic-ai extra: pip install 'vaelii-llm[pydantic-ai]' "
        f"({missing})",
        file=sys.stderr,
    )
    raise SystemExit(2) from None

QUESTION = "Who is Miss Muffet afraid of?"
STUB_ANSWER = "Miss Muffet is afraid of Muffet, ItsyBitsy and Fang."
QUERY = {"tool": "kb_query", "input": {"goal": "(afraidOf MissMuffet ?who)"}}
STUB_TURNS = [QUERY, STUB_ANSWER, QUERY, "(streamed) " + STUB_ANSWER]


async def main() -> None:
    async with await providers.provider(stub={"script": STUB_TURNS}) as provider:
        print(await who_answers(provider))
        await say_if_tools_dropped(provider)
        agent = Agent(
            VaeliiModel(provider),
            toolsets=[KBToolset(kb.sample())],
            system_prompt="Answer from the knowledge base only, using its tools.",
        )
        result = await agent.run(QUESTION)
        for message in result.all_messages():
            for part in message.parts:
                if isinstance(part, pai.ToolCallPart):
                    print(f"  tool call {part.tool_name}({part.args_as_dict()})")
                elif isinstance(part, pai.ToolReturnPart):
                    print(f"  tool return {part.model_response_str()[:100]}")
        print("A:", result.output)
        print("model requests:", result.usage.requests)

        async with agent.run_stream(QUESTION) as streamed:
            pieces = [piece async for piece in streamed.stream_text(delta=True, debounce_by=None)]
        print(f"streamed in {len(pieces)} pieces:", "".join(pieces))


if __name__ == "__main__":
    sys.exit(run(main()))
