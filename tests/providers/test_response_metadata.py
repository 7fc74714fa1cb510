"""What a caller sees of a far end's response headers: its request id and the
rate-limit and retry headers each backend allow-lists, never a credential."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from tests.support.far_end_answers import ANSWERS
from tests.support.far_end_answers import KEY
from tests.support.far_end_answers import built
from tests.support.loopback import serve
from vaelii_llm import errors
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai

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


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", list(SEEN))
async def test_a_turn_carries_the_request_id_and_the_allowed_headers(
    kind: str, streamed: bool
) -> None:
    content_type, text = ANSWERS[kind][streamed]

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=text, content_type=content_type, headers=SENT)

    async with serve(handler) as url, built(kind, url) as model:
        if streamed:
            items = [item async for item in model.stream(QUESTION)]
            answer = items[-1]
        else:
            answer = await model.complete(QUESTION)
    assert isinstance(answer, Response)
    assert [b.text for b in answer.content if isinstance(b, TextBlock)] == ["No."]
    request_id, headers = SEEN[kind]
    assert (answer.request_id, answer.headers) == (request_id, headers or None)
    assert KEY not in repr(answer)


CREDENTIAL_HEADERS = (
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
    "x-goog-api-key",
)


@pytest.mark.parametrize(
    "endpoint",
    [
        anthropic.provider(credential=KEY)._codec.endpoint,
        openai.provider(base_url="http://127.0.0.1:9", api_key=KEY, model="m")._codec.endpoint,
        ollama.provider(host="http://127.0.0.1:9", model="m")._codec.endpoint,
    ],
    ids=lambda e: e.slug,
)
def test_no_allow_list_lets_a_credential_header_through(endpoint: Any) -> None:
    raw = dict.fromkeys(CREDENTIAL_HEADERS, KEY)
    assert endpoint.headers.read(raw) == (None, {})


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_an_error_inside_a_200_carries_the_answer_s_request_id(streamed: bool) -> None:
    """The Messages API's ``overloaded_error`` in a 200 (an ``error`` body, an
    ``error`` event mid-stream) is the caller's to retry, with the answer's
    request id and retry headers as an error status has them."""
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        if not streamed:
            return web.json_response(overloaded, headers=SENT)
        started = {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 3, "output_tokens": 0},
            },
        }
        body = "".join(
            f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in (started, overloaded)
        )
        return web.Response(text=body, content_type="text/event-stream", headers=SENT)

    async with serve(handler) as url, built("anthropic", url) as model:
        with pytest.raises(errors.LLMApiError) as raised:
            await turn(model, streamed)
    assert raised.value.retryable
    assert (raised.value.request_id, dict(raised.value.headers)) == SEEN["anthropic"]
