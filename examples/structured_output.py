"""Structured output: one neutral request whose answer must match a JSON schema.

Run ``python examples/structured_output.py``. The schema is derived from a
msgspec ``Struct`` (declared once: the type, its validation and its schema),
sent as the request's ``format`` (the Messages API's ``output_config.format``,
Ollama's ``format``), and the answer's text is decoded with msgspec straight
into that Struct; an answer that does not match is a ``msgspec.ValidationError``
naming the field.

The facts come from the KB through a tool call made here, not by the model, so
one turn is enough. With nothing configured the scripted stub answers a JSON
text (the first line says which backend answers); set
``VAELII_LLM_PROVIDER=ollama`` (an Ollama at ``VAELII_OLLAMA_HOST``), ``anthropic``
(``ANTHROPIC_API_KEY``) or ``openai`` (a server at ``OPENAI_BASE_URL``) to have
a real model fill the schema.
"""

from __future__ import annotations

import asyncio
import sys

import msgspec
from _answering import who_answers

from vaelii_llm import Message, Request, TextBlock, kb, providers, tools


class Creature(msgspec.Struct, frozen=True):
    """What the model is asked to fill in."""

    name: str
    types: list[str]
    feared_by: list[str]


SCHEMA = msgspec.json.schema(Creature)

# What the stub answers when no real model is configured: a JSON text matching SCHEMA.
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
        format=SCHEMA,
        max_tokens=512,
        timeout_ms=120_000,
    )
    async with await providers.provider(stub={"script": [STUB_ANSWER]}) as model:
        print(await who_answers(model))
        response = await model.complete(request)
    text = "".join(b.text for b in response.content if isinstance(b, TextBlock))
    return msgspec.json.decode(text, type=Creature)


async def main() -> int:
    try:
        creature = await describe("Muffet")
    except msgspec.ValidationError as exc:
        print(f"the answer did not match the schema: {exc}", file=sys.stderr)
        return 1
    print(creature)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
