"""The transport against real loopback servers, honest and hostile.

Every hostile case asserts the error's type, that its message stays short,
and that the body it received is on the error object. A deadline case also
asserts that it ended before the far end's own end: the far end keeps at it
for a minute and then sets an event, and the loop fires its timers in order,
so a case that ends with that event unset ended by its deadline, however
loaded the machine. No test asserts an elapsed time; how close to its budget
an expiry lands is measured in ``tests/bench/bench_deadlines.py``.

The module docstring's failure table is driven row by row at the end of this
file (``test_each_row_of_the_failure_table``): each row's condition is made
to happen on a loopback server and must raise the error the row names.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import traceback
import warnings
import weakref
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Coroutine
from collections.abc import Iterator
from contextlib import contextmanager
from contextlib import suppress
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.loopback import Handler
from tests.support.loopback import Taking
from tests.support.loopback import cut_connection
from tests.support.loopback import refused_url
from tests.support.loopback import reset_connection
from tests.support.loopback import serve
from tests.support.loopback import serve_raw
from vaelii_llm import _timers as timers
from vaelii_llm import _transport as transport
from vaelii_llm._transport import boundary
from vaelii_llm._transport import send
from vaelii_llm._transport import sessions
from vaelii_llm._transport import settings as net
from vaelii_llm._transport import withheld
from vaelii_llm._transport.boundary import decode_json
from vaelii_llm._transport.send import open_stream
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.sessions import create_session
from vaelii_llm._transport.sessions import probe_session
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._wire import NDJSONDecoder
from vaelii_llm._wire import SSEDecoder
from vaelii_llm._wire import SSEEvent
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadCredential
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.errors import LLMUnreachable

MODULES = (net, sessions, boundary, withheld, send)
END = Endpoint("Test server at loopback", "test")
ANY = msgspec.json.Decoder()
MESSAGE_BOUND = 450  # label + reason + a 200-character excerpt, with room to spare
AMPLE = 600_000
"""A turn's budget (ms) where the deadline is not what a test is about: ten
minutes, so no loaded machine makes a loopback exchange outlast it."""
FAR_END_S = 60.0
"""How long a hostile far end keeps at it before it ends by itself: every
deadline here is a second or less, and the loop fires timers in order."""


class Ping(msgspec.Struct):
    ok: bool
    n: int


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with create_session() as s:
        yield s


def now() -> float:
    return asyncio.get_running_loop().time()


class FarEnd:
    """A hostile far end's own clock: it keeps at it for :data:`FAR_END_S`,
    then sets ``ended``. ``arrived`` is set when a request reaches it."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.ended = asyncio.Event()
        self._until = now() + FAR_END_S

    def going(self) -> bool:
        """Whether it keeps at it (once its own end comes: no, and ``ended`` is set)."""
        if now() < self._until:
            return True
        self.ended.set()
        return False

    async def hold(self) -> None:
        """Stall until its own end (or until its handler is cancelled)."""
        self.arrived.set()
        await asyncio.sleep(self._until - now())
        self.ended.set()


async def failure(coro: Awaitable[Any]) -> LLMError:
    """Await ``coro``, which must raise an LLMError; return it."""
    with pytest.raises(LLMError) as info:
        await coro
    return info.value


async def drain_stream(
    session: aiohttp.ClientSession,
    url: str,
    deadline: Deadline,
    sink: list[bytes],
    inflight: set[aiohttp.ClientResponse] | None = None,
) -> None:
    async with open_stream(
        session, END, "POST", url, deadline=deadline, body=b"{}", inflight=inflight
    ) as chunks:
        async for chunk in chunks:
            sink.append(chunk)


def read_by(
    path: str,
    session: aiohttp.ClientSession,
    url: str,
    deadline: Deadline,
    sink: list[bytes],
    inflight: set[aiohttp.ClientResponse] | None = None,
) -> Coroutine[Any, Any, object]:
    """The read a test exercises: the whole-body path or the streamed one."""
    if path == "whole":
        return request_json(
            session, END, "GET", url, deadline=deadline, decoder=ANY, inflight=inflight
        )
    return drain_stream(session, url, deadline, sink, inflight)


# --- the honest path ---------------------------------------------------------


async def test_request_json_decodes_typed_and_sends_headers_and_body(
    session: aiohttp.ClientSession,
) -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        seen["headers"] = dict(request.headers)
        seen["body"] = await request.read()
        return web.json_response({"ok": True, "n": 7})

    async with create_session({"X-Gateway": "g1"}) as own, serve(handler) as url:
        got = await request_json(
            own,
            END,
            "POST",
            url + "/api",
            deadline=Deadline.after_ms(AMPLE),
            decoder=msgspec.json.Decoder(Ping),
            body=b'{"q": 1}',
            headers={"X-Extra": "e1"},
        )
    assert got == Ping(ok=True, n=7)
    assert seen["body"] == b'{"q": 1}'
    assert seen["headers"]["X-Gateway"] == "g1"
    assert seen["headers"]["X-Extra"] == "e1"
    assert seen["headers"]["Content-Type"] == "application/json"


async def test_stream_hands_over_every_byte_and_releases(session: aiohttp.ClientSession) -> None:
    frames = b"".join(b'event: delta\ndata: {"i": %d}\n\n' % i for i in range(500))

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for start in range(0, len(frames), 777):
            await resp.write(frames[start : start + 777])
        await resp.write_eof()
        return resp

    decoder = SSEDecoder(END.label)
    events: list[SSEEvent] = []
    async with serve(handler) as url:
        deadline = Deadline.after_ms(AMPLE)
        async with open_stream(session, END, "POST", url, deadline=deadline, body=b"{}") as chunks:
            async for chunk in chunks:
                events.extend(decoder.feed(chunk))
        events.extend(decoder.feed(b""))
    assert [e.data for e in events] == [f'{{"i": {i}}}' for i in range(500)]


async def test_leaving_a_stream_early_closes_the_connection_at_once(
    session: aiohttp.ClientSession,
) -> None:
    far = FarEnd()
    gone = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            while far.going():
                await resp.write(b"data: x\n\n")
                await asyncio.sleep(0.01)
        finally:
            gone.set()
        return resp

    async with serve(handler) as url:
        deadline = Deadline.after_ms(AMPLE)
        async with open_stream(session, END, "GET", url, deadline=deadline) as chunks:
            async for _ in chunks:
                break
        await gone.wait()
    assert not far.ended.is_set()  # its writes failed: it did not run to its own end


async def test_a_429_is_an_api_error_and_is_not_retried(session: aiohttp.ClientSession) -> None:
    calls = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.Response(status=429, text='{"error": "slow down"}', headers={"Retry-After": "1"})

    async with serve(handler) as url:
        err = await failure(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
        )
    assert isinstance(err, LLMApiError)
    assert (err.status, err.body, calls) == (429, '{"error": "slow down"}', 1)


async def test_a_redirect_is_not_followed(session: aiohttp.ClientSession) -> None:
    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://127.0.0.1:9/elsewhere")

    async with serve(handler) as url:
        err = await failure(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
        )
    assert isinstance(err, LLMApiError)
    assert err.status == 302


async def test_a_header_with_a_control_character_is_refused_without_its_value(
    session: aiohttp.ClientSession,
) -> None:
    with pytest.raises(LLMBadCredential) as info:
        await request_json(
            session,
            END,
            "GET",
            "http://127.0.0.1:9",
            deadline=Deadline.after_ms(AMPLE),
            decoder=ANY,
            headers={"x-api-key": "sk-secret\r\nX-Evil: 1"},
        )
    assert "x-api-key" in str(info.value)
    assert "secret" not in str(info.value)
    with pytest.raises(LLMBadCredential):
        create_session({"Authorization": "Bearer tok\n"})


async def test_a_request_aiohttp_will_not_build_is_typed(session: aiohttp.ClientSession) -> None:
    # userinfo in the URL and an Authorization header: aiohttp raises ValueError
    with pytest.raises(LLMUnreachable) as info:
        await request_json(
            session,
            END,
            "GET",
            "http://user:pw-SECRET@127.0.0.1:9/",
            deadline=Deadline.after_ms(AMPLE),
            decoder=ANY,
            headers={"Authorization": "Bearer tok-SECRET"},
        )
    assert isinstance(info.value.__cause__, ValueError)
    assert "SECRET" not in str(info.value)


async def test_drain_keeps_quiet_about_what_follows_the_end(
    session: aiohttp.ClientSession,
) -> None:
    far = FarEnd()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"the end\n")
        if request.path == "/cut":
            cut_connection(request)
        else:
            await far.hold()
        return response

    async with serve(handler) as url:
        for path in ("/cut", "/held"):
            async with open_stream(
                session, END, "GET", url + path, deadline=Deadline.after_ms(AMPLE)
            ) as chunks:
                assert await anext(chunks) == b"the end\n"
                await send.drain(chunks, 0.2)
            # not the far end's own end, nor the budget (ten minutes, after it)
            assert not far.ended.is_set()

    async def expiring() -> AsyncIterator[bytes]:  # the turn's deadline passes mid-drain
        yield b"more"
        raise LLMTimeout(END.label, 100, "body")

    await send.drain(expiring(), 0.2)


async def test_a_stream_whose_end_has_come_is_drained_with_no_timer(
    session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case of every streamed turn: the body's end arrived with its
    answer. The drain reads what is left without a wait (so without a timer
    block) and the connection goes back to the pool; a body whose end has not
    come is drained under the timer, as before."""

    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/open":  # chunked, its end sent only once released
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b"the answer\n")
            await release.wait()
            await response.write(b"and more\n")
            await response.write_eof()
            return response
        return web.Response(body=b"the answer\nand what follows it\n")

    blocks: list[float] = []
    timeout_at = timers.timeout_at

    def counted(when: float) -> timers.Timeout:
        blocks.append(when)
        return timeout_at(when)

    async with serve(handler) as url:
        async with open_stream(
            session, END, "GET", url + "/whole", deadline=Deadline.after_ms(AMPLE)
        ) as chunks:
            assert (await anext(chunks)).startswith(b"the answer")
            await chunks._content.wait_eof()  # the end has come (sent with the head)
            monkeypatch.setattr(timers, "timeout_at", counted)
            await send.drain(chunks, 0.2)
            assert blocks == []
            assert [chunk async for chunk in chunks] == []  # nothing left to read
        assert session.connector is not None
        assert sum(len(c) for c in session.connector._conns.values()) == 1

        async with open_stream(
            session, END, "GET", url + "/open", deadline=Deadline.after_ms(AMPLE)
        ) as chunks:
            assert await anext(chunks) == b"the answer\n"
            release.set()  # the far end goes on only once the drain has looked
            await send.drain(chunks, 5)
            assert blocks  # it had to wait for the end: under the drain's bound
        assert sum(len(c) for c in session.connector._conns.values()) == 1


async def test_a_stream_is_exhausted_once_its_block_is_left_or_a_read_failed(
    session: aiohttp.ClientSession,
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"first\n")
        if request.path == "/cut":
            await asyncio.sleep(0.01)
            cut_connection(request)
            return response
        await asyncio.sleep(FAR_END_S)
        return response

    async with serve(handler) as url:
        async with open_stream(
            session, END, "GET", url + "/held", deadline=Deadline.after_ms(AMPLE)
        ) as chunks:
            assert await anext(chunks) == b"first\n"
        with pytest.raises(StopAsyncIteration):  # left early: closed, nothing more read
            await anext(chunks)

        async def read_all(chunks: AsyncIterator[bytes]) -> None:
            async for _ in chunks:
                pass

        async with open_stream(
            session, END, "GET", url + "/cut", deadline=Deadline.after_ms(AMPLE)
        ) as cut:
            assert isinstance(await failure(read_all(cut)), LLMBadResponse)  # cut short
            with pytest.raises(StopAsyncIteration):  # and nothing more after the failure
                await anext(cut)


async def test_cancellation_stays_a_cancellation(session: aiohttp.ClientSession) -> None:
    far = FarEnd()

    async def handler(request: web.Request) -> web.Response:
        await far.hold()
        return web.Response()

    async with serve(handler) as url:
        task = asyncio.create_task(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
        )
        await far.arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# --- stalls, drips and pings: the whole-turn deadline ------------------------


async def test_stall_before_headers(session: aiohttp.ClientSession) -> None:
    far = FarEnd()

    async def handler(request: web.Request) -> web.Response:
        await far.hold()
        return web.Response()

    async with serve(handler) as url:
        err = await failure(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(500), decoder=ANY)
        )
        assert not far.ended.is_set()
    assert isinstance(err, LLMTimeout)
    assert err.timeout_ms == 500
    assert isinstance(err.__cause__, TimeoutError)
    assert len(str(err)) < MESSAGE_BOUND


@pytest.mark.parametrize("path", ["whole", "stream"])
async def test_stall_after_headers(session: aiohttp.ClientSession, path: str) -> None:
    far = FarEnd()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b'{"partial": ')
        await far.hold()
        return resp

    sink: list[bytes] = []
    async with serve(handler) as url:
        deadline = Deadline.after_ms(1_000)
        call = read_by(path, session, url, deadline, sink)
        err = await failure(call)
        assert not far.ended.is_set()
    assert isinstance(err, LLMTimeout)
    assert err.timeout_ms == 1_000
    assert isinstance(err.__cause__, TimeoutError)
    assert len(str(err)) < MESSAGE_BOUND
    if path == "stream":
        assert b"".join(sink) == b'{"partial": '


@pytest.mark.parametrize("path", ["whole", "stream"])
async def test_drip_feed_one_byte_every_200ms_ends_at_the_turn_budget(
    session: aiohttp.ClientSession, path: str
) -> None:
    far = FarEnd()
    dripped = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal dripped
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        while far.going():
            await resp.write(b"[")
            dripped += 1
            await asyncio.sleep(0.2)
        return resp

    sink: list[bytes] = []
    async with serve(handler) as url:
        deadline = Deadline.after_ms(1_000)
        call = read_by(path, session, url, deadline, sink)
        err = await failure(call)
        # Had a drip extended the deadline, the turn would have run to the
        # far end's own end (a body of brackets, whole): it ended first.
        assert not far.ended.is_set()
    assert isinstance(err, LLMTimeout)
    assert err.timeout_ms == 1_000
    assert len(str(err)) < MESSAGE_BOUND
    if path == "stream":
        assert b"".join(sink) == b"[" * len(b"".join(sink))
        assert len(b"".join(sink)) <= dripped


async def test_sse_pings_every_100ms_never_extend_the_deadline(
    session: aiohttp.ClientSession,
) -> None:
    far = FarEnd()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'event: message_start\ndata: {"type": "message_start"}\n\n')
        while far.going():
            await resp.write(b": ping\n\n")
            await asyncio.sleep(0.1)
        await resp.write(b'event: message_stop\ndata: {"type": "message_stop"}\n\n')
        return resp

    decoder = SSEDecoder(END.label)
    events: list[SSEEvent] = []
    received = 0

    async def consume(url: str) -> None:
        nonlocal received
        deadline = Deadline.after_ms(800)
        async with open_stream(session, END, "POST", url, deadline=deadline, body=b"{}") as chunks:
            async for chunk in chunks:
                received += len(chunk)
                events.extend(decoder.feed(chunk))

    async with serve(handler) as url:
        err = await failure(consume(url))
        assert not far.ended.is_set()  # the pings kept coming; the turn ended anyway
    assert isinstance(err, LLMTimeout)
    assert len(str(err)) < MESSAGE_BOUND
    assert {e.event for e in events} <= {"message_start"}  # pings are comments; no stop came


async def test_a_body_flowing_fast_past_the_deadline_is_cut(
    session: aiohttp.ClientSession,
) -> None:
    far = FarEnd()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        while far.going():
            await resp.write(b"data: x\n\n" * 4096)
        return resp

    sink: list[bytes] = []
    async with serve(handler) as url:
        err = await failure(drain_stream(session, url, Deadline.after_ms(300), sink))
        assert not far.ended.is_set()
    assert isinstance(err, LLMTimeout)
    assert isinstance(err.__cause__, TimeoutError)


# --- streams that end early ---------------------------------------------------


async def test_sse_stream_ending_cleanly_before_its_terminal_event(
    session: aiohttp.ClientSession,
) -> None:
    """The transport ends cleanly; the decoder drops the unfinished frame and says so."""
    body = (
        b'event: message_start\ndata: {"type": "message_start"}\n\n'
        b'event: content_block_delta\ndata: {"type": "content_block_delta"}\n\n'
        b"event: message_st"
    )

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/event-stream")

    decoder = SSEDecoder(END.label)
    events: list[SSEEvent] = []
    async with serve(handler) as url:
        deadline = Deadline.after_ms(AMPLE)
        async with open_stream(session, END, "POST", url, deadline=deadline) as chunks:
            async for chunk in chunks:
                events.extend(decoder.feed(chunk))
    assert decoder.buffered == len(b"event: message_st")
    events.extend(decoder.feed(b""))
    assert [e.event for e in events] == ["message_start", "content_block_delta"]
    assert "message_stop" not in {e.event for e in events}


async def test_ndjson_stream_cut_mid_line_at_its_end(session: aiohttp.ClientSession) -> None:
    body = b'{"done": false, "n": 1}\n{"done": false, "n": 2}\n{"done": fa'

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/x-ndjson")

    decoder = NDJSONDecoder(END.label)
    lines: list[bytes] = []
    async with serve(handler) as url:
        deadline = Deadline.after_ms(AMPLE)
        async with open_stream(session, END, "POST", url, deadline=deadline) as chunks:
            async for chunk in chunks:
                lines.extend(decoder.feed(chunk))
    assert [ANY.decode(line)["n"] for line in lines] == [1, 2]
    assert decoder.feed(b"") == [b'{"done": fa']  # the cut line, for the backend to refuse


@pytest.mark.parametrize("path", ["whole", "stream"])
@pytest.mark.parametrize("how", ["reset", "truncated-chunked", "short-content-length"])
async def test_a_body_cut_short_is_a_bad_response(
    session: aiohttp.ClientSession, path: str, how: str
) -> None:
    sent = b'{"message": "' + b"a" * 5000
    reading = Taking(len(sent))

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if how == "short-content-length":
            resp.content_length = 100_000
        else:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(sent)
        await reading.taken.wait()  # the client has read them: the cut loses none
        if how == "reset":
            reset_connection(request)
        else:
            cut_connection(request)
        await FarEnd().hold()
        return resp

    sink: list[bytes] = []
    async with serve(handler) as url:
        deadline = Deadline.after_ms(AMPLE)
        call = read_by(path, session, url, deadline, sink, reading)
        err = await failure(call)
    assert isinstance(err, LLMBadResponse), repr(err)
    assert isinstance(err.__cause__, aiohttp.ClientError | OSError)
    assert len(str(err)) < MESSAGE_BOUND
    assert "cut the" in str(err)
    if path == "whole":
        assert err.text == sent.decode()
    else:
        assert b"".join(sink) == sent


# --- bodies that are not what the wire promises -------------------------------


async def test_502_from_a_proxy_with_300kb_of_html(session: aiohttp.ClientSession) -> None:
    html = "<html><body>" + "<p>Bad gateway, try again later.</p>\n" * 8_200 + "</body></html>"
    assert len(html) > 300_000

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=502, text=html, content_type="text/html")

    async with serve(handler) as url:
        err = await failure(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
        )
    assert isinstance(err, LLMApiError)
    assert err.status == 502
    assert err.body == html
    assert len(str(err)) < MESSAGE_BOUND
    assert "502" in str(err)


async def test_502_on_the_stream_path(session: aiohttp.ClientSession) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html>bad gateway</html>")

    async with serve(handler) as url:
        err = await failure(drain_stream(session, url, Deadline.after_ms(AMPLE), []))
    assert isinstance(err, LLMApiError)
    assert (err.status, err.body) == (502, "<html>bad gateway</html>")


@pytest.mark.parametrize(
    ("name", "body", "typed", "cause"),
    [
        ("not-json", b"<html>" + b"Service unavailable. " * 500 + b"</html>", True, "DecodeError"),
        ("nested", b"[" * 100_000, False, "RecursionError"),
        # msgspec before 0.23 raises UnicodeDecodeError for bytes not UTF-8
        (
            "invalid-utf8",
            b'{"text": "caf\xc3\x28 \xff\xfe"}',
            False,
            "DecodeError|UnicodeDecodeError",
        ),
        ("wrong-shape", b'{"ok": "yes", "n": 1}', True, "ValidationError"),
        ("empty", b"", True, "DecodeError"),
    ],
)
async def test_a_200_that_will_not_decode(
    session: aiohttp.ClientSession, name: str, body: bytes, typed: bool, cause: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    decoder = msgspec.json.Decoder(Ping) if typed else ANY
    async with serve(handler) as url:
        err = await failure(
            request_json(
                session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=decoder
            )
        )
    assert isinstance(err, LLMBadResponse), name
    assert type(err.__cause__).__name__ in cause.split("|")
    assert err.text == body.decode("utf-8", "replace")
    assert len(str(err)) < MESSAGE_BOUND


@pytest.mark.parametrize("announced", [True, False])
async def test_a_body_over_the_cap_is_refused(
    session: aiohttp.ClientSession, announced: bool
) -> None:
    body = b"[" + b"1," * (1024 * 1024) + b"1]"  # 2 MiB against a 1 MiB cap

    async def handler(request: web.Request) -> web.StreamResponse:
        if announced:
            return web.Response(body=body, content_type="application/json")
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for start in range(0, len(body), 65_536):
            await resp.write(body[start : start + 65_536])
        await resp.write_eof()
        return resp

    async with serve(handler) as url:
        err = await failure(
            request_json(
                session,
                END,
                "GET",
                url,
                deadline=Deadline.after_ms(AMPLE),
                decoder=ANY,
                max_body_bytes=1024 * 1024,
            )
        )
    assert isinstance(err, LLMBadResponse)
    assert "cap" in str(err)
    assert len(str(err)) < MESSAGE_BOUND
    # The rest was never read: the error keeps what it has, the body's opening.
    assert body.decode().startswith(err.text)
    assert len(err.text) <= 64 * 1024


def test_public_surfaces_are_frozen() -> None:
    import vaelii_llm._wire as wire

    assert transport.__all__ == []  # the package names its modules, each its own names
    assert {module.__name__.rpartition(".")[2]: sorted(module.__all__) for module in MODULES} == {
        "settings": [
            "CONNECT_TIMEOUT_MS",
            "DEFAULT_MAX_CONNECTIONS",
            "DEFAULT_NETWORK",
            "Deadline",
            "Endpoint",
            "Network",
            "SSLOption",
            "Secret",
            "USER_AGENT",
            "checked_headers",
            "env_proxy",
            "with_json_content_type",
        ],
        "sessions": ["Gate", "LoopSessions", "create_session", "on_running_loop", "probe_session"],
        "boundary": ["DEFAULT_MAX_BODY_BYTES", "decode_json"],
        "withheld": ["sent_rule", "withhold"],
        "send": ["cut", "drain", "open_stream", "request_json"],
    }
    assert timers.__all__ == ["alarm_at", "timeout_at"]
    assert sorted(wire.__all__) == ["MAX_EVENT_BYTES", "NDJSONDecoder", "SSEDecoder", "SSEEvent"]
    for module in (*MODULES, timers, wire):
        assert all(hasattr(module, name) for name in module.__all__)


async def test_deadline_is_absolute_on_the_loop_clock() -> None:
    before = now()
    deadline = Deadline.after_ms(1_500)
    after = now()
    assert deadline.timeout_ms == 1_500
    assert before + 1.5 <= deadline.when <= after + 1.5
    left = deadline.remaining()
    assert deadline.when - now() <= left <= deadline.when - after


async def test_the_default_cap_is_32_mib() -> None:
    assert boundary.DEFAULT_MAX_BODY_BYTES == 32 * 1024 * 1024
    assert net.CONNECT_TIMEOUT_MS == 5_000


def test_decode_json_guards_any_exception() -> None:
    class Boom:
        def decode(self, data: bytes) -> Any:
            raise MemoryError("hostile")

    with pytest.raises(LLMBadResponse) as info:
        decode_json(b"[]", END, Boom())  # type: ignore[arg-type]
    assert isinstance(info.value.__cause__, MemoryError)


# --- nothing to talk to -------------------------------------------------------


async def test_refused_port(session: aiohttp.ClientSession) -> None:
    err = await failure(
        request_json(
            session, END, "GET", refused_url(), deadline=Deadline.after_ms(AMPLE), decoder=ANY
        )
    )
    assert isinstance(err, LLMUnreachable)
    assert isinstance(err.__cause__, aiohttp.ClientConnectorError)
    assert len(str(err)) < MESSAGE_BOUND
    assert END.label in str(err)


async def test_closed_before_answering_is_unreachable(session: aiohttp.ClientSession) -> None:
    async def handler(request: web.Request) -> web.Response:
        reset_connection(request)
        await FarEnd().hold()
        return web.Response()

    async with serve(handler) as url:
        err = await failure(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
        )
    assert isinstance(err, LLMUnreachable)
    assert isinstance(err.__cause__, aiohttp.ClientError | OSError)


@pytest.mark.parametrize(
    "reply",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
    ],
)
async def test_a_malformed_http_head_is_a_bad_response(
    session: aiohttp.ClientSession, reply: bytes
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    async with serve_raw(handler) as url:
        err = await failure(
            request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
        )
    assert isinstance(err, LLMBadResponse)
    assert isinstance(err.__cause__, aiohttp.ClientResponseError)
    assert "malformed HTTP" in str(err)
    assert len(str(err)) < MESSAGE_BOUND


@pytest.mark.parametrize(
    ("exc", "phrase"),
    [
        (aiohttp.ConnectionTimeoutError(), "no connection inside 5000 ms"),
        (aiohttp.InvalidURL("http://user:pw@host:x"), "not a valid"),
        (aiohttp.ServerDisconnectedError(), "closed the connection"),
        (ConnectionResetError(104, "Connection reset by peer"), "ConnectionResetError"),
    ],
)
def test_failures_before_the_headers_map_to_unreachable(exc: Exception, phrase: str) -> None:
    err = boundary._unreachable(exc, END)
    assert isinstance(err, LLMUnreachable)
    assert phrase in str(err)
    assert "pw" not in str(err)


@pytest.mark.parametrize(
    "url",
    ["alice:s3cret@host/v1/messages", "ftp://alice:s3cret@host/x", "http://alice:s3cret@h:x/"],
)
async def test_a_bad_url_never_shows_its_password(session: aiohttp.ClientSession, url: str) -> None:
    with pytest.raises(LLMUnreachable) as info:
        await request_json(session, END, "GET", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY)
    assert "not a valid http(s) URL" in str(info.value)
    assert info.value.__cause__ is None  # its text is the URL: dropped, not chained
    assert "s3cret" not in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize(
    "headers", [{"X-Gate\u2028way": "v"}, {"X-Gateway": "a\u2028b"}, {"X-Gate:way": "v"}, {"": "v"}]
)
async def test_a_header_no_request_can_carry_is_refused(
    session: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    with pytest.raises(LLMBadCredential):
        await request_json(
            session,
            END,
            "GET",
            "http://127.0.0.1:9/",
            deadline=Deadline.after_ms(AMPLE),
            decoder=ANY,
            headers=headers,
        )


_HEADER_CHARS = "aZ09-_.~!:; \t\r\n\x00\x7f\x85\xa0\u2028\u2029\u00fc"


def _rule(headers: dict[str, str]) -> str | None:
    """The header rule, one header at a time: the first name it refuses."""
    for name, value in headers.items():
        if not name or net._BAD_HEADER_NAME.search(name) or net._BAD_HEADER_CHARS.search(value):
            return name
    return None


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.text(_HEADER_CHARS, max_size=4), st.text(_HEADER_CHARS, max_size=4), max_size=4
    )
)
@example({"\u00fc": "v"})  # alphanumeric, but no token
@example({"a": "v", "": "v"})
@example({"a": "\t"})  # a tab is allowed, though unprintable
@example({"a-b": "x\u2028"})
def test_the_quick_header_check_refuses_what_the_rule_refuses(headers: dict[str, str]) -> None:
    """The check every request makes first lets through only what the rule
    allows, and otherwise names the header the rule names."""
    try:
        net._check_headers(headers)
    except LLMBadCredential as exc:
        refused: str | None = exc.header
    else:
        refused = None
    assert refused == _rule(headers)


async def test_checked_headers_are_refused_once_and_then_sent_as_given() -> None:
    with pytest.raises(LLMBadCredential) as info:
        net.checked_headers({"accept": "a", "x-api-key": "sk-secret\n"})
    assert info.value.header == "x-api-key"
    assert "secret" not in str(info.value)

    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({})

    headers = net.checked_headers({"x-api-key": "sk-1", "Accept": "application/json"})
    with pytest.raises(TypeError):
        headers["x-api-key"] = "changed"  # type: ignore[index]
    async with serve(handler) as url:
        session = create_session()
        try:
            for _ in range(2):
                await request_json(
                    session,
                    END,
                    "POST",
                    url,
                    deadline=Deadline.after_ms(AMPLE),
                    decoder=ANY,
                    body=b"{}",
                    headers=headers,
                )
        finally:
            await session.close()
    assert [(h["x-api-key"], h["Accept"], h["Content-Type"]) for h in seen] == [
        ("sk-1", "application/json", "application/json")
    ] * 2


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        (None, "application/json"),
        ({"X-Gateway": "g1"}, "application/json"),
        ({"content-type": "application/x-ndjson"}, "application/x-ndjson"),
        ({"CONTENT-TYPE": "text/plain"}, "text/plain"),
    ],
)
async def test_one_rule_gives_a_json_body_its_content_type_once(
    given: dict[str, str] | None, sent: str
) -> None:
    """On a session (as a backend puts it) or on the request alone, a body
    goes out with one Content-Type: the caller's own, in whatever case, or JSON."""
    seen: list[list[str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.getall("Content-Type"))
        return web.json_response({})

    session_headers = net.with_json_content_type(given)
    assert given is None or session_headers is not given  # a copy: the caller's is untouched
    async with serve(handler) as url, create_session(session_headers) as on_session:
        await request_json(
            on_session, END, "POST", url, deadline=Deadline.after_ms(AMPLE), decoder=ANY, body=b"{}"
        )
        async with create_session() as bare:
            await request_json(
                bare,
                END,
                "POST",
                url,
                deadline=Deadline.after_ms(AMPLE),
                decoder=ANY,
                body=b"{}",
                headers=given,
            )
    assert seen == [[sent], [sent]]


async def test_create_session_has_only_the_connect_bound() -> None:
    async with create_session() as s:
        assert s.timeout.total is None
        assert s.timeout.sock_read is None
        assert s.timeout.connect == net.CONNECT_TIMEOUT_MS / 1000


# --- the probe session: one per running loop ----------------------------------


async def _probe_twice(sessions: list[aiohttp.ClientSession]) -> list[Any]:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.9"})

    got = []
    async with serve(handler) as url:
        for _ in range(2):
            s = probe_session()
            sessions.append(s)
            got.append(
                await request_json(
                    s,
                    END,
                    "GET",
                    url + "/api/version",
                    deadline=Deadline.after_ms(AMPLE),
                    decoder=ANY,
                )
            )
    return got


def test_two_asyncio_runs_that_probe_each_get_a_live_session_closed_with_their_loop() -> None:
    sessions: list[aiohttp.ClientSession] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = asyncio.run(_probe_twice(sessions))
        second = asyncio.run(_probe_twice(sessions))
        gc.collect()
    assert first == second == [{"version": "0.9"}] * 2
    assert sessions[0] is sessions[1]  # one per loop, not one per probe
    assert sessions[2] is sessions[3]
    assert sessions[0] is not sessions[2]  # a new loop, a new session
    assert all(s.closed for s in sessions)  # closed when their loop closed
    assert not [w for w in caught if "nclosed" in str(w.message)]


def test_a_finished_loop_is_not_kept_alive_by_its_probe_session() -> None:
    async def probe() -> None:
        probe_session()

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    for _ in range(3):
        with asyncio.Runner() as runner:
            runner.run(probe())
            loops.append(weakref.ref(runner.get_loop()))
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
    assert len(sessions._probe_sessions) <= 1  # at most the test runner's own loop


async def test_probe_session_under_the_test_runner_is_closed_at_teardown() -> None:
    """filterwarnings=error: an unclosed session here would fail the run."""
    assert probe_session() is probe_session()


# --- the failure table, row by row --------------------------------------------


def failure_table() -> list[tuple[str, str]]:
    """``(raised, when)`` for each row of the module docstring's failure table,
    ``when`` with its whitespace folded."""
    lines = (boundary.__doc__ or "").splitlines()
    rules = [n for n, line in enumerate(lines) if line.startswith("=" * 16 + "  ")]
    assert len(rules) == 3, "the table's three rules"
    starts = [
        n
        for n, char in enumerate(lines[rules[0]])
        if char == "=" and lines[rules[0]][n - 1 : n] != "="
    ]
    rows: list[list[str]] = []
    for line in lines[rules[1] + 1 : rules[2]]:
        raised, when = line[: starts[1]].strip(), line[starts[1] : starts[2]].strip()
        if raised:
            rows.append([raised, when])
        else:
            rows[-1][1] += " " + when
    return [(raised, " ".join(when.split())) for raised, when in rows]


class Watched(set[aiohttp.ClientResponse]):
    """An ``inflight`` set that says when a response joined it (its headers arrived)."""

    def __init__(self) -> None:
        super().__init__()
        self.joined = asyncio.Event()

    def add(self, response: aiohttp.ClientResponse) -> None:
        super().add(response)
        self.joined.set()


class Unplugged(set[aiohttp.ClientResponse]):
    """An ``inflight`` set that closes a response's connection as it joins."""

    def add(self, response: aiohttp.ClientResponse) -> None:
        super().add(response)
        assert response.connection is not None
        assert response.connection.protocol is not None
        response.connection.protocol.close()


class Case:
    """One way to make a row's condition happen; ``run`` returns what it raised."""

    def __init__(self, session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch) -> None:
        self.session = session
        self.monkeypatch = monkeypatch
        self.far = FarEnd()

    async def turn(
        self,
        path: str,
        url: str,
        *,
        budget_ms: int = AMPLE,
        headers: dict[str, str] | None = None,
        max_body_bytes: int = boundary.DEFAULT_MAX_BODY_BYTES,
        decoder: msgspec.json.Decoder[Any] = ANY,
        inflight: set[aiohttp.ClientResponse] | None = None,
        session: aiohttp.ClientSession | None = None,
        gate: sessions.Gate | None = None,
        stall_ms: int | None = None,
    ) -> BaseException:
        """One turn on ``path`` ("whole" or "stream"); what it raised (it must raise)."""
        own = session or self.session
        deadline = Deadline.after_ms(budget_ms, stall_ms)
        try:
            if path == "whole":
                await request_json(
                    own,
                    END,
                    "POST",
                    url,
                    deadline=deadline,
                    decoder=decoder,
                    body=b"{}",
                    headers=headers,
                    max_body_bytes=max_body_bytes,
                    inflight=inflight,
                    gate=gate,
                )
            else:
                async with open_stream(
                    own,
                    END,
                    "POST",
                    url,
                    deadline=deadline,
                    body=b"{}",
                    headers=headers,
                    max_body_bytes=max_body_bytes,
                    inflight=inflight,
                    gate=gate,
                ) as chunks:
                    async for _ in chunks:
                        pass
        except Exception as exc:
            return exc
        raise AssertionError("the turn did not fail")


BOTH_PATHS = ("whole", "stream")
Scenario = Callable[[Case], Coroutine[Any, Any, list[BaseException]]]


async def bad_header(case: Case) -> list[BaseException]:
    secret = {"x-api-key": "sk-SECRET\r\nX-Evil: 1"}
    return [await case.turn(p, "http://127.0.0.1:9/", headers=secret) for p in BOTH_PATHS]


async def invalid_url(case: Case) -> list[BaseException]:
    errors = [await case.turn(p, "http://alice:s3cret@h:x/") for p in BOTH_PATHS]
    for err in errors:
        assert err.__cause__ is None  # dropped, not chained: its text is the URL
        assert err.__suppress_context__
    return errors


async def unbuildable(case: Case) -> list[BaseException]:
    auth = {"Authorization": "Bearer tok-SECRET"}
    url = "http://user:pw-SECRET@127.0.0.1:9/"
    return [await case.turn(p, url, headers=auth) for p in BOTH_PATHS]


async def refused_or_reset(case: Case) -> list[BaseException]:
    async def handler(request: web.Request) -> web.Response:
        reset_connection(request)
        await case.far.hold()
        return web.Response()

    errors = [await case.turn(p, refused_url()) for p in BOTH_PATHS]
    async with serve(handler) as url:
        errors += [await case.turn(p, url) for p in BOTH_PATHS]
    return errors


async def unresolved(case: Case) -> list[BaseException]:
    async def resolve(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    case.monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", resolve)
    errors = [await case.turn(p, "http://no-such-host.invalid/") for p in BOTH_PATHS]
    for err in errors:
        assert "did not resolve" in str(err)
    return errors


@contextmanager
def unanswered_port() -> Iterator[str]:
    """A loopback URL whose listener's queue is full: a connection to it never completes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                with suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            yield f"http://127.0.0.1:{port}"
        finally:
            for filler in fillers:
                filler.close()


async def no_connection(case: Case) -> list[BaseException]:
    case.monkeypatch.setattr(net, "CONNECT_TIMEOUT_MS", 50)
    errors = []
    with unanswered_port() as url:
        async with create_session() as quick:  # its connect bound: 50 ms; the turn's: 10 min
            for p in BOTH_PATHS:
                errors.append(await case.turn(p, url, budget_ms=AMPLE, session=quick))
    for err in errors:
        assert "no connection inside 50 ms" in str(err)
    return errors


async def every_connection_taken(case: Case) -> list[BaseException]:
    """A gate of one connection, held by a turn the far end never answers: the
    next turns, on both paths, end at the gate, never sent."""

    async def handler(request: web.Request) -> web.Response:
        await case.far.hold()
        return web.Response()

    gate = sessions.Gate(1)
    async with serve(handler) as url:
        holder = asyncio.create_task(case.turn("whole", url, gate=gate))
        await case.far.arrived.wait()
        case.far.arrived.clear()
        errors = [await case.turn(p, url, budget_ms=300, gate=gate) for p in BOTH_PATHS]
        assert not case.far.arrived.is_set()  # neither was sent
        holder.cancel()
        with suppress(asyncio.CancelledError):
            await holder
    assert gate.taken == 0
    for err in errors:
        assert isinstance(err, LLMTimeout)
        assert (err.phase, err.timeout_ms) == ("connection", 300)
    return errors


async def stall_before_headers(case: Case) -> list[BaseException]:
    async def handler(request: web.Request) -> web.Response:
        await case.far.hold()
        return web.Response()

    async with serve(handler) as url:
        errors = [await case.turn(p, url, budget_ms=300) for p in BOTH_PATHS]
    for err in errors:
        assert isinstance(err, LLMTimeout)
        assert (err.phase, err.timeout_ms) == ("headers", 300)
    return errors


async def malformed_head(case: Case) -> list[BaseException]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
        await writer.drain()
        writer.close()

    async with serve_raw(handler) as url:
        return [await case.turn(p, url) for p in BOTH_PATHS]


async def non_2xx(case: Case) -> list[BaseException]:
    async def handler(request: web.Request) -> web.Response:
        if request.path == "/moved":
            raise web.HTTPFound("http://127.0.0.1:9/elsewhere")
        status = int(request.path.strip("/"))
        return web.Response(status=status, text=f"<html>{status} from the far end</html>")

    errors = []
    async with serve(handler) as url:
        for where in ("/502", "/429", "/529", "/moved"):
            errors += [await case.turn(p, url + where) for p in BOTH_PATHS]
    for err in errors:
        assert isinstance(err, LLMApiError)
        assert err.body.startswith("<html>") or err.status == 302
    return errors


async def non_2xx_refused_body(case: Case) -> list[BaseException]:
    errors = []
    async with serve(misbehaving(case, b"overloaded " * 10, status=503)) as url:
        for p in BOTH_PATHS:
            errors.append(await case.turn(p, url + "/close"))
            errors.append(await case.turn(p, url + "/short"))
            errors.append(await case.turn(p, url + "/big", max_body_bytes=1_000))
    for err in errors:
        assert isinstance(err, LLMApiError)
        assert err.status == 503
        assert isinstance(err.__cause__, LLMBadResponse)  # what the body's refusal was
    return errors


async def stall_in_body(case: Case) -> list[BaseException]:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"[" * (1 if request.path == "/stall" else 4096))
        while request.path == "/flood" and case.far.going():
            await resp.write(b"[" * 4096)
        await case.far.hold()
        return resp

    async with serve(handler) as url:
        errors = [await case.turn(p, url + "/stall", budget_ms=1_000) for p in BOTH_PATHS]
        errors.append(await case.turn("stream", url + "/flood", budget_ms=1_000))
    for err in errors:
        assert isinstance(err, LLMTimeout)
        assert err.phase == "body"
    return errors


async def no_content(case: Case) -> list[BaseException]:
    """The head, then (``/some``) a few bytes, then nothing, under a budget far
    longer than the stall bound: the stall ends the wait, counting the pieces
    of content (bytes read, on the whole path; none declared, streamed)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        if request.path == "/some":
            await resp.write(b"[")
        await case.far.hold()
        return resp

    async with serve(handler) as url:
        errors = [
            await case.turn(p, url + path, budget_ms=AMPLE, stall_ms=200)
            for p in BOTH_PATHS
            for path in ("/none", "/some")
        ]
    for err in errors:
        assert isinstance(err, LLMTimeout)
        assert (err.phase, err.timeout_ms) == ("stall", 200)
    assert [err.chunks for err in errors] == [0, 1, 0, 0]  # type: ignore[attr-defined]
    return errors


def misbehaving(
    case: Case, sent: bytes, *, status: int = 200, readers: list[Taking] | None = None
) -> Handler:
    """A far end that answers ``status`` and ``sent``, then does what the
    request's path says: ``/reset`` resets the connection, ``/close`` and
    ``/short`` close it, anything else holds it to the far end's own end.
    ``/short`` and ``/big`` announce a 100,000-byte body; the rest are chunked.
    ``readers``: the cut waits until the last of them says the client has read
    ``sent`` (a turn appends its own before it starts); none: it comes at once."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=status)
        if request.path in ("/short", "/big"):
            resp.content_length = 100_000
        else:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(sent)
        if readers:
            await readers[-1].taken.wait()
        if request.path == "/reset":
            reset_connection(request)
        elif request.path in ("/close", "/short"):
            cut_connection(request)
        await case.far.hold()
        return resp

    return handler


async def body_cut_short(case: Case) -> list[BaseException]:
    sent = b'{"message": "' + b"a" * 5000
    errors = []
    readers: list[Taking] = []
    async with serve(misbehaving(case, sent, readers=readers)) as url:
        for p in BOTH_PATHS:
            for how in ("/reset", "/close", "/short"):
                readers.append(Taking(len(sent)))  # the client reads them all before the cut
                errors.append(await case.turn(p, url + how, inflight=readers[-1]))
            inflight = Watched()
            turn = asyncio.create_task(case.turn(p, url + "/held", inflight=inflight))
            await inflight.joined.wait()  # its headers are in: the owner cuts its body
            send.cut(inflight)
            errors.append(await turn)
            # The connection closed between the headers and the read (as a
            # session closing under a turn closes it): aiohttp says so with
            # a RuntimeError, which is a body cut short like any other.
            errors.append(await case.turn(p, url + "/held", inflight=Unplugged()))
    for err in errors:
        assert isinstance(err, LLMBadResponse)
        assert "cut the body short" in str(err)
        assert err.text in ("", sent.decode())  # what the whole-body path had read
    return errors


async def over_the_cap(case: Case) -> list[BaseException]:
    body = b"[" + b"1," * 4096 + b"1]"

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/announced":
            return web.Response(body=body)
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(body)
        await case.far.hold()
        return resp

    async with serve(handler) as url:
        return [
            await case.turn("whole", url + how, max_body_bytes=1_000)
            for how in ("/announced", "/counted")
        ]


async def undecodable(case: Case) -> list[BaseException]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body={"/html": b"<html>", "/deep": b"[" * 100_000}[request.path])

    async with serve(handler) as url:
        errors = [await case.turn("whole", url + "/html"), await case.turn("whole", url + "/deep")]
        errors.append(await case.turn("whole", url + "/html", decoder=msgspec.json.Decoder(Ping)))
    return errors


async def cancelled(case: Case) -> list[BaseException]:
    gone = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        try:
            if request.path == "/body":
                await resp.prepare(request)
                await resp.write(b"[")
            await case.far.hold()
        finally:
            gone.set()
        return resp

    errors: list[BaseException] = []
    async with serve(handler) as url:
        for p in BOTH_PATHS:
            for where in ("/headers", "/body"):
                gone.clear()
                case.far.arrived.clear()
                inflight = Watched()
                turn = asyncio.create_task(case.turn(p, url + where, inflight=inflight))
                await (inflight.joined if where == "/body" else case.far.arrived).wait()
                turn.cancel()
                with pytest.raises(asyncio.CancelledError) as info:
                    await turn
                errors.append(info.value)
                await gone.wait()  # the far end saw its connection go (or came to its end)
    return errors


CASES: dict[str, Scenario] = {
    "a header name that is no HTTP token, or a value holding a control character": bad_header,
    "an invalid URL": invalid_url,
    "a request aiohttp will not build (a password in the URL and an Authorization header)": (
        unbuildable
    ),
    "refused, reset or closed before the headers": refused_or_reset,
    "the host does not resolve": unresolved,
    "no connection inside :data:`CONNECT_TIMEOUT_MS`": no_connection,
    "the deadline passes while the turn waits for a connection (phase ``connection``)": (
        every_connection_taken
    ),
    "the deadline passes before the headers (phase ``headers``)": stall_before_headers,
    "a malformed HTTP head": malformed_head,
    "a non-2xx status, 3xx, 429 and 529 included": non_2xx,
    "a non-2xx body cut short or over the cap": non_2xx_refused_body,
    "the deadline passes while the body is read, streamed or still flowing (phase ``body``)": (
        stall_in_body
    ),
    "no content for the request's ``stall_ms`` (phase ``stall``)": no_content,
    "the body cut short after the headers (a reset, a close, a truncated chunked encoding, "
    "a short Content-Length, the connection closed under the reader, or its owner's "
    ":func:`cut`)": body_cut_short,
    "a body over the cap, announced or counted": over_the_cap,
    "a 2xx body that will not decode into the caller's type": undecodable,
    "the awaiting task is cancelled": cancelled,
}
ROWS = failure_table()
TYPED_HERE = {"__exit__"}
"""Where an error caused by aiohttp, an OSError or a TimeoutError may be raised: the boundary."""
RAISED_ELSEWHERE = {"_check_headers", "_read_whole", "decode_json"}
"""Where the other typed errors start: the header rule, the capped reader, the decoder."""


def test_every_row_of_the_failure_table_has_a_case_and_no_case_is_left_over() -> None:
    assert [when for _, when in ROWS] == list(CASES)


def _origin(err: BaseException) -> str:
    tb = err.__traceback__
    assert tb is not None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name


def _causes(err: BaseException) -> list[BaseException]:
    chain = []
    cause = err.__cause__
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    return chain


@pytest.mark.parametrize(("raised", "when"), ROWS, ids=[when[:40] for _, when in ROWS])
async def test_each_row_of_the_failure_table(
    session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch, raised: str, when: str
) -> None:
    """The row's condition, made to happen on every path it can, raises the
    error the row names, from the one place that types it; a message never
    holds a secret or a whole body; a hostile far end was still at it when
    the turn ended."""
    case = Case(session, monkeypatch)
    errors = await CASES[when](case)
    assert errors
    for err in errors:
        assert type(err).__name__ == raised, (when, repr(err))
        if not isinstance(err, LLMError):
            continue
        message = str(err)
        assert len(message) < MESSAGE_BOUND
        assert "SECRET" not in message
        assert "s3cret" not in "".join(traceback.format_exception(err))
        wire_causes = [  # a decoder's refusal is a ValueError too, but not the wire's
            c
            for c in _causes(err)
            if isinstance(c, aiohttp.ClientError | OSError | ValueError)
            and not isinstance(c, msgspec.MsgspecError)
        ]
        if wire_causes:
            assert _origin(err) in TYPED_HERE, (when, _origin(err))
        elif err.__cause__ is None and not err.__suppress_context__:
            assert _origin(err) in RAISED_ELSEWHERE, (when, _origin(err))
    assert not case.far.ended.is_set()
