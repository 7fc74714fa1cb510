"""``live_model``: consent first, then reachability, then the model; the skip names
the first that fails. Run against the fake Ollama, never a real one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.liveutil import live_model


@pytest.fixture
async def fake() -> AsyncIterator[FakeOllama]:
    server = await FakeOllama().start()
    try:
        yield server
    finally:
        await server.stop()


async def skip_reason(name: str, host: str) -> str:
    with pytest.raises(pytest.skip.Exception) as info:
        await live_model(name, host=host)
    return str(info.value)


async def test_without_consent_nothing_is_probed(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VAELII_LLM_LIVE", raising=False)
    assert "VAELII_LLM_LIVE=1" in await skip_reason("phi4:14b", fake.url)
    assert fake.connections == 0


async def test_consent_then_an_unreachable_host(
    monkeypatch: pytest.MonkeyPatch, unused_tcp_port: int
) -> None:
    monkeypatch.setenv("VAELII_LLM_LIVE", "1")
    host = f"127.0.0.1:{unused_tcp_port}"
    assert await skip_reason("phi4:14b", host) == f"no Ollama answers at http://{host}"


async def test_consent_and_a_host_without_the_model(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAELII_LLM_LIVE", "yes")
    reason = await skip_reason("no-such-model:1b", fake.url)
    assert reason == f"Ollama at {fake.url} does not have 'no-such-model:1b' (llm-api-error)"


async def test_all_three_hold(fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAELII_LLM_LIVE", "1")
    assert await live_model("phi4:14b", host=fake.url) == fake.url
