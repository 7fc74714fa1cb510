"""Deadlines on one loop timer: :func:`timeout_at`, as ``asyncio.timeout_at`` behaves.

Every turn reads its headers and its body under its deadline. With
``asyncio.timeout_at`` each of those blocks schedules a timer of its own on
the loop and cancels it on the way out: a ``TimerHandle`` made, pushed on the
loop's heap, cancelled and later swept off it. On a small turn that is about
a tenth of the client's work (9 µs of the 87 µs of CPU a small Ollama turn
took at concurrency 32, against the benchmark's loopback server; 4.4 µs
alone, where this module's block takes 2.1 µs). Here the blocks running on a
loop share one loop timer, armed for the earliest deadline among them: a
block's entry is a push on a heap of plain tuples, its exit a flag, and the
loop timer moves only when a block with an earlier deadline enters.

What a block sees is what ``asyncio.timeout_at`` gives: at its deadline its
task is cancelled; the ``CancelledError`` that ends the block leaves it as
``TimeoutError`` (``__cause__`` the cancellation), and :meth:`Timeout.expired`
says so; a cancellation from elsewhere propagates untouched, also when the
deadline passes at the same moment (``Task.cancelling`` counts the requests).
A deadline already past cancels at the loop's next step. Unlike asyncio's it
is a plain (synchronous) context manager: entering and leaving await nothing.

An exited block's entry leaves the heap at once when it is on top (with any
exited ones under it: the earliest deadline, a drain's short bound, often
ends first); the others stay until the heap is more than half such entries,
then it is rebuilt from the live ones (amortised constant per block); when
no block is live the heap is emptied and the loop timer cancelled, so an
idle loop holds no timer of ours, and nothing here keeps a loop alive.
A deadline is held inside ``±_FAR`` and NaN is refused
(``ValueError``), so no value one block carries can stop another's.
A block rescheduled later (:meth:`Timeout.reschedule`) only has its
deadline moved: its one entry stays where it was, and when the loop timer
reaches it the entry goes back on the heap at the block's deadline then:
a move costs one store, and the loop wakes only when an entry comes due,
never once per move.
"""

from __future__ import annotations

import asyncio
import heapq
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Final

__all__ = ["alarm_at", "timeout_at"]

_ENTERED: Final = 1
_EXPIRED: Final = 2
_EXITED: Final = 3

_current_task: Final = asyncio.current_task
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_running_loop: Final = asyncio.get_running_loop

_COMPACT_AT: Final = 64
"""A heap shorter than this is never rebuilt: sweeping it would cost more than it holds."""


_FAR: Final = 1e15
"""The farthest a deadline is held from the clock's zero (seconds: tens of
millions of years): an infinite or 400-digit one is held here, so every entry
on the shared heap is a float every other entry orders against, and the loop
timer armed for it is one the loop can compute a wait for."""


def _bounded(when: float) -> float:
    """A deadline outside ``±_FAR``, held at the nearer end; NaN is refused:
    it orders against nothing, and on the shared heap it would stop every
    other block's deadline on the loop."""
    if when != when:
        raise ValueError("a deadline is a point on the loop's clock, not NaN")
    return _FAR if when > 0 else -_FAR


class Timeout:
    """One block under a deadline (see the module docstring); made by :func:`timeout_at`."""

    __slots__ = ("_cancelling", "_state", "_task", "_watch", "when")

    _task: asyncio.Task[object]  # set on entering, as are the two below
    _cancelling: int
    _watch: _Watch

    def __init__(self, when: float) -> None:
        self.when = when if -_FAR <= when <= _FAR else _bounded(when)
        self._state = 0

    def expired(self) -> bool:
        """Whether the deadline passed while the block ran (its task was cancelled for it)."""
        return self._state == _EXPIRED

    def __enter__(self) -> Timeout:
        if self._state:
            raise RuntimeError("a Timeout is entered once")
        task = _current_task()
        if task is None:
            raise RuntimeError("timeout_at() must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._state = _ENTERED
        watch = self._watch = _watch(_running_loop())
        watch.add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state == _ENTERED:
            self._state = _EXITED
            self._watch.left()
            return
        # Expired: the cancellation was ours unless another is still pending.
        if (
            self._task.uncancel() <= self._cancelling
            and exc_type is not None
            and issubclass(exc_type, asyncio.CancelledError)
        ):
            raise TimeoutError("the deadline passed") from exc

    def reschedule(self, when: float) -> None:
        """Move a running block's deadline later (a stall bound after content
        arrived): one store; its heap entry is moved when the loop timer
        reaches it. A block no longer running, or an earlier deadline, is
        left as it is."""
        if when > self.when and self._state == _ENTERED:
            self.when = when if when <= _FAR else _bounded(when)

    def _expire(self) -> None:
        """Called at the deadline by the loop's watch, for a block still running."""
        self._state = _EXPIRED
        self._task.cancel()


def timeout_at(when: float) -> Timeout:
    """A block whose task is cancelled at ``when`` (the running loop's clock),
    the cancellation leaving it as ``TimeoutError``: ``with timeout_at(t) as timer:``."""
    return Timeout(when)


class _Watch:
    """One loop's deadlines: a heap of ``(when, id, block)`` and one loop timer
    armed for the earliest entry. Touched only from its loop's thread."""

    __slots__ = ("__weakref__", "_armed", "_handle", "_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timeout]] = []
        self._live = 0
        self._handle: asyncio.TimerHandle | None = None
        self._armed = 0.0

    def add(self, block: Timeout) -> None:
        when = block.when
        _heappush(self._heap, (when, id(block), block))
        self._live += 1
        if self._handle is None or when < self._armed:
            self._arm(when)

    def left(self) -> None:
        """A block exited before its deadline: its entry goes now if on top, else when swept."""
        self._live -= 1
        if not self._live:
            self._heap.clear()
            self._disarm()
            return
        heap = self._heap
        while heap[0][2]._state != _ENTERED:  # leftovers on top go at once (a live block is below)
            _heappop(heap)
        if len(heap) > _COMPACT_AT and len(heap) > 2 * self._live:
            self._heap = [entry for entry in self._heap if entry[2]._state == _ENTERED]
            heapq.heapify(self._heap)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed = when
        self._handle = asyncio.get_running_loop().call_at(when, self._fire)

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        """The loop timer: expire every live block whose deadline has come
        (one rescheduled later goes back on the heap at its deadline now),
        re-arm for the next."""
        self._handle = None
        heap = self._heap
        now = asyncio.get_running_loop().time()
        while heap and (heap[0][0] <= now or heap[0][2]._state != _ENTERED):
            block = _heappop(heap)[2]
            if block._state != _ENTERED:
                continue
            if block.when <= now:
                self._live -= 1
                block._expire()
            else:  # moved later since its entry went on: one entry, at its deadline now
                _heappush(heap, (block.when, id(block), block))
        if heap:
            self._arm(heap[0][0])


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[_Watch]] = (
    weakref.WeakKeyDictionary()
)
"""Each loop's watch, both held weakly: a watch lives while a block holds it
or its timer is armed (the loop's heap holds the timer), and holds its loop
only through that timer, so neither keeps the other alive from here."""


def _nothing() -> None:
    return None


_last: tuple[Callable[[], object], Callable[[], _Watch | None]] = (_nothing, _nothing)
"""The loop last asked for and its watch (weakly): the lookup every block
makes, spared the weak dictionary while one loop runs them all."""


def _watch(loop: asyncio.AbstractEventLoop) -> _Watch:
    global _last
    last_loop, last_watch = _last
    if last_loop() is loop:
        watch = last_watch()
        if watch is not None:
            return watch
    held = _watches.get(loop)
    watch = held() if held is not None else None
    if held is None or watch is None:
        watch = _Watch()
        held = weakref.ref(watch)
        _watches[loop] = held
    _last = (weakref.ref(loop), held)
    return watch


class Alarm:
    """A call at a deadline on the loop's shared timer, for what no task
    waits on (a stream left unread): made by :func:`alarm_at`, called at most
    once, unless :meth:`cancel` comes first."""

    __slots__ = ("_call", "_state", "_watch", "when")

    def __init__(self, when: float, call: Callable[[], object]) -> None:
        self.when = when
        self._call = call
        self._state = _ENTERED
        watch = self._watch = _watch(_running_loop())
        watch.add(self)  # type: ignore[arg-type]  # an entry as a block is one

    def cancel(self) -> None:
        """No call now (one already made, or cancelled, stays so). What the
        call holds is let go at once, though the entry may stay on the heap
        until it is swept."""
        if self._state == _ENTERED:
            self._state = _EXITED
            self._call = _nothing
            self._watch.left()

    def _expire(self) -> None:
        self._state = _EXPIRED
        call, self._call = self._call, _nothing
        call()


def alarm_at(when: float, call: Callable[[], object]) -> Alarm:
    """``call()`` at ``when`` (the running loop's clock) on the shared loop
    timer; the returned :class:`Alarm`'s ``cancel`` stops it."""
    return Alarm(when, call)
