"""The skeleton every HTTP backend shares: one session, one closed state, one turn, one pump.

:class:`HTTPProvider` owns everything a backend does with the network, so a
fix made here holds for every backend at once:

* the session: one ``aiohttp`` session per provider, made on the first turn
  (with the codec's :meth:`~Codec.session_headers` and the package's
  User-Agent, see :data:`vaelii_llm._transport.USER_AGENT`), made again if
  something closed it, shared by any number of concurrent turns;
* the closed state: after :meth:`~HTTPProvider.aclose` every turn, streamed
  or not, raises :class:`~vaelii_llm.errors.LLMClosed`, also a turn that was
  waiting for its headers (a credential lookup) or in flight when the close
  came (the far end's cut chained as its cause); closing twice is harmless;
* the non-streamed turn (:meth:`~HTTPProvider.complete`): one POST under the
  request's whole-turn deadline, its 200 decoded by the codec's typed decoder;
* the stream pump (:meth:`~HTTPProvider.stream`): the body's bytes into the
  codec's wire decoder, its batches into the codec's assembler, every item
  the assembler hands back yielded at once; at the terminal event what
  follows is drained for at most :data:`DRAIN_S` (the answer is whole,
  so nothing there may delay or spoil it); a body that ends first has the
  decoder's end-of-stream batch fed, then the assembler's verdict.

What a new backend supplies is a :class:`Codec`, no I/O in it:

``endpoint``, ``url``
    how the far end is named in messages and where turns are POSTed;
``session_headers()``
    headers sent on every request of the session (an API version, a gateway's
    own headers);
``body(request, stream=...)``
    the request's bytes (raising :class:`~vaelii_llm.errors.LLMEncode` for a
    block the wire has no shape for);
``async headers(request, stream=...)``
    the turn's own headers (a credential, ``accept``, a beta list), or None;
``whole_decoder`` and ``whole(parsed)``
    the typed msgspec decoder for a non-streamed 200 and the
    :class:`~vaelii_llm._protocol.Response` built from what it decoded;
``stream_decoder()`` and ``assembler(deltas=...)``
    a fresh sans-IO wire decoder (``feed(bytes)`` returns a batch;
    ``feed(b"")`` marks the end) and a fresh :class:`Assembler` for one turn.

Every assembler speaks the same four words: ``feed(item)`` applies one
decoded item and returns what it completed; ``feed_batch(batch)`` does the
same for a decoder's whole batch, yielding as it goes (the streamed path,
where a backend keeps its fast loop); ``finished`` says the terminal event
has arrived; ``result()`` is the final Response, or the refusal of a stream
cut short. With ``deltas=True`` an assembler also hands back
:data:`~vaelii_llm._protocol.Delta` items before the block they belong to.

A vendor module imports no HTTP library: it subclasses :class:`HTTPProvider`
with its codec, and its probes go through :mod:`vaelii_llm._transport`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Final, Generic, Protocol, TypeVar

import aiohttp
import msgspec

from vaelii_llm import _transport as transport
from vaelii_llm._protocol import ProviderBase, Request, Response, StreamItem
from vaelii_llm.errors import LLMClosed, LLMError

__all__ = ["DRAIN_S", "Assembler", "Codec", "HTTPProvider", "WireDecoder"]

DRAIN_S: Final = 0.05
"""How long a stream may take to end after its terminal event before its
connection is closed rather than reused: every backend's far end ends it at
once, and the answer is already whole."""

W = TypeVar("W")
"""What a non-streamed 200 decodes to."""
B = TypeVar("B")
"""What a wire decoder hands over for one chunk of a stream."""
B_co = TypeVar("B_co", covariant=True)
B_contra = TypeVar("B_contra", contravariant=True)


class WireDecoder(Protocol[B_co]):
    """A sans-IO stream decoder: bytes in, a batch of decoded items out."""

    def feed(self, data: bytes) -> B_co:
        """The items ``data`` completed; ``b""`` marks the end of the stream."""
        ...


class Assembler(Protocol[B_contra]):
    """Reassembles one streamed turn from its decoder's batches (sans-IO)."""

    @property
    def finished(self) -> bool:
        """Whether the terminal event has arrived."""
        ...

    def feed(self, batch: B_contra) -> Iterable[StreamItem]:
        """What ``batch`` completed (blocks, and deltas when asked for), in order."""
        ...

    def result(self) -> Response:
        """The whole turn; the backend's typed refusal when the stream was cut short."""
        ...


class Codec(Protocol[W, B]):
    """What a backend supplies: its wire, and no I/O (see the module docstring)."""

    @property
    def endpoint(self) -> transport.Endpoint: ...

    @property
    def url(self) -> str: ...

    @property
    def whole_decoder(self) -> msgspec.json.Decoder[W]: ...

    def session_headers(self) -> Mapping[str, str]: ...

    def body(self, request: Request, *, stream: bool) -> bytes: ...

    async def headers(self, request: Request, *, stream: bool) -> Mapping[str, str] | None: ...

    def whole(self, parsed: W) -> Response: ...

    def stream_decoder(self) -> WireDecoder[B]: ...

    def assembler(self, *, deltas: bool) -> Assembler[B]: ...


class HTTPProvider(ProviderBase, Generic[W, B]):
    """A provider over one codec; see the module docstring for what it owns.

    ``stream`` releases its HTTP response when the caller stops early;
    iterate it under ``contextlib.aclosing`` so that happens at once.
    """

    def __init__(self, codec: Codec[W, B]) -> None:
        self._codec = codec
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._inflight: set[aiohttp.ClientResponse] = set()  # bodies being read, cut by aclose

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has been called."""
        return self._closed

    def _http(self) -> aiohttp.ClientSession:
        """The provider's session, made on first use (and again if something closed it)."""
        if self._closed:
            raise LLMClosed(self._codec.endpoint.label)
        session = self._session
        if session is None or session.closed:
            session = self._session = transport.create_session(self._codec.session_headers())
        return session

    async def complete(self, request: Request) -> Response:
        """One non-streamed turn under ``request.timeout_ms``, headers and body."""
        codec = self._codec
        if self._closed:
            raise LLMClosed(codec.endpoint.label)
        body = codec.body(request, stream=False)
        headers = await codec.headers(request, stream=False)
        try:
            parsed = await transport.request_json(
                self._http(),
                codec.endpoint,
                "POST",
                codec.url,
                deadline=transport.Deadline.after_ms(request.timeout_ms),
                decoder=codec.whole_decoder,
                body=body,
                headers=headers,
                inflight=self._inflight,
            )
        except LLMError as exc:
            if self._closed:  # the close cut the turn: that is the news, not the cut
                raise LLMClosed(codec.endpoint.label) from exc
            raise
        return codec.whole(parsed)

    async def stream(
        self, request: Request, *, deltas: bool = False
    ) -> AsyncGenerator[StreamItem, None]:
        """Whole blocks as they close (and, with ``deltas``, the deltas before
        them), then the :class:`Response` ``complete`` would return. The
        turn's budget covers every read of the body."""
        codec = self._codec
        if self._closed:
            raise LLMClosed(codec.endpoint.label)
        body = codec.body(request, stream=True)
        headers = await codec.headers(request, stream=True)
        decoder = codec.stream_decoder()
        assembler = codec.assembler(deltas=deltas)
        try:
            async with transport.open_stream(
                self._http(),
                codec.endpoint,
                "POST",
                codec.url,
                deadline=transport.Deadline.after_ms(request.timeout_ms),
                body=body,
                headers=headers,
                inflight=self._inflight,
            ) as chunks:
                async for data in chunks:
                    for item in assembler.feed(decoder.feed(data)):
                        yield item
                    if assembler.finished:
                        # The answer is whole: what follows cannot change it, nor
                        # a far end holding the body open make the caller wait.
                        await transport.drain(chunks, DRAIN_S)
                        break
        except LLMError as exc:
            if self._closed:  # the close cut the turn: that is the news, not the cut
                raise LLMClosed(codec.endpoint.label) from exc
            raise
        if not assembler.finished:
            for item in assembler.feed(decoder.feed(b"")):
                yield item
        yield assembler.result()

    async def aclose(self) -> None:
        """Close the session; every turn, those in flight included, raises
        LLMClosed. Closing twice is harmless."""
        self._closed = True
        transport.cut(self._inflight)
        session, self._session = self._session, None
        if session is not None:
            await session.close()
