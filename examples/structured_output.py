"""Structured output: one neutral request whose answer must match a JSON schema.

Run ``python examples/structured_output.py``. The schema is derived from a
msgspec ``Struct`` (declared once: the type, its validation and its schema),
sent as the request's ``format`` (the Messages API's ``output_config.format``,
Ollama's ``format``), and the answer's text is decoded with msgspec straight
into that Struct; an answer that does not match is a ``msgspec.ValidationError``
naming the field.

The facts come from the KB through a tool call made here, not by the model, so
one turn is enough. An answer cut at ``max_tokens`` is no whole JSON object:
the stop reason is checked first, and the example says what happened instead
of failing to decode it. The turn streams, so a terminal shows how long it has
waited and, once the answer comes, how many tokens have arrived.

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

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import TextDelta
from vaelii_llm import kb
from vaelii_llm import providers
from vaelii_llm import tools


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
        max_tokens=MAX_TOKENS,
        timeout_ms=120_000,
    )
    async with await providers.provider(stub={"script": [STUB_ANSWER]}) as model:
        print(await who_answers(model), flush=True)
        response = None
        async with Progress() as progress, aclosing(model.stream(request, deltas=True)) as items:
            async for item in items:
                if isinstance(item, TextDelta):
                    progress.token()
                elif isinstance(item, Response):
                    response = item
    assert response is not None  # a stream ends with its Response
    if response.stop_reason == "max_tokens":
        raise Cut(
            f"the answer was cut at max_tokens ({MAX_TOKENS}) before its JSON object closed; "
            "raise max_tokens, or ask a model that answers more briefly"
        )
    text = "".join(b.text for b in response.content if isinstance(b, TextBlock))
    return msgspec.json.decode(text, type=Creature)


MAX_TOKENS = 512


class Cut(Exception):
    """The answer stopped before it was whole: the message says why and what to do."""


async def main() -> int:
    try:
        creature = await describe("Muffet")
    except Cut as exc:
        print(exc, file=sys.stderr)
        return 1
    except msgspec.ValidationError as exc:
        print(f"the answer did not match the schema: {exc}", file=sys.stderr)
        return 1
    except msgspec.DecodeError as exc:
        print(f"the answer is not one JSON object: {exc}", file=sys.stderr)
        return 1
    print(creature)
    return 0


if __name__ == "__main__":
    sys.exit(run(main()))
