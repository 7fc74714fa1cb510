"""``until``: the suite's one polling wait, for a condition no event announces."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

EVERY_S = 0.005
"""How often the condition is read again."""

POLLS = 4000
"""Without a task to watch, the reads before the test fails (about 20 s)."""


async def until(check: Callable[[], bool], task: asyncio.Task[Any] | None = None) -> None:
    """Return once ``check()`` holds.

    With ``task`` (the work that makes it hold), the wait is bound by that
    task, not by a time a loaded machine could overrun: the task ending first
    fails the test. Without one, the test fails after :data:`POLLS` reads.
    """
    polls = 0
    while not check():
        if task is not None:
            assert not task.done(), task
        elif polls == POLLS:
            raise AssertionError("the condition never held")
        polls += 1
        await asyncio.sleep(EVERY_S)
