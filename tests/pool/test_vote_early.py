"""``vote(..., early=True)``: a vote that stops once it is decided, cancelling
the turns still running (their tokens back, their far-end calls cancelled),
over randomized interleavings; and, against real HTTP far ends, the server
sees the cancelled turns' connections go away."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from tests.support.loopback import serve
from tests.support.polling import until
from tests.support.redis_pools import LoopbackHost
from vaelii_llm import Response
from vaelii_llm import StreamItem
from vaelii_llm import TextBlock
from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import Request
from vaelii_llm.pool import vote
from vaelii_llm.pool._pool import Pool
from vaelii_llm.providers import ollama


class Scripted(ProviderBase):
    """Answers each call from ``plan`` (its answer and delay, in call order);
    counts the calls cancelled while they ran."""

    def __init__(self, plan: list[tuple[str, float]]) -> None:
        self.plan = list(plan)
        self.calls = 0
        self.cancelled = 0
        self.finished = 0

    async def complete(self, request: Request) -> Response:
        text, delay = self.plan[self.calls]
        self.calls += 1
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return Response(content=[TextBlock(text=text)], stop_reason="end_turn", model="m")

    async def stream(self, request: Request, *, deltas: bool = False) -> AsyncIterator[StreamItem]:
        yield await self.complete(request)


async def test_an_early_vote_cancels_the_turns_that_cannot_flip_it() -> None:
    # Five turns: three quick yeses decide it; two slow turns are cancelled.
    plan = [("Yes.", 0.0)] * 3 + [("No.", 3600.0)] * 2
    provider = Scripted(plan)
    async with Pool([provider] * 5) as p:
        result = await vote(p, "Is a spider an arachnid?", votes=5, early=True)
        assert p.outstanding == 0
    assert (result.verdict, result.tally, result.cancelled) == ("yes", {"yes": 3, "no": 0}, 2)
    assert result.votes.count(None) == 2
    assert (provider.calls, provider.cancelled) == (5, 2)


async def test_the_default_vote_keeps_every_turn() -> None:
    plan = [("Yes.", 0.0)] * 3 + [("No.", 0.05)] * 2
    provider = Scripted(plan)
    async with Pool([provider] * 5) as p:
        result = await vote(p, "Is a spider an arachnid?", votes=5)
    assert (result.tally, result.cancelled) == ({"yes": 3, "no": 2}, 0)
    assert provider.finished == 5


async def test_an_undecided_early_vote_waits_for_every_turn() -> None:
    # Two yes, one no, one to come: the last could tie it, so it is awaited.
    plan = [("Yes.", 0.0), ("Yes.", 0.0), ("No.", 0.0), ("No.", 0.05)]
    provider = Scripted(plan)
    async with Pool([provider] * 4) as p:
        result = await vote(p, "q", votes=4, early=True)
    assert (result.verdict, result.cancelled, provider.cancelled) == ("abstain", 0, 0)


@pytest.mark.parametrize("seed", range(40))
async def test_early_votes_over_random_interleavings(seed: int) -> None:
    # Random answers (yes, no, prose) and delays, fewer tokens than turns
    # (some turns wait for a token): the verdict is the counted votes', the
    # cancelled turns could not have flipped it, every cancelled call saw its
    # cancellation, and every token came back.
    rng = random.Random(seed)
    votes = rng.randint(1, 9)
    plan = [(rng.choice(["Yes.", "No.", "Maybe."]), rng.random() * 0.02) for _ in range(votes)]
    provider = Scripted(plan)
    async with Pool([provider] * rng.randint(1, votes)) as p:
        result = await vote(p, "q", votes=votes, early=True)
        assert p.outstanding == 0
        assert p.statistics().waiters == 0
    yes, no = result.tally["yes"], result.tally["no"]
    assert result.calls == votes
    assert result.cancelled == provider.cancelled + (votes - provider.calls)
    assert provider.finished + result.cancelled == votes
    if result.cancelled:
        assert abs(yes - no) > result.cancelled  # no cancelled turn could flip it
    assert result.verdict == ("yes" if yes > no else "no" if no > yes else "abstain")


async def test_an_early_vote_frees_the_far_ends_generation() -> None:
    # Real HTTP far ends, one turn each (the vote's distinct-host rule): two
    # answer at once, the third holds its call for an hour. The two yeses
    # decide it; the third call's connection is closed, so that server stops.
    async with AsyncExitStack() as stack:
        found = []
        for delay in (0.01, 0.01, 3600.0):
            host = LoopbackHost(delay)
            host.url = await stack.enter_async_context(serve(host.handle))
            found.append(host)
        tokens = [ollama.provider(host=host.url) for host in found]
        async with Pool(tokens) as p:
            result = await vote(p, "Is a spider an insect?", votes=3, early=True)
            assert p.outstanding == 0
        assert (result.verdict, result.cancelled) == ("yes", 1)
        assert [h.calls for h in found] == [1, 1, 1]
        await until(lambda: found[2].active == 0)  # the server saw its client go
