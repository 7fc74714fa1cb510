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
from typing import Final

from vaelii_llm._protocol import StreamItem

__all__ = ["Hold", "Stream"]


class Hold:
    """What a stream's closer reaches from another task: the task reading it
    now, whether a closer ended it, and the one end every closer waits for.

    The generator calls :meth:`reading` each time it is resumed (its start,
    then after each item), so a stream read by one task, then another, is
    closed in whichever task reads it when the close comes; it also notes how
    many cancellations that task already held, so a cancellation of the
    reader's own, requested in the same instant as the close, is told apart
    from the closer's and delivered (:meth:`take_back`).
    """

    __slots__ = ("_base", "_ending", "closed", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.closed = False
        self._ending: asyncio.Event | None = None
        self._base = 0

    def reading(self) -> None:
        """The generator runs again, in the current task: it is the reader now."""
        task = self.task = _current_task()
        if task is not None:
            self._base = task.cancelling()

    def take_back(self) -> bool:
        """Take back the closer's cancellation of the reader (in its task);
        whether another was requested since the reader resumed (it must
        propagate: every cancellation is delivered)."""
        assert self.task is not None
        return self.task.uncancel() > self._base

    def ended(self) -> None:
        """The generator is over: every closer waiting returns."""
        ending = self._ending
        if ending is not None:
            ending.set()


_current_task: Final = asyncio.current_task


class Stream(AsyncGenerator[StreamItem, None]):
    """What a backend's ``stream`` returns (the HTTP skeleton's does): the
    turn's async generator, which any task may close.

    Closed between items (by its reader or any task), it ends as an async
    generator does. Closed by another task while its reader waits inside it
    (for a connection, the head, or the next bytes), the wait ends at once:
    the response is let go (its connection closed, the half-read body never
    handed on), the reader's loop ends with no further item, and ``aclose``
    returns once that is done. The reader is whichever task reads it then
    (one task may read the first items, another the rest); several tasks
    closing it at once all return at that one end. Cancelling the reader's
    task instead ends the turn the same way, the cancellation reaching the
    reader, also when a close comes in the same instant. Items pass straight
    through: reading costs what the generator costs.
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
        ending = hold._ending
        if ending is not None:  # a close is under way or over: its end is this one's
            await ending.wait()
            return
        ending = hold._ending = asyncio.Event()
        task = hold.task
        if (
            not self._items.ag_running  # type: ignore[attr-defined]
            or task is None
            or task is _current_task()
            or task.done()
        ):
            try:
                await self._items.aclose()
            finally:
                ending.set()
            return
        # A task waits inside the generator now: end its wait, and the generator.
        hold.closed = True
        task.cancel()
        await ending.wait()

    def around(
        self,
        wrap: Callable[[AsyncGenerator[StreamItem, None], Hold], AsyncGenerator[StreamItem, None]],
    ) -> Stream:
        """The same turn read through ``wrap`` (a generator over its items,
        told of the hold, so it can tell a close from another task), and
        still closable from any task: how telemetry wraps a stream."""
        return Stream(wrap(self._items, self._hold), self._hold)
