"""The pool's Redis against disagreeing and hostile setups (issue 47): two pools
with different limits for one host, a new limit taking once the old pools stop,
a Redis password never shown.
"""

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.support.loopback import refused_url
from tests.support.redis_pools import hosts
from tests.support.redis_pools import shared_pool
from tests.support.redis_server import RedisServer
from vaelii_llm import cli
from vaelii_llm import errors
from vaelii_llm.pool import vote

# -- items 7 and 12: the pool's Redis --------------------------------------------------


@pytest.fixture
async def redis_server() -> AsyncIterator[RedisServer]:
    async with RedisServer() as server:
        yield server


async def test_two_pools_with_different_limits_for_one_host_are_refused(
    redis_server: RedisServer,
) -> None:
    """``host*1`` in one pool and ``host*3`` in another on one Redis: main let
    the host see 3 calls at once; now the second limit is refused, typed."""
    async with hosts(1) as (a,):
        one = shared_pool([a.url], redis_server.url, slots=1)
        three = shared_pool([a.url], redis_server.url, slots=3)
        async with one, three:
            async with one.provider():
                pass  # the first to use the pool's keys records its limit
            with pytest.raises(errors.LLMBadHosts, match="1 calls at once, this one 3"):
                async with three.provider():
                    pass
            results = await asyncio.gather(
                *(vote(p, "Is a spider an insect?") for p in (one, three) for _ in range(4))
            )
    print(f"most calls in flight at the host: {a.most}")
    assert a.most == 1
    assert all(r.failed == 0 for r in results[:4])
    assert all(r.failed == 3 for r in results[4:])
    assert all(isinstance(e, errors.LLMBadHosts) for r in results[4:] for e in r.errors)


async def test_agreeing_pools_share_and_a_new_limit_takes_once_the_old_ones_stop(
    redis_server: RedisServer,
) -> None:
    async with hosts(1) as (a,):
        first = shared_pool([a.url], redis_server.url, slots=2, lease_ttl_ms=300)
        same = shared_pool([a.url], redis_server.url, slots=2, lease_ttl_ms=300)
        async with first, same:
            for p in (first, same):
                async with p.provider():
                    pass
        await asyncio.sleep(0.4)  # a lease TTL after the last use: the record expired
        changed = shared_pool([a.url], redis_server.url, slots=3, lease_ttl_ms=300)
        async with changed, changed.provider():
            pass


REDIS_PASSWORD = "pw-SECRET-0451"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:{port}/0?password=" + REDIS_PASSWORD,
        "redis://127.0.0.1:{port}/0?db=0&password=" + REDIS_PASSWORD + "&protocol=3",
        "unix:///tmp/vaelii-no-such-redis-{port}.sock?password=" + REDIS_PASSWORD,
    ],
    ids=["redis", "redis-second-param", "unix"],
)
async def test_a_redis_password_in_the_query_is_never_shown(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = url.format(port=refused_url().rsplit(":", 1)[1])
    async with hosts(1) as (a,):
        p = shared_pool([a.url], url)
        with pytest.raises(errors.LLMUnreachable) as raised:
            async with p.provider():
                pass
        await p.aclose()
    shown = f"{raised.value} {raised.value!r} {raised.value.__dict__} {p!r}"
    assert REDIS_PASSWORD not in shown
    monkeypatch.setenv("VAELII_POOL_REDIS_URL", url)
    assert cli.main(["config"]) == 0
    out, err = capsys.readouterr()
    assert "VAELII_POOL_REDIS_URL" in out
    assert REDIS_PASSWORD not in out + err
