"""The one transport: client sessions, whole-turn deadlines and typed failures, on aiohttp.

Every request of every HTTP backend, turns and probes, is made by
:func:`~vaelii_llm._transport.send.request_json` (a whole body, decoded) or
:func:`~vaelii_llm._transport.send.open_stream` (the body handed over as it
arrives). This package parses no vendor format: a backend pumps its bytes into
a :mod:`vaelii_llm._wire` decoder or through
:func:`~vaelii_llm._transport.boundary.decode_json` with its own typed decoder.
Its modules, one job each:

- :mod:`~vaelii_llm._transport.settings`: what a request names and carries:
  the far end (:class:`~vaelii_llm._transport.settings.Endpoint`), the turn's
  :class:`~vaelii_llm._transport.settings.Deadline`, checked headers, and the
  :class:`~vaelii_llm._transport.settings.Network` (proxy, TLS, connection
  bound) a provider's sessions are made with;
- :mod:`~vaelii_llm._transport.sessions`: the client sessions, one per event
  loop, and the :class:`~vaelii_llm._transport.sessions.Gate` a turn takes a
  connection from;
- :mod:`~vaelii_llm._transport.boundary`: the one place a failure becomes a
  typed error (its table), and the one reader of a whole body;
- :mod:`~vaelii_llm._transport.withheld`: the credentials a request sent,
  kept out of every error;
- :mod:`~vaelii_llm._transport.send`: sending, whole or streamed, and ending
  reads (``drain``, ``cut``).

Deadlines. A turn has one absolute
:class:`~vaelii_llm._transport.settings.Deadline`, computed once from its
``timeout_ms``. Waiting for the response headers and every wait for the body
happen under :func:`vaelii_llm._timers.timeout_at` (``asyncio.timeout_at``'s
behaviour on one loop timer shared by every turn), so a far end that drips a
byte a second, or sends SSE pings forever, ends in :class:`~vaelii_llm.errors.LLMTimeout` when the
budget is spent. aiohttp's own read timers are off: ``sock_read`` restarts on
every chunk, so it never fires on a drip. Connecting has its own fixed bound,
:data:`~vaelii_llm._transport.settings.CONNECT_TIMEOUT_MS`, whatever the turn
allows: a turn may rightly run for minutes, a connection completes in well
under a second or not at all. A probe passes a short deadline and is bounded
by it, connection included. A deadline may also carry a stall bound (a
request's ``stall_ms``): each wait is then bounded by whichever comes first,
the deadline or the stall bound, which starts when the request is sent and
again whenever the backend says content came; its passing is
:class:`~vaelii_llm.errors.LLMTimeout` with phase ``stall``. It is the same
block on the same loop timer, not a timer or task of its own.

Nothing here retries, backs off, sleeps or reads ``retry-after``; a credential
header never travels to a host the caller did not name. Header values are
never logged or put in a message.
"""

__all__: list[str] = []
