"""The one transport: client sessions, whole-turn deadlines and typed failures, on aiohttp.

Every turn and probe of every HTTP backend goes through :func:`send_request`
(or :func:`request_json` / :func:`open_stream` above it). This module parses no
vendor format: a backend pumps its bytes into a :mod:`vaelii_llm._wire` decoder
or through :func:`decode_json` with its own typed decoder.

Deadlines. A turn has one absolute :class:`Deadline`, computed once from its
``timeout_ms``. Waiting for the response headers and every read of the body
happen under :func:`vaelii_llm._timers.timeout_at` (``asyncio.timeout_at``'s
behaviour on one loop timer shared by every turn), so a far end that drips a
byte a second, or sends SSE pings forever, ends in :class:`LLMTimeout` when the
budget is spent. aiohttp's own read timers are off: ``sock_read`` restarts on
every chunk, so it never fires on a drip. Connecting has its own fixed bound,
:data:`CONNECT_TIMEOUT_MS`, whatever the turn allows: a turn may rightly run for
minutes, a connection completes in well under a second or not at all. A probe
passes a short deadline and is bounded by it, connection included.

What each failure becomes (the original is chained as ``__cause__``, but for an invalid URL):

==========================================================  ===================
failure                                                     raised
==========================================================  ===================
the deadline passes before the headers arrive               LLMTimeout
the deadline passes while the body is read or streamed      LLMTimeout
refused, reset or closed before the headers, unresolved     LLMUnreachable
no connection inside CONNECT_TIMEOUT_MS; an invalid URL     LLMUnreachable
(not chained: an invalid URL's text may hold a password)
a request aiohttp refuses to build (credentials both in the
URL and in an Authorization header)                         LLMUnreachable
any other OSError or aiohttp connection error before them   LLMUnreachable
a malformed HTTP head, or a malformed first chunk size       LLMBadResponse
a non-2xx status (429 and 529 included)                     LLMApiError
the body cut short: a reset, a close, a truncated chunked   LLMBadResponse
encoding or a short Content-Length after the headers
a body over the cap (announced or counted)                  LLMBadResponse
a 200 whose body will not decode into the caller's type     LLMBadResponse
a header value holding a control character, or a name
that is no HTTP token                                       LLMBadCredential
==========================================================  ===================

A body cut short after the headers is a bad response, not an unreachable
host: the far end was reached and began to answer, and a proxy in front of it
turns an upstream reset into a cleanly ended chunked body, so a caller could
not tell the two apart anyway. A stream that ends cleanly but without its
terminal event is the same refusal, raised by the backend that knows which
event that is. ``err.text`` holds what was read before the cut (the streamed
path hands its bytes to the caller as they come and keeps none of them).
A read its owner ends with :func:`cut` (a provider's ``aclose``) fails the
same way; the owner then reports its own refusal.

When the deadline is spent, whatever failure the expiry caused becomes
:class:`LLMTimeout`; with the deadline unspent the failure is mapped as above
and nothing else. A cancellation of the awaiting task is never turned into a
typed error: it propagates as ``CancelledError``, and the response is closed.

Nothing here retries, backs off, sleeps or reads ``retry-after``; redirects
are not followed (a 3xx is an :class:`LLMApiError`, and a credential header
never travels to a host the caller did not name). Header values are never
logged or put in a message: a value with a control character is refused as
:class:`LLMBadCredential` naming only the header.
"""

from __future__ import annotations

import asyncio
import re
import sys
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Final, TypeVar

import aiohttp
import msgspec
from multidict import CIMultiDict, CIMultiDictProxy

from vaelii_llm import __version__
from vaelii_llm import _timers as timers
from vaelii_llm.errors import (
    LLMApiError,
    LLMBadCredential,
    LLMBadResponse,
    LLMError,
    LLMTimeout,
    LLMUnreachable,
    excerpt,
)

__all__ = [
    "CONNECT_TIMEOUT_MS",
    "DEFAULT_MAX_BODY_BYTES",
    "USER_AGENT",
    "Deadline",
    "Endpoint",
    "checked_headers",
    "create_session",
    "cut",
    "decode_json",
    "drain",
    "open_stream",
    "probe_session",
    "read_body",
    "request_json",
    "send_request",
]

T = TypeVar("T")

CONNECT_TIMEOUT_MS: Final = 5_000
"""How long obtaining a connection may take (DNS, TCP, TLS), whatever the turn allows."""

DEFAULT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
"""The largest whole body read into memory. A final message is a few MiB at
most; anything larger is a proxy's or a broken server's doing."""

USER_AGENT: Final = "vaelii-llm/{} Python/{}.{}.{}".format(__version__, *sys.version_info[:3])
"""Sent on every request of every session (turns and probes), so the far end
can tell which client spoke; a caller's own ``User-Agent`` header wins."""

_OPENING: Final = 64 * 1024
"""How much of a body over the cap the error keeps (the rest was never read)."""

_BAD_HEADER_CHARS: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
"""What no header value may hold: C0 (tab aside), DEL, C1 and the Unicode line
and paragraph separators, which aiohttp would quote back in its own error."""
_BAD_HEADER_NAME: Final = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
"""A header name is an RFC 9110 token; anything else (a colon, a space) is refused."""
_URL_ERRORS: Final = (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Names the far end: ``label`` in every message, ``slug`` as a short id."""

    label: str
    slug: str


class Deadline(msgspec.Struct, frozen=True, gc=False):
    """An absolute point on the running loop's clock, and the budget it was made from.

    One per turn: the headers, the body and every streamed chunk are read
    before ``when``; nothing re-arms it. ``timeout_ms`` is what
    :class:`LLMTimeout` reports.
    """

    timeout_ms: int
    when: float

    @classmethod
    def after_ms(cls, timeout_ms: int) -> Deadline:
        """The deadline ``timeout_ms`` from now on the running loop's clock."""
        return cls(timeout_ms, asyncio.get_running_loop().time() + timeout_ms / 1000)

    def remaining(self) -> float:
        """Seconds left (zero or negative once passed)."""
        return self.when - asyncio.get_running_loop().time()


def _check_headers(headers: Mapping[str, str] | None) -> None:
    """Refuse a header an HTTP request cannot carry, naming it and never its value.

    Every turn sends its headers, so they first get a quicker check that only
    lets through what the rule allows: names of letters, digits and hyphens
    (token characters), values with nothing unprintable (every character the
    rule refuses is unprintable). Anything else, a tab in a value included,
    is checked by the rule itself, one header at a time, naming the first bad
    one.
    """
    if not headers or type(headers) is _CheckedHeaders:
        return
    names = "".join(headers)
    if (
        "" not in headers
        and names.isascii()
        and names.replace("-", "").isalnum()
        and " ".join(headers.values()).isprintable()
    ):
        return
    for name, value in headers.items():
        if not name or _BAD_HEADER_NAME.search(name) or _BAD_HEADER_CHARS.search(value):
            raise LLMBadCredential(name)


class _CheckedHeaders(CIMultiDictProxy[str]):
    """Headers :func:`checked_headers` has checked: immutable, so never checked again."""


def checked_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` checked now, for a caller that sends the same ones on many
    requests (a backend's turn headers): the requests do not check them again,
    nor does aiohttp copy them into its own type first. A bad one is refused
    here, as a request would refuse it."""
    _check_headers(headers)
    return _CheckedHeaders(CIMultiDict(headers))


def create_session(headers: Mapping[str, str] | None = None) -> aiohttp.ClientSession:
    """A new client session for a provider to own (and close in its ``aclose``).

    ``headers`` are sent on every request (a gateway's or proxy's extra headers,
    a credential), with :data:`USER_AGENT` unless they name their own.
    Connecting is bounded by :data:`CONNECT_TIMEOUT_MS`; there is
    no total or per-read timeout, since the turn's :class:`Deadline` is the only
    clock. The pool has no size cap, so waiting for a free connection never
    counts against the connect bound: the caller's own concurrency (the vote
    pool's tokens) is the cap. Must be called with a loop running.
    """
    _check_headers(headers)
    sent = dict(headers) if headers else {}
    if not any(name.lower() == "user-agent" for name in sent):
        sent["User-Agent"] = USER_AGENT
    return aiohttp.ClientSession(
        headers=sent,
        timeout=aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_MS / 1000, sock_read=None, sock_connect=None
        ),
        connector=aiohttp.TCPConnector(limit=0),
    )


_probe_sessions: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncGenerator[None, None]]
] = weakref.WeakKeyDictionary()


async def _close_at_loop_shutdown(
    loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession
) -> AsyncGenerator[None, None]:
    """Suspended for the loop's life; ``shutdown_asyncgens()`` closes it, closing
    the session and dropping the loop's entry (the session refers to its loop,
    so the weak key alone would never let the entry go)."""
    try:
        yield
    finally:
        held = _probe_sessions.get(loop)
        if held is not None and held[0] is session:
            del _probe_sessions[loop]
        await session.close()


def probe_session() -> aiohttp.ClientSession:
    """The running loop's shared probe session, created on first use.

    A session is bound to the loop it was made on, so there is one per loop
    (held in a map keyed weakly by the loop), never one per probe. It closes
    when its loop shuts down: it is tied to an async generator registered with
    the loop, and ``asyncio.run`` (and ``asyncio.Runner``) finalise every such
    generator before closing the loop. A second ``asyncio.run`` gets a new one.
    A loop closed without ``shutdown_asyncgens`` leaves it unclosed.
    """
    loop = asyncio.get_running_loop()
    held = _probe_sessions.get(loop)
    if held is not None and not held[0].closed:
        return held[0]
    session = create_session()
    closer = _close_at_loop_shutdown(loop, session)
    # The generator's first step awaits nothing, so it completes synchronously;
    # starting it calls the loop's first-iteration hook, which registers it for
    # shutdown_asyncgens(). The map keeps it alive until the loop is gone.
    with suppress(StopIteration):
        closer.asend(None).send(None)
    _probe_sessions[loop] = (session, closer)
    return session


def _unreachable(exc: BaseException, endpoint: Endpoint) -> LLMError:
    """The typed error for a failure before the response headers arrived."""
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return LLMUnreachable(endpoint.label, f"no connection inside {CONNECT_TIMEOUT_MS} ms")
    if isinstance(exc, _URL_ERRORS):  # their text is the URL, which may hold a password
        return LLMUnreachable(endpoint.label, "the URL is not a valid http(s) URL")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return LLMUnreachable(endpoint.label, f"the host did not resolve ({exc.os_error})")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return LLMUnreachable(endpoint.label, f"could not connect ({exc.os_error})")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return LLMUnreachable(endpoint.label, "closed the connection before answering")
    if isinstance(exc, aiohttp.ClientResponseError):  # the HTTP head would not parse
        detail = excerpt(" ".join(str(exc.message).split()), 120)
        return LLMBadResponse(endpoint.label, f"answered malformed HTTP ({detail})")
    return LLMUnreachable(endpoint.label, f"{type(exc).__name__}: {exc}")


async def send_request(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    method: str,
    url: str,
    *,
    deadline: Deadline,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> aiohttp.ClientResponse:
    """Send one request; return the response once 2xx headers have arrived.

    The caller releases the response (``request_json`` and ``open_stream`` do).
    A ``body`` goes out as ``application/json`` unless a Content-Type (here or
    on the session) says otherwise. A non-2xx status has its body read (under
    the deadline, at most ``max_body_bytes``) and raises :class:`LLMApiError`
    carrying the status and the whole body. Other failures: see the module
    docstring.
    """
    sent = _outgoing(session, headers, body)
    timer = timers.timeout_at(deadline.when)
    try:
        with timer:
            response = await session.request(
                method, url, data=body, headers=sent, allow_redirects=False
            )
    except _URL_ERRORS as exc:
        # Their text (and so any traceback of them) is the URL, which may carry
        # a user:password: the cause is dropped rather than chained.
        raise _unreachable(exc, endpoint) from None
    except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
        if timer.expired():
            raise LLMTimeout(endpoint.label, deadline.timeout_ms) from exc
        raise _unreachable(exc, endpoint) from exc
    except ValueError as exc:  # aiohttp refused to build it; its text quotes no header value
        reason = f"the request could not be sent ({excerpt(str(exc), 120)})"
        raise LLMUnreachable(endpoint.label, reason) from exc
    if 200 <= response.status < 300:
        return response
    status = response.status
    try:
        data = await read_body(response, endpoint, deadline, max_bytes=max_body_bytes)
    except LLMBadResponse as err:  # cut short or over the cap: the status is the news
        raise LLMApiError(endpoint.label, status, err.text) from err
    finally:
        response.release()
    raise LLMApiError(endpoint.label, status, data.decode("utf-8", "replace"))


async def read_body(
    response: aiohttp.ClientResponse,
    endpoint: Endpoint,
    deadline: Deadline,
    *,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> bytes:
    """The whole body, read under the deadline's remaining time.

    A body announced or counted over ``max_bytes`` is refused
    (:class:`LLMBadResponse`, its opening 64 KiB on ``err.text``) without
    reading the rest. On any failure, cancellation included, the response is
    closed, so its connection is never reused.
    """
    label = endpoint.label
    try:
        announced = response.content_length
        if announced is not None and announced > max_bytes:
            raise LLMBadResponse(
                label, f"announced a {announced}-byte body, over the {max_bytes}-byte cap"
            )
        chunks: list[bytes] = []
        size = 0
        timer = timers.timeout_at(deadline.when)
        try:
            with timer:
                while chunk := await response.content.readany():
                    size += len(chunk)
                    if size > max_bytes:
                        chunks.append(chunk)
                        raise LLMBadResponse(
                            label,
                            f"sent a body over the {max_bytes}-byte cap (its opening is kept)",
                            b"".join(chunks)[:_OPENING],
                        )
                    chunks.append(chunk)
        except (aiohttp.ClientError, OSError) as exc:
            if timer.expired():
                raise LLMTimeout(label, deadline.timeout_ms, "body") from exc
            raise LLMBadResponse(
                label,
                f"cut the body short after {size} bytes ({_cut_reason(exc)})",
                b"".join(chunks),
            ) from exc
    except BaseException:
        response.close()
        raise
    return b"".join(chunks)


def _cut_reason(exc: BaseException) -> str:
    """A short account of why a body ended early (the whole story is on ``__cause__``)."""
    return excerpt(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, 160)


def decode_json(data: bytes, endpoint: Endpoint, decoder: msgspec.json.Decoder[T]) -> T:
    """Decode a 200's body with the caller's typed decoder, guarded.

    Whatever the bytes make the parser raise (malformed JSON, the wrong shape,
    invalid UTF-8, ``RecursionError`` from deep nesting, ``MemoryError``)
    becomes :class:`LLMBadResponse`: the excerpt in the message, the whole
    body on ``err.text``.
    """
    try:
        return decoder.decode(data)
    except Exception as exc:
        raise LLMBadResponse(
            endpoint.label,
            f"answered a body that is not the expected JSON ({excerpt(str(exc), 120)})",
            data,
        ) from exc


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
) -> T:
    """Send, read the whole body under the deadline, decode it; the response is always released.

    What :func:`send_request` then :func:`read_body` do, failures mapped the
    same way, under one timer for the headers and the body (the small-turn
    path: one timer, not two, and no header copy when there is nothing to add).
    ``inflight``: a set that holds the response while its body is read, so its
    owner can cut the read (see :func:`cut`).
    """
    sent = _outgoing(session, headers, body)
    label = endpoint.label
    timer = timers.timeout_at(deadline.when)
    response: aiohttp.ClientResponse | None = None
    chunks: list[bytes] = []
    try:
        with timer:
            response = await session.request(
                method, url, data=body, headers=sent, allow_redirects=False
            )
            if inflight is None:
                await _read_into(response, label, chunks, max_body_bytes)
            else:
                inflight.add(response)
                try:
                    await _read_into(response, label, chunks, max_body_bytes)
                finally:
                    inflight.discard(response)
    except _URL_ERRORS as exc:
        raise _unreachable(exc, endpoint) from None  # the URL may hold a password
    except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
        if response is None:
            if timer.expired():
                raise LLMTimeout(label, deadline.timeout_ms) from exc
            raise _unreachable(exc, endpoint) from exc
        response.close()
        if timer.expired():
            raise LLMTimeout(label, deadline.timeout_ms, "body") from exc
        size = sum(map(len, chunks))
        cut = LLMBadResponse(
            label,
            f"cut the body short after {size} bytes ({_cut_reason(exc)})",
            b"".join(chunks),
        )
        if 200 <= response.status < 300:
            raise cut from exc
        raise LLMApiError(label, response.status, cut.text) from cut
    except ValueError as exc:
        if response is not None:
            response.close()
            raise
        reason = f"the request could not be sent ({excerpt(str(exc), 120)})"
        raise LLMUnreachable(label, reason) from exc
    except LLMBadResponse as err:  # over the cap
        assert response is not None
        response.close()
        if 200 <= response.status < 300:
            raise
        raise LLMApiError(label, response.status, err.text) from err
    except BaseException:
        if response is not None:
            response.close()
        raise
    response.release()
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if 200 <= response.status < 300:
        return decode_json(data, endpoint, decoder)
    raise LLMApiError(label, response.status, data.decode("utf-8", "replace"))


def _outgoing(
    session: aiohttp.ClientSession, headers: Mapping[str, str] | None, body: bytes | None
) -> Mapping[str, str] | None:
    """The request's own headers, checked, with a JSON Content-Type for a body
    when neither they nor the session name one (copied only then)."""
    _check_headers(headers)
    if body is None or "Content-Type" in session.headers:
        return headers
    sent: CIMultiDict[str] = CIMultiDict(headers or {})
    if "Content-Type" not in sent:
        sent["Content-Type"] = "application/json"
    return sent


async def _read_into(
    response: aiohttp.ClientResponse, label: str, chunks: list[bytes], max_bytes: int
) -> None:
    """The body's chunks into ``chunks``, refusing one announced or counted
    over ``max_bytes`` (:class:`LLMBadResponse`, its opening kept). The caller
    holds the timer and maps a read failure."""
    announced = response.content_length
    if announced is not None and announced > max_bytes:
        raise LLMBadResponse(
            label, f"announced a {announced}-byte body, over the {max_bytes}-byte cap"
        )
    size = 0
    content = response.content
    while chunk := await content.readany():
        size += len(chunk)
        chunks.append(chunk)
        if size > max_bytes:
            raise LLMBadResponse(
                label,
                f"sent a body over the {max_bytes}-byte cap (its opening is kept)",
                b"".join(chunks)[:_OPENING],
            )


async def _chunks(
    response: aiohttp.ClientResponse, endpoint: Endpoint, deadline: Deadline
) -> AsyncGenerator[bytes, None]:
    """The body's bytes as they arrive, each wait bounded by the deadline.

    Bytes already buffered are taken without a wait (and without entering a
    timer); only an actual wait runs under
    :func:`~vaelii_llm._timers.timeout_at`, which never spans a ``yield``. A
    body that keeps flowing past the deadline is cut too.
    """
    loop = asyncio.get_running_loop()
    content = response.content
    label = endpoint.label
    received = 0
    while True:
        if loop.time() >= deadline.when:  # still flowing, but the turn's budget is spent
            response.close()
            raise LLMTimeout(label, deadline.timeout_ms, "body") from TimeoutError(
                "the deadline passed while the body was still arriving"
            )
        timer = None
        try:
            chunk = content.read_nowait()
            if not chunk:
                timer = timers.timeout_at(deadline.when)
                with timer:
                    chunk = await content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            response.close()
            if timer is not None and timer.expired():
                raise LLMTimeout(label, deadline.timeout_ms, "body") from exc
            raise LLMBadResponse(
                label, f"cut the stream short after {received} bytes ({_cut_reason(exc)})"
            ) from exc
        if not chunk:
            return
        received += len(chunk)
        yield chunk


async def drain(chunks: AsyncIterator[bytes], seconds: float) -> None:
    """Read and discard what follows a stream's terminal event for at most ``seconds``.

    The answer is already whole, so nothing that happens here may lose it:
    the deadline passing, a cut connection or a body that never ends is
    swallowed (the response is then closed rather than reused). Reading the
    body to its end lets its connection go back to the pool. A cancellation
    propagates.
    """
    with suppress(TimeoutError, LLMError):
        async with asyncio.timeout(seconds):
            async for _ in chunks:
                pass


@asynccontextmanager
async def open_stream(
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
) -> AsyncIterator[AsyncIterator[bytes]]:
    """Send a request and hand over its body as an async iterator of chunks.

    ``async with open_stream(...) as chunks: async for chunk in chunks: ...``.
    Each wait for a chunk is bounded by the turn's deadline; expiry closes the
    response and raises :class:`LLMTimeout`, a cut connection raises
    :class:`LLMBadResponse`. Leaving the block in any way (the end of the body,
    an exception, ``break``, cancellation, ``aclose``) releases the response at
    once, closing its connection unless the body was read to its end.
    ``max_body_bytes`` bounds only a non-2xx body, read for :class:`LLMApiError`.
    ``inflight``: a set that holds the response until the block is left, so
    its owner can cut the stream (see :func:`cut`).
    """
    response = await send_request(
        session,
        endpoint,
        method,
        url,
        deadline=deadline,
        body=body,
        headers=headers,
        max_body_bytes=max_body_bytes,
    )
    chunks = _chunks(response, endpoint, deadline)
    if inflight is not None:
        inflight.add(response)
    try:
        yield chunks
    finally:
        if inflight is not None:
            inflight.discard(response)
        try:
            await chunks.aclose()
        finally:
            if response.content.at_eof():
                response.release()
            else:
                response.close()


def cut(inflight: set[aiohttp.ClientResponse]) -> None:
    """End every read of the responses in ``inflight`` at once: each waiting
    read fails as a cut connection would (its caller sees the typed error of a
    body cut short). Closing a session alone does not wake a read in progress:
    it would wait for its deadline. For a provider's ``aclose``."""
    for response in list(inflight):
        response.content.set_exception(aiohttp.ClientConnectionError("closed by its owner"))
        response.close()
