"""The one line every example that asks a model prints first: which backend
answers; :func:`say_if_tools_dropped`, the line every example that offers
tools says when the model will not see them; :class:`Progress`, the line a
long wait shows on a terminal; and :func:`run`, how every example starts, so
Ctrl-C ends each in one line and exit 130, as ``vaelii-llm`` does.

Each example imports :func:`who_answers` from here (``python examples/NAME.py``
puts this directory on the import path), so a new user learns at once whether a
real model answered or the scripted stub did, and why: the reason is
:func:`vaelii_llm.providers.unavailable_reason`'s, the one place that words it
for every registered kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any
from typing import TextIO

from vaelii_llm import Provider
from vaelii_llm import config
from vaelii_llm import providers
from vaelii_llm.providers.stub import StubProvider

INTERRUPTED = 130
"""The exit status on Ctrl-C: the shell's own for SIGINT, as ``vaelii-llm`` exits."""


def run(main: Coroutine[Any, Any, int | None]) -> int:
    """``asyncio.run(main)``, its result as the exit status (None: 0). Ctrl-C
    ends it in one line on stderr, ``interrupted``, and :data:`INTERRUPTED`:
    the running turn is cancelled (its connection closed) and no traceback is
    printed, since nothing failed."""
    try:
        return asyncio.run(main) or 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED


async def who_answers(model: Provider) -> str:
    """One line: the configured backend, or the stub and why no model answers."""
    if not isinstance(model, StubProvider):
        return f"answering: {config.provider_kind()}, a real model"
    why = await providers.unavailable_reason()
    if why is not None:
        return f"answering: the scripted stub, not a model ({why})"
    if os.environ.get("VAELII_LLM_PROVIDER", "").strip():  # the stub, named
        return "answering: the scripted stub, not a model (named as the provider)"
    # the stub by default: the kinds and their switches are the command's to list
    return (
        "answering: the scripted stub, not a model (nothing is configured); "
        "`vaelii-llm status` says what to set"
    )


async def say_if_tools_dropped(model: Provider) -> None:
    """Say once on stderr, as ``vaelii-llm ask`` does (``no-tools: ...``), when
    the configured server would drop the tools offered (a chat template that
    renders none): the model then answers without the KB, and would seem to
    invent its answer. The stub reads none."""
    if isinstance(model, StubProvider):
        return
    dropped = await providers.tools_dropped()
    if dropped is not None:
        print(f"no-tools: {dropped}", file=sys.stderr, flush=True)


class Progress:
    """While a turn runs, one line on a terminal's stderr, redrawn each second:
    the seconds waited, then the tokens counted as they arrive; erased at the
    end. A busy server can take minutes before its first token, and a silent
    wait reads as a hang. Nothing is drawn when stderr is not a terminal."""

    def __init__(self, err: TextIO | None = None) -> None:
        self.err = sys.stderr if err is None else err  # read now: stderr may be replaced
        self.tokens = 0
        self.since = time.monotonic()
        self.drawn = False
        self.ticker: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Progress:
        if self.err.isatty():
            self.ticker = asyncio.get_running_loop().create_task(self._tick())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.ticker is not None:
            self.ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.ticker
        if self.drawn:
            self.err.write("\r\x1b[K")
            self.err.flush()

    def token(self) -> None:
        """One more piece of the answer arrived."""
        self.tokens += 1

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1)
            waited = time.monotonic() - self.since
            line = (
                f"the model is answering: {waited:.0f} s, {self.tokens} token(s) in"
                if self.tokens
                else f"waiting for the model: {waited:.0f} s"
            )
            self.err.write(f"\r\x1b[K{line}")
            self.err.flush()
            self.drawn = True
