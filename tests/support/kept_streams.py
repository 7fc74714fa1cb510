"""A provider's pool, checked: nothing checked out (:func:`checked_in`), and
its far end known to keep a stream's connection (:func:`proven`, #58).

Until a far end is seen to keep the connection a stream was read on, that
connection is not handed to the next turn while it is young (``_FreshConnector``):
some far ends close it just after the stream's last byte. A test that counts
connections reused from one stream to the next first runs :func:`proven`.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm._transport.sessions import _PROVEN_S

__all__ = ["checked_in", "proven"]


def checked_in(provider: Any) -> None:
    """No connection checked out of the provider's pool: its gate whole, its
    connector holding none (idle ones kept for reuse are not checked out),
    no body being read."""
    gate = provider._sessions.gate()
    assert gate is not None
    assert gate.taken == 0
    session = provider._sessions.current()
    assert session is not None
    assert session.connector is not None
    assert not session.connector._acquired
    assert not provider._inflight


async def proven(provider: Any, request: Request | None = None) -> None:
    """Two streams, the second once the first's connection has stayed open
    long enough to prove it kept (and taking it): from then on a stream's
    connection goes to the next turn at once."""
    request = request or Request(
        messages=[Message(role="user", content="hi")], max_tokens=8, timeout_ms=10_000
    )
    for n in range(2):
        async with aclosing(provider.stream(request)) as items:
            async for _ in items:
                pass
        if not n:
            await asyncio.sleep(_PROVEN_S)  # the age that proves it, not a wait for an event
    assert provider._sessions.current().connector._keeps_streams is True
