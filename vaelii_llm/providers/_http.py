"""The skeleton every HTTP backend shares: one session, one closed state, one turn, one pump.

:class:`HTTPProvider` owns everything a backend does with the network, so a
fix made here holds for every backend at once:

* the session: one ``aiohttp`` session per provider and running event loop
  (:class:`~vaelii_llm._transport.sessions.LoopSessions`), made on the loop's first
  turn (with the codec's :meth:`~Codec.session_headers`, the package's
  User-Agent, see :data:`vaelii_llm._transport.settings.USER_AGENT`, and the
  provider's :class:`~vaelii_llm._transport.settings.Network`: proxy, TLS, connection
  cap), closed with its loop or by ``aclose`` from any loop, shared by any
  number of concurrent turns; or the caller's own session (``session=``),
  which every turn uses with the codec's session headers sent per request,
  and which is never closed here;
* the closed state: after :meth:`~HTTPProvider.aclose` every turn, streamed
  or not, raises :class:`~vaelii_llm.errors.LLMClosed`, also a turn that was
  waiting for its credential or in flight when the close came (the far
  end's cut chained as its cause); closing twice is harmless;
* the credential step: a backend whose credential may take I/O to find (a
  CLI, a token endpoint) hands the skeleton a :class:`Credentials`, awaited
  before a turn's headers are built; what it finds is kept, concurrent first
  turns share one lookup, and a turn cancelled while it waits cancels that
  lookup (whose own cleanup, a child process killed and reaped, runs then);
* the non-streamed turn (:meth:`~HTTPProvider.complete`): one POST under the
  request's whole-turn deadline, its 200 decoded by the codec's typed decoder;
* the stream pump (:meth:`~HTTPProvider.stream`): the body's bytes into the
  codec's wire decoder, its batches into the codec's assembler, every item
  the assembler hands back yielded at once; a chunk that moved the
  assembler's :attr:`~Assembler.pieces` is content (anything else a
  keep-alive): it restarts the request's ``stall_ms`` and times the
  Response's ``first_chunk_ms`` and ``longest_gap_ms``; at the terminal event what
  follows is drained for at most :data:`DRAIN_S` (the answer is whole,
  so nothing there may delay or spoil it); a body that ends first has the
  decoder's end-of-stream batch fed, then the assembler's verdict.
* the credentials kept out of failures: every
  :class:`~vaelii_llm.errors.LLMError` a turn raises, the codec's own (an
  ``error`` event, a body that would not decode) as well as the transport's,
  has what the turn sent withheld from its text, attributes and chain
  (:func:`vaelii_llm._transport.withheld.withhold`) before a caller, a log line or a
  span sees it;
* the token count (:meth:`~HTTPProvider.count_tokens`): for a codec that
  is also a :class:`TokenCounter`, one POST to its counting endpoint by the
  same path as a non-streamed turn (the credential step, the deadline, the
  refusals); for any other, :class:`~vaelii_llm.errors.LLMUnsupported`.

The turn's code here knows nothing of spans: selection and the vote pools
wrap a provider they hand out while telemetry records (:mod:`vaelii_llm._handout`).

What a new backend supplies is a :class:`Codec`, no I/O in it:

``endpoint``, ``url``, ``model``
    how the far end is named in messages, where turns are POSTed, and the
    model a request naming none runs;
``session_headers()``
    headers sent on every request of the session (an API version, a gateway's
    own headers);
``body(request, stream=...)``
    the request's bytes (raising :class:`~vaelii_llm.errors.LLMEncode` for a
    block the wire has no shape for);
``headers(request, stream=..., credential=...)``
    the turn's own headers (the credential the step found, ``accept``, a beta
    list), or None; ``credential`` is None for a backend with no step;
``whole_decoder`` and ``whole(parsed)``
    the typed msgspec decoder for a non-streamed 200 and the
    :class:`~vaelii_llm._protocol.Response` built from what it decoded;
``stream_decoder()`` and ``assembler(deltas=...)``
    a fresh sans-IO wire decoder (``feed(bytes)`` returns a batch;
    ``feed(b"")`` marks the end) and a fresh :class:`Assembler` for one turn;
``count_url``, ``count_body``, ``count_headers``, ``count_of`` (optional)
    a far end that counts tokens: the codec is then a :class:`TokenCounter`.

Every assembler speaks the same three words: ``feed(batch)`` applies a
decoder's whole batch and hands back what it completed, in order, as it goes
(what came before a refused item is handed over before the refusal);
``finished`` says the terminal event has arrived; ``result()`` is the final
Response, or the refusal of a stream cut short. With ``deltas=True`` an
assembler also hands back :data:`~vaelii_llm._protocol.Delta` items before
the block they belong to.

A vendor module imports no HTTP library: it subclasses :class:`HTTPProvider`
with its codec, and its probes go through :mod:`vaelii_llm._transport`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import Generic
from typing import Protocol
from typing import TypedDict
from typing import TypeVar
from typing import runtime_checkable

import aiohttp
import msgspec

from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import StreamItem
from vaelii_llm._protocol import Usage
from vaelii_llm._protocol import usage_fault
from vaelii_llm._streams import Hold
from vaelii_llm._streams import Stream
from vaelii_llm._transport.send import cut
from vaelii_llm._transport.send import drain
from vaelii_llm._transport.send import open_stream
from vaelii_llm._transport.send import request_json
from vaelii_llm._transport.sessions import Gate
from vaelii_llm._transport.sessions import LoopSessions
from vaelii_llm._transport.sessions import create_session
from vaelii_llm._transport.sessions import on_running_loop
from vaelii_llm._transport.settings import DEFAULT_NETWORK
from vaelii_llm._transport.settings import NO_HEADERS
from vaelii_llm._transport.settings import USER_AGENT
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.settings import Network
from vaelii_llm._transport.settings import SSLOption
from vaelii_llm._transport.settings import checked_headers
from vaelii_llm._transport.withheld import sent_rule
from vaelii_llm._transport.withheld import withhold
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.errors import LLMClosed
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.errors import LLMUnsupported

__all__ = [
    "DRAIN_S",
    "Assembler",
    "ClientSession",
    "Codec",
    "Credentials",
    "HTTPProvider",
    "NetworkOptions",
    "SSLOption",
    "Stream",
    "TokenCounter",
    "WireDecoder",
    "network",
]

ClientSession = aiohttp.ClientSession
"""What ``session=`` takes (named here so a backend imports no HTTP library)."""


class NetworkOptions(TypedDict, total=False):
    """How every HTTP backend's provider reaches its far end, the same four
    options on each (see :class:`~vaelii_llm._transport.settings.Network`): ``proxy``
    (unset: ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``), ``ssl`` (unset:
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``, else the system's CAs),
    ``max_connections`` (unset:
    :data:`~vaelii_llm._transport.settings.DEFAULT_MAX_CONNECTIONS`, reused; ``0``: no
    bound) and ``session`` (a caller's own, never closed here)."""

    proxy: str | None
    ssl: SSLOption
    max_connections: int | None
    session: ClientSession | None


NETWORK_KEYS: Final = frozenset(NetworkOptions.__annotations__)


def network(options: Mapping[str, Any]) -> Network:
    """The :class:`~vaelii_llm._transport.settings.Network` the network keys of
    ``options`` describe (the shared default when none is set)."""
    given = {key: options[key] for key in NETWORK_KEYS if options.get(key) is not None}
    return Network(**given) if given else DEFAULT_NETWORK


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
C = TypeVar("C")
"""What a credential step finds."""
R = TypeVar("R")
"""What one POST's reader makes of its JSON body (a Response, a count)."""


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

    @property
    def pieces(self) -> int:
        """Content taken so far, counted in the wire's own pieces (text,
        thinking, tool input, the terminal event); a keep-alive adds nothing.
        The pump reads it after each chunk: a change is content arriving,
        which restarts the request's ``stall_ms`` and times the gaps."""
        ...

    def result(self) -> Response:
        """The whole turn; the backend's typed refusal when the stream was cut short."""
        ...


class Codec(Protocol[W, B]):
    """What a backend supplies: its wire, and no I/O (see the module docstring).

    A codec may also define ``settle(response, request) -> Response``: the
    turn read again in the light of the request it answered (a far end whose
    status word cannot say the answer was cut), on both paths alike."""

    @property
    def endpoint(self) -> Endpoint: ...

    @property
    def url(self) -> str: ...

    @property
    def model(self) -> str | None: ...

    @property
    def whole_decoder(self) -> msgspec.json.Decoder[W]: ...

    def session_headers(self) -> Mapping[str, str]: ...

    def body(self, request: Request, *, stream: bool) -> bytes: ...

    def headers(
        self, request: Request, *, stream: bool, credential: Any
    ) -> Mapping[str, str] | None: ...

    def whole(self, parsed: W) -> Response: ...

    def stream_decoder(self) -> WireDecoder[B]: ...

    def assembler(self, *, deltas: bool) -> Assembler[B]: ...


class SessionHeadersOnly:
    """What a codec inherits whose every header is its session's, held in
    ``_headers`` (a key, if any, among them): a turn adds none of its own,
    there being no credential step."""

    __slots__ = ()
    _headers: Mapping[str, str]

    def session_headers(self) -> Mapping[str, str]:
        return self._headers

    def headers(self, request: Request, *, stream: bool, credential: None) -> None:
        return None


@runtime_checkable
class TokenCounter(Protocol):
    """What a codec whose far end counts tokens adds (no I/O): where a count
    is POSTed, its body and headers (by the turn's rules), and the count read
    from the decoded 200 (its typed refusal for an answer holding none)."""

    @property
    def count_url(self) -> str: ...

    def count_body(self, request: Request) -> bytes: ...

    def count_headers(self, request: Request, *, credential: Any) -> Mapping[str, str] | None: ...

    def count_of(self, parsed: Any) -> int: ...


_ANY_JSON: Final = msgspec.json.Decoder()


class Credentials(Generic[C]):
    """The credential step: ``lookup`` run when a turn needs what it finds.

    What a lookup finds is kept (``found``, given at once when the backend
    built its provider with one). Concurrent turns share one lookup: those
    waiting on it get what it found, or the :class:`~vaelii_llm.errors.LLMError`
    it raised (the next turn then looks again). A turn cancelled while its
    lookup runs cancels it; a turn waiting on another's lookup is not held
    by that one's cancellation, it runs its own. The value is the backend's
    secret: nothing here logs or shows it.
    """

    __slots__ = ("_failed", "_locks", "_lookup", "found")

    def __init__(self, lookup: Callable[[], Awaitable[C]], found: C | None = None) -> None:
        self._lookup = lookup
        # One lock per event loop: a lock waited on binds to its loop.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._failed: tuple[int, LLMError | None] = (0, None)  # failures so far, the last one
        self.found = found

    def __repr__(self) -> str:
        return f"Credentials(found={self.found is not None})"

    async def get(self) -> C:
        """What the lookup found, running it (once for all who wait) when nothing is kept."""
        found = self.found
        if found is not None:
            return found
        failures = self._failed[0]
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        async with lock:
            found = self.found
            if found is not None:
                return found
            count, failure = self._failed
            if count != failures and failure is not None:
                raise failure  # the lookup this turn waited on failed
            try:
                found = self.found = await self._lookup()
            except LLMError as exc:
                self._failed = (count + 1, exc)
                raise
            return found


class HTTPProvider(ProviderBase, Generic[W, B]):
    """A provider over one codec; see the module docstring for what it owns.

    ``stream`` releases its HTTP response when the caller stops early;
    iterate it under ``contextlib.aclosing`` so that happens at once.
    """

    def __init__(
        self,
        codec: Codec[W, B],
        credentials: Credentials[Any] | None = None,
        network: Network = DEFAULT_NETWORK,
    ) -> None:
        self._codec = codec
        self._credentials = credentials
        self._network = network
        self._sessions = LoopSessions(
            lambda: create_session(codec.session_headers(), network, codec.url, gated=True),
            network.max_connections,
        )
        self._shared_headers: Mapping[str, str] | None = None  # on a caller's session
        self._closed = False
        self._inflight: set[aiohttp.ClientResponse] = set()  # bodies being read, cut by aclose
        self._shown_rules: dict[tuple[Any, ...], Callable[[str], str]] = {}  # _header_rule's
        self._settle: Callable[[Response, Request], Response] | None = getattr(
            codec, "settle", None
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has been called."""
        return self._closed

    def _http(self) -> tuple[aiohttp.ClientSession, Gate | None]:
        """The running loop's session and the gate its turns take a connection
        from, made on first use in the loop (and again if something closed
        it), or the caller's own (its own pool, no gate)."""
        if self._closed:
            raise LLMClosed(self._codec.endpoint.label)
        own = self._network.session
        if own is None:
            return self._sessions.reach()
        if own.closed or own.connector is None:
            raise LLMUnreachable(self._codec.endpoint.label, "the caller's session is closed")
        if not on_running_loop(own):
            raise LLMUnreachable(
                self._codec.endpoint.label, "the caller's session belongs to another event loop"
            )
        return own, None

    def _headers(self, turn: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """A turn's headers: as the codec gave them on the provider's own
        session (which carries the session headers); on a caller's session,
        the codec's session headers (and the User-Agent, unless that session
        names one) under them."""
        own = self._network.session
        if own is None:
            return turn
        shared = self._shared_headers
        if shared is None:
            base = {} if "User-Agent" in own.headers else {"User-Agent": USER_AGENT}
            base.update(self._codec.session_headers())
            shared = self._shared_headers = checked_headers(base)
        if not turn:
            return shared
        return {**shared, **turn}

    def _header_rule(
        self, session: aiohttp.ClientSession, headers: Mapping[str, str] | None, url: str
    ) -> Callable[[str], str]:
        """What withholds the credentials a turn sent from the headers its 200
        hands on: made once for each session, headers and URL the provider's
        turns use (a turn repeats them), so a small turn does not pay for it."""
        key = (session, None if headers is None else tuple(headers.items()), url)
        rule = self._shown_rules.get(key)
        if rule is None:
            if len(self._shown_rules) >= _SHOWN_RULES_KEPT:
                self._shown_rules.clear()
            rule = self._shown_rules[key] = sent_rule(session, headers, url)
        return rule

    async def _credential(self) -> Any:
        """The credential step's answer (None with no step); LLMClosed when
        the provider closed while the turn waited for it."""
        step = self._credentials
        if step is None:
            return None
        found = step.found
        if found is None:
            found = await step.get()
            if self._closed:
                raise LLMClosed(self._codec.endpoint.label)
        return found

    async def complete(self, request: Request) -> Response:
        """One non-streamed turn under ``request.timeout_ms``, headers and body."""
        codec = self._codec
        body = self._body(request, stream=False)
        credential = None if self._credentials is None else await self._credential()
        headers = self._turn_headers(request, credential, stream=False)
        result = await self._post(
            codec.url, body, headers, request, codec.whole_decoder, codec.whole
        )
        return result if self._settle is None else self._settle(result, request)

    def _body(self, request: Request, *, stream: bool) -> bytes:
        """A turn's body, made in the turn's own coroutine before its credential
        is awaited (no coroutine of its own per turn); LLMClosed when the
        provider is closed."""
        if self._closed:
            raise LLMClosed(self._codec.endpoint.label)
        return self._codec.body(request, stream=stream)

    def _turn_headers(
        self, request: Request, credential: Any, *, stream: bool
    ) -> Mapping[str, str] | None:
        """A turn's headers, given its credential (None with no credential step)."""
        return self._headers(self._codec.headers(request, stream=stream, credential=credential))

    async def _post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str] | None,
        request: Request,
        decoder: msgspec.json.Decoder[Any],
        finish: Callable[[Any], R],
    ) -> R:
        """One POST answered by one JSON body, read by ``finish``, under the
        request's whole-turn deadline; a cut by :meth:`aclose` is LLMClosed,
        and every failure, ``finish``'s own included, has the credentials
        withheld."""
        codec = self._codec
        session, gate = self._http()
        seen: list[Mapping[str, str]] | None = None if codec.endpoint.headers is NO_HEADERS else []
        try:
            parsed = await request_json(
                session,
                codec.endpoint,
                "POST",
                url,
                deadline=Deadline.after_ms(request.timeout_ms, request.stall_ms),
                decoder=decoder,
                body=body,
                headers=headers,
                inflight=self._inflight,
                gate=gate,
                seen=seen,
            )
            result = finish(parsed)
            if isinstance(result, Response):
                _check_usage(result, codec.endpoint)
            if seen and isinstance(result, Response):
                shown = self._header_rule(session, headers, url)
                return _with_headers(result, codec.endpoint, seen[0], shown)  # type: ignore[return-value]
            return result
        except LLMError as exc:
            _answered_in(exc, codec.endpoint, seen[0] if seen else None)
            withhold(exc, session, headers, url)  # the answer's headers too
            if self._closed:  # the close cut the turn: that is the news, not the cut
                raise LLMClosed(codec.endpoint.label) from exc
            raise

    async def count_tokens(self, request: Request) -> int:
        """The input tokens ``request`` would take, counted by the far end's
        counting endpoint under ``request.timeout_ms``, refused as a turn
        would be; :class:`~vaelii_llm.errors.LLMUnsupported` (nothing sent)
        where the far end has none."""
        codec = self._codec
        if not isinstance(codec, TokenCounter):
            raise LLMUnsupported(codec.endpoint.label, "counting tokens")
        if self._closed:
            raise LLMClosed(codec.endpoint.label)
        body = codec.count_body(request)
        headers = self._headers(
            codec.count_headers(
                request,
                credential=None if self._credentials is None else await self._credential(),
            )
        )
        count = await self._post(codec.count_url, body, headers, request, _ANY_JSON, codec.count_of)
        fault = usage_fault(Usage(input_tokens=count))  # the bound a turn's counts have
        if fault is not None:
            raise LLMBadResponse(codec.endpoint.label, fault)
        return count

    def stream(self, request: Request, *, deltas: bool = False) -> AsyncGenerator[StreamItem, None]:
        """Whole blocks as they close (and, with ``deltas``, the deltas before
        them), then the :class:`Response` ``complete`` would return. The
        turn's budget covers every read of the body. Any task may close it
        (see :class:`~vaelii_llm._streams.Stream`)."""
        hold = Hold()
        return Stream(self._stream(request, deltas=deltas, hold=hold), hold)

    async def _stream(
        self, request: Request, *, deltas: bool, hold: Hold
    ) -> AsyncGenerator[StreamItem, None]:
        hold.reading()
        try:
            codec = self._codec
            body = self._body(request, stream=True)
            credential = None if self._credentials is None else await self._credential()
            headers = self._turn_headers(request, credential, stream=True)
            session, gate = self._http()
            answer: Mapping[str, str] | None = None
            stalling = request.stall_ms is not None
            try:
                async with open_stream(
                    session,
                    codec.endpoint,
                    "POST",
                    codec.url,
                    deadline=Deadline.after_ms(request.timeout_ms, request.stall_ms),
                    body=body,
                    headers=headers,
                    inflight=self._inflight,
                    gate=gate,
                ) as chunks:
                    answer = chunks.headers
                    # made once the connection is had: a turn waiting for one holds less
                    decoder = codec.stream_decoder()
                    assembler = codec.assembler(deltas=deltas)
                    pace = _Pace(chunks.sent)
                    async for data in chunks:
                        arrived = chunks.arrived
                        for item in assembler.feed(decoder.feed(data)):
                            yield item
                            hold.reading()
                        pieces = assembler.pieces
                        if pieces != pace.seen:  # content came, not only keep-alives
                            pace.came(pieces, arrived)
                            if stalling:
                                chunks.fresh(pieces, arrived)
                        if assembler.finished:
                            # The answer is whole: what follows cannot change it, nor
                            # a far end holding the body open make the caller wait.
                            await drain(chunks, DRAIN_S)
                            break
                if not assembler.finished:
                    for item in assembler.feed(decoder.feed(b"")):
                        yield item
                        hold.reading()
                result = assembler.result()
                _check_usage(result, codec.endpoint)
                if codec.endpoint.headers is not NO_HEADERS:
                    shown = self._header_rule(session, headers, codec.url)
                    result = _with_headers(result, codec.endpoint, chunks.headers, shown)
                result = pace.shown(result)
                if self._settle is not None:
                    result = self._settle(result, request)
            except LLMError as exc:
                _answered_in(exc, codec.endpoint, answer)
                withhold(exc, session, headers, codec.url)  # the answer's headers too
                if self._closed:  # the close cut the turn: that is the news, not the cut
                    raise LLMClosed(codec.endpoint.label) from exc
                raise
            yield result
        except asyncio.CancelledError:
            # ended by Stream.aclose from another task (and no cancellation of the reader's)
            if not hold.closed or hold.take_back():
                raise
        finally:
            hold.ended()

    async def aclose(self) -> None:
        """Close the provider's sessions, on every loop it was used from (a
        caller's own session stays open); every turn, those in flight
        included, raises LLMClosed. Closing twice is harmless."""
        self._closed = True
        cut(self._inflight)
        await self._sessions.aclose()


class _Pace:
    """When a stream's content came: the Response's ``first_chunk_ms`` (from
    the request sent) and ``longest_gap_ms`` (between content chunks)."""

    __slots__ = ("first", "gap", "last", "seen")

    def __init__(self, sent: float) -> None:
        self.last = sent
        self.first = self.gap = -1.0
        self.seen = 0  # the assembler's pieces when content last came

    def came(self, pieces: int, arrived: float) -> None:
        self.seen = pieces
        waited = arrived - self.last
        if self.first < 0:
            self.first = waited
        elif waited > self.gap:
            self.gap = waited
        self.last = arrived

    def shown(self, response: Response) -> Response:
        if self.first < 0:
            return response
        gap = self.gap * 1000 if self.gap >= 0 else None
        return msgspec.structs.replace(
            response, first_chunk_ms=self.first * 1000, longest_gap_ms=gap
        )


_SHOWN_RULES_KEPT: Final = 8
"""Rules :meth:`HTTPProvider._header_rule` keeps: one per loop's session and
credential in use; past it they are made afresh."""


def _check_usage(response: Response, endpoint: Endpoint) -> None:
    """A turn whose far end reported a count below zero or past any context
    window is LLMBadResponse: budgets that sum counts must be able to trust them."""
    fault = usage_fault(response.usage)
    if fault is not None:
        raise LLMBadResponse(endpoint.label, fault)


def _answered_in(exc: LLMError, endpoint: Endpoint, raw: Mapping[str, str] | None) -> None:
    """An error the far end sent inside a 2xx answer (an ``error`` body or
    event, read by the codec) carries that answer's request id and
    allow-listed headers, as an error status does."""
    if raw is None or not isinstance(exc, LLMApiError) or exc.request_id or exc.headers:
        return
    exc.request_id, exc.headers = endpoint.headers.read(raw)


def _with_headers(
    response: Response, endpoint: Endpoint, raw: Mapping[str, str], shown: Callable[[str], str]
) -> Response:
    """``response`` with the request id and the allow-listed headers of
    ``raw``, what the turn sent withheld by ``shown``."""
    request_id, kept = endpoint.headers.read(raw, shown)
    return msgspec.structs.replace(response, request_id=request_id, headers=kept or None)
