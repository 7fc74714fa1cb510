"""The connection policy (#29): a bounded pool per far end, reused, its wait a phase of its own.

Real parts only: loopback aiohttp servers that count the connections they are
reached on (by the client's port) and hold answers until the test lets them go,
and the Ollama, Messages API, Chat Completions and Responses API providers. Every assertion
is bound by events (what the server saw, what ended before what), none by a
wall clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import aclosing
from contextlib import asynccontextmanager
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.anthropic_fake import frame
from tests.support.fake_ollama import chunk
from tests.support.fake_ollama import final
from tests.support.fake_ollama import merged
from tests.support.fake_openai_responses import Item
from tests.support.fake_openai_responses import Turn
from tests.support.fake_openai_responses import sse
from tests.support.loopback import serve
from tests.support.loopback import serve_raw
from tests.support.pool_check import checked_in
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm._transport.sessions import create_session
from vaelii_llm._transport.settings import DEFAULT_MAX_CONNECTIONS
from vaelii_llm._transport.settings import Network
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.providers import anthropic
from vaelii_llm.providers import ollama
from vaelii_llm.providers import openai
from vaelii_llm.providers import openai_responses
from vaelii_llm.providers._http import HTTPProvider

ANSWER = "Hello! How are you today?"
PIECES = ["Hello", "! How are you", " today?"]


def ask(timeout_ms: int = 10_000) -> Request:
    return Request(
        messages=[Message(role="user", content="hi")], max_tokens=8, timeout_ms=timeout_ms
    )


def text(response: Response) -> str:
    return "".join(b.text for b in response.content if isinstance(b, TextBlock))


def ndjson(objects: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


OLLAMA_BODY = ndjson([*(chunk(p) for p in PIECES), final()])


@dataclass
class Counting:
    """A server's record: the connections it was reached on, the requests in hand."""

    ports: list[int] = field(default_factory=list)  # each request's client port, in order
    active: int = 0
    peak: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def seen(self, request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.ports.append(peer[1] if peer else -1)
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.arrived.set()

    @property
    def connections(self) -> int:
        return len(set(self.ports))


Body = Callable[[web.Request, Counting], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def counting(body: Body) -> AsyncIterator[tuple[str, Counting]]:
    record = Counting()

    async def handle(request: web.Request) -> web.StreamResponse:
        record.seen(request)
        try:
            return await body(request, record)
        finally:
            record.active -= 1

    async with serve(handle) as url:
        yield url, record


async def whole_stream(request: web.Request, _record: Counting) -> web.StreamResponse:
    """Ollama's answer: streamed (NDJSON), or one object when not streamed."""
    if not (await request.json()).get("stream", True):
        return web.json_response(merged([*(chunk(p) for p in PIECES), final()]))
    # Sent whole, with its length: its end is there when the last line is read.
    return web.Response(body=OLLAMA_BODY, headers={"Content-Type": "application/x-ndjson"})


async def streamed(provider: HTTPProvider[Any, Any], request: Request | None = None) -> Response:
    final_response: Response | None = None
    async with aclosing(provider.stream(request or ask())) as items:
        async for item in items:
            if isinstance(item, Response):
                final_response = item
    assert final_response is not None
    return final_response


# --- the bound, its wait, and what a caller is told -------------------------------------


async def test_ten_turns_on_two_connections_answer_or_end_typed_naming_the_wait() -> None:
    """Two connections, ten turns: the first six (long budgets) all answer, in
    turn, on the two connections reused; the last four (short budgets) end as
    LLMTimeout of phase ``connection`` while the far end still holds the first
    two, never sent. Nothing is left checked out."""
    release = asyncio.Event()

    async def held(request: web.Request, record: Counting) -> web.StreamResponse:
        await request.read()
        await release.wait()
        return await whole_stream(request, record)

    async with counting(held) as (url, record):
        provider = ollama.provider(host=url, max_connections=2)
        loop = asyncio.get_running_loop()
        try:
            ended: list[tuple[float, float]] = []  # (deadline, when it ended) per short turn

            async def short() -> Response:
                request = ask(timeout_ms=200)
                deadline = loop.time() + 0.2
                try:
                    return await streamed(provider, request)
                finally:
                    ended.append((deadline, loop.time()))

            first = [asyncio.ensure_future(streamed(provider)) for _ in range(2)]
            while len(record.ports) < 2:
                await record.arrived.wait()
                record.arrived.clear()
            queued = [asyncio.ensure_future(streamed(provider)) for _ in range(4)]
            shorts = await asyncio.gather(*(short() for _ in range(4)), return_exceptions=True)
            # The far end still holds the first two: nothing else was sent, so
            # the short turns ended waiting for a connection, within their budget.
            assert len(record.ports) == 2
            assert not release.is_set()
            for raised in shorts:
                assert isinstance(raised, LLMTimeout), raised
                assert raised.phase == "connection"
                assert raised.timeout_ms == 200
                assert "no connection to" in str(raised)
                assert "came free" in str(raised)
            assert all(when >= deadline for deadline, when in ended)
            release.set()
            answers = await asyncio.gather(*first, *queued)
        finally:
            checked_in(provider)
            await provider.aclose()
    assert [text(a) for a in answers] == [ANSWER] * 6
    assert len(record.ports) == 6  # the timed-out four were never sent
    assert record.peak == 2
    assert record.connections == 2  # the queued four reused the first two connections


async def test_a_slow_far_end_is_told_apart_from_a_full_pool() -> None:
    """One connection: a turn queued behind a held one ends in phase
    ``connection``; a turn that got the connection and waits on the far end
    ends in phase ``headers``."""
    release = asyncio.Event()

    async def held(request: web.Request, record: Counting) -> web.StreamResponse:
        await request.read()
        await release.wait()
        return await whole_stream(request, record)

    async with counting(held) as (url, record):
        provider = ollama.provider(host=url, max_connections=1)
        try:
            holder = asyncio.ensure_future(provider.complete(ask(timeout_ms=200)))
            await record.arrived.wait()
            with pytest.raises(LLMTimeout) as queued:
                await provider.complete(ask(timeout_ms=100))
            with pytest.raises(LLMTimeout) as slow:
                await holder
            release.set()
            checked_in(provider)
        finally:
            await provider.aclose()
    assert queued.value.phase == "connection"
    assert slow.value.phase == "headers"
    assert len(record.ports) == 1


async def test_a_cancelled_wait_gives_nothing_away_and_takes_nothing() -> None:
    release = asyncio.Event()

    async def held(request: web.Request, record: Counting) -> web.StreamResponse:
        await request.read()
        await release.wait()
        return await whole_stream(request, record)

    async with counting(held) as (url, record):
        provider = ollama.provider(host=url, max_connections=1)
        try:
            holder = asyncio.ensure_future(provider.complete(ask()))
            await record.arrived.wait()
            waiter = asyncio.ensure_future(provider.complete(ask()))
            await asyncio.sleep(0)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            release.set()
            assert text(await holder) == ANSWER
            assert text(await provider.complete(ask())) == ANSWER
            checked_in(provider)
        finally:
            await provider.aclose()
    assert len(record.ports) == 2
    assert record.connections == 1


@pytest.mark.parametrize("seed", range(12))
async def test_the_gate_holds_its_limit_and_its_order_through_timeouts_and_cancellations(
    seed: int,
) -> None:
    """Turns that take at once, wait, time out, or are cancelled (while
    waiting, or as a connection is handed to them): no more than the limit
    ever hold one, turns that waited are served in the order they came, and
    when all are done every connection is free and nobody is left waiting."""
    import random

    from vaelii_llm._transport.sessions import Gate
    from vaelii_llm._transport.settings import Deadline
    from vaelii_llm._transport.settings import Endpoint

    rng = random.Random(seed)
    gate = Gate(rng.randint(1, 4))
    endpoint = Endpoint("the far end", "test")
    holding = most = 0
    waited_and_served: list[int] = []
    ends: dict[str, int] = {"held": 0, "timed out": 0, "cancelled": 0}
    phases: list[str] = []

    async def turn(n: int, timeout_ms: int, hold_s: float) -> None:
        nonlocal holding, most
        try:
            if not gate.take_now():
                await gate.take(endpoint, Deadline.after_ms(timeout_ms))
                waited_and_served.append(n)
        except LLMTimeout as exc:
            phases.append(exc.phase)
            ends["timed out"] += 1
            return
        except asyncio.CancelledError:
            ends["cancelled"] += 1
            raise
        holding += 1
        most = max(most, holding)
        try:
            await asyncio.sleep(hold_s)
        finally:
            holding -= 1
            gate.give()
        ends["held"] += 1

    tasks: list[asyncio.Future[None]] = []
    for n in range(80):
        tasks.append(asyncio.ensure_future(turn(n, rng.choice([3, 15, 1000]), rng.random() / 200)))
        if rng.random() < 0.4:
            await asyncio.sleep(rng.choice([0, 0, 0.001]))
        if rng.random() < 0.2:
            rng.choice(tasks).cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert most <= gate.limit
    assert gate.taken == 0
    assert not gate._waiting
    assert waited_and_served == sorted(waited_and_served)
    assert set(phases) <= {"connection"}
    assert ends["held"], ends
    assert ends["timed out"] + ends["cancelled"], ends


async def test_a_wait_that_ended_leaves_no_place_in_the_queue() -> None:
    """A turn cancelled or timed out while waiting leaves the queue at once
    (however long the connection is held, ended waits do not pile up); once
    the connection is given back, the next turn takes it at once."""
    from vaelii_llm._transport.sessions import Gate
    from vaelii_llm._transport.settings import Deadline
    from vaelii_llm._transport.settings import Endpoint

    gate = Gate(1)
    endpoint = Endpoint("the far end", "test")
    assert gate.take_now()
    cancelled = asyncio.ensure_future(gate.take(endpoint, Deadline.after_ms(10_000)))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    with pytest.raises(LLMTimeout):
        await gate.take(endpoint, Deadline.after_ms(5))
    assert not gate._waiting  # a long hold does not pile up ended waits
    gate.give()
    assert gate.taken == 0
    assert gate.take_now()
    gate.give()


async def test_the_default_is_bounded_and_zero_asks_for_no_bound() -> None:
    assert Network().max_connections == DEFAULT_MAX_CONNECTIONS
    async with counting(whole_stream) as (url, _record):
        bounded = ollama.provider(host=url)
        unbounded = ollama.provider(host=url, max_connections=0)
        try:
            await bounded.complete(ask())
            await unbounded.complete(ask())
            gate = bounded._sessions.gate()
            assert gate is not None
            assert gate.limit == DEFAULT_MAX_CONNECTIONS
            assert unbounded._sessions.gate() is None
            for provider in (bounded, unbounded):
                session = provider._sessions.current()
                assert session is not None
                connector = session.connector
                assert isinstance(connector, aiohttp.TCPConnector)
                # The gate is the bound: aiohttp's connector never queues a turn.
                assert (connector.limit, connector.limit_per_host) == (0, 0)
        finally:
            await bounded.aclose()
            await unbounded.aclose()


def test_the_backends_guide_names_the_default_bound() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "backends.md"
    assert f"Unset, {DEFAULT_MAX_CONNECTIONS}," in guide.read_text()


async def test_a_probe_session_bounds_each_host_in_its_connector() -> None:
    async with create_session(network=Network(max_connections=3)) as s:
        connector = s.connector
        assert isinstance(connector, aiohttp.TCPConnector)
        assert (connector.limit, connector.limit_per_host) == (0, 3)


# --- keep-alive that survives streaming -------------------------------------------------


def anthropic_body() -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }
    events = [
        frame("message_start", start),
        frame(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        *(
            frame(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": p},
                },
            )
            for p in PIECES
        ),
        frame("content_block_stop", {"type": "content_block_stop", "index": 0}),
        frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 5},
            },
        ),
        frame("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(events)


def openai_body() -> bytes:
    def data(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    pieces = [data({"role": "assistant", "content": PIECES[0]})]
    pieces += [data({"content": p}) for p in PIECES[1:]]
    pieces.append(data({}, "stop"))
    return b"".join(pieces) + b"data: [DONE]\n\n"


WIRES: dict[str, tuple[bytes, str, Callable[[str, int], HTTPProvider[Any, Any]]]] = {
    "ollama": (
        OLLAMA_BODY,
        "application/x-ndjson",
        lambda url, cap: ollama.provider(host=url, max_connections=cap),
    ),
    "anthropic": (
        anthropic_body(),
        "text/event-stream",
        lambda url, cap: anthropic.provider(
            credential="sk-test", base_url=url, model="claude-x", max_connections=cap
        ),
    ),
    "openai": (
        openai_body(),
        "text/event-stream",
        lambda url, cap: openai.provider(base_url=url + "/v1", model="m", max_connections=cap),
    ),
    "openai-responses": (
        sse(Turn(items=[Item("message", PIECES)]).events()),
        "text/event-stream",
        lambda url, cap: openai_responses.provider(
            base_url=url + "/v1", model="m", max_connections=cap
        ),
    ),
}


def streaming(
    body: bytes, content_type: str, *, tail: bytes = b"", hold: asyncio.Event | None = None
) -> Body:
    """A streamed answer and ``tail`` after its terminal event, sent at once
    with its length (so its end is there when the terminal event is read, on
    any machine); or (``hold``) chunked, the body left open after the answer
    until the event is set."""

    async def handle(request: web.Request, _record: Counting) -> web.StreamResponse:
        await request.read()
        if hold is None:
            return web.Response(body=body + tail, headers={"Content-Type": content_type})
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        await response.write(body + tail)
        await hold.wait()
        await response.write_eof()
        return response

    return handle


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_a_stream_read_to_its_end_hands_its_connection_to_the_next_turn(wire: str) -> None:
    """Three streamed turns and a non-streamed one in a row go over one
    connection, the pool bounded or not (the body's end read, or drained after
    the terminal event)."""
    body, content_type, make = WIRES[wire]
    tail = b"\n" if wire == "ollama" else b": trailing comment\n\n"
    for cap in (4, 0):
        async with counting(streaming(body, content_type, tail=tail)) as (url, record):
            provider = make(url, cap)
            try:
                for _ in range(3):
                    assert text(await streamed(provider)) == ANSWER
                if cap:
                    checked_in(provider)
            finally:
                await provider.aclose()
        assert (len(record.ports), record.connections) == (3, 1), (wire, cap)


def opening_then_held(
    body: bytes, content_type: str, hold: asyncio.Event, gone: asyncio.Event | None = None
) -> Body:
    """The answer's opening (up to its second piece of text), then nothing
    until ``hold`` is set, then the rest: a reader waits mid-stream. ``gone``
    is set if the client closes the connection first (the handler cancelled)."""
    cut_at = body.index(PIECES[1].encode())

    async def handle(request: web.Request, _record: Counting) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        await response.write(body[:cut_at])
        try:
            await hold.wait()
        finally:
            if gone is not None and not hold.is_set():
                gone.set()
        await response.write(body[cut_at:])
        await response.write_eof()
        return response

    return handle


@pytest.mark.parametrize("wire", sorted(WIRES))
@pytest.mark.parametrize("how", ["cancel the reader", "close from another task"])
async def test_a_stream_ended_from_another_task_ends_at_once_and_frees_its_connection(
    wire: str, how: str
) -> None:
    """The reader waits mid-stream for a far end that sends nothing more.
    Cancelling the reader's task, or closing its stream from another task,
    ends the turn at once: the reader's loop ends (cancelled, or with no
    further item), nothing is checked out, and the next turn is answered on
    a fresh connection (the cut one closed, never handed on)."""
    body, content_type, make = WIRES[wire]
    hold = asyncio.Event()
    async with counting(opening_then_held(body, content_type, hold)) as (url, record):
        provider = make(url, 2)
        try:
            first = asyncio.Event()
            seen: list[object] = []
            items = provider.stream(ask(), deltas=True)

            async def reader() -> None:
                async for item in items:
                    seen.append(item)
                    first.set()

            task = asyncio.create_task(reader())
            await first.wait()
            await asyncio.sleep(0.05)  # the reader is waiting for the far end now
            if how == "cancel the reader":
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                await asyncio.wait_for(items.aclose(), 10)
                await asyncio.wait_for(task, 10)  # its loop ended, no error
            assert not any(isinstance(item, Response) for item in seen)
            checked_in(provider)
            hold.set()
            assert text(await streamed(provider)) == ANSWER
            checked_in(provider)
        finally:
            hold.set()
            await provider.aclose()
    assert record.connections == 2  # the cut one closed; the next turn on a fresh one


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_a_stream_abandoned_early_is_closed_not_handed_on(wire: str) -> None:
    """A caller who stops after the first delta closes that connection: the
    next turn is answered whole on a fresh one, and nothing is checked out."""
    body, content_type, make = WIRES[wire]
    hold = asyncio.Event()  # the first body never ends by itself
    async with counting(streaming(body, content_type, hold=hold)) as (url, record):
        provider = make(url, 2)
        try:
            async with aclosing(provider.stream(ask(), deltas=True)) as items:
                async for _item in items:
                    break
            checked_in(provider)
            hold.set()
            for _ in range(2):
                assert text(await streamed(provider)) == ANSWER
            checked_in(provider)
        finally:
            await provider.aclose()
    assert len(record.ports) == 3
    assert record.connections == 2  # the abandoned one closed; the next two shared one


async def test_a_body_held_open_after_its_terminal_event_is_not_reused() -> None:
    """The answer is whole at the terminal event; a far end that then keeps the
    body open has its connection closed after the drain, and the next turn
    is answered on a fresh one."""
    hold = asyncio.Event()
    async with counting(streaming(OLLAMA_BODY, "application/x-ndjson", hold=hold)) as (url, record):
        provider = ollama.provider(host=url, max_connections=1)
        try:
            assert text(await streamed(provider)) == ANSWER
            checked_in(provider)
            hold.set()
            assert text(await streamed(provider)) == ANSWER
            checked_in(provider)
        finally:
            await provider.aclose()
    assert (len(record.ports), record.connections) == (2, 2)


async def test_a_failed_turn_gives_its_connection_back() -> None:
    async def refused(request: web.Request, _record: Counting) -> web.StreamResponse:
        await request.read()
        return web.json_response({"error": "no"}, status=500)

    async with counting(refused) as (url, _record):
        provider = ollama.provider(host=url, max_connections=1)
        try:
            for _ in range(3):
                with pytest.raises(LLMError):
                    await streamed(provider)
                with pytest.raises(LLMError):
                    await provider.complete(ask())
            checked_in(provider)
        finally:
            await provider.aclose()


# --- a kept connection the far end closed ------------------------------------------------


def closing_after_each_answer(body: bytes, content_type: str, record: Counting) -> Any:
    """A raw far end that answers one request per connection, with its length
    and no ``Connection: close``, and then closes the connection, as a server
    dropping an idle kept-alive connection does: the close reaches the client
    just after the answer, before the loop has seen it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        record.ports.append(writer.get_extra_info("peername")[1])
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (content_type.encode(), len(body), body)
        )
        await writer.drain()
        writer.close()

    return handle


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_a_kept_connection_the_far_end_closed_is_never_sent_on(wire: str) -> None:
    """Forty streamed turns in a row, each straight after the last, against a
    far end that closes every connection after its answer: every turn is
    answered, each on a fresh connection (the closed one is seen before
    anything is sent on it; nothing is retried)."""
    body, content_type, make = WIRES[wire]
    record = Counting()
    async with serve_raw(closing_after_each_answer(body, content_type, record)) as url:
        provider = make(url, 1)
        try:
            for _ in range(40):
                assert text(await streamed(provider)) == ANSWER
            checked_in(provider)
        finally:
            await provider.aclose()
    # one answer per connection the far end accepted (it closes each after one);
    # not distinct ports: the far end closed first, so the OS may hand a port out again
    assert len(record.ports) == 40


async def test_a_whole_turn_after_a_closed_kept_connection_takes_a_fresh_one() -> None:
    record = Counting()
    whole_body = json.dumps(merged([*(chunk(p) for p in PIECES), final()])).encode()
    async with serve_raw(closing_after_each_answer(whole_body, "application/json", record)) as url:
        provider = ollama.provider(host=url, max_connections=1)
        try:
            for _ in range(40):
                assert text(await provider.complete(ask())) == ANSWER
            checked_in(provider)
        finally:
            await provider.aclose()
    # one answer per connection the far end accepted (it closes each after one);
    # not distinct ports: the far end closed first, so the OS may hand a port out again
    assert len(record.ports) == 40


# --- a far end that closes a stream's connection just after its last byte (#58) ----------


def closing_after_each_stream(
    record: Counting, close_after_s: float, *, chunked: bool = True
) -> Any:
    """A raw far end that keeps a connection after a whole answer but closes
    it ``close_after_s`` after the last chunk of a streamed one, though its
    head says ``Keep-Alive`` (as llama.cpp's ``llama-server`` does): a request
    sent on it in between is never read. ``chunked=False``: the stream is sent
    with its length, in one write with its head (its connection is back in
    the pool before the stream is read)."""
    whole = json.dumps(merged([*(chunk(p) for p in PIECES), final()])).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("peername")[1]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                asked = json.loads(await reader.readexactly(length))
                record.ports.append(port)
                if not asked.get("stream", True):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Keep-Alive: timeout=5, max=100\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(whole), whole)
                    )
                    await writer.drain()
                    continue
                if not chunked:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                        b"Keep-Alive: timeout=5, max=100\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(OLLAMA_BODY), OLLAMA_BODY)
                    )
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                        b"Keep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n"
                    )
                    for line in OLLAMA_BODY.splitlines(keepends=True):
                        writer.write(b"%x\r\n%s\r\n" % (len(line), line))
                    writer.write(b"0\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(close_after_s)
                break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:  # also when the server stops with this connection open
            writer.close()

    return handle


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole with its head"])
async def test_a_far_end_closing_each_stream_s_connection_never_has_a_turn_sent_into_it(
    chunked: bool,
) -> None:
    """Forty times a stream and then a whole turn, each straight after the
    last, against a far end that closes a stream's connection a moment after
    its last chunk: every turn is answered, and every request sent was read
    (none sent into a closing connection; nothing retried). On main the turn
    after each stream was sent on the closing connection and failed
    LLMUnreachable ("closed the connection before answering"). A stream
    whose whole body came with its head has its connection back in the pool
    before it is read: it is known by the connection it was opened on (#61:
    aiohttp's private ``response._protocol`` was read for it)."""
    record = Counting()
    async with serve_raw(closing_after_each_stream(record, 0.02, chunked=chunked)) as url:
        provider = ollama.provider(host=url, max_connections=1)
        try:
            for _ in range(40):
                assert text(await streamed(provider)) == ANSWER
                assert text(await provider.complete(ask())) == ANSWER
            checked_in(provider)
            connector = provider._sessions.current().connector  # type: ignore[union-attr]
            assert connector._keeps_streams is False  # type: ignore[union-attr]  # learnt once
        finally:
            await provider.aclose()
    assert len(record.ports) == 80


# --- a stream's deadline, whether or not anyone reads it (#58) ---------------------------


@pytest.mark.parametrize("wire", sorted(WIRES))
async def test_a_stream_nobody_reads_ends_at_its_deadline(wire: str) -> None:
    """The reader takes the first item and then reads no more. At the turn's
    deadline the far end sees its connection closed and the turn's
    connection is given back, with no read; the reader's next read is the
    deadline's LLMTimeout. On main the turn held both until it was read."""
    body, content_type, make = WIRES[wire]
    gone = asyncio.Event()
    never = asyncio.Event()  # nothing more, ever
    async with counting(opening_then_held(body, content_type, never, gone)) as (url, _record):
        provider = make(url, 1)
        try:
            items = provider.stream(ask(timeout_ms=300), deltas=True)
            await anext(items)
            await asyncio.wait_for(gone.wait(), 10)  # main: never, until read
            checked_in(provider)
            with pytest.raises(LLMTimeout) as ended:
                await anext(items)
            assert ended.value.phase == "body"
            await items.aclose()
            checked_in(provider)
        finally:
            await provider.aclose()


async def test_a_far_end_keeping_each_stream_s_connection_is_learnt_once_and_reused() -> None:
    """Against a far end that keeps a stream's connection, the first turn to
    take one holds it once (the proof) and from then on every turn reuses
    the one connection, streamed or whole."""
    async with counting(whole_stream) as (url, record):
        provider = ollama.provider(host=url, max_connections=1)
        try:
            for _ in range(10):
                assert text(await streamed(provider)) == ANSWER
                assert text(await provider.complete(ask())) == ANSWER
            checked_in(provider)
            connector = provider._sessions.current().connector  # type: ignore[union-attr]
            assert connector._keeps_streams is True  # type: ignore[union-attr]
        finally:
            await provider.aclose()
    assert record.connections == 1
    assert len(record.ports) == 20
