"""The vote pool: reading answers, verdicts, hosts, and a pool that never leaks a token."""

from __future__ import annotations

import asyncio
import random
import sys
import types
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import pytest

from vaelii_llm import pool as vpool
from vaelii_llm._base_url import normalize_host
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StopReason
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMPoolTimeout
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.pool import ASK_YES_NO
from vaelii_llm.pool import Pool
from vaelii_llm.pool import hosts
from vaelii_llm.pool import read_yes_no
from vaelii_llm.pool import vote
from vaelii_llm.pool._hosts import Host
from vaelii_llm.pool._pool import DEFAULT_ACQUIRE_TIMEOUT_MS
from vaelii_llm.pool._pool import HostStatistics
from vaelii_llm.pool._pool import PoolStatistics
from vaelii_llm.pool._vote import read_response
from vaelii_llm.providers.stub import StubProvider

QUESTION = Request(messages=[Message(role="user", content="Is a spider an insect?")])


def answer(text: str, stop_reason: StopReason = "end_turn", vendor: str | None = None) -> Response:
    return Response(
        content=[TextBlock(text=text)], stop_reason=stop_reason, vendor_stop_reason=vendor
    )


class Bug(Exception):
    """What a provider with a bug in it raises: not an LLMError."""


class CountingProvider(ProviderBase):
    """Answers ``text`` after ``delay`` seconds; counts calls, concurrency and closes."""

    def __init__(self, text: str = "Yes.", delay: float = 0.0) -> None:
        self.text = text
        self.delay = delay
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.closes = 0

    async def complete(self, request: Request) -> Response:
        self.calls += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            return answer(self.text)
        finally:
            self.active -= 1

    async def stream(self, request: Request, *, deltas: bool = False) -> AsyncIterator[StreamItem]:
        response = await self.complete(request)
        for block in response.content:
            yield block
        yield response

    async def aclose(self) -> None:
        self.closes += 1


def stats(p: Pool[Any]) -> tuple[int, int, int, int]:
    s = p.statistics()
    return (s.size, s.idle, s.outstanding, s.waiters)


async def spin(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


# ---------------------------------------------------------------------------
# read_yes_no / read_response


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes.", "yes"),
        ("no — because spiders have eight legs", "no"),
        ("YES!", "yes"),
        ("**Yes**", "yes"),
        ("Yes, but…", "yes"),
        ("No", "no"),
        ("  \n no.", "no"),
        ('"Yes," the model said', "yes"),
        ("- No: arachnids", "no"),
        ("Ｙｅｓ", "yes"),  # fullwidth letters read as their NFKC form
        ("I think yes", None),
        ("", None),
        ("   ", None),
        ("Nope", None),
        ("yesterday", None),
        ("Node", None),
        ("No1", None),  # not a word boundary we trust
        ("1. Yes", None),
        ("Maybe. Yes.", None),
        ("…", None),
    ],
)
def test_read_yes_no(text: str, expected: str | None) -> None:
    assert read_yes_no(text) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (answer("Yes."), "yes"),
        (answer("No."), "no"),
        (answer("Yes", "end_turn", "stop"), "yes"),  # Ollama's own word stays beside
        (answer("Yes", "max_tokens"), None),
        (answer("Yes", "max_tokens", "length"), None),
        (answer("Yes", "max_tokens", "model_context_window_exceeded"), None),
        (answer("Yes", "stop_sequence"), "yes"),
        (answer("Yes", "refusal"), None),
        (Response(content=[], stop_reason="refusal"), None),
        (Response(content=[], stop_reason="end_turn"), None),
        (
            Response(
                content=[ThinkingBlock(thinking="no, wait"), TextBlock(text="Yes.")],
                stop_reason="end_turn",
            ),
            "yes",
        ),
        (
            Response(content=[TextBlock(text=""), TextBlock(text="No.")], stop_reason="end_turn"),
            "no",
        ),
    ],
)
def test_read_response(response: Response, expected: str | None) -> None:
    assert read_response(response) == expected


# ---------------------------------------------------------------------------
# Verdicts


@pytest.mark.parametrize(
    ("script", "verdict", "yes", "no", "failed"),
    [
        (["Yes.", "Yes.", "No."], "yes", 2, 1, 0),
        (["No.", "no — because", "Yes"], "no", 1, 2, 0),
        (["Yes.", "I think so", {"refusal": ""}], "yes", 1, 0, 0),  # one yes, two non-answers
        (["No.", "maybe", {"text": "Yes", "stop_reason": "max_tokens"}], "no", 0, 1, 0),
        (["Yes", "No", "perhaps"], "abstain", 1, 1, 0),  # a tie
        (
            ["maybe", {"refusal": "Yes"}, {"text": "Yes", "stop_reason": "max_tokens"}],
            "abstain",
            0,
            0,
            0,
        ),  # zero counted votes
        ([{"raise": "llm-unreachable"}, {"raise": "llm-api-error"}, "No."], "no", 0, 1, 2),
        ([{"raise": "llm-timeout"}] * 3, "abstain", 0, 0, 3),
        (["Yes", {"raise": "llm-bad-response"}, "No"], "abstain", 1, 1, 1),
    ],
)
async def test_verdict_table(
    script: list[Any], verdict: str, yes: int, no: int, failed: int
) -> None:
    async with vpool.stub_pool(script=script) as p:
        result = await vote(p, "Is a spider an insect?")
        assert stats(p) == (2, 2, 0, 0)
    assert result.verdict == verdict
    assert result.tally == {"yes": yes, "no": no}
    assert result.failed == failed
    assert result.calls == 3
    assert len(result.votes) == 3
    assert (result.votes.count("yes"), result.votes.count("no")) == (yes, no)
    assert result.votes.count(None) == 3 - yes - no  # non-answers and failed turns


async def test_a_vote_keeps_each_failed_turns_typed_error_in_turn_order() -> None:
    script = [{"raise": "llm-unreachable"}, "Yes.", {"raise": "llm-timeout"}]
    async with vpool.stub_pool(script=script, size=1) as p:
        result = await vote(p, "Is a spider an insect?")
    assert result.failed == len(result.errors) == 2
    assert [error.type for error in result.errors] == ["llm-unreachable", "llm-timeout"]
    assert all(isinstance(error, LLMError) for error in result.errors)
    async with vpool.stub_pool(script=["Yes."]) as p:
        assert (await vote(p, "q", votes=1)).errors == ()


async def test_vote_even_count_tie_abstains_and_sends_the_question() -> None:
    async with vpool.stub_pool(script=["Yes", "Yes", "No", "No"], size=3) as p:
        result = await vote(p, "Is it?", votes=4)
        stub = p.providers[0]
        assert [r.messages[0].content for r in stub.requests()] == ["Is it?"] * 4
    assert (result.verdict, result.calls) == ("abstain", 4)


async def test_vote_takes_a_whole_request() -> None:
    request = Request(
        messages=[Message(role="user", content="q")], system="say yes or no", max_tokens=8
    )
    async with vpool.stub_pool(default="Yes") as p:
        result = await vote(p, request, votes=1)
        assert p.providers[0].requests() == [request]
    assert result.verdict == "yes"


@pytest.mark.parametrize(
    ("votes", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError)]
)
async def test_vote_refuses_bad_vote_counts(votes: Any, error: type[Exception]) -> None:
    async with vpool.stub_pool() as p:
        with pytest.raises(error):
            await vote(p, "q", votes=votes)


# ---------------------------------------------------------------------------
# A bug in a provider is not a vote


class BuggyProvider(CountingProvider):
    def __init__(self, fail_on: int, delay: float) -> None:
        super().__init__(delay=delay)
        self.fail_on = fail_on

    async def complete(self, request: Request) -> Response:
        if self.calls + 1 == self.fail_on:
            self.calls += 1
            raise Bug("a provider bug")
        return await super().complete(request)


async def test_a_provider_bug_propagates_as_itself_and_returns_every_token() -> None:
    provider = BuggyProvider(fail_on=2, delay=10.0)  # the other turns would hang
    p = Pool([provider] * 3)
    with pytest.raises(Bug, match="a provider bug"):
        await vote(p, "q", votes=5)
    assert stats(p) == (3, 3, 0, 0)
    assert provider.active == 0  # the hanging turns were cancelled, not left running


async def test_several_bugs_raise_the_first_with_a_note() -> None:
    class AlwaysBug(CountingProvider):
        async def complete(self, request: Request) -> Response:
            raise Bug("again")

    p = Pool([AlwaysBug()] * 3)
    with pytest.raises(Bug) as caught:
        await vote(p, "q", votes=3)
    assert any("other turn" in note for note in caught.value.__notes__)
    assert stats(p) == (3, 3, 0, 0)


# ---------------------------------------------------------------------------
# Checking providers out


async def test_statistics_follow_checkouts_and_waiters() -> None:
    a, b = CountingProvider(), CountingProvider()
    p = Pool([a, a, b])
    name = f"{__name__}.CountingProvider"
    assert p.statistics() == PoolStatistics(
        size=3,
        idle=3,
        outstanding=0,
        waiters=0,
        hosts=(
            HostStatistics(f"{name}#0", slots=2, held=0, held_everywhere=0, cooling=False),
            HostStatistics(f"{name}#1", slots=1, held=0, held_everywhere=0, cooling=False),
        ),
    )
    assert await p.read_statistics() == p.statistics()  # in process: nothing else to read
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(p.provider())
        assert stats(p) == (3, 2, 1, 0)
        assert [h.held for h in p.statistics().hosts] == [1, 0]
        await stack.enter_async_context(p.provider())
        await stack.enter_async_context(p.provider())
        assert stats(p) == (3, 0, 3, 0)
        assert p.outstanding == 3
        waiter = asyncio.create_task(_hold(p, 0))
        await spin()
        assert stats(p) == (3, 0, 3, 1)
        assert first is a
    await waiter
    assert stats(p) == (3, 3, 0, 0)
    assert "size=3" in repr(p)


async def _hold(p: Pool[Any], seconds: float) -> None:
    async with p.provider():
        await asyncio.sleep(seconds)


async def test_token_comes_back_on_exception() -> None:
    p = Pool([CountingProvider()])
    with pytest.raises(KeyError):
        async with p.provider():
            raise KeyError("boom")
    assert stats(p) == (1, 1, 0, 0)


async def test_token_comes_back_when_cancelled_while_holding() -> None:
    p = Pool([CountingProvider()])
    task = asyncio.create_task(_hold(p, 10))
    await spin()
    assert p.outstanding == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stats(p) == (1, 1, 0, 0)


async def test_cancelled_while_waiting_takes_no_token() -> None:
    p = Pool([CountingProvider()])
    async with p.provider():
        task = asyncio.create_task(_hold(p, 0))
        await spin()
        assert p.statistics().waiters == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stats(p) == (1, 0, 1, 0)
    assert stats(p) == (1, 1, 0, 0)


async def test_release_and_cancel_in_the_same_instant_keep_the_token() -> None:
    """The classic race: the waiter is handed the token and cancelled before it runs."""
    p = Pool([CountingProvider()])
    holder = p.provider()
    await holder.__aenter__()
    waiter = asyncio.create_task(_hold(p, 0))
    await spin()
    await holder.__aexit__(None, None, None)  # never suspends: the wake-up is pending
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert stats(p) == (1, 1, 0, 0)


async def test_a_woken_waiter_that_is_cancelled_passes_the_token_on() -> None:
    p = Pool([CountingProvider()])
    holder = p.provider()
    await holder.__aenter__()
    first = asyncio.create_task(_hold(p, 0))
    await spin()
    second = asyncio.create_task(_hold(p, 0))
    await spin()
    assert p.statistics().waiters == 2
    await holder.__aexit__(None, None, None)  # wakes `first`
    first.cancel()
    await second  # a lost token would leave it waiting, then time out and raise
    assert first.cancelled()
    assert stats(p) == (1, 1, 0, 0)


async def test_timeout_and_release_in_the_same_instant_keep_the_token() -> None:
    p = Pool([CountingProvider()], acquire_timeout_ms=0)
    holder = p.provider()
    await holder.__aenter__()
    waiter = asyncio.create_task(_hold(p, 0))
    await asyncio.sleep(0)  # the waiter starts waiting; its deadline fires next
    await holder.__aexit__(None, None, None)
    results = await asyncio.gather(waiter, return_exceptions=True)
    assert results[0] is None or isinstance(results[0], LLMTimeout)
    assert stats(p) == (1, 1, 0, 0)


async def test_a_waiter_whose_deadline_passes_leaves_the_later_ones_waiting() -> None:
    """Two callers wait for one host; the first one's deadline passes first.
    The second waits out its own deadline and ends in its own LLMPoolTimeout,
    never in a CancelledError nobody asked for (the first's timeout must not
    cancel what every waiter waits on)."""
    p = Pool([CountingProvider()], acquire_timeout_ms=300)
    async with p.provider():
        first = asyncio.create_task(_hold(p, 0))
        await asyncio.sleep(0.1)
        second = asyncio.create_task(_hold(p, 0))
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(o) for o in outcomes] == [LLMPoolTimeout, LLMPoolTimeout]
    assert stats(p) == (1, 1, 0, 0)


async def test_acquire_timeout_with_a_tiny_value() -> None:
    p = Pool([CountingProvider()], acquire_timeout_ms=20)
    async with p.provider():
        waiting = asyncio.create_task(_hold(p, 0))
        await asyncio.sleep(0)
        assert p.statistics().waiters == 1  # it waits rather than fail at once
        with pytest.raises(LLMPoolTimeout) as caught:
            await waiting
        assert isinstance(caught.value, LLMTimeout)  # a caller catching every timeout sees it
        assert (caught.value.type, caught.value.phase) == ("llm-pool-timeout", "acquire")
        assert caught.value.timeout_ms == 20
        assert "vote pool" in str(caught.value)
        assert isinstance(caught.value.__cause__, TimeoutError)  # its deadline passed
        result = await vote(p, "q")  # every turn waits out the pool and fails
        assert stats(p) == (1, 0, 1, 0)
    assert (result.verdict, result.failed, result.calls) == ("abstain", 3, 3)
    assert stats(p) == (1, 1, 0, 0)


async def test_zero_acquire_timeout_takes_an_idle_token_only() -> None:
    p = Pool([CountingProvider()], acquire_timeout_ms=0)
    async with p.provider():
        with pytest.raises(LLMPoolTimeout):
            async with p.provider():
                pass
    async with p.provider() as provider:
        assert isinstance(provider, CountingProvider)


async def test_a_checkout_is_entered_once() -> None:
    p = Pool([CountingProvider()] * 2)
    checkout = p.provider()
    async with checkout:
        with pytest.raises(RuntimeError, match="entered once"):
            await checkout.__aenter__()
    assert stats(p) == (2, 2, 0, 0)


async def test_concurrency_is_bounded_by_the_tokens() -> None:
    provider = CountingProvider(delay=0.01)
    p = Pool([provider] * 4)
    result = await vote(p, "q", votes=40)
    assert result.tally == {"yes": 40, "no": 0}
    # Four at once, never more: that the calls overlap is shown by the count,
    # not by a wall clock (tests/bench/bench_pool.py measures the time).
    assert provider.max_active == 4
    assert provider.calls == 40
    assert stats(p) == (4, 4, 0, 0)


async def test_cancelling_a_vote_returns_every_token() -> None:
    provider = CountingProvider(delay=10)
    p = Pool([provider] * 2)
    task = asyncio.create_task(vote(p, "q", votes=5))
    await spin()
    assert stats(p) == (2, 0, 2, 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stats(p) == (2, 2, 0, 0)
    assert provider.active == 0


# ---------------------------------------------------------------------------
# Validation and closing


async def test_pool_refuses_bad_inputs() -> None:
    with pytest.raises(LLMBadHosts, match="at least one provider"):
        Pool([])
    with pytest.raises(TypeError, match="not str"):
        Pool(["http://gpu1:11434"])  # type: ignore[type-var]
    with pytest.raises(ValueError, match="negative"):
        Pool([CountingProvider()], acquire_timeout_ms=-1)
    with pytest.raises(TypeError):
        Pool([CountingProvider()], acquire_timeout_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Pool([CountingProvider()], acquire_timeout_ms=True)
    with pytest.raises(ValueError, match="at least one token"):
        vpool.stub_pool(size=0)
    assert DEFAULT_ACQUIRE_TIMEOUT_MS == 300_000
    assert Pool([CountingProvider()]).acquire_timeout_ms == 300_000


async def test_closing_closes_each_distinct_provider_once() -> None:
    a, b = CountingProvider(), CountingProvider()
    async with Pool([a, a, b, a]) as p:
        assert p.providers == (a, b)
        assert p.size == 4
    assert (a.closes, b.closes) == (1, 1)
    await p.aclose()
    assert (a.closes, b.closes) == (1, 1)
    assert p.closed


async def test_a_closed_pool_refuses_and_wakes_its_waiters() -> None:
    p = Pool([CountingProvider()])
    holder = p.provider()
    await holder.__aenter__()
    waiters = [asyncio.create_task(_hold(p, 0)) for _ in range(3)]
    await spin()
    await p.aclose()
    for waiter in waiters:
        with pytest.raises(LLMClosed, match="closed while this call waited") as woken:
            await waiter
        assert woken.value.waited
    with pytest.raises(LLMClosed, match="is closed") as refused:
        async with p.provider():
            pass
    assert (refused.value.type, refused.value.waited) == ("llm-closed", False)
    with pytest.raises(LLMClosed, match="is closed"):
        await vote(p, "q")
    assert stats(p) == (1, 0, 1, 0)
    await holder.__aexit__(None, None, None)  # a holder still hands its token back
    assert stats(p) == (1, 1, 0, 0)


async def test_turns_waiting_when_the_pool_closes_count_as_failed() -> None:
    p = Pool([CountingProvider()])
    holder = p.provider()
    await holder.__aenter__()
    running = asyncio.create_task(vote(p, "q", votes=3))
    await spin()
    assert p.statistics().waiters == 3
    await p.aclose()
    result = await running
    assert (result.verdict, result.failed, result.calls) == ("abstain", 3, 3)
    await holder.__aexit__(None, None, None)
    assert stats(p) == (1, 1, 0, 0)


async def test_a_failing_close_does_not_stop_the_others() -> None:
    class BadClose(CountingProvider):
        async def aclose(self) -> None:
            await super().aclose()
            raise OSError("close failed")

    bad, good = BadClose(), CountingProvider()
    p = Pool([bad, good])
    with pytest.raises(OSError, match="close failed"):
        await p.aclose()
    assert (bad.closes, good.closes) == (1, 1)


async def test_stub_pool_is_one_stub_held_as_size_tokens() -> None:
    async with vpool.stub_pool(script=["Yes."], size=3) as p:
        assert p.size == 3
        assert len(p.providers) == 1
        assert isinstance(p.providers[0], StubProvider)


# ---------------------------------------------------------------------------
# The cancellation stress test


class ChaosProvider(ProviderBase):
    """Holds its token for a random while, then answers, fails, or has a bug."""

    def __init__(self, rng: random.Random, counts: Counter[str]) -> None:
        self.rng = rng
        self.counts = counts
        self.active = 0

    async def complete(self, request: Request) -> Response:
        self.active += 1
        try:
            roll = self.rng.random()
            if roll < 0.02:
                await asyncio.sleep(0.002)  # a hold across real time, not only loop steps
            else:
                for _ in range(self.rng.randrange(4)):
                    await asyncio.sleep(0)
            roll = self.rng.random()
            if roll < 0.10:
                raise LLMUnreachable("chaos", "scripted reset")
            if roll < 0.12:
                raise LLMApiError("chaos", 529, "overloaded")
            if roll < 0.125:
                raise Bug("chaos bug")
            return answer(self.rng.choice(["Yes.", "No.", "Maybe."]))
        except asyncio.CancelledError:
            self.counts["cancelled in a provider"] += 1
            raise
        finally:
            self.active -= 1

    async def stream(self, request: Request, *, deltas: bool = False) -> AsyncIterator[StreamItem]:
        yield await self.complete(request)


@dataclass
class Chaos:
    """The stress test's pool, its random source, and a count of what happened."""

    rng: random.Random
    counts: Counter[str]
    pool: Pool[ChaosProvider]

    async def one_vote(self) -> None:
        try:
            result = await vote(self.pool, "q", votes=self.rng.randint(1, 5))
        except Bug:
            self.counts["vote raised a bug"] += 1
        else:
            self.counts[f"verdict {result.verdict}"] += 1
            self.counts["failed turns"] += result.failed

    async def one_checkout(self) -> None:
        state = "waiting"
        try:
            async with self.pool.provider() as provider:
                state = "holding"
                await provider.complete(QUESTION)
        except asyncio.CancelledError:
            self.counts[f"checkout cancelled while {state}"] += 1
            raise
        except LLMTimeout:
            self.counts["checkout timed out"] += 1
        except (LLMError, Bug):
            self.counts["checkout failed"] += 1

    async def start_batch(self, starved: bool) -> list[asyncio.Task[None]]:
        """48 votes and 16 checkouts, started; when ``starved``, behind a pool
        held whole past its acquire timeout, so their waiters time out."""
        async with AsyncExitStack() as hold:
            held = 0
            while starved and held < self.pool.size:
                # The test's own hold has the pool's timeout too: on a loaded
                # machine a cooling host may outlast it, so it asks again.
                with suppress(LLMPoolTimeout):
                    await hold.enter_async_context(self.pool.provider())
                    held += 1
            batch = [asyncio.create_task(self.one_vote()) for _ in range(48)]
            batch += [asyncio.create_task(self.one_checkout()) for _ in range(16)]
            await spin(self.rng.randrange(1, 6))
            if starved:
                await asyncio.sleep(2 * STRESS_ACQUIRE_MS / 1000)
        return batch

    async def cancel_some_and_settle(self, batch: list[asyncio.Task[None]]) -> None:
        """Cancel a random part of ``batch`` in two waves, then wait for all of it."""
        for task in self.rng.sample(batch, k=self.rng.randrange(len(batch) // 2)):
            task.cancel()
        await spin(self.rng.randrange(3))
        for task in self.rng.sample(batch, k=self.rng.randrange(len(batch) // 4)):
            task.cancel()
        for outcome in await asyncio.gather(*batch, return_exceptions=True):
            if isinstance(outcome, asyncio.CancelledError):
                self.counts["task cancelled"] += 1
            else:
                assert outcome is None, repr(outcome)


STRESS_ACQUIRE_MS = 100
"""The stress test pool's acquire timeout: long enough that, on a loaded
machine too, most turns get a token and run to their rolls; the starved
batches hold the pool past it, so waiters time out on any machine."""

STRESS_EVENTS = (
    "checkout cancelled while waiting",
    "checkout cancelled while holding",
    "cancelled in a provider",
    "checkout timed out",
    "vote raised a bug",
    "verdict yes",
    "verdict no",
    "verdict abstain",
    "failed turns",
)
"""Every kind of event the stress test means to provoke."""


async def test_stress_random_cancellations_leave_the_pool_exactly_as_it_started() -> None:
    # Debug mode's bookkeeping on thousands of tasks would slow every loop step
    # many times over, and with it every wait for a token.
    asyncio.get_running_loop().set_debug(False)
    rng = random.Random(20261130)
    counts: Counter[str] = Counter()
    a, b, c = (ChaosProvider(rng, counts) for _ in range(3))
    tokens = [a, a, a, b, b, c]
    chaos = Chaos(rng, counts, Pool(tokens, acquire_timeout_ms=STRESS_ACQUIRE_MS))

    def unseen() -> list[str]:
        return [kind for kind in STRESS_EVENTS if counts[kind] == 0]

    # At least 6000 votes in batches of 48; more, up to eight times as many,
    # until every event has come (a slow machine times more waits out, and
    # fewer turns then reach a bug's roll).
    least = 6000 // 48
    for batches in range(8 * least):
        if batches >= least and not unseen():
            break
        # Whether a waiter outlasts the acquire timeout depends on how fast the
        # loop turns, so every sixteenth batch starts behind a pool the test
        # holds whole past it: its waiters time out whatever the machine's
        # speed, since their deadlines fall before the end of the hold on the
        # loop's clock.
        batch = await chaos.start_batch(starved=batches % 16 == 0)
        await chaos.cancel_some_and_settle(batch)
        assert stats(chaos.pool) == (6, 6, 0, 0), counts

    assert unseen() == [], counts
    # The pool is exactly as it started: every token, and the same multiset.
    assert chaos.pool.outstanding == 0
    assert a.active == b.active == c.active == 0
    async with AsyncExitStack() as stack:
        held = [await stack.enter_async_context(chaos.pool.provider()) for _ in range(6)]
        assert Counter(map(id, held)) == Counter(map(id, tokens))
        assert stats(chaos.pool) == (6, 0, 6, 0)
    assert stats(chaos.pool) == (6, 6, 0, 0)


# ---------------------------------------------------------------------------
# Hosts


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", []),
        ("   ", []),
        ("gpu1", [Host("http://gpu1:11434", 2)]),
        ("gpu1:8080*4", [Host("http://gpu1:8080", 4)]),
        (
            "a, b*3 ,https://c",
            [Host("http://a:11434", 2), Host("http://b:11434", 3), Host("https://c:443", 2)],
        ),
        ("a * 1", [Host("http://a:11434", 1)]),
        ("[::1]:9000*1", [Host("http://[::1]:9000", 1)]),
        ("::1*3", [Host("http://[::1]:11434", 3)]),
        ("http://proxy/ollama/*2", [Host("http://proxy:80/ollama", 2)]),
        ("a,a", [Host("http://a:11434", 2), Host("http://a:11434", 2)]),
    ],
)
def test_hosts_table(no_host_env: pytest.MonkeyPatch, value: str, expected: list[Host]) -> None:
    no_host_env.setenv("VAELII_OLLAMA_HOSTS", value)
    assert hosts() == expected
    assert hosts(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "a,,b",
        "a,",
        ",a",
        "a*0",
        "a*-1",
        "a*x",
        "a*",
        "*3",
        "a*1.5",
        "a*2*3",
        "ftp://x",
        "a*٣",
        "http://:80",
    ],
)
def test_malformed_hosts_are_refused(no_host_env: pytest.MonkeyPatch, value: str) -> None:
    no_host_env.setenv("VAELII_OLLAMA_HOSTS", value)
    with pytest.raises(LLMBadHosts) as caught:
        hosts()
    assert caught.value.type == "llm-bad-hosts"
    assert caught.value.entry is not None


def test_unset_hosts_is_the_one_configured_host(no_host_env: pytest.MonkeyPatch) -> None:
    assert hosts() == [Host("http://localhost:11434", 2)]
    no_host_env.setenv("OLLAMA_HOST", "0.0.0.0")  # a bind address is ignored
    assert hosts() == [Host("http://localhost:11434", 2)]
    no_host_env.setenv("VAELII_OLLAMA_HOST", "gpu9:7000")
    assert hosts() == [Host("http://gpu9:7000", 2)]
    assert hosts("gpu2*1") == [Host("http://gpu2:11434", 1)]  # explicit beats the env


# ---------------------------------------------------------------------------
# pool_from_config (the Ollama backend stood in for by a fake module)


@pytest.fixture
def fake_ollama(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, Any], CountingProvider]]:
    built: list[tuple[dict[str, Any], CountingProvider]] = []

    def provider(**opts: Any) -> CountingProvider:
        if opts["host"].startswith("http://broken"):
            raise ValueError("cannot build")
        made = CountingProvider()
        built.append((opts, made))
        return made

    module = types.ModuleType("vaelii_llm.providers.ollama")
    module.provider = provider  # type: ignore[attr-defined]
    module.read_host = normalize_host  # type: ignore[attr-defined]  # the real module's reader
    monkeypatch.setitem(sys.modules, "vaelii_llm.providers.ollama", module)
    return built


async def test_pool_from_config_builds_one_provider_per_host(
    no_host_env: pytest.MonkeyPatch, fake_ollama: list[tuple[dict[str, Any], CountingProvider]]
) -> None:
    no_host_env.setenv("VAELII_OLLAMA_HOSTS", "gpu1:8080*3,gpu2")
    async with await vpool.pool_from_config(model="m1", acquire_timeout_ms=50) as p:
        assert p.size == 5
        assert p.acquire_timeout_ms == 50
        assert [opts for opts, _ in fake_ollama] == [
            {"host": "http://gpu1:8080", "model": "m1"},
            {"host": "http://gpu2:11434", "model": "m1"},
        ]
        assert p.providers == tuple(made for _, made in fake_ollama)
        assert (await vote(p, "q")).verdict == "yes"
    assert [made.closes for _, made in fake_ollama] == [1, 1]


async def test_pool_from_config_refuses_blank_and_cleans_up_a_failed_build(
    no_host_env: pytest.MonkeyPatch, fake_ollama: list[tuple[dict[str, Any], CountingProvider]]
) -> None:
    with pytest.raises(LLMBadHosts, match="blank"):
        await vpool.pool_from_config("")
    assert fake_ollama == []
    with pytest.raises(ValueError, match="cannot build"):
        await vpool.pool_from_config("gpu1,broken")
    closed = [(opts, made.closes) for opts, made in fake_ollama]
    assert closed == [({"host": "http://gpu1:11434"}, 1)]


async def test_pool_from_config_with_the_real_backend(no_host_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip(
        "vaelii_llm.providers.ollama", reason="the Ollama backend has not landed yet"
    )
    # Builds and closes providers only: nothing is sent, so no host is needed.
    async with await vpool.pool_from_config("127.0.0.1:9*2,[::1]:9") as p:
        assert p.size == 4
        assert len(p.providers) == 2


async def test_a_token_handed_back_goes_to_the_longest_waiter_not_a_newcomer() -> None:
    p = Pool([StubProvider()], acquire_timeout_ms=30_000)
    order: list[str] = []
    held = p.provider()
    await held.__aenter__()

    async def waiter() -> None:
        async with p.provider():
            order.append("waited")

    waiting = asyncio.create_task(waiter())
    await spin()
    assert p.statistics().waiters == 1
    await held.__aexit__(None, None, None)  # the waiter is woken, but has not run yet
    async with p.provider():  # a newcomer arriving in that instant joins the line
        order.append("newcomer")
    await waiting
    assert order == ["waited", "newcomer"]
    assert stats(p) == (1, 1, 0, 0)


async def test_calls_are_served_in_the_order_they_arrived() -> None:
    p = Pool([StubProvider()], acquire_timeout_ms=30_000)
    served: list[int] = []

    async def call(n: int) -> None:
        async with p.provider():
            served.append(n)
            await asyncio.sleep(0)

    tasks = []
    for n in range(20):
        tasks.append(asyncio.create_task(call(n)))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert served == list(range(20))


async def test_on_vote_sees_the_vote_so_far_after_each_turn() -> None:
    seen: list[vpool.Vote] = []
    async with vpool.stub_pool(["Yes.", {"raise": "llm-timeout"}, "No.", "Yes."], size=1) as p:
        outcome = await vote(p, "q", votes=4, on_vote=seen.append)
    assert [len(v.votes) for v in seen] == [1, 2, 3, 4]
    assert [v.failed for v in seen] == [0, 1, 1, 1]
    assert [dict(v.tally) for v in seen][-1] == {"yes": 2, "no": 1}
    assert {v.calls for v in seen} == {4}
    assert seen[-1] == outcome
    assert seen[0].verdict == "yes"


async def test_an_on_vote_that_raises_is_a_bug_raised_as_itself() -> None:
    def broken(_: vpool.Vote) -> None:
        raise KeyError("progress")

    async with vpool.stub_pool(["Yes."] * 3) as p:
        with pytest.raises(KeyError, match="progress"):
            await vote(p, "q", on_vote=broken)
        assert p.outstanding == 0


async def test_a_plain_question_asks_for_yes_or_no_first_and_a_request_goes_as_it_is() -> None:
    """A real model left to itself answers a question in prose, which is no
    vote: a plain question goes with ASK_YES_NO as its system prompt; a whole
    Request is the caller's, sent unchanged."""
    async with vpool.stub_pool(script=["Yes."] * 4, size=1) as vp:
        await vote(vp, "Is a spider an insect?", votes=1)
        own = Request(messages=[Message(role="user", content="Spider: insect?")], system="Terse.")
        await vote(vp, own, votes=1)
        seen = [r for p in vp.providers for r in p.requests()]
    assert [(r.system, r.messages[0].content) for r in seen] == [
        (ASK_YES_NO, "Is a spider an insect?"),
        ("Terse.", "Spider: insect?"),
    ]
