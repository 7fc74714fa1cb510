"""The one transport: client sessions, whole-turn deadlines and typed failures, on aiohttp.

Every request of every HTTP backend, turns and probes, is made by
:func:`request_json` (a whole body, decoded) or :func:`open_stream` (the body
handed over as it arrives). This module parses no vendor format: a backend
pumps its bytes into a :mod:`vaelii_llm._wire` decoder or through
:func:`decode_json` with its own typed decoder.

Deadlines. A turn has one absolute :class:`Deadline`, computed once from its
``timeout_ms``. Waiting for the response headers and every wait for the body
happen under :func:`vaelii_llm._timers.timeout_at` (``asyncio.timeout_at``'s
behaviour on one loop timer shared by every turn), so a far end that drips a
byte a second, or sends SSE pings forever, ends in :class:`LLMTimeout` when the
budget is spent. aiohttp's own read timers are off: ``sock_read`` restarts on
every chunk, so it never fires on a drip. Connecting has its own fixed bound,
:data:`CONNECT_TIMEOUT_MS`, whatever the turn allows: a turn may rightly run for
minutes, a connection completes in well under a second or not at all. A probe
passes a short deadline and is bounded by it, connection included.

Connections. A provider's session keeps at most ``max_connections`` (see
:class:`Network`) open to its one far end, reused from turn to turn; a turn
takes one from its :class:`Gate` before it is sent, and gives it back when
its response is let go (read to its end: kept for the next turn; anything
else: closed). Waiting at the gate counts against the turn's deadline and,
when it is what ran out, is :class:`LLMTimeout` with phase ``connection``:
the turn was never sent, the far end was not slow. aiohttp's connector never
queues a gated turn (it would count the wait against the connect bound).

Failures. One boundary, :class:`_Boundary`, is the only place an aiohttp
error, an ``OSError`` or a ``TimeoutError`` becomes an :class:`LLMError`, and
one reader, :func:`_read_whole`, the only place a body is read whole under its
size cap; both paths go through both. What each failure becomes, the original
chained as ``__cause__`` (``tests/test_transport.py`` drives every row):

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
(``tests/test_deploy.py`` drives these).

When the deadline is spent, whatever failure its passing caused (or that came
after it) is :class:`LLMTimeout`; with the deadline unspent a failure is
mapped by the table and nothing else. A stream that ends cleanly but without
its terminal event is a bad response too, raised by the backend that knows
which event that is (the streamed path hands its bytes over as they come and
keeps none of them). A read its owner ends with :func:`cut` (a provider's
``aclose``) fails as a cut body; the owner then reports its own refusal.

Credentials. Every typed error leaves the boundary (and a backend's own
failures leave its turn, :func:`withhold`) with the credentials its request
sent withheld: every header value but the few that are no secret
(:data:`_SHOWN_HEADERS`), an ``Authorization``'s token and a Basic token's
password, the URL's and the proxy's user info, each also as JSON, repr and
percent encoding would show it, become ``<NAME withheld>`` in the message,
every text attribute (``body``, ``text``, ``excerpt``, ``reason``) and every
exception chained to it; a cut one's opening too. aiohttp's causes keep
their type, but their record of the request holds header names without
values and URLs without user info. A far end echoing the key therefore
shows nowhere: not in ``str``, ``repr``, a traceback, a log line or a span.

Nothing here retries, backs off, sleeps or reads ``retry-after``; a credential
header never travels to a host the caller did not name. Header values are
never logged or put in a message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import os
import re
import ssl as _ssl
import sys
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Final, NamedTuple, TypeVar
from urllib.parse import quote, quote_plus

import aiohttp
import msgspec
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.helpers import get_env_proxy_for_url
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from vaelii_llm import __version__
from vaelii_llm import _timers as timers
from vaelii_llm.config import hide_userinfo
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
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_NETWORK",
    "USER_AGENT",
    "Deadline",
    "Endpoint",
    "Gate",
    "LoopSessions",
    "Network",
    "checked_headers",
    "create_session",
    "cut",
    "decode_json",
    "drain",
    "open_stream",
    "probe_session",
    "request_json",
    "with_json_content_type",
    "withhold",
]

T = TypeVar("T")

CONNECT_TIMEOUT_MS: Final = 5_000
"""How long obtaining a connection may take (DNS, TCP, TLS), whatever the turn allows."""

DEFAULT_MAX_CONNECTIONS: Final = 100
"""Connections a provider keeps open to its far end, per event loop, when
``max_connections`` is unset: aiohttp's own default pool, chosen by
measurement (``tests/bench/bench_concurrency.py --sweep``). Unbounded, every
one of many turns at once opens its own connection: a burst of a few
thousand streams costs more time and memory per turn than queueing for a
reused few, and on a loaded machine some of its connects do not land inside
:data:`CONNECT_TIMEOUT_MS` at all. Bounds from a few dozen to a few hundred
measure alike, so the one a plain aiohttp client has is kept: a provider then
costs what that client costs. Raise it (``0``: no bound) when turns end in
:class:`LLMTimeout` with phase ``connection``."""

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

log = logging.getLogger("vaelii_llm.transport")


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


SSLOption = _ssl.SSLContext | str | bool | None
"""What ``ssl=`` takes: a context (a client certificate loaded in it too), a
CA bundle path (a file, or a directory of hashed certificates), ``True`` or
``None`` for the default verification, ``False`` to verify nothing."""


class Network:
    """How a provider's sessions reach the far end: ``proxy``, ``ssl``,
    ``max_connections``, or a caller's own ``session``. Checked when built.

    ``proxy``: an ``http://`` proxy URL (``user:password@`` in it is sent as
    proxy credentials and never shown); unset, the environment's
    ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` are honoured, as aiohttp's
    ``trust_env`` reads them. ``ssl``: see :data:`SSLOption`; unset,
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are honoured when set (read when a
    session is made), else the system's CAs. ``False`` logs a warning once
    per process. ``max_connections``: open connections to the far end per
    provider and event loop, reused from turn to turn; a turn beyond them
    waits for one, under its own deadline (see the module docstring); unset,
    :data:`DEFAULT_MAX_CONNECTIONS`; ``0``, no bound (every turn at once opens
    its own). Read as resolved: never None. ``session``: an
    ``aiohttp.ClientSession`` the caller owns and closes; used as it is (its
    own proxy, TLS and pool settings), never closed here, so it serves only
    the loop it was made on.
    """

    __slots__ = ("max_connections", "proxy", "session", "ssl")

    def __init__(
        self,
        *,
        proxy: str | None = None,
        ssl: SSLOption = None,
        max_connections: int | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if proxy is not None and (
            not isinstance(proxy, str) or not proxy.lower().startswith(("http://", "https://"))
        ):
            raise ValueError("proxy is an http:// or https:// URL")  # never quoted: a secret
        if max_connections is not None and (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 0
        ):
            raise ValueError(
                "max_connections is a whole number: 1 or more, or 0 for no bound, "
                f"not {max_connections!r}"
            )
        if session is not None and not isinstance(session, aiohttp.ClientSession):
            raise TypeError(f"session is an aiohttp.ClientSession, not {type(session).__name__}")
        if session is not None and (
            proxy is not None or ssl is not None or max_connections is not None
        ):
            raise ValueError(
                "session= is used as the caller made it: give proxy, ssl and "
                "max_connections to the session instead"
            )
        self.proxy = proxy
        self.ssl = _checked_ssl(ssl)
        self.max_connections: int = (
            DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections
        )
        self.session = session

    def __repr__(self) -> str:
        proxy = None if self.proxy is None else hide_userinfo(self.proxy)
        return (
            f"Network(proxy={proxy!r}, ssl={self.ssl!r}, "
            f"max_connections={self.max_connections!r}, session={self.session is not None})"
        )


_warned_unverified = False


def _checked_ssl(option: SSLOption) -> _ssl.SSLContext | bool | None:
    """``ssl=`` made ready: a path loaded into a context now (a bad one refused
    now), ``False`` warned about once per process."""
    global _warned_unverified
    if option is None or option is True or isinstance(option, _ssl.SSLContext):
        return option
    if option is False:
        if not _warned_unverified:
            _warned_unverified = True
            log.warning(
                "ssl=False: TLS certificates are not verified "
                "(anyone on the path can read and change turns)"
            )
        return False
    if isinstance(option, str | os.PathLike):
        path = os.fspath(option)
        try:
            return _ca_context(path)
        except (OSError, _ssl.SSLError) as exc:
            raise ValueError(f"ssl: cannot load the CA bundle {path!r} ({exc})") from None
    raise TypeError(
        f"ssl is an ssl.SSLContext, a CA bundle path or a bool, not {type(option).__name__}"
    )


@functools.lru_cache(maxsize=16)
def _ca_context(path: str) -> _ssl.SSLContext:
    """The default context verifying against the CA bundle at ``path``, made
    once per path (so probes naming it share one probe session per loop)."""
    if os.path.isdir(path):
        return _ssl.create_default_context(capath=path)
    return _ssl.create_default_context(cafile=path)


@functools.lru_cache(maxsize=4)
def _env_context(cafile: str | None, capath: str | None) -> _ssl.SSLContext:
    """The default context with ``SSL_CERT_FILE``/``SSL_CERT_DIR`` loaded
    (aiohttp's own default was made at import, before the caller set them)."""
    return _ssl.create_default_context(cafile=cafile or None, capath=capath or None)


def _session_ssl(option: _ssl.SSLContext | bool | None) -> _ssl.SSLContext | bool:
    if option is not None:
        return option
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        return _env_context(cafile, capath)
    return True


DEFAULT_NETWORK: Final = Network()
"""The environment's proxy and CA settings, :data:`DEFAULT_MAX_CONNECTIONS`,
the provider's own sessions."""


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url``, read as aiohttp's
    ``trust_env`` reads it (``HTTP_PROXY``/``HTTPS_PROXY`` by the URL's
    scheme, none when ``NO_PROXY`` covers its host, credentials from the URL
    or ``.netrc``), or None. Read when a session is made, not per request: a
    turn pays nothing for it."""
    try:
        proxy, auth = get_env_proxy_for_url(URL(url))
    except (LookupError, ValueError):
        return None
    if auth is not None and proxy.user is None:
        proxy = proxy.with_user(auth.login).with_password(auth.password)
    return str(proxy)


def create_session(
    headers: Mapping[str, str] | None = None,
    network: Network = DEFAULT_NETWORK,
    url: str | None = None,
    *,
    gated: bool = False,
) -> aiohttp.ClientSession:
    """A new client session for a provider to own (and close in its ``aclose``).

    ``headers`` are sent on every request (a gateway's or proxy's extra headers,
    a credential), with :data:`USER_AGENT` unless they name their own.
    Connecting is bounded by :data:`CONNECT_TIMEOUT_MS`; there is
    no total or per-read timeout, since the turn's :class:`Deadline` is the only
    clock. ``gated``: the session's turns wait at a :class:`Gate` of
    ``network.max_connections`` (a provider's session, see
    :class:`LoopSessions`), so its connector never queues them; otherwise the
    connector bounds each host at ``network.max_connections`` itself (a probe
    session, shared by the hosts probes name, where a wait for a connection
    counts against the connect bound). Proxy and TLS: see :class:`Network`;
    with no ``network.proxy``, the environment's proxy for ``url``
    (:func:`env_proxy`), the one far end the session's requests go to. Must
    be called with a loop running.
    """
    _check_headers(headers)
    sent = dict(headers) if headers else {}
    if not _named(sent, "user-agent"):
        sent["User-Agent"] = USER_AGENT
    return aiohttp.ClientSession(
        headers=sent,
        timeout=aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_MS / 1000, sock_read=None, sock_connect=None
        ),
        connector=aiohttp.TCPConnector(
            limit=0,
            limit_per_host=0 if gated else network.max_connections,
            ssl=_session_ssl(network.ssl),
        ),
        proxy=network.proxy or (env_proxy(url) if url is not None else None),
    )


class Gate:
    """A provider's connections to its far end on one event loop: at most
    ``limit`` turns hold one at once, the rest wait their turn in order.

    A turn takes one (:meth:`take`) before it is sent and gives it back
    (:meth:`give`) once its response is let go (its connection back in the
    connector's pool, or closed), so the connector never holds more than
    ``limit`` and never queues. A wait here is under the turn's deadline; one
    that outlasts it is :class:`LLMTimeout` with phase ``connection``.
    """

    __slots__ = ("_free", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = asyncio.Semaphore(limit)

    @property
    def taken(self) -> int:
        """How many turns hold a connection now."""
        return self.limit - self._free._value

    async def take(self, endpoint: Endpoint, deadline: Deadline) -> None:
        """Wait for a connection, at most until ``deadline`` (no timer when one is free)."""
        free = self._free
        if not free.locked():
            await free.acquire()  # returns at once
            return
        try:
            with timers.timeout_at(deadline.when):
                await free.acquire()
        except TimeoutError:
            raise LLMTimeout(endpoint.label, deadline.timeout_ms, "connection") from None

    def give(self) -> None:
        """Give a connection back (the next waiting turn takes it)."""
        self._free.release()


class LoopSessions:
    """One session per running event loop, made by ``make`` on first use in that loop.

    A session is bound to the loop it was made on, so a provider used from
    several loops (two ``asyncio.run`` calls, ``run_sync`` then ``run``) has
    one for each. Each closes when its loop shuts down: it is tied to an async
    generator registered with the loop, and ``asyncio.run`` (and
    ``asyncio.Runner``) finalise every such generator before closing the
    loop. :meth:`aclose` closes every one still open, from any loop: the
    running loop's at once, another running loop's on that loop (awaited
    here), a stopped loop's connections dropped without a wait.

    ``limit``: each session comes with a :class:`Gate` of that many
    connections (``make`` then makes it ``gated``, see :func:`create_session`);
    ``0``, none.
    """

    __slots__ = ("_held", "_limit", "_make")

    def __init__(self, make: Callable[[], aiohttp.ClientSession], limit: int = 0) -> None:
        self._make = make
        self._limit = limit
        self._held: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop,
            tuple[aiohttp.ClientSession, Gate | None, AsyncGenerator[None, None]],
        ] = weakref.WeakKeyDictionary()

    def get(self) -> aiohttp.ClientSession:
        """The running loop's session (made now if it has none, or its was closed)."""
        return self.reach()[0]

    def reach(self) -> tuple[aiohttp.ClientSession, Gate | None]:
        """The running loop's session and its gate (made now, as :meth:`get`)."""
        loop = asyncio.get_running_loop()
        held = self._held.get(loop)
        if held is not None and not held[0].closed:
            return held[0], held[1]
        session = self._make()
        gate = Gate(self._limit) if self._limit else None
        closer = self._close_at_loop_shutdown(loop, session)
        # The generator's first step awaits nothing, so it completes synchronously;
        # starting it calls the loop's first-iteration hook, which registers it for
        # shutdown_asyncgens(). The map keeps it alive until the loop is gone.
        with suppress(StopIteration):
            closer.asend(None).send(None)
        self._held[loop] = (session, gate, closer)
        return session, gate

    def __len__(self) -> int:
        """How many loops hold a session."""
        return len(self._held)

    def current(self) -> aiohttp.ClientSession | None:
        """The running loop's session if one is open (none is made)."""
        held = self._held.get(asyncio.get_running_loop())
        return held[0] if held is not None and not held[0].closed else None

    def gate(self) -> Gate | None:
        """The running loop's gate, if its session is open (none is made)."""
        held = self._held.get(asyncio.get_running_loop())
        return held[1] if held is not None and not held[0].closed else None

    async def _close_at_loop_shutdown(
        self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession
    ) -> AsyncGenerator[None, None]:
        """Suspended for the loop's life; closing it closes the session and
        drops the loop's entry (the session refers to its loop, so the weak
        key alone would never let the entry go)."""
        try:
            yield
        finally:
            held = self._held.get(loop)
            if held is not None and held[0] is session:
                del self._held[loop]
            await session.close()

    async def aclose(self) -> None:
        """Close every loop's session (see the class docstring)."""
        here = asyncio.get_running_loop()
        held = list(self._held.items())
        self._held.clear()
        for loop, (session, _gate, closer) in held:
            if loop is here:
                await closer.aclose()
            elif loop.is_running() and not loop.is_closed():
                with suppress(RuntimeError):  # the loop closed meanwhile
                    await asyncio.wrap_future(
                        asyncio.run_coroutine_threadsafe(_aclose(closer), loop)
                    )
            elif not session.closed:
                _drop(session)


async def _aclose(closer: AsyncGenerator[None, None]) -> None:
    await closer.aclose()


def _drop(session: aiohttp.ClientSession) -> None:
    """Close a session whose loop no longer runs: its connections are closed
    without waiting on that loop, and the session marked closed."""
    connector = session.connector
    if connector is not None and not connector.closed:
        with suppress(Exception):
            connector._close()
    session._connector = None


_probe_sessions: Final = LoopSessions(create_session)


_network_probe_sessions: dict[tuple[object, ...], LoopSessions] = {}


def probe_session(network: Network = DEFAULT_NETWORK, url: str = "") -> aiohttp.ClientSession:
    """The running loop's shared probe session, created on first use.

    One per loop (see :class:`LoopSessions`), never one per probe; it closes
    when its loop shuts down. A second ``asyncio.run`` gets a new one. A loop
    closed without ``shutdown_asyncgens`` leaves it unclosed. A ``network``
    with a proxy or TLS settings has probe sessions of its own (one per loop
    for each such setting); one naming a caller's session probes on it. With
    no ``network.proxy``, the environment's proxy for ``url`` (the far end
    probed) is read now.
    """
    if network.session is not None:
        return network.session
    proxy = network.proxy or env_proxy(url)
    if proxy is None and network is DEFAULT_NETWORK:
        return _probe_sessions.get()
    key = (proxy, network.ssl, network.max_connections)
    sessions = _network_probe_sessions.get(key)
    if sessions is None:
        reach = Network(proxy=proxy, ssl=network.ssl, max_connections=network.max_connections)
        sessions = _network_probe_sessions[key] = LoopSessions(lambda: create_session(None, reach))
    return sessions.get()


def _unreachable(exc: BaseException, endpoint: Endpoint) -> LLMError:
    """The typed error for a failure before the response headers arrived."""
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return LLMUnreachable(endpoint.label, f"no connection inside {CONNECT_TIMEOUT_MS} ms")
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
        detail = excerpt(" ".join(str(exc.message).split()), 120)
        return LLMBadResponse(endpoint.label, f"answered malformed HTTP ({detail})")
    if isinstance(exc, ValueError):  # aiohttp refused to build it; its text quotes no header value
        return LLMUnreachable(
            endpoint.label, f"the request could not be sent ({excerpt(str(exc), 120)})"
        )
    return LLMUnreachable(endpoint.label, f"{type(exc).__name__}: {exc}")


def _tls_reason(exc: BaseException) -> str:
    """The TLS failure in a few words: OpenSSL's verify message, else its reason."""
    message = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
    return excerpt(str(message), 120)


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


_SHOWN_HEADERS: Final = frozenset(
    {
        "accept",
        "accept-encoding",
        "anthropic-beta",
        "anthropic-version",
        "connection",
        "content-length",
        "content-type",
        "host",
        "user-agent",
    }
)
"""The headers whose values are no secret. Every other value a request sends
(``x-api-key``, ``Authorization``, a gateway's own header) is a credential."""

_MIN_SECRET: Final = 4
"""A value shorter than this is not searched for: it would match ordinary text
everywhere and guards nothing."""

_SEARCHED_CUTS: Final = 1024
"""Texts up to this long (messages, reasons, excerpts) are searched for a
secret's opening cut by an excerpt's ``…`` anywhere in them; longer ones (a
body) only at their end."""


class _SentTo(NamedTuple):
    """What one request sent that may carry a credential, kept for its failure."""

    session: aiohttp.ClientSession
    headers: Mapping[str, str] | None
    url: str | URL


class _Withheld:
    """The credentials one request sent, and the one rule keeping them out of
    every text that came back from the far end.

    Each secret (a header value, an ``Authorization``'s token, a Basic
    token's ``user:password`` and password, the URL's password, and each of
    those JSON-, repr- and percent-encoded) is replaced by ``<NAME withheld>``
    wherever it occurs; an opening of one (four characters or more) left by
    a cut, at a text's end or before an excerpt's ``…``, is replaced too.
    """

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Mapping[str, str]) -> None:
        # the longest first, so a value is replaced before a part of it
        self._secrets = sorted(secrets.items(), key=lambda item: -len(item[0]))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret, whole or cut, withheld."""
        for value, name in self._secrets:
            if value in text:
                text = text.replace(value, f"<{name} withheld>")
        ends = [len(text)]
        if len(text) <= _SEARCHED_CUTS and "…" in text:
            ends += [at for at, char in enumerate(text) if char == "…"]
        for end in sorted(ends, reverse=True):  # from the back: earlier ends stay put
            text = self._cut_opening(text, end)
        return text

    def _cut_opening(self, text: str, end: int) -> str:
        """``text`` with a secret's opening that ends at ``end`` withheld."""
        for value, name in self._secrets:
            start = max(0, end - len(value) + 1)
            lead = value[:_MIN_SECRET]
            at = text.find(lead, start, end)
            while at != -1:
                if value.startswith(text[at:end]):
                    return f"{text[:at]}<{name} withheld>{text[end:]}"
                at = text.find(lead, at + 1, end)
        return text

    def error(self, exc: BaseException) -> None:
        """``exc`` and every exception chained to it (cause and context),
        rewritten in place: their arguments and text attributes withheld, and
        aiohttp's record of the request (its headers, the URL's user info,
        the proxy's credentials) replaced by one that holds no value."""
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            one = todo.pop()
            if one is None or id(one) in seen:
                continue
            seen.add(id(one))
            self._one(one)
            todo += (one.__cause__, one.__context__)

    def _one(self, exc: BaseException) -> None:
        if isinstance(exc, aiohttp.ClientResponseError):
            exc.request_info = _safe_request_info(exc.request_info)
            if exc.headers is not None:  # the far end's, which may echo ours
                exc.headers = CIMultiDictProxy(
                    CIMultiDict((name, self.text(value)) for name, value in exc.headers.items())
                )
        key = getattr(exc, "_conn_key", None)
        if isinstance(key, ConnectionKey):
            safe = key._replace(
                proxy=None if key.proxy is None else key.proxy.with_user(None), proxy_auth=None
            )
            exc._conn_key = safe  # type: ignore[attr-defined]
        exc.args = tuple(self._arg(arg) for arg in exc.args)
        shown = getattr(exc, "__dict__", None)
        if shown:
            for name, value in list(shown.items()):
                if isinstance(value, str):
                    shown[name] = self.text(value)

    def _arg(self, arg: object) -> object:
        if isinstance(arg, str):
            return self.text(arg)
        if isinstance(arg, aiohttp.RequestInfo):
            return _safe_request_info(arg)
        if isinstance(arg, ConnectionKey):
            return arg._replace(
                proxy=None if arg.proxy is None else arg.proxy.with_user(None), proxy_auth=None
            )
        return arg


def _safe_request_info(info: aiohttp.RequestInfo) -> aiohttp.RequestInfo:
    """aiohttp's record of a request with its URLs' user info cut and every
    header value but the shown ones withheld (the names stay)."""
    headers = CIMultiDict(
        (name, value if name.lower() in _SHOWN_HEADERS else "<withheld>")
        for name, value in info.headers.items()
    )
    return aiohttp.RequestInfo(
        info.url.with_user(None),
        info.method,
        CIMultiDictProxy(headers),
        info.real_url.with_user(None),
    )


def _encodings(value: str) -> set[str]:
    """``value`` and the forms a far end would echo it in (JSON, repr, a URL)."""
    encoded = msgspec.json.encode(value).decode()[1:-1]
    escaped = value.replace("\\", "\\\\")
    return {
        value,
        encoded,
        json.dumps(value)[1:-1],
        repr(value)[1:-1],
        escaped.replace("'", "\\'"),
        escaped.replace('"', '\\"'),
        quote(value, safe=""),
        quote_plus(value, safe=""),
    }


def _header_secrets(value: str) -> list[str]:
    """A header value's secrets: itself, its scheme's token (``Bearer``,
    ``Basic``…), and a Basic token's ``user:password`` and password."""
    found = [value]
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if token:
        found.append(token)
        if scheme.lower() == "basic":
            found += _basic_parts(token)
    return found


def _basic_parts(token: str) -> list[str]:
    """A Basic token's ``user:password`` and password (none if it will not decode)."""
    try:
        pair = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return []
    return [pair, pair.partition(":")[2]]


def _withheld(
    headers: Iterable[Mapping[str, str] | None],
    urls: Iterable[str | URL | None],
    auths: Iterable[aiohttp.BasicAuth | None] = (),
) -> _Withheld:
    """The rule for a request that sent ``headers`` to ``urls`` (with ``auths``)."""
    found: dict[str, str] = {}

    def add(value: str, name: str) -> None:
        for form in _encodings(value.strip()):
            if len(form) >= _MIN_SECRET:
                found.setdefault(form, name)

    def add_basic(login: str, password: str, name: str) -> None:
        pair = f"{login}:{password}"
        add(password, name)
        add(pair, name)
        add(base64.b64encode(pair.encode()).decode(), name)

    for mapping in headers:
        for name, value in (mapping or {}).items():
            if name.lower() not in _SHOWN_HEADERS:
                for secret in _header_secrets(value):
                    add(secret, name)
    for url in urls:
        if url is None:
            continue
        try:
            parsed = URL(url)
        except (TypeError, ValueError):
            continue
        if parsed.password:
            add_basic(parsed.user or "", parsed.password, "password")
            add(parsed.raw_password or "", "password")
    for auth in auths:
        if auth is not None and auth.password:
            add_basic(auth.login, auth.password, "password")
    return _Withheld(found)


def withhold(
    exc: BaseException, session: aiohttp.ClientSession, headers: Mapping[str, str] | None, url: str
) -> None:
    """Withhold, in ``exc`` and its chain (in place), every credential a
    request sent: ``headers`` and ``session``'s own, the user info of ``url``
    and of the session's proxy, the session's ``auth``. A failure built from
    far-end text (a body, an excerpt, an error event) goes through here
    before it is raised: for the transport's own requests :class:`_Boundary`
    does it; a backend does it for what its codec raises from a body."""
    _withheld(
        (session.headers, headers),
        (url, getattr(session, "_default_proxy", None)),
        (session.auth, getattr(session, "_default_proxy_auth", None)),
    ).error(exc)


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

    __slots__ = ("_timer", "deadline", "endpoint", "kept", "received", "response", "sent")

    def __init__(self, endpoint: Endpoint, deadline: Deadline, sent: _SentTo | None = None) -> None:
        self.endpoint = endpoint
        self.deadline = deadline
        self.sent = sent
        self.response: aiohttp.ClientResponse | None = None
        self.kept: list[bytes] | None = None  # the body read so far, on the whole-body path
        self.received = 0  # bytes of the body read so far, on either path

    def __enter__(self) -> _Boundary:
        self._timer = timers.timeout_at(self.deadline.when).__enter__()
        return self

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
        return _caused(LLMApiError(self.endpoint.label, response.status, typed.text), typed)

    def _failed(self, exc: BaseException, expired: bool) -> LLMError:
        """The typed error for an aiohttp error or an ``OSError``, by where it happened."""
        deadline = self.deadline
        headers = self.response is None
        if expired or deadline.when <= asyncio.get_running_loop().time():
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

    A body announced or counted over ``max_bytes`` is refused
    (:class:`LLMBadResponse`, its opening 64 KiB on ``err.text``) without
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
    while chunk := await content.readany():
        size += len(chunk)
        boundary.received = size
        kept.append(chunk)
        if size > max_bytes:
            raise LLMBadResponse(
                label,
                f"sent a body over the {max_bytes}-byte cap (its opening is kept)",
                b"".join(kept)[:_OPENING],
            )
    data = kept[0] if len(kept) == 1 else b"".join(kept)
    if 200 <= response.status < 300:
        return data
    raise LLMApiError(label, response.status, data.decode("utf-8", "replace"))


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
    gate: Gate | None = None,
) -> T:
    """Send, read the whole body under the deadline, decode it; the response is always let go.

    One timer for the headers and the body (the small-turn path). A ``body``
    goes out as ``application/json`` unless a Content-Type (here or on the
    session) says otherwise. A non-2xx raises :class:`LLMApiError` with its
    status and body; other failures: see the module docstring.
    ``inflight``: a set that holds the response while its body is read, so its
    owner can cut the read (see :func:`cut`). ``gate``: the session's
    :class:`Gate`, a connection taken from it first and given back with the
    response.
    """
    sent = _outgoing(session, headers, body)
    if gate is not None:
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
    finally:
        if gate is not None:
            gate.give()
    try:
        return decode_json(data, endpoint, decoder)
    except LLMError as exc:
        boundary.withhold(exc)
        raise


def _named(headers: Mapping[str, str], name: str) -> bool:
    """Whether ``headers`` name the header ``name`` (lower case), in any case."""
    return any(key.lower() == name for key in headers)


def with_json_content_type(headers: Mapping[str, str] | None) -> dict[str, str]:
    """``headers`` (copied) with ``Content-Type: application/json``, unless they
    name a Content-Type of their own: what a JSON body is sent as, decided
    here only. A backend puts the result on its session, so no turn copies
    its headers to add it."""
    sent = dict(headers) if headers else {}
    if not _named(sent, "content-type"):
        sent["Content-Type"] = "application/json"
    return sent


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
    failures as in the module docstring. Leaving the block in any way (the
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
    """

    __slots__ = (
        "_args",
        "_boundary",
        "_content",
        "_done",
        "_gate",
        "_inflight",
        "_response",
        "_when",
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

    async def __aenter__(self) -> _Stream:
        session, endpoint, method, url, deadline, body, headers, max_body_bytes = self._args
        sent = _outgoing(session, headers, body)
        gate = self._gate
        if gate is not None:
            await gate.take(endpoint, deadline)
        try:
            boundary = _Boundary(endpoint, deadline, _SentTo(session, sent, url))
            with boundary:
                response = boundary.response = await session.request(
                    method, url, data=body, headers=sent, allow_redirects=False
                )
                if not 200 <= response.status < 300:
                    await _read_whole(boundary, max_body_bytes)  # raises LLMApiError with the body
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
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._done = True
        try:
            if self._inflight is not None:
                self._inflight.discard(self._response)
            _let_go(self._response)
        finally:
            if self._gate is not None:
                self._gate.give()

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        content = self._content
        boundary = self._boundary
        try:
            if asyncio.get_running_loop().time() >= self._when:
                # still flowing, but the turn's budget is spent
                with boundary:
                    raise TimeoutError("the deadline passed while the body was still arriving")
            chunk = content.read_nowait() if content.exception() is None else b""
            if not chunk:
                if content.exception() is None and content.at_eof():
                    self._done = True  # the end has arrived: nothing to wait for
                    raise StopAsyncIteration
                with boundary:
                    chunk = await content.readany()
                if not chunk:
                    self._done = True
                    raise StopAsyncIteration
        except BaseException:
            self._done = True
            raise
        boundary.received += len(chunk)
        return chunk

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
