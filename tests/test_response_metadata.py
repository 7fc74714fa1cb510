"""What a caller sees of a far end's response headers: its request id and the
rate-limit and retry headers each backend allow-lists, never a credential."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from loopback import serve

from vaelii_llm import errors
from vaelii_llm._protocol import Message, Request
from vaelii_llm.providers import anthropic, ollama, openai

KEY = "sk-ant-api03-K9v2QmZt7LwR4pXsH3jN8cYb"
QUESTION = Request(messages=[Message(role="user", content="Is a spider an insect?")])

SENT = {
    "request-id": "req_123",
    "x-request-id": "req_456",
    "retry-after": "7",
    "anthropic-ratelimit-requests-remaining": "0",
    "x-ratelimit-remaining-tokens": "12",
    # What no caller may be shown, whatever the far end echoes.
    "x-api-key": KEY,
    "authorization": f"Bearer {KEY}",
    "set-cookie": f"session={KEY}",
    "x-goog-api-key": KEY,
}

SEEN: dict[str, tuple[str | None, dict[str, str]]] = {
    "anthropic": (
        "req_123",
        {"retry-after": "7", "anthropic-ratelimit-requests-remaining": "0"},
    ),
    "openai": ("req_456", {"retry-after": "7", "x-ratelimit-remaining-tokens": "12"}),
    "ollama": (None, {}),  # Ollama sends none of these: nothing is read
}


def built(kind: str, url: str) -> Any:
    if kind == "anthropic":
        return anthropic.provider(credential=KEY, base_url=url)
    if kind == "openai":
        return openai.provider(base_url=url, api_key=KEY, model="m")
    return ollama.provider(host=url, model="m")


def answering(status: int) -> Any:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, text='{"error": "no"}', headers=SENT)

    return handler


async def turn(model: Any, streamed: bool) -> None:
    if streamed:
        async for _ in model.stream(QUESTION):
            pass
    else:
        await model.complete(QUESTION)


async def failure(kind: str, url: str, streamed: bool) -> errors.LLMApiError:
    async with built(kind, url) as model:
        with pytest.raises(errors.LLMApiError) as info:
            await turn(model, streamed)
    return info.value


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", list(SEEN))
async def test_a_429_carries_the_request_id_and_the_allowed_headers(
    kind: str, streamed: bool
) -> None:
    async with serve(answering(429)) as url:
        err = await failure(kind, url, streamed)
    assert (err.status, err.retryable) == (429, True)
    assert (err.request_id, dict(err.headers)) == SEEN[kind]
    assert KEY not in repr((err.request_id, err.headers, str(err)))


@pytest.mark.parametrize("kind", list(SEEN))
async def test_a_400_is_not_retryable_and_carries_the_same(kind: str) -> None:
    async with serve(answering(400)) as url:
        err = await failure(kind, url, streamed=False)
    assert (err.status, err.retryable) == (400, False)
    assert (err.request_id, dict(err.headers)) == SEEN[kind]
