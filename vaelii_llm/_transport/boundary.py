"""The failure boundary: the one place a failure becomes a typed error, and the
one reader of a whole body.

Failures. One boundary, :class:`_Boundary`, is the only place an aiohttp
error, an ``OSError`` or a ``TimeoutError`` becomes an :class:`LLMError`, and
one reader, :func:`_read_whole`, the only place a body is read whole under its
size cap; both paths go through both. What each failure becomes, the original
chained as ``__cause__`` (``tests/transport/test_transport.py`` drives every row):

================  ======================================  ========================================
raised            when                                    why
================  ======================================  ========================================
LLMBadCredential  a header name that is no HTTP token,    a header most often carries a
                  or a value holding a control character  credential: it is named, never shown
LLMUnreachable    an invalid URL                          nothing names a far end; the cause is
                                                          dropped, its text (the URL) may hold a
                                                          password
LLMUnreachable    a request aiohttp will not build (a     nothing was sent, so nothing reached a
                  password in the URL and an              far end
                  Authorization header)
LLMUnreachable    refused, reset or closed before the     no answer began, so none was lost
                  headers
LLMUnreachable    the host does not resolve               no answer began, so none was lost
LLMUnreachable    no connection inside                    a connection is quick or never: a
                  :data:`CONNECT_TIMEOUT_MS`              long turn must not wait on one
LLMTimeout        the deadline passes while the turn      every connection is busy: the far
                  waits for a connection (phase           end was not asked
                  ``connection``)
LLMTimeout        the deadline passes before the headers  one budget per turn, set once
                  (phase ``headers``)
LLMBadResponse    a malformed HTTP head                   the far end answered, but not in HTTP
LLMApiError       a non-2xx status, 3xx, 429 and 529      the far end's own answer, its status
                  included                                and whole body on the error; nothing
                                                          is retried, no redirect followed
LLMApiError       a non-2xx body cut short or over the    the status is the news; what was read
                  cap                                     is its body
LLMTimeout        the deadline passes while the body is   a drip or pings never extend the one
                  read, streamed or still flowing (phase  budget
                  ``body``)
LLMTimeout        no content for the request's            a far end that went quiet (or only
                  ``stall_ms`` (phase ``stall``)          sends keep-alives) ends long before
                                                          the whole budget
LLMBadResponse    the body cut short after the headers    the far end was reached and began to
                  (a reset, a close, a truncated chunked  answer, and a proxy turns an upstream
                  encoding, a short Content-Length, the   reset into a clean end anyway;
                  connection closed under the reader, or  ``err.text`` holds what was read whole
                  its owner's :func:`cut`)
LLMBadResponse    a body over the cap, announced or       larger than any answer: its opening is
                  counted                                 kept, the rest never read
LLMBadResponse    a 2xx body that will not decode into    malformed, the wrong shape or too deep,
                  the caller's type                       the same refusal; the body on
                                                          ``err.text``
CancelledError    the awaiting task is cancelled          the caller asked: never typed, never
                                                          swallowed; the response is closed
================  ======================================  ========================================

Connecting includes a proxy and TLS: a proxy that refuses the connection is
unreachable like a host; a certificate that does not verify (or a failed
handshake) is :class:`LLMUnreachable` naming the host and OpenSSL's reason; a
proxy refusing the tunnel (a 407 to ``CONNECT``) is :class:`LLMUnreachable`
with its cause dropped, since it quotes the proxy's URL, credentials and all
(``tests/docs/test_deploy.py`` drives these).

When the deadline is spent, whatever failure its passing caused (or that came
after it) is :class:`LLMTimeout`; with the deadline unspent a failure is
mapped by the table and nothing else. A stream that ends cleanly but without
its terminal event is a bad response too, raised by the backend that knows
which event that is (the streamed path hands its bytes over as they come and
keeps none of them). A read its owner ends with :func:`cut` (a provider's
``aclose``) fails as a cut body; the owner then reports its own refusal.

"""

from __future__ import annotations

import asyncio
from typing import Final
from typing import TypeVar

import aiohttp
import msgspec

from vaelii_llm import _timers as timers
from vaelii_llm._transport import settings
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.withheld import _SentTo
from vaelii_llm._transport.withheld import withhold
from vaelii_llm.errors import LLMApiError
from vaelii_llm.errors import LLMBadResponse
from vaelii_llm.errors import LLMError
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.errors import LLMUnreachable
from vaelii_llm.errors import excerpt

__all__ = ["DEFAULT_MAX_BODY_BYTES", "decode_json"]

T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
"""The largest whole body read into memory. A final message is a few MiB at
most; anything larger is a proxy's or a broken server's doing."""

_OPENING: Final = 64 * 1024
"""How much of a body over the cap the error keeps (the rest was never read)."""

_DETAIL: Final = 120
"""How many characters of a library's own words (a parser's, OpenSSL's, a
decoder's) a failure's message quotes: enough to name the fault, never a body."""

_NEVER: Final = float("inf")

_URL_ERRORS: Final = (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)


def _unreachable(exc: BaseException, endpoint: Endpoint) -> LLMError:
    """The typed error for a failure before the response headers arrived."""
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return LLMUnreachable(
            endpoint.label, f"no connection inside {settings.CONNECT_TIMEOUT_MS} ms"
        )
    if isinstance(exc, _URL_ERRORS):  # their text is the URL, which may hold a password
        return LLMUnreachable(endpoint.label, "the URL is not a valid http(s) URL")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return LLMUnreachable(endpoint.label, f"the host did not resolve ({exc.os_error})")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return LLMUnreachable(
            endpoint.label,
            f"TLS with {exc.host}:{exc.port} failed: {_tls_reason(exc.certificate_error)}",
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return LLMUnreachable(
            endpoint.label, f"TLS with {exc.host}:{exc.port} failed: {_tls_reason(exc.os_error)}"
        )
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return LLMUnreachable(endpoint.label, f"could not connect to the proxy ({exc.os_error})")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return LLMUnreachable(endpoint.label, f"could not connect ({exc.os_error})")
    if isinstance(exc, aiohttp.ClientHttpProxyError):  # the proxy refused the tunnel
        return LLMUnreachable(
            endpoint.label,
            f"the proxy refused the request ({exc.status} {excerpt(str(exc.message), 80)})",
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return LLMUnreachable(endpoint.label, "closed the connection before answering")
    if isinstance(exc, aiohttp.ClientResponseError):  # the HTTP head would not parse
        detail = excerpt(" ".join(str(exc.message).split()), _DETAIL)
        return LLMBadResponse(endpoint.label, f"answered malformed HTTP ({detail})")
    if isinstance(exc, ValueError):  # aiohttp refused to build it; its text quotes no header value
        return LLMUnreachable(
            endpoint.label, f"the request could not be sent ({excerpt(str(exc), _DETAIL)})"
        )
    return LLMUnreachable(endpoint.label, f"{type(exc).__name__}: {exc}")


def _tls_reason(exc: BaseException) -> str:
    """The TLS failure in a few words: OpenSSL's verify message, else its reason."""
    message = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
    return excerpt(str(message), _DETAIL)


def _cut_reason(exc: BaseException) -> str:
    """A short account of why a body ended early (the whole story is on ``__cause__``)."""
    return excerpt(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, 160)


def _caused(typed: LLMError, cause: BaseException | None) -> LLMError:
    """``typed`` with ``cause`` chained (``None``: the cause dropped, as ``from None``)."""
    typed.__cause__ = cause
    return typed


def _let_go(response: aiohttp.ClientResponse) -> None:
    """Release a response whose body was read to its end (its connection is
    reused); close any other, so a half-read connection never is."""
    if response.content.at_eof():
        response.release()
    else:
        response.close()


def _gone(response: aiohttp.ClientResponse) -> bool:
    """Whether the response's connection is closed (or already let go)."""
    connection = response.connection
    return connection is None or connection.closed


class _Boundary:
    """The one place a failure becomes a typed error: the module docstring's table.

    ``with boundary:`` runs its block under the turn's deadline (a fresh
    :func:`~vaelii_llm._timers.timeout_at` block each time it is entered, so
    the streamed path enters it for each wait and never across a ``yield``).
    An aiohttp error, an ``OSError`` or a ``TimeoutError`` leaving the block
    becomes the typed error the table names, the original chained; so does a
    ``ValueError`` from building the request, and aiohttp's ``RuntimeError``
    for a read on a connection already closed. Once :attr:`response` is set
    the headers have arrived: a failure is the body's, the response is let go,
    and a non-2xx body refused while read is the status's error. Every typed
    error leaves with the credentials ``sent`` withheld from it and its chain
    (see :func:`withhold`). Anything else (``CancelledError`` first) passes
    through untouched.
    """

    __slots__ = (
        "_timer",
        "contents",
        "deadline",
        "endpoint",
        "kept",
        "received",
        "response",
        "sent",
        "stall_at",
        "until",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        deadline: Deadline,
        sent: _SentTo | None = None,
        sent_at: float | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.deadline = deadline
        self.sent = sent
        self.response: aiohttp.ClientResponse | None = None
        self.kept: list[bytes] | None = None  # the body read so far, on the whole-body path
        self.received = 0  # bytes of the body read so far, on either path
        self.until = deadline.when  # what a wait is bounded by: the deadline, or a stall first
        self.stall_at = _NEVER
        self.contents = 0  # content pieces so far, for a stall's message
        if deadline.stall_ms is not None:  # counted from the request being sent (now)
            if sent_at is None:
                sent_at = asyncio.get_running_loop().time()
            self.stall_at = sent_at + deadline.stall_s
            self.until = min(deadline.when, self.stall_at)

    def __enter__(self) -> _Boundary:
        self._timer = timers.timeout_at(self.until).__enter__()
        return self

    def fresh(self, contents: int, now: float) -> None:
        """Content arrived at ``now`` (``contents`` pieces of it so far): the
        stall bound starts again from then, inside the block too (its timer
        moved later).
        Only for a turn with a stall bound (:attr:`Deadline.stall_ms`)."""
        deadline = self.deadline
        self.contents = contents
        self.stall_at = stall_at = now + deadline.stall_s
        self.until = until = min(deadline.when, stall_at)
        self._timer.reschedule(until)

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        timer = self._timer
        if exc is None:
            timer.__exit__(None, None, None)
            return
        try:
            timer.__exit__(type(exc), exc, exc.__traceback__)
        except TimeoutError as expired:  # the deadline's own cancellation, as asyncio names it
            exc = expired
        typed = self._typed(exc, timer.expired())
        if self.response is not None:
            _let_go(self.response)
        if isinstance(typed, LLMError):
            self.withhold(typed)
        if typed is not exc:
            raise typed

    def withhold(self, exc: BaseException) -> None:
        """The credentials this request sent, withheld from ``exc`` and its chain."""
        sent = self.sent
        if sent is not None:
            withhold(exc, sent.session, sent.headers, str(sent.url))

    def _typed(self, exc: BaseException, expired: bool) -> BaseException:
        """The error ``exc`` becomes (``exc`` itself when it stays as it is)."""
        response = self.response
        if isinstance(exc, (*_URL_ERRORS, aiohttp.ClientHttpProxyError)):
            # Its text is the URL; a proxy's refusal quotes the proxy's URL,
            # credentials and all, and the Proxy-Authorization header.
            return _caused(_unreachable(exc, self.endpoint), None)
        if isinstance(exc, aiohttp.ClientError | OSError):  # TimeoutError is an OSError
            typed = _caused(self._failed(exc, expired), exc)
        elif isinstance(exc, ValueError) and response is None:
            typed = _caused(_unreachable(exc, self.endpoint), exc)
        elif isinstance(exc, RuntimeError) and response is not None and _gone(response):
            # aiohttp's "Connection closed.": the connection was closed (its
            # session closed) after the headers, before the read began.
            typed = _caused(self._failed(exc, expired), exc)
        elif isinstance(exc, LLMBadResponse):  # the capped reader refused the body
            typed = exc
        else:
            return exc
        if (
            response is None
            or 200 <= response.status < 300
            or not isinstance(typed, LLMBadResponse)
        ):
            return typed
        return _caused(_api_error(self.endpoint, response, typed.text), typed)

    def _failed(self, exc: BaseException, expired: bool) -> LLMError:
        """The typed error for an aiohttp error or an ``OSError``, by where it happened."""
        deadline = self.deadline
        headers = self.response is None
        now = asyncio.get_running_loop().time()
        if self.stall_at <= now < deadline.when:  # a stall ends the wait, not the budget
            assert deadline.stall_ms is not None
            return LLMTimeout(self.endpoint.label, deadline.stall_ms, "stall", chunks=self.contents)
        if expired or deadline.when <= now:
            return LLMTimeout(
                self.endpoint.label, deadline.timeout_ms, "headers" if headers else "body"
            )
        if headers:
            return _unreachable(exc, self.endpoint)
        return LLMBadResponse(
            self.endpoint.label,
            f"cut the body short after {self.received} bytes ({_cut_reason(exc)})",
            b"".join(self.kept or ()),
        )


async def _read_whole(boundary: _Boundary, max_bytes: int) -> bytes:
    """The response's whole body, in the boundary (the only place a body is read whole).

    With a stall bound, each read restarts it. A body announced or counted
    over ``max_bytes`` is refused
    (:class:`LLMBadResponse`, its opening :data:`_OPENING` bytes on ``err.text``) without
    reading the rest. A non-2xx's body, read whole, is raised as
    :class:`LLMApiError` carrying the status.
    """
    response = boundary.response
    assert response is not None
    label = boundary.endpoint.label
    announced = response.content_length
    if announced is not None and announced > max_bytes:
        raise LLMBadResponse(
            label, f"announced a {announced}-byte body, over the {max_bytes}-byte cap"
        )
    kept: list[bytes] = []
    boundary.kept = kept
    size = 0
    content = response.content
    stalling = boundary.deadline.stall_ms is not None
    while chunk := await content.readany():
        size += len(chunk)
        boundary.received = size
        kept.append(chunk)
        if stalling:  # every byte of a whole body is content
            boundary.fresh(len(kept), asyncio.get_running_loop().time())
        if size > max_bytes:
            raise LLMBadResponse(
                label,
                f"sent a body over the {max_bytes}-byte cap (its opening is kept)",
                b"".join(kept)[:_OPENING],
            )
        if content.at_eof():  # the end came with it (a small body's usual case): no read more
            break
    data = kept[0] if len(kept) == 1 else b"".join(kept)
    if 200 <= response.status < 300:
        return data
    raise _api_error(boundary.endpoint, response, data.decode("utf-8", "replace"))


def _api_error(endpoint: Endpoint, response: aiohttp.ClientResponse, body: str) -> LLMApiError:
    """The far end's error status, with its request id and allow-listed headers
    (a 404 with the next step its endpoint names for one)."""
    request_id, kept = endpoint.headers.read(response.headers)
    status = response.status
    return LLMApiError(
        endpoint.label,
        status,
        body,
        request_id=request_id,
        headers=kept,
        next_step=endpoint.not_found if status == 404 else None,
    )


def decode_json(data: bytes, endpoint: Endpoint, decoder: msgspec.json.Decoder[T]) -> T:
    """Decode a 2xx body with the caller's typed decoder, guarded.

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
            f"answered a body that is not the expected JSON ({excerpt(str(exc), _DETAIL)})",
            data,
        ) from exc
