"""A stream any task may close: the turn's async generator, and the hold its
closer reaches the reading task through.

An async generator can be closed only by the task iterating it, and only
between items: one closed from elsewhere while its reader waits inside it
raises RuntimeError. A turn's stream is often read by one task and given up
by another (a web handler whose client left, a timeout around the reader), so
:class:`Stream` ends the reader's wait instead: the reading task is
cancelled, the generator takes that cancellation back and ends quietly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from collections.abc import Callable
from collections.abc import Coroutine
from typing import Any

from vaelii_llm._protocol import StreamItem

__all__ = ["Hold", "Stream"]


class Hold:
    """What a stream's closer reaches from another task: the task reading it,
    whether the closer ended it, and the closer's wait for its end."""

    __slots__ = ("_cancelling", "_done", "closed", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.closed = False
        self._done: asyncio.Event | None = None
        self._cancelling = 0

    def close(self) -> asyncio.Event:
        """End the reader's wait: its task is cancelled, the pump takes that
        cancellation back and ends quietly. The event is set at its end."""
        task = self.task
        assert task is not None
        self.closed = True
        self._cancelling = task.cancelling()
        done = self._done = asyncio.Event()
        task.cancel()
        return done

    def uncancel(self) -> bool:
        """Take back the closer's cancellation; whether another is pending."""
        assert self.task is not None
        return self.task.uncancel() > self._cancelling

    def ended(self) -> None:
        if self._done is not None:
            self._done.set()


class Stream(AsyncGenerator[StreamItem, None]):
    """What a backend's ``stream`` returns (the HTTP skeleton's does): the
    turn's async generator, which any task may close.

    Closed between items (by its reader or any task), it ends as an async
    generator does. Closed by another task while its reader waits inside it
    (for a connection, the head, or the next bytes), the wait ends at once:
    the response is let go (its connection closed, the half-read body never
    handed on), the reader's loop ends with no further item, and ``aclose``
    returns once that is done. Cancelling the reader's task instead ends the
    turn the same way, the cancellation reaching the reader. Items pass
    straight through: reading costs what the generator costs.
    """

    __slots__ = ("_hold", "_items")

    def __init__(self, items: AsyncGenerator[StreamItem, None], hold: Hold) -> None:
        self._items = items
        self._hold = hold

    def __aiter__(self) -> Stream:
        return self

    def __anext__(self) -> Coroutine[Any, Any, StreamItem]:
        return self._items.__anext__()

    def asend(self, value: None) -> Coroutine[Any, Any, StreamItem]:
        return self._items.asend(value)

    def athrow(self, *args: Any) -> Coroutine[Any, Any, StreamItem]:
        return self._items.athrow(*args)

    async def aclose(self) -> None:
        hold = self._hold
        if (
            not self._items.ag_running  # type: ignore[attr-defined]
            or hold.task is None
            or hold.task is asyncio.current_task()
        ):
            await self._items.aclose()
            return
        await hold.close().wait()

    def around(
        self,
        wrap: Callable[[AsyncGenerator[StreamItem, None], Hold], AsyncGenerator[StreamItem, None]],
    ) -> Stream:
        """The same turn read through ``wrap`` (a generator over its items,
        told of the hold, so it can tell a close from another task), and
        still closable from any task: how telemetry wraps a stream."""
        return Stream(wrap(self._items, self._hold), self._hold)
