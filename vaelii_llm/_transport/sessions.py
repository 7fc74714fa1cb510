"""Client sessions, one per event loop, and the gate a turn takes a connection from.

Connections. A provider's session keeps at most ``max_connections`` (see
:class:`Network`) open to its one far end, reused from turn to turn; a turn
takes one from its :class:`Gate` before it is sent, and gives it back when
its response is let go (read to its end: kept for the next turn; anything
else: closed). Waiting at the gate counts against the turn's deadline and,
when it is what ran out, is :class:`LLMTimeout` with phase ``connection``:
the turn was never sent, the far end was not slow. aiohttp's connector never
queues a gated turn (it would count the wait against the connect bound), and
never hands a turn a kept connection its far end has already closed
(:class:`_FreshConnector`).
"""

from __future__ import annotations

import asyncio
import collections
import select
import time
import weakref
from collections.abc import AsyncGenerator
from collections.abc import Callable
from collections.abc import Mapping
from contextlib import suppress
from typing import Any
from typing import Final

import aiohttp

from vaelii_llm import _timers as timers
from vaelii_llm._transport import settings
from vaelii_llm._transport.settings import DEFAULT_NETWORK
from vaelii_llm._transport.settings import USER_AGENT
from vaelii_llm._transport.settings import Deadline
from vaelii_llm._transport.settings import Endpoint
from vaelii_llm._transport.settings import Network
from vaelii_llm._transport.settings import _check_headers
from vaelii_llm._transport.settings import _named
from vaelii_llm._transport.settings import _session_ssl
from vaelii_llm._transport.settings import env_proxy
from vaelii_llm.errors import LLMTimeout

__all__ = ["Gate", "LoopSessions", "create_session", "probe_session"]


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
    Connecting is bounded by :data:`~vaelii_llm._transport.settings.CONNECT_TIMEOUT_MS`; there is
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
            total=None,
            connect=settings.CONNECT_TIMEOUT_MS / 1000,
            sock_read=None,
            sock_connect=None,
        ),
        connector=_FreshConnector(
            limit=0,
            limit_per_host=0 if gated else network.max_connections,
            ssl=_session_ssl(network.ssl),
        ),
        proxy=network.proxy or (env_proxy(url) if url is not None else None),
    )


class _FreshConnector(aiohttp.TCPConnector):
    """aiohttp's connector, which never hands out a kept connection its far
    end has already closed, or may be closing now.

    A server drops an idle kept-alive connection when it likes (its own idle
    timeout, a request limit, a restart), and the close can be waiting in
    the kernel, not yet seen by the loop, when the next turn takes that
    connection: the turn was then written into a closed socket and failed
    :class:`LLMUnreachable` ("closed the connection before answering", or
    "can not write request body"). Here the kept connections next in line
    are checked (``poll`` with no wait) before one is handed out: an idle
    connection has nothing to read, so one that is readable (the far end's
    close, or bytes it had no reason to send) is closed, and aiohttp hands
    out another kept one or opens a fresh one. This is not a retry of the
    turn: nothing was sent on the closed connection. A connection that fails
    after the request was sent is not retried (the far end may have read
    it); it fails the turn as before.

    Some far ends close a connection just after the last byte of a streamed
    answer, though they offered to keep it (llama.cpp's ``llama-server``
    does): a turn taking it at once can find nothing to read yet and be sent
    into the close. So a connection a stream was read on
    (:func:`_streamed_on`) is not handed out until the far end is known to
    keep such connections: while it is younger than :data:`_PROVEN_S` the
    turn waits until it is not (no fresh connection is opened beside it, so
    the pool never holds more than it would), then the check decides; one
    found closed teaches that the far end closes them, and from then on a
    stream's connection is closed when the stream ends, never kept; one
    found open at that age teaches that it keeps them, and they are checked
    as any other from then on. So the wait comes once per far end, in its
    first tenth of a second.

    It reads aiohttp's idle connections (``_conns``: per host, pairs of a
    protocol and when it was kept) and wraps its ``_get``: both private.
    Should their shape change, nothing is checked and the connector is
    aiohttp's own (:func:`_closed_kept` refuses what it does not recognise;
    ``tests/transport/test_connections.py`` pins the shape and fails where the check
    stops working). Where ``select.poll`` is missing (Windows) nothing is
    checked either.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # One poll set per connector (so per loop), holding one fd at a time.
        self._readable = select.poll() if hasattr(select, "poll") else None
        self._streamed: weakref.WeakSet[Any] = weakref.WeakSet()  # not yet proven kept
        self._keeps_streams: bool | None = None  # what the far end does after a stream

    def streamed(self, protocol: Any) -> None:
        """A stream is read on ``protocol``'s connection (see the class docstring)."""
        keeps = self._keeps_streams
        if keeps:
            return
        self._streamed.add(protocol)  # and, kept already (the body came whole), closed at a take
        if keeps is False:
            protocol.force_close()  # closed, not kept, once the stream ends

    def _get(self, key: Any, traces: list[Any]) -> Any:
        # aiohttp awaits what this returns: its own coroutine, once the kept
        # connections are checked (no coroutine of ours around it, but while
        # a stream's connection is too young to judge)
        readable = self._readable
        if readable is None:
            return _aiohttp_get(self, key, traces)
        conns = getattr(self, "_conns", None)
        if not self._streamed:
            for proto in _closed_kept(conns, key, readable):
                proto.close()  # aiohttp's own _get passes a closed one over
            return _aiohttp_get(self, key, traces)
        held: list[Any] = []
        for proto in _closed_kept(conns, key, readable, self._verdict, held):
            proto.close()
        if not held:
            return _aiohttp_get(self, key, traces)
        return self._proof(key, traces, held[0][1])

    def _verdict(self, proto: Any, since: float, readable: bool) -> int:
        """What becomes of a kept connection next in line: used, closed or waited for."""
        streamed = self._streamed
        if proto not in streamed:
            return _CLOSE if readable else _USE
        if readable or self._keeps_streams is False:
            self._keeps_streams = False  # it closes what it offered to keep
            return _CLOSE
        if time.monotonic() - since < _PROVEN_S:
            return _HOLD
        self._keeps_streams = True
        streamed.clear()
        return _USE

    async def _proof(self, key: Any, traces: list[Any], since: float) -> Any:
        """Wait until the stream's connection next in line (kept at ``since``)
        is old enough to say whether its far end keeps it, then take a
        connection as :meth:`_get` does (the check now decides)."""
        await asyncio.sleep(_PROVEN_S - (time.monotonic() - since))
        return await self._get(key, traces)


_aiohttp_get: Final = aiohttp.TCPConnector._get

_USE: Final = 0
_CLOSE: Final = 1
_HOLD: Final = 2

_PROVEN_S: Final = 0.1
"""How long a connection a stream was read on stays idle before it may be
handed out while its far end is not yet known to keep such connections: a
far end that closes one does so just after the stream's last byte, so a
connection still open this long after is one it keeps."""


def _streamed_on(session: aiohttp.ClientSession, response: aiohttp.ClientResponse) -> None:
    """Tell ``session``'s connector that a stream is read on ``response``'s
    connection (see :class:`_FreshConnector`; a caller's own session is not
    told)."""
    connector = session.connector
    if type(connector) is _FreshConnector and connector._keeps_streams is not True:
        connection = response.connection
        protocol = connection.protocol if connection is not None else None
        if protocol is None:  # the whole body came with the head: already let go
            protocol = getattr(response, "_protocol", None)
        if protocol is not None:
            connector.streamed(protocol)


def _closed_kept(
    conns: object,
    key: object,
    readable: Any = None,
    verdict: Callable[[Any, float, bool], int] | None = None,
    held: list[Any] | None = None,
) -> list[Any]:
    """The kept connections for ``key`` in aiohttp's idle map ``conns`` that
    have something to read, looked for where aiohttp takes the next one: the
    oldest first, each up to the first with nothing to read, so a turn
    usually checks one (``tests/transport/test_connections.py`` pins that
    order). None when ``conns`` is not of the shape known (a dict of
    ``(protocol, time)`` pairs). With ``verdict`` (the connector's), it says
    of each whether it is used, closed or waited for (added to ``held``)."""
    if not isinstance(conns, dict):
        return []
    kept = conns.get(key)
    if not kept:
        return []
    if readable is None:
        readable = select.poll()
    stale: list[Any] = []
    try:
        for entry in kept:
            proto, since = entry
            said = _has_input(proto, readable)
            if said is None:
                if verdict is None:
                    continue  # aiohttp passes it over itself
                said = True  # closed while idle: the far end closed it
            way = _CLOSE if said else _USE
            if verdict is not None:
                way = verdict(proto, since, said)
            if way == _USE:
                return stale
            if way == _CLOSE:
                stale.append(proto)
            elif held is not None:
                held.append(entry)
    except (AttributeError, TypeError, ValueError):  # not the shape known: check nothing
        return []
    return stale


def _has_input(proto: Any, readable: Any) -> bool | None:
    """Whether an idle kept connection has anything to read (no wait); None
    when it has no open transport or socket to ask."""
    transport = proto.transport
    if transport is None or transport.is_closing():
        return None
    sock = transport.get_extra_info("socket")
    fd = -1 if sock is None else sock.fileno()
    if type(fd) is not int or fd < 0:
        return None
    readable.register(fd, _POLLIN)
    try:
        return bool(readable.poll(0))
    except OSError:
        return None
    finally:
        readable.unregister(fd)


_POLLIN: Final = getattr(select, "POLLIN", 1)


class Gate:
    """A provider's connections to its far end on one event loop: at most
    ``limit`` turns hold one at once, the rest wait their turn in order.

    A turn takes one before it is sent (:meth:`take_now`, or when none is
    free :meth:`take`, which waits) and gives it back (:meth:`give`) once its
    response is let go (its connection back in the connector's pool, or
    closed), so the connector never holds more than ``limit`` and never
    queues. A connection given back goes straight to the turn that has waited
    longest. A wait here is under the turn's deadline; one that outlasts it is
    :class:`LLMTimeout` with phase ``connection``, and a wait that ends in any
    way but with a connection holds none (one handed over at that moment is
    passed on).
    """

    __slots__ = ("_free", "_waiting", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = limit
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def taken(self) -> int:
        """How many turns hold a connection now (one handed to a waiting turn counts)."""
        return self.limit - self._free

    def take_now(self) -> bool:
        """Take a connection if one is free and no turn waits for one (no
        coroutine, no timer: a small turn's usual case); False takes nothing."""
        if self._free and not self._waiting:
            self._free -= 1
            return True
        return False

    async def take(self, endpoint: Endpoint, deadline: Deadline) -> None:
        """Take a connection, waiting for one in order at most until ``deadline``."""
        if self.take_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            with timers.timeout_at(deadline.when):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed one as the wait ended: the next turn has it
            else:
                with suppress(ValueError):
                    self._waiting.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise LLMTimeout(endpoint.label, deadline.timeout_ms, "connection") from None
            raise

    def give(self) -> None:
        """Give a connection back: to the turn that has waited longest, else to the free ones."""
        waiting = self._waiting
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


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
