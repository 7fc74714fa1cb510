"""What ``vaelii-llm ask`` draws as a turn runs: the tool calls and the text
as they arrive on stdout, and, on a terminal's stderr, the seconds waited
while the model has said nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import TYPE_CHECKING
from typing import TextIO

if TYPE_CHECKING:
    from vaelii_llm import agent

__all__ = ["AskPrinter", "Waiting", "say_ignored"]


class AskPrinter:
    """Each tool call as it happens, then the text as it arrives."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_line = False

    def __call__(self, event: agent.Event) -> None:
        from vaelii_llm import agent

        if isinstance(event, agent.ToolInputArrived):
            return  # the whole call is printed as it runs
        if isinstance(event, agent.TextArrived):
            self.out.write(event.text)
            self.mid_line = not event.text.endswith("\n")
        else:
            if self.mid_line:
                self.out.write("\n")
                self.mid_line = False
            if isinstance(event, agent.ToolCallStarted):
                self.out.write(f"-> {event.name} {json.dumps(event.input, ensure_ascii=False)}\n")
            elif isinstance(event, agent.ToolsIgnored):
                self.out.flush()
                say_ignored(event)
            else:
                self.out.write(f"   {event.summary}\n")
        self.out.flush()

    def end(self) -> None:
        if self.mid_line:
            self.out.write("\n")
            self.out.flush()


class Waiting:
    """While the model has said nothing (before its first word, and again after
    each tool call), one line on a terminal's stderr, redrawn each second with
    the seconds waited; erased when anything shows, so stdout's lines stay
    whole. A busy server may take minutes to read a long prompt: the line says
    the command is not hung. Nothing is drawn when stderr is not a terminal."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.since = time.monotonic()
        self.waiting = True
        self.drawn = False
        self.ticker: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.err.isatty():
            self.ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1)
            if self.waiting:
                waited = time.monotonic() - self.since
                self.err.write(f"\r\x1b[Kwaiting for the model: {waited:.0f} s")
                self.err.flush()
                self.drawn = True

    def seen(self, event: agent.Event) -> None:
        from vaelii_llm import agent

        self.erase()
        self.waiting = isinstance(event, agent.ToolCallFinished)  # the next turn's wait
        self.since = time.monotonic()

    def erase(self) -> None:
        if self.drawn:
            self.err.write("\r\x1b[K")
            self.err.flush()
            self.drawn = False

    async def stop(self) -> None:
        if self.ticker is not None:
            self.ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.ticker
        self.erase()


def say_ignored(event: agent.Event) -> None:
    """The one line on stderr when the far end ignored the tools (``--json`` too)."""
    from vaelii_llm import agent

    if isinstance(event, agent.ToolsIgnored):
        print(f"tools-ignored: {event.message}", file=sys.stderr, flush=True)
