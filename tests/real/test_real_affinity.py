"""Cache affinity on two real llama-servers (the ``real`` lane): a pool whose
calls name their conversation (``pool.provider(affinity=...)``) sends each
turn back to the server that holds the conversation's prompt in its cache, so
the servers evaluate far fewer prompt tokens than when the turns spread as the
pool spreads them without it. The figures are printed (``pytest -s``)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from llama_server import LlamaServer

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm.pool import Pool
from vaelii_llm.pool import vote
from vaelii_llm.providers import openai

pytestmark = [pytest.mark.real, pytest.mark.timeout(600)]

SYSTEM = (
    "You are a careful assistant working through a customer's questions about a "
    "small bakery. The bakery sells bread, cakes, pastries and coffee. It opens at "
    "seven in the morning and closes at six in the evening, every day but Monday. "
    "Its sourdough takes two days to make; its croissants are baked each morning; "
    "its cakes are ordered two days ahead. It takes cards and cash. Answer in one "
    "short sentence, plainly, without lists. "
) * 4
QUESTIONS = [
    "When do you open?",
    "Do you sell coffee?",
    "How long does sourdough take?",
    "Can I pay by card?",
    "Are you open on Monday?",
    "How early must I order a cake?",
]
CONVERSATIONS = 4


def evaluated(response: Response) -> int:
    """The prompt tokens the server evaluated for a turn: all of them, less
    those it read from its cache."""
    usage = response.usage
    assert usage is not None
    assert usage.input_tokens is not None
    return usage.input_tokens - (usage.cache_read_input_tokens or 0)


async def conversations(pool: Pool[Any], affinity: bool, seed: int) -> tuple[int, int]:
    """Four six-turn conversations at once, each pausing a random moment
    between turns (an agent's tool call): the prompt tokens sent and evaluated."""
    rng = random.Random(seed)
    pauses = [[rng.random() * 0.3 for _ in QUESTIONS] for _ in range(CONVERSATIONS)]
    sent = spent = 0

    async def one(n: int) -> None:
        nonlocal sent, spent
        history: list[Message] = []
        for turn, question in enumerate(QUESTIONS):
            await asyncio.sleep(pauses[n][turn])
            # Each run's conversations its own: no run reads another's cache.
            history.append(Message(role="user", content=f"(visit {seed}.{n}) {question}"))
            request = Request(messages=list(history), system=SYSTEM, max_tokens=16)
            key = f"conversation-{seed}-{n}" if affinity else None
            async with pool.provider(affinity=key) as p:
                response = await p.complete(request)
            assert response.usage is not None
            assert response.usage.input_tokens is not None
            sent += response.usage.input_tokens
            spent += evaluated(response)
            text = "".join(getattr(block, "text", "") for block in response.content)
            history.append(Message(role="assistant", content=text or "..."))

    await asyncio.gather(*(one(n) for n in range(CONVERSATIONS)))
    return sent, spent


def fleet(servers: list[LlamaServer]) -> Pool[Any]:
    tokens = []
    for server in servers:
        tokens += [openai.provider(base_url=server.base + "/v1", model="m", api_key="k")] * 2
    return Pool(tokens)


async def test_affinity_halves_the_prompt_tokens_two_servers_evaluate() -> None:
    async with LlamaServer(parallel=2) as first, LlamaServer(parallel=2) as second:
        servers = [first, second]
        figures = {}
        for seed, affinity in ((1, False), (2, True)):  # fresh conversations each run
            async with fleet(servers) as pool:
                figures[affinity] = await conversations(pool, affinity, seed)
        async with fleet(servers) as pool:
            # The vote's distinct-host rule is unchanged: two turns, two servers.
            result = await vote(pool, "Is a spider an insect?", votes=2)
    (sent_spread, spread), (sent_affine, affine) = figures[False], figures[True]
    print(
        f"\nprompt tokens sent / evaluated over {CONVERSATIONS} six-turn conversations, "
        f"two llama-servers: spread {sent_spread} / {spread}, "
        f"with affinity {sent_affine} / {affine} ({affine / spread:.0%})"
    )
    assert result.calls == 2
    assert affine <= spread / 2
