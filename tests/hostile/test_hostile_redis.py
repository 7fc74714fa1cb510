"""What a hostile or forgetful Redis could do to a shared pool (issue 36, items 1
and 2): answer the slot scripts with a reply of the wrong shape, or restart
without persistence while calls hold slots.

A wrong reply is played by a small RESP server here (it answers the scripts'
EVALSHA, or a command of the connection's handshake, with the row's bytes and
everything else as a Redis would); a restart by a real ``redis-server``
(tests/support/redis_server.py), killed with SIGKILL and started again on its port,
empty. Issue 46: the same bounds hold whatever the Redis client raises, so
the client is also made to raise an exception of no library's (monkeypatched)
against a real ``redis-server``.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
from collections.abc import AsyncIterator
from collections.abc import Iterator
from contextlib import AsyncExitStack
from contextlib import asynccontextmanager
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from aiohttp import web

from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import merged
from tests.support.loopback import serve
from tests.support.loopback import serve_raw
from tests.support.polling import until
from tests.support.redis_pools import TTL_MS
from tests.support.redis_pools import hosts
from tests.support.redis_pools import shared_pool
from tests.support.redis_server import RedisServer
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.pool import _redis_slots
from vaelii_llm.pool import vote
from vaelii_llm.pool._pool import Pool
from vaelii_llm.pool._redis_scripts import COUNT
from vaelii_llm.pool._redis_scripts import RENEW
from vaelii_llm.pool._redis_scripts import STEP
from vaelii_llm.pool._redis_slots import OP_TIMEOUT_S
from vaelii_llm.pool._redis_slots import RedisSlots
from vaelii_llm.providers import ollama

RUN = b"5f" * 20
"""The run id the fake Redis answers with: 40 hex digits, as a real one's."""

SHAS = {
    hashlib.sha1(source.encode()).hexdigest().encode(): name
    for name, source in (("step", STEP), ("renew", RENEW), ("count", COUNT))
}


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def array(*items: bytes) -> bytes:
    return b"*%d\r\n%s" % (len(items), b"".join(items))


@dataclass
class FakeRedis:
    """A RESP server answering each slot script with ``replies[script]`` (raw
    bytes; a script not named there answers as the real one would for one
    host and one take: host 1, or every lease kept), SCRIPT LOAD with the
    script's digest, BLPOP with nil after its timeout, HELLO as a Redis 6 does,
    any other command with ``replies[command]`` (``"auth"``, ``"client"``…)
    or +OK."""

    replies: dict[str, bytes]
    asked: list[str] = field(default_factory=list)
    url: str = ""
    renewed_twice: asyncio.Event = field(default_factory=asyncio.Event)

    def answer(self, words: list[bytes]) -> bytes:
        command = words[0].upper()
        if command in (b"EVALSHA", b"EVAL"):
            sha = words[1] if command == b"EVALSHA" else hashlib.sha1(words[1]).hexdigest().encode()
            script = SHAS.get(sha.lower())
            if script is None:
                return b"-NOSCRIPT No matching script.\r\n"
            self.asked.append(script)
            if self.asked.count("renew") == 2:
                self.renewed_twice.set()
            if script in self.replies:
                return self.replies[script]
            if script == "step":  # every take gets host 1: KEYS, then ARGV's count
                keys = int(words[2])
                count = int(words[3 + keys + 1 + (keys - 4) // 3 + 3])
                return array(bulk(RUN), bulk(b",".join([b"1"] * count)))
            if script == "renew":
                return array(bulk(RUN), b":%d\r\n" % (len(words) - 5))
            return array(b":0\r\n", b":0\r\n")
        if command == b"SCRIPT":
            return bulk(hashlib.sha1(words[2]).hexdigest().encode())
        self.asked.append(command.decode().lower())
        if self.asked[-1] in self.replies:
            return self.replies[self.asked[-1]]
        if command == b"HELLO":  # the server's facts, as a map (RESP3) or an array
            facts = [bulk(b"server"), bulk(b"redis"), bulk(b"proto"), b":%s\r\n" % words[1]]
            head = b"%%%d\r\n" % (len(facts) // 2) if words[1] == b"3" else b"*%d\r\n" % 4
            return head + b"".join(facts)
        return b"+OK\r\n"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readline()
                if not head:
                    return
                assert head.startswith(b"*"), head
                words = []
                for _ in range(int(head[1:])):
                    size = int((await reader.readline())[1:])
                    words.append((await reader.readexactly(size + 2))[:-2])
                if words[0].upper() == b"BLPOP":  # blocks its timeout, as Redis's does
                    await asyncio.sleep(float(words[-1]))
                    writer.write(b"*-1\r\n")
                else:
                    writer.write(self.answer(words))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def fake_redis(replies: dict[str, bytes]) -> AsyncIterator[FakeRedis]:
    fake = FakeRedis(replies)
    async with serve_raw(fake.serve) as base:
        fake.url = base.replace("http://", "redis://") + "/0"
        yield fake


# ---------------------------------------------------------------------------
# Item 1: a reply of the wrong shape to a slot script

STEP_ROWS = {
    "an integer": b":5\r\n",
    "a bare string": b"+abc\r\n",
    "a bulk string": bulk(b"abc"),
    "an empty string": bulk(b""),
    "nil": b"_\r\n",
    "a true": b"#t\r\n",
    "a double": b",1.5\r\n",
    "a map": b"%1\r\n+a\r\n:1\r\n",
    "an empty array": b"*0\r\n",
    "an array of one": array(bulk(RUN)),
    "an array of integers": array(b":1\r\n", b":2\r\n"),
    "a nested array": array(array(bulk(RUN)), bulk(b"1")),
    "no run id": array(bulk(b"nope"), bulk(b"1")),
    "a host out of range": array(bulk(RUN), bulk(b"9")),
    "a negative host": array(bulk(RUN), bulk(b"-1")),
    "a host that is no number": array(bulk(RUN), bulk(b"abc")),
    "two answers for one take": array(bulk(RUN), bulk(b"1,1")),
    "no answer for one take": array(bulk(RUN), bulk(b"")),
    "an integer answer": array(bulk(RUN), b":1\r\n"),
    "protocol garbage": b"abc\r\n",
    "an error": b"-ERR boom\r\n",
    "a RESP2 nil": b"$-1\r\n",
}
"""Each ends the take at once: the pool speaks RESP2 on every redis-py, so
RESP3's types (nil, true, double, map) are protocol errors there."""

ACQUIRE_MS = 2_000


async def _checked_out(url: str, timeout_ms: int) -> tuple[Any, Any]:
    """One checkout from a one-host pool on ``url``: what it raised, and the
    pool (closed)."""
    async with hosts(1) as (a,):
        p = shared_pool([a.url], url, slots=1, acquire_timeout_ms=timeout_ms)
        raised: BaseException | None = None
        try:
            async with asyncio.timeout(timeout_ms / 1000 + 5):  # a hang guard only
                async with p.provider():
                    pass
        except LLMUnreachable as exc:
            raised = exc
        await p.aclose()
        return raised, p


@pytest.mark.parametrize("row", STEP_ROWS)
async def test_a_wrong_reply_to_the_take_script_ends_the_take_typed_and_at_once(
    row: str, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    handed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handed.append(context))
    try:
        async with fake_redis({"step": STEP_ROWS[row]}) as fake:
            raised, p = await _checked_out(fake.url, ACQUIRE_MS)
        assert isinstance(raised, LLMUnreachable), raised
        assert raised.label == f"the vote pool's Redis at {fake.url}"
        # The reply itself ends the take, not the acquire timeout.
        assert "no answer inside" not in str(raised), str(raised)
        assert "step" in fake.asked
        assert (p.outstanding, p.statistics().waiters) == (0, 0)
        assert [h.held for h in p.statistics().hosts] == [0]
        assert p._slots._held == {}  # no lease counted as taken here
        assert len(str(raised)) < 400  # the reply's excerpt, not the whole
    finally:
        gc.collect()  # a task whose exception nobody read reports it when collected
        loop.set_exception_handler(None)
    assert handed == []
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


RENEW_ROWS = {
    "an integer": b":5\r\n",
    "a bulk string": bulk(b"abc"),
    "nil": b"_\r\n",
    "an array of one": array(bulk(RUN)),
    "a count that is no number": array(bulk(RUN), bulk(b"abc")),
    "more kept than held": array(bulk(RUN), b":7\r\n"),
    "protocol garbage": b"abc\r\n",
}


@pytest.mark.parametrize("reply", RENEW_ROWS.values(), ids=RENEW_ROWS.keys())
async def test_a_wrong_reply_to_the_renewal_is_logged_typed_and_the_slot_still_goes_back(
    reply: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    handed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handed.append(context))
    caplog.set_level(logging.WARNING, "vaelii_llm.pool")
    try:
        async with fake_redis({"renew": reply}) as fake, hosts(1) as (a,):
            p = shared_pool([a.url], fake.url, slots=1, lease_ttl_ms=30)
            async with p.provider():
                # Renewals every 10 ms: the second is asked once the first
                # was answered wrongly and logged.
                await fake.renewed_twice.wait()
            await p.aclose()
        assert (p.outstanding, p._slots._held) == (0, {})
        scripts = [a for a in fake.asked if a in SHAS.values()]
        assert scripts[-1] == "step"  # the release went out after the bad renewals
        warned = [r.getMessage() for r in caplog.records if r.name == "vaelii_llm.pool"]
        assert warned
        assert all("leases were not renewed" in w for w in warned), warned
        assert all(fake.url in w for w in warned)
    finally:
        gc.collect()
        loop.set_exception_handler(None)
    assert handed == []


COUNT_ROWS = {
    "an integer": b":5\r\n",
    "an array too short": array(b":0\r\n"),
    "a negative count": array(b":-1\r\n", b":0\r\n"),
    "a cooling flag of 2": array(b":0\r\n", b":2\r\n"),
    "strings": array(bulk(b"abc"), bulk(b"0")),
    "nil": b"_\r\n",
}


@pytest.mark.parametrize("reply", COUNT_ROWS.values(), ids=COUNT_ROWS.keys())
async def test_a_wrong_reply_to_the_count_script_is_unreachable(reply: bytes) -> None:
    async with fake_redis({"count": reply}) as fake, hosts(1) as (a,):
        p = shared_pool([a.url], fake.url, slots=1)
        with pytest.raises(LLMUnreachable) as raised:
            await p.read_statistics()
        await p.aclose()
    assert raised.value.label == f"the vote pool's Redis at {fake.url}"


async def test_the_fake_answers_a_well_formed_take_as_redis_would() -> None:
    """The fake's own answers are good ones: a checkout on it succeeds, so each
    row above fails for its reply alone."""
    async with fake_redis({}) as fake, hosts(1) as (a,):
        p = shared_pool([a.url], fake.url, slots=1)
        async with p.provider():
            assert [h.held for h in p.statistics().hosts] == [1]
        assert (await p.read_statistics()).hosts[0].held_everywhere == 0
        await p.aclose()
    assert next(a for a in fake.asked if a in SHAS.values()) == "step"
    assert "count" in fake.asked


# ---------------------------------------------------------------------------
# Issue 46: the connection's handshake answered wrongly

HANDSHAKE_ROWS = {
    "AUTH answered with a map": ("auth", b"%1\r\n+a\r\n:1\r\n"),
    "AUTH answered with garbage": ("auth", b"abc\r\n"),
    "AUTH answered with nil": ("auth", b"$-1\r\n"),
    "AUTH refused": ("auth", b"-WRONGPASS invalid username-password pair\r\n"),
    "CLIENT SETINFO answered with garbage": ("client", b"abc\r\n"),
    "HELLO answered with a bare string": ("hello", b"+OK\r\n"),
}
"""A handshake command and a wrong answer to it. HELLO is never sent (the
pool speaks RESP2): its row proves the pool does not depend on it."""

FAST_S = 1.0
"""A typed failure "at once": well inside the acquire timeout on a loaded machine."""


@pytest.mark.parametrize("row", HANDSHAKE_ROWS)
async def test_a_handshake_answered_wrongly_is_a_typed_failure_at_once(row: str) -> None:
    command, reply = HANDSHAKE_ROWS[row]
    loop = asyncio.get_running_loop()
    handed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handed.append(context))
    try:
        async with fake_redis({command: reply}) as fake:
            url = fake.url.replace("redis://", "redis://:hunter2@")
            started = loop.time()
            raised, p = await _checked_out(url, ACQUIRE_MS)
            took = loop.time() - started
        if command == "hello":  # never asked: the checkout succeeds
            assert raised is None
            assert "hello" not in fake.asked
        else:
            assert isinstance(raised, LLMUnreachable), raised
            assert took < FAST_S, took
            assert "hunter2" not in f"{raised} {raised!r} {raised.reason}"
            assert command in fake.asked
            assert "step" not in fake.asked  # it failed before the script was sent
        assert (p.outstanding, p._slots._held) == (0, {})
    finally:
        gc.collect()
        loop.set_exception_handler(None)
    assert handed == []


# ---------------------------------------------------------------------------
# Issue 46: whatever the client raises, every waiter ends typed, in its bound


@pytest.fixture
async def real_redis() -> AsyncIterator[RedisServer]:
    async with RedisServer() as server:
        yield server


class Surprise(Exception):
    """An exception of no library's: what a client version might raise."""


def surprising(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on every reply the Redis client reads raises :class:`Surprise`."""

    async def read_response(*args: Any, **kwargs: Any) -> Any:
        raise Surprise("the client's parser met something new")

    monkeypatch.setattr(aioredis.connection.Connection, "read_response", read_response)


@contextmanager
def watched(caplog: pytest.LogCaptureFixture) -> Iterator[list[dict[str, Any]]]:
    """What the loop's exception handler was handed meanwhile (a task's exception
    nobody read among it, once collected); "never retrieved" is never logged."""
    loop = asyncio.get_running_loop()
    handed: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handed.append(context))
    try:
        yield handed
    finally:
        gc.collect()
        loop.set_exception_handler(None)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


LEAKY = int(redis.__version__.split(".")[0]) < 6
"""redis-py 5 never gives back a connection whose handshake raised what it did
not expect: once its pool is spent, the next command waits out the pool's
timeout (:data:`OP_TIMEOUT_S`) and fails "No connection available"."""


def surprised(raised: BaseException | None, url: str) -> None:
    """``raised`` is the pool's typed failure, the client's exception chained."""
    assert isinstance(raised, LLMUnreachable), raised
    assert raised.label == f"the vote pool's Redis at {url}"
    if LEAKY and "No connection available" in raised.reason:
        assert raised.__cause__ is not None
        return
    assert isinstance(raised.__cause__, Surprise), repr(raised.__cause__)
    assert "Surprise" in raised.reason


@pytest.mark.parametrize("timeout_ms", [ACQUIRE_MS, 0])
async def test_whatever_the_client_raises_a_take_ends_typed_at_once(
    timeout_ms: int,
    real_redis: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    surprising(monkeypatch)
    loop = asyncio.get_running_loop()
    with watched(caplog) as handed:
        started = loop.time()
        raised, p = await _checked_out(real_redis.url, timeout_ms)
        took = loop.time() - started
        surprised(raised, real_redis.url)
        assert took < FAST_S, took
        assert (p.outstanding, p._slots._held) == (0, {})
    assert handed == []


async def test_whatever_the_client_raises_counting_renewing_and_cooling_end_typed(
    real_redis: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "vaelii_llm.pool")
    with watched(caplog) as handed:
        async with hosts(1) as (a,):
            p = shared_pool([a.url], real_redis.url, slots=1, lease_ttl_ms=60)
            async with p.provider():
                surprising(monkeypatch)  # the slot is held: now renewals fail
                with pytest.raises(LLMUnreachable) as counted:
                    await p.read_statistics()
                surprised(counted.value, real_redis.url)
                p._slots.cool(0)
                await until(lambda: len(caplog.records) >= 2)
            monkeypatch.undo()
            await p.aclose()
            # The release went back (or expires in its TTL): nothing is held here.
            assert (p.outstanding, p._slots._held) == (0, {})
    warned = [r.getMessage() for r in caplog.records]
    why = ("Surprise", "No connection available") if LEAKY else ("Surprise",)
    for what in ("leases were not renewed", "cool-down was not shared"):
        assert any(what in w and any(word in w for word in why) for w in warned), warned
    assert handed == []


async def test_whatever_the_client_raises_a_waiter_ends_typed_before_its_bound(
    real_redis: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    with watched(caplog) as handed:
        async with hosts(1) as (a,):
            p = shared_pool([a.url], real_redis.url, slots=1, acquire_timeout_ms=60_000)
            async with p.provider():  # the only slot is held: the next call waits
                waiter = asyncio.create_task(_checked_out_of(p))
                await until(lambda: p.statistics().waiters == 1)
                surprising(monkeypatch)  # its watcher's BLPOP, then its take, raise
                started = loop.time()
                async with asyncio.timeout(30):  # a hang guard only
                    raised = await waiter
                took = loop.time() - started
            monkeypatch.undo()
            await p.aclose()
        surprised(raised, real_redis.url)
        # A poll, then the take's failure (on a leaky client, the op timeout).
        assert took < (OP_TIMEOUT_S if LEAKY else 0) + 2 * FAST_S, took
    assert handed == []


async def _checked_out_of(p: Pool[Any]) -> BaseException | None:
    try:
        async with p.provider():
            return None
    except LLMUnreachable as exc:
        return exc


async def test_a_carrier_that_dies_fails_its_takes_at_once(
    real_redis: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(*args: Any) -> None:
        raise Surprise("a bug in answering")

    monkeypatch.setattr(RedisSlots, "_answer", answer)
    caplog.set_level(logging.WARNING, "vaelii_llm.pool")
    loop = asyncio.get_running_loop()
    with watched(caplog) as handed:
        started = loop.time()
        raised, _ = await _checked_out(real_redis.url, 60_000)
        took = loop.time() - started
        surprised(raised, real_redis.url)
        assert took < FAST_S, took
    assert handed == []
    assert any("background work" in r.getMessage() for r in caplog.records)


async def test_a_carrier_cancelled_before_it_runs_fails_its_takes_at_once(
    real_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with watched(caplog) as handed:
        async with hosts(1) as (a,):
            p = shared_pool([a.url], real_redis.url, slots=1, acquire_timeout_ms=60_000)
            slots = p._slots
            assert isinstance(slots, RedisSlots)
            asked = slots.take("", asyncio.get_running_loop().time() + 60)
            assert slots._sending is not None
            slots._sending.cancel()  # before its first step
            async with asyncio.timeout(FAST_S):
                with pytest.raises(LLMUnreachable, match="cancelled before it was sent"):
                    await asked
            await p.aclose()
    assert handed == []


@pytest.mark.parametrize("timeout_ms", [300, 0])
async def test_a_carrier_that_never_answers_holds_no_waiter_past_its_bound(
    timeout_ms: int, real_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def step(*args: Any) -> Any:
        await asyncio.Event().wait()  # hangs, past every timeout of its own

    monkeypatch.setattr(RedisSlots, "_step", step)
    monkeypatch.setattr(_redis_slots, "STEP_BUDGET_S", 0.3)
    loop = asyncio.get_running_loop()
    async with hosts(1) as (a,):
        p = shared_pool([a.url], real_redis.url, slots=1, acquire_timeout_ms=timeout_ms)
        started = loop.time()
        raised = await _checked_out_of(p)
        took = loop.time() - started
        await p.aclose()  # the hung carrier is given its grace, then cancelled
    bound = "the pool's 300 ms" if timeout_ms else "0.3 s"
    assert isinstance(raised, LLMUnreachable), raised
    assert f"no answer inside {bound}" in str(raised)
    assert 0.25 < took < 0.3 + FAST_S, took
    assert (p.outstanding, p._slots._held, p._slots._tasks) == (0, {}, set())


# ---------------------------------------------------------------------------
# Item 2: a Redis restarted without persistence while calls hold slots

LIMITS = (2, 1, 3)
"""The issue's hosts: calls at once each takes."""


class HeldHost:
    """A loopback Ollama that holds every chat call until :attr:`release` is
    set, counting the calls it holds at once, and the most it held."""

    def __init__(self) -> None:
        self.active = 0
        self.most = 0
        self.release = asyncio.Event()
        self.changed = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.active += 1
        self.most = max(self.most, self.active)
        self.changed.set()
        try:
            await self.release.wait()
            return web.json_response(merged([chunk("Yes."), final()]))
        finally:
            self.active -= 1

    async def wait_active(self, count: int) -> None:
        while self.active < count:
            self.changed.clear()
            await self.changed.wait()


def held_pool(urls: list[str], redis_url: str) -> Pool[ollama.OllamaProvider]:
    tokens = []
    for url, slots in zip(urls, LIMITS, strict=True):
        tokens += [ollama.provider(host=url)] * slots
    return Pool(tokens, redis_url=redis_url, lease_ttl_ms=TTL_MS, acquire_timeout_ms=60_000)


async def uptime_s(client: aioredis.Redis) -> int:
    return int((await client.info("server"))["uptime_in_seconds"])


async def test_a_redis_restarted_empty_does_not_hand_out_the_slots_of_calls_in_flight() -> None:
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(RedisServer())
        found = [HeldHost() for _ in LIMITS]
        for host in found:
            host.url = await stack.enter_async_context(serve(host.handle))
        urls = [host.url for host in found]
        # Two pools on one Redis, as two worker processes that have both used it:
        # one holds every slot of every host when Redis is killed and started
        # again, empty; the other has as many calls arriving then.
        holder = await stack.enter_async_context(held_pool(urls, server.url))
        waiter = await stack.enter_async_context(held_pool(urls, server.url))
        async with waiter.provider():
            pass
        held = [asyncio.create_task(vote(holder, "q", votes=1)) for _ in range(sum(LIMITS))]
        for host, slots in zip(found, LIMITS, strict=True):
            await host.wait_active(slots)

        await server.stop()  # SIGKILL: every lease is gone with it
        await server.start()  # same port, no persistence: empty
        waiting = [asyncio.create_task(vote(waiter, "q", votes=1)) for _ in range(sum(LIMITS))]
        await until(lambda: waiter.statistics().waiters + waiter.outstanding == sum(LIMITS))
        client = aioredis.from_url(server.url)
        stack.push_async_callback(client.aclose)
        # The waiters poll every POLL_S and the holder renews every third of the
        # TTL: wait until the new server has been up past the fence (one TTL)
        # and a few polls more.
        for _ in range(300):  # ~30 s at most: a hang guard
            if await uptime_s(client) >= TTL_MS // 1000 + 2:
                break
            await asyncio.sleep(0.1)
        after = [host.most for host in found]
        assert after == list(LIMITS)  # never more than each host takes
        assert waiter.statistics().waiters == sum(LIMITS)  # still waiting their turn
        # The holder's leases were re-asserted in the new server.
        everywhere = [h.held_everywhere for h in (await waiter.read_statistics()).hosts]
        assert everywhere == list(LIMITS)

        for host in found:  # the held calls end; the waiting ones take their slots
            host.release.set()
        async with asyncio.timeout(30):  # a hang guard only
            results = await asyncio.gather(*held, *waiting)
        assert [r.tally["yes"] for r in results] == [1] * 2 * sum(LIMITS)
        assert [host.most for host in found] == list(LIMITS)
        assert (holder.outstanding, waiter.outstanding) == (0, 0)
