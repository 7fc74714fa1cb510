"""Sending: a request read whole and decoded, or its body streamed as it arrives;
ending reads (``drain``, ``cut``). Failures: see :mod:`vaelii_llm._transport.boundary`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from collections.abc import Mapping
from contextlib import suppress
from typing import Any
from typing import TypeVar

import aiohttp
import msgspec

from vaelii_llm import _timers as timers
from vaelii_llm._transport.boundary import DEFAULT_MAX_BODY_BYTES
from vaelii_llm._transport.boundary import _Boundary
from vaelii_llm._transport.boundary import _let_go
from vaelii_llm._transport.boundary import _read_whole
from vaelii_llm._transport.boundary import decode_json
from vaelii_llm._transport.sessions import Gate
from vaelii_llm._transport.sessions import _opening
from vaelii_llm._transport.sessions import _streamed_on
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.settings import _check_headers
from vaelii_llm._transport.settings import with_json_content_type
from vaelii_llm._transport.withheld import _SentTo
from vaelii_llm.errors import LLMError

__all__ = ["cut", "drain", "open_stream", "request_json"]

T = TypeVar("T")


async def request_json(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    method: str,
    url: str,
    *,
    deadline: Deadline,
    decoder: msgspec.json.Decoder[T],
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    inflight: set[aiohttp.ClientResponse] | None = None,
    gate: Gate | None = None,
    seen: list[Mapping[str, str]] | None = None,
) -> T:
    """Send, read the whole body under the deadline, decode it; the response is always let go.

    One timer for the headers and the body (the small-turn path). A ``body``
    goes out as ``application/json`` unless a Content-Type (here or on the
    session) says otherwise. A non-2xx raises :class:`LLMApiError` with its
    status and body; other failures: see :mod:`vaelii_llm._transport.boundary`.
    ``inflight``: a set that holds the response while its body is read, so its
    owner can cut the read (see :func:`cut`). ``gate``: the session's
    :class:`Gate`, a connection taken from it first and given back with the
    response. ``seen``: a list the response's headers are appended to.
    """
    sent = _outgoing(session, headers, body)
    if gate is not None and not gate.take_now():
        await gate.take(endpoint, deadline)
    try:
        boundary = _Boundary(endpoint, deadline, _SentTo(session, sent, url))
        with boundary:
            response = boundary.response = await session.request(
                method, url, data=body, headers=sent, allow_redirects=False
            )
            if inflight is None:
                data = await _read_whole(boundary, max_body_bytes)
            else:
                inflight.add(response)
                try:
                    data = await _read_whole(boundary, max_body_bytes)
                finally:
                    inflight.discard(response)
        response.release()
        if seen is not None:
            seen.append(response.headers)
    finally:
        if gate is not None:
            gate.give()
    try:
        return decode_json(data, endpoint, decoder)
    except LLMError as exc:
        boundary.withhold(exc)
        raise


def _outgoing(
    session: aiohttp.ClientSession, headers: Mapping[str, str] | None, body: bytes | None
) -> Mapping[str, str] | None:
    """The request's own headers, checked, with a JSON Content-Type for a body
    when neither they nor the session name one (copied only then)."""
    _check_headers(headers)
    if body is None or "Content-Type" in session.headers:
        return headers
    return with_json_content_type(headers)


async def drain(chunks: AsyncIterator[bytes], seconds: float) -> None:
    """Read and discard what follows a stream's terminal event for at most ``seconds``.

    The answer is already whole, so nothing that happens here may lose it:
    the deadline passing, a cut connection or a body that never ends is
    swallowed (the response is then closed rather than reused). Reading the
    body to its end lets its connection go back to the pool. A cancellation
    propagates. Every streamed turn passes here, most finding the body's end
    already arrived: a stream of :func:`open_stream` whose end has come is
    drained at once, with no timer; otherwise the bound is a
    :func:`~vaelii_llm._timers.timeout_at` block (one shared loop timer).
    """
    if type(chunks) is _Stream and chunks.ended():
        return  # the common case: the end came with the terminal event
    deadline = asyncio.get_running_loop().time() + seconds
    with suppress(TimeoutError, LLMError), timers.timeout_at(deadline):
        async for _ in chunks:
            pass


def open_stream(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    method: str,
    url: str,
    *,
    deadline: Deadline,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    inflight: set[aiohttp.ClientResponse] | None = None,
    gate: Gate | None = None,
) -> _Stream:
    """Send a request and hand over its body as an async iterator of chunks.

    ``async with open_stream(...) as chunks: async for chunk in chunks: ...``.
    The headers and each wait for a chunk are bounded by the turn's deadline;
    failures as in :mod:`vaelii_llm._transport.boundary`. Leaving the block in any way (the
    end of the body, an exception, ``break``, cancellation, ``aclose``)
    releases the response at once, closing its connection unless the body was
    read to its end. A ``body`` goes out as ``application/json`` unless a
    Content-Type says otherwise. ``max_body_bytes`` bounds only a non-2xx
    body, read for :class:`LLMApiError`. ``inflight``: a set that holds the
    response until the block is left, so its owner can cut the stream (see
    :func:`cut`). ``gate``: the session's :class:`Gate`, a connection taken
    from it first and given back once the response is let go (so a stream read
    to its end hands its connection to the next turn).
    """
    return _Stream(
        session, endpoint, method, url, deadline, body, headers, max_body_bytes, inflight, gate
    )


class _Stream:
    """One streamed request (made by :func:`open_stream`): an async context
    manager that sends it, and, inside, the async iterator of its body's chunks.

    A class, not a generator: every streamed turn passes here, and an async
    generator costs each turn the loop's bookkeeping of it (a weak reference
    registered, a callback at its end) and a close thrown into it.

    Bytes already buffered are taken without a wait (and without entering a
    timer); only an actual wait runs under the deadline, in the boundary,
    never across a handover. A body that keeps flowing past the deadline is
    cut too. Once the body ends, a read fails or the block is left, the
    iterator is exhausted.

    A deadline with ``stall_ms`` bounds each wait by the stall bound too: it
    starts when the request is sent and again at each :meth:`fresh` (the
    backend saying content arrived; keep-alives are bytes, not content). It is
    judged only when a read must wait: bytes already buffered are the far
    end's, and time the caller spent between reads is not a stall of it.
    :attr:`arrived` is when the last chunk was had (the loop's clock, read
    once per chunk: the deadline's check and the backend's timings share it).
    """

    __slots__ = (
        "_alarm",
        "_args",
        "_boundary",
        "_clock",
        "_content",
        "_done",
        "_gate",
        "_inflight",
        "_response",
        "_sent",
        "_when",
        "arrived",
    )

    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: Endpoint,
        method: str,
        url: str,
        deadline: Deadline,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        max_body_bytes: int,
        inflight: set[aiohttp.ClientResponse] | None,
        gate: Gate | None,
    ) -> None:
        self._args = (session, endpoint, method, url, deadline, body, headers, max_body_bytes)
        self._inflight = inflight
        self._gate = gate
        self._done = True  # nothing to read until the block is entered
        self._when = deadline.when
        self.arrived = 0.0

    async def __aenter__(self) -> _Stream:
        session, endpoint, method, url, deadline, body, headers, max_body_bytes = self._args
        sent = _outgoing(session, headers, body)
        gate = self._gate
        if gate is not None and not gate.take_now():
            await gate.take(endpoint, deadline)
        try:
            self._clock = clock = asyncio.get_running_loop().time
            self._sent = now = clock()
            boundary = _Boundary(endpoint, deadline, _SentTo(session, sent, url), now)
            opened: list[Any] = []  # the connection it opens on (see _streamed_on)
            with boundary:
                opening = _opening.set(opened)
                try:
                    response = boundary.response = await session.request(
                        method, url, data=body, headers=sent, allow_redirects=False
                    )
                finally:
                    _opening.reset(opening)
                if not 200 <= response.status < 300:
                    await _read_whole(boundary, max_body_bytes)  # raises LLMApiError with the body
            _streamed_on(session, opened)
        except BaseException:
            if gate is not None:
                gate.give()
            raise
        self._boundary = boundary
        self._response = response
        self._content = response.content
        self._done = False
        if self._inflight is not None:
            self._inflight.add(response)
        self._alarm = timers.alarm_at(deadline.when, self._let_go)
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._done = True
        self._alarm.cancel()
        self._let_go()

    def _let_go(self) -> None:
        """Let the response go and give its connection back: when the block
        is left, or at the turn's deadline with the block still open, read
        or not (a reader away from the stream holds nothing past it; its next
        read is the deadline's LLMTimeout, a read waiting now ends in it)."""
        try:
            if self._inflight is not None:
                self._inflight.discard(self._response)
            _let_go(self._response)
        finally:
            gate = self._gate
            if gate is not None:
                self._gate = None
                gate.give()

    @property
    def headers(self) -> Mapping[str, str]:
        """The response's headers (inside the block)."""
        return self._response.headers

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        content = self._content
        boundary = self._boundary
        try:
            chunk = content.read_nowait() if content.exception() is None else b""
            if not chunk:
                if content.exception() is None and content.at_eof():
                    self._done = True  # the end has arrived: nothing to wait for
                    raise StopAsyncIteration
                with boundary:  # a deadline already past cuts this wait at once
                    chunk = await content.readany()
                if not chunk:
                    self._done = True
                    raise StopAsyncIteration
            self.arrived = now = self._clock()
            if now >= self._when:
                # still flowing, but the turn's budget is spent
                with boundary:
                    raise TimeoutError("the deadline passed while the body was still arriving")
        except BaseException:
            self._done = True
            raise
        boundary.received += len(chunk)
        return chunk

    def fresh(self, contents: int, now: float) -> None:
        """Content arrived at ``now`` (``contents`` pieces of it so far, by
        the backend's count): the next wait is bounded by the stall bound
        from then. Only for a turn whose deadline has ``stall_ms``."""
        self._boundary.fresh(contents, now)

    @property
    def sent(self) -> float:
        """When the request was sent (the loop's clock; inside the block)."""
        return self._sent

    def ended(self) -> bool:
        """Whether the body's end has arrived, what is buffered before it read
        and discarded now (no wait); False with more to wait for or a failure
        pending (which the next read raises)."""
        if self._done:
            return True
        content = self._content
        if content.exception() is not None:
            return False
        while chunk := content.read_nowait():
            self._boundary.received += len(chunk)
        if content.at_eof():
            self._done = True
        return self._done


def cut(inflight: set[aiohttp.ClientResponse]) -> None:
    """End every read of the responses in ``inflight`` at once: each waiting
    read fails as a cut connection would (its caller sees the typed error of a
    body cut short). Closing a session alone does not wake a read in progress:
    it would wait for its deadline. For a provider's ``aclose``."""
    for response in list(inflight):
        response.content.set_exception(aiohttp.ClientConnectionError("closed by its owner"))
        response.close()
