"""Structured output: an answer that is a typed value, or says why it is not.

Run ``python examples/structured_output.py``. ``vaelii_llm.answer`` sends the
JSON schema of a msgspec ``Struct`` (declared once: the type, its validation
and its schema) as the request's ``format`` (the Messages API's
``output_config.format``, Ollama's ``format``, a ``json_schema`` response
format on the OpenAI wires) and decodes the answer into that Struct; an
answer that does not match is asked again once with the error shown, and
past that is an ``LLMBadAnswer`` holding every attempt.

The facts come from the KB through a tool call made here, not by the model, so
one turn is enough. An answer cut at ``max_tokens`` is no whole JSON object:
``LLMBadAnswer`` says so (``cut``) rather than ask again, and the example says
what happened. The answer streams as partial values, so a terminal shows how
long it has waited and, once the answer comes, how much has arrived.

With nothing configured the scripted stub answers a JSON
text (the first line says which backend answers); set
``VAELII_LLM_PROVIDER=ollama`` (an Ollama at ``VAELII_OLLAMA_HOST``), ``anthropic``
(``ANTHROPIC_API_KEY``) or ``openai`` (a server at ``OPENAI_BASE_URL``) to have
a real model fill the schema.
"""

from __future__ import annotations

import sys
from contextlib import aclosing

import msgspec
from _answering import Progress
from _answering import run
from _answering import who_answers

import vaelii_llm
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import kb
from vaelii_llm import providers
from vaelii_llm import tools
from vaelii_llm.errors import LLMBadAnswer


class Creature(msgspec.Struct, frozen=True):
    """What the model is asked to fill in."""

    name: str
    types: list[str]
    feared_by: list[str]


# What the stub answers when no real model is configured: a JSON text that is a Creature.
STUB_ANSWER = (
    '{"name": "Muffet", "types": ["Animal", "Arachnid", "Arthropod", "Invertebrate", '
    '"Organism", "Spider"], "feared_by": ["Bob", "MissMuffet", "TheFly", "TheAnt", '
    '"TheBeetle", "TheGrasshopper"]}'
)


async def describe(term: str) -> Creature:
    """Read the KB's facts about ``term`` and have the model shape them."""
    toolset = tools.Toolset(kb.sample())
    types = await toolset.call("kb_types_of", {"term": term})
    fears = await toolset.call("kb_query", {"goal": f"(afraidOf ?who {term})"})
    request = Request(
        system="Answer with one JSON object matching the schema, from the facts given only.",
        messages=[
            Message(
                role="user",
                content=f"Describe {term}.\nIts types: {types.text}\n"
                f"Who is afraid of it: {fears.text}",
            )
        ],
        max_tokens=MAX_TOKENS,
        timeout_ms=120_000,
    )
    async with await providers.provider(stub={"script": [STUB_ANSWER]}) as model:
        print(await who_answers(model), flush=True)
        creature = None
        answering = vaelii_llm.answer(model, request, into=Creature)
        async with Progress() as progress, aclosing(answering.stream()) as parts:
            async for part in parts:
                if isinstance(part, Creature):
                    creature = part
                else:
                    progress.token()
    assert creature is not None  # a stream ends with the whole value
    return creature


MAX_TOKENS = 512


async def main() -> int:
    try:
        creature = await describe("Muffet")
    except LLMBadAnswer as exc:
        if exc.cut:
            print(
                f"the answer was cut at max_tokens ({MAX_TOKENS}) before its JSON object "
                "closed; raise max_tokens, or ask a model that answers more briefly",
                file=sys.stderr,
            )
        else:
            print(f"the answer did not match the schema: {exc}", file=sys.stderr)
        return 1
    print(creature)
    return 0


if __name__ == "__main__":
    sys.exit(run(main()))
