"""What a far end puts in its headers and counts (issue 47): a key echoed in a
response header is withheld, a header value holding a terminal's escape, a format
character or a megabyte is cleaned and cut, a count below zero or absurd is a
bad response and never defeats an agent's budget.
"""

import asyncio
import contextlib
import json
import re
import unicodedata
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import Recorded
from tests.support.far_end_answers import ANSWERS
from tests.support.far_end_answers import MESSAGE
from tests.support.far_end_answers import OLLAMA_DONE
from tests.support.far_end_answers import built
from tests.support.loopback import RawHandler
from tests.support.loopback import serve
from tests.support.loopback import serve_raw
from vaelii_llm import agent
from vaelii_llm import errors
from vaelii_llm import kb
from vaelii_llm import telemetry
from vaelii_llm import tools
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import openai

KEY = "sk-ant-api03-Q7m2Xv9LtR4pWsH3jN8cYbZ5"
QUESTION = Request(messages=[Message(role="user", content="Is a spider an insect?")])
HOSTED = {
    "anthropic": ("request-id", "anthropic-ratelimit-tokens-remaining"),
    "openai": ("x-request-id", "x-ratelimit-remaining-tokens"),
}


def hosted(kind: str, url: str) -> Any:
    if kind == "anthropic":
        return anthropic.provider(credential=KEY, base_url=url)
    return openai.provider(base_url=url, api_key=KEY, model="m")


async def answered(kind: str, url: str, streamed: bool) -> Response | errors.LLMApiError:
    """What one turn ends in: its Response, or the LLMApiError it raised."""
    async with hosted(kind, url) as model:
        try:
            return await one_turn(model, streamed)
        except errors.LLMApiError as exc:
            return exc


async def one_turn(model: Any, streamed: bool) -> Response:
    if not streamed:
        return await model.complete(QUESTION)
    items = [item async for item in model.stream(QUESTION)]
    assert isinstance(items[-1], Response)
    return items[-1]


def shown(outcome: Response | errors.LLMApiError) -> str:
    """Everything a caller, a log line or a span may show of ``outcome``."""
    if isinstance(outcome, Response):
        return repr((outcome, outcome.request_id, outcome.headers))
    return repr((outcome, str(outcome), outcome.request_id, outcome.headers, outcome.__dict__))


# -- item 1: a key echoed in a response header is withheld -----------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [200, 429])
@pytest.mark.parametrize("kind", list(HOSTED))
async def test_a_key_echoed_in_a_shown_header_is_withheld(
    kind: str, status: int, streamed: bool
) -> None:
    request_id, limit = HOSTED[kind]
    echoed = {request_id: f"req_{KEY}", limit: KEY, "retry-after": f"in {KEY[:20]}"}
    content_type, text = ANSWERS[kind][streamed]

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        if status != 200:
            return web.Response(status=status, text='{"error": "no"}', headers=echoed)
        return web.Response(text=text, content_type=content_type, headers=echoed)

    async with serve(handler) as url:
        outcome = await answered(kind, url, streamed)
    assert isinstance(outcome, Response if status == 200 else errors.LLMApiError)
    assert outcome.request_id is not None
    assert outcome.request_id.startswith("req_<")
    assert outcome.headers
    assert KEY not in shown(outcome)
    assert KEY[:8] not in shown(outcome)  # not even the cut opening


@pytest.mark.parametrize("status", [200, 429])
async def test_a_key_echoed_in_a_header_stays_out_of_the_span(status: int, otel: Recorded) -> None:
    otel.enable()

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            status=status,
            text=json.dumps(MESSAGE) if status == 200 else '{"error": "no"}',
            content_type="application/json",
            headers={"request-id": KEY},
        )

    async with (
        serve(handler) as url,
        telemetry.instrument(hosted("anthropic", url), "anthropic") as model,
    ):
        with contextlib.suppress(errors.LLMApiError):
            await model.complete(QUESTION)
    (span,) = otel.finished()
    assert KEY not in repr(dict(span.attributes or {})) + repr(span.events)


async def test_an_error_event_in_a_200_stream_withholds_its_request_id() -> None:
    started = {"type": "message_start", "message": {**MESSAGE, "content": []}}
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in (started, overloaded))

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            text=body, content_type="text/event-stream", headers={"request-id": KEY}
        )

    async with serve(handler) as url:
        outcome = await answered("anthropic", url, streamed=True)
    assert isinstance(outcome, errors.LLMApiError)
    assert outcome.request_id == "<x-api-key withheld>"
    assert KEY not in shown(outcome)


# -- item 2: shown header values are cleaned and bounded --------------------------------

HOSTILE_VALUES = {
    "escape": "req_1\x1b]0;owned\x07\x1b[2J",
    "bidi": "req_1\u202etxt.exe",
    "long": "r" * 7_000,
}


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [200, 529])
@pytest.mark.parametrize("kind", list(HOSTED))
async def test_shown_header_values_hold_no_control_and_are_bounded(
    kind: str, status: int, streamed: bool
) -> None:
    request_id, limit = HOSTED[kind]
    content_type, text = ANSWERS[kind][streamed]
    # 100 allow-listed headers of 7,000 characters: 0.7 MB on every answer.
    many = [(f"{limit}-{n}", "9" * 7_000) for n in range(100)]
    many += [(request_id, HOSTILE_VALUES["escape"]), (limit, HOSTILE_VALUES["bidi"])]

    if status != 200:
        content_type, text = "application/json", '{"error": "no"}'

    async with serve_raw(raw_answer(status, content_type, text, many)) as url:
        outcome = await answered(kind, url, streamed)
    assert outcome.request_id == "req_1]0;owned[2J"
    headers = outcome.headers or {}
    assert headers.get(limit) in (None, "req_1txt.exe")
    values = [outcome.request_id, *headers.values()]
    assert all(not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in v) for v in values)
    assert all(len(v) <= 300 for v in values)
    assert sum(len(k) + len(v) for k, v in headers.items()) <= 4096


def raw_answer(
    status: int, content_type: str, text: str, headers: list[tuple[str, str]]
) -> RawHandler:
    """A far end answering every request with ``headers`` written as they are
    (aiohttp's own server refuses to send a control character)."""
    body = text.encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        await reader.readexactly(int(length.group(1)) if length else 0)
        lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}"]
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers]
        writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    return handler


INVISIBLE = "\ufeff\u2060\u061c\ufff9\u00ad\u200d\U000e0041"
"""Format characters (Unicode category Cf) that passed before #58: the byte-order
mark, the word joiner, the Arabic letter mark, an interlinear annotation
anchor, the soft hyphen, the zero-width joiner and a tag character."""


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("status", [200, 529])
@pytest.mark.parametrize("kind", list(HOSTED))
async def test_shown_header_values_hold_no_format_character_and_hide_no_key(
    kind: str, status: int, streamed: bool
) -> None:
    """(#58) U+FEFF, U+2060, U+061C and U+FFF9 reached ``request_id`` and
    ``headers``, and a key echoed with a U+FEFF inside was not withheld: every
    format character is dropped, then the key is withheld."""
    request_id, limit = HOSTED[kind]
    split_key = KEY[:10] + "\ufeff" + KEY[10:]
    echoed = [
        (request_id, "".join(f"{c}{INVISIBLE}" for c in "req_1")),
        (limit, f"9{INVISIBLE}9"),
        ("retry-after", split_key),
    ]
    content_type, text = ANSWERS[kind][streamed]
    if status != 200:
        content_type, text = "application/json", '{"error": "no"}'
    async with serve_raw(raw_answer(status, content_type, text, echoed)) as url:
        outcome = await answered(kind, url, streamed)
    assert outcome.request_id == "req_1"
    headers = outcome.headers or {}
    assert headers[limit] == "99"
    assert headers["retry-after"].startswith("<")
    assert KEY[:8] not in shown(outcome)
    values = [outcome.request_id, *headers.values()]
    assert not any(unicodedata.category(c) == "Cf" for value in values for c in value)


async def test_a_long_request_id_is_cut() -> None:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            text=json.dumps(MESSAGE),
            content_type="application/json",
            headers={"request-id": HOSTILE_VALUES["long"]},
        )

    async with serve(handler) as url:
        outcome = await answered("anthropic", url, streamed=False)
    assert outcome.request_id is not None
    assert 10 < len(outcome.request_id) <= 300
    assert outcome.request_id.endswith("…")


# -- item 6: counts from the wire are validated ----------------------------------------


def with_count(kind: str, streamed: bool, count: int) -> tuple[str, str]:
    """``ANSWERS[kind][streamed]`` reporting ``count`` as its input tokens."""
    content_type, text = ANSWERS[kind][streamed]
    if kind == "anthropic":
        return content_type, text.replace('"input_tokens": 3', f'"input_tokens": {count}')
    if kind == "ollama":
        done = {**OLLAMA_DONE, "prompt_eval_count": count, "eval_duration": 5}
        return content_type, json.dumps(done) + ("\n" if streamed else "")
    if not streamed:
        return content_type, text.replace('"prompt_tokens": 3', f'"prompt_tokens": {count}')
    usage = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": []}
    usage["usage"] = {"prompt_tokens": count, "completion_tokens": 2}
    last = "data: [DONE]\n\n"
    return content_type, text.replace(last, f"data: {json.dumps(usage)}\n\n{last}")


@pytest.mark.parametrize("count", [-1_000_000, 10**40])
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", ["anthropic", "openai", "ollama"])
async def test_a_count_below_zero_or_absurd_is_a_bad_response(
    kind: str, streamed: bool, count: int
) -> None:
    content_type, text = with_count(kind, streamed, count)

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=text, content_type=content_type)

    async with serve(handler) as url, built(kind, url) as model:
        with pytest.raises(errors.LLMBadResponse, match=r"input_tokens|prompt_eval_count"):
            await one_turn(model, streamed)
    content_type, text = with_count(kind, False, 7)  # an honest count still passes
    async with serve(handler) as url, built(kind, url) as model:
        assert (await model.complete(QUESTION)).usage.input_tokens == 7


async def test_negative_counts_do_not_defeat_an_agent_s_budget() -> None:
    """A far end reporting −10⁶ input tokens on every tool-calling turn ran an
    agent with ``max_input_tokens=100`` to its last turn; now its first turn is
    refused."""
    usage = {"input_tokens": -1_000_000, "output_tokens": -1_000_000}
    calling = [
        {"type": "message_start", "message": {**MESSAGE, "content": [], "usage": usage}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "nothing_here", "input": {}},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": usage},
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in calling)
    turns = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal turns
        await request.read()
        turns += 1
        return web.Response(text=body, content_type="text/event-stream")

    async with serve(handler) as url, hosted("anthropic", url) as model:
        with pytest.raises(errors.LLMBadResponse, match="input_tokens is -1000000"):
            await agent.run(
                model,
                tools.Toolset(kb.sample()),
                "Who is afraid of spiders?",
                max_turns=5,
                max_input_tokens=100,
                max_output_tokens=100,
            )
    assert turns == 1
