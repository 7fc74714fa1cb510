"""What a hostile far end sends back never carries the credentials a turn sent.

A far end echoing the key (a 401 body, a streamed ``error`` event on every
wire), a malformed response that makes aiohttp raise with its record of the
request, and a base URL whose password holds an unencoded ``@``: each on
loopback, each checked on everything an error shows (``str``, ``repr``, its
text attributes, every exception chained to it, a traceback, a span).
"""

from __future__ import annotations

import asyncio
import base64
import traceback
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from conftest import Recorded
from loopback import Taking
from loopback import serve
from loopback import serve_raw

from vaelii_llm import cli
from vaelii_llm import errors
from vaelii_llm import telemetry
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import Request
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.settings import Network
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses

KEY = "sk-ant-api03-K9v2QmZt7LwR4pXsH3jN8cYb"
TOKEN = "gw-tok-Fq6Wd1Zr9Tk3Mv5Bn8Ls"
PASSWORD = "p@ss-SECRET-Jx4Hy7"
USERINFO = f"user:{PASSWORD}"
DISTINCT = ("K9v2QmZt7LwR4pXsH3jN8cYb", "Fq6Wd1Zr9Tk3Mv5Bn8Ls", "SECRET-Jx4Hy7")
"""The parts of the secrets nothing else could hold."""
BASIC = base64.b64encode(USERINFO.encode()).decode()


def req() -> Request:
    return Request(messages=[Message(role="user", content="hi")], timeout_ms=30_000)


def everything_shown(err: BaseException) -> str:
    """Every text the error and its chain show: messages, reprs, text
    attributes, aiohttp's request records, and the traceback."""
    shown: list[str] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        one = todo.pop()
        if one is None or id(one) in seen:
            continue
        seen.add(id(one))
        shown += [str(one), repr(one), *map(repr, one.args)]
        shown += [repr(value) for value in vars(one).values()] if hasattr(one, "__dict__") else []
        todo += [one.__cause__, one.__context__]
    shown += traceback.format_exception(err)
    return "\n".join(shown)


def assert_no_secret(text: str) -> None:
    """Neither a secret nor any four characters of one's distinctive part."""
    for secret in (KEY, TOKEN, PASSWORD, BASIC):
        assert secret not in text
    for part in DISTINCT:
        for at in range(len(part) - 3):
            assert part[at : at + 4] not in text, (part[at : at + 4], text[:2000])


async def caught(coro: Awaitable[Any]) -> errors.LLMError:
    with pytest.raises(errors.LLMError) as info:
        await coro
    return info.value


async def streamed(provider: Any) -> errors.LLMError:
    async def read() -> None:
        async for _ in provider.stream(req()):
            pass

    return await caught(read())


# --------------------------------------------------------------------------
# 1. A far end echoing the credential


def echoing(status: int, body: Callable[[web.Request], str], content_type: str) -> Any:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=status, text=body(request), content_type=content_type)

    return handler


def echo_all(request: web.Request) -> str:
    """Every header value the request sent, and the Basic pair decoded."""
    sent = " ".join(f"{name}={value}" for name, value in request.headers.items())
    return f"invalid credentials: {sent} (you sent {USERINFO}, {PASSWORD!r}, {KEY!r})"


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_401_echoing_the_key_and_the_url_password_shows_neither(stream: bool) -> None:
    async with serve(echoing(401, echo_all, "text/plain")) as url:
        gateway = url.replace("http://", f"http://{USERINFO}@")
        async with anthropic.provider(credential=KEY, base_url=gateway) as model:
            err = await (streamed(model) if stream else caught(model.complete(req())))
    assert isinstance(err, errors.LLMApiError)
    assert err.status == 401
    assert "<x-api-key withheld>" in err.body  # withheld, and said to be
    assert_no_secret(everything_shown(err))


async def test_an_excerpt_cutting_the_key_shows_no_part_of_it() -> None:
    """The message keeps 200 characters of the body: the key straddles that
    cut, so only its opening reaches the message, and that opening is withheld."""

    def body(request: web.Request) -> str:
        return "x" * 190 + request.headers["x-api-key"] + " is not a valid key"

    async with (
        serve(echoing(401, body, "text/plain")) as url,
        anthropic.provider(credential=KEY, base_url=url) as model,
    ):
        err = await caught(model.complete(req()))
    assert isinstance(err, errors.LLMApiError)
    assert str(err).count("x") >= 190  # the cut came inside the key
    assert_no_secret(everything_shown(err))


ERROR_EVENT = {
    "anthropic": (
        "text/event-stream",
        (
            'event: error\ndata: {{"type":"error","error":{{"type":"overloaded_error",'
            '"message":"bad key {secret}"}}}}\n\n'
        ),
    ),
    "openai": (
        "text/event-stream",
        'data: {{"error":{{"message":"bad key {secret}","type":"invalid_request_error"}}}}\n\n',
    ),
    "ollama": ("application/x-ndjson", '{{"error":"bad key {secret}"}}\n'),
    "openai-responses": (
        "text/event-stream",
        (
            'event: error\ndata: {{"type":"error","code":"invalid_api_key",'
            '"message":"bad key {secret}","param":null}}\n\n'
        ),
    ),
}


def built(kind: str, url: str) -> Any:
    if kind == "anthropic":
        return anthropic.provider(credential=KEY, base_url=url)
    if kind == "openai":
        return openai.provider(base_url=url, api_key=KEY, model="m")
    if kind == "openai-responses":
        return openai_responses.provider(base_url=url, api_key=KEY, model="m")
    return ollama.provider(host=url, model="m", headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.mark.parametrize("kind", list(ERROR_EVENT))
async def test_a_streamed_error_event_echoing_the_credential_shows_none(kind: str) -> None:
    content_type, event = ERROR_EVENT[kind]

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        secret = request.headers.get("x-api-key") or request.headers["Authorization"]
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        await response.write(event.format(secret=secret).encode())
        await response.write_eof()
        return response

    async with serve(handler) as url, built(kind, url) as model:
        err = await streamed(model)
    assert isinstance(err, errors.LLMApiError), repr(err)
    assert "withheld>" in err.body
    assert_no_secret(everything_shown(err))


async def test_a_gateway_header_echoed_in_a_whole_body_is_withheld() -> None:
    """Ollama's ``headers=`` credential, echoed in a 200 carrying ``error``."""

    def body(request: web.Request) -> str:
        error = f"{request.headers['Authorization']} expired"
        return msgspec.json.encode({"error": error}).decode()

    async with (
        serve(echoing(200, body, "application/json")) as url,
        built("ollama", url) as model,
    ):
        err = await caught(model.complete(req()))
    assert isinstance(err, errors.LLMApiError)
    assert "<Authorization withheld>" in err.body
    assert_no_secret(everything_shown(err))


async def test_the_span_of_a_failed_turn_holds_no_credential(otel: Recorded) -> None:
    otel.enable(capture_content=True)
    async with (
        serve(echoing(401, echo_all, "text/plain")) as url,
        telemetry.instrument(
            anthropic.provider(credential=KEY, base_url=url), "anthropic"
        ) as model,
    ):
        await caught(model.complete(req()))
    (span,) = otel.finished()
    (event,) = [e for e in span.events if e.name == "exception"]
    attributes = dict(event.attributes or {})
    assert "withheld" in str(attributes["exception.message"])
    assert_no_secret(repr(attributes) + repr(dict(span.attributes or {})))


async def test_a_body_cut_by_aclose_keeps_no_credential() -> None:
    """``aclose`` cuts a body the far end is still sending (it began with the
    key): the turn's ``LLMClosed`` chains the cut body's refusal, whose
    ``text`` is what was read, withheld."""
    hold = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 100_000
        await response.prepare(request)
        await response.write(f'{{"echo": "{request.headers["x-api-key"]}'.encode())
        await hold.wait()
        return response

    async with serve(handler) as url:
        model = anthropic.provider(credential=KEY, base_url=url)
        reading = model._inflight = Taking(len(f'{{"echo": "{KEY}'))
        turn = asyncio.create_task(caught(model.complete(req())))
        await reading.taken.wait()  # the reader has taken the chunk: aclose cuts after it
        await model.aclose()
        err = await turn
        hold.set()
    assert isinstance(err, errors.LLMClosed)
    assert isinstance(err.__cause__, errors.LLMBadResponse)
    assert "withheld>" in err.__cause__.text
    assert_no_secret(everything_shown(err))


# --------------------------------------------------------------------------
# 2. aiohttp's causes and their record of the request

HUGE_LINE = b"X-Big: " + b"a" * (1 << 20) + b"\r\n"
MANY_HEADERS = b"".join(b"X-%d: v\r\n" % n for n in range(100_000))
REPLIES = {
    "a malformed head": b"HTTP/1.1 200 OK\r\nThis Is Not A Header\r\n\r\n",
    "a short Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{}",
    "a 1 MiB header line": b"HTTP/1.1 200 OK\r\n" + HUGE_LINE + b"\r\n",
    "100,000 headers": b"HTTP/1.1 200 OK\r\n" + MANY_HEADERS + b"\r\n",
}


def replying(reply: bytes) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    return handler


@pytest.mark.parametrize("reply", list(REPLIES))
async def test_a_cause_from_aiohttp_keeps_no_header_value(reply: str) -> None:
    async with serve_raw(replying(REPLIES[reply])) as url:
        gateway = url.replace("http://", f"http://{USERINFO}@")
        async with anthropic.provider(
            credential=KEY, base_url=gateway, headers={"X-Gateway-Token": TOKEN}
        ) as model:
            err = await caught(model.complete(req()))
    assert isinstance(err, errors.LLMBadResponse), repr(err)
    cause = err.__cause__
    assert isinstance(cause, aiohttp.ClientError)  # its type kept, for a caller's except
    info = getattr(cause, "request_info", None)
    if info is not None:  # the names stay, no value does
        assert info.headers["x-api-key"] == "<withheld>"
        assert info.headers["X-Gateway-Token"] == "<withheld>"
        assert info.real_url.password is None
    assert_no_secret(everything_shown(err))


async def test_the_transport_alone_withholds_what_its_request_sent() -> None:
    """A probe's request (no skeleton around it): the boundary does it."""
    async with (
        serve_raw(replying(REPLIES["a malformed head"])) as url,
        aiohttp.ClientSession(headers={"x-api-key": KEY}) as session,
    ):
        err = await caught(
            request_json(
                session,
                Endpoint("a probe", "probe"),
                "GET",
                url.replace("http://", f"http://{USERINFO}@"),
                deadline=Deadline.after_ms(30_000),
                decoder=msgspec.json.Decoder(),
                headers={"X-Gateway-Token": f"Bearer {TOKEN}"},
            )
        )
    assert isinstance(err, errors.LLMBadResponse)
    assert_no_secret(everything_shown(err))


# --------------------------------------------------------------------------
# 3. A password holding an unencoded @


async def test_a_password_with_an_at_sign_is_never_shown(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as yarl (and so aiohttp) reads it: the user info runs to the last
    ``@``; ``repr``, every error and ``vaelii-llm config`` show the host alone."""
    async with serve(echoing(500, lambda r: "down", "text/plain")) as url:
        gateway = url.replace("http://", f"http://{USERINFO}@")
        model = anthropic.provider(credential=KEY, base_url=gateway)
        assert repr(model) == repr(model).replace(PASSWORD, "")
        assert f"base_url='{url}'" in repr(model)
        async with model:
            err = await caught(model.complete(req()))
    assert f"at {url} answered HTTP 500" in str(err)
    assert_no_secret(repr(model) + everything_shown(err))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://user:p@ss-SECRET-Jx4Hy7@gw.example.com/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://u:a,b@c-SECRET-Jx4Hy7@vllm.example.com")
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    assert "'http://gw.example.com/v1'" in out
    assert "'https://vllm.example.com'" in out
    assert_no_secret(out)


def test_a_proxy_password_with_an_at_sign_is_never_shown() -> None:
    shown = repr(Network(proxy=f"http://{USERINFO}@proxy.example:3128"))
    assert "proxy='http://proxy.example:3128'" in shown
    assert_no_secret(shown)
