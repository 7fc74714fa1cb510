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
import contextvars
import select
import warnings
import weakref
from collections.abc import AsyncGenerator
from collections.abc import Awaitable
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

__all__ = ["Gate", "LoopSessions", "create_session", "on_running_loop", "probe_session"]


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
    "can not write request body"). Here every kept connection aiohttp hands
    out (:meth:`connect`, before anything is sent on it) is checked (``poll``
    with no wait): an idle connection has nothing to read, so one that is
    readable (the far end's close, or bytes it had no reason to send) is
    closed, and the next one is taken (another kept one, or a fresh one).
    This is not a retry of the turn: nothing was sent on the closed
    connection. A connection that fails after the request was sent is not
    retried (the far end may have read it); it fails the turn as before. A
    fresh connection is not checked (a TLS far end may send its session
    tickets just after the handshake): a connection is known kept when it
    was handed out before (:attr:`_handed`).

    Some far ends close a connection just after the last byte of a streamed
    answer, though they offered to keep it (llama.cpp's ``llama-server``
    does): a turn taking it at once can find nothing to read yet and be sent
    into the close. So a connection a stream was read on (:func:`_streamed_on`)
    is not used until the far end is known to keep such connections: the
    turn that takes it holds it :data:`_PROVEN_S` (no fresh connection is
    opened beside it, so the pool never holds more than it would), then the
    check decides; one found closed teaches that the far end closes them,
    and from then on a stream's connection is closed when the stream ends,
    never kept; one found open teaches that it keeps them, and they are
    checked as any other from then on. So the wait comes once per far end,
    in its first tenth of a second.

    Only aiohttp's public parts: :meth:`connect` (the connector's own entry
    point, which the session awaits for each request), the
    :class:`aiohttp.Connection` it returns (``protocol``, ``close()``) and
    the protocol's transport (asyncio's). Where ``select.poll`` is missing
    (Windows) nothing is checked.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # One poll set per connector (so per loop), holding one fd at a time.
        self._readable = select.poll() if hasattr(select, "poll") else None
        self._handed: weakref.WeakSet[Any] = weakref.WeakSet()  # each handed out once
        self._streamed: weakref.WeakSet[Any] = weakref.WeakSet()  # not yet proven kept
        self._keeps_streams: bool | None = None  # what the far end does after a stream

    async def connect(
        self,
        req: aiohttp.ClientRequest,
        traces: list[aiohttp.tracing.Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109  (aiohttp's signature)
    ) -> aiohttp.connector.Connection:
        """A connection for ``req`` (aiohttp's), a kept one checked first (see
        the class docstring); the one a stream opens on is told to the
        stream (:data:`_opening`)."""
        readable = self._readable
        while True:
            connection = await super().connect(req, traces, timeout)
            proto = connection.protocol
            if readable is None or proto is None:
                break
            handed = self._handed
            if proto not in handed:  # a fresh connection
                handed.add(proto)
                break
            way = self._verdict(proto, readable, held=False)
            if way == _HOLD:
                try:
                    await asyncio.sleep(_PROVEN_S)
                except BaseException:
                    connection.close()
                    raise
                way = self._verdict(proto, readable, held=True)
            if way == _USE:
                break
            connection.close()  # closed, not kept: aiohttp takes the next one
        opening = _opening.get()
        if opening is not None:
            opening.append(proto)
        return connection

    def streamed(self, protocol: Any) -> None:
        """A stream is read on ``protocol``'s connection (see the class docstring)."""
        keeps = self._keeps_streams
        if keeps:
            return
        self._streamed.add(protocol)  # and, kept already (the body came whole), held at a take
        if keeps is False:
            protocol.force_close()  # closed, not kept, once the stream ends

    def _verdict(self, proto: Any, readable: Any, *, held: bool) -> int:
        """What becomes of a kept connection just taken: used, closed, or
        held (a stream's, its far end not yet known to keep it)."""
        said = _has_input(proto, readable)
        streamed = self._streamed
        if proto not in streamed:
            return _CLOSE if said else _USE  # None: cannot tell, aiohttp said connected
        if said is not False or self._keeps_streams is False:
            self._keeps_streams = False  # it closes what it offered to keep
            return _CLOSE
        if not held:
            return _HOLD
        self._keeps_streams = True
        streamed.clear()
        return _USE


_USE: Final = 0
_CLOSE: Final = 1
_HOLD: Final = 2

_PROVEN_S: Final = 0.1
"""How long a connection a stream was read on is held, idle, before it is
used while its far end is not yet known to keep such connections: a far end
that closes one does so just after the stream's last byte, so a connection
still open this long after is one it keeps."""

_opening: Final[contextvars.ContextVar[list[Any] | None]] = contextvars.ContextVar(
    "vaelii_llm_opening", default=None
)
"""Set (to an empty list) while a stream is being opened, in the task that
opens it: :meth:`_FreshConnector.connect` appends the connection it hands
out, so the stream can name it once its head says it is one
(:func:`_streamed_on`), even when its whole body came with the head and
aiohttp has let the connection go already."""


def _streamed_on(session: aiohttp.ClientSession, opened: list[Any]) -> None:
    """Tell ``session``'s connector that a stream is read on the connection it
    was opened on (``opened``, filled while :data:`_opening` held it; see
    :class:`_FreshConnector`; a caller's own session is not told)."""
    connector = session.connector
    if opened and type(connector) is _FreshConnector and connector._keeps_streams is not True:
        connector.streamed(opened[-1])


def _has_input(proto: Any, readable: Any) -> bool | None:
    """Whether a kept connection just taken has anything to read (no wait):
    True too when its transport is closing or gone; None when it has no
    socket to ask."""
    transport = proto.transport
    if transport is None or transport.is_closing():
        return True
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
    without waiting on that loop (the wait aiohttp's ``close`` starts there
    runs if that loop runs again), and the session marked closed."""
    connector = session.connector
    session.detach()
    if connector is not None and not connector.closed:
        with suppress(Exception):
            _started(connector.close())


def _started(closing: Awaitable[None]) -> None:
    """Take one step of ``closing`` here (aiohttp's connector ``close``
    closes every connection in that step), without waiting for the rest."""
    step = closing.__await__()
    with suppress(StopIteration):
        step.send(None)
    step.close()


def on_running_loop(session: aiohttp.ClientSession) -> bool:
    """Whether a caller's ``session`` belongs to the running event loop.

    aiohttp names a session's loop only through its deprecated public
    ``loop`` property: read once per session (its warning kept quiet) and
    remembered, so a turn costs one lookup."""
    loop = _session_loops.get(session)
    if loop is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = _session_loops[session] = session.loop
    return loop is asyncio.get_running_loop()


_session_loops: Final[
    weakref.WeakKeyDictionary[aiohttp.ClientSession, asyncio.AbstractEventLoop]
] = weakref.WeakKeyDictionary()


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
